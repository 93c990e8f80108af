//! The processor's policies and settings, and the builder that sets them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::after::{AfterBatch, Steps};
use super::{Inner, Processor};
use crate::Envelope;
use crate::RetryPolicy;
use crate::claim::{KeyFormat, Lease, MissingKey, Namespace, NativeFormat, PayloadCheck, Terms};
use crate::deadline::Clock;
use crate::key::KeySource;
use crate::message::{Message, Payload};
use crate::metrics::{MetricsSink, Sink};

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

/// `fail-closed` or `fail-open`, as `SQS_CLAIM_STORE_UNAVAILABLE` spells it.
impl std::str::FromStr for StoreUnavailable {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "fail-closed" => Ok(StoreUnavailable::FailClosed),
            "fail-open" => Ok(StoreUnavailable::FailOpen),
            other => Err(crate::Error::new(
                crate::ErrorKind::Config,
                format!("{other:?}: expected fail-closed or fail-open"),
            )),
        }
    }
}

/// `per-group` or `whole-batch`, as `SQS_CLAIM_FIFO_MODE` spells it.
impl std::str::FromStr for FifoMode {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "per-group" => Ok(FifoMode::PerGroup),
            "whole-batch" => Ok(FifoMode::WholeBatch),
            other => Err(crate::Error::new(
                crate::ErrorKind::Config,
                format!("{other:?}: expected per-group or whole-batch"),
            )),
        }
    }
}

/// Processor settings. Every field has a documented default; see [`ProcessorBuilder`], the only
/// way to set them (so it is not public: a new setting is not a breaking change).
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(super) key: KeySource,
    /// What AWS wraps around each payload ([`ProcessorBuilder::envelope`]).
    pub(super) envelope: Envelope,
    pub(super) namespace: Namespace,
    /// How keys and fingerprints are written ([`ProcessorBuilder::key_format`]).
    pub(super) format: Arc<dyn KeyFormat>,
    pub(super) missing_key: MissingKey,
    /// TTL, lease, completion retries and payload check: what the idempotency layer has too.
    pub(super) terms: Terms,
    pub(super) concurrency: Option<usize>,
    pub(super) deadline_margin: Duration,
    pub(super) answer_reserve: Duration,
    pub(super) handler_timeout: Option<Duration>,
    pub(super) on_store_unavailable: StoreUnavailable,
    pub(super) fifo: FifoMode,
    pub(super) clock: Clock,
    /// What runs after each batch ([`ProcessorBuilder::after_batch`], and the failure
    /// destination and redelivery of feature `sqs`).
    pub(super) after: Steps,
    pub(super) metrics: Option<Sink>,
    /// Set only by [`Processor::one_shot`](super::Processor::one_shot), whose handler type
    /// cannot await: the handler then runs before the claim.
    pub(super) one_shot: bool,
    /// Set only by the stream consumers ([`crate::stream`]): every batch runs in ordered lanes,
    /// one per group (a record's shard or topic-partition, as its adapter read it).
    pub(super) stream: bool,
    /// The stream a consumer reads (set with `stream`): what of a record its payload
    /// fingerprint covers ([`super::stream_source::Source`]).
    #[cfg(feature = "streams")]
    pub(super) source: Option<super::stream_source::Source>,
    /// Whether the key format selects what of a record it fingerprints itself
    /// (`PowertoolsFormat`'s validation pointer): the stream source's rule is then not applied.
    #[cfg(feature = "streams")]
    pub(super) format_selects_payload: bool,
    /// Payloads offloaded to S3 ([`ProcessorBuilder::large_messages`]).
    #[cfg(feature = "s3")]
    pub(super) large: Option<crate::large::LargeMessages>,
}

/// What a record's S3 pointer led to (feature `s3`; without it, nothing can be fetched).
#[cfg(feature = "s3")]
pub(super) use crate::large::Fetched;
/// What a record's S3 pointer led to (feature `s3`; without it, nothing can be fetched).
#[cfg(not(feature = "s3"))]
#[derive(Debug)]
pub(super) enum Fetched {}

