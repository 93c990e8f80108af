//! # sqs-claim
//!
//! Effectively-once processing of Amazon SQS batches in AWS Lambda.
//!
//! SQS delivers at least once: a crash, a lost acknowledgement or a timeout redelivers a message.
//! sqs-claim claims every message in a store *before* any side effect, runs your handler only if
//! the claim is won, and records the completion, fenced by the claimant's token, so a
//! redelivered message is skipped as a duplicate and a worker whose lease lapsed cannot
//! overwrite the one that took over. The Lambda gets back a partial batch response listing only
//! the messages that must be retried.
//!
//! ```no_run
//! use sqs_claim::{Message, Processor, DynamoDbStore, KeySource};
//! use tower::service_fn;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), lambda_runtime::Error> {
//!     let store = DynamoDbStore::from_env("claims").await;
//!     let handler = service_fn(|msg: Message| async move {
//!         let order: serde_json::Value = msg.json()?;
//!         // ... charge the card, passing msg.key() as the provider's idempotency key ...
//!         # let _ = order;
//!         Ok::<(), sqs_claim::Error>(())
//!     });
//!     let processor = Processor::builder(store, handler)
//!         .key(KeySource::JsonPointer("/order_id".into()))
//!         .namespace("payments")
//!         .build();
//!     lambda_runtime::run(processor).await
//! }
//! ```
//!
//! ## The data path, and where each step lives
//!
//! Two front doors, the SQS processor and the idempotency layer, hang from one claim
//! ([`claim`]): its policies and the steps of one attempt at a key are written once there.
//! The modules are layered one way: [`store`] (the contract) → `deadline` (the time budget)
//! → [`claim`] → [`processor`] / [`idempotency`] → [`lambda`] (tests/suite/test_layers.rs keeps it
//! so).
//!
//! | step | module |
//! |------|--------|
//! | event in → records → a **plan**: owned items, each to claim, to fail at once, or to follow the first copy of its key in the batch; FIFO detection and lanes | [`processor`] (`plan.rs`) |
//! | body → **payload**: the envelope AWS wrapped it in (SNS, EventBridge, S3 notification) opened once, at planning; the key, the fingerprint and [`Message::payload`] read what it wraps | `envelope` ([`Envelope`]), [`processor`] (`config.rs`) |
//! | record → idempotency key: where it comes from ([`KeySource`]), how it is stored ([`KeyFormat`](claim::KeyFormat): `namespace#key`, or Powertools' keys), under which namespace ([the namespace rule](claim#the-namespace-rule)) | `key`, [`claim`] (`format.rs`, `policy.rs`) |
//! | the time budget: when nothing new starts (deadline − margin), and the **hard stop where the deadline cuts work off** (deadline − answer reserve: `Budget::bounded`, which every store step and the handler race) | `deadline` |
//! | **run**: standard (bounded concurrency) and FIFO (a lane per group) schedulers | [`processor`] (`run.rs`) |
//! | **claim**: one conditional write; a **duplicate is detected here**, when the store answers [`Claim::Completed`](store::Claim::Completed) and the stored record is judged against the payload ([`PayloadCheck`]): duplicate, or payload differs (copies of one key inside a batch are matched earlier, at planning: the later copy waits for the first's outcome) | [`claim`] (`attempt.rs`), [`store`] (contract) and its adapters |
//! | how long the claim is held ([`Lease`]), what a missing key means ([`MissingKey`]) | [`claim`] |
//! | handler: a `tower::Service<Message>`; errors, panics and timeouts caught per message | [`claim`] (`attempt.rs`, the guards), [`processor`] (`run.rs`), `message` ([`Message`]) |
//! | complete (with the handler's atomic effects, retried under the one [`RetryPolicy`]) or release, fenced by the owner token | [`claim`] (`attempt.rs`), [`store`] |
//! | **one-shot** (`Processor::one_shot`): effects computed first, then one atomic write claims the key completed with them ([`ClaimStore::claim_completed`]) | [`processor`] (`one_shot.rs`), [`claim`], [`store`] |
//! | after the run: a failure on its last allowed receive, or a permanent one at once, sent with its reason to a failure queue (`FailureDestination`); each message reported for retry given its own visibility timeout: a backoff ([`Backoff`]), the handler's delay ([`Retry`]), a claim's lease end (`Redelivery`, `ChangeMessageVisibilityBatch`) | [`processor`] (`after.rs`: the steps after the batch, [`processor::AfterBatch`]; `failure_destination.rs`, `redelivery.rs`: feature `sqs`), `retry` |
//! | outcome per message → **a failure becomes an `itemIdentifier`** in [`BatchReport::response`] | `outcome` ([`Outcome`], [`BatchReport`]) |
//! | publishing to SQS with derived deduplication ids | `publish` (feature `sqs`) |
//! | per-batch metrics (counts, dedup hit rate, store latencies) to a sink, CloudWatch EMF lines | [`metrics`] |
//! | a `tracing` set-up that follows Lambda's log controls (`AWS_LAMBDA_LOG_FORMAT`, `AWS_LAMBDA_LOG_LEVEL`) | `logging` (feature `logging`) |
//! | a consumer's configuration from the `SQS_CLAIM_*` environment variables, the store URLs (`dynamodb:TABLE`, `postgres://...`, `tiered:...`), the table of the variables | `settings` (feature `settings`) |
//! | a consumer's `main`: serve Lambda (`run_concurrent` under `AWS_LAMBDA_MAX_CONCURRENCY`), or process `--event FILE` locally and print the report | [`lambda`] |
//! | the keys a consumer would claim for each record of a captured batch (SQS, Kinesis, DynamoDB Streams), for an operator's tool: `ProcessorBuilder::record_keys` (feature `admin`) | `inspect` |
//! | **any other event** (API Gateway, webhooks, direct invocations): key → claim → handler → the response stored with the completion and **replayed byte for byte** for a duplicate; 409 / 422 / 400 answers | [`idempotency`] (a `tower::Layer`) over [`claim`], served by [`lambda::serve`] |
//!
//! ## Stores
//!
//! All stores keep one contract, written once in [`store`] and proven for each by
//! the conformance suite (`sqs_claim_testkit::conformance`, the test kit's feature `store`)
//! against the real server:
//! [`MemoryStore`] (unit tests), `DynamoDbStore` (feature `dynamodb`, the production default),
//! `SqliteStore` (feature `sqlite`), `RedisStore` and `TieredStore` (feature `redis`),
//! `PostgresStore` (feature `postgres`), each in its module under [`store`].
//! [`CachedStore`](store::CachedStore) wraps any of them with a bounded in-process cache of
//! completed keys: a warm process answers a duplicate without a request.
//! [`BoxStore`](store::BoxStore) is any of them as one type (effects erased to
//! [`AnyEffect`](store::AnyEffect)), for a store chosen at run time, as tower's `BoxService`
//! is for services.
//!
//! ## Feature flags
//!
//! | feature | default | what it adds |
//! |---------|---------|--------------|
//! | `dynamodb` | yes | `DynamoDbStore`, with atomic effects via `TransactWriteItems` |
//! | `sqs` | no | the SQS publisher, the failure destination, per-message redelivery delays |
//! | `sqlite` | no | the embedded SQLite store (local runs, the CLI) |
//! | `redis` | no | the Redis store and the tiered store |
//! | `postgres` | no | the PostgreSQL store |
//! | `logging` | no | `logging::init()`: a `tracing-subscriber` set-up for Lambda (flat JSON or text, Lambda's log level) |
//! | `idempotency` | no (`apigw` turns it on) | the [`idempotency`] layer: effectively-once handling of any Lambda event that is not an SQS batch (a `tower::Layer`; the response stored and replayed to a duplicate) |
//! | `admin` | no | what an operator's tool reads of a consumer without running it: `ProcessorBuilder::record_keys` and `record_claims` (the keys and fingerprints it would claim for a captured batch), `processor::RecordClaim`, `claim::PayloadVerdict`; the settings' key-layout helpers, `markdown_table`, `Variable::find`, `Settings::cli_store`, the command-line store flags `settings::StoreFlags`, `postgres::check_error`; the `sqs-claim` command line turns it on |
//! | `apigw` | no | the API Gateway events (REST and HTTP API v2) for the [`idempotency`] layer: the `Idempotency-Key` header, JSON-body keys, HTTP 409/422/400 answers |
//! | `powertools` | no | `powertools`: keys and payload hashes as Powertools for AWS Lambda (Python) computes them (`PowertoolsFormat`, a [`KeyFormat`](claim::KeyFormat) for either front door), to share its table (docs/powertools.md) |
//! | `s3` | no | [`large`]: payloads the SQS and SNS extended clients offload to S3, read (the object is the payload the key, the payload check and the handler see) and optionally deleted once done; with `sqs`, `Publisher::offload_to` writes them (docs/large-messages.md) |
//! | `settings` | no | `settings`: a consumer's settings from the `SQS_CLAIM_*` variables (`Settings`), the store URLs (`StoreUrl`), the table of the variables (`VARIABLES`); turns on `dynamodb` |
//! | `streams` | no | `stream`: Kinesis Data Streams, DynamoDB Streams and Kafka (Amazon MSK, self-managed) consumers on the same claim core, in order per shard (partition), answering each source's partial batch response (docs/streams.md) |
//! | `kafka-schema` | no (`kafka-avro`, `kafka-protobuf` turn it on) | `stream::schema`: a Kafka consumer's value and key decoders, plain or framed by a schema registry (Confluent's, AWS Glue's, zlib) or already decoded by the mapping's registry integration (docs/streams.md); turns on `streams` |
//! | `kafka-avro` | no | `stream::schema::Decoder::avro`: Kafka values and keys in Avro, under the team's writer schema (`apache-avro` parses it) |
//! | `kafka-protobuf` | no | `stream::schema::Decoder::protobuf`: Kafka values and keys of the team's `prost` message |
//! | `aws` | with `dynamodb`, `sqs` or `s3` | `aws::load_config()`: the AWS configuration with an HTTPS client on bundled root certificates (no scan of the OS store at init; `SQS_CLAIM_TLS_ROOTS=native` to use it) |
//!
//! ## Observability
//!
//! Every batch runs in a `batch` span (`request_id`, `xray_trace_id`, `records`, then the counts)
//! and every message's work in a `message` span (`message_id`, `key`, `group`, `receive_count`,
//! `trace_header`: the producer's `AWSTraceHeader`; never the body), so a handler's own
//! `tracing` events carry them. `xray_trace_id` is the invocation's own
//! (`Context::xray_trace_id`), right when several invocations run at once (`run_concurrent`),
//! where the process-wide `_X_AMZN_TRACE_ID` is whichever invocation set it last. [`ProcessorBuilder::metrics`] sends
//! each batch's [`metrics::BatchMetrics`] to a sink: [`metrics::Emf`] for CloudWatch.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs link to items of optional features (`large`, `settings`, `publish`, the SQS
// after-batch steps, `ApiGatewayRequest`); a build without them would warn of every such link.
// docs.rs and `make lint` build the docs with every feature and deny broken links there.
#![cfg_attr(
    not(all(
        feature = "s3",
        feature = "sqs",
        feature = "settings",
        feature = "apigw"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

#[cfg(feature = "aws")]
pub mod aws;
pub mod claim;
mod deadline;
mod envelope;
mod error;
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub mod idempotency;
#[cfg(feature = "admin")]
mod inspect;
mod key;
pub mod lambda;
#[cfg(feature = "s3")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3")))]
pub mod large;
#[cfg(feature = "logging")]
#[cfg_attr(docsrs, doc(cfg(feature = "logging")))]
pub mod logging;
mod message;
pub mod metrics;
mod outcome;
mod pointer;
#[cfg(feature = "powertools")]
#[cfg_attr(docsrs, doc(cfg(feature = "powertools")))]
pub mod powertools;
pub mod processor;
#[cfg(feature = "sqs")]
pub mod publish;
mod record;
mod retry;
#[cfg(feature = "settings")]
#[cfg_attr(docsrs, doc(cfg(feature = "settings")))]
pub mod settings;
pub mod store;
#[cfg(feature = "streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "streams")))]
pub mod stream;

pub use claim::{Lease, MissingKey, PayloadCheck};
pub use deadline::Clock;
pub use envelope::Envelope;
pub use error::{BoxError, Error, ErrorKind};
pub use key::{KeySource, sha256_hex};
pub use message::Message;
pub use outcome::{
    BatchReport, Counts, Failure, FailureKind, ItemReport, NotStarted, Outcome, Step,
};
pub use processor::{FifoMode, OneShot, Processor, ProcessorBuilder, StoreUnavailable};
pub use retry::{Backoff, Retry, RetryPolicy};
pub use store::{ClaimStore, Effects, MemoryStore};

#[cfg(feature = "dynamodb")]
pub use store::dynamodb::{DynamoDbSettings, DynamoDbStore};

#[cfg(feature = "sqs")]
pub use processor::{FailureDestination, Redelivery};
#[cfg(feature = "sqs")]
pub use publish::{Outgoing, Publisher};
#[cfg(feature = "postgres")]
pub use store::postgres::{PgEffect, PostgresStore};
#[cfg(feature = "redis")]
pub use store::redis::{RedisEffect, RedisStore};
#[cfg(feature = "sqlite")]
pub use store::sqlite::{SqlEffect, SqlValue, SqliteStore};
#[cfg(feature = "redis")]
pub use store::tiered::TieredStore;

// The Rust blocks of the README and of docs/ compile as doctests (`cargo test --doc`), each
// file under the features its text names: `scripts/check-doc-features.py` builds each page with
// those features alone (`--no-default-features`), so a block that needs another feature fails
// there (under `--all-features` every block compiles, whatever it needs).
#[cfg(all(doctest, feature = "dynamodb"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
#[cfg(all(doctest, feature = "dynamodb"))]
#[doc = include_str!("../docs/library.md")]
pub struct LibraryDoctests;
#[cfg(all(doctest, feature = "sqs"))]
#[doc = include_str!("../docs/fifo.md")]
pub struct FifoDoctests;
#[cfg(all(doctest, feature = "apigw", feature = "sqlite"))]
#[doc = include_str!("../docs/idempotency.md")]
pub struct IdempotencyDoctests;
#[cfg(all(
    doctest,
    feature = "redis",
    feature = "postgres",
    feature = "dynamodb",
    feature = "sqlite",
    feature = "settings"
))]
#[doc = include_str!("../docs/stores.md")]
pub struct StoresDoctests;
#[cfg(all(
    doctest,
    feature = "dynamodb",
    feature = "powertools",
    feature = "idempotency"
))]
#[doc = include_str!("../docs/powertools.md")]
pub struct PowertoolsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/events.md")]
pub struct EventsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/retries.md")]
pub struct RetriesDoctests;
#[cfg(all(
    doctest,
    feature = "streams",
    feature = "dynamodb",
    feature = "kafka-avro",
    feature = "kafka-protobuf"
))]
#[doc = include_str!("../docs/streams.md")]
pub struct StreamsDoctests;
#[cfg(all(doctest, feature = "s3", feature = "sqs"))]
#[doc = include_str!("../docs/large-messages.md")]
pub struct LargeMessagesDoctests;

