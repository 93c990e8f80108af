//! Kinesis Data Streams' adapter: a record's payload is its base64-decoded `data`, its group
//! its shard, its position its sequence number.

use aws_lambda_events::sqs::SqsMessage;
use aws_lambda_events::streams::KinesisEventResponse;
use serde_json::Value;

use super::{Adapter, Position, decode_text, records_list, sealed, sequence_number, text};
use crate::Error;
use crate::processor::stream_source::Source;
use crate::record::Record;

/// Kinesis Data Streams, as [`Kinesis`](super::Kinesis) reads it: the event's `Records`, each
/// record's payload its decoded `data`, its group the shard its `eventID` names; a failed
/// record named by its sequence number, `{"batchItemFailures": [{"itemIdentifier":
/// "<sequence number>"}]}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct KinesisSource;

impl sealed::Read for KinesisSource {
    const SOURCE: Source = Source::Kinesis;

    fn read(&self, event: Value) -> Result<Vec<Record>, Error> {
        records_list(event, record)
    }
}

impl Adapter for KinesisSource {
    type Response = KinesisEventResponse;

    fn respond(failed: Vec<Position>) -> KinesisEventResponse {
        let mut response = KinesisEventResponse::default();
        response.set_failures(
            failed
                .into_iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>(),
        );
        response
    }
}

/// A Kinesis record: the body is its base64-decoded `data`, the group its shard.
fn record(i: usize, record: Value) -> Result<Record, Error> {
    let sequence_number = sequence_number(i, record.pointer("/kinesis/sequenceNumber"))?;
    let event_id = text(&record, "/eventID").filter(|s| !s.is_empty());
    let arn = text(&record, "/eventSourceARN");
    let shard = event_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .map(|(shard, _)| shard.to_owned())
        .or_else(|| arn.clone());
    let mut m = SqsMessage::default();
    m.message_id = Some(event_id.unwrap_or_else(|| sequence_number.clone()));
    m.event_source = Some("aws:kinesis".into());
    m.event_source_arn = arn;
    m.aws_region = text(&record, "/awsRegion");
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
    let unreadable = match decoded {
        Ok(body) => {
            m.body = Some(body);
            None
        }
        Err(why) => Some(format!("Kinesis record {sequence_number} {why}")),
    };
    Ok(Record {
        message: m,
        group: shard,
        position: Some(Position::SequenceNumber(sequence_number)),
        unreadable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinesis_record_without_base64_data_fails_alone_not_the_batch() {
        let r = serde_json::json!({
            "eventID": "shardId-000000000001:7",
            "kinesis": {"sequenceNumber": "7", "data": "%%%"}
        });
        let rec = record(0, r).unwrap();
        assert_eq!(rec.position, Some(Position::SequenceNumber("7".into())));
        assert!(rec.unreadable.is_some());
        assert_eq!(rec.group.as_deref(), Some("shardId-000000000001"));
        assert!(
            !rec.message.attributes.contains_key("MessageGroupId"),
            "no SQS attribute is made up for a stream record"
        );
        let r = serde_json::json!({"kinesis": {"data": "e30="}});
        assert!(record(3, r).is_err());
    }

    #[test]
    fn a_failure_is_named_by_its_sequence_number() {
        let response = KinesisSource::respond(vec![Position::SequenceNumber("42".into())]);
        assert_eq!(
            serde_json::to_value(response).unwrap(),
            serde_json::json!({"batchItemFailures": [{"itemIdentifier": "42"}]})
        );
    }
}
