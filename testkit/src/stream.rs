//! A stand-in for Lambda's Kinesis, DynamoDB Streams and Kafka (Amazon MSK, self-managed
//! Apache Kafka) event source mappings, following AWS's documented checkpoint rules, for
//! testing a stream consumer's partial batch responses.
//!
//! (ministack 1.5.33 runs Kinesis and DynamoDB Streams mappings but advances past every batch
//! whatever the response says: it ignores `ReportBatchItemFailures`. It has no Kafka. This
//! stand-in follows the rules.)
//!
//! The rules it follows, per shard (Kafka: per topic-partition), one batch in flight at a
//! time:
//! * a batch is up to `batch_size` records from the checkpoint, in sequence order;
//! * a response with an empty or missing `batchItemFailures` list is success: the checkpoint
//!   moves past the batch;
//! * a response naming failures checkpoints at the **lowest** sequence number named and the
//!   next batch starts there (that record and every later one are sent again);
//! * an empty, null or unknown `itemIdentifier`, a response that is not the response object,
//!   or a function error fails the whole batch;
//! * Kafka: one invocation carries a batch of every partition with records left
//!   (`{"eventSource": "aws:kafka", "records": {"TOPIC-PARTITION": [...]}}`), and a failure is
//!   named `{"itemIdentifier": {"partition": "TOPIC-PARTITION", "offset": OFFSET}}` (the
//!   offset a number; the partition split at its last `-`, as a topic's name may hold `-`):
//!   each partition checkpoints at the lowest offset named for it, a partition not named has
//!   succeeded, and an identifier that is not such an object, or names a partition or offset
//!   not in the batch, fails the whole batch (every partition in it);
//! * a whole-batch failure with `bisect_on_error` splits the batch in two (halves of more than
//!   one record) and sends the first half, then the second; a split is not a retry attempt
//!   (this kit's reading; the halves' own failures count); a Kafka batch splits each of its
//!   partitions' records so;
//! * more retries than `max_retry_attempts` of one checkpoint, or a first record older than
//!   `max_record_age` when a batch is about to be sent, gives the batch up: its metadata only
//!   (shard, first and last sequence numbers, size, why) goes to the on-failure destination
//!   ([`Drained::on_failure`]) and the checkpoint moves past it.
//!
//! Time is virtual: records arrive at the second they are put; every invocation takes one
//! second.
//!
//! ```
//! use sqs_claim_testkit::stream::{Mapping, Stream};
//!
//! # tokio_test_block_on(async {
//! let mut stream = Stream::kinesis("orders");
//! stream.put("shardId-000000000000", &serde_json::json!({"order": 1}));
//! let drained = Mapping::default()
//!     .drain(&stream, |_event| async { Ok(serde_json::json!({"batchItemFailures": []})) })
//!     .await;
//! assert_eq!(drained.invocations, 1);
//! assert!(drained.on_failure.is_empty());
//! # });
//! # fn tokio_test_block_on(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::time::Duration;

use serde_json::{Value, json};

/// Which stream the records come from: it decides the records' shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Amazon Kinesis Data Streams: the payload base64-encoded in `kinesis.data`.
    Kinesis,
    /// Amazon DynamoDB Streams: the payload is the item's `NewImage`.
    DynamoDb,
    /// Amazon MSK or self-managed Apache Kafka: the payload base64-encoded in `value`.
    Kafka,
}

/// A stream: shards of records in sequence order, in the shape Lambda sends them.
#[derive(Debug, Clone)]
pub struct Stream {
    source: Source,
    name: String,
    shards: BTreeMap<String, Vec<Value>>,
    next: u64,
}

impl Stream {
    /// An empty Kinesis stream.
    pub fn kinesis(name: &str) -> Self {
        Self::new(Source::Kinesis, name)
    }

    /// An empty DynamoDB stream (of the table `name`).
    pub fn dynamodb(name: &str) -> Self {
        Self::new(Source::DynamoDb, name)
    }

    /// An empty Kafka topic `topic` (its partitions are the shards, named `TOPIC-PARTITION`:
    /// `orders-eu-0`, `orders-eu-1`, ...).
    pub fn kafka(topic: &str) -> Self {
        Self::new(Source::Kafka, topic)
    }

