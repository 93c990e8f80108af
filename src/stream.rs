//! Amazon Kinesis Data Streams, DynamoDB Streams and Kafka (Amazon MSK, self-managed Apache
//! Kafka) consumers, on the same claim core as the SQS [`Processor`]: effectively once, in
//! order per shard (per partition for Kafka).
//!
//! A stream consumer is the SQS processor in its FIFO mode with the group = the shard and the
//! record's identifier = its sequence number: each record is handed to your handler as a
//! [`Message`], claimed under its key, run, completed (with the handler's
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
//!   partition), never the batch;
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

use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_lambda_events::streams::{DynamoDbEventResponse, KinesisEventResponse};
use base64::Engine as _;
use lambda_runtime::LambdaEvent;
use serde::Serialize;
use serde_json::{Value, json};
use tower::Service;

#[cfg(doc)]
use crate::message::Message; // the module docs name it
use crate::outcome::BatchReport;
use crate::processor::stream_source::{Source, canonical};
use crate::processor::{Handler, Processor, ProcessorBuilder, STREAM_UNDECODABLE};
use crate::store::ClaimStore;
use crate::{Error, ErrorKind};

/// The message attribute holding a DynamoDB Streams record's item keys with its sequence
/// number, for `KeySource::MessageAttribute`.
const ITEM_KEYS: &str = "dynamodb:keys";

pub use crate::message::Position;

/// A Kinesis Data Streams consumer: a `tower::Service` for Lambda (serve it with
/// [`lambda::serve`](crate::lambda::serve)) answering `{"batchItemFailures":
/// [{"itemIdentifier": "<sequence number>"}]}`. See the [module docs](self).
pub struct Kinesis<S, H> {
    processor: Processor<S, H>,
}

/// An Amazon MSK or self-managed Apache Kafka consumer: a `tower::Service` for Lambda (serve
/// it with [`lambda::serve`](crate::lambda::serve)) answering `{"batchItemFailures":
/// [{"itemIdentifier": {"partition": "<topic>-<partition>", "offset": <offset>}}]}` (as a
/// `serde_json::Value`: the events crate has no type for it). See the [module docs](self).
pub struct Kafka<S, H> {
    processor: Processor<S, H>,
}

/// A DynamoDB Streams consumer: a `tower::Service` for Lambda (serve it with
/// [`lambda::serve`](crate::lambda::serve)) answering `{"batchItemFailures":
/// [{"itemIdentifier": "<sequence number>"}]}`. See the [module docs](self).
pub struct DynamoDbStreams<S, H> {
    processor: Processor<S, H>,
}

macro_rules! consumer {
    ($name:ident, $source:expr, $read:path, $response:ty, $respond:path) => {
        impl<S, H> Clone for $name<S, H> {
            fn clone(&self) -> Self {
                $name {
                    processor: self.processor.clone(),
                }
            }
        }

        impl<S, H> std::fmt::Debug for $name<S, H> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("processor", &self.processor)
                    .finish()
            }
        }

        impl<S, H> $name<S, H>
        where
            S: ClaimStore,
            H: Handler<S::Effect>,
        {
            /// The consumer of the processor `builder` describes (store, handler, key,
            /// namespace, one-shot, TTL, lease, metrics, ...), run in order per shard (per
            /// partition for Kafka).
            ///
            /// Fails with [`ErrorKind::Config`] when the builder has a failure destination or
            /// a redelivery: a stream's retries are its event source mapping's.
            pub fn new(builder: ProcessorBuilder<S, H>) -> Result<Self, Error> {
                Ok($name {
                    processor: builder.build_stream($source)?,
                })
            }

            /// Processes one invocation's batch: the partial batch response, each shard's
            /// (partition's) first record that did not succeed named as the source's
            /// response names a record (see the [module docs](self)).
            ///
            /// Fails as a whole (Lambda retries the batch) only when the event has no list
            /// of records or a record cannot be named (no sequence number; Kafka: no offset).
            ///
            /// The [`Answer`] serializes as the response Lambda gets
            /// ([`Answer::into_response`] gives it) and carries the batch's report, each
            /// record's outcome and why it failed ([`Answer::report`]), which
            /// [`lambda::serve`](crate::lambda::serve) prints on stderr when run locally.
            pub async fn process(
                &self,
                event: LambdaEvent<Value>,
            ) -> Result<Answer<$response>, Error> {
                let (failed, report) = run(&self.processor, event, $read).await?;
                Ok(Answer {
                    response: $respond(failed),
                    report,
                })
            }
        }

        impl<S, H> Service<LambdaEvent<Value>> for $name<S, H>
        where
            S: ClaimStore,
            H: Handler<S::Effect>,
        {
            type Response = Answer<$response>;
            type Error = lambda_runtime::Error;
            type Future = Pin<
                Box<dyn Future<Output = Result<Answer<$response>, lambda_runtime::Error>> + Send>,
            >;

            fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, event: LambdaEvent<Value>) -> Self::Future {
                let this = self.clone();
                Box::pin(async move { Ok(this.process(event).await?) })
            }
        }
    };
}

