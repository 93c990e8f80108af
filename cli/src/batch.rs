//! `sqs-claim inspect --event FILE`: every record of a captured batch (SQS, Kinesis, DynamoDB
//! Streams), its key as the consumer derives it, and its claim's state; for a stream or a FIFO
//! queue, each shard's (group's) first record that is not completed, where a retry starts.
//!
//! The keys come from the library ([`ProcessorBuilder::record_claims`]) under the consumer's
//! settings ([`Settings::configure`]), so they are the keys the consumer claims, byte for byte:
//! the key source, envelope, namespace and Powertools key format. A record's claim is then
//! freed or forgotten with `sqs-claim release KEY` or `forget KEY`, the key as printed here.

use std::path::Path;
use std::time::SystemTime;

use futures::StreamExt;
use serde_json::Value;
use sqs_claim::claim::PayloadVerdict;
use sqs_claim::processor::RecordClaim;
use sqs_claim::store::{BoxStore, Inspected, Status, StoreAdmin};
use sqs_claim::{MemoryStore, Message, Processor};

use crate::Settings;
use crate::operator::{Failure, InspectReport, state_line, state_word, timestamp, to_json};

/// The environment variable naming the function, the consumer's namespace when none is set.
const FUNCTION_NAME: &str = "AWS_LAMBDA_FUNCTION_NAME";

/// Store reads in flight at once.
const READS_AT_ONCE: usize = 16;

/// One record of the batch, as the report shows it.
struct Row {
    /// Where it came from: `aws:sqs`, `aws:kinesis`, `aws:dynamodb`.
    source: String,
    /// Its shard (Kinesis: from the `eventID`; DynamoDB Streams: the stream's ARN) or FIFO
    /// message group; `None` for a standard queue's message.
    group: Option<String>,
    /// The message id (SQS) or the sequence number (streams).
    id: String,
    /// The stored key, or why it has none.
    key: Result<String, String>,
    /// Its claim record, when it has a key and one.
    found: Option<Inspected>,
    /// How the consumer would claim it (key, payload fingerprint, the record it copies).
    claim: Option<RecordClaim>,
    /// The consumer's verdict on its payload, when its key is done: by a completed claim, or
    /// by an earlier record of this batch with the same key.
    judged: Option<Judged>,
}

/// The consumer's verdict on a record whose key is done ([`RecordClaim::judge`]: the
/// processor's own `PayloadCheck` on the fingerprint it would compare).
struct Judged {
    verdict: PayloadVerdict,
    /// The earlier record of the batch it copies (its index and id), or `None` when it is
    /// judged against the completed claim.
    copy_of: Option<(usize, String)>,
}

impl Judged {
    /// `duplicate`, `payload_mismatch` or `tolerated_mismatch`.
    fn word(&self) -> &'static str {
        match self.verdict {
            PayloadVerdict::Same => "duplicate",
            PayloadVerdict::Refused => "payload_mismatch",
            _ => "tolerated_mismatch",
        }
    }

    fn refused(&self) -> bool {
        self.verdict == PayloadVerdict::Refused
    }

    /// What the consumer does with the record, in words.
    fn words(&self) -> String {
        let (same, other) = match &self.copy_of {
            Some((i, id)) => (
                format!("a copy of #{i} ({id}) of this batch"),
                format!("the key of #{i} ({id}) of this batch with another payload"),
            ),
            None => (
                "the completed claim's payload".to_owned(),
                "the completed claim's key with another payload".to_owned(),
            ),
        };
        match self.verdict {
            PayloadVerdict::Same => format!("this record: {same}: duplicate, skipped"),
            PayloadVerdict::Refused => format!(
                "this record: {other}: payload mismatch, it fails (PayloadCheck::Fail) and its \
                 shard or group waits behind it"
            ),
            _ => format!(
                "this record: {other}: skipped as a duplicate with a warning \
                 (PayloadCheck::Warn)"
            ),
        }
    }
}