    fn new(source: Source, name: &str) -> Self {
        Stream {
            source,
            name: name.to_owned(),
            shards: BTreeMap::new(),
            next: 1,
        }
    }

    /// The stream's ARN, as its records' `eventSourceARN`.
    pub fn arn(&self) -> String {
        match self.source {
            Source::Kinesis => format!(
                "arn:aws:kinesis:us-east-1:123456789012:stream/{}",
                self.name
            ),
            Source::DynamoDb => format!(
                "arn:aws:dynamodb:us-east-1:123456789012:table/{}/stream/2026-01-01T00:00:00.000",
                self.name
            ),
            Source::Kafka => "arn:aws:kafka:us-east-1:123456789012:cluster/demo-cluster/\
                 e9f754c6-d29a-4430-a7db-958a19fd2c54-4"
                .to_owned(),
        }
    }

    /// Appends a record with `payload` to `shard`; returns its sequence number (increasing
    /// across the stream, all of one width, so they compare as text). Kinesis: the payload's
    /// JSON text, base64-encoded, is the `data`; DynamoDB: an `INSERT` of the item whose
    /// attributes are the payload (DynamoDB JSON, e.g. `{"amount": {"N": "5"}}`) under the key
    /// `{"id": {"S": "<seq>"}}` (each record a new item, as a producer's second write of one
    /// event under a new id is): the `NewImage` is the payload with that key attribute added
    /// (a payload with an `id` of its own is keyed by it);
    /// Kafka: `shard` is `TOPIC-PARTITION`, the payload's JSON text, base64-encoded, is the
    /// `value`, the key `key-<offset>`, one header `source: testkit`, and the sequence number
    /// is the offset, in decimal (offsets increase within a partition, with gaps as on a
    /// compacted or transactional topic; no two partitions share one, so an offset names one
    /// record of the stream).
    pub fn put(&mut self, shard: &str, payload: &Value) -> String {
        let n = self.next;
        self.next += 1;
        let arrival = n; // one record a second
        let arn = self.arn();
        let record = match self.source {
            Source::Kinesis => {
                let seq = format!("{n:056}");
                json!({
                    "kinesis": {
                        "kinesisSchemaVersion": "1.0",
                        "partitionKey": format!("pk-{n}"),
                        "sequenceNumber": seq,
                        "data": base64_encode(payload.to_string().as_bytes()),
                        "approximateArrivalTimestamp": arrival as f64 + 0.5,
                    },
                    "eventSource": "aws:kinesis",
                    "eventVersion": "1.0",
                    "eventID": format!("{shard}:{seq}"),
                    "eventName": "aws:kinesis:record",
                    "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
                    "awsRegion": "us-east-1",
                    "eventSourceARN": arn,
                })
            }
            Source::DynamoDb => {
                let seq = format!("{n:021}");
                // An image holds the item's key attributes, as DynamoDB's do.
                let mut image = payload.clone();
                let mut key = json!({"S": seq});
                if let Value::Object(attributes) = &mut image {
                    key = attributes.entry("id").or_insert(key).clone();
                }
                json!({
                    "eventID": format!("{:032x}", u128::from(n) * 0x9e37_79b9_7f4a_7c15),
                    "eventName": "INSERT",
                    "eventVersion": "1.1",
                    "eventSource": "aws:dynamodb",
                    "awsRegion": "us-east-1",
                    "dynamodb": {
                        "ApproximateCreationDateTime": arrival,
                        "Keys": {"id": key},
                        "NewImage": image,
                        "SequenceNumber": seq,
                        "SizeBytes": 26,
                        "StreamViewType": "NEW_AND_OLD_IMAGES",
                    },
                    "eventSourceARN": arn,
                })
            }
            Source::Kafka => {
                let (topic, partition) = split_partition(shard).unwrap_or((shard, 0));
                json!({
                    "topic": topic,
                    "partition": partition,
                    "offset": n,
                    "timestamp": arrival * 1000,
                    "timestampType": "CREATE_TIME",
                    "key": base64_encode(format!("key-{n}").as_bytes()),
                    "value": base64_encode(payload.to_string().as_bytes()),
                    "headers": [{"source": b"testkit".to_vec()}],
                })
            }
        };
        let seq = sequence_number(self.source, &record);
        self.shards
            .entry(shard.to_owned())
            .or_default()
            .push(record);
        seq
    }