/// The event and response types, re-exported so users need not pin `aws_lambda_events`.
pub mod events {
    pub use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
    #[cfg(feature = "streams")]
    pub use aws_lambda_events::streams::{DynamoDbEventResponse, KinesisEventResponse};
}

/// The DynamoDB SDK `DynamoDbStore` is built on, re-exported so a store can be given a client of
/// the same version.
#[cfg(feature = "dynamodb")]
pub use aws_sdk_dynamodb;

/// The Redis client `RedisStore` is built on, re-exported so a store can be given a connection
/// of the same version.
#[cfg(feature = "redis")]
pub use redis;

/// The PostgreSQL client `PostgresStore` is built on (its `ToSql` binds [`PgEffect`]
/// parameters), re-exported so callers use the same version.
#[cfg(feature = "postgres")]
pub use tokio_postgres;

/// The connection pool `PostgresStore` is built on, re-exported for building a pool of the same
/// version.
#[cfg(feature = "postgres")]
pub use deadpool_postgres;

/// The SQS SDK this crate's publisher is built on, re-exported so a `Publisher` can be given a
/// client of the same version.
#[cfg(feature = "sqs")]
pub use aws_sdk_sqs;

/// The S3 SDK the large-message reader and the publisher's offloading are built on,
/// re-exported so they can be given a client of the same version.
#[cfg(feature = "s3")]
pub use aws_sdk_s3;

/// AWS configuration loading, re-exported for building SDK clients of the same version.
#[cfg(any(feature = "dynamodb", feature = "sqs", feature = "s3"))]
pub use aws_config;
