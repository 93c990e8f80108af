//! Amazon Kinesis Data Streams, DynamoDB Streams and Kafka (Amazon MSK, self-managed Apache
//! Kafka) consumers, on the same claim core as the SQS [`Processor`]: effectively once, in
//! order per shard (per partition for Kafka).
//!
//! A stream consumer runs the SQS [`Processor`]'s engine on its source's records: each source
//! has an [`Adapter`] ([`KinesisSource`], [`DynamoDbStreamsSource`], [`KafkaSource`]) that
//! reads its event into the engine's records (an identifier, a group: the shard or
//! topic-partition, the payload, its attributes, its [`Position`]) and names a failed record in
//! its own partial batch response; [`Consumer`] is the one consumer of any adapter, and
//! [`Kinesis`], [`DynamoDbStreams`] and [`Kafka`] name it per source. Each record is handed to
//! your handler as a [`Message`], claimed under its key, run, completed (with the handler's
//! effects, one-shot or not) under the same deadline, metrics, spans and fail-fast on a store
//! gone dark as an SQS batch. What differs is the response:
//!
//! * **Order and checkpoints.** Records run in batch order per shard, shards concurrently; the
//!   first record of a shard that does not succeed stops its shard (the records after it are
//!   not started), and its sequence number, the lowest of the shard's failures, is the one
//!   reported in `batchItemFailures`. Lambda checkpoints there and retries that record and
//!   everything after it. A replayed record that already completed is a duplicate: skipped.
//! * **Retries are the event source mapping's** (`MaximumRetryAttempts`,
//!   `MaximumRecordAgeInSeconds`, `BisectBatchOnFunctionError`, its on-failure destination):
//!   [`Kinesis::new`] and [`DynamoDbStreams::new`] refuse a builder with a failure destination
//!   or a redelivery (feature `sqs`), which only a queue has.
//! * **Keys.** The builder's [`KeySource`](crate::KeySource) reads the record as the consumer
//!   hands it over: [`KeySource::MessageId`](crate::KeySource::MessageId) (the default) is the
//!   record's `eventID` (Kinesis: `shardId-…:sequence number`; DynamoDB Streams: its event id);
//!   [`KeySource::JsonPointer`](crate::KeySource::JsonPointer) points into the payload
//!   (Kinesis: the base64-decoded `data`; DynamoDB Streams: the record itself, e.g.
//!   `/dynamodb/NewImage/order_id/S`); for DynamoDB Streams,
//!   `KeySource::MessageAttribute("dynamodb:keys".into())` is the item's keys with the
//!   sequence number (`{"pk":{"S":"a"}}@4000…`, keys in sorted order).
//! * **Payload fingerprints.** A key found completed is judged by the builder's
//!   [`PayloadCheck`](crate::PayloadCheck) against the fingerprint of the record's **payload**,
//!   never of the record around it (whose `eventID`, sequence number and times differ between
//!   any two records): Kinesis' decoded `data`; Kafka's decoded `value` (not its key, headers
//!   or timestamp); for DynamoDB Streams the item's image: `NewImage` (for a `REMOVE`,
//!   `OldImage`) without the item's key attributes, else the `Keys`, as canonical JSON, a
//!   `REMOVE` told from an `INSERT` or `MODIFY`. So a producer that writes the same event twice
//!   (under another table key, say), keyed by a pointer into the payload, is a duplicate and
//!   skipped; the same key with another payload fails under the default `PayloadCheck::Fail`.
//! * **Decoding.** A record whose `data` is not base64 of UTF-8 text (Kinesis) or that is not
//!   a stream record (DynamoDB Streams) fails alone, never the batch: as the first failure of
//!   its shard it stops the shard, so it is retried (and at last given up on by the mapping)
//!   with the records after it. A body that is not the JSON the handler wants fails its record
//!   the same way ([`Message::json`]). Only a record without a sequence
//!   number fails the whole invocation: it cannot be named in the response.
//!
//! **Kafka** ([`Kafka`]) works the same way with a topic-partition for a shard and an offset
//! for a sequence number:
//!
//! * the event's `records` map each `TOPIC-PARTITION` to its records; each partition runs in
//!   offset order, the partitions concurrently, and a partition's first record that does not
//!   succeed stops it;
//! * the response names that record by its topic-partition and offset,
//!   `{"batchItemFailures": [{"itemIdentifier": {"partition": "orders-3", "offset": 42}}]}`,
//!   one entry per failed partition (the shape Powertools for AWS Lambda (Python) sends;
//!   Lambda commits each partition's offset below the one named and sends the rest again);
//! * [`Message::id`] is `TOPIC-PARTITION@OFFSET` (`orders-eu-3@42`), so the default key
//!   ([`KeySource::MessageId`](crate::KeySource::MessageId)) is the topic, partition and
//!   offset; [`KeySource::JsonPointer`](crate::KeySource::JsonPointer) points into the
//!   base64-decoded `value`;
//! * [`Message::body`] is the decoded `value`; a `null` value (a tombstone) is an empty body;
//!   a value that is not base64 of UTF-8 text fails its record alone (and stops its
//!   partition), never the batch; with feature `kafka-schema` (`kafka-avro`,
//!   `kafka-protobuf`), `Kafka::value` and `Kafka::key` decode Avro, Protobuf or framed JSON
//!   (Confluent's and Glue's registries) to JSON text first (`schema`);
//! * [`Message::group_id`] is `TOPIC-PARTITION`; [`Message::sqs`]'s attributes hold `Topic`,
//!   `Partition`, `Offset`, `Timestamp`, `TimestampType` and the record's key (`Key`, decoded,
//!   when it is UTF-8 text; else `KeyBase64`, as sent); its message attributes hold the
//!   headers (the first of each name), as `String` where the bytes are UTF-8, `Binary` where
//!   not, so `KeySource::MessageAttribute("<header>")` can key a record by a header;
//! * the whole invocation fails only when a record has no offset or no topic-partition (it
//!   could not be named).
//!
//! What the handler sees (Kinesis, DynamoDB Streams): [`Message::id`] is the `eventID`,
//! [`Message::group_id`] the shard (Kinesis, from the `eventID`) or
//! the stream's ARN (DynamoDB Streams, whose records do not name their shard: a Lambda batch
//! comes from one shard), [`Message::body`] the payload above, and
//! [`Message::sqs`] the record's metadata as attributes
//! (`SequenceNumber`, `PartitionKey` and `ApproximateArrivalTimestamp` for Kinesis,
//! `SequenceNumber` and `eventName` for DynamoDB Streams). [`Message::position`] gives the
//! record's [`Position`]: its sequence number (Kafka: its topic-partition and offset).
//!
//! [`Kinesis::process`] (and each consumer's `Service::Response`) is an [`Answer`]: it
//! serializes as the source's partial batch response and carries the batch's report, which
//! [`lambda::serve`](crate::lambda::serve) prints on stderr when run locally (each failed
//! record with why).
//!
//! ```no_run
//! use sqs_claim::stream::Kinesis;
//! use sqs_claim::{DynamoDbStore, Message, Processor};
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     let store = DynamoDbStore::from_env("claims").await;
//!     let handler = tower::service_fn(|msg: Message| async move {
//!         let order: serde_json::Value = msg.json()?; // the record's decoded `data`
//!         # let _ = order;
//!         Ok::<(), sqs_claim::Error>(())
//!     });
//!     let builder = Processor::builder(store, handler).namespace("orders-stream");
//!     let consumer = Kinesis::new(builder).expect("a stream consumer's settings");
//!     sqs_claim::lambda::serve(consumer).await
//! }
//! ```
//!
//! See docs/streams.md for the event source mapping's settings (`ReportBatchItemFailures`,
//! `BisectBatchOnFunctionError`, an on-failure destination) and the claims' TTL.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use aws_lambda_events::streams::{DynamoDbEventResponse, KinesisEventResponse};
use base64::Engine as _;
use lambda_runtime::LambdaEvent;
use serde::Serialize;
use serde_json::Value;
use tower::Service;

