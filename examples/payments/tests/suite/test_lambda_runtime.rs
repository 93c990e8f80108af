//! The `consumer` Lambda binary under the real `lambda_runtime` loop.
//!
//! Each test starts a fake Lambda Runtime API on 127.0.0.1 (`sqs_claim_testkit::runtime`),
//! runs the built binary against it with an embedded SQLite store in a temp dir (no AWS, no
//! stand-ins), hands it events one invocation at a time and checks what it posts back:
//!
//! * the sample events get exactly the batch responses of `events/expected.json`, and a second
//!   delivery of the same batch credits nothing (balances read back with `sqs-claim balances`
//!   on the same SQLite file);
//! * a record without a `messageId` fails the invocation (`.../error`, so Lambda redelivers the
//!   batch) instead of answering an empty `itemIdentifier`, credits nothing, and the function
//!   keeps serving;
//! * a payload that is not UTF-8 fails that invocation alone (`.../error`), at any log level,
//!   and the function keeps serving;
//! * with the default log level, no message body reaches stdout or stderr;
//! * each batch writes one CloudWatch EMF line to stdout, valid against the specification, with
//!   the batch's numbers; and the logs follow Lambda's log controls (`AWS_LAMBDA_LOG_FORMAT`,
//!   `AWS_LAMBDA_LOG_LEVEL`).
//!
//! Every wait is bounded ([`WAIT`]); the consumer is killed when its guard drops, pass or fail.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use consumer::{Consumer, TempDir};
use serde_json::{Value, json};
use sqs_claim_testkit::emf;
use sqs_claim_testkit::runtime::{FakeRuntime, Posted};
use support::consumer;

const CLI: &str = env!("CARGO_BIN_EXE_payments");

/// The longest any single step may take: an invocation answered, the CLI done.
const WAIT: Duration = Duration::from_secs(30);

/// The deadline each invocation gets, as Lambda's function timeout would give it.
const INVOCATION_BUDGET: Duration = Duration::from_secs(30);

/// `sqlite:` URL of the store file inside `dir`.
fn store_url(dir: &TempDir) -> String {
    format!(
        "sqlite:{}",
        dir.path().join("state").join("claims.db").display()
    )
}

/// Starts the consumer on the embedded store in `dir`, with `settings` on top.
fn start(dir: &TempDir, runtime_api: &str, settings: &[(&str, &str)]) -> Consumer {
    let store = store_url(dir);
    let env = [("SQS_CLAIM_STORE", store.as_str())]
        .into_iter()
        .chain(settings.iter().copied());
    Consumer::start(dir.path(), "consumer", runtime_api, env)
}

/// Hands `event` to the consumer as one invocation and returns what it posted back. Fails
/// (with the consumer's logs) if the consumer exits, posts for another request, or takes
/// longer than [`WAIT`].
async fn invoke(rt: &mut FakeRuntime, consumer: &mut Consumer, event: &str) -> Posted {
    let request_id = rt.queue(event, INVOCATION_BUDGET);
    answer_to(rt, consumer, request_id).await
}

/// What the consumer posted back for `request_id`, as [`invoke`] waits for it.
async fn answer_to(rt: &mut FakeRuntime, consumer: &mut Consumer, request_id: String) -> Posted {
    let started = Instant::now();
    loop {
        // Short slices, so a crashed consumer fails the test at once instead of after WAIT.
        if let Some(posted) = rt.next_post(Duration::from_millis(200)).await {
            let for_id = match &posted {
                Posted::Response { request_id, .. }
                | Posted::InvocationError { request_id, .. } => Some(request_id),
                Posted::InitError { .. } | Posted::Unknown { .. } => None,
            };
            assert_eq!(
                for_id,
                Some(&request_id),
                "the consumer posted something other than the answer to request {request_id}: \
                 {posted:?}\nlogs:\n{}",
                consumer.logs()
            );
            return posted;
        }
        if let Some(status) = consumer.exited() {
            panic!(
                "the consumer exited ({status}) before answering request {request_id}\nlogs:\n{}",
                consumer.logs()
            );
        }
        assert!(
            started.elapsed() < WAIT,
            "no answer to request {request_id} within {WAIT:?}\nlogs:\n{}",
            consumer.logs()
        );
    }
}

