//! Kafka's adapter (Amazon MSK, self-managed Apache Kafka): a record's payload is its
//! base64-decoded `value`, its group its topic-partition, its position its offset.

use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};
use serde_json::{Value, json};

use super::{Adapter, Position, decode_text, invalid, sealed, text};
use crate::Error;
use crate::processor::stream_source::Source;
use crate::record::Record;

/// Kafka (Amazon MSK, self-managed Apache Kafka), as [`Kafka`](super::Kafka) reads it: the
/// event's `records` map of `TOPIC-PARTITION` to records, each partition in offset order, a
/// record's payload its decoded `value`; a failed record named by its topic-partition and
/// offset, `{"batchItemFailures": [{"itemIdentifier": {"partition": "TOPIC-PARTITION",
/// "offset": OFFSET}}]}` (a `serde_json::Value`: the events crate has no type for it).
#[derive(Debug, Clone, Copy, Default)]
pub struct KafkaSource;

impl sealed::Read for KafkaSource {
    const SOURCE: Source = Source::Kafka;

    fn read(event: Value) -> Result<Vec<Record>, Error> {
        records(event)
    }
}

impl Adapter for KafkaSource {
    type Response = Value;

    fn respond(failed: Vec<Position>) -> Value {
        let failures: Vec<Value> = failed
            .into_iter()
            .map(|position| match position {
                Position::Offset { partition, offset } => {
                    json!({"itemIdentifier": {"partition": partition, "offset": offset}})
                }
                // Never made (every Kafka record has an offset: `records` refuses one
                // without); named anyway, never dropped.
                other => json!({"itemIdentifier": other.to_string()}),
            })
            .collect();
        json!({ "batchItemFailures": failures })
    }
}

/// A Kafka event's records: `records` maps each `TOPIC-PARTITION` to its records; each
/// partition's records are taken in offset order.
fn records(payload: Value) -> Result<Vec<Record>, Error> {
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
        for (i, one) in records.into_iter().enumerate() {
            partition.push(record(&key, i, one, &source, &arn)?);
        }
        partition.sort_by_key(|(offset, _)| *offset);
        out.extend(partition.into_iter().map(|(_, record)| record));
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
/// With the record, its offset (the partition's order).
fn record(
    key: &str,
    i: usize,
    record: Value,
    source: &Option<String>,
    arn: &Option<String>,
) -> Result<(i64, Record), Error> {
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
    let unreadable = match decoded {
        Ok(body) => {
            m.body = Some(body);
            None
        }
        Err(why) => Some(format!(
            "Kafka record {partition}@{offset} has a value that {why}"
        )),
    };
    Ok((
        offset,
        Record {
            message: m,
            group: Some(partition.clone()),
            position: Some(Position::Offset { partition, offset }),
            unreadable,
        },
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let records = records(event).unwrap();
        let ids: Vec<String> = records
            .iter()
            .map(|r| r.message.message_id.clone().unwrap())
            .collect();
        assert_eq!(ids, ["orders-0@7", "orders-eu-3@7", "orders-eu-3@8"]);
        let (bad, first, tombstone) = (&records[0], &records[1], &records[2]);
        assert!(bad.unreadable.is_some());
        assert_eq!(first.message.body.as_deref(), Some(r#"{"n":1}"#));
        assert_eq!(first.group.as_deref(), Some("orders-eu-3"));
        assert_eq!(
            first.position,
            Some(Position::Offset {
                partition: "orders-eu-3".into(),
                offset: 7
            })
        );
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
        assert!(tombstone.unreadable.is_none());
        let response = KafkaSource::respond(vec![Position::Offset {
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
        assert!(super::records(event).is_err());
        assert_eq!(split_partition("a-b-12"), Some(("a-b", 12)));
        assert_eq!(split_partition("ab"), None);
    }
}
