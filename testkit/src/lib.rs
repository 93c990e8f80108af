//! A test kit for AWS Lambda SQS consumers: what the tests of `sqs-claim` lean on, published so
//! you can test your own consumer the same way (as `tower-test` and `tokio-test` do for theirs).
//!
//! | module | what it gives you |
//! |--------|-------------------|
//! | [`sqs`] | SQS events as Lambda delivers them: standard, FIFO (`.fifo` ARN, `MessageGroupId`, `SequenceNumber`, `MessageDeduplicationId`), fair queues (standard ARN with `MessageGroupId`), redeliveries (`ApproximateReceiveCount`); as JSON, as `SqsEvent`, as `LambdaEvent<SqsEvent>`; and the ids of a partial batch response |
//! | [`envelope`] | bodies AWS writes when a queue is fed by another service, in AWS's documented shapes: an SNS notification (raw delivery off) and SNS's subscription confirmation, an EventBridge event, an S3 event notification and S3's test event |
//! | [`runtime`] | a fake Lambda Runtime API on 127.0.0.1: run your real Lambda binary against it ([`runtime::LambdaProcess`]), hand it invocations with deadlines, several in flight, and read what it posts back |
//! | [`conflict`] | DynamoDB's transaction-conflict rule in front of DynamoDB Local (which queues overlapping transactions instead): a proxy that cancels a `TransactWriteItems` overlapping another in flight on an item, with DynamoDB's cancellation reasons, and refuses single-item writes on it |
//! | [`fault`] | a TCP fault proxy in front of a real server (DynamoDB Local, PostgreSQL, Redis): healthy, stalled, dark, answers dropped, reset, switched at run time or after N bytes |
//! | [`silent`] | endpoints that accept and never answer, that close after the first request, and a PostgreSQL that goes quiet after its handshake: timeouts without a proxy |
//! | [`emf`] | a checker for CloudWatch Embedded Metric Format lines, after the specification's rules |
//! | [`local`] | where the local stand-ins are (DynamoDB Local, Redis, PostgreSQL, from the environment), unique names for fresh tables, and (feature `dynamodb`) a DynamoDB Local client |
//! | `store` | (feature `store`) `Spy`: a claim store in front of another that counts each call and lets a test delay, hang or fail it, or lose its answer |
//! | `conformance` | (feature `store`) the store contract's test suite: run it against your own `ClaimStore` on its real server |
//! | `strategies` | (feature `proptest`) generators of hostile bodies and SQS-shaped records, and a marker no error text may ever contain |
//!
//! # Testing a consumer
//!
//! ```
//! use sqs_claim_testkit::sqs::{self, fifo, record};
//!
//! // A standard batch in which m-2 is a redelivery of an earlier receive.
//! let batch = [record("m-1", r#"{"order_id":"o-1"}"#), record("m-2", "{}").receive_count(2)];
//! let event = sqs::lambda_event(&batch);
//! assert_eq!(event.payload.records.len(), 2);
//!
//! // A FIFO batch: one group, in order.
//! let batch = [fifo("f-1", "acct-1", "{}"), fifo("f-2", "acct-1", "{}")];
//! let json = sqs::event_json(&batch);
//! assert_eq!(json["Records"][1]["attributes"]["MessageGroupId"], "acct-1");
//! ```
//!
//! Without the `store` feature the kit does not depend on `sqs-claim`: the events are
//! `aws_lambda_events`' types and the fake runtime speaks to any `lambda_runtime` client, so it
//! serves any Rust consumer.
//!
//! # Features
//!
//! | feature | default | adds |
//! |---------|---------|------|
//! | `proptest` | no | `strategies` |
//! | `dynamodb` | no | [`local::dynamodb_client`](local) (`aws-sdk-dynamodb`) |
//! | `store` | no | `store` and `conformance` (`sqs-claim`, without its default features) |
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod conflict;
#[cfg(feature = "store")]
#[cfg_attr(docsrs, doc(cfg(feature = "store")))]
pub mod conformance;
pub mod emf;
pub mod envelope;
pub mod fault;
pub mod local;
pub mod runtime;
pub mod silent;
pub mod sqs;
#[cfg(feature = "store")]
#[cfg_attr(docsrs, doc(cfg(feature = "store")))]
pub mod store;
#[cfg(feature = "proptest")]
#[cfg_attr(docsrs, doc(cfg(feature = "proptest")))]
pub mod strategies;
pub mod stream;
