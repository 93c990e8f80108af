//! The batch engine: an SQS event in, a partial batch response out.
//!
//! ```text
//! event ──► records ──► key (key.rs) ──► claim (store) ──► handler ──► complete / release ──► outcome ──► response
//!                                          │ Completed ──► duplicate (skipped, logged)
//!                                          │ HeldElsewhere ──► failure (retried later)
//!                                          └ store down ──► failure (fail closed) or run unclaimed (fail open)
//! ```
//!
//! Standard queues: messages run concurrently (bounded), results are collected by index. FIFO
//! queues (source ARN ending in `.fifo`): one lane per message group, strictly in order inside
//! a lane, lanes concurrent; after a failure the rest of the lane is not started. Copies of one
//! key inside a batch run once: the first copy is the leader, later copies wait for its outcome.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::FutureExt;
use futures::future::join_all;
use futures::stream::{self, StreamExt};
use lambda_runtime::LambdaEvent;
use tokio::sync::watch;
use tower::{Service, ServiceExt};
use tracing::{debug, error, info, warn};

use crate::deadline::{self, Budget, Clock};
use crate::key::{self, KeySource, MissingKey};
use crate::message::Message;
use crate::outcome::{BatchReport, Failure, FailureKind, ItemReport, NotStarted, Outcome};
use crate::store::{Claim, ClaimRequest, ClaimStore, ClaimToken, Effects};
use crate::{BoxError, Error, ErrorKind};

/// What to do when the store cannot be reached to claim a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StoreUnavailable {
    /// Report the message as failed without running the handler (the default): nothing runs
    /// unclaimed, and SQS redelivers after the visibility timeout.
    #[default]
    FailClosed,
    /// Run the handler without a claim. Availability over safety: during the outage, a
    /// redelivered message runs again. Handlers that return effects still fail, as their
    /// effects cannot be committed without the store.
    FailOpen,
}

/// What to do when a key was completed before with a different payload fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PayloadCheck {
    /// Do not fingerprint payloads.
    Off,
    /// Log a warning and skip the message as a duplicate.
    Warn,
    /// Report the message as failed (the default): it is retried, then reaches the DLQ, where a
    /// person can look at the conflicting payload. Same key, other body is a producer bug, and
    /// skipping it silently could drop a payment.
    #[default]
    Fail,
}

/// How a FIFO batch reacts to a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FifoMode {
    /// After a failure, the rest of that message group is not started; other groups go on
    /// (the default).
    #[default]
    PerGroup,
    /// The batch runs one message at a time, in order; after the first failure nothing else
    /// starts (what AWS documents as the safe default).
    WholeBatch,
}

/// Processor settings. Every field has a documented default; see [`ProcessorBuilder`].
#[derive(Debug, Clone)]
pub struct Config {
    key: KeySource,
    namespace: Option<String>,
    missing_key: MissingKey,
    payload_check: PayloadCheck,
    concurrency: usize,
    lease: Duration,
    ttl: Duration,
    deadline_margin: Duration,
    answer_reserve: Duration,
    handler_timeout: Option<Duration>,
    on_store_unavailable: StoreUnavailable,
    fifo: FifoMode,
    completion_retries: u32,
    retry_backoff: Duration,
    clock: Clock,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            key: KeySource::MessageId,
            namespace: None,
            missing_key: MissingKey::Fail,
            payload_check: PayloadCheck::Fail,
            concurrency: 10,
            lease: Duration::from_secs(300),
            ttl: Duration::from_secs(24 * 3600),
            deadline_margin: Duration::from_secs(2),
            answer_reserve: Duration::from_millis(250),
            handler_timeout: None,
            on_store_unavailable: StoreUnavailable::FailClosed,
            fifo: FifoMode::PerGroup,
            completion_retries: 3,
            retry_backoff: Duration::from_millis(50),
            clock: Clock::system(),
        }
    }
}

/// Builds a [`Processor`]. Every setting has a default; call only what you change.
pub struct ProcessorBuilder<S, H> {
    store: S,
    handler: H,
    config: Config,
}

impl<S, H> ProcessorBuilder<S, H> {
    /// Where the idempotency key comes from. Default: [`KeySource::MessageId`].
    pub fn key(mut self, key: KeySource) -> Self {
        self.config.key = key;
        self
    }