#[cfg(doc)]
use crate::message::Message; // the module docs name it
use crate::outcome::BatchReport;
use crate::processor::{Handler, Processor, ProcessorBuilder};
use crate::record::Record;
use crate::store::ClaimStore;
use crate::{Error, ErrorKind};

#[cfg(feature = "kafka-avro")]
mod avro;
mod dynamodb;
mod kafka;
mod kinesis;
#[cfg(feature = "kafka-schema")]
pub mod schema;

pub use crate::record::Position;
pub use dynamodb::DynamoDbStreamsSource;
pub use kafka::KafkaSource;
pub use kinesis::KinesisSource;

/// A Kinesis Data Streams consumer: a `tower::Service` for Lambda (serve it with
/// [`lambda::serve`](crate::lambda::serve)) answering `{"batchItemFailures":
/// [{"itemIdentifier": "<sequence number>"}]}`. See the [module docs](self).
pub type Kinesis<S, H> = Consumer<KinesisSource, S, H>;

/// A DynamoDB Streams consumer: a `tower::Service` for Lambda (serve it with
/// [`lambda::serve`](crate::lambda::serve)) answering `{"batchItemFailures":
/// [{"itemIdentifier": "<sequence number>"}]}`. See the [module docs](self).
pub type DynamoDbStreams<S, H> = Consumer<DynamoDbStreamsSource, S, H>;

