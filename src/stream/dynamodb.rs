//! DynamoDB Streams' adapter: a record's payload is the record itself (its image is what the
//! payload fingerprint covers), its group the stream, its position its sequence number.

use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_json::Value;

use super::{Adapter, Position, records_list, sealed, sequence_number, text};
use crate::Error;
use crate::processor::stream_source::{Source, canonical};
use crate::record::Record;

/// The message attribute holding a DynamoDB Streams record's item keys with its sequence
/// number, for `KeySource::MessageAttribute("dynamodb:keys")`.
const ITEM_KEYS: &str = "dynamodb:keys";

/// DynamoDB Streams, as [`DynamoDbStreams`](super::DynamoDbStreams) reads it: the event's
/// `Records`, each record's payload the record's JSON (its fingerprint covers the item's
/// image), its group the stream (a Lambda batch comes from one shard, which the records do not
/// name); a failed record named by its sequence number, `{"batchItemFailures":
/// [{"itemIdentifier": "<sequence number>"}]}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DynamoDbStreamsSource;

impl sealed::Read for DynamoDbStreamsSource {
    const SOURCE: Source = Source::DynamoDbStreams;

    fn read(&self, event: Value) -> Result<Vec<Record>, Error> {
        records_list(event, record)
    }
}

impl Adapter for DynamoDbStreamsSource {
    type Response = DynamoDbEventResponse;

    fn respond(failed: Vec<Position>) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        response.batch_item_failures = failed
            .into_iter()
            .map(|position| {
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = Some(position.to_string());
                failure
            })
            .collect();
        response
    }
}

/// A DynamoDB Streams record: the body is the record's JSON, the group the stream.
fn record(i: usize, record: Value) -> Result<Record, Error> {
    let sequence_number = sequence_number(i, record.pointer("/dynamodb/SequenceNumber"))?;
    let event_id = text(&record, "/eventID").filter(|s| !s.is_empty());
    let arn = text(&record, "/eventSourceARN");
    let mut m = SqsMessage::default();
    m.message_id = Some(event_id.unwrap_or_else(|| sequence_number.clone()));
    m.event_source = Some("aws:dynamodb".into());
    m.event_source_arn = arn.clone();
    m.aws_region = text(&record, "/awsRegion");
    m.attributes
        .insert("SequenceNumber".into(), sequence_number.clone());
    if let Some(name) = text(&record, "/eventName") {
        m.attributes.insert("eventName".into(), name);
    }
    let unreadable = match record.pointer("/dynamodb/Keys") {
        Some(keys @ Value::Object(_)) => {
            let mut attribute = SqsMessageAttribute::default();
            attribute.string_value = Some(format!("{}@{sequence_number}", canonical(keys)));
            attribute.data_type = Some("String".into());
            m.message_attributes.insert(ITEM_KEYS.into(), attribute);
            m.body = Some(record.to_string());
            None
        }
        _ => Some(format!(
            "DynamoDB Streams record {sequence_number} has no dynamodb.Keys object"
        )),
    };
    Ok(Record {
        message: m,
        group: arn,
        position: Some(Position::SequenceNumber(sequence_number)),
        unreadable,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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

    /// A record without keys fails alone; its item keys are a key source; its group is the
    /// stream; the response names it by its sequence number.
    #[test]
    fn a_record_is_named_by_its_sequence_number() {
        let arn = "arn:aws:dynamodb:us-east-1:1:table/t/stream/2026";
        let r = json!({"eventID": "e-1", "eventName": "INSERT", "eventSourceARN": arn,
                       "dynamodb": {"SequenceNumber": "400", "Keys": {"pk": {"S": "a"}}}});
        let rec = record(0, r).unwrap();
        assert_eq!(rec.group.as_deref(), Some(arn));
        assert!(rec.unreadable.is_none());
        assert_eq!(
            rec.message.message_attributes[ITEM_KEYS]
                .string_value
                .as_deref(),
            Some(r#"{"pk":{"S":"a"}}@400"#)
        );
        let r = json!({"eventID": "e-2", "dynamodb": {"SequenceNumber": "401"}});
        assert!(record(1, r).unwrap().unreadable.is_some());
        let response = DynamoDbStreamsSource::respond(vec![Position::SequenceNumber("400".into())]);
        assert_eq!(
            serde_json::to_value(response).unwrap(),
            json!({"batchItemFailures": [{"itemIdentifier": "400"}]})
        );
    }
}
