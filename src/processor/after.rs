//! After the run: the steps that see every message's outcome before the report is made.
//!
//! ```text
//! records ──► keep (Received per record) ──► plan ──► run ──► Finished ──► step 1 ──► step 2 ──► report
//!            what the steps need, taken                      outcomes +   each may change outcomes
//!            before the records move into the plan           what was kept, and call out, inside
//!                                                            the batch's time budget
//! ```
//!
//! The built-in steps are the failure destination (`failure_destination.rs`) and the
//! redelivery (`redelivery.rs`), both feature `sqs`; a processor without steps keeps nothing
//! and runs nothing here.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::claim::Lease;
use crate::deadline::Budget;
use crate::outcome::ItemReport;
use crate::record::Record;

/// A step that runs after a batch, once every message has its outcome and before the report
/// (and so the partial batch response) is made: it may change outcomes, and call out to other
/// services, inside the invocation's time budget. Register one with
/// [`ProcessorBuilder::after_batch`](crate::ProcessorBuilder::after_batch).
///
/// The processor's own steps are of this kind: the
/// [`FailureDestination`](crate::FailureDestination) (feature `sqs`) sends failed messages to
/// a failure queue and reports them handled, and the [`Redelivery`](crate::Redelivery)
/// (feature `sqs`) gives each message reported for retry its own visibility timeout. They run
/// in that order, with the steps registered by `after_batch` between them (in the order they
/// were registered): the failure destination settles which messages are still reported for
/// retry, and the redelivery sees the outcomes the report will carry.
///
/// Two things shape the trait:
///
/// * **The records are gone by then.** They move into the batch's plan, and their bodies into
///   the handler's messages. What a step needs of each record is kept before the run, as a
///   [`Received`]: its receipt handle, receive count and group always, and its body only when
///   some step asks for it ([`keeps_body`](Self::keeps_body)), as a body can be large (a
///   Lambda batch is at most 6 MB).
/// * **The answer must still go out in time.** A step runs inside the same time budget as the
///   messages: race every call out against it with [`Finished::bounded`] (or give
///   `Finished::hard_stop` to a client that takes a deadline). When the budget runs out the
///   call is dropped where it stands and the batch is answered; a step that cannot finish must
///   leave the outcomes as they were, so a message is at worst reported for retry, never lost.
///
/// A step is a value, shared by the processor's clones: keep its state behind `Arc`s.
///
/// # Example
///
/// A step that counts the messages reported for retry, per batch:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use futures::future::BoxFuture;
/// use sqs_claim::processor::{AfterBatch, Finished};
/// use sqs_claim::{MemoryStore, Message, Processor};
///
/// #[derive(Debug, Default)]
/// struct CountRetries(AtomicUsize);
///
/// impl AfterBatch for CountRetries {
///     fn after<'a>(&'a self, batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
///         let retried = batch
///             .items()
///             .iter()
///             .filter(|item| !item.outcome.is_success())
///             .count();
///         self.0.fetch_add(retried, Ordering::Relaxed);
///         // Nothing to await: a ready future. A step that calls out would race the call
///         // with `batch.bounded(call).await`.
///         Box::pin(async {})
///     }
/// }
///
/// let retries = Arc::new(CountRetries::default());
/// let handler = tower::service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
/// let processor = Processor::builder(MemoryStore::new(), handler)
///     .after_batch(Arc::clone(&retries))
///     .build();
/// # let _ = processor;
/// ```
pub trait AfterBatch: fmt::Debug + Send + Sync + 'static {
    /// Whether this step needs the body of a record received `receive_count` times
    /// (`ApproximateReceiveCount`, when the record has it): its body is then copied before
    /// the run and is [`Received::body`] after it. Default: no body.
    fn keeps_body(&self, receive_count: Option<u32>) -> bool {
        let _ = receive_count;
        false
    }

    /// Runs after the batch, on its outcomes. Returns a boxed future so that steps can be held
    /// as a list of trait objects (and so the step's future, large when it holds an SDK call,
    /// is not inlined into every invocation's future).
    fn after<'a>(&'a self, batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()>;
}

impl<T: AfterBatch + ?Sized> AfterBatch for Arc<T> {
    fn keeps_body(&self, receive_count: Option<u32>) -> bool {
        (**self).keeps_body(receive_count)
    }

    fn after<'a>(&'a self, batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
        (**self).after(batch)
    }
}

/// What an [`AfterBatch`] step needs of one record, kept before the run (see the trait's
/// docs).
#[derive(Clone, PartialEq, Eq)]
pub struct Received {
    pub(crate) receipt_handle: Option<String>,
    pub(crate) receive_count: Option<u32>,
    pub(crate) group_id: Option<String>,
    pub(crate) body: Option<String>,
    /// Its message attributes, by name, kept with its body (the failure destination sends
    /// them with the copy).
    pub(crate) attributes: Vec<(String, aws_lambda_events::sqs::SqsMessageAttribute)>,
    /// The S3 object of its payload, set after the run when its completion committed (the
    /// S3 cleanup deletes it).
    #[cfg(feature = "s3")]
    pub(crate) object: Option<crate::large::ObjectRef>,
}