impl Row {
    /// `completed`, `held`, `lapsed`, `expired`, `absent` or `no_key`.
    fn state(&self, now: SystemTime) -> &'static str {
        match (&self.key, &self.found) {
            (Err(_), _) => "no_key",
            (Ok(_), None) => "absent",
            (Ok(_), Some(found)) => state_word(found, now),
        }
    }

    /// Whether a retry gets past it: a completed key whose payload the consumer accepts.
    fn passes(&self, now: SystemTime) -> bool {
        self.state(now) == "completed" && !self.judged.as_ref().is_some_and(Judged::refused)
    }

    /// The state, or `payload_mismatch` for a completed key whose payload the consumer refuses.
    fn progress_word(&self, now: SystemTime) -> &'static str {
        match &self.judged {
            Some(j) if j.refused() => "payload_mismatch",
            _ => self.state(now),
        }
    }

    fn json(&self, index: usize, now: SystemTime) -> Value {
        let mut value = match (&self.key, &self.found) {
            (Ok(key), Some(found)) => to_json(key, found, now),
            (Ok(key), None) => serde_json::json!({ "key": key }),
            (Err(why), _) => serde_json::json!({ "key": null, "why": why }),
        };
        if let Value::Object(map) = &mut value {
            map.insert("index".into(), index.into());
            map.insert("source".into(), self.source.clone().into());
            map.insert("group".into(), self.group.clone().into());
            map.insert("id".into(), self.id.clone().into());
            map.insert("state".into(), self.state(now).into());
            map.insert(
                "fingerprint".into(),
                self.claim
                    .as_ref()
                    .and_then(|c| c.fingerprint.clone())
                    .into(),
            );
            map.insert(
                "copy_of".into(),
                self.claim.as_ref().and_then(|c| c.copy_of).into(),
            );
            map.insert(
                "verdict".into(),
                self.judged.as_ref().map(Judged::word).into(),
            );
        }
        value
    }

    fn line(&self, index: usize, now: SystemTime) -> String {
        let group = self
            .group
            .as_deref()
            .map_or_else(String::new, |g| format!(" {g}"));
        let what = match (&self.key, &self.found) {
            (Err(why), _) => format!("no key: {why}"),
            (Ok(key), None) => format!(
                "{key}: no claim record (never claimed, released, forgotten, or deleted by its \
                 TTL): the next delivery runs the handler"
            ),
            (Ok(key), Some(found)) => format!("{key}: {}", state_line(found, now)),
        };
        let judged = self
            .judged
            .as_ref()
            .map_or_else(String::new, |j| format!("; {}", j.words()));
        format!(
            "#{index} {}{group} {}: {what}{judged}\n",
            self.source, self.id
        )
    }
}

/// Reads the batch at `path`, derives its keys under `settings` (and `--namespace`), reads
/// each claim from `claims` and prints the report.
pub(crate) async fn inspect(
    path: &Path,
    namespace: Option<&str>,
    claims: &BoxStore,
    settings: &Settings,
    store: &str,
    report: Option<InspectReport>,
) -> Result<(), Failure> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::failed(format!("cannot read {shown}: {e}")))?;
    let event: Value = serde_json::from_str(&text)
        .map_err(|e| Failure::failed(format!("{shown} is not JSON: {e}")))?;
    let builder = consumer_builder(namespace, settings)?;
    let read = builder
        .record_claims(&event)
        .map_err(|e| Failure::failed(format!("{shown}: {e}")))?;
    let records = batch_records(&event);
    let mut rows: Vec<Row> = futures::stream::iter(records.iter().zip(read))
        .map(|(record, claim)| async move {
            let key = match &claim {
                Ok(Some(claim)) => Ok(claim.key.clone()),
                Ok(None) => Err("the record has none (the consumer runs it without \
                                 deduplication: SQS_CLAIM_MISSING_KEY)"
                    .to_owned()),
                Err(e) => Err(e.message().to_owned()),
            };
            let found = match &key {
                Ok(key) => claims
                    .inspect(key)
                    .await
                    .map_err(|e| Failure::failed(format!("store {store}: {e:#}")))?,
                Err(_) => None,
            };
            let (source, group, id) = identity(record);
            Ok::<Row, Failure>(Row {
                source,
                group,
                id,
                key,
                found,
                claim: claim.ok().flatten(),
                judged: None,
            })
        })
        .buffered(READS_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let now = SystemTime::now();
    judge(&mut rows, now);
    match report {
        Some(InspectReport::Json) => {
            let all: Vec<Value> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| r.json(i, now))
                .collect();
            let text =
                serde_json::to_string_pretty(&all).map_err(|e| Failure::failed(e.to_string()))?;
            println!("{text}");
        }
        None => {
            for (i, row) in rows.iter().enumerate() {
                print!("{}", row.line(i, now));
            }
            for line in where_each_group_stands(&rows, now) {
                println!("{line}");
            }
        }
    }
    eprintln!("{}", summary(&rows, now));
    Ok(())
}

