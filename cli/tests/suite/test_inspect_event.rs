//! `sqs-claim inspect --event FILE`: the operator's view of a captured batch. The library's own
//! stream consumers (`sqs_claim::stream`) run the batches captured from ministack
//! (`events/streams/`) on a SQLite claims file; the CLI then derives the same keys from the
//! consumer's settings, shows each record's claim and where its shard stands, and the key it
//! prints is the one `release` / `forget` take. No server: SQLite only.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use sqs_claim::SqliteStore;
use sqs_claim::store::{Claim, ClaimRequest, ClaimStore};
use sqs_claim::stream::{DynamoDbStreams, Kafka, Kinesis};
use sqs_claim::{KeySource, Message, Processor};

const BIN: &str = env!("CARGO_BIN_EXE_sqs-claim");

fn events(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../events")
        .join(name)
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read event")).expect("JSON")
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self, what: &str) -> Run {
        assert_eq!(self.code, 0, "{what}: {}{}", self.stdout, self.stderr);
        self
    }

    fn fails(self, code: i32, what: &str) -> Run {
        assert_eq!(self.code, code, "{what}: {}{}", self.stdout, self.stderr);
        let lines: Vec<&str> = self.stderr.trim_end().lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("error: "),
            "{what}: one error line expected: {}",
            self.stderr
        );
        self
    }

    /// Each record's state, from `--report json`.
    fn states(&self) -> Vec<String> {
        let all: Value = serde_json::from_str(&self.stdout).expect("--report json");
        all.as_array()
            .expect("an array")
            .iter()
            .map(|r| r["state"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    fn keys(&self) -> Vec<Value> {
        let all: Value = serde_json::from_str(&self.stdout).expect("--report json");
        all.as_array()
            .expect("an array")
            .iter()
            .map(|r| r["key"].clone())
            .collect()
    }
}

/// `sqs-claim ARGS --store sqlite:DB` with nothing of the test's environment but `env`.
fn sqs_claim(db: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let out = Command::new(BIN)
        .args(args)
        .args(["--store", &format!("sqlite:{}", db.display())])
        .current_dir(db.parent().expect("a dir"))
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run sqs-claim");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    }
}

/// A handler that wants JSON, as a consumer's would: a record that is not JSON fails.
async fn wants_json(msg: Message) -> Result<(), sqs_claim::Error> {
    let _: Value = msg.json()?;
    Ok(())
}

fn event(value: &Value) -> LambdaEvent<Value> {
    LambdaEvent::new(value.clone(), Context::default())
}

#[tokio::test]
async fn a_kinesis_batch_shows_each_record_s_claim_and_where_its_shard_stands() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("claims.db");
    sqs_claim(&db, &["init"], &[]).ok("init");
    let path = events("streams/kinesis.json");
    let batch = read(&path);
    let file = path.to_str().expect("a path");

    // The consumer runs the batch: #0 and #1 complete, #2 is not JSON and stops the shard.
    let store = SqliteStore::open(&db).expect("open");
    let builder =
        Processor::builder(store.clone(), tower::service_fn(wants_json)).namespace("orders-k");
    let consumer = Kinesis::new(builder).expect("a Kinesis consumer");
    let response = consumer
        .process(event(&batch))
        .await
        .expect("processed")
        .into_response();
    assert_eq!(response.batch_item_failures.len(), 1, "{response:?}");

    let run = sqs_claim(
        &db,
        &["inspect", "--event", file, "--namespace", "orders-k"],
        &[],
    )
    .ok("inspect --event");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", run.stdout);
    assert!(
        lines[0].starts_with(
            "#0 aws:kinesis shardId-000000000000 000000017963183600620000000005: \
             orders-k#shardId-000000000000:000000017963183600620000000005: completed, \
             remembered until "
        ),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains(": completed, remembered"), "{}", lines[1]);
    assert!(lines[2].contains(": no claim record"), "{}", lines[2]);
    assert!(
        lines[3].starts_with(
            "shardId-000000000000: 2 of 3 records completed before #2 \
             (000000017963183600620000000007), the first that is not (absent)"
        ),
        "{}",
        lines[3]
    );
    assert!(
        run.stderr.contains("3 records at ") && run.stderr.contains("2 completed, 1 absent"),
        "{}",
        run.stderr
    );

    // The namespace from the consumer's own setting; the JSON report names every record.
    let ns = [("SQS_CLAIM_NAMESPACE", "orders-k")];
    let json = sqs_claim(&db, &["inspect", "--event", file, "--report", "json"], &ns)
        .ok("inspect --event --report json");
    assert_eq!(json.states(), ["completed", "completed", "absent"]);
    let all: Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(all[0]["group"], "shardId-000000000000");
    assert_eq!(all[0]["id"], "000000017963183600620000000005");
    assert_eq!(all[0]["source"], "aws:kinesis");
    assert_eq!(all[0]["status"], "completed");
    let stuck_key = all[2]["key"].as_str().expect("a key").to_owned();

    // A worker that died holding #2: `held`, and the hint names `release`. The key printed
    // is the one `release` takes.
    let now = SystemTime::now();
    let claim = store
        .claim(ClaimRequest {
            key: &stuck_key,
            now,
            lease_until: now + Duration::from_secs(600),
            expires_at: now + Duration::from_secs(3600),
            fingerprint: None,
        })
        .await
        .expect("claim");
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
    let run = sqs_claim(&db, &["inspect", "--event", file], &ns).ok("a held claim");
    assert!(
        run.stdout.contains("in progress, lease lapses at")
            && run.stdout.contains("the first that is not (held)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("sqs-claim release KEY"),
        "{}",
        run.stderr
    );
    sqs_claim(&db, &["release", &stuck_key, "--yes"], &[]).ok("release the printed key");
    let json =
        sqs_claim(&db, &["inspect", "--event", file, "--report", "json"], &ns).ok("after release");
    assert_eq!(json.states(), ["completed", "completed", "absent"]);

    // The key source is the consumer's: a pointer into the decoded data, which #2 lacks.
    let by_order = [
        ("SQS_CLAIM_NAMESPACE", "orders-k"),
        ("SQS_CLAIM_KEY", "json:/order_id"),
    ];
    let json = sqs_claim(
        &db,
        &["inspect", "--event", file, "--report", "json"],
        &by_order,
    )
    .ok("keys from the payload");
    assert_eq!(json.states(), ["absent", "absent", "no_key"]);
    assert_eq!(json.keys()[..2], ["orders-k#o-1", "orders-k#o-2"]);
    let all: Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert!(
        all[2]["why"]
            .as_str()
            .is_some_and(|w| !w.contains("not json")),
        "the reason never quotes the payload: {}",
        all[2]
    );
}

#[tokio::test]
async fn a_dynamodb_streams_batch_uses_the_consumer_s_key_source() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("claims.db");
    sqs_claim(&db, &["init"], &[]).ok("init");
    let path = events("streams/dynamodb.json");
    let file = path.to_str().expect("a path");
    let store = SqliteStore::open(&db).expect("open");
    let key = KeySource::MessageAttribute("dynamodb:keys".into());
    let builder = Processor::builder(store, tower::service_fn(wants_json))
        .namespace("orders-d")
        .key(key);
    let consumer = DynamoDbStreams::new(builder).expect("a DynamoDB Streams consumer");
    let response = consumer
        .process(event(&read(&path)))
        .await
        .expect("ok")
        .into_response();
    assert!(response.batch_item_failures.is_empty(), "{response:?}");

    let env = [
        ("SQS_CLAIM_NAMESPACE", "orders-d"),
        ("SQS_CLAIM_KEY", "attribute:dynamodb:keys"),
    ];
    let json = sqs_claim(&db, &["inspect", "--event", file, "--report", "json"], &env)
        .ok("inspect --event");
    assert_eq!(json.states(), ["completed", "completed", "completed"]);
    assert_eq!(
        json.keys()[0],
        r#"orders-d#{"id":{"S":"o-1"}}@000000017963183331630000000001"#
    );
    let run = sqs_claim(&db, &["inspect", "--event", file], &env).ok("plain");
    assert!(
        run.stdout.contains("all 3 records completed"),
        "{}",
        run.stdout
    );
    // Another key source than the consumer's finds nothing: the settings matter.
    let json = sqs_claim(
        &db,
        &["inspect", "--event", file, "--report", "json"],
        &env[..1],
    )
    .ok("event ids");
    assert_eq!(json.states(), ["absent", "absent", "absent"]);
}

#[tokio::test]
async fn a_kafka_batch_shows_each_partition_where_it_stands() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("claims.db");
    sqs_claim(&db, &["init"], &[]).ok("init");
    let path = events("streams/kafka.json");
    let file = path.to_str().expect("a path");
    // The consumer runs the batch: orders-0 stops at offset 16 (not JSON), orders-eu-2 at
    // offset 4 (a tombstone: an empty body, not JSON either).
    let store = SqliteStore::open(&db).expect("open");
    let builder = Processor::builder(store, tower::service_fn(wants_json)).namespace("orders-m");
    let consumer = Kafka::new(builder).expect("a Kafka consumer");
    let response = consumer
        .process(event(&read(&path)))
        .await
        .expect("processed")
        .into_response();
    let failures = response["batchItemFailures"].as_array().expect("failures");
    assert_eq!(failures.len(), 2, "{response}");

    let ns = [("SQS_CLAIM_NAMESPACE", "orders-m")];
    let json = sqs_claim(&db, &["inspect", "--event", file, "--report", "json"], &ns)
        .ok("inspect --event on a Kafka batch");
    assert_eq!(
        json.states(),
        ["completed", "absent", "absent", "completed", "absent"]
    );
    let all: Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(all[0]["source"], "aws:kafka");
    assert_eq!(all[0]["group"], "orders-0");
    assert_eq!(all[0]["id"], "15");
    assert_eq!(all[0]["key"], "orders-m#orders-0@15");
    assert_eq!(all[4]["group"], "orders-eu-2");
    let run = sqs_claim(&db, &["inspect", "--event", file], &ns).ok("plain");
    assert!(
        run.stdout
            .contains("orders-0: 1 of 3 records completed before #1 (16), the first that is not")
            && run.stdout.contains(
                "orders-eu-2: 1 of 2 records completed before #4 (4), the first that is not"
            ),
        "{}",
        run.stdout
    );
}

