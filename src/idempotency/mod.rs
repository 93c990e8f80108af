//! Idempotency for any Lambda event: run a handler at most once per key, and answer every
//! duplicate with the first call's response, byte for byte.
//!
//! An API that takes payments, a webhook receiver, a function invoked directly: each may see
//! the same request twice (a client retrying after a timeout, a provider redelivering a
//! webhook, a double click). [`Idempotency`] wraps a handler of `LambdaEvent<T>`, as a
//! `tower::Layer` ([`Idempotency::layer`]) or a function ([`Idempotency::call`]):
//!
//! ```text
//! event ─► key (KeyExtractor) ─► claim ─┬─ acquired ─► handler ─► response serialised once ─► complete (response + effects, fenced) ─► answer
//!                                       ├─ completed ─► same request? ─► the stored response, byte for byte (else: 422 / PayloadMismatch)
//!                                       └─ held elsewhere ─► 409 / InProgress (Retry-After: when the lease lapses),
//!                                          or, with wait_in_progress, poll until it completes (replay) or the wait runs out
//! ```
//!
//! ```
//! use lambda_runtime::{Context, LambdaEvent};
//! use serde_json::{Value, json};
//! use sqs_claim::MemoryStore;
//! use sqs_claim::idempotency::{Idempotency, key};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), sqs_claim::BoxError> {
//! let idempotency = Idempotency::builder(MemoryStore::new(), key::json_pointer("/transfer_id"))
//!     .namespace("transfers")
//!     .build();
//! let transfer = || LambdaEvent::new(json!({"transfer_id": "t-1", "cents": 500}), Context::default());
//! let handler = |event: LambdaEvent<Value>| async move {
//!     // ... move the money, passing the transfer id on to the bank ...
//!     Ok::<_, sqs_claim::BoxError>(json!({"status": "sent", "cents": event.payload["cents"]}))
//! };
//!
//! let first = idempotency.call(transfer(), handler).await?;
//! let again = idempotency.call(transfer(), handler).await?; // the handler does not run
//! assert_eq!(again.json(), first.json());
//! assert!(again.is_replay());
//! # Ok(())
//! # }
//! ```
//!
//! # The record
//!
//! One record per key, in any [`ClaimStore`] (the [store contract](crate::store) the SQS
//! processor uses): the key (`namespace#<datum>`, [`KeyFormat`]), the status (in progress, then
//! completed), the owner token (fencing), the lease, the expiry (the TTL, default 24 hours),
//! the request's fingerprint (SHA-256) and, once completed, the handler's response as the JSON
//! text it was answered with ([`StoredResponse`](crate::store::StoredResponse)).
//!
//! # The answers
//!
//! | the key's record | the handler | API Gateway events (feature `apigw`) | other events |
//! |------------------|-------------|--------------------------------------|--------------|
//! | none (or expired) | runs; its response is stored with the completion | the handler's response | the handler's response |
//! | completed, same request | does not run | the stored response, byte for byte ([`IdempotentResponse::is_replay`]) | the same |
//! | completed, other request (the fingerprints differ) | does not run | HTTP 422 `{"message": ...}` | error [`ErrorKind::PayloadMismatch`](crate::ErrorKind::PayloadMismatch) |
//! | in progress elsewhere (a live lease) | does not run | HTTP 409, `Retry-After` | error [`ErrorKind::InProgress`](crate::ErrorKind::InProgress) |
//! | in progress elsewhere, with [`wait_in_progress`](IdempotencyBuilder::wait_in_progress) | waits (polls) for the first: does not run if it completes | its stored response once it completes; 409 if the wait runs out | the same; `InProgress` if the wait runs out |
//! | the request carries no key | does not run | HTTP 400 | error [`ErrorKind::MissingKey`](crate::ErrorKind::MissingKey) |
//! | completed by the SQS processor or a one-shot write (no stored response) | does not run | error [`ErrorKind::NotReplayable`](crate::ErrorKind::NotReplayable) | the same |
//!
//! The answers are configurable ([`Answers`], [`IdempotencyBuilder::answers`]); a missing key
//! can also run the handler without deduplication
//! ([`MissingKey::ProcessWithoutDedup`](crate::MissingKey)).
//!
//! When the handler fails, the layer releases the claim and returns the handler's error as it
//! is: a retry runs the handler again. A panic is caught, the claim released, and answered with
//! an error ([`ErrorKind::Panicked`](crate::ErrorKind::Panicked)).
//!
//! # The response size limit
//!
//! A store keeps responses up to [`Capabilities::max_response_bytes`](crate::store::Capabilities::max_response_bytes) (DynamoDB: under its
//! 400 KB item limit; the default 6 MiB, Lambda's own limit). A longer response is **refused
//! before anything is committed**: the claim is released, the handler's effects
//! ([`WithEffects`]) are not committed, and the call fails with
//! [`ErrorKind::ResponseTooLarge`](crate::ErrorKind::ResponseTooLarge). Side effects the
//! handler made outside the store have happened; a retry runs the handler again. Return a
//! reference (an id, a URL) rather than a large document.
//!
//! # Time, leases and fencing
//!
//! Every store call and the handler are raced against the invocation's deadline minus an
//! answer reserve ([`IdempotencyBuilder::answer_reserve`], default 250 ms), so the function
//! always answers before Lambda kills it. A handler cut off there keeps its claim (it may have
//! reached an external service) until its lease lapses: by default a short lease extended
//! while the handler runs ([`Lease::extended`]: a quarter of the time left, at least 2 s; 5
//! minutes outside Lambda), or at least a fixed time when asked
//! ([`IdempotencyBuilder::lease_policy`] with [`Lease::at_least`]). An invocation that cannot
//! extend its claim stops its handler and commits nothing. The completion is fenced by the
//! claim's owner token: an invocation whose lease lapsed and was taken over cannot overwrite
//! the record of the one that took over (its completion fails with `LostClaim`, its effects
//! are not committed).
//!
//! | file | what it holds |
//! |------|---------------|
//! | `mod.rs` | [`Idempotency`] and its builder |
//! | `service.rs` | the flow of one event ([`Idempotency::call`]): the claim's steps ([`crate::claim`]) mapped to responses and errors; [`IdempotencyService`] |
//! | `layer.rs` | [`IdempotencyLayer`] |
//! | `payload.rs`, `key.rs` | [`Payload`], [`KeyExtractor`]; the extractors ([`KeyFormat`] is the claim's: [`crate::claim`]) |
//! | `answers.rs` | [`Answers`]: [`HttpAnswers`], [`ErrorAnswers`] |
//! | `response.rs` | [`IdempotentResponse`], [`WithEffects`] |
//! | `apigw.rs` | the API Gateway events (feature `apigw`), and [`ApiGatewayRequest`] for a handler serving both payload formats |