/// The body of the batch response the consumer posted, as JSON; fails on anything else.
fn response(posted: Posted, what: &str, consumer: &Consumer) -> Value {
    match posted {
        Posted::Response { body, .. } => serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{what}: the response is not JSON ({e}): {body}")),
        other => panic!(
            "{what}: expected a batch response, got {other:?}\nlogs:\n{}",
            consumer.logs()
        ),
    }
}

/// `sqs-claim balances` on the consumer's store file, run while the consumer sits idle in its
/// `next` call. Bounded by [`WAIT`].
async fn balances(dir: &TempDir) -> BTreeMap<String, i64> {
    let store = store_url(dir);
    let cwd = dir.path().to_owned();
    tokio::task::spawn_blocking(move || {
        let out_path = cwd.join("balances.stdout");
        let err_path = cwd.join("balances.stderr");
        let mut child = Command::new(CLI)
            .args(["balances", "--store", &store])
            .current_dir(&cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(File::create(&out_path).expect("create a file"))
            .stderr(File::create(&err_path).expect("create a file"))
            .spawn()
            .expect("start sqs-claim balances");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll sqs-claim balances") {
                break status;
            }
            if started.elapsed() > WAIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sqs-claim balances took longer than {WAIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        assert!(
            status.success(),
            "sqs-claim balances failed ({status}):\n{stdout}{stderr}"
        );
        stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| {
                let (account, cents) = line
                    .split_once('\t')
                    .unwrap_or_else(|| panic!("balances line without a tab: {line:?}"));
                let cents = cents
                    .trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("balance is not a number ({e}): {line:?}"));
                (account.to_owned(), cents)
            })
            .collect()
    })
    .await
    .expect("the balances task panicked")
}

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events")
}

fn read_event(name: &str) -> String {
    let path = events_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn expected() -> Value {
    serde_json::from_str(&read_event("expected.json")).expect("events/expected.json is JSON")
}

/// `expected.json`'s run `run` (0: fresh store, 1: same store again) of `event`.
fn expected_run<'a>(expected: &'a Value, event: &str, run: usize) -> &'a Value {
    let r = &expected["events"][event]["runs"][run];
    assert!(
        r.is_object(),
        "events/expected.json has no run {run} for {event}"
    );
    r
}

fn balances_of(run: &Value) -> BTreeMap<String, i64> {
    run["balances"]
        .as_object()
        .expect("balances object")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_i64().expect("integer balance")))
        .collect()
}

/// The `order_id`s an event's bodies carry (where a body has one).
fn order_ids(event: &str) -> BTreeSet<String> {
    let event: Value = serde_json::from_str(event).expect("event is JSON");
    event["Records"]
        .as_array()
        .expect("Records")
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(r["body"].as_str()?).ok())
        .filter_map(|b| b["order_id"].as_str().map(str::to_owned))
        .collect()
}

/// Fails if the function ever posted an init error or a request the fake does not know.
async fn assert_nothing_else_posted(rt: &mut FakeRuntime, consumer: &Consumer) {
    if let Some(extra) = rt.next_post(Duration::from_millis(100)).await {
        panic!(
            "unexpected post from the consumer: {extra:?}\nlogs:\n{}",
            consumer.logs()
        );
    }
}