    /// The key namespace (`namespace#key`). Default: the `AWS_LAMBDA_FUNCTION_NAME`
    /// environment variable, else the function name in the invocation context, else
    /// `sqs-claim`. Set it explicitly for payments: renaming a function must not reset
    /// deduplication, and two consumers of one table must use different namespaces.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.config.namespace = Some(namespace.into());
        self
    }

    /// What to do with a message that lacks the key. Default: [`MissingKey::Fail`].
    pub fn missing_key(mut self, policy: MissingKey) -> Self {
        self.config.missing_key = policy;
        self
    }

    /// Payload fingerprint check. Default: [`PayloadCheck::Fail`].
    pub fn payload_check(mut self, check: PayloadCheck) -> Self {
        self.config.payload_check = check;
        self
    }

    /// How many messages of a standard-queue batch run at once. Default: 10. Values below 1
    /// are treated as 1.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n.max(1);
        self
    }

    /// How long a claim is leased when the invocation has no deadline (`Context::deadline` is
    /// 0, as outside Lambda). Inside Lambda, the lease is the invocation's deadline. Default:
    /// 5 minutes. Values above 100 years are treated as 100 years.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// How long a completed key is remembered (the TTL). Default: 24 hours. Keep it longer
    /// than the queue's redelivery window: visibility timeout × `maxReceiveCount`, and longer
    /// still if producers can resend hours later. Values above 100 years are treated as 100
    /// years.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// No message starts later than this before the deadline. Default: 2 seconds. Set it
    /// above your slowest handler's duration so a started message can finish.
    pub fn deadline_margin(mut self, margin: Duration) -> Self {
        self.config.deadline_margin = margin;
        self
    }

    /// How long before the deadline every step still in flight is cut off, so the answer can
    /// be sent in time. Default: 250 ms. Every step (claim, handler, completion and its
    /// retries, release) races `deadline - answer_reserve`; a message cut off is reported
    /// [`Outcome::CutOff`](crate::Outcome::CutOff).
    pub fn answer_reserve(mut self, reserve: Duration) -> Self {
        self.config.answer_reserve = reserve;
        self
    }

    /// The longest one handler call may take. Default: none (the invocation's time budget
    /// still bounds it). A handler that runs longer is cancelled and its message fails with
    /// [`FailureKind::HandlerTimeout`](crate::FailureKind::HandlerTimeout); its claim is kept
    /// until its lease lapses, as the call may have reached an external service.
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.config.handler_timeout = Some(timeout);
        self
    }

    /// What to do when the store is unreachable at claim time. Default:
    /// [`StoreUnavailable::FailClosed`].
    pub fn on_store_unavailable(mut self, policy: StoreUnavailable) -> Self {
        self.config.on_store_unavailable = policy;
        self
    }

    /// FIFO failure mode. Default: [`FifoMode::PerGroup`].
    pub fn fifo(mut self, mode: FifoMode) -> Self {
        self.config.fifo = mode;
        self
    }

    /// Retries of a completion that failed with a transient error, and the first backoff
    /// (doubled each time). Default: 3 retries from 50 ms.
    pub fn completion_retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.config.completion_retries = retries;
        self.config.retry_backoff = backoff;
        self
    }

    /// The clock. Default: [`Clock::system`]. Tests use [`Clock::tokio`] with paused time.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.config.clock = clock;
        self
    }

    /// Finishes the processor.
    pub fn build(self) -> Processor<S, H> {
        let mut config = self.config;
        if config.namespace.is_none() {
            config.namespace = std::env::var("AWS_LAMBDA_FUNCTION_NAME")
                .ok()
                .filter(|s| !s.is_empty());
        }
        Processor {
            inner: Arc::new(Inner {
                store: self.store,
                handler: self.handler,
                config,
            }),
        }
    }
}