impl Received {
    fn of(record: &Record, keep_body: impl Fn(Option<u32>) -> bool) -> Self {
        let group_id = record.group.clone();
        let record = &record.message;
        let receive_count = record
            .attributes
            .get("ApproximateReceiveCount")
            .and_then(|c| c.parse().ok());
        let keep = keep_body(receive_count);
        let mut attributes: Vec<(String, aws_lambda_events::sqs::SqsMessageAttribute)> = if keep {
            record
                .message_attributes
                .iter()
                .map(|(n, a)| (n.clone(), a.clone()))
                .collect()
        } else {
            Vec::new()
        };
        // By name: the event's map has no order of its own.
        attributes.sort_by(|a, b| a.0.cmp(&b.0));
        Received {
            receipt_handle: record.receipt_handle.clone().filter(|h| !h.is_empty()),
            receive_count,
            group_id,
            body: keep.then(|| record.body.clone().unwrap_or_default()),
            attributes,
            #[cfg(feature = "s3")]
            object: None,
        }
    }

    /// The record's receipt handle, if it has a non-empty one: what changes its visibility.
    pub fn receipt_handle(&self) -> Option<&str> {
        self.receipt_handle.as_deref()
    }

    /// Its `ApproximateReceiveCount`, if it has one that reads as a number.
    pub fn receive_count(&self) -> Option<u32> {
        self.receive_count
    }

    /// Its group: the `MessageGroupId` (FIFO queues, fair queues); a stream record's shard or
    /// topic-partition.
    pub fn group_id(&self) -> Option<&str> {
        self.group_id.as_deref()
    }

    /// Its body (empty if the record had none), when a step asked for it
    /// ([`AfterBatch::keeps_body`]).
    pub fn body(&self) -> Option<&str> {
        self.body.as_deref()
    }

    /// The names of its message attributes, in name order, kept with its body (none when the
    /// body was not kept).
    pub fn attribute_names(&self) -> impl Iterator<Item = &str> {
        self.attributes.iter().map(|(n, _)| n.as_str())
    }
}

// By hand: the body never goes into `Debug` output.
impl fmt::Debug for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("receipt_handle", &self.receipt_handle.is_some())
            .field("receive_count", &self.receive_count)
            .field("group_id", &self.group_id)
            .field("body_len", &self.body.as_ref().map(String::len))
            .field("attributes", &self.attributes.len())
            .finish()
    }
}

/// A batch whose messages all have their outcome, as the [`AfterBatch`] steps see it: the
/// outcomes (which a step may change), what was kept of each record, and the time budget.
pub struct Finished<'b> {
    items: Vec<ItemReport>,
    received: Vec<Received>,
    source_arn: Option<&'b str>,
    started: SystemTime,
    #[cfg_attr(not(feature = "sqs"), allow(dead_code))] // read by the SQS steps
    lease: Lease,
    budget: &'b Budget,
    /// What the built-in steps did, for the batch's log line and metrics.
    pub(super) counts: AfterCounts,
}

/// What the built-in steps did to a batch.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AfterCounts {
    /// Sent to the failure destination before their last allowed receive.
    pub(super) dead_lettered_at_once: usize,
    /// Visibility changes SQS confirmed.
    pub(super) visibility_changed: usize,
}

impl fmt::Debug for Finished<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Finished")
            .field("items", &self.items.len())
            .field("source_arn", &self.source_arn)
            .field("started", &self.started)
            .field("budget", self.budget)
            .finish_non_exhaustive()
    }
}

impl Finished<'_> {
    /// Every message's outcome, in batch order.
    pub fn items(&self) -> &[ItemReport] {
        &self.items
    }

    /// The outcomes, to change: a step that took care of a failed message reports it handled
    /// (the failure destination makes it [`Outcome::DeadLettered`](crate::Outcome::DeadLettered)).
    pub fn items_mut(&mut self) -> &mut [ItemReport] {
        &mut self.items
    }

    /// What was kept of each record, in batch order (beside [`items`](Self::items)).
    pub fn received(&self) -> &[Received] {
        &self.received
    }

    /// The source queue's ARN (the first record's `eventSourceARN`), if the records carry it.
    #[cfg_attr(not(feature = "sqs"), allow(dead_code))] // read by the SQS steps
    pub(crate) fn source_arn(&self) -> Option<&str> {
        self.source_arn
    }

    /// When the batch started, by the processor's clock (before the plan).
    #[cfg_attr(not(feature = "sqs"), allow(dead_code))] // read by the SQS steps
    pub(crate) fn started(&self) -> SystemTime {
        self.started
    }

    /// The time now, by the processor's clock.
    pub fn now(&self) -> SystemTime {
        self.budget.now()
    }

    /// When a claim this invocation kept lapses, reckoned at `now`: its lease under the
    /// processor's lease policy, given the invocation's deadline.
    #[cfg_attr(not(feature = "sqs"), allow(dead_code))] // read by the SQS steps
    pub(crate) fn lease_until(&self, now: SystemTime) -> SystemTime {
        self.lease.lease_until(now, self.budget.deadline())
    }

    /// The instant every step still in flight is cut off so the answer goes out in time
    /// (`None`: the invocation has no deadline).
    #[cfg_attr(not(feature = "sqs"), allow(dead_code))] // read by the SQS steps
    pub(crate) fn hard_stop(&self) -> Option<tokio::time::Instant> {
        self.budget.hard_stop()
    }

    /// Runs `call` until it finishes or the hard stop comes, whichever is first: `None` when
    /// it was cut off (dropped where it stood).
    pub async fn bounded<F: Future>(&self, call: F) -> Option<F::Output> {
        self.budget.bounded(call).await.ok()
    }
}