/// Each record whose key is done, judged as the consumer would judge it: a later copy of a key
/// of this batch against that earlier record's payload (the consumer makes it follow that
/// record), any other against its completed claim's (`RecordClaim::judge`).
fn judge(rows: &mut [Row], now: SystemTime) {
    for i in 0..rows.len() {
        let Some(claim) = &rows[i].claim else {
            continue;
        };
        let judged = match claim.copy_of {
            Some(j) => rows.get(j).map(|first| Judged {
                verdict: claim.judge(first.claim.as_ref().and_then(|c| c.fingerprint.as_deref())),
                copy_of: Some((j, first.id.clone())),
            }),
            None => rows[i]
                .found
                .as_ref()
                .filter(|f| f.record.status == Status::Completed && f.record.expires_at > now)
                .map(|f| Judged {
                    verdict: claim.judge(f.record.fingerprint.as_deref()),
                    copy_of: None,
                }),
        };
        rows[i].judged = judged;
    }
}

/// The consumer's processor settings (key, envelope, namespace, key format), with
/// `--namespace` over `SQS_CLAIM_NAMESPACE`. Without either the consumer would use its
/// function's name: `AWS_LAMBDA_FUNCTION_NAME` when set, else the CLI asks (never guesses).
fn consumer_builder(
    namespace: Option<&str>,
    settings: &Settings,
) -> Result<sqs_claim::ProcessorBuilder<MemoryStore, Noop>, Failure> {
    let mut builder = settings.configure(Processor::builder(MemoryStore::new(), Noop));
    if settings.powertools.is_some() {
        if namespace.is_some() {
            return Err(Failure::usage(
                "--namespace does not apply with SQS_CLAIM_POWERTOOLS_HANDLER: Powertools keys \
                 have no namespace",
            ));
        }
        return Ok(builder);
    }
    if let Some(ns) = namespace {
        if ns.is_empty() {
            return Err(Failure::usage("--namespace is empty"));
        }
        builder = builder.namespace(ns);
    } else if settings.namespace.is_none()
        && !std::env::var(FUNCTION_NAME).is_ok_and(|f| !f.is_empty())
    {
        return Err(Failure::usage(
            "the keys' namespace is unknown: pass --namespace NS, or set SQS_CLAIM_NAMESPACE \
             (or AWS_LAMBDA_FUNCTION_NAME, when the consumer sets none) as the consumer has it",
        ));
    }
    Ok(builder)
}

/// A handler that is never run: the builder only derives keys.
#[derive(Debug, Clone, Copy)]
struct Noop;

impl tower::Service<Message> for Noop {
    type Response = ();
    type Error = sqs_claim::Error;
    type Future = std::future::Ready<Result<(), sqs_claim::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _message: Message) -> Self::Future {
        std::future::ready(Ok(()))
    }
}

/// A record's source, shard or group, and id (its sequence number for a stream), read from
/// the event as the consumers read them.
/// The batch's records in the order [`sqs_claim::ProcessorBuilder::record_claims`] answers for them: an
/// SQS, Kinesis or DynamoDB Streams event's `Records`; a Kafka event's partitions in turn, each
/// in offset order, every record given the event's `eventSource` and its `topicPartition`.
fn batch_records(event: &Value) -> Vec<Value> {
    let Some(partitions) = event.get("records").and_then(Value::as_object) else {
        return event
            .get("Records")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
    };
    let source = event.get("eventSource").cloned().unwrap_or(Value::Null);
    let offset = |r: &Value| {
        r.get("offset")
            .and_then(|o| o.as_i64().or_else(|| o.as_str()?.parse().ok()))
            .unwrap_or(-1)
    };
    let mut out = Vec::new();
    for (partition, records) in partitions {
        let mut list = records.as_array().cloned().unwrap_or_default();
        list.sort_by_key(offset);
        for mut record in list {
            if let Value::Object(fields) = &mut record {
                fields.insert("eventSource".into(), source.clone());
                fields.insert("topicPartition".into(), Value::String(partition.clone()));
            }
            out.push(record);
        }
    }
    out
}

