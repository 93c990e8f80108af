//! The batch engine: a batch of records in (`record.rs`: an SQS event's, or a stream's as its
//! adapter in `stream/` read it), every record's outcome out, which the source's adapter turns
//! into its partial batch response.
//!
//! ```text
//! records ─► plan (plan.rs) ──► run (run.rs) ──► after the batch (after.rs) ──► report (outcome.rs)
//!            records → owned items:   standard: bounded concurrency, batch order kept
//!            key, fingerprint,        FIFO: one lane per message group, in order
//!            FIFO lanes, leader/copy  each message: claim ─► handler ─► complete / release,
//!                                     every step raced against the time budget (deadline.rs),
//!                                     the steps after the batch too
//! ```
//!
//! | file | what it holds |
//! |------|---------------|
//! | `mod.rs` | [`Processor`]: `process` (an SQS event read into records) and the `tower::Service` the Lambda runtime calls; `process_records`, the engine any source's adapter calls |
//! | `config.rs` | the processor's own policies ([`StoreUnavailable`], [`FifoMode`]) and [`ProcessorBuilder`]; the claim's ([`PayloadCheck`](crate::PayloadCheck), [`Lease`](crate::Lease), [`MissingKey`](crate::MissingKey), the key format) are in [`claim`](crate::claim) |
//! | `plan.rs` | records → owned items, each with what to do: claim it, fail it, or follow the leader copy of its key |
//! | `run.rs` | the standard and FIFO schedulers, and one message's claim steps ([`claim`](crate::claim)) mapped to an [`Outcome`](crate::Outcome) |
//! | `pack.rs` | the packer: a one-shot batch's writes with effects sent several per request where the store packs them (DynamoDB: 100 actions per `TransactWriteItems`), each write answered on its own |
//! | `limit.rs` | the in-flight limit of a standard-queue batch, adapted to what the store answers: cut on contention and timeouts, grown back on success (AIMD) |
//! | `after.rs` | after the run: the steps that see every outcome before the report ([`AfterBatch`]), in the builder's order, inside the time budget |
//! | `cleanup.rs` | after the run, feature `s3`: deleting the S3 objects of large messages whose completion committed ([`LargeMessages`](crate::large::LargeMessages)) |
//! | `failure_destination.rs` | the first step after the run: messages that failed on their last allowed receive, or for good (`Permanent`), sent with their reason to a failure queue (feature `sqs`) |
//! | `redelivery.rs` | the last step: each message reported for retry given its own visibility timeout (backoff, the handler's delay, a claim's lease end) with `ChangeMessageVisibilityBatch` (feature `sqs`) |
//!
//! Where a duplicate is detected: when the claim finds the key completed (`claim/attempt.rs`,
//! `Claim::Completed`, judged by the [`PayloadCheck`](crate::PayloadCheck); `run.rs` makes it
//! [`Outcome::Duplicate`](crate::Outcome::Duplicate)), or, for copies inside one batch, at
//! planning (`plan.rs`: a later copy follows the first copy's outcome). Where the deadline cuts
//! work off: `deadline.rs` (`Budget::bounded`), which every step of the claim
//! (`claim/attempt.rs`) races. Where a failure becomes an `itemIdentifier`:
//! [`BatchReport::response`](crate::BatchReport::response) (`outcome.rs`).

mod after;
#[cfg(feature = "s3")]
mod cleanup;
mod config;
#[cfg(feature = "sqs")]
mod failure_destination;
mod limit;
mod offloaded;
mod one_shot;
mod pack;
mod plan;
#[cfg(feature = "sqs")]
mod redelivery;
mod run;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use tower::Service;
use tracing::{Instrument, field, info};

mod handler;
#[cfg(feature = "admin")]
mod record_claim;
#[cfg(feature = "streams")]
pub(crate) mod stream_source;
pub use after::{AfterBatch, Finished, Received};
pub(crate) use config::Config;
pub use config::{FifoMode, ProcessorBuilder, StoreUnavailable};
#[cfg(feature = "sqs")]
pub use failure_destination::{FAILURE_ATTRIBUTE, FailureDestination, Permanent};
pub use handler::Handler;
pub use one_shot::OneShot;
#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub use record_claim::RecordClaim;
#[cfg(feature = "sqs")]
pub use redelivery::Redelivery;

use crate::deadline::Budget;
use crate::message::Message;
use crate::metrics::{BatchMetrics, BatchStats};
use crate::outcome::BatchReport;
use crate::record::Record;
use crate::store::{ClaimStore, Effects};
use crate::{BoxError, Error};
use offloaded::Offloaded;
use plan::Plan;

struct Inner<S, H> {
    store: S,
    handler: H,
    config: Config,
    /// Writes of this process on one item take turns (see `claim/locks.rs`).
    locks: crate::claim::ItemLocks,
    /// How many messages of a standard-queue batch run at once, adapted as they run; made
    /// on first use, at [`Processor::concurrency`].
    limit: std::sync::OnceLock<limit::Limit>,
}