struct Inner<S, H> {
    store: S,
    handler: H,
    config: Config,
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

/// One record, prepared: its message (taken when it runs) and where its key came from.
struct Slot {
    id: String,
    key: Option<String>,
    fingerprint: Option<String>,
    /// Set when the key could not be derived and policy says fail.
    key_failure: Option<Failure>,
    group: Option<String>,
    message: std::sync::Mutex<Option<Message>>,
    /// For the first copy of a key that appears again later in the batch.
    publish: Option<watch::Sender<Option<Outcome>>>,
    /// For later copies: the leader, named as `ID (#index)` (the id is what reports and logs
    /// show; the index tells copies of one id apart), and its outcome.
    follow: Option<(String, watch::Receiver<Option<Outcome>>)>,
    /// For later copies: whether the body differs from the leader's (same key, other payload).
    payload_differs: bool,
}

impl<S, H> Processor<S, H>
where
    S: ClaimStore,
    H: Service<Message> + Clone + Send + Sync + 'static,
    H::Future: Send + 'static,
    H::Response: Into<Effects<S::Effect>>,
    H::Error: Into<BoxError>,
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

    /// Processes one invocation's batch and reports every message's outcome.
    ///
    /// Fails as a whole (so Lambda redelivers the whole batch) only if a record has no message
    /// id: it could not be named in a partial batch response, and an empty identifier would
    /// fail the batch anyway, less clearly.
    pub async fn process(&self, event: LambdaEvent<SqsEvent>) -> Result<BatchReport, Error> {
        let (payload, context) = event.into_parts();
        let namespace = self
            .inner
            .config
            .namespace
            .clone()
            .or_else(|| Some(context.env_config.function_name.clone()).filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "sqs-claim".to_owned());
        let budget = Budget::new(
            self.inner.config.clock.clone(),
            context.deadline,
            self.inner.config.deadline_margin,
            self.inner.config.lease,
        );
        self.process_records(payload.records, &namespace, &budget)
            .await
    }

    async fn process_records(
        &self,
        records: Vec<SqsMessage>,
        namespace: &str,
        budget: &Budget,
    ) -> Result<BatchReport, Error> {
        for (i, r) in records.iter().enumerate() {
            if r.message_id.as_deref().is_none_or(str::is_empty) {
                return Err(Error::new(
                    ErrorKind::InvalidEvent,
                    format!(
                        "record #{i} of the batch has no messageId: it cannot be reported as a \
                         failure, so the whole invocation fails and Lambda redelivers the batch"
                    ),
                ));
            }
        }
        let fifo = records.iter().any(|r| {
            r.event_source_arn
                .as_deref()
                .is_some_and(|a| a.ends_with(".fifo"))
        });
        // Lambda always sends the ARN. Without one (a hand-made event), a `SequenceNumber`,
        // which only FIFO queues assign, still marks the batch as FIFO: losing order silently
        // is worse than keeping it needlessly. (`MessageGroupId` proves nothing: standard
        // queues carry it too, for fair queues.)
        let fifo = fifo
            || records.iter().all(|r| r.event_source_arn.is_none())
                && records
                    .iter()
                    .any(|r| r.attributes.contains_key("SequenceNumber"));
        if fifo && records.iter().all(|r| r.event_source_arn.is_none()) {
            warn!("batch without eventSourceARN carries SequenceNumber: processing it as FIFO");
        }
        let slots = self.prepare(records, namespace);

        let outcomes: Vec<Outcome> = if fifo {
            self.run_fifo(&slots, budget).await
        } else {
            let mut out: Vec<Option<Outcome>> = vec![None; slots.len()];
            let slots_ref = &slots;
            let results: Vec<(usize, Outcome)> = stream::iter(0..slots.len())
                .map(|i| async move { (i, self.run_slot(&slots_ref[i], budget).await) })
                .buffer_unordered(self.inner.config.concurrency)
                .collect()
                .await;
            for (i, o) in results {
                out[i] = Some(o);
            }
            out.into_iter()
                .map(|o| {
                    // Every index is run exactly once above; a gap would be a bug here, and
                    // failing the message is the safe answer to it.
                    o.unwrap_or_else(|| {
                        Outcome::Failed(Failure::new(FailureKind::Handler, "internal: no outcome"))
                    })
                })
                .collect()
        };

        let items = slots
            .iter()
            .zip(outcomes)
            .map(|(slot, outcome)| ItemReport {
                message_id: slot.id.clone(),
                key: slot.key.clone(),
                outcome,
            })
            .collect();
        let report = BatchReport::new(items);
        let c = report.counts();
        info!(
            records = slots.len(),
            fifo,
            processed = c.processed,
            duplicate = c.duplicate,
            held_elsewhere = c.held_elsewhere,
            failed = c.failed,
            not_started = c.not_started,
            "batch done"
        );
        Ok(report)
    }