/// The sample events through the real runtime loop: plain twice (the second delivery is all
/// duplicates and credits nothing), then malformed and fifo, each twice. Every response is
/// the one `events/expected.json` gives, and the balances are the sums of its balances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_events_get_the_expected_batch_responses() {
    let dir = TempDir::new("sqs-claim-lambda");
    let mut rt = FakeRuntime::start()
        .await
        .expect("start the fake runtime API");
    let mut consumer = start(&dir, &rt.address(), &[]);
    let expected = expected();

    // The balances below add up each event's own expectation, which holds only if no order
    // of one event reappears in another (that would be a duplicate across events).
    let mut seen = BTreeSet::new();
    for name in ["plain.json", "malformed.json", "fifo.json"] {
        let ids = order_ids(&read_event(name));
        assert!(
            seen.is_disjoint(&ids),
            "{name} reuses an order id of an earlier event; the balance sums below need distinct orders"
        );
        seen.extend(ids);
    }

    // Cumulative balances: per event, the balances of its latest run.
    let mut by_event: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
    let total = |by_event: &BTreeMap<&str, BTreeMap<String, i64>>| {
        let mut sum = BTreeMap::new();
        for balances in by_event.values() {
            for (account, cents) in balances {
                *sum.entry(account.clone()).or_insert(0) += cents;
            }
        }
        sum
    };

    let mut after_plain = None;
    for (name, run) in [
        ("plain.json", 0),
        ("plain.json", 1),
        ("malformed.json", 0),
        ("fifo.json", 0),
        ("malformed.json", 1),
        ("fifo.json", 1),
    ] {
        let what = format!("{name}, run {}", run + 1);
        let want = expected_run(&expected, name, run);
        let posted = invoke(&mut rt, &mut consumer, &read_event(name)).await;
        let got = response(posted, &what, &consumer);
        assert_eq!(
            got,
            want["response"],
            "{what}: the posted batch response differs from events/expected.json\nlogs:\n{}",
            consumer.logs()
        );
        by_event.insert(name, balances_of(want));
        let now = balances(&dir).await;
        assert_eq!(
            now,
            total(&by_event),
            "{what}: balances in the store after this invocation"
        );
        if name == "plain.json" {
            match run {
                0 => after_plain = Some(now),
                _ => assert_eq!(
                    Some(&now),
                    after_plain.as_ref(),
                    "the second delivery of plain.json must credit nothing"
                ),
            }
        }
    }
    // The second plain run's duplicates were seen as such, not silently re-processed: the
    // processor logs each duplicate at info.
    let logs = consumer.logs();
    assert!(
        logs.contains("duplicate"),
        "the duplicates of the second delivery are logged:\n{logs}"
    );
    assert_nothing_else_posted(&mut rt, &consumer).await;
    assert!(
        consumer.exited().is_none(),
        "the consumer must still be waiting for the next invocation:\n{logs}"
    );
}

/// `plain.json` with fresh orders (so nothing in it is a duplicate) and the `messageId` of
/// record #1 replaced by `id` (`None`: removed).
fn batch_with_bad_message_id(id: Option<Value>, orders_from: u32) -> String {
    let mut event: Value = serde_json::from_str(&read_event("plain.json")).expect("plain.json");
    let records = event["Records"].as_array_mut().expect("Records");
    assert!(records.len() >= 2, "plain.json has at least two records");
    for (i, record) in records.iter_mut().enumerate() {
        let order = orders_from + u32::try_from(i).expect("small batch");
        record["body"] = json!(
            json!({"order_id": format!("ord-{order}"), "account": "acct-zed", "amount_cents": 5})
                .to_string()
        );
        record["messageId"] = json!(uuid::Uuid::new_v4().to_string());
    }
    let record = records[1].as_object_mut().expect("record object");
    match id {
        None => {
            record.remove("messageId");
        }
        Some(v) => {
            record.insert("messageId".into(), v);
        }
    }
    event.to_string()
}

