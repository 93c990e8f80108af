//! What a stream record's payload fingerprint covers, per source ([`Source`]): the processor
//! applies it, the `stream` consumers and `inspect` name the source.

use std::borrow::Cow;

use serde_json::{Value, json};

/// Which stream a consumer reads: it decides what of a record is its payload, the part the
/// payload fingerprint covers ([`PayloadCheck`](crate::PayloadCheck)), so that a producer's
/// second write of the same event is a duplicate and not "another payload":
///
/// * Kinesis: the record's `data` (decoded: the body);
/// * Kafka: the record's `value` (decoded: the body), not its key, headers or timestamp;
/// * DynamoDB Streams: the item's image, not the record around it (whose `eventID`,
///   `SequenceNumber` and times differ between any two records): `NewImage`, or, for a
///   `REMOVE`, `OldImage`, without the item's key attributes (two writes of one event under
///   two keys, a producer's retry that made a new id, are one payload); with neither image
///   (a `KEYS_ONLY` stream, a `REMOVE` seen without its old image), the `Keys`. A `REMOVE`
///   never has the payload of an `INSERT` or `MODIFY` of the same image.
///
/// (`pub` in this crate-private module only so that the stream adapters' sealed trait may name
/// it: nothing outside the crate can.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Amazon Kinesis Data Streams.
    Kinesis,
    /// Amazon DynamoDB Streams.
    DynamoDbStreams,
    /// Amazon MSK or self-managed Apache Kafka.
    Kafka,
}

impl Source {
    /// The source's name, as errors name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Kinesis => "Kinesis",
            Source::DynamoDbStreams => "DynamoDB Streams",
            Source::Kafka => "Kafka",
        }
    }

    /// What the payload fingerprint of a record covers, given the body this module made of it
    /// (see the [type's docs](Source)).
    pub(crate) fn fingerprinted(self, body: &str) -> Cow<'_, str> {
        match self {
            Source::Kinesis | Source::Kafka => Cow::Borrowed(body),
            // The body is the record's JSON, as `dynamodb_record` wrote it.
            Source::DynamoDbStreams => match dynamodb_payload(body) {
                Some(payload) => Cow::Owned(payload),
                None => Cow::Borrowed(body),
            },
        }
    }
}

/// A DynamoDB Streams record's payload ([`Source::fingerprinted`]), as canonical JSON:
/// `{"image":{…},"removed":false}` (the image without the key attributes), or
/// `{"keys":{…},"removed":…}` without an image. `None` for a body that is not a stream record.
fn dynamodb_payload(body: &str) -> Option<String> {
    let record: Value = serde_json::from_str(body).ok()?;
    let ddb = record.get("dynamodb")?;
    let removed = record.get("eventName").and_then(Value::as_str) == Some("REMOVE");
    let image = ddb.get(if removed { "OldImage" } else { "NewImage" });
    let keys = ddb.get("Keys");
    let payload = match image.and_then(Value::as_object) {
        Some(image) => {
            let mut image = image.clone();
            for name in keys
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|k| k.keys())
            {
                image.remove(name);
            }
            json!({"image": image, "removed": removed})
        }
        None => json!({"keys": keys, "removed": removed}),
    };
    Some(canonical(&payload))
}

/// JSON text with every object's members in sorted order, whatever map the build uses.
pub(crate) fn canonical(value: &Value) -> String {
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