/// An Amazon MSK or self-managed Apache Kafka consumer: a `tower::Service` for Lambda (serve
/// it with [`lambda::serve`](crate::lambda::serve)) answering `{"batchItemFailures":
/// [{"itemIdentifier": {"partition": "<topic>-<partition>", "offset": <offset>}}]}` (as a
/// `serde_json::Value`: the events crate has no type for it). See the [module docs](self).
pub type Kafka<S, H> = Consumer<KafkaSource, S, H>;

mod sealed {
    use crate::processor::stream_source::Source;
    use crate::record::Record;

    /// What the engine needs of an adapter beyond its response; only this crate's sources
    /// have it.
    pub trait Read {
        /// Which source it is: what of a record its payload fingerprint covers.
        const SOURCE: Source;

        /// The event's records, in the order the engine runs them (per group), each with its
        /// group and position; `Err` only when the event cannot be read or a record cannot be
        /// named in the response (the whole invocation then fails).
        fn read(&self, event: serde_json::Value) -> Result<Vec<Record>, crate::Error>;
    }
}

/// A stream source, as the engine reads it: an adapter reads the source's event into the
/// engine's records (each with its group, the shard or topic-partition, and its [`Position`])
/// and says what of a record its payload is; its [`respond`](Self::respond) names the failed
/// records in the source's partial batch response. Implemented by [`KinesisSource`],
/// [`DynamoDbStreamsSource`] and [`KafkaSource`] only (sealed); [`Consumer`] runs any of them.
pub trait Adapter: sealed::Read + Clone + Default + Send + Sync + 'static {
    /// The partial batch response Lambda gets from this source's consumer.
    type Response: Serialize + Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static;

    /// The response naming each failed record by its position: for each shard (partition)
    /// that did not finish, its first record that did not succeed.
    fn respond(failed: Vec<Position>) -> Self::Response;
}

/// A stream consumer of the source `A` ([`Kinesis`], [`DynamoDbStreams`], [`Kafka`]): a
/// `tower::Service` for Lambda (serve it with [`lambda::serve`](crate::lambda::serve)) that
/// runs the processor's engine in order per shard and answers the source's partial batch
/// response. See the [module docs](self).
pub struct Consumer<A, S, H> {
    processor: Processor<S, H>,
    source: A,
}

impl<A: Clone, S, H> Clone for Consumer<A, S, H> {
    fn clone(&self) -> Self {
        Consumer {
            processor: self.processor.clone(),
            source: self.source.clone(),
        }
    }
}

impl<A: Adapter, S, H> std::fmt::Debug for Consumer<A, S, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("source", &A::SOURCE.name())
            .field("processor", &self.processor)
            .finish()
    }
}

impl<A, S, H> Consumer<A, S, H>
where
    A: Adapter,
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    /// The consumer of the processor `builder` describes (store, handler, key, namespace,
    /// one-shot, TTL, lease, metrics, ...), run in order per shard (per partition for Kafka).
    ///
    /// Fails with [`ErrorKind::Config`] when the builder has a failure destination or a
    /// redelivery: a stream's retries are its event source mapping's.
    pub fn new(builder: ProcessorBuilder<S, H>) -> Result<Self, Error> {
        Ok(Consumer {
            processor: builder.build_stream(A::SOURCE)?,
            source: A::default(),
        })
    }

    /// Processes one invocation's batch: the partial batch response, each shard's
    /// (partition's) first record that did not succeed named as the source's response names
    /// a record (see the [module docs](self)).
    ///
    /// Fails as a whole (Lambda retries the batch) only when the event has no list of records
    /// or a record cannot be named (no sequence number; Kafka: no offset).
    ///
    /// The [`Answer`] serializes as the response Lambda gets ([`Answer::into_response`] gives
    /// it) and carries the batch's report, each record's outcome and why it failed
    /// ([`Answer::report`]), which [`lambda::serve`](crate::lambda::serve) prints on stderr
    /// when run locally.
    pub async fn process(&self, event: LambdaEvent<Value>) -> Result<Answer<A::Response>, Error> {
        let (payload, context) = event.into_parts();
        let records = self.source.read(payload)?;
        // Each record's group and position, in batch order, before the records move in.
        let named: Vec<(Option<String>, Option<Position>)> = records
            .iter()
            .map(|r| (r.group.clone(), r.position.clone()))
            .collect();
        let report = self.processor.process_records(records, context).await?;
        // The report keeps the batch's order: the first item of a shard that did not succeed
        // is the shard's first failure (the processor started nothing after it in that shard).
        debug_assert_eq!(report.items().len(), named.len(), "one outcome per record");
        let mut failed = Vec::new();
        let mut stopped: HashSet<Option<String>> = HashSet::new();
        for (item, (group, position)) in report.items().iter().zip(named) {
            if !item.outcome.is_success() && stopped.insert(group) {
                // Every adapter gives each record its position (or fails the invocation
                // reading it): a failure the response cannot name must not pass for success.
                failed.push(position.ok_or_else(|| {
                    invalid(&format!("record {} has no position", item.message_id))
                })?);
            }
        }
        Ok(Answer {
            response: A::respond(failed),
            report,
        })
    }
}

