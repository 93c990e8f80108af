//! Kafka's adapter (Amazon MSK, self-managed Apache Kafka): a record's payload is its
//! base64-decoded `value`, its group its topic-partition, its position its offset.

use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};
use serde_json::{Value, json};

#[cfg(feature = "kafka-schema")]
use base64::Engine as _;

use super::{Adapter, Position, decode_text, invalid, sealed, text};
use crate::Error;
use crate::processor::stream_source::Source;
use crate::record::Record;

/// Kafka (Amazon MSK, self-managed Apache Kafka), as [`Kafka`](super::Kafka) reads it: the
/// event's `records` map of `TOPIC-PARTITION` to records, each partition in offset order, a
/// record's payload its decoded `value`; a failed record named by its topic-partition and
/// offset, `{"batchItemFailures": [{"itemIdentifier": {"partition": "TOPIC-PARTITION",
/// "offset": OFFSET}}]}` (a `serde_json::Value`: the events crate has no type for it).
///
/// With feature `kafka-schema` it holds the [`Decoder`](super::schema::Decoder)s of a
/// record's value and key ([`Kafka::value`](super::Kafka::value),
/// [`Kafka::key`](super::Kafka::key)); without, the value is read as UTF-8 text and the key
/// as text when it is.
#[derive(Debug, Clone, Default)]
pub struct KafkaSource {
    #[cfg(feature = "kafka-schema")]
    pub(super) value: Option<super::schema::Decoder>,
    #[cfg(feature = "kafka-schema")]
    pub(super) key: Option<super::schema::Decoder>,
}

impl sealed::Read for KafkaSource {
    const SOURCE: Source = Source::Kafka;

    fn read(&self, event: Value) -> Result<Vec<Record>, Error> {
        records(self, event)
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
fn records(source_of: &KafkaSource, payload: Value) -> Result<Vec<Record>, Error> {
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
            partition.push(record(source_of, &key, i, one, &source, &arn)?);
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
    decoders: &KafkaSource,
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
    let named = match (&topic, number) {
        (Some(topic), Some(n)) => format!(
            "Kafka record {partition}@{offset} (topic {topic}, partition {n}, offset {offset})"
        ),
        _ => format!("Kafka record {partition}@{offset}"),
    };
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
    // Why the record cannot be read, naming the part (the first that fails): it fails alone.
    let mut unreadable: Option<String> = None;
    if let Some(k) = record.get("key").and_then(Value::as_str) {
        // Decoded by the consumer's key decoder (a key that does not decode fails the
        // record); else its text when it is UTF-8, or its base64 as sent.
        match decoded(decoders, &record, Part::Key, k) {
            Some(Ok(text)) => {
                m.attributes.insert("Key".into(), text);
            }
            Some(Err(why)) => unreadable = Some(format!("{named}: its key {why}")),
            None => {
                match decode_text(k) {
                    Ok(text) => m.attributes.insert("Key".into(), text),
                    Err(_) => m.attributes.insert("KeyBase64".into(), k.to_owned()),
                };
            }
        }
    }
    match record.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(headers)) => {
            for header in headers {
                let Some(header) = header.as_object() else {
                    unreadable.get_or_insert_with(|| {
                        format!("{named}: a header is not an object of a name and its bytes")
                    });
                    continue;
                };
                for (name, bytes) in header {
                    let Some(bytes) = header_bytes(bytes) else {
                        unreadable.get_or_insert_with(|| {
                            format!("{named}: its header {name:?} is not a list of bytes")
                        });
                        continue;
                    };
                    if m.message_attributes.contains_key(name) {
                        continue;
                    }
                    m.message_attributes
                        .insert(name.clone(), header_attribute(bytes));
                }
            }
        }
        Some(_) => {
            unreadable.get_or_insert_with(|| format!("{named}: its headers are not a list"));
        }
    }
    // A null (or absent) value is a tombstone: an empty body.
    let decoded = match record.get("value") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(value)) => decoded(decoders, &record, Part::Value, value)
            .unwrap_or_else(|| decode_text(value).map_err(str::to_owned)),
        Some(_) => Err("is not base64 text".to_owned()),
    };
    match decoded {
        Ok(body) => m.body = Some(body),
        Err(why) => {
            unreadable.get_or_insert_with(|| format!("{named}: its value {why}"));
        }
    }
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

/// A header's bytes as a message attribute: `String` where they are UTF-8, else `Binary`.
fn header_attribute(bytes: Vec<u8>) -> SqsMessageAttribute {
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
    attribute
}

/// Which part of a record a decoder reads.
#[derive(Clone, Copy)]
enum Part {
    Value,
    Key,
}

/// A part of the record (`value` or `key`, base64 in the event) decoded by the consumer's
/// decoder for it (feature `kafka-schema`), with the record's registry metadata for it
/// (`valueSchemaMetadata`, `keySchemaMetadata`): `None` when the consumer has no decoder for
/// the part; else the part's JSON text, or why not (never quoting it).
fn decoded(
    decoders: &KafkaSource,
    record: &Value,
    part: Part,
    base64: &str,
) -> Option<Result<String, String>> {
    #[cfg(feature = "kafka-schema")]
    {
        let (decoder, metadata) = match part {
            Part::Value => (decoders.value.as_ref()?, "valueSchemaMetadata"),
            Part::Key => (decoders.key.as_ref()?, "keySchemaMetadata"),
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(base64)
            .map_err(|_| "is not base64".to_owned())
            .and_then(|bytes| decoder.decode(&bytes, record.get(metadata).filter(|m| !m.is_null())))
            .map_err(|why| format!("({}) {why}", decoder.format_name()));
        Some(decoded)
    }
    #[cfg(not(feature = "kafka-schema"))]
    {
        let _ = (decoders, record, part, base64);
        None
    }
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
        let records = records(&KafkaSource::default(), event).unwrap();
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
        let response = <KafkaSource as Adapter>::respond(vec![Position::Offset {
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
        assert!(super::records(&KafkaSource::default(), event).is_err());
        assert_eq!(split_partition("a-b-12"), Some(("a-b", 12)));
        assert_eq!(split_partition("ab"), None);
    }
}