mod answers;
#[cfg(feature = "apigw")]
#[cfg_attr(docsrs, doc(cfg(feature = "apigw")))]
mod apigw;
pub mod key;
mod layer;
mod payload;
mod response;
mod service;

use std::sync::Arc;
use std::time::Duration;

use crate::claim::{KeyFormat, NativeFormat};

pub use answers::{Answers, ErrorAnswers, HttpAnswers, Refusal};
pub use layer::IdempotencyLayer;
pub use payload::{KeyExtractor, Payload};
pub use response::{HandlerResponse, IdempotentResponse, WithEffects};
pub use service::IdempotencyService;

#[cfg(feature = "apigw")]
pub use apigw::ApiGatewayRequest;

use crate::claim::{Lease, MissingKey, Namespace, PayloadCheck, Terms};
use crate::deadline::Clock;
use crate::retry::RetryPolicy;
use crate::store::ClaimStore;

/// The idempotency configuration over a store and a key extractor: call a handler through it
/// ([`call`](Self::call)), or wrap a service ([`layer`](Self::layer),
/// [`service`](Self::service)). Cheap to clone (an `Arc` inside).
pub struct Idempotency<St, X> {
    inner: Arc<Config<St, X>>,
}

struct Config<St, X> {
    store: St,
    extractor: X,
    namespace: Namespace,
    /// TTL, lease, completion retries and payload check: what the SQS processor has too.
    terms: Terms,
    answer_reserve: Duration,
    missing_key: MissingKey,
    format: Box<dyn KeyFormat>,
    answers: Option<Box<dyn Answers>>,
    clock: Clock,
    /// How long a request waits for one with its key still running
    /// ([`IdempotencyBuilder::wait_in_progress`]); `None`: it does not.
    wait: Option<Duration>,
    /// Concurrent requests of this process (`run_concurrent`) whose writes share an item take
    /// turns, as the processor's messages do.
    locks: crate::claim::ItemLocks,
}

