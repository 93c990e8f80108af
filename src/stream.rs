//! Amazon Kinesis Data Streams and DynamoDB Streams consumers, on the same claim core as the
//! SQS [`Processor`]: effectively once, in order per shard.
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
//! * **Decoding.** A record whose `data` is not base64 of UTF-8 text (Kinesis) or that is not
//!   a stream record (DynamoDB Streams) fails alone, never the batch: as the first failure of
//!   its shard it stops the shard, so it is retried (and at last given up on by the mapping)
//!   with the records after it. A body that is not the JSON the handler wants fails its record
//!   the same way ([`Message::json`]). Only a record without a sequence
//!   number fails the whole invocation: it cannot be named in the response.
//!
//! What the handler sees: [`Message::id`] is the `eventID`,
//! [`Message::group_id`] the shard (Kinesis, from the `eventID`) or
//! the stream's ARN (DynamoDB Streams, whose records do not name their shard: a Lambda batch
//! comes from one shard), [`Message::body`] the payload above, and
//! [`Message::sqs`] the record's metadata as attributes
//! (`SequenceNumber`, `PartitionKey` and `ApproximateArrivalTimestamp` for Kinesis,
//! `SequenceNumber` and `eventName` for DynamoDB Streams).
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

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_lambda_events::streams::{DynamoDbEventResponse, KinesisEventResponse};
use base64::Engine as _;
use lambda_runtime::LambdaEvent;
use serde_json::Value;
use tower::Service;

use crate::message::Message;
use crate::processor::{Processor, ProcessorBuilder, STREAM_UNDECODABLE};
use crate::store::{ClaimStore, Effects};
use crate::{BoxError, Error, ErrorKind};

/// The message attribute holding a DynamoDB Streams record's item keys with its sequence
/// number, for `KeySource::MessageAttribute`.
const ITEM_KEYS: &str = "dynamodb:keys";

/// A Kinesis Data Streams consumer: a `tower::Service` for Lambda (serve it with
/// [`lambda::serve`](crate::lambda::serve)) answering `{"batchItemFailures":
/// [{"itemIdentifier": "<sequence number>"}]}`. See the [module docs](self).
pub struct Kinesis<S, H> {
    processor: Processor<S, H>,
}

/// A DynamoDB Streams consumer: a `tower::Service` for Lambda (serve it with
/// [`lambda::serve`](crate::lambda::serve)) answering `{"batchItemFailures":
/// [{"itemIdentifier": "<sequence number>"}]}`. See the [module docs](self).
pub struct DynamoDbStreams<S, H> {
    processor: Processor<S, H>,
}