impl Config {
    /// Reads `record` through the envelope: its stored key under the key format (`None` if
    /// it has none), its payload fingerprint under the payload check (when it has a key), and
    /// what the envelope holds, for the handler. The envelope is opened once, here, and the
    /// key format reads the payload it holds as it would a body.
    ///
    /// `fetched` is what the record's S3 pointer led to (feature `s3`): its object is the
    /// payload, as an envelope's is; when it could not be fetched, a key read from the payload
    /// cannot be read, and the message fails at once with why ([`Read::fail_now`]), while a
    /// key the record carries is claimed (a duplicate is skipped without its object) and the
    /// message then fails with why instead of running its handler.
    pub(super) fn read(
        &self,
        record: &aws_lambda_events::sqs::SqsMessage,
        namespace: &str,
        fetched: Option<Fetched>,
    ) -> Read {
        let body = record.body.as_deref().unwrap_or("");
        #[cfg_attr(not(feature = "s3"), allow(unused_variables))]
        let envelope_id = || match self.envelope {
            Envelope::None => None,
            envelope => envelope.open(body).ok().and_then(|o| o.into_owned().1),
        };
        let payload = match fetched {
            #[cfg(feature = "s3")]
            Some(Fetched::Payload { text, .. }) => Payload::Opened {
                text,
                id: envelope_id(),
            },
            #[cfg(feature = "s3")]
            Some(Fetched::Failed(failure)) => {
                let key = match &self.key {
                    KeySource::EnvelopeId => envelope_id().map(|id| {
                        Some(
                            self.format
                                .stored_key(namespace, &serde_json::Value::String(id)),
                        )
                    }),
                    key if key.reads_body() => None,
                    _ => Some(
                        self.format
                            .record_key(namespace, &self.key, record, body)
                            .ok()
                            .flatten(),
                    ),
                };
                return match key {
                    Some(Some(key)) => Read {
                        key: Ok(Some(key)),
                        fingerprint: None,
                        payload: Payload::Unfetched(failure),
                        fail_now: None,
                    },
                    _ => Read {
                        key: Ok(None),
                        fingerprint: None,
                        payload: Payload::Unfetched(failure.clone()),
                        fail_now: Some(failure),
                    },
                };
            }
            #[cfg(not(feature = "s3"))]
            Some(never) => match never {},
            None => match self.envelope {
                Envelope::None => Payload::Body,
                envelope => match envelope.open(body) {
                    Ok(opened) => {
                        let (text, id) = opened.into_owned();
                        Payload::Opened { text, id }
                    }
                    Err(e) => Payload::Unopened(e.message().to_owned()),
                },
            },
        };
        let (key, fingerprint) = match &payload {
            Payload::Unopened(why) if self.key.reads_body() => (
                Err(self
                    .key
                    .unopened(&crate::Error::new(crate::ErrorKind::BadBody, why.clone()))),
                None,
            ),
            // A key from the record itself (its id, an attribute), and the body as it is.
            Payload::Body | Payload::Unopened(_) | Payload::Unfetched(_) => {
                self.key_and_fingerprint(record, body, namespace)
            }
            Payload::Opened { text, id } => match (&self.key, id.as_deref()) {
                (KeySource::EnvelopeId, id) => {
                    let key = id.map(|id| {
                        self.format
                            .stored_key(namespace, &serde_json::Value::String(id.to_owned()))
                    });
                    let fingerprint = key.as_ref().and_then(|_| self.fingerprint(record, text));
                    (Ok(key), fingerprint)
                }
                _ => self.key_and_fingerprint(record, text, namespace),
            },
        };
        Read {
            key,
            fingerprint,
            payload,
            fail_now: None,
        }
    }

    /// The stored key and the fingerprint of `record`, whose payload is `payload`.
    fn key_and_fingerprint(
        &self,
        record: &aws_lambda_events::sqs::SqsMessage,
        payload: &str,
        namespace: &str,
    ) -> (Result<Option<String>, crate::Error>, Option<String>) {
        let key = self
            .format
            .record_key(namespace, &self.key, record, payload);
        let fingerprint = match key {
            Ok(Some(_)) => self.fingerprint(record, payload),
            _ => None,
        };
        (key, fingerprint)
    }

    /// The fingerprint of `record`'s payload under the payload check, `None` when it is off.
    fn fingerprint(
        &self,
        record: &aws_lambda_events::sqs::SqsMessage,
        payload: &str,
    ) -> Option<String> {
        if !self.terms.payload_check.fingerprints() {
            return None;
        }
        // A stream record's payload is what its source says (a DynamoDB Streams record's
        // image, not the record around it): the one rule for the consumer and for `inspect`.
        #[cfg(feature = "streams")]
        if let Some(source) = self.source
            && !self.format_selects_payload
        {
            return self
                .format
                .record_fingerprint(record, &source.fingerprinted(payload));
        }
        self.format.record_fingerprint(record, payload)
    }
}