consumer!(
    Kinesis,
    Source::Kinesis,
    kinesis_records,
    KinesisEventResponse,
    kinesis_response
);
consumer!(
    DynamoDbStreams,
    Source::DynamoDbStreams,
    dynamodb_records,
    DynamoDbEventResponse,
    dynamodb_response
);
consumer!(Kafka, Source::Kafka, kafka_records, Value, kafka_response);

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
/// the three consumers): what [`lambda::serve`](crate::lambda::serve) prints locally.
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

fn kinesis_response(ids: Vec<String>) -> KinesisEventResponse {
    let mut response = KinesisEventResponse::default();
    response.set_failures(ids);
    response
}

fn dynamodb_response(ids: Vec<String>) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    response.batch_item_failures = ids
        .into_iter()
        .map(|id| {
            let mut failure = aws_lambda_events::streams::DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(id);
            failure
        })
        .collect();
    response
}

/// Kafka's partial batch response (the events crate has no type for it): each failure named
/// by its topic-partition and offset, `{"batchItemFailures": [{"itemIdentifier":
/// {"partition": "TOPIC-PARTITION", "offset": OFFSET}}]}`.
fn kafka_response(ids: Vec<KafkaId>) -> Value {
    let failures: Vec<Value> = ids
        .into_iter()
        .map(|id| json!({"itemIdentifier": {"partition": id.partition, "offset": id.offset}}))
        .collect();
    json!({ "batchItemFailures": failures })
}

/// One stream record, as the processor takes it, and how the response names it.
struct Record<T> {
    message: SqsMessage,
    id: T,
}