fn identity(record: &Value) -> (String, Option<String>, String) {
    let text = |pointer: &str| {
        record
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let source = text("/eventSource").unwrap_or_else(|| "aws:sqs".to_owned());
    match source.as_str() {
        "aws:kinesis" => {
            let shard = text("/eventID")
                .and_then(|id| id.split_once(':').map(|(shard, _)| shard.to_owned()))
                .or_else(|| text("/eventSourceARN"));
            let seq = text("/kinesis/sequenceNumber").unwrap_or_default();
            (source, shard, seq)
        }
        "aws:dynamodb" => {
            let seq = text("/dynamodb/SequenceNumber").unwrap_or_default();
            (source, text("/eventSourceARN"), seq)
        }
        "aws:kafka" | "SelfManagedKafka" => {
            let offset = record.get("offset").map(|o| match o {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            (source, text("/topicPartition"), offset.unwrap_or_default())
        }
        _ => {
            let group = text("/attributes/MessageGroupId");
            (source, group, text("/messageId").unwrap_or_default())
        }
    }
}

/// For each shard (or FIFO group), in batch order: how many records completed before its
/// first that did not, and that one (a retry starts there). Nothing for a standard queue.
fn where_each_group_stands(rows: &[Row], now: SystemTime) -> Vec<String> {
    let mut groups: Vec<&str> = Vec::new();
    for row in rows {
        if let Some(g) = row.group.as_deref()
            && !groups.contains(&g)
        {
            groups.push(g);
        }
    }
    groups
        .into_iter()
        .map(|g| {
            let members: Vec<(usize, &Row)> = rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.group.as_deref() == Some(g))
                .collect();
            let done = members.iter().take_while(|(_, r)| r.passes(now)).count();
            match members.get(done) {
                None => format!(
                    "{g}: all {} records completed: a retry of this batch skips them all",
                    members.len()
                ),
                Some((i, r)) => format!(
                    "{g}: {done} of {} records completed before #{i} ({}), the first that is \
                     not ({}): a retry runs it and the records after it",
                    members.len(),
                    r.id,
                    r.progress_word(now)
                ),
            }
        })
        .collect()
}

/// `inspect --event: 5 records: 3 completed, 1 held, ...` on stderr, with the next steps.
fn summary(rows: &[Row], now: SystemTime) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for row in rows {
        let state = row.state(now);
        match counts.iter_mut().find(|(s, _)| *s == state) {
            Some((_, n)) => *n += 1,
            None => counts.push((state, 1)),
        }
    }
    let counted: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let mut line = format!(
        "inspect --event: {} records at {}: {}",
        rows.len(),
        timestamp(now),
        counted.join(", ")
    );
    if rows
        .iter()
        .any(|r| matches!(r.state(now), "held" | "lapsed"))
    {
        line.push_str(
            "\nrelease a stuck claim (held by a worker that is gone) with `sqs-claim release KEY`",
        );
    }
    let refused = rows
        .iter()
        .filter(|r| r.judged.as_ref().is_some_and(Judged::refused))
        .count();
    if refused > 0 {
        line.push_str(&format!(
            "\n{refused} record{} would fail as payload_mismatch: its key is done with another \
             payload (a producer that reused a key, or a fingerprint stored by an older build)",
            if refused == 1 { "" } else { "s" }
        ));
    }
    if rows.iter().any(|r| r.state(now) == "completed") {
        line.push_str(
            "\nhave a completed record run again (its effect was lost) with `sqs-claim forget \
             KEY`",
        );
    }
    line
}
