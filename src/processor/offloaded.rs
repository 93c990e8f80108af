//! The batch's large-payload stage: the payloads the SQS/SNS extended clients offloaded to S3
//! (feature `s3`, [`ProcessorBuilder::large_messages`](super::ProcessorBuilder::large_messages)),
//! fetched before the plan reads keys from them; after the run, the objects the cleanup step
//! may delete. Without the feature, or without large messages configured, the stage fetches
//! and keeps nothing, and `process_batch` reads the same either way.

use crate::record::Record;

use super::after::Kept;
use super::config::{Config, Fetched};
use super::run::Ran;
use crate::deadline::Budget;

/// What the stage fetched for one batch.
pub(super) struct Offloaded {
    /// What each record's pointer led to, one per record (empty: nothing was offloaded or the
    /// plan took them).
    fetched: Vec<Option<Fetched>>,
    /// The object of each record, one per record, for the cleanup (empty: no cleanup).
    #[cfg(feature = "s3")]
    objects: Vec<Option<crate::large::ObjectRef>>,
}

impl Offloaded {
    /// Fetches the objects the records point to, within the budget (nothing without large
    /// messages).
    pub(super) async fn fetch(config: &Config, records: &[Record], budget: &Budget) -> Self {
        #[cfg(feature = "s3")]
        if let Some(large) = &config.large {
            let fetched = large.fetch_batch(records, config.envelope, budget).await;
            let objects = if config.after.cleans_up() {
                fetched
                    .iter()
                    .map(|f| match f {
                        Some(Fetched::Payload { object, .. }) => Some(object.clone()),
                        _ => None,
                    })
                    .collect()
            } else {
                Vec::new()
            };
            return Offloaded { fetched, objects };
        }
        let _ = (config, records, budget);
        Offloaded {
            fetched: Vec::new(),
            #[cfg(feature = "s3")]
            objects: Vec::new(),
        }
    }

    /// What each record's pointer led to, for the plan, which takes the texts.
    pub(super) fn take_payloads(&mut self) -> Vec<Option<Fetched>> {
        std::mem::take(&mut self.fetched)
    }

    /// After the run: hands the cleanup step the objects of the messages whose completion
    /// committed or that were skipped as duplicates. `ran` is in record order.
    pub(super) fn keep_for_cleanup(self, kept: &mut Kept, ran: &[Ran]) {
        #[cfg(feature = "s3")]
        if !self.objects.is_empty() {
            kept.mark_objects(self.objects, ran);
        }
        let _ = (kept, ran);
    }
}