/// Reads the event's `Records` list, each record with `read`.
fn records_list<T>(
    payload: Value,
    read: fn(usize, Value) -> Result<Record<T>, Error>,
) -> Result<Vec<Record<T>>, Error> {
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

fn kinesis_records(payload: Value) -> Result<Vec<Record<String>>, Error> {
    records_list(payload, kinesis_record)
}

fn dynamodb_records(payload: Value) -> Result<Vec<Record<String>>, Error> {
    records_list(payload, dynamodb_record)
}

/// Reads the event's records, runs them through the processor (ordered lanes per shard) and
/// returns how the response names each shard's first record that did not succeed, with the
/// batch's report.
async fn run<S, H, T>(
    processor: &Processor<S, H>,
    event: LambdaEvent<Value>,
    read: fn(Value) -> Result<Vec<Record<T>>, Error>,
) -> Result<(Vec<T>, BatchReport), Error>
where
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    let (payload, context) = event.into_parts();
    let records = read(payload)?;
    let mut ids = Vec::with_capacity(records.len());
    let mut messages = Vec::with_capacity(records.len());
    for record in records {
        ids.push(record.id);
        messages.push(record.message);
    }
    let groups: Vec<String> = messages
        .iter()
        .map(|m| {
            m.attributes
                .get("MessageGroupId")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    let mut sqs = SqsEvent::default();
    sqs.records = messages;
    let report = processor.process(LambdaEvent::new(sqs, context)).await?;
    // The report keeps the batch's order: the first item of a shard that did not succeed is
    // the shard's first failure (the processor started nothing after it in that shard).
    let mut failed: Vec<T> = Vec::new();
    let mut stopped: HashSet<&str> = HashSet::new();
    for ((item, group), id) in report.items().iter().zip(&groups).zip(ids) {
        if !item.outcome.is_success() && stopped.insert(group.as_str()) {
            failed.push(id);
        }
    }
    Ok((failed, report))
}

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

/// A Kinesis record: the body is its base64-decoded `data`, the group its shard.
fn kinesis_record(i: usize, record: Value) -> Result<Record<String>, Error> {
    let sequence_number = sequence_number(i, record.pointer("/kinesis/sequenceNumber"))?;
    let event_id = text(&record, "/eventID").filter(|s| !s.is_empty());
    let arn = text(&record, "/eventSourceARN");
    let shard = event_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .map(|(shard, _)| shard.to_owned())
        .or_else(|| arn.clone())
        .unwrap_or_default();
    let mut m = SqsMessage::default();
    m.message_id = Some(event_id.unwrap_or_else(|| sequence_number.clone()));
    m.event_source = Some("aws:kinesis".into());
    m.event_source_arn = arn;
    m.aws_region = text(&record, "/awsRegion");
    m.attributes.insert("MessageGroupId".into(), shard);
    m.attributes
        .insert("SequenceNumber".into(), sequence_number.clone());
    if let Some(key) = text(&record, "/kinesis/partitionKey") {
        m.attributes.insert("PartitionKey".into(), key);
    }
    if let Some(at) = record.pointer("/kinesis/approximateArrivalTimestamp") {
        let at = at.as_str().map_or_else(|| at.to_string(), str::to_owned);
        m.attributes
            .insert("ApproximateArrivalTimestamp".into(), at);
    }
    let data = record.pointer("/kinesis/data").and_then(Value::as_str);
    let decoded = match data {
        None => Err("has no data".to_owned()),
        Some(data) => decode_text(data).map_err(|why| format!("has data that {why}")),
    };
    match decoded {
        Ok(body) => m.body = Some(body),
        Err(why) => {
            m.attributes.insert(
                STREAM_UNDECODABLE.into(),
                format!("Kinesis record {sequence_number} {why}"),
            );
        }
    }
    Ok(Record {
        message: m,
        id: sequence_number,
    })
}

/// A DynamoDB Streams record: the body is the record's JSON, the group the stream.
fn dynamodb_record(i: usize, record: Value) -> Result<Record<String>, Error> {
    let sequence_number = sequence_number(i, record.pointer("/dynamodb/SequenceNumber"))?;
    let event_id = text(&record, "/eventID").filter(|s| !s.is_empty());
    let arn = text(&record, "/eventSourceARN");
    let mut m = SqsMessage::default();
    m.message_id = Some(event_id.unwrap_or_else(|| sequence_number.clone()));
    m.event_source = Some("aws:dynamodb".into());
    m.event_source_arn = arn.clone();
    m.aws_region = text(&record, "/awsRegion");
    m.attributes
        .insert("MessageGroupId".into(), arn.unwrap_or_default());
    m.attributes
        .insert("SequenceNumber".into(), sequence_number.clone());
    if let Some(name) = text(&record, "/eventName") {
        m.attributes.insert("eventName".into(), name);
    }
    match record.pointer("/dynamodb/Keys") {
        Some(keys @ Value::Object(_)) => {
            let mut attribute = SqsMessageAttribute::default();
            attribute.string_value = Some(format!("{}@{sequence_number}", canonical(keys)));
            attribute.data_type = Some("String".into());
            m.message_attributes.insert(ITEM_KEYS.into(), attribute);
            m.body = Some(record.to_string());
        }
        _ => {
            m.attributes.insert(
                STREAM_UNDECODABLE.into(),
                format!("DynamoDB Streams record {sequence_number} has no dynamodb.Keys object"),
            );
        }
    }
    Ok(Record {
        message: m,
        id: sequence_number,
    })
}

/// How Kafka's response names a record: its topic-partition and offset.
struct KafkaId {
    partition: String,
    offset: i64,
}

/// A Kafka event's records: `records` maps each `TOPIC-PARTITION` to its records; each
/// partition's records are taken in offset order.
fn kafka_records(payload: Value) -> Result<Vec<Record<KafkaId>>, Error> {
    let Value::Object(mut event) = payload else {
        return Err(invalid("the event is not a JSON object"));
    };
    let source = event
        .get("eventSource")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let arn = event
        .get("eventSourceArn")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let partitions = match event.remove("records") {
        Some(Value::Object(partitions)) => partitions,
        Some(Value::Null) => serde_json::Map::new(),
        _ => return Err(invalid("the event has no records object")),
    };
    let mut out = Vec::new();
    for (key, records) in partitions {
        let Value::Array(records) = records else {
            return Err(invalid(&format!("the records of {key} are not a list")));
        };
        let mut partition = Vec::with_capacity(records.len());
        for (i, record) in records.into_iter().enumerate() {
            partition.push(kafka_record(&key, i, record, &source, &arn)?);
        }
        partition.sort_by_key(|r| r.id.offset);
        out.extend(partition);
    }
    Ok(out)
}

/// `TOPIC-PARTITION` split at its last `-` (a topic's name may hold `-` itself).
fn split_partition(key: &str) -> Option<(&str, i64)> {
    let (topic, partition) = key.rsplit_once('-')?;
    Some((topic, partition.parse().ok()?))
}

/// A Kafka record: the body is its base64-decoded `value`, the group its topic-partition,
/// the id `TOPIC-PARTITION@OFFSET`.
fn kafka_record(
    key: &str,
    i: usize,
    record: Value,
    source: &Option<String>,
    arn: &Option<String>,
) -> Result<Record<KafkaId>, Error> {
    let offset = match record.get("offset") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .filter(|o| *o >= 0)
    .ok_or_else(|| {
        invalid(&format!(
            "record #{i} of {key} has no offset, so it cannot be named in a partial batch \
             response"
        ))
    })?;
    let topic = text(&record, "/topic").filter(|t| !t.is_empty());
    let number = record.get("partition").and_then(Value::as_i64);
    let (topic, number, partition) = match (topic, number) {
        (Some(topic), Some(n)) => {
            let partition = format!("{topic}-{n}");
            (Some(topic), Some(n), partition)
        }
        _ => {
            let split = split_partition(key);
            (
                split.map(|(t, _)| t.to_owned()),
                split.map(|(_, n)| n),
                key.to_owned(),
            )
        }
    };
    if partition.is_empty() {
        return Err(invalid(&format!(
            "record #{i} of the batch has no topic-partition, so it cannot be named in a \
             partial batch response"
        )));
    }
    let mut m = SqsMessage::default();
    m.message_id = Some(format!("{partition}@{offset}"));
    m.event_source.clone_from(source);
    m.event_source_arn.clone_from(arn);
    m.attributes
        .insert("MessageGroupId".into(), partition.clone());
    if let Some(topic) = topic {
        m.attributes.insert("Topic".into(), topic);
    }
    if let Some(n) = number {
        m.attributes.insert("Partition".into(), n.to_string());
    }
    m.attributes.insert("Offset".into(), offset.to_string());
    if let Some(at) = record.get("timestamp").filter(|t| t.is_number()) {
        m.attributes.insert("Timestamp".into(), at.to_string());
    }
    if let Some(kind) = text(&record, "/timestampType") {
        m.attributes.insert("TimestampType".into(), kind);
    }
    if let Some(k) = record.get("key").and_then(Value::as_str) {
        match decode_text(k) {
            Ok(k) => m.attributes.insert("Key".into(), k),
            Err(_) => m.attributes.insert("KeyBase64".into(), k.to_owned()),
        };
    }
    if let Some(Value::Array(headers)) = record.get("headers") {
        for (name, bytes) in headers.iter().filter_map(Value::as_object).flatten() {
            let Some(bytes) = header_bytes(bytes) else {
                continue;
            };
            if m.message_attributes.contains_key(name) {
                continue;
            }
            let mut attribute = SqsMessageAttribute::default();
            match String::from_utf8(bytes) {
                Ok(text) => {
                    attribute.data_type = Some("String".into());
                    attribute.string_value = Some(text);
                }
                Err(e) => {
                    attribute.data_type = Some("Binary".into());
                    let mut data = aws_lambda_events::encodings::Base64Data::default();
                    *data = e.into_bytes();
                    attribute.binary_value = Some(data);
                }
            }
            m.message_attributes.insert(name.clone(), attribute);
        }
    }
    // A null (or absent) value is a tombstone: an empty body.
    let decoded = match record.get("value") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(value)) => decode_text(value),
        Some(_) => Err("is not base64 text"),
    };
    match decoded {
        Ok(body) => m.body = Some(body),
        Err(why) => {
            m.attributes.insert(
                STREAM_UNDECODABLE.into(),
                format!("Kafka record {partition}@{offset} has a value that {why}"),
            );
        }
    }
    Ok(Record {
        message: m,
        id: KafkaId { partition, offset },
    })
}

