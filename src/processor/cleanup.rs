//! The step after the batch that deletes the S3 objects of large messages once done, or once
//! skipped as a duplicate (feature
//! `s3`; [`LargeMessages::delete_after_completion`](crate::large::LargeMessages)). It lives with
//! the processor's other after-batch steps so that `large` (reading pointers and objects) does
//! not depend on the processor.

use std::collections::HashSet;
use std::fmt;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};

use super::{AfterBatch, Finished};
use crate::large::{FETCH_CONCURRENCY, ObjectRef};
use crate::outcome::Outcome;

/// The step after the batch that deletes the objects of the messages whose completion
/// committed, and of the duplicates skipped ([`LargeMessages::delete_after_completion`]).
pub(crate) struct Cleanup {
    pub(crate) client: aws_sdk_s3::Client,
}

impl fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LargeMessages::cleanup")
    }
}

impl AfterBatch for Cleanup {
    fn after<'a>(&'a self, batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut seen: HashSet<&ObjectRef> = HashSet::new();
            // Only a message whose completion committed, or a duplicate skipped, has its
            // object kept for the step (`Received::object`), and it must still be `Processed`
            // or `Duplicate`: a step before this one may have changed its outcome.
            let objects: Vec<ObjectRef> = batch
                .items()
                .iter()
                .zip(batch.received())
                .filter(|(item, _)| matches!(item.outcome, Outcome::Processed | Outcome::Duplicate))
                .filter_map(|(_, received)| received.object.as_ref())
                .filter(|object| seen.insert(object))
                .cloned()
                .collect();
            if objects.is_empty() {
                return;
            }
            let deletes = stream::iter(objects)
                .map(|object| {
                    let client = self.client.clone();
                    async move {
                        let answer = client
                            .delete_object()
                            .bucket(&object.bucket)
                            .key(&object.key)
                            .send()
                            .await;
                        match answer {
                            Ok(_) => {
                                tracing::debug!(object = %object, "offloaded payload deleted");
                            }
                            Err(e) => tracing::warn!(
                                object = %object,
                                error = %crate::error::Chain(&e),
                                "offloaded payload not deleted; its message is done, the object \
                                 stays"
                            ),
                        }
                    }
                })
                .buffer_unordered(FETCH_CONCURRENCY)
                .collect::<Vec<()>>();
            if batch.bounded(deletes).await.is_none() {
                tracing::warn!("deleting offloaded payloads was cut off by the time budget");
            }
        })
    }
}