impl<St, X> Clone for Idempotency<St, X> {
    fn clone(&self) -> Self {
        Idempotency {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<St, X> std::fmt::Debug for Idempotency<St, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.inner;
        f.debug_struct("Idempotency")
            .field("namespace", &c.namespace)
            .field("terms", &c.terms)
            .field("answer_reserve", &c.answer_reserve)
            .field("missing_key", &c.missing_key)
            .field("format", &c.format)
            .field("wait", &c.wait)
            .finish_non_exhaustive()
    }
}

impl<St: ClaimStore, X> Idempotency<St, X> {
    /// Every default, keys from `extractor`.
    pub fn new(store: St, extractor: X) -> Self {
        Self::builder(store, extractor).build()
    }

    /// A builder, to change defaults.
    pub fn builder(store: St, extractor: X) -> IdempotencyBuilder<St, X> {
        IdempotencyBuilder {
            config: Config {
                store,
                extractor,
                namespace: Namespace::default(),
                terms: Terms::default(),
                answer_reserve: Duration::from_millis(250),
                missing_key: MissingKey::Fail,
                format: Box::new(NativeFormat),
                answers: None,
                clock: Clock::system(),
                wait: None,
                locks: crate::claim::ItemLocks::default(),
            },
        }
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.inner.store
    }

    /// The `tower::Layer` that wraps a service in this configuration.
    pub fn layer(&self) -> IdempotencyLayer<St, X> {
        IdempotencyLayer::new(self.clone())
    }

    /// `inner` under this configuration (what [`layer`](Self::layer) makes of it).
    ///
    /// ```
    /// use lambda_runtime::LambdaEvent;
    /// use sqs_claim::MemoryStore;
    /// use sqs_claim::idempotency::{Idempotency, key};
    ///
    /// let service = Idempotency::new(MemoryStore::new(), key::payload_hash()).service(
    ///     tower::service_fn(|event: LambdaEvent<serde_json::Value>| async move {
    ///         Ok::<_, sqs_claim::BoxError>(event.payload)
    ///     }),
    /// );
    /// # let _ = service;
    /// ```
    pub fn service<Svc>(&self, inner: Svc) -> IdempotencyService<Svc, St, X> {
        IdempotencyService::new(self.clone(), inner)
    }
}

/// Builds an [`Idempotency`]. Every setting has a default; call only what you change.
pub struct IdempotencyBuilder<St, X> {
    config: Config<St, X>,
}

impl<St, X> std::fmt::Debug for IdempotencyBuilder<St, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyBuilder").finish_non_exhaustive()
    }
}