    /// The record with sequence number `seq`, to change (a test that corrupts one).
    pub fn record_mut(&mut self, seq: &str) -> Option<&mut Value> {
        let source = self.source;
        self.shards
            .values_mut()
            .flatten()
            .find(|r| sequence_number(source, r) == seq)
    }

    /// The sequence numbers of `shard`, in order.
    pub fn sequence_numbers(&self, shard: &str) -> Vec<String> {
        self.shards
            .get(shard)
            .map(|records| {
                records
                    .iter()
                    .map(|r| sequence_number(self.source, r))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The shards' names.
    pub fn shards(&self) -> Vec<String> {
        self.shards.keys().cloned().collect()
    }
}

fn sequence_number(source: Source, record: &Value) -> String {
    let pointer = match source {
        Source::Kinesis => "/kinesis/sequenceNumber",
        Source::DynamoDb => "/dynamodb/SequenceNumber",
        Source::Kafka => "/offset",
    };
    match record.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// `TOPIC-PARTITION` split at its last `-` (a topic's name may hold `-` itself).
fn split_partition(name: &str) -> Option<(&str, i64)> {
    let (topic, partition) = name.rsplit_once('-')?;
    Some((topic, partition.parse().ok()?))
}

/// An event source mapping's error handling settings.
#[derive(Debug, Clone)]
pub struct Mapping {
    /// Records per batch (`BatchSize`). Default 100.
    pub batch_size: usize,
    /// `BisectBatchOnFunctionError`. Default off.
    pub bisect_on_error: bool,
    /// `MaximumRetryAttempts`; `None` is -1 (until the records expire). Default `None`.
    pub max_retry_attempts: Option<u32>,
    /// `MaximumRecordAgeInSeconds`; `None` is -1. Default `None`.
    pub max_record_age: Option<Duration>,
    /// Invocations after which the stand-in stops (a consumer that never lets a shard go on,
    /// with unbounded retries). Default 10,000.
    pub max_invocations: usize,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            batch_size: 100,
            bisect_on_error: false,
            max_retry_attempts: None,
            max_record_age: None,
            max_invocations: 10_000,
        }
    }
}

/// What an on-failure destination receives for a batch given up on: metadata, no records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnFailure {
    /// The shard (Kafka: the topic-partition).
    pub shard: String,
    /// The batch's first sequence number.
    pub start_sequence_number: String,
    /// The batch's last sequence number.
    pub end_sequence_number: String,
    /// How many records the batch held.
    pub batch_size: usize,
    /// `RetryAttemptsExhausted` or `RecordAgeExceeded`.
    pub condition: &'static str,
}

/// How a [`Mapping::drain`] went.
#[derive(Debug, Clone, Default)]
pub struct Drained {
    /// Every invocation, in order: the shard and the batch's sequence numbers (Kafka: one
    /// entry for each partition in the invocation).
    pub batches: Vec<(String, Vec<String>)>,
    /// How many invocations there were.
    pub invocations: usize,
    /// The batches given up on, as the on-failure destination got them.
    pub on_failure: Vec<OnFailure>,
    /// Whether the stand-in stopped at `max_invocations` with records left.
    pub stopped_early: bool,
}

impl Drained {
    /// The sequence numbers given up on (in the destination's batches).
    pub fn given_up(&self, stream: &Stream) -> Vec<String> {
        let mut out = Vec::new();
        for f in &self.on_failure {
            let seqs = stream.sequence_numbers(&f.shard);
            let start = seqs.iter().position(|s| *s == f.start_sequence_number);
            let end = seqs.iter().position(|s| *s == f.end_sequence_number);
            if let (Some(start), Some(end)) = (start, end) {
                out.extend_from_slice(&seqs[start..=end]);
            }
        }
        out
    }
}

impl Mapping {
    /// Feeds every shard of `stream` to `invoke` until each is drained (or given up on), one
    /// batch at a time per shard, the shards taking turns (Kafka: one invocation with a batch
    /// of every partition with records left). `invoke` gets the event (`{"Records": [...]}`;
    /// Kafka: `{"eventSource": "aws:kafka", "records": {...}, ...}`) and returns the function's
    /// response, or `Err` for a function error (a crash, a timeout, a response lost on the
    /// way).
    pub async fn drain<F, Fut>(&self, stream: &Stream, mut invoke: F) -> Drained
    where
        F: FnMut(Value) -> Fut,
        Fut: Future<Output = Result<Value, String>>,
    {
        struct Shard<'a> {
            name: &'a str,
            records: &'a [Value],
            /// The checkpoint: the index of the next record to send.
            pos: usize,
            /// Halves of a bisected batch still to send.
            pending: VecDeque<(usize, usize)>,
            /// Retries of the batch at the checkpoint.
            retries: u32,
        }
        let mut shards: Vec<Shard<'_>> = stream
            .shards
            .iter()
            .map(|(name, records)| Shard {
                name,
                records,
                pos: 0,
                pending: VecDeque::new(),
                retries: 0,
            })
            .collect();
        let kafka = stream.source == Source::Kafka;
        let mut drained = Drained::default();
        let mut now: u64 = stream.next; // seconds; records arrived at 1, 2, ...
        let give_up = |shard: &Shard<'_>, (start, end): (usize, usize), condition| OnFailure {
            shard: shard.name.to_owned(),
            start_sequence_number: sequence_number(stream.source, &shard.records[start]),
            end_sequence_number: sequence_number(stream.source, &shard.records[end - 1]),
            batch_size: end - start,
            condition,
        };
        loop {
            // This round's invocations, each a list of (shard, range): one per shard, or (Kafka)
            // one for every partition.
            let mut round: Vec<Vec<(usize, (usize, usize))>> = Vec::new();
            let mut busy = false;
            for (k, shard) in shards.iter_mut().enumerate() {
                if shard.pos >= shard.records.len() {
                    continue;
                }
                busy = true;
                let range = shard.pending.front().copied().unwrap_or((
                    shard.pos,
                    (shard.pos + self.batch_size.max(1)).min(shard.records.len()),
                ));
                // Too old to send: given up on before the invocation.
                if let Some(max_age) = self.max_record_age {
                    let arrived = arrival(stream.source, &shard.records[range.0]);
                    if now.saturating_sub(arrived) > max_age.as_secs() {
                        drained
                            .on_failure
                            .push(give_up(shard, range, "RecordAgeExceeded"));
                        shard.pending.pop_front();
                        shard.pos = range.1;
                        shard.retries = 0;
                        continue;
                    }
                }
                match round.first_mut() {
                    Some(batch) if kafka => batch.push((k, range)),
                    _ => round.push(vec![(k, range)]),
                }
            }
            if !busy {
                return drained;
            }
            for send in round {
                if drained.invocations >= self.max_invocations {
                    drained.stopped_early = true;
                    return drained;
                }
                let mut parts: Vec<(String, Vec<String>)> = Vec::with_capacity(send.len());
                let mut records = serde_json::Map::new();
                let mut batch: Vec<Value> = Vec::new();
                for &(k, range) in &send {
                    let shard = &shards[k];
                    let slice = &shard.records[range.0..range.1];
                    let seqs: Vec<String> = slice
                        .iter()
                        .map(|r| sequence_number(stream.source, r))
                        .collect();
                    drained.batches.push((shard.name.to_owned(), seqs.clone()));
                    parts.push((shard.name.to_owned(), seqs));
                    if kafka {
                        records.insert(shard.name.to_owned(), Value::Array(slice.to_vec()));
                    } else {
                        batch.extend_from_slice(slice);
                    }
                }
                drained.invocations += 1;
                now += 1;
                let event = if kafka {
                    json!({
                        "eventSource": "aws:kafka",
                        "eventSourceArn": stream.arn(),
                        "bootstrapServers": "b-1.demo-cluster.kafka.us-east-1.amazonaws.com:9092",
                        "records": records,
                    })
                } else {
                    json!({ "Records": batch })
                };
                let outcome = match invoke(event).await {
                    Err(_) => Err(()),
                    Ok(response) if kafka => kafka_failures(&response, &parts),
                    Ok(response) => lowest_failure(&response, &parts[0].1).map(|i| vec![i]),
                };
                for (n, &(k, range)) in send.iter().enumerate() {
                    let shard = &mut shards[k];
                    match outcome.as_ref().map(|lowest| lowest[n]) {
                        Ok(None) => {
                            // Success: past the batch.
                            shard.pending.pop_front();
                            shard.pos = range.1;
                            shard.retries = 0;
                        }
                        Ok(Some(i)) => {
                            // Checkpoint at the lowest failure; the next batch starts there.
                            let at = range.0 + i;
                            shard.pending.clear();
                            if at > shard.pos {
                                shard.retries = 0;
                            }
                            shard.pos = at;
                            shard.retries += 1;
                            if self
                                .max_retry_attempts
                                .is_some_and(|max| shard.retries > max)
                            {
                                let end = (at + self.batch_size.max(1)).min(shard.records.len());
                                drained.on_failure.push(give_up(
                                    shard,
                                    (at, end),
                                    "RetryAttemptsExhausted",
                                ));
                                shard.pos = end;
                                shard.retries = 0;
                            }
                        }
                        // A function error, or a response that fails the whole batch.
                        Err(()) => {
                            if self.bisect_on_error && range.1 - range.0 > 1 {
                                let mid = range.0 + (range.1 - range.0) / 2;
                                shard.pending.pop_front();
                                shard.pending.push_front((mid, range.1));
                                shard.pending.push_front((range.0, mid));
                                continue;
                            }
                            shard.retries += 1;
                            if self
                                .max_retry_attempts
                                .is_some_and(|max| shard.retries > max)
                            {
                                drained.on_failure.push(give_up(
                                    shard,
                                    range,
                                    "RetryAttemptsExhausted",
                                ));
                                shard.pending.pop_front();
                                shard.pos = range.1;
                                shard.retries = 0;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// For each partition of a Kafka batch (its name and offsets), the index of the lowest offset
/// the response names for it, `None` when it names none; `Err` when the response fails the
/// whole batch (an identifier that is not `{"partition": "TOPIC-PARTITION", "offset": N}`, or
/// names a partition or an offset not in the batch, or not the response object).
fn kafka_failures(
    response: &Value,
    parts: &[(String, Vec<String>)],
) -> Result<Vec<Option<usize>>, ()> {
    let none = vec![None; parts.len()];
    let failures = match response {
        Value::Null => return Ok(none),
        Value::Object(map) => match map.get("batchItemFailures") {
            None | Some(Value::Null) => return Ok(none),
            Some(Value::Array(list)) => list,
            Some(_) => return Err(()),
        },
        _ => return Err(()),
    };
    let mut lowest = none;
    for failure in failures {
        let id = failure
            .get("itemIdentifier")
            .and_then(Value::as_object)
            .ok_or(())?;
        let (topic, partition) = id
            .get("partition")
            .and_then(Value::as_str)
            .and_then(split_partition)
            .ok_or(())?;
        let offset = id.get("offset").and_then(Value::as_i64).ok_or(())?;
        let k = parts
            .iter()
            .position(|(name, _)| split_partition(name) == Some((topic, partition)))
            .ok_or(())?;
        let offset = offset.to_string();
        let i = parts[k].1.iter().position(|s| *s == offset).ok_or(())?;
        // Offsets of one partition increase along the batch: the lowest is the first.
        lowest[k] = Some(lowest[k].map_or(i, |l: usize| l.min(i)));
    }
    Ok(lowest)
}

/// The index (in the batch) of the lowest sequence number the response names, `Ok(None)` when
/// it names none, `Err` when the response fails the whole batch (an empty, null or unknown
/// identifier, or not the response object).
fn lowest_failure(response: &Value, seqs: &[String]) -> Result<Option<usize>, ()> {
    let failures = match response {
        Value::Null => return Ok(None),
        Value::Object(map) => match map.get("batchItemFailures") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(list)) => list,
            Some(_) => return Err(()),
        },
        _ => return Err(()),
    };
    let mut lowest: Option<usize> = None;
    for failure in failures {
        let id = failure
            .get("itemIdentifier")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or(())?;
        let i = seqs.iter().position(|s| s == id).ok_or(())?;
        // Sequence numbers of one shard increase along the batch: the lowest is the first.
        lowest = Some(lowest.map_or(i, |l: usize| l.min(i)));
    }
    Ok(lowest)
}

fn arrival(source: Source, record: &Value) -> u64 {
    let (pointer, per_second) = match source {
        Source::Kinesis => ("/kinesis/approximateArrivalTimestamp", 1.0),
        Source::DynamoDb => ("/dynamodb/ApproximateCreationDateTime", 1.0),
        Source::Kafka => ("/timestamp", 1000.0),
    };
    (record
        .pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
        / per_second) as u64
}

/// Standard base64 with padding.
fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc() {
        assert_eq!(base64_encode(b""), "");
        assert_eq!(base64_encode(b"f"), "Zg==");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_encode(b"foo"), "Zm9v");
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn the_lowest_named_failure_is_the_checkpoint_and_bad_ids_fail_the_batch() {
        let seqs: Vec<String> = ["1", "2", "3"].iter().map(|s| s.to_string()).collect();
        let r = |ids: &[&str]| json!({"batchItemFailures": ids.iter().map(|i| json!({"itemIdentifier": i})).collect::<Vec<_>>()});
        assert_eq!(lowest_failure(&r(&["3", "2"]), &seqs), Ok(Some(1)));
        assert_eq!(lowest_failure(&r(&[]), &seqs), Ok(None));
        assert_eq!(lowest_failure(&Value::Null, &seqs), Ok(None));
        assert_eq!(lowest_failure(&r(&[""]), &seqs), Err(()));
        assert_eq!(lowest_failure(&r(&["9"]), &seqs), Err(()));
        assert_eq!(
            lowest_failure(
                &json!({"batchItemFailures": [{"itemIdentifier": null}]}),
                &seqs
            ),
            Err(())
        );
    }

    #[test]
    fn kafka_failures_checkpoint_per_partition_and_bad_ids_fail_the_batch() {
        let parts = vec![
            (
                "orders-eu-0".to_owned(),
                vec!["1".to_owned(), "4".to_owned()],
            ),
            (
                "orders-eu-1".to_owned(),
                vec!["2".to_owned(), "3".to_owned()],
            ),
        ];
        let r = |ids: Value| json!({ "batchItemFailures": ids });
        let id = |p: &str, o: i64| json!({"itemIdentifier": {"partition": p, "offset": o}});
        assert_eq!(
            kafka_failures(
                &r(json!([id("orders-eu-0", 4), id("orders-eu-0", 1)])),
                &parts
            ),
            Ok(vec![Some(0), None])
        );
        assert_eq!(
            kafka_failures(&r(json!([id("orders-eu-1", 3)])), &parts),
            Ok(vec![None, Some(1)])
        );
        assert_eq!(kafka_failures(&Value::Null, &parts), Ok(vec![None, None]));
        assert_eq!(kafka_failures(&r(json!([])), &parts), Ok(vec![None, None]));
        // An offset of another partition, an unknown partition, a string id, a string offset,
        // an empty partition: the whole batch fails.
        for bad in [
            json!([id("orders-eu-0", 2)]),
            json!([id("orders-9", 1)]),
            json!([{"itemIdentifier": "orders-eu-0-1"}]),
            json!([{"itemIdentifier": {"partition": "orders-eu-0", "offset": "1"}}]),
            json!([id("", 1)]),
            json!([{"itemIdentifier": null}]),
        ] {
            assert_eq!(kafka_failures(&r(bad.clone()), &parts), Err(()), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_kafka_batch_holds_every_partition_and_each_checkpoints_alone() {
        let mut stream = Stream::kafka("orders-eu");
        let a: Vec<String> = (0..3)
            .map(|i| stream.put("orders-eu-0", &json!({"n": i})))
            .collect();
        let b: Vec<String> = (0..3)
            .map(|i| stream.put("orders-eu-1", &json!({"n": i})))
            .collect();
        let events = std::sync::Mutex::new(Vec::new());
        let first = a[1].parse::<i64>().unwrap();
        let drained = Mapping::default()
            .drain(&stream, |event| {
                let n = {
                    let mut events = events.lock().unwrap();
                    events.push(event);
                    events.len()
                };
                async move {
                    Ok(if n == 1 {
                        json!({"batchItemFailures": [
                            {"itemIdentifier": {"partition": "orders-eu-0", "offset": first}}
                        ]})
                    } else {
                        json!({"batchItemFailures": []})
                    })
                }
            })
            .await;
        assert_eq!(drained.invocations, 2);
        let events = events.into_inner().unwrap();
        assert_eq!(events[0]["eventSource"], "aws:kafka");
        assert_eq!(events[0]["records"]["orders-eu-1"][0]["topic"], "orders-eu");
        assert_eq!(events[0]["records"]["orders-eu-1"][0]["partition"], 1);
        // Partition 1 went on; partition 0 is sent again from the offset named.
        assert_eq!(
            drained.batches,
            vec![
                ("orders-eu-0".to_owned(), a.clone()),
                ("orders-eu-1".to_owned(), b),
                ("orders-eu-0".to_owned(), a[1..].to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn retries_from_the_checkpoint_then_gives_up_to_the_destination() {
        let mut stream = Stream::kinesis("s");
        let seqs: Vec<String> = (0..5)
            .map(|i| stream.put("shard-1", &json!({"n": i})))
            .collect();
        let mapping = Mapping {
            batch_size: 10,
            max_retry_attempts: Some(2),
            ..Mapping::default()
        };
        let bad = seqs[2].clone();
        let drained = mapping
            .drain(&stream, |_| {
                let bad = bad.clone();
                async move { Ok(json!({"batchItemFailures": [{"itemIdentifier": bad}]})) }
            })
            .await;
        // 1 try + 2 retries, then the rest of the shard from the checkpoint is given up on.
        assert_eq!(drained.invocations, 3);
        assert_eq!(drained.batches[1].1, seqs[2..].to_vec());
        assert_eq!(drained.on_failure.len(), 1);
        assert_eq!(drained.given_up(&stream), seqs[2..].to_vec());
    }

    #[tokio::test]
    async fn gives_up_by_record_age() {
        let mut stream = Stream::kinesis("s");
        let seqs: Vec<String> = (0..3)
            .map(|i| stream.put("shard-1", &json!({"n": i})))
            .collect();
        let mapping = Mapping {
            max_record_age: Some(Duration::from_secs(10)),
            ..Mapping::default()
        };
        let first = seqs[0].clone();
        let drained = mapping
            .drain(&stream, |_| {
                let first = first.clone();
                async move { Ok(json!({"batchItemFailures": [{"itemIdentifier": first}]})) }
            })
            .await;
        // Records arrived at 1..3 s, the first batch goes at 4 s, one more each second: the
        // first record is 11 s old (past 10) when the ninth would go.
        assert_eq!(drained.invocations, 8);
        assert_eq!(drained.on_failure.len(), 1);
        assert_eq!(drained.on_failure[0].condition, "RecordAgeExceeded");
        assert_eq!(drained.given_up(&stream), seqs);
    }

    #[tokio::test]
    async fn bisects_a_failing_batch() {
        let mut stream = Stream::dynamodb("t");
        let seqs: Vec<String> = (0..4)
            .map(|i| stream.put("shard-1", &json!({"n": {"N": i.to_string()}})))
            .collect();
        let mapping = Mapping {
            bisect_on_error: true,
            max_retry_attempts: Some(0),
            ..Mapping::default()
        };
        let poison = seqs[3].clone();
        let drained = mapping
            .drain(&stream, |event| {
                let poison = poison.clone();
                async move {
                    let has = event.to_string().contains(&poison);
                    if has {
                        Err("crash".to_owned())
                    } else {
                        Ok(Value::Null)
                    }
                }
            })
            .await;
        let sizes: Vec<usize> = drained.batches.iter().map(|b| b.1.len()).collect();
        assert_eq!(sizes, vec![4, 2, 2, 1, 1]);
        assert_eq!(drained.given_up(&stream), vec![poison]);
    }
}