/// The steps a processor runs after each batch, in their order (see [`AfterBatch`]). Built by
/// the builder: the failure destination first, the steps given to `after_batch` next, the
/// redelivery last.
#[derive(Debug, Clone, Default)]
pub(crate) struct Steps {
    /// Where failures go ([`FailureDestination`](crate::FailureDestination)).
    pub(super) divert: Option<Arc<dyn AfterBatch>>,
    /// The user's steps, in the order they were registered.
    pub(super) custom: Vec<Arc<dyn AfterBatch>>,
    /// The S3 objects of the messages done, deleted (`LargeMessages`, feature `s3`).
    pub(super) cleanup: Option<Arc<dyn AfterBatch>>,
    /// When what is reported for retry comes back ([`Redelivery`](crate::Redelivery)).
    pub(super) settle: Option<Arc<dyn AfterBatch>>,
}

/// What the steps keep of a batch before it runs. `None` inside when there are no steps.
pub(super) struct Kept(Option<(Vec<Received>, SystemTime)>);

impl Kept {
    /// After the run: the S3 object of each message whose completion committed or that was
    /// skipped as a duplicate of a key done (a producer's resend uploaded an object of its
    /// own), for the cleanup. `objects` and `ran` are one per record, in record order.
    #[cfg(feature = "s3")]
    pub(super) fn mark_objects(
        &mut self,
        objects: Vec<Option<crate::large::ObjectRef>>,
        ran: &[super::run::Ran],
    ) {
        let Kept(Some((received, _))) = self else {
            return;
        };
        for ((r, object), ran) in received.iter_mut().zip(objects).zip(ran) {
            if ran.committed || ran.report.outcome == crate::Outcome::Duplicate {
                r.object = object;
            }
        }
    }
}

impl Steps {
    fn iter(&self) -> impl Iterator<Item = &Arc<dyn AfterBatch>> {
        self.divert
            .iter()
            .chain(&self.custom)
            .chain(self.cleanup.as_ref())
            .chain(self.settle.as_ref())
    }

    /// Whether objects offloaded to S3 are deleted after the batch (feature `s3`).
    #[cfg(feature = "s3")]
    pub(super) fn cleans_up(&self) -> bool {
        self.cleanup.is_some()
    }

    /// Whether there is any step.
    pub(super) fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// Before the run: what the steps need of each record, taken at `now`. Nothing (and
    /// nothing copied) without steps.
    pub(super) fn keep(&self, records: &[Record], now: SystemTime) -> Kept {
        if self.is_empty() {
            return Kept(None);
        }
        let keep_body = |count| self.iter().any(|s| s.keeps_body(count));
        Kept(Some((
            records.iter().map(|r| Received::of(r, keep_body)).collect(),
            now,
        )))
    }

    /// After the run: every step in turn, on `items`, inside `budget`.
    pub(super) async fn run(
        &self,
        items: Vec<ItemReport>,
        kept: Kept,
        source_arn: Option<&str>,
        lease: Lease,
        budget: &Budget,
    ) -> (Vec<ItemReport>, AfterCounts) {
        let Kept(Some((received, started))) = kept else {
            return (items, AfterCounts::default());
        };
        let mut batch = Finished {
            items,
            received,
            source_arn,
            started,
            lease,
            budget,
            counts: AfterCounts::default(),
        };
        for step in self.iter() {
            // Every step runs inside the batch's time budget and cannot take the answer down
            // with it: one that is still running at the hard stop is cut off there, and one
            // that panics is logged and passed over, as the metrics sink is. The steps of this
            // crate bound their own calls; a step of yours is held to the same stop.
            let run = std::panic::AssertUnwindSafe(step.after(&mut batch)).catch_unwind();
            match budget.bounded(run).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    tracing::error!(step = ?step, "an after-batch step panicked: passed over");
                }
                Err(_) => {
                    tracing::warn!(step = ?step, "an after-batch step was cut off at the hard stop")
                }
            }
        }
        (batch.items, batch.counts)
    }
}

#[cfg(test)]
pub(super) fn received(receive_count: u32, group_id: Option<&str>) -> Received {
    Received {
        receipt_handle: Some("rh".into()),
        receive_count: Some(receive_count),
        group_id: group_id.map(str::to_owned),
        body: None,
        attributes: Vec::new(),
        #[cfg(feature = "s3")]
        object: None,
    }
}