/// The SQS batch processor. Cheap to clone (an `Arc` inside).
///
/// Use it as the Lambda handler (`lambda_runtime::run(processor)`: it is a
/// `tower::Service<LambdaEvent<SqsEvent>>` answering an `SqsBatchResponse`), or call
/// [`Processor::process`] from your own handler.
pub struct Processor<S, H> {
    inner: Arc<Inner<S, H>>,
}

impl<S, H> Clone for Processor<S, H> {
    fn clone(&self) -> Self {
        Processor {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S, H> std::fmt::Debug for Processor<S, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processor")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl<S, H> Processor<S, H>
where
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    /// A processor with every default.
    pub fn new(store: S, handler: H) -> Self {
        Self::builder(store, handler).build()
    }

    /// A builder, to change defaults.
    pub fn builder(store: S, handler: H) -> ProcessorBuilder<S, H> {
        ProcessorBuilder {
            store,
            handler,
            config: Config::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// How many messages of a standard-queue batch run at once: the builder's
    /// [`concurrency`](ProcessorBuilder::concurrency), else what the store carries
    /// ([`Capabilities::max_in_flight`](crate::store::Capabilities::max_in_flight)).
    pub fn concurrency(&self) -> usize {
        self.inner.concurrency()
    }

    /// Whether it runs in one-shot mode ([`Processor::one_shot`]): one write per message,
    /// the claim completed with the handler's effects.
    pub fn is_one_shot(&self) -> bool {
        self.inner.config.one_shot
    }

    /// Processes one invocation's batch and reports every message's outcome.
    ///
    /// With a deadline in the context, it returns by `deadline - answer_reserve` whatever
    /// hangs: every step still in flight then is cut off ([`Outcome::CutOff`](crate::Outcome::CutOff)).
    ///
    /// Fails as a whole (so Lambda redelivers the whole batch) only if a record has no message
    /// id: it could not be named in a partial batch response, and an empty identifier would
    /// fail the batch anyway, less clearly.
    pub async fn process(&self, event: LambdaEvent<SqsEvent>) -> Result<BatchReport, Error> {
        let (payload, context) = event.into_parts();
        let records = payload.records.into_iter().map(Record::sqs).collect();
        self.process_records(records, context).await
    }

    /// Processes one batch of the engine's records, whatever source's adapter read them
    /// ([`Processor::process`] for SQS, the `stream` consumers).
    pub(crate) async fn process_records(
        &self,
        records: Vec<Record>,
        context: lambda_runtime::Context,
    ) -> Result<BatchReport, Error> {
        // The counts are recorded on the span when the batch is done, so a tracing backend
        // (OpenTelemetry, X-Ray) sees them on the batch's own span.
        let span = tracing::info_span!(
            "batch",
            request_id = context.request_id.as_str(),
            // The invocation's own trace (from its Runtime API response), never the
            // process-wide `_X_AMZN_TRACE_ID`, which concurrent invocations overwrite.
            xray_trace_id = context.xray_trace_id.as_deref(),
            records = records.len(),
            fifo = field::Empty,
            processed = field::Empty,
            duplicate = field::Empty,
            held_elsewhere = field::Empty,
            failed = field::Empty,
            not_started = field::Empty,
            cut_off = field::Empty,
        );
        self.process_batch(records, context, &span)
            .instrument(span.clone())
            .await
    }

    /// plan → run → the steps after the batch → report, all inside one time budget.
    async fn process_batch(
        &self,
        records: Vec<Record>,
        context: lambda_runtime::Context,
        span: &tracing::Span,
    ) -> Result<BatchReport, Error> {
        let config = &self.inner.config;
        let namespace = config.namespace.resolve(&context);
        let budget = Budget::new(
            config.clock.clone(),
            context.deadline,
            config.deadline_margin,
            config.answer_reserve,
        );
        let stats = BatchStats::new(config.metrics.is_some());
        // Before the records move into the plan: what the steps after the batch need of them.
        let mut kept = config.after.keep(&records, config.clock.now());
        let source_arn = (config.metrics.is_some() || !config.after.is_empty())
            .then(|| {
                records
                    .iter()
                    .find_map(|r| r.message.event_source_arn.clone())
            })
            .flatten();
        // The payloads offloaded to S3, fetched before the plan reads the keys from them.
        let mut offloaded = Offloaded::fetch(config, &records, &budget).await;
        let plan = Plan::new(
            records,
            config,
            &namespace,
            budget.hard_stop(),
            offloaded.take_payloads(),
        )?;
        let fifo = plan.lanes.is_some();
        let ran = self.inner.run(plan, &budget, &stats).await;
        offloaded.keep_for_cleanup(&mut kept, &ran);
        let items = ran.into_iter().map(|ran| ran.report).collect();
        let (items, after) = config
            .after
            .run(
                items,
                kept,
                source_arn.as_deref(),
                // The lease the claims were taken under on this store.
                config
                    .terms
                    .lease
                    .on_store(self.inner.store.capabilities().extends_leases),
                &budget,
            )
            .await;
        let report = BatchReport::new(items);
        self.report(
            &report,
            span,
            Tally {
                context: &context,
                fifo,
                source_arn: source_arn.as_deref(),
                stats: &stats,
                after,
            },
        );
        Ok(report)
    }

    /// Tells what the batch did: on its span, in one log line, and to the metrics sink.
    fn report(&self, report: &BatchReport, span: &tracing::Span, tally: Tally<'_>) {
        let config = &self.inner.config;
        let Tally {
            context,
            fifo,
            source_arn,
            stats,
            after,
        } = tally;
        let c = report.counts();
        span.record("fifo", fifo);
        span.record("processed", c.processed);
        span.record("duplicate", c.duplicate);
        span.record("held_elsewhere", c.held_elsewhere);
        span.record("failed", c.failed);
        span.record("not_started", c.not_started);
        span.record("cut_off", c.cut_off);
        let (conflicts, retries) = (stats.conflicts(), stats.retries());
        info!(
            records = report.items().len(),
            fifo,
            processed = c.processed,
            duplicate = c.duplicate,
            held_elsewhere = c.held_elsewhere,
            failed = c.failed,
            not_started = c.not_started,
            cut_off = c.cut_off,
            conflicts,
            retries,
            dead_lettered_at_once = after.dead_lettered_at_once,
            visibility_changed = after.visibility_changed,
            "batch done"
        );
        if let Some(sink) = &config.metrics {
            let mut metrics = BatchMetrics::new(
                report,
                config.clock.now(),
                context.request_id.clone(),
                config.namespace.function_name(context).map(str::to_owned),
                source_arn
                    .and_then(crate::metrics::queue_name)
                    .map(str::to_owned),
                fifo,
                stats.take_latencies(),
            );
            metrics.conflicts = conflicts;
            metrics.retries = retries;
            metrics.in_flight_limit = self.inner.in_flight_limit();
            metrics.dead_lettered_at_once = after.dead_lettered_at_once;
            metrics.visibility_changed = after.visibility_changed;
            // Every message already has its outcome: a sink that panics must not turn them
            // into a failed invocation (Lambda would redeliver the whole batch).
            let recorded =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.0.record(&metrics)));
            if recorded.is_err() {
                tracing::error!("the metrics sink panicked; this batch's metrics are lost");
            }
        }
    }
}

/// What a batch's report tells beside the outcomes.
struct Tally<'a> {
    context: &'a lambda_runtime::Context,
    fifo: bool,
    source_arn: Option<&'a str>,
    stats: &'a BatchStats,
    after: after::AfterCounts,
}

impl<S, F> Processor<S, OneShot<F, S::Effect>>
where
    S: ClaimStore,
    F: Fn(&Message) -> Result<Effects<S::Effect>, BoxError> + Send + Sync + 'static,
{
    /// A builder for a processor in one-shot mode: `effects` computes each message's effects
    /// (it cannot await, so it cannot change anything outside the store), then one atomic
    /// write claims the key as completed and commits them
    /// ([`ClaimStore::claim_completed`]): one request per fresh message and one per duplicate
    /// on DynamoDB, one SQL transaction on SQLite and PostgreSQL.
    ///
    /// A duplicate is found by the same write (its condition fails), so the function runs for
    /// duplicates too; a failing write changes nothing. See [`OneShot`].
    ///
    /// ```
    /// use sqs_claim::store::MemoryEffect;
    /// use sqs_claim::{Effects, MemoryStore, Message, Processor};
    ///
    /// let processor = Processor::one_shot(MemoryStore::new(), |msg: &Message| {
    ///     let order: serde_json::Value = msg.json()?;
    ///     let _ = order;
    ///     Ok(Effects::one(MemoryEffect::new(|| {})))
    /// })
    /// .build();
    /// # let _ = processor;
    /// ```
    pub fn one_shot(store: S, effects: F) -> ProcessorBuilder<S, OneShot<F, S::Effect>> {
        ProcessorBuilder {
            store,
            handler: OneShot::new(effects),
            config: Config {
                one_shot: true,
                ..Config::default()
            },
        }
    }
}

impl<S, H> Service<LambdaEvent<SqsEvent>> for Processor<S, H>
where
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    type Response = SqsBatchResponse;
    type Error = lambda_runtime::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<SqsBatchResponse, lambda_runtime::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<SqsEvent>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let report = this.process(event).await?;
            Ok(report.response())
        })
    }
}