impl<St: ClaimStore, X> IdempotencyBuilder<St, X> {
    /// The key namespace (`namespace#key`). Default: the function's name (the invocation
    /// context's, else `AWS_LAMBDA_FUNCTION_NAME`), else `sqs-claim`: the
    /// [namespace rule](crate::claim#the-namespace-rule), the SQS processor's too. Set it:
    /// renaming a function must not reset deduplication, and two endpoints sharing a table
    /// need two namespaces (an `Idempotency-Key` is only unique per endpoint).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.config.namespace.set(namespace.into());
        self
    }

    /// How long a completed record answers duplicates. Default: 24 hours (Stripe keeps
    /// idempotency keys 24 hours too). Values above 100 years are treated as 100 years.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.terms.ttl = ttl;
        self
    }

    /// How long a claim is held before another invocation may take the key over. Default:
    /// [`Lease::extended`] (a quarter of the time left, at least 2 s, extended while the
    /// handler runs; 5 minutes without a deadline). See [`Lease`] for the trade-off.
    pub fn lease_policy(mut self, lease: Lease) -> Self {
        self.config.terms.lease = lease;
        self
    }

    /// Kept back from the deadline to answer in time: no request starts within it of the
    /// deadline, and every step still running there is cut off. Default: 250 ms.
    pub fn answer_reserve(mut self, reserve: Duration) -> Self {
        self.config.answer_reserve = reserve;
        self
    }

    /// Whether a duplicate key with another request is refused ([`PayloadCheck::Fail`], the
    /// default: 422 for API Gateway), replayed with a warning ([`PayloadCheck::Warn`]), or not
    /// checked ([`PayloadCheck::Off`]: no fingerprint is stored).
    pub fn payload_check(mut self, check: PayloadCheck) -> Self {
        self.config.terms.payload_check = check;
        self
    }

    /// What to do with a request without a key: refuse it ([`MissingKey::Fail`], the default:
    /// 400 for API Gateway), or run the handler without deduplication
    /// ([`MissingKey::ProcessWithoutDedup`]; its effects cannot commit without a claim).
    pub fn missing_key(mut self, policy: MissingKey) -> Self {
        self.config.missing_key = policy;
        self
    }

    /// How keys and fingerprints are written. Default: [`NativeFormat`].
    pub fn key_format(mut self, format: impl KeyFormat) -> Self {
        self.config.format = Box::new(format);
        self
    }

    /// How refused requests are answered. Default: the event type's
    /// ([`Payload::default_answers`]): [`HttpAnswers`] for API Gateway events,
    /// [`ErrorAnswers`] for others.
    pub fn answers(mut self, answers: impl Answers) -> Self {
        self.config.answers = Some(Box::new(answers));
        self
    }

    /// How a completion that failed with a transient error is retried (never past the
    /// deadline; not at all for a store whose client retries itself). Default: 3 retries from
    /// 50 ms.
    pub fn completion_retry(mut self, policy: RetryPolicy) -> Self {
        self.config.terms.completion_retry = policy;
        self
    }

    /// Waits up to `max` for a request with the same key that is still running, instead of
    /// refusing at once (409 / [`ErrorKind::InProgress`](crate::ErrorKind::InProgress)).
    /// Default: no wait.
    ///
    /// The waiting request polls the record with a claim, the first poll 50 ms after the
    /// refusal and then twice as long apart, up to 1 s, with jitter ([`RetryPolicy`]'s
    /// schedule), and never past `max` nor the invocation's time budget (deadline minus the
    /// [answer reserve](Self::answer_reserve)). When the first request completes, the waiter
    /// answers its stored response, byte for byte, as any duplicate (or 422 if its payload
    /// differs); when the first request failed and released the key, or its lease lapsed, the
    /// poll acquires the key and the waiter's own handler runs, as a retry would; when the wait
    /// runs out, it answers as without a wait (409 with `Retry-After`). Each poll is one
    /// conditional write on DynamoDB (billed as a write even when its condition fails).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sqs_claim::MemoryStore;
    /// use sqs_claim::idempotency::{Idempotency, key};
    ///
    /// let idempotency = Idempotency::builder(MemoryStore::new(), key::json_pointer("/order"))
    ///     .wait_in_progress(Duration::from_secs(5))
    ///     .build();
    /// # let _ = idempotency;
    /// ```
    pub fn wait_in_progress(mut self, max: Duration) -> Self {
        self.config.wait = (!max.is_zero()).then_some(max);
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

    /// Where the time is read. Default: [`Clock::system`]; [`Clock::tokio`] in tests with
    /// paused time.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.config.clock = clock;
        self
    }

    /// The configuration.
    pub fn build(self) -> Idempotency<St, X> {
        let mut config = self.config;
        config.namespace = config.namespace.read_env();
        Idempotency {
            inner: Arc::new(config),
        }
    }
}