macro_rules! consumer {
    ($name:ident, $source:literal, $read:path, $response:ty) => {
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
            H: Service<Message> + Clone + Send + Sync + 'static,
            H::Future: Send + 'static,
            H::Response: Into<Effects<S::Effect>>,
            H::Error: Into<BoxError>,
        {
            /// The consumer of the processor `builder` describes (store, handler, key,
            /// namespace, one-shot, TTL, lease, metrics, ...), run in order per shard.
            ///
            /// Fails with [`ErrorKind::Config`] when the builder has a failure destination or
            /// a redelivery: a stream's retries are its event source mapping's.
            pub fn new(builder: ProcessorBuilder<S, H>) -> Result<Self, Error> {
                Ok($name {
                    processor: builder.build_stream($source)?,
                })
            }

            /// Processes one invocation's batch: the partial batch response, each shard's
            /// first record that did not succeed named by its sequence number.
            ///
            /// Fails as a whole (Lambda retries the batch) only when the event has no
            /// `Records` list or a record has no sequence number.
            pub async fn process(&self, event: LambdaEvent<Value>) -> Result<$response, Error> {
                let failed = run(&self.processor, event, $read).await?;
                let mut response = <$response>::default();
                response.set_failures(failed);
                Ok(response)
            }
        }

        impl<S, H> Service<LambdaEvent<Value>> for $name<S, H>
        where
            S: ClaimStore,
            H: Service<Message> + Clone + Send + Sync + 'static,
            H::Future: Send + 'static,
            H::Response: Into<Effects<S::Effect>>,
            H::Error: Into<BoxError>,
        {
            type Response = $response;
            type Error = lambda_runtime::Error;
            type Future =
                Pin<Box<dyn Future<Output = Result<$response, lambda_runtime::Error>> + Send>>;

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

consumer!(Kinesis, "Kinesis", kinesis_record, KinesisEventResponse);
consumer!(
    DynamoDbStreams,
    "DynamoDB Streams",
    dynamodb_record,
    DynamoDbEventResponse
);

/// `set_failures` for both responses (Kinesis' has it; DynamoDB's not).
trait SetFailures {
    fn set_failures(&mut self, ids: Vec<String>);
}

impl SetFailures for DynamoDbEventResponse {
    fn set_failures(&mut self, ids: Vec<String>) {
        self.batch_item_failures = ids
            .into_iter()
            .map(|id| {
                let mut failure = aws_lambda_events::streams::DynamoDbBatchItemFailure::default();
                failure.item_identifier = Some(id);
                failure
            })
            .collect();
    }
}

/// One stream record, as the processor takes it.
struct Record {
    message: SqsMessage,
    sequence_number: String,
}

/// Reads the event's records, runs them through the processor (ordered lanes per shard) and
/// returns the sequence number of each shard's first record that did not succeed.
async fn run<S, H>(
    processor: &Processor<S, H>,
    event: LambdaEvent<Value>,
    read: fn(usize, Value) -> Result<Record, Error>,
) -> Result<Vec<String>, Error>
where
    S: ClaimStore,
    H: Service<Message> + Clone + Send + Sync + 'static,
    H::Future: Send + 'static,
    H::Response: Into<Effects<S::Effect>>,
    H::Error: Into<BoxError>,
{
    let (payload, context) = event.into_parts();
    let records = match payload {
        Value::Object(mut map) => match map.remove("Records") {
            Some(Value::Array(records)) => records,
            _ => return Err(invalid("the event has no Records list")),
        },
        _ => return Err(invalid("the event is not a JSON object")),
    };
    let mut sequence_numbers = Vec::with_capacity(records.len());
    let mut messages = Vec::with_capacity(records.len());
    for (i, record) in records.into_iter().enumerate() {
        let record = read(i, record)?;
        sequence_numbers.push(record.sequence_number);
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
    let mut failed: Vec<String> = Vec::new();
    let mut stopped: HashMap<&str, ()> = HashMap::new();
    for ((item, group), sequence_number) in report.items().iter().zip(&groups).zip(sequence_numbers)
    {
        if !item.outcome.is_success() && stopped.insert(group.as_str(), ()).is_none() {
            failed.push(sequence_number);
        }
    }
    Ok(failed)
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
fn kinesis_record(i: usize, record: Value) -> Result<Record, Error> {
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
        None => Err("has no data"),
        Some(data) => match base64::engine::general_purpose::STANDARD.decode(data) {
            Err(_) => Err("has data that is not base64"),
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| "has data that is not UTF-8 text"),
        },
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
        sequence_number,
    })
}

/// A DynamoDB Streams record: the body is the record's JSON, the group the stream.
fn dynamodb_record(i: usize, record: Value) -> Result<Record, Error> {
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
        sequence_number,
    })
}

/// The records of a batch whose `eventSource` is `source`, as the consumers hand them to the
/// processor; `None` for a source that is not one of these streams
/// (`ProcessorBuilder::record_keys`, `inspect.rs`).
pub(crate) fn as_sqs_records(
    source: &str,
    records: &[Value],
) -> Option<Result<Vec<SqsMessage>, Error>> {
    let read: fn(usize, Value) -> Result<Record, Error> = match source {
        "aws:kinesis" => kinesis_record,
        "aws:dynamodb" => dynamodb_record,
        _ => return None,
    };
    let records = records.iter().cloned().enumerate();
    Some(
        records
            .map(|(i, r)| read(i, r).map(|r| r.message))
            .collect(),
    )
}

/// JSON text with every object's members in sorted order, whatever map the build uses.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = members
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(rec.sequence_number, "7");
        assert!(rec.message.attributes.contains_key(STREAM_UNDECODABLE));
        assert_eq!(
            rec.message.attributes["MessageGroupId"],
            "shardId-000000000001"
        );
        let r = serde_json::json!({"kinesis": {"data": "e30="}});
        assert!(kinesis_record(3, r).is_err());
    }
}