/// A record without a usable `messageId` cannot be reported in `batchItemFailures` (an empty
/// or null `itemIdentifier` fails the whole batch anyway, less clearly): the invocation must
/// fail through the runtime's `/error` call, run none of the batch, and the function must go
/// on serving the next invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_without_message_id_fails_the_invocation() {
    let dir = TempDir::new("sqs-claim-lambda");
    let mut rt = FakeRuntime::start()
        .await
        .expect("start the fake runtime API");
    let mut consumer = start(&dir, &rt.address(), &[]);

    // A first good batch, so the store exists and the balances have a baseline.
    let plain = read_event("plain.json");
    let posted = invoke(&mut rt, &mut consumer, &plain).await;
    let first = response(posted, "plain.json", &consumer);
    assert_eq!(first, json!({"batchItemFailures": []}), "plain.json, run 1");
    let before = balances(&dir).await;
    assert!(!before.is_empty(), "plain.json credited accounts");

    for (what, id, orders_from) in [
        ("missing messageId", None, 8100),
        ("empty messageId", Some(json!("")), 8200),
        ("null messageId", Some(Value::Null), 8300),
    ] {
        let event = batch_with_bad_message_id(id, orders_from);
        let posted = invoke(&mut rt, &mut consumer, &event).await;
        let Posted::InvocationError {
            error_type, body, ..
        } = posted
        else {
            panic!(
                "{what}: expected an invocation error (POST .../error), got {posted:?}\nlogs:\n{}",
                consumer.logs()
            );
        };
        // lambda_runtime sends "unhandled" for a handler error; Lambda then retries the batch.
        assert_eq!(error_type.as_deref(), Some("unhandled"), "{what}: {body}");
        let diagnostic: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{what}: the error body is not JSON ({e}): {body}"));
        let message = diagnostic["errorMessage"].as_str().unwrap_or_default();
        assert!(
            message.contains("messageId") && message.contains("#1"),
            "{what}: the error must name the record and the missing field: {body}"
        );
        assert!(
            diagnostic["errorType"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "{what}: the error has a type: {body}"
        );
        assert_eq!(
            balances(&dir).await,
            before,
            "{what}: no record of a refused batch may be credited"
        );
    }

    // The loop survived the failed invocations: the same batch again is all duplicates.
    let posted = invoke(&mut rt, &mut consumer, &plain).await;
    assert_eq!(
        response(posted, "plain.json again", &consumer),
        json!({"batchItemFailures": []})
    );
    assert_eq!(
        balances(&dir).await,
        before,
        "plain.json again credits nothing"
    );
    assert_nothing_else_posted(&mut rt, &consumer).await;
}

/// A payload the runtime cannot read as text (not UTF-8: Lambda's own front end refuses such
/// payloads, a misbehaving Runtime API or a proxy in front of it need not) fails that
/// invocation alone, through the Runtime API's error endpoint, and the consumer goes on
/// serving. `lambda_runtime` 1.5 logs each raw event at TRACE as text, and returned the UTF-8
/// error of that log line out of its loop when the line was enabled: the consumer stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_is_not_utf8_fails_that_invocation_alone() {
    for settings in [
        &[][..],
        &[("RUST_LOG", "trace,lambda_runtime=trace")][..],
        &[("AWS_LAMBDA_LOG_LEVEL", "TRACE")][..],
    ] {
        let dir = TempDir::new("sqs-claim-lambda");
        let mut rt = FakeRuntime::start()
            .await
            .expect("start the fake runtime API");
        let mut consumer = start(&dir, &rt.address(), settings);

        let mut payload = br#"{"Records":[{"messageId":"m-1","body":"caf"#.to_vec();
        payload.push(0xE9); // Latin-1 'é': not UTF-8
        payload.extend_from_slice(br#""}]}"#);
        let request_id = rt.queue_bytes(payload, INVOCATION_BUDGET);
        let posted = answer_to(&mut rt, &mut consumer, request_id).await;
        assert!(
            matches!(posted, Posted::InvocationError { .. }),
            "{settings:?}: expected an invocation error, got {posted:?}\nlogs:\n{}",
            consumer.logs()
        );

        // Still serving: the next invocation is answered.
        let plain = read_event("plain.json");
        let posted = invoke(&mut rt, &mut consumer, &plain).await;
        assert_eq!(
            response(posted, "plain.json after the bad payload", &consumer),
            json!({"batchItemFailures": []}),
            "{settings:?}"
        );
        assert_nothing_else_posted(&mut rt, &consumer).await;
    }
}

/// A body-shaped string that appears nowhere but in message bodies.
fn marker() -> String {
    format!("BODY-MARKER-{}", uuid::Uuid::new_v4().simple())
}

/// With the default log level, what the consumer writes names messages by id and key but never
/// carries a body: not for a success, a duplicate, a body that is not JSON, a body without the
/// key, a body the handler refuses, nor a batch refused for a missing `messageId`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_bodies_stay_out_of_the_logs() {
    bodies_stay_out_of_the_logs(&[]).await;
}