    fn prepare(&self, records: Vec<SqsMessage>, namespace: &str) -> Vec<Slot> {
        let config = &self.inner.config;
        let mut leaders: HashMap<String, usize> = HashMap::new();
        let mut slots: Vec<Slot> = Vec::with_capacity(records.len());
        for (i, record) in records.into_iter().enumerate() {
            let id = record.message_id.clone().unwrap_or_default();
            let group = record.attributes.get("MessageGroupId").cloned();
            let (key, key_failure) = match config.key.extract(&record) {
                Ok(Some(raw)) => (Some(key::namespaced(namespace, &raw)), None),
                Ok(None) => (
                    None,
                    Some(format!(
                        "message has no idempotency key ({})",
                        config.key.describe()
                    )),
                ),
                Err(e) => (None, Some(e.message().to_owned())),
            };
            let key_failure = match (key_failure, config.missing_key) {
                (Some(why), MissingKey::Fail) => Some(Failure::new(FailureKind::MissingKey, why)),
                (Some(why), MissingKey::ProcessWithoutDedup) => {
                    warn!(message_id = %id, reason = %why, "processing without deduplication");
                    None
                }
                (None, _) => None,
            };
            let fingerprint = (config.payload_check != PayloadCheck::Off)
                .then(|| key::sha256_hex(record.body.as_deref().unwrap_or("").as_bytes()));
            let mut follow = None;
            let mut payload_differs = false;
            if let Some(k) = &key {
                match leaders.get(k) {
                    Some(&leader) => {
                        let slot: &mut Slot = &mut slots[leader];
                        payload_differs = match (&fingerprint, &slot.fingerprint) {
                            (Some(ours), Some(theirs)) => ours != theirs,
                            _ => false,
                        };
                        let rx = match &slot.publish {
                            Some(tx) => tx.subscribe(),
                            None => {
                                let (tx, rx) = watch::channel(None);
                                slot.publish = Some(tx);
                                rx
                            }
                        };
                        follow = Some((format!("{} (#{leader})", slot.id), rx));
                    }
                    None => {
                        leaders.insert(k.clone(), i);
                    }
                }
            }
            let message = Message::new(record, key.clone());
            slots.push(Slot {
                id,
                key,
                fingerprint,
                key_failure,
                group,
                message: std::sync::Mutex::new(Some(message)),
                publish: None,
                follow,
                payload_differs,
            });
        }
        slots
    }

    /// FIFO: lanes per group (or one lane in whole-batch mode), in order inside a lane. A FIFO
    /// batch has at most 10 messages, so every lane runs at once; that also guarantees that a
    /// later copy of a key never waits on a lane that has not started.
    async fn run_fifo(&self, slots: &[Slot], budget: &Budget) -> Vec<Outcome> {
        let mut lanes: Vec<Vec<usize>> = Vec::new();
        match self.inner.config.fifo {
            FifoMode::WholeBatch => lanes.push((0..slots.len()).collect()),
            FifoMode::PerGroup => {
                let mut by_group: HashMap<Option<&str>, usize> = HashMap::new();
                for (i, slot) in slots.iter().enumerate() {
                    let lane = *by_group.entry(slot.group.as_deref()).or_insert_with(|| {
                        lanes.push(Vec::new());
                        lanes.len() - 1
                    });
                    lanes[lane].push(i);
                }
            }
        }
        let skip_reason = match self.inner.config.fifo {
            FifoMode::WholeBatch => NotStarted::EarlierFailureInBatch,
            FifoMode::PerGroup => NotStarted::EarlierFailureInGroup,
        };
        let lane_results = join_all(lanes.into_iter().map(|lane| async move {
            let mut results = Vec::with_capacity(lane.len());
            // Why the rest of the lane is not started, once something in it did not succeed.
            let mut stopped: Option<NotStarted> = None;
            for i in lane {
                let outcome = if let Some(reason) = stopped {
                    let outcome = Outcome::NotStarted(reason);
                    // Later copies of this key, in other groups, must not wait forever.
                    if let Some(tx) = &slots[i].publish {
                        tx.send_replace(Some(outcome.clone()));
                    }
                    log_outcome(&slots[i], &outcome);
                    outcome
                } else {
                    self.run_slot(&slots[i], budget).await
                };
                if stopped.is_none() && !outcome.is_success() {
                    // Past the cut-off the rest of the lane would not start either: say so,
                    // rather than blame an "earlier failure" that did not happen.
                    stopped = Some(match &outcome {
                        Outcome::NotStarted(NotStarted::Deadline) => NotStarted::Deadline,
                        _ => skip_reason,
                    });
                }
                results.push((i, outcome));
            }
            results
        }))
        .await;
        let mut out: Vec<Option<Outcome>> = vec![None; slots.len()];
        for (i, o) in lane_results.into_iter().flatten() {
            out[i] = Some(o);
        }
        out.into_iter()
            .map(|o| o.unwrap_or(Outcome::NotStarted(skip_reason)))
            .collect()
    }