/// A Kafka header's value: a list of bytes, signed (Java's `byte`, as Lambda sends them) or
/// not.
fn header_bytes(value: &Value) -> Option<Vec<u8>> {
    value
        .as_array()?
        .iter()
        .map(|b| match b.as_i64()? {
            b @ -128..=-1 => Some((b + 256) as u8),
            b @ 0..=255 => Some(b as u8),
            _ => None,
        })
        .collect()
}

/// Base64 of UTF-8 text, decoded; or why not.
fn decode_text(data: &str) -> Result<String, &'static str> {
    match base64::engine::general_purpose::STANDARD.decode(data) {
        Err(_) => Err("is not base64"),
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| "is not UTF-8 text"),
    }
}

/// The records of a captured stream batch (Kinesis, DynamoDB Streams or Kafka, told apart by
/// `eventSource`), as the consumers hand them to the processor, with their source; `None` for
/// an event that is not one of these streams (`ProcessorBuilder::record_claims`, `inspect.rs`).
#[cfg(feature = "admin")]
pub(crate) fn as_sqs_records(event: &Value) -> Option<Result<(Source, Vec<SqsMessage>), Error>> {
    fn messages<T>(
        source: Source,
        records: Result<Vec<Record<T>>, Error>,
    ) -> Option<Result<(Source, Vec<SqsMessage>), Error>> {
        Some(records.map(|records| (source, records.into_iter().map(|r| r.message).collect())))
    }
    if let Some(source) = event.get("eventSource").and_then(Value::as_str)
        && matches!(source, "aws:kafka" | "SelfManagedKafka")
    {
        return messages(Source::Kafka, kafka_records(event.clone()));
    }
    let source = event
        .get("Records")?
        .as_array()?
        .first()?
        .get("eventSource")?
        .as_str()?;
    match source {
        "aws:kinesis" => messages(Source::Kinesis, kinesis_records(event.clone())),
        "aws:dynamodb" => messages(Source::DynamoDbStreams, dynamodb_records(event.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DynamoDB Streams record's payload: its image without the key attributes, a `REMOVE`
    /// told apart, the `Keys` without an image; never the record's own ids and times.
    #[test]
    fn a_dynamodb_record_s_payload_is_its_image() {
        let record = |name: &str, id: &str, seq: &str, ddb: Value| {
            let mut ddb = ddb;
            ddb["Keys"] = json!({"pk": {"S": id}});
            ddb["SequenceNumber"] = json!(seq);
            json!({"eventID": format!("e-{seq}"), "eventName": name, "dynamodb": ddb}).to_string()
        };
        let image = |id: &str, amount: &str| json!({"pk": {"S": id}, "order_id": {"S": "o-1"}, "amount": {"N": amount}});
        let payload = |body: &str| Source::DynamoDbStreams.fingerprinted(body).into_owned();
        let first = record("INSERT", "a", "1", json!({"NewImage": image("a", "5")}));
        let again = record("INSERT", "b", "2", json!({"NewImage": image("b", "5")}));
        let modify = record("MODIFY", "c", "3", json!({"NewImage": image("c", "5")}));
        let other = record("INSERT", "d", "4", json!({"NewImage": image("d", "6")}));
        let removed = record("REMOVE", "e", "5", json!({"OldImage": image("e", "5")}));
        assert_eq!(
            payload(&first),
            r#"{"image":{"amount":{"N":"5"},"order_id":{"S":"o-1"}},"removed":false}"#
        );
        assert_eq!(
            payload(&first),
            payload(&again),
            "another item id, one event"
        );
        assert_eq!(payload(&first), payload(&modify));
        assert_ne!(payload(&first), payload(&other), "another amount");
        assert_ne!(
            payload(&first),
            payload(&removed),
            "a REMOVE is not a write"
        );
        let keys_only = record("INSERT", "a", "6", json!({}));
        assert_eq!(
            payload(&keys_only),
            r#"{"keys":{"pk":{"S":"a"}},"removed":false}"#
        );
        // Kinesis and Kafka: the body (the decoded `data`, `value`) as it is.
        assert_eq!(Source::Kinesis.fingerprinted(&first), first);
        assert_eq!(Source::Kafka.fingerprinted("v"), "v");
    }

    #[test]
    fn item_keys_are_canonical() {
        let v: Value = serde_json::from_str(r#"{"b":{"S":"x"},"a":{"N":"1"}}"#).unwrap();
        assert_eq!(canonical(&v), r#"{"a":{"N":"1"},"b":{"S":"x"}}"#);
    }

    #[test]
    fn a_kinesis_record_without_base64_data_is_marked_not_the_batch() {
        let r = serde_json::json!({
            "eventID": "shardId-000000000001:7",
            "kinesis": {"sequenceNumber": "7", "data": "%%%"}
        });
        let rec = kinesis_record(0, r).unwrap();
        assert_eq!(rec.id, "7");
        assert!(rec.message.attributes.contains_key(STREAM_UNDECODABLE));
        assert_eq!(
            rec.message.attributes["MessageGroupId"],
            "shardId-000000000001"
        );
        let r = serde_json::json!({"kinesis": {"data": "e30="}});
        assert!(kinesis_record(3, r).is_err());
    }

    /// Two partitions with the same offsets, one of a topic with `-` in its name; a tombstone,
    /// a value that is not base64, headers in signed bytes.
    #[test]
    fn kafka_records_are_named_by_topic_partition_and_offset() {
        let event = serde_json::json!({
            "eventSource": "aws:kafka",
            "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/c/1",
            "bootstrapServers": "b-1:9092",
            "records": {
                "orders-eu-3": [
                    {"topic": "orders-eu", "partition": 3, "offset": 8, "timestamp": 1,
                     "timestampType": "CREATE_TIME", "value": null, "headers": []},
                    {"topic": "orders-eu", "partition": 3, "offset": 7, "timestamp": 1,
                     "timestampType": "CREATE_TIME", "key": "azE=", "value": "eyJuIjoxfQ==",
                     "headers": [{"trace": [116, 45, 49]}, {"bin": [-1, 0]}, {"trace": [120]}]}
                ],
                "orders-0": [
                    {"topic": "orders", "partition": 0, "offset": 7, "timestamp": 1,
                     "timestampType": "CREATE_TIME", "value": "%%%", "headers": []}
                ]
            }
        });
        let records = kafka_records(event).unwrap();
        let ids: Vec<String> = records
            .iter()
            .map(|r| r.message.message_id.clone().unwrap())
            .collect();
        assert_eq!(ids, ["orders-0@7", "orders-eu-3@7", "orders-eu-3@8"]);
        let (bad, first, tombstone) = (&records[0], &records[1], &records[2]);
        assert!(bad.message.attributes.contains_key(STREAM_UNDECODABLE));
        assert_eq!(first.message.body.as_deref(), Some(r#"{"n":1}"#));
        assert_eq!(first.message.attributes["MessageGroupId"], "orders-eu-3");
        assert_eq!(first.message.attributes["Topic"], "orders-eu");
        assert_eq!(first.message.attributes["Key"], "k1");
        let trace = &first.message.message_attributes["trace"];
        assert_eq!(trace.string_value.as_deref(), Some("t-1"));
        let bin = &first.message.message_attributes["bin"];
        assert_eq!(
            bin.binary_value.as_deref().map(|b| b.to_vec()),
            Some(vec![255, 0])
        );
        assert_eq!(tombstone.message.body.as_deref(), Some(""));
        assert!(
            !tombstone
                .message
                .attributes
                .contains_key(STREAM_UNDECODABLE)
        );
        let response = kafka_response(vec![KafkaId {
            partition: "orders-eu-3".into(),
            offset: 7,
        }]);
        assert_eq!(
            response,
            serde_json::json!({"batchItemFailures": [
                {"itemIdentifier": {"partition": "orders-eu-3", "offset": 7}}
            ]})
        );
        // A record without an offset cannot be named: the invocation fails.
        let event = serde_json::json!({"records": {"t-0": [{"topic": "t", "partition": 0}]}});
        assert!(kafka_records(event).is_err());
        assert_eq!(split_partition("a-b-12"), Some(("a-b", 12)));
        assert_eq!(split_partition("ab"), None);
    }
}