/// Even at `RUST_LOG=trace`, with a directive aimed at the runtime's raw-event log line:
/// `lambda_runtime` would log whole events there.
#[tokio::test]
async fn message_bodies_stay_out_of_the_logs_at_trace() {
    bodies_stay_out_of_the_logs(&[(
        "RUST_LOG",
        "trace,lambda_runtime=trace,lambda_runtime::layers::api_response=trace",
    )])
    .await;
}

async fn bodies_stay_out_of_the_logs(settings: &[(&str, &str)]) {
    let dir = TempDir::new("sqs-claim-lambda");
    let mut rt = FakeRuntime::start()
        .await
        .expect("start the fake runtime API");
    let mut consumer = start(&dir, &rt.address(), settings);
    let mark = marker();

    let bodies = [
        // processed, then a duplicate on the second delivery
        json!({"order_id": "ord-9001", "account": format!("acct-{mark}"), "amount_cents": 1, "memo": mark}).to_string(),
        // not JSON: no key can be read
        format!("{mark} order_id=ord-9002"),
        // JSON without the key
        json!({"account": mark, "amount_cents": 1}).to_string(),
        // the handler refuses it: a negative amount
        json!({"order_id": "ord-9004", "account": mark, "amount_cents": -1}).to_string(),
        // the handler refuses it: a string amount
        json!({"order_id": "ord-9005", "account": "acct-x", "amount_cents": mark}).to_string(),
    ];
    let mut event: Value = serde_json::from_str(&read_event("plain.json")).expect("plain.json");
    let template = event["Records"][0].clone();
    let ids: Vec<String> = bodies
        .iter()
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    event["Records"] = Value::Array(
        bodies
            .iter()
            .zip(&ids)
            .map(|(body, id)| {
                let mut r = template.clone();
                r["messageId"] = json!(id);
                r["body"] = json!(body);
                // A marker in the attributes too: they are as private as the body.
                r["messageAttributes"] = json!({
                    "note": {"stringValue": mark, "stringListValues": [], "binaryListValues": [], "dataType": "String"}
                });
                r.as_object_mut().expect("record").remove("md5OfBody");
                r.as_object_mut()
                    .expect("record")
                    .remove("md5OfMessageAttributes");
                r
            })
            .collect(),
    );
    let event = event.to_string();
    assert!(event.contains(&mark));

    let failed: Vec<Value> = ids[1..]
        .iter()
        .map(|id| json!({"itemIdentifier": id}))
        .collect();
    for run in 1..=2 {
        let posted = invoke(&mut rt, &mut consumer, &event).await;
        assert_eq!(
            response(posted, &format!("marker batch, run {run}"), &consumer),
            json!({"batchItemFailures": failed}),
            "run {run}: the one good message succeeds, the four others are reported"
        );
    }

    // And a batch refused as a whole, for a record without a messageId.
    let mut refused: Value = serde_json::from_str(&event).expect("event");
    refused["Records"][1]
        .as_object_mut()
        .expect("record")
        .remove("messageId");
    let posted = invoke(&mut rt, &mut consumer, &refused.to_string()).await;
    assert!(
        matches!(posted, Posted::InvocationError { ref body, .. } if !body.contains(&mark)),
        "a refused batch fails the invocation, without a body in the error: {posted:?}"
    );
    assert_nothing_else_posted(&mut rt, &consumer).await;

    // Stop the consumer (kill and wait) so that everything it wrote is in the files.
    consumer.kill();
    let logs = consumer.logs();

    // The logs must say something about these messages, or the check below proves nothing.
    for id in &ids[1..] {
        assert!(
            logs.contains(id.as_str()),
            "the failure of message {id} is logged by id:\n{logs}"
        );
    }
    assert!(
        logs.contains(&ids[0]) || logs.contains("ord-9001"),
        "the duplicate on the second run is logged:\n{logs}"
    );
    assert!(
        !logs.contains(&mark),
        "a message body (or attribute) reached the logs:\n{}",
        logs.lines()
            .filter(|l| l.contains(&mark))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!logs.contains("panicked"), "{logs}");
}