/// How a Kafka consumer decodes a record's value and key (feature `kafka-schema`; see
/// [`schema`]).
#[cfg(feature = "kafka-schema")]
impl<S, H> Consumer<KafkaSource, S, H> {
    /// Decodes each record's value with `decoder` (JSON, Avro, Protobuf; plain or framed by a
    /// schema registry) and hands it over as JSON text: [`Message::body`], what
    /// [`Message::json`] reads, what a [`KeySource::JsonPointer`](crate::KeySource::JsonPointer)
    /// points into and what the payload check fingerprints. A value that does not decode
    /// fails its record alone, permanently, naming its topic, partition and offset (a `null`
    /// value, a tombstone, is an empty body, not decoded).
    ///
    /// ```
    /// # #[cfg(feature = "kafka-avro")]
    /// # async fn example() -> Result<(), sqs_claim::Error> {
    /// use sqs_claim::stream::Kafka;
    /// use sqs_claim::stream::schema::Decoder;
    /// use sqs_claim::{KeySource, MemoryStore, Message, Processor};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Payment { payment_id: String, cents: i64 }
    ///
    /// let schema = r#"{"type": "record", "name": "Payment", "fields": [
    ///     {"name": "payment_id", "type": "string"}, {"name": "cents", "type": "long"}]}"#;
    /// let handler = tower::service_fn(|msg: Message| async move {
    ///     let payment: Payment = msg.json()?; // the Avro value, decoded
    ///     # let _ = (payment.payment_id, payment.cents);
    ///     Ok::<(), sqs_claim::Error>(())
    /// });
    /// let store = MemoryStore::new();
    /// let builder = Processor::builder(store, handler)
    ///     .key(KeySource::JsonPointer("/payment_id".into()));
    /// let consumer = Kafka::new(builder)?.value(Decoder::avro(schema)?);
    /// # let _ = consumer;
    /// # Ok(()) }
    /// ```
    pub fn value(mut self, decoder: schema::Decoder) -> Self {
        self.source.value = Some(decoder);
        self
    }

    /// Decodes each record's key with `decoder` and hands it over as JSON text in the `Key`
    /// attribute ([`Message::sqs`]'s `attributes`). A key that does not decode fails its
    /// record alone, permanently. Without, the key is its text when it is UTF-8 (`Key`), else
    /// its base64 as sent (`KeyBase64`).
    pub fn key(mut self, decoder: schema::Decoder) -> Self {
        self.source.key = Some(decoder);
        self
    }
}

impl<A, S, H> Service<LambdaEvent<Value>> for Consumer<A, S, H>
where
    A: Adapter,
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    type Response = Answer<A::Response>;
    type Error = lambda_runtime::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Answer<A::Response>, lambda_runtime::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Value>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.process(event).await?) })
    }
}

/// A stream consumer's answer to one invocation ([`Kinesis::process`], the consumers'
/// `Service::Response`): the partial batch response Lambda gets, with the batch's report.
///
/// It serializes as the response alone (`{"batchItemFailures": [...]}`), so Lambda, and
/// `serde_json::to_value(answer)`, see exactly the source's response;
/// [`into_response`](Self::into_response) gives that response as its type
/// ([`KinesisEventResponse`], [`DynamoDbEventResponse`], Kafka's `serde_json::Value`). The
/// [`report`](Self::report) says what happened to each record and why a record failed:
/// [`lambda::serve`](crate::lambda::serve) prints it on stderr when run locally, as
/// [`lambda::run`](crate::lambda::run) prints an SQS batch's ([`summary`](crate::lambda::summary)).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<R> {
    response: R,
    report: BatchReport,
}