#[test]
fn an_sqs_batch_and_bad_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("claims.db");
    sqs_claim(&db, &["init"], &[]).ok("init");
    let path = events("fifo.json");
    let file = path.to_str().expect("a path");
    let ns = [("SQS_CLAIM_NAMESPACE", "payments")];
    let json = sqs_claim(&db, &["inspect", "--event", file, "--report", "json"], &ns)
        .ok("an SQS FIFO batch");
    let batch = read(&path);
    let ids: Vec<String> = batch["Records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| format!("payments#{}", r["messageId"].as_str().expect("an id")))
        .collect();
    assert_eq!(json.keys(), ids);
    let plain = sqs_claim(&db, &["inspect", "--event", file], &ns).ok("plain");
    assert!(
        plain.stdout.contains("acct-alice: 0 of "),
        "each FIFO group: {}",
        plain.stdout
    );

    // No namespace anywhere: a usage error that says how to give it, never a guess.
    let run = sqs_claim(&db, &["inspect", "--event", file], &[]).fails(2, "no namespace");
    assert!(run.stderr.contains("--namespace NS"), "{}", run.stderr);
    // KEY and --event together, or neither: usage errors.
    sqs_claim(&db, &["inspect", "ns#k", "--event", file], &ns).fails(2, "both");
    sqs_claim(&db, &["inspect"], &ns).fails(2, "neither");
    // Not JSON, not a batch of these sources: one error line, exit 1.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "not json").expect("write");
    let bad = bad.to_str().expect("a path");
    sqs_claim(&db, &["inspect", "--event", bad], &ns).fails(1, "not JSON");
    let s3 = dir.path().join("s3.json");
    std::fs::write(&s3, r#"{"Records":[{"eventSource":"aws:s3"}]}"#).expect("write");
    let run = sqs_claim(
        &db,
        &["inspect", "--event", s3.to_str().expect("a path")],
        &ns,
    )
    .fails(1, "an S3 event");
    assert!(run.stderr.contains("aws:s3"), "{}", run.stderr);
    // The key form is unchanged.
    let run = sqs_claim(&db, &["inspect", "payments#nothing"], &[]).fails(1, "no record");
    assert!(run.stderr.contains("no claim record"), "{}", run.stderr);
}

/// A DynamoDB Streams record as a table of orders writes it: an `INSERT` of item `pk`.
fn order_record(seq: &str, pk: &str, order: &str, amount: u32) -> Value {
    serde_json::json!({
        "eventID": format!("event-{seq}"),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1796318333,
            "Keys": {"pk": {"S": pk}},
            "NewImage": {
                "pk": {"S": pk},
                "order_id": {"S": order},
                "amount": {"N": amount.to_string()}
            },
            "SequenceNumber": seq,
            "SizeBytes": 40,
            "StreamViewType": "NEW_AND_OLD_IMAGES"
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:000000000000:table/orders/stream/2026-12-05T00:00:00.000"
    })
}

/// Keyed by a pointer into the image, a producer's second write of an order (another item,
/// the same event) is shown as a duplicate that is skipped, and the same order with another
/// amount as a payload mismatch that stops the shard: what the consumer then does with the
/// batch, through the same rule (`RecordClaim::judge`).
#[tokio::test]
async fn inspect_shows_each_record_s_verdict_as_the_consumer_judges_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("claims.db");
    sqs_claim(&db, &["init"], &[]).ok("init");
    let pointer = "/dynamodb/NewImage/order_id/S";
    let store = SqliteStore::open(&db).expect("open");
    let builder = Processor::builder(store, tower::service_fn(wants_json))
        .namespace("orders-p")
        .key(KeySource::JsonPointer(pointer.into()));
    let consumer = DynamoDbStreams::new(builder).expect("a DynamoDB Streams consumer");
    let first = serde_json::json!({"Records": [
        order_record("100", "a", "o-1", 10),
        order_record("101", "b", "o-2", 20),
    ]});
    let answer = consumer.process(event(&first)).await.expect("processed");
    assert_eq!(answer.report().counts().processed, 2);

    let second = serde_json::json!({"Records": [
        order_record("102", "c", "o-2", 20), // o-2 again: a duplicate
        order_record("103", "d", "o-1", 15), // o-1 with another amount: a mismatch
        order_record("104", "e", "o-3", 30),
        order_record("105", "f", "o-3", 30), // a copy of #2 in this batch
    ]});
    let path = dir.path().join("second.json");
    std::fs::write(&path, second.to_string()).expect("write the batch");
    let file = path.to_str().expect("a path");
    let env = [
        ("SQS_CLAIM_NAMESPACE", "orders-p"),
        ("SQS_CLAIM_KEY", "json:/dynamodb/NewImage/order_id/S"),
    ];
    let json = sqs_claim(&db, &["inspect", "--event", file, "--report", "json"], &env)
        .ok("inspect --event");
    let all: Value = serde_json::from_str(&json.stdout).expect("JSON");
    let verdicts: Vec<Value> = all
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["verdict"].clone())
        .collect();
    assert_eq!(
        verdicts,
        [
            Value::from("duplicate"),
            Value::from("payload_mismatch"),
            Value::Null,
            Value::from("duplicate")
        ],
        "{}",
        json.stdout
    );
    assert_eq!(all[3]["copy_of"], 2);
    assert!(all[0]["fingerprint"].is_string());
    let run = sqs_claim(&db, &["inspect", "--event", file], &env).ok("plain");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[0].contains("duplicate, skipped"), "{}", run.stdout);
    assert!(
        lines[0].contains("this record: the completed claim's payload: duplicate, skipped"),
        "{}",
        run.stdout
    );
    assert!(
        lines[1].contains("payload mismatch, it fails"),
        "{}",
        run.stdout
    );
    assert!(
        lines[3].contains("a copy of #2 (104) of this batch: duplicate"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "1 of 4 records completed before #1 (103), the first that is not (payload_mismatch)"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr
            .contains("1 record would fail as payload_mismatch"),
        "{}",
        run.stderr
    );

    // The consumer does what inspect said: #0 skipped, #1 fails and stops the shard.
    let answer = consumer.process(event(&second)).await.expect("processed");
    let counts = answer.report().counts();
    assert_eq!(
        (counts.duplicate, counts.failed, counts.not_started),
        (1, 1, 2)
    );
    let response = answer.into_response();
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(
        response.batch_item_failures[0].item_identifier.as_deref(),
        Some("103")
    );
}