/// The EMF line a batch's outcomes should give, from `events/expected.json`'s run: the counts,
/// and the failures by kind from its exceptions.
fn expected_metrics(run: &Value, records: usize) -> BTreeMap<String, i64> {
    let c = &run["counts"];
    let mut m: BTreeMap<String, i64> = [
        ("Records", records as i64),
        ("Processed", c["processed"].as_i64().unwrap_or(0)),
        ("Duplicate", c["duplicate"].as_i64().unwrap_or(0)),
        ("HeldElsewhere", c["held_elsewhere"].as_i64().unwrap_or(0)),
        ("Failed", c["failed"].as_i64().unwrap_or(0)),
        ("NotStarted", c["not_started"].as_i64().unwrap_or(0)),
        ("CutOff", c["cut_off"].as_i64().unwrap_or(0)),
        ("DeadLettered", c["dead_lettered"].as_i64().unwrap_or(0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    for e in run["exceptions"].as_array().into_iter().flatten() {
        if e["outcome"] == "failed" {
            let kind = e["reason"]
                .as_str()
                .expect("a failure's reason is its kind");
            *m.entry(format!("Failed.{kind}")).or_insert(0) += 1;
        }
    }
    m
}

fn records_in(event: &str) -> usize {
    let v: Value = serde_json::from_str(event).expect("event");
    v["Records"].as_array().map_or(0, Vec::len)
}

/// After each invocation the consumer writes one CloudWatch EMF line to stdout, valid against
/// the specification (`sqs_claim_testkit::emf`), whose numbers are the batch's outcomes as
/// `events/expected.json` gives them, in the default namespace, by function and queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_batch_writes_one_valid_emf_line_with_its_numbers() {
    let dir = TempDir::new("sqs-claim-lambda");
    let mut rt = FakeRuntime::start()
        .await
        .expect("start the fake runtime API");
    let mut consumer = start(&dir, &rt.address(), &[]);
    let expected = expected();
    let runs = [
        ("plain.json", 0),
        ("plain.json", 1),
        ("malformed.json", 0),
        ("fifo.json", 0),
    ];
    for (i, (name, run)) in runs.iter().enumerate() {
        let event = read_event(name);
        let posted = invoke(&mut rt, &mut consumer, &event).await;
        response(posted, name, &consumer);
        let lines = emf::lines(&consumer.stdout());
        assert_eq!(
            lines.len(),
            i + 1,
            "one EMF line per batch so far\nlogs:\n{}",
            consumer.logs()
        );
        let line = &lines[i];
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "sqs-claim", "{line}");
        assert_eq!(
            directive["Dimensions"],
            json!([["FunctionName", "QueueName"]])
        );
        assert_eq!(line["FunctionName"], "consumer", "{line}");
        let want = expected_metrics(expected_run(&expected, name, *run), records_in(&event));
        let arn =
            serde_json::from_str::<Value>(&event).expect("event")["Records"][0]["eventSourceARN"]
                .as_str()
                .map(|a| a.rsplit(':').next().unwrap_or("").to_owned());
        assert_eq!(line["QueueName"].as_str(), arn.as_deref(), "{line}");
        for (metric, n) in &want {
            assert_eq!(
                line[metric],
                *n,
                "{name} run {}: {metric} in {line}",
                run + 1
            );
        }
        // No kind beyond the expected ones.
        for key in line.as_object().expect("object").keys() {
            if key.starts_with("Failed.") {
                assert!(want.contains_key(key), "{name}: unexpected {key} in {line}");
            }
        }
        let settled = want["Processed"] + want["Duplicate"];
        if settled > 0 {
            let rate = line["DedupHitRate"].as_f64().expect("a hit rate");
            let want_rate = want["Duplicate"] as f64 * 100.0 / settled as f64;
            assert!(
                (rate - want_rate).abs() < 1e-9,
                "{name}: {rate} vs {want_rate}"
            );
        }
        // The reference consumer without an output queue runs one-shot: one write per
        // message that has a key, counted as a completion.
        let writes = line["CompletionLatency"].as_array().map_or(0, Vec::len) as i64;
        assert!(
            writes >= want["Processed"],
            "{name}: {writes} writes: {line}"
        );
    }
    assert_nothing_else_posted(&mut rt, &consumer).await;
}

/// `SQS_CLAIM_METRICS_NAMESPACE`: a namespace of one's own, or `off` for no line at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_namespace_setting_names_or_disables_the_line() {
    for (setting, want) in [("payments/prod", Some("payments/prod")), ("off", None)] {
        let dir = TempDir::new("sqs-claim-lambda");
        let mut rt = FakeRuntime::start()
            .await
            .expect("start the fake runtime API");
        let mut consumer = start(
            &dir,
            &rt.address(),
            &[("SQS_CLAIM_METRICS_NAMESPACE", setting)],
        );
        let posted = invoke(&mut rt, &mut consumer, &read_event("plain.json")).await;
        response(posted, "plain.json", &consumer);
        let lines = emf::lines(&consumer.stdout());
        match want {
            Some(ns) => {
                assert_eq!(lines.len(), 1, "{}", consumer.logs());
                assert_eq!(lines[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"], ns);
            }
            None => assert!(lines.is_empty(), "off writes no line: {}", consumer.logs()),
        }
    }
}

/// Lambda's log controls: with `AWS_LAMBDA_LOG_FORMAT=JSON` every log line is a flat JSON
/// object with `timestamp`, `level` and `message` at the top and the batch's request id on it;
/// `AWS_LAMBDA_LOG_LEVEL=WARN` keeps only warnings and errors (even with `RUST_LOG=debug`);
/// `Text` writes plain lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_follows_lambdas_log_controls() {
    let dir = TempDir::new("sqs-claim-lambda");
    let mut rt = FakeRuntime::start()
        .await
        .expect("start the fake runtime API");
    let mut consumer = start(
        &dir,
        &rt.address(),
        &[
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
            ("AWS_LAMBDA_LOG_LEVEL", "WARN"),
            ("RUST_LOG", "debug"),
        ],
    );
    let request_id = rt.queue(read_event("malformed.json"), INVOCATION_BUDGET);
    let posted = loop {
        if let Some(p) = rt.next_post(Duration::from_millis(200)).await {
            break p;
        }
        assert!(consumer.exited().is_none(), "{}", consumer.logs());
    };
    response(posted, "malformed.json", &consumer);
    consumer.kill();
    let stdout = consumer.stdout();
    let logs: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.contains("\"_aws\""))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        !logs.is_empty(),
        "the failures are logged: {}",
        consumer.logs()
    );
    for line in &logs {
        assert!(
            line["level"] == "WARN" || line["level"] == "ERROR",
            "only WARN and ERROR under AWS_LAMBDA_LOG_LEVEL=WARN: {line}"
        );
        assert!(
            line["message"].is_string() && line["timestamp"].is_string(),
            "{line}"
        );
    }
    let failed: Vec<&Value> = logs
        .iter()
        .filter(|l| l["message"] == "message failed")
        .collect();
    assert_eq!(failed.len(), 3, "malformed.json fails 3 messages: {stdout}");
    for line in failed {
        assert_eq!(line["request_id"], request_id.as_str(), "{line}");
        assert!(line["message_id"].is_string(), "{line}");
    }
    // The EMF line is still written: Lambda, not the consumer, decides what reaches CloudWatch.
    assert_eq!(emf::lines(&stdout).len(), 1);

    // Text: plain lines.
    let dir = TempDir::new("sqs-claim-lambda");
    let mut rt = FakeRuntime::start()
        .await
        .expect("start the fake runtime API");
    let mut consumer = start(&dir, &rt.address(), &[("AWS_LAMBDA_LOG_FORMAT", "Text")]);
    let posted = invoke(&mut rt, &mut consumer, &read_event("malformed.json")).await;
    response(posted, "malformed.json", &consumer);
    consumer.kill();
    let stdout = consumer.stdout();
    let text: Vec<&str> = stdout.lines().filter(|l| !l.contains("\"_aws\"")).collect();
    assert!(
        text.iter().any(|l| l.contains("message failed")),
        "{stdout}"
    );
    assert!(
        text.iter()
            .all(|l| serde_json::from_str::<Value>(l).is_err()),
        "Text lines are not JSON: {stdout}"
    );
}