/// A record read through the envelope ([`Config::read`]).
pub(super) struct Read {
    /// The stored key, `None` if the record has none.
    pub(super) key: Result<Option<String>, crate::Error>,
    /// The payload fingerprint, when the record has a key and the payload check is on.
    pub(super) fingerprint: Option<String>,
    /// What the envelope holds, for the handler's [`Message`](crate::Message).
    pub(super) payload: Payload,
    /// A failure the message fails with before anything runs: its payload offloaded to S3
    /// could not be fetched, and its key is read from that payload (feature `s3`).
    pub(super) fail_now: Option<crate::outcome::Failure>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            key: KeySource::MessageId,
            envelope: Envelope::None,
            namespace: Namespace::default(),
            format: Arc::new(NativeFormat),
            missing_key: MissingKey::Fail,
            terms: Terms::default(),
            concurrency: None,
            deadline_margin: Duration::from_secs(2),
            answer_reserve: Duration::from_millis(250),
            handler_timeout: None,
            on_store_unavailable: StoreUnavailable::FailClosed,
            fifo: FifoMode::PerGroup,
            clock: Clock::system(),
            after: Steps::default(),
            metrics: None,
            one_shot: false,
            stream: false,
            #[cfg(feature = "streams")]
            source: None,
            #[cfg(feature = "streams")]
            format_selects_payload: false,
            #[cfg(feature = "s3")]
            large: None,
        }
    }
}

/// Builds a [`Processor`]. Every setting has a default; call only what you change.
pub struct ProcessorBuilder<S, H> {
    pub(super) store: S,
    pub(super) handler: H,
    pub(super) config: Config,
}

impl<S, H> fmt::Debug for ProcessorBuilder<S, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S, H> ProcessorBuilder<S, H> {
    /// Where the idempotency key comes from. Default: [`KeySource::MessageId`].
    pub fn key(mut self, key: KeySource) -> Self {
        self.config.key = key;
        self
    }

    /// The envelope AWS wraps around each payload: SNS, EventBridge or an S3 notification.
    /// Default: [`Envelope::None`] (the body is the payload). With one, the key and the payload
    /// fingerprint are read from the payload ([`KeySource::EnvelopeId`] from the envelope), and
    /// the handler's [`Message::payload`](crate::Message::payload) and
    /// [`Message::json`](crate::Message::json) read it; a body that is not that envelope fails
    /// its message alone. See [`Envelope`](crate::Envelope) and docs/events.md.
    ///
    /// ```
    /// use sqs_claim::Envelope;
    /// use sqs_claim::{KeySource, MemoryStore, Message, Processor};
    ///
    /// let handler = tower::service_fn(|msg: Message| async move {
    ///     let order: serde_json::Value = msg.json()?; // the JSON SNS's `Message` holds
    ///     # let _ = order;
    ///     Ok::<(), sqs_claim::Error>(())
    /// });
    /// let processor = Processor::builder(MemoryStore::new(), handler)
    ///     .envelope(Envelope::Sns)
    ///     .key(KeySource::JsonPointer("/order_id".into()))
    ///     .build();
    /// # let _ = processor;
    /// ```
    pub fn envelope(mut self, envelope: Envelope) -> Self {
        self.config.envelope = envelope;
        self
    }

    /// Each of `records` as the processor this builder makes would claim it, for
    /// [`ProcessorBuilder::record_claims`](crate::ProcessorBuilder::record_claims)
    /// (`inspect.rs`): its key and payload fingerprint read as [`Config::read`] reads them for
    /// the plan (a stream record's under its `source`'s rule), and the first record of the
    /// batch with the same key, as the plan makes a later copy follow it. A stream record the
    /// adapter could not read has no key, and why.
    #[cfg(feature = "admin")]
    pub(crate) fn claims_of(
        &self,
        records: &[crate::record::Record],
        #[cfg(feature = "streams")] source: Option<super::stream_source::Source>,
    ) -> Vec<Result<Option<super::RecordClaim>, crate::Error>> {
        #[cfg(feature = "streams")]
        let config = {
            let mut config = self.config.clone();
            if let Some(source) = source {
                config.stream = true;
                config.source = Some(source);
            }
            config
        };
        #[cfg(not(feature = "streams"))]
        let config = &self.config;
        let namespace = config.namespace.clone().read_env();
        let context = lambda_runtime::Context::default();
        let namespace = namespace.resolve(&context);
        let mut first: std::collections::HashMap<String, usize> = Default::default();
        records
            .iter()
            .enumerate()
            .map(|(i, record)| {
                if let Some(why) = &record.unreadable {
                    return Err(crate::Error::new(crate::ErrorKind::BadBody, why.clone()));
                }
                let read = config.read(&record.message, &namespace, None);
                Ok(read.key?.map(|key| {
                    let copy_of = first.get(&key).copied();
                    if copy_of.is_none() {
                        first.insert(key.clone(), i);
                    }
                    super::RecordClaim {
                        key,
                        fingerprint: read.fingerprint,
                        copy_of,
                        check: config.terms.payload_check,
                    }
                }))
            })
            .collect()
    }