impl<R> Answer<R> {
    /// The partial batch response, as Lambda gets it.
    pub fn response(&self) -> &R {
        &self.response
    }

    /// The partial batch response, as Lambda gets it.
    pub fn into_response(self) -> R {
        self.response
    }

    /// Every record's outcome, in the order the consumer ran them through the processor
    /// (Kafka: partition by partition, each in offset order), each named by its
    /// [`Message::id`] (the `eventID`; Kafka's `TOPIC-PARTITION@OFFSET`). A record after its
    /// shard's first failure is `NotStarted`.
    pub fn report(&self) -> &BatchReport {
        &self.report
    }
}

/// The response alone: what Lambda gets.
impl<R: Serialize> Serialize for Answer<R> {
    fn serialize<Se: serde::Serializer>(&self, serializer: Se) -> Result<Se::Ok, Se::Error> {
        self.response.serialize(serializer)
    }
}

/// The report of a stream consumer's answer, when `response` is one ([`Answer`] of any of
/// the consumers): what [`lambda::serve`](crate::lambda::serve) prints locally.
pub(crate) fn report_of<R: 'static>(response: &R) -> Option<&BatchReport> {
    let any = response as &dyn std::any::Any;
    if let Some(a) = any.downcast_ref::<Answer<KinesisEventResponse>>() {
        return Some(&a.report);
    }
    if let Some(a) = any.downcast_ref::<Answer<DynamoDbEventResponse>>() {
        return Some(&a.report);
    }
    any.downcast_ref::<Answer<Value>>().map(|a| &a.report)
}

/// Reads the event's `Records` list (Kinesis, DynamoDB Streams), each record with `read`.
fn records_list(
    payload: Value,
    read: fn(usize, Value) -> Result<Record, Error>,
) -> Result<Vec<Record>, Error> {
    match payload {
        Value::Object(mut map) => match map.remove("Records") {
            Some(Value::Array(records)) => records
                .into_iter()
                .enumerate()
                .map(|(i, record)| read(i, record))
                .collect(),
            _ => Err(invalid("the event has no Records list")),
        },
        _ => Err(invalid("the event is not a JSON object")),
    }
}

/// An event the consumer cannot take: the whole invocation fails.
fn invalid(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidEvent,
        format!("{what}: the whole invocation fails and Lambda retries the batch"),
    )
}

/// The record's sequence number, or the error that fails the invocation without one.
fn sequence_number(i: usize, found: Option<&Value>) -> Result<String, Error> {
    match found.and_then(Value::as_str) {
        Some(s) if !s.is_empty() => Ok(s.to_owned()),
        _ => Err(invalid(&format!(
            "record #{i} of the batch has no sequence number, so it cannot be named in a \
             partial batch response"
        ))),
    }
}

fn text(record: &Value, pointer: &str) -> Option<String> {
    record
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Base64 of UTF-8 text, decoded; or why not.
fn decode_text(data: &str) -> Result<String, &'static str> {
    match base64::engine::general_purpose::STANDARD.decode(data) {
        Err(_) => Err("is not base64"),
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| "is not UTF-8 text"),
    }
}

/// The records of a captured stream batch (Kinesis, DynamoDB Streams or Kafka, told apart by
/// `eventSource`), read by their source's adapter, with their source; `None` for an event that
/// is not one of these streams (`ProcessorBuilder::record_claims`, `inspect.rs`).
#[cfg(feature = "admin")]
pub(crate) fn read_captured(
    event: &Value,
) -> Option<Result<(crate::processor::stream_source::Source, Vec<Record>), Error>> {
    use crate::processor::stream_source::Source;
    use sealed::Read;
    fn read<A: Read + Default>(event: &Value) -> Option<Result<(Source, Vec<Record>), Error>> {
        Some(
            A::default()
                .read(event.clone())
                .map(|records| (A::SOURCE, records)),
        )
    }
    if let Some(source) = event.get("eventSource").and_then(Value::as_str)
        && matches!(source, "aws:kafka" | "SelfManagedKafka")
    {
        return read::<KafkaSource>(event);
    }
    let source = event
        .get("Records")?
        .as_array()?
        .first()?
        .get("eventSource")?
        .as_str()?;
    match source {
        "aws:kinesis" => read::<KinesisSource>(event),
        "aws:dynamodb" => read::<DynamoDbStreamsSource>(event),
        _ => None,
    }
}