    /// Runs one slot: a later copy waits for its leader, anything else goes through the claim.
    async fn run_slot(&self, slot: &Slot, budget: &Budget) -> Outcome {
        let outcome = match &slot.follow {
            Some((leader, rx)) => self.follow(slot, leader, rx.clone()).await,
            None => self.run_message(slot, budget).await,
        };
        if let Some(tx) = &slot.publish {
            tx.send_replace(Some(outcome.clone()));
        }
        log_outcome(slot, &outcome);
        outcome
    }

    async fn follow(
        &self,
        slot: &Slot,
        leader: &str,
        mut rx: watch::Receiver<Option<Outcome>>,
    ) -> Outcome {
        let leader_outcome = match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone(),
            // The sender lives in the slot list, which outlives every lane; a closed channel
            // means a bug, and a failure is the safe answer.
            Err(_) => None,
        };
        match leader_outcome {
            Some(Outcome::Processed) | Some(Outcome::Duplicate) if slot.payload_differs => {
                // The same check as against a stored record (see `run_message`): a copy inside
                // the batch must not slip a different payload past it.
                let why =
                    format!("same key as message {leader} of this batch, with a different payload");
                if self.inner.config.payload_check == PayloadCheck::Fail {
                    return Outcome::Failed(Failure::new(FailureKind::PayloadMismatch, why));
                }
                warn!(message_id = %slot.id, leader, "{why}; skipped as a duplicate");
                Outcome::Duplicate
            }
            Some(Outcome::Processed) | Some(Outcome::Duplicate) => {
                debug!(message_id = %slot.id, leader, "same key as an earlier message of this batch");
                Outcome::Duplicate
            }
            Some(Outcome::Failed(f)) => Outcome::Failed(Failure::new(
                f.kind,
                format!(
                    "same key as message {leader} of this batch, which failed: {}",
                    f.message
                ),
            )),
            Some(other) => other,
            None => Outcome::Failed(Failure::new(
                FailureKind::Handler,
                format!("internal: no outcome from message {leader}"),
            )),
        }
    }

    async fn run_message(&self, slot: &Slot, budget: &Budget) -> Outcome {
        if let Some(f) = &slot.key_failure {
            return Outcome::Failed(f.clone());
        }
        if !budget.may_start() {
            return Outcome::NotStarted(NotStarted::Deadline);
        }
        let Some(message) = slot
            .message
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return Outcome::Failed(Failure::new(
                FailureKind::Handler,
                "internal: message already taken",
            ));
        };
        let Some(key) = slot.key.as_deref() else {
            // No key, and policy says run anyway.
            return self
                .run_unclaimed(
                    message,
                    FailureKind::MissingKey,
                    "the message has no idempotency key and ran without deduplication \
                     (MissingKey::ProcessWithoutDedup)",
                )
                .await;
        };

        let config = &self.inner.config;
        let now = budget.now();
        let lease_until = budget.lease_until(now);
        let request = ClaimRequest {
            key,
            now,
            lease_until,
            // An in-progress record must not expire before its lease lapses: an expired record
            // counts as absent, and a second worker would run the handler alongside the first.
            expires_at: deadline::after(now, config.ttl).max(lease_until),
            fingerprint: slot.fingerprint.as_deref(),
        };
        let token = match self.inner.store.claim(request).await {
            Ok(Claim::Acquired(token)) => token,
            Ok(Claim::Completed(record)) => {
                let mismatch = match (&slot.fingerprint, &record.fingerprint) {
                    (Some(ours), Some(theirs)) => ours != theirs,
                    _ => false,
                };
                if mismatch {
                    let why = "key was completed before with a different payload";
                    match config.payload_check {
                        PayloadCheck::Fail => {
                            return Outcome::Failed(Failure::new(
                                FailureKind::PayloadMismatch,
                                why,
                            ));
                        }
                        _ => warn!(message_id = %slot.id, key, "{why}; skipped as a duplicate"),
                    }
                }
                return Outcome::Duplicate;
            }
            Ok(Claim::HeldElsewhere { lease_until }) => {
                return Outcome::HeldElsewhere { lease_until };
            }
            Err(e) if e.kind() == ErrorKind::StoreUnavailable => {
                if config.on_store_unavailable == StoreUnavailable::FailOpen {
                    warn!(message_id = %slot.id, key, error = %e, "store unavailable: fail-open, running without a claim");
                    return self
                        .run_unclaimed(
                            message,
                            FailureKind::StoreUnavailable,
                            "the store was unavailable and the message ran without a claim \
                             (StoreUnavailable::FailOpen)",
                        )
                        .await;
                }
                return Outcome::Failed(Failure::new(
                    FailureKind::StoreUnavailable,
                    format!("claim failed, nothing ran: {e}"),
                ));
            }
            Err(e) => {
                return Outcome::Failed(Failure::new(
                    FailureKind::StoreRejected,
                    format!("claim refused by the store, nothing ran: {e}"),
                ));
            }
        };

        match self.call_handler(message).await {
            Ok(effects) => self.complete(slot, key, &token, budget, effects).await,
            Err(failure) => {
                self.release(slot, key, &token).await;
                Outcome::Failed(failure)
            }
        }
    }

    /// Runs the handler without a claim (missing key with `ProcessWithoutDedup`, or fail-open).
    /// `kind` and `why` say which: a handler that returns effects fails, and the failure must
    /// point at the real cause (a missing key is not a store outage).
    async fn run_unclaimed(&self, message: Message, kind: FailureKind, why: &str) -> Outcome {
        match self.call_handler(message).await {
            Ok(effects) if effects.is_empty() => Outcome::Processed,
            Ok(_) => Outcome::Failed(Failure::new(
                kind,
                format!(
                    "{why}, but the handler returned effects, which commit only with a claim's \
                     completion: nothing was committed"
                ),
            )),
            Err(failure) => Outcome::Failed(failure),
        }
    }

    /// Calls the handler, turning an error or a panic into a [`Failure`].
    async fn call_handler(&self, message: Message) -> Result<Effects<S::Effect>, Failure> {
        let mut handler = self.inner.handler.clone();
        // The whole call, `ready` and the synchronous part of `call` included, is inside
        // `catch_unwind`: a panicking handler fails its message, not the batch.
        let run = async move {
            let ready = handler.ready().await.map_err(Into::into)?;
            ready.call(message).await.map_err(Into::into)
        };
        match AssertUnwindSafe(run).catch_unwind().await {
            Ok(Ok(response)) => Ok(response.into()),
            Ok(Err(e)) => {
                let e: BoxError = e;
                Err(Failure::new(FailureKind::Handler, e.to_string()))
            }
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_owned());
                Err(Failure::new(
                    FailureKind::Panic,
                    format!("handler panicked: {what}"),
                ))
            }
        }
    }

    async fn complete(
        &self,
        slot: &Slot,
        key: &str,
        token: &ClaimToken,
        budget: &Budget,
        mut effects: Effects<S::Effect>,
    ) -> Outcome {
        let config = &self.inner.config;
        let has_effects = !effects.is_empty();
        let expires_at = deadline::after(budget.now(), config.ttl);
        let mut attempt = 0;
        let result = loop {
            // A retry resends the same effects. A transient error can leave it unknown whether
            // the attempt committed; the contract makes that safe: if it did, the retry finds
            // the record completed by this token and succeeds without applying anything again;
            // if it did not, the retry commits effects and completion together.
            let send = if attempt < config.completion_retries {
                Effects::from(effects.as_slice().to_vec())
            } else {
                std::mem::take(&mut effects)
            };
            match self
                .inner
                .store
                .complete(key, token, expires_at, send)
                .await
            {
                Err(e) if e.is_transient() && attempt < config.completion_retries => {
                    let backoff = config
                        .retry_backoff
                        .saturating_mul(2u32.saturating_pow(attempt));
                    warn!(message_id = %slot.id, key, attempt, error = %e, "completion failed; retrying");
                    attempt += 1;
                    tokio::time::sleep(backoff).await;
                }
                other => break other,
            }
        };
        match result {
            Ok(()) => Outcome::Processed,
            Err(e) => {
                self.completion_failed(slot, key, token, has_effects, e)
                    .await
            }
        }
    }

    async fn completion_failed(
        &self,
        slot: &Slot,
        key: &str,
        token: &ClaimToken,
        has_effects: bool,
        e: Error,
    ) -> Outcome {
        if !has_effects {
            // The handler's side effect already happened: reporting a failure would run it
            // again on redelivery. Report success and shout; the claim stays in progress and
            // its lease lapses at the deadline.
            error!(
                message_id = %slot.id, key, error = %e,
                "handler succeeded but its completion could not be recorded; reporting success, \
                 a later redelivery of this key could run the handler again"
            );
            return Outcome::Processed;
        }
        let kind = match e.kind() {
            ErrorKind::EffectRejected => FailureKind::EffectRejected,
            ErrorKind::LostClaim => FailureKind::LostClaim,
            ErrorKind::StoreUnavailable => FailureKind::StoreUnavailable,
            _ => FailureKind::StoreRejected,
        };
        if kind != FailureKind::LostClaim {
            self.release(slot, key, token).await;
        }
        // A transient error (a timeout, a dropped connection) can hide a commit: do not tell
        // the on-call engineer that nothing was written, or they may apply the effects by hand.
        let what = if e.is_transient() {
            "completion with effects could not be confirmed, it may or may not have committed \
             (the redelivery finds out: skipped as a duplicate if it did, applied with the \
             completion if it did not)"
        } else {
            "completion with effects failed, nothing was committed"
        };
        Outcome::Failed(Failure::new(kind, format!("{what}: {e}")))
    }

    async fn release(&self, slot: &Slot, key: &str, token: &ClaimToken) {
        if let Err(e) = self.inner.store.release(key, token).await {
            // Not fatal: the message is reported failed either way, and an unreleased claim
            // lapses with its lease, after which the redelivery takes it over.
            warn!(message_id = %slot.id, key, error = %e, "could not release the claim; it will lapse with its lease");
        }
    }
}