    /// The key namespace (`namespace#key`). Default: the function's name (the invocation
    /// context's, else `AWS_LAMBDA_FUNCTION_NAME`), else `sqs-claim`: the
    /// [namespace rule](crate::claim#the-namespace-rule), the idempotency layer's too. Set it
    /// explicitly for payments: renaming a function must not reset deduplication, and two
    /// consumers of one table must use different namespaces.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.config.namespace.set(namespace.into());
        self
    }

    /// How keys and payload fingerprints are written. Default: [`NativeFormat`] (the key
    /// `namespace#<raw key>`, the fingerprint the SHA-256 of the body).
    ///
    /// `PowertoolsFormat` (feature `powertools`) derives them as Powertools for AWS Lambda
    /// (Python) does for an `@idempotent_function` SQS record handler, from the
    /// [`key`](Self::key) source's value (`PowertoolsFormat::record_key` says what each source
    /// is to Powertools), so the processor and a Powertools consumer of the same table see each
    /// other's messages as duplicates (docs/powertools.md). Its key is Powertools'
    /// `{prefix}#{hash}`: the [`namespace`](Self::namespace) does not enter it. Its payload
    /// fingerprints are Powertools' `validation` hashes, of what
    /// `PowertoolsFormat::with_record_validation` names, and none without it.
    ///
    /// ```
    /// # #[cfg(feature = "powertools")] {
    /// use sqs_claim::powertools::PowertoolsFormat;
    /// use sqs_claim::{KeySource, MemoryStore, Message, Processor};
    ///
    /// let handler = tower::service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
    /// // Powertools: event_key_jmespath="powertools_json(body).order_id" on app.record_handler
    /// let processor = Processor::builder(MemoryStore::new(), handler)
    ///     .key(KeySource::JsonPointer("/order_id".into()))
    ///     .key_format(PowertoolsFormat::new("orders-fn", "app.record_handler"))
    ///     .build();
    /// # let _ = processor;
    /// # }
    /// ```
    pub fn key_format(mut self, format: impl KeyFormat) -> Self {
        // Powertools' validation names the part of the record it hashes itself (a pointer into
        // the record, as Powertools' `payload_validation_jmespath` is): a stream consumer hands
        // it the record as is, so both sides of a shared table hash the same value.
        #[cfg(all(feature = "streams", feature = "powertools"))]
        {
            self.config.format_selects_payload =
                (&format as &dyn std::any::Any).is::<crate::powertools::PowertoolsFormat>();
        }
        self.config.format = Arc::new(format);
        self
    }

    /// What to do with a message that lacks the key. Default: [`MissingKey::Fail`].
    pub fn missing_key(mut self, policy: MissingKey) -> Self {
        self.config.missing_key = policy;
        self
    }

    /// Payload fingerprint check. Default: [`PayloadCheck::Fail`].
    pub fn payload_check(mut self, check: PayloadCheck) -> Self {
        self.config.terms.payload_check = check;
        self
    }

    /// The most messages of a standard-queue batch that run at once; the in-flight limit adapts
    /// below it (cut on contention and store timeouts, grown back on success: `InFlightLimit`
    /// in the metrics). Default: what the store can
    /// carry ([`Capabilities::max_in_flight`](crate::store::Capabilities::max_in_flight): 256 for
    /// DynamoDB, Redis and SQLite, the pool size for PostgreSQL), so a batch of up to that
    /// many takes the round trips of one message. Lower it when the handler calls a service
    /// that cannot take that many calls at once, or when a provisioned DynamoDB table would
    /// throttle that many writes (each message writes its claim and its completion). Values
    /// below 1 are treated as 1.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = Some(n.max(1));
        self
    }

    /// How long claims are held before another worker may take them over: a short lease
    /// extended while the handler runs ([`Lease::extended`], the default: a quarter of the time
    /// left, at least 2 s; 5 minutes when there is no deadline), until the invocation's deadline
    /// ([`Lease::until_deadline`]), or at least a fixed time even inside Lambda
    /// ([`Lease::at_least`]: for a handler that must not run again for an hour after a
    /// timeout). [`Lease`] sets out the
    /// trade-off. Values above 100 years are treated as 100 years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sqs_claim::{Lease, MemoryStore, Message, Processor};
    ///
    /// let handler = tower::service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
    /// let processor = Processor::builder(MemoryStore::new(), handler)
    ///     .lease_policy(Lease::at_least(Duration::from_secs(3600)))
    ///     .build();
    /// ```
    pub fn lease_policy(mut self, lease: Lease) -> Self {
        self.config.terms.lease = lease;
        self
    }

    /// How long a completed key is remembered (the TTL). Default: 24 hours. Keep it longer
    /// than the queue's redelivery window: visibility timeout × `maxReceiveCount`, and longer
    /// still if producers can resend hours later. Values above 100 years are treated as 100
    /// years.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.terms.ttl = ttl;
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
    /// [`Outcome::CutOff`](crate::Outcome::CutOff) with the step it was at.
    pub fn answer_reserve(mut self, reserve: Duration) -> Self {
        self.config.answer_reserve = reserve;
        self
    }

    /// The longest one handler call may take. Default: none (the invocation's time budget
    /// still bounds it). A handler that runs longer is cancelled and its message fails with
    /// [`FailureKind::HandlerTimeout`](crate::FailureKind::HandlerTimeout); its claim is kept until its lease lapses, as the call
    /// may have reached an external service. (A `tower::timeout::TimeoutLayer` around the
    /// handler also works, but its error is an ordinary handler error, which releases the
    /// claim at once.)
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

    /// The retry policy of a completion that failed with a transient error. Default:
    /// [`RetryPolicy::default`]. Not used for stores whose client retries by itself
    /// ([`Capabilities::retries_internally`](crate::store::Capabilities::retries_internally): the AWS
    /// SDK's own retry configuration applies there), and never past the time budget.
    pub fn completion_retry(mut self, policy: RetryPolicy) -> Self {
        self.config.terms.completion_retry = policy;
        self
    }

    /// How a write cancelled on contention is sent again: a DynamoDB transaction that met
    /// another in flight on one of its items (`TransactionConflict`), a throttled transaction,
    /// a PostgreSQL serialization failure. Such a write wrote nothing, and the store's client
    /// does not retry it (the AWS SDK does not), so every store step (claim, completion,
    /// one-shot write, release) sends it again under this policy, never past the time budget;
    /// only then does the message fail, as `contention`. Default: up to 50 retries from
    /// 10 ms, at most 500 ms apart. `RetryPolicy::none()` turns it off.
    pub fn contention_retry(mut self, policy: RetryPolicy) -> Self {
        self.config.terms.contention_retry = policy;
        self
    }

    /// The clock. Default: [`Clock::system`]. Tests use [`Clock::tokio`] with paused time.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.config.clock = clock;
        self
    }

    /// Sends a message that fails on its last allowed receive to `destination`, with its
    /// failure kind and reason as message attributes, and reports it handled
    /// ([`Outcome::DeadLettered`](crate::Outcome::DeadLettered)) instead of letting the DLQ take it without its reason. A
    /// failed send leaves it reported for retry, as without a destination. Default: none.
    /// See [`FailureDestination`](super::FailureDestination).
    ///
    /// *Feature `sqs`.*
    #[cfg(feature = "sqs")]
    pub fn failure_destination(mut self, destination: super::FailureDestination) -> Self {
        self.config.after.divert = Some(Arc::new(destination));
        self
    }

    /// Gives each message reported for retry its own visibility timeout after the batch
    /// (`ChangeMessageVisibilityBatch`): a backoff from its receive count, the delay its
    /// handler asked for, or just past the lease of the claim that holds it, instead of the
    /// queue's visibility timeout every time. A change that fails leaves the message reported
    /// and coming back as without it. Default: none. See [`Redelivery`](super::Redelivery).
    ///
    /// *Feature `sqs`.*
    #[cfg(feature = "sqs")]
    pub fn redelivery(mut self, redelivery: super::Redelivery) -> Self {
        self.config.after.settle = Some(Arc::new(redelivery));
        self
    }

    /// Runs `step` after each batch, once every message has its outcome and before the report
    /// is made, inside the invocation's time budget (see [`AfterBatch`]). Steps run in the order
    /// they are added, after the [`failure_destination`](Self::failure_destination) and before
    /// the [`redelivery`](Self::redelivery) (feature `sqs`), whatever the order of the calls.
    /// Default: none.
    pub fn after_batch(mut self, step: impl AfterBatch) -> Self {
        self.config.after.custom.push(Arc::new(step));
        self
    }

    /// Reads the payloads the SQS and SNS extended clients offload to S3: a record whose body
    /// is their S3 pointer has its object fetched before the batch is planned (inside the time
    /// budget, under [`LargeMessages::max_bytes`](crate::large::LargeMessages::max_bytes)), and
    /// the key, the payload check and the handler read the object as the payload. With
    /// [`delete_after_completion`](crate::large::LargeMessages::delete_after_completion), the
    /// object is deleted once its message's completion committed (an after-batch step, after
    /// those of [`after_batch`](Self::after_batch)). Default: none (a pointer is the payload).
    /// See [`large`](crate::large).
    ///
    /// *Feature `s3`.*
    #[cfg(feature = "s3")]
    pub fn large_messages(mut self, large: crate::large::LargeMessages) -> Self {
        self.config.after.cleanup = large.deletes().then(|| {
            std::sync::Arc::new(super::cleanup::Cleanup {
                client: large.client().clone(),
            }) as std::sync::Arc<dyn super::AfterBatch>
        });
        self.config.large = Some(large);
        self
    }

    /// Where each batch's metrics go. Default: nowhere (and nothing is measured).
    /// [`Emf`](crate::metrics::Emf) writes CloudWatch Embedded Metric Format lines; any
    /// [`MetricsSink`] (a closure too) gets the [`BatchMetrics`](crate::metrics::BatchMetrics)
    /// of every batch. See [`metrics`](crate::metrics).
    pub fn metrics(mut self, sink: impl MetricsSink) -> Self {
        self.config.metrics = Some(Sink(Arc::new(sink)));
        self
    }

    /// The builder with its handler boxed (tower's
    /// [`BoxCloneSyncService`](tower::util::BoxCloneSyncService)), so that processors of
    /// several handlers, or of either mode, are one type: what a consumer that picks its
    /// handler or its mode at run time needs. Only the box is added: in one-shot mode
    /// ([`Processor::one_shot`]) the handler inside is still the synchronous effects function,
    /// which cannot await a side effect before the claim.
    pub fn boxed_handler(
        self,
    ) -> ProcessorBuilder<S, tower::util::BoxCloneSyncService<Message, H::Response, H::Error>>
    where
        H: tower::Service<Message> + Clone + Send + Sync + 'static,
        H::Future: Send + 'static,
    {
        ProcessorBuilder {
            store: self.store,
            handler: tower::util::BoxCloneSyncService::new(self.handler),
            config: self.config,
        }
    }

    /// Finishes the processor for a stream consumer ([`crate::stream`]): ordered lanes per
    /// shard, always. Refuses what only an SQS queue can do: a failure queue or per-message
    /// redelivery delays (a stream's retries are its event source mapping's: retry attempts,
    /// record age, bisection, its on-failure destination).
    #[cfg(feature = "streams")]
    pub(crate) fn build_stream(
        mut self,
        source: super::stream_source::Source,
    ) -> Result<Processor<S, H>, crate::Error> {
        if self.config.after.divert.is_some() || self.config.after.settle.is_some() {
            return Err(crate::Error::new(
                crate::ErrorKind::Config,
                format!(
                    "a {} consumer cannot have a failure destination or a redelivery: a \
                     stream has no visibility timeout and no per-record delete; its retries \
                     are the event source mapping's (MaximumRetryAttempts, \
                     MaximumRecordAgeInSeconds, BisectBatchOnFunctionError) and what it gives \
                     up on goes to the mapping's on-failure destination",
                    source.name()
                ),
            ));
        }
        self.config.stream = true;
        self.config.source = Some(source);
        self.config.fifo = FifoMode::PerGroup;
        Ok(self.build())
    }

    /// Finishes the processor.
    pub fn build(self) -> Processor<S, H> {
        let mut config = self.config;
        config.namespace = config.namespace.read_env();
        Processor {
            inner: Arc::new(Inner {
                store: self.store,
                handler: self.handler,
                config,
                locks: crate::claim::ItemLocks::default(),
                limit: std::sync::OnceLock::new(),
            }),
        }
    }
}