fn log_outcome(slot: &Slot, outcome: &Outcome) {
    let key = slot.key.as_deref().unwrap_or("");
    match outcome {
        Outcome::Processed => debug!(message_id = %slot.id, key, outcome = "processed"),
        Outcome::Duplicate => {
            info!(message_id = %slot.id, key, outcome = "duplicate", "duplicate skipped")
        }
        Outcome::HeldElsewhere { .. } => {
            info!(message_id = %slot.id, key, outcome = "held_elsewhere", "claimed by another worker; will be retried")
        }
        Outcome::Failed(f) => {
            warn!(message_id = %slot.id, key, outcome = "failed", kind = f.kind.as_str(), reason = %f.message, "message failed")
        }
        Outcome::NotStarted(r) => {
            info!(message_id = %slot.id, key, outcome = "not_started", reason = r.as_str(), "message not started")
        }
        Outcome::CutOff(step) => {
            warn!(message_id = %slot.id, key, outcome = "cut_off", step = step.as_str(), "message cut off by the time budget")
        }
    }
}

impl<S, H> Service<LambdaEvent<SqsEvent>> for Processor<S, H>
where
    S: ClaimStore,
    H: Service<Message> + Clone + Send + Sync + 'static,
    H::Future: Send + 'static,
    H::Response: Into<Effects<S::Effect>>,
    H::Error: Into<BoxError>,
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
