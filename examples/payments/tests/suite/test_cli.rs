//! The app's `payments` command line as a user runs it (and the operator's `sqs-claim` on its
//! store, for `prune`): the built binaries, in a fresh directory.
//!
//! * every sample event (`events/*.json`, plus one written here) runs as `events/expected.json`
//!   says; a second run finds every success a duplicate and leaves the balances unchanged;
//! * the same on DynamoDB Local (`--store dynamodb:<unique table>` after `init`);
//! * every bad input ends with one `error: ...` line and a non-zero exit, never a panic;
//! * the consumer's settings come from the environment, and invalid ones are named (the
//!   `consumer` binary under a Runtime API is tested in `tests/suite/test_lambda_runtime.rs`);
//! * two processes on one SQLite file credit each message once;
//! * with `SQS_CLAIM_OUTPUT_QUEUE_URL`, one `credited` notice per credit (ministack).
//!
//! DynamoDB Local must be running: `scripts/standins.sh up` (or `make test`). The endpoint is
//! `SQS_CLAIM_DYNAMODB_ENDPOINT`, default `http://127.0.0.1:8000`; ministack (SQS, for the
//! output queue) at `SQS_CLAIM_SQS_ENDPOINT`, default `http://127.0.0.1:4566`.

use std::collections::BTreeMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_payments");
const CONSUMER: &str = env!("CARGO_BIN_EXE_consumer");

// The operator's `sqs-claim` binary.
use crate::support::operator::sqs_claim_bin;

/// A fresh working directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("sqs-claim-cli-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, content).expect("write a file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self, what: &str) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "{what} failed:\n{}\n{}",
            self.stdout,
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "{what}: {}", self.stderr);
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

/// Runs `program` in `dir` with a clean sqs-claim environment (no `SQS_CLAIM_*`, no
/// `RUST_LOG`, no AWS endpoint) plus `env`.
fn run_program(program: impl AsRef<Path>, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let program = program.as_ref();
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir);
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("SQS_CLAIM_") || n.starts_with("AWS_") || n == "RUST_LOG" {
            cmd.env_remove(&name);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The app's `payments` ([`run_program`]).
fn payments(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_program(BIN, dir, args, env)
}

/// The operator's `sqs-claim` ([`run_program`]): `prune` and the other operator's commands are
/// its, on the store `payments` uses.
fn sqs_claim(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_program(sqs_claim_bin(), dir, args, env)
}

fn balances(dir: &Path, store: &[&str], env: &[(&str, &str)]) -> BTreeMap<String, i64> {
    let mut args = vec!["balances"];
    args.extend_from_slice(store);
    let run = payments(dir, &args, env).ok("balances");
    run.stdout
        .lines()
        .map(|line| {
            let (account, cents) = line
                .split_once('\t')
                .unwrap_or_else(|| panic!("balances line without a tab: {line:?}"));
            (account.to_owned(), cents.parse().expect("integer balance"))
        })
        .collect()
}

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events")
}

/// Every `events/*.json` present now, except `expected.json`.
fn sample_events() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(events_dir()) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && p.file_name().is_some_and(|n| n != "expected.json")
        })
        .collect();
    files.sort();
    files
}

/// What `events/expected.json` says about one event, if it lists it.
fn expected(name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(events_dir().join("expected.json")).ok()?;
    let all: Value = serde_json::from_str(&text).expect("events/expected.json is JSON");
    all["events"].get(name).cloned()
}

/// An SQS event of credits, written by this test so the CLI is tested even without samples:
/// three credits, a redelivery of the first (same message id), a producer-side duplicate
/// (same order id, other message id), and a negative amount.
fn own_event() -> String {
    let record = |id: &str, body: Value| {
        json!({
            "messageId": id,
            "receiptHandle": format!("rh-{id}"),
            "body": body.to_string(),
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
            "awsRegion": "us-east-1"
        })
    };
    let credit = |order: &str, account: &str, cents: i64| json!({"order_id": order, "account": account, "amount_cents": cents});
    json!({"Records": [
        record("m-1", credit("o-1", "alice", 1000)),
        record("m-2", credit("o-2", "bob", 250)),
        record("m-1", credit("o-1", "alice", 1000)),
        record("m-3", credit("o-2", "bob", 250)),
        record("m-4", credit("o-3", "alice", -5)),
        record("m-5", credit("o-4", "carol", 0)),
    ]})
    .to_string()
}

fn failures(response: &Value) -> Vec<String> {
    response["batchItemFailures"]
        .as_array()
        .expect("batchItemFailures is an array")
        .iter()
        .map(|f| {
            f["itemIdentifier"]
                .as_str()
                .expect("itemIdentifier")
                .to_owned()
        })
        .collect()
}

/// Checks a `--report json` against the expected run, if there is one.
fn check_against_expected(
    name: &str,
    run: usize,
    report: &Value,
    balances: &BTreeMap<String, i64>,
) {
    let Some(exp) = expected(name) else { return };
    let want = &exp["runs"][run];
    let at = format!("{name} run {}", run + 1);
    assert_eq!(report["counts"], want["counts"], "{at}: counts");
    assert_eq!(report["response"], want["response"], "{at}: batch response");
    let outcomes = report["outcomes"].as_array().expect("outcomes");
    let usual = want["usual"].as_str().expect("usual");
    for (i, item) in outcomes.iter().enumerate() {
        let exception = want["exceptions"]
            .as_array()
            .expect("exceptions")
            .iter()
            .find(|e| e["index"] == json!(i));
        let outcome = exception.map_or(usual, |e| e["outcome"].as_str().expect("outcome"));
        assert_eq!(item["outcome"], json!(outcome), "{at}: message #{i}");
        if let Some(reason) = exception.and_then(|e| e["reason"].as_str()) {
            let detail = item["detail"].as_str().unwrap_or("");
            assert!(
                detail.starts_with(reason),
                "{at}: message #{i}: {detail:?} is not {reason}"
            );
        }
    }
    let want_balances: BTreeMap<String, i64> =
        serde_json::from_value(want["balances"].clone()).expect("balances");
    assert_eq!(balances, &want_balances, "{at}: balances");
}

/// Runs `event` three times in `dir` on `store` and checks what a user would: the first run
/// as expected, the second and third finding every success a duplicate, balances unchanged.
fn run_twice(dir: &Path, event: &Path, store: &[&str], env: &[(&str, &str)]) {
    let name = event
        .file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned();
    let path = event.to_str().expect("UTF-8 path");
    let records = {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(event).expect("read event"))
            .expect("event JSON");
        v["Records"].as_array().expect("Records").len()
    };

    let mut args = vec!["invoke", path, "--report", "json"];
    args.extend_from_slice(store);
    let first = payments(dir, &args, env).ok(&format!("first invoke of {name}"));
    let report = first.json();
    let outcomes = report["outcomes"].as_array().expect("outcomes").clone();
    assert_eq!(outcomes.len(), records, "{name}: one outcome per record");
    let counts = &report["counts"];
    let total: i64 = [
        "processed",
        "duplicate",
        "held_elsewhere",
        "failed",
        "not_started",
    ]
    .iter()
    .map(|k| counts[k].as_i64().expect("count"))
    .sum();
    assert_eq!(total as usize, records, "{name}: counts add up");
    // The summary on stderr: the counts, and one line per message that did not succeed.
    let summary_head = format!("{records} message");
    assert!(
        first.stderr.starts_with(&summary_head),
        "{name}: summary {:?}",
        first.stderr
    );
    for o in &outcomes {
        if !["processed", "duplicate"].contains(&o["outcome"].as_str().unwrap_or("")) {
            let id = o["message_id"].as_str().expect("id");
            assert!(
                first
                    .stderr
                    .lines()
                    .any(|l| l.contains(id) && l.contains(o["outcome"].as_str().unwrap_or("?"))),
                "{name}: summary lacks a line for {id}:\n{}",
                first.stderr
            );
        }
    }
    let after_first = balances(dir, store, env);
    check_against_expected(&name, 0, &report, &after_first);

    // Second run, as Lambda's answer: the batch response on stdout.
    let mut args = vec!["invoke", path];
    args.extend_from_slice(store);
    let second = payments(dir, &args, env).ok(&format!("second invoke of {name}"));
    let response = second.json();
    let failed_first: Vec<String> = failures(&report["response"]);
    assert_eq!(
        failures(&response),
        failed_first,
        "{name}: the same messages fail again"
    );
    assert!(
        second.stderr.contains(" 0 processed"),
        "{name}: {}",
        second.stderr
    );

    // Third run, with the report: every earlier success is now a duplicate.
    let mut args = vec!["invoke", path, "--report", "json"];
    args.extend_from_slice(store);
    let third = payments(dir, &args, env)
        .ok(&format!("third invoke of {name}"))
        .json();
    assert_eq!(
        third["counts"]["processed"],
        json!(0),
        "{name}: nothing runs twice"
    );
    for (i, (a, b)) in outcomes
        .iter()
        .zip(third["outcomes"].as_array().expect("outcomes"))
        .enumerate()
    {
        if ["processed", "duplicate"].contains(&a["outcome"].as_str().unwrap_or("")) {
            assert_eq!(
                b["outcome"],
                json!("duplicate"),
                "{name}: message #{i} on a later run"
            );
        }
    }
    let after_third = balances(dir, store, env);
    assert_eq!(
        after_third, after_first,
        "{name}: balances changed on a repeated run"
    );
    check_against_expected(&name, 1, &third, &after_third);
}

#[test]
fn every_sample_event_runs_twice_on_the_default_store() {
    let own = TempDir::new();
    let mut events = vec![own.write("credits.json", &own_event())];
    let samples = sample_events();
    events.extend(samples.iter().cloned());
    for event in &events {
        let dir = TempDir::new();
        run_twice(dir.path(), event, &[], &[]);
        assert!(
            dir.path().join(".sqs-claim/claims.db").is_file(),
            "the default store is .sqs-claim/claims.db in the current directory"
        );
    }
    // The written event's numbers, checked by hand: m-1 twice and o-2 twice are duplicates,
    // the negative amount fails, a zero credit opens the account.
    let dir = TempDir::new();
    let report = payments(
        dir.path(),
        &[
            "invoke",
            events[0].to_str().expect("path"),
            "--report",
            "json",
        ],
        &[],
    )
    .ok("own event")
    .json();
    assert_eq!(
        report["counts"],
        json!({"processed": 3, "duplicate": 2, "held_elsewhere": 0, "failed": 1, "not_started": 0})
    );
    assert_eq!(failures(&report["response"]), vec!["m-4"]);
    assert_eq!(
        balances(dir.path(), &[], &[]),
        BTreeMap::from([
            ("alice".into(), 1000),
            ("bob".into(), 250),
            ("carol".into(), 0)
        ])
    );
    eprintln!(
        "checked {} events ({} samples from events/)",
        events.len(),
        samples.len()
    );
}

#[test]
fn explicit_sqlite_and_memory_stores() {
    let dir = TempDir::new();
    let event = dir.write("credits.json", &own_event());
    let event = event.to_str().expect("path");
    run_twice(
        dir.path(),
        Path::new(event),
        &["--store", "sqlite:ledger.db"],
        &[],
    );
    assert!(dir.path().join("ledger.db").is_file());
    // A missing directory is created, as for the default store.
    payments(
        dir.path(),
        &["invoke", event, "--store", "sqlite:nested/dir/x.db"],
        &[],
    )
    .ok("nested");
    assert!(dir.path().join("nested/dir/x.db").is_file());
    assert!(
        !dir.path().join(".sqs-claim").exists(),
        "an explicit store must not create the default one"
    );
    // SQS_CLAIM_STORE is honoured when --store is absent.
    let env_store = [("SQS_CLAIM_STORE", "sqlite:ledger.db")];
    let again = payments(
        dir.path(),
        &["invoke", event, "--report", "json"],
        &env_store,
    )
    .ok("env store")
    .json();
    assert_eq!(
        again["counts"]["processed"],
        json!(0),
        "SQS_CLAIM_STORE must point at the same file"
    );
    // memory: remembers nothing between runs.
    for _ in 0..2 {
        let run = payments(
            dir.path(),
            &["invoke", event, "--store", "memory:", "--report", "json"],
            &[],
        )
        .ok("memory")
        .json();
        assert_eq!(run["counts"]["processed"], json!(3));
    }
}

/// The operator's `sqs-claim prune`, on the store `payments invoke` used, deletes expired claims
/// (bounded by `--limit`) and leaves live ones; on a store that expires records by itself it
/// says so and deletes nothing.
#[test]
fn prune_deletes_only_expired_claims_in_bounded_runs() {
    let dir = TempDir::new();
    let event = dir.write("credits.json", &own_event());
    let event = event.to_str().expect("path");
    let store = ["--store", "sqlite:ledger.db"];
    let short_ttl = [("SQS_CLAIM_TTL_SECS", "1")];
    let mut args = vec!["invoke", event];
    args.extend_from_slice(&store);
    payments(dir.path(), &args, &short_ttl).ok("invoke");
    let prune = |limit: &str| {
        let mut args = vec!["prune", "--limit", limit];
        args.extend_from_slice(&store);
        sqs_claim(dir.path(), &args, &[])
            .ok("prune")
            .stdout
            .trim()
            .to_owned()
    };
    assert_eq!(prune("100"), "0", "nothing has expired yet");
    // The claims were completed with a 1 s TTL: wait it out (real time: the CLI reads the
    // wall clock).
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    assert_eq!(prune("2"), "2", "--limit bounds one run");
    assert_eq!(prune("100"), "1", "the rest on the next run");
    assert_eq!(prune("100"), "0");
    // Pruned keys are gone, so the same event runs again: the claims were the only memory.
    let mut args = vec!["invoke", event, "--report", "json"];
    args.extend_from_slice(&store);
    let again = payments(dir.path(), &args, &[]).ok("rerun").json();
    assert_eq!(again["counts"]["processed"], json!(3));

    let memory = sqs_claim(dir.path(), &["prune", "--store", "memory:"], &[]).ok("memory");
    assert_eq!(memory.stdout.trim(), "0");
    assert!(
        memory.stderr.contains("nothing to prune"),
        "{}",
        memory.stderr
    );
    let bad = sqs_claim(dir.path(), &["prune", "--limit", "0"], &[]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    let misplaced = payments(dir.path(), &["balances", "--limit", "5"], &[]);
    assert_eq!(misplaced.code, Some(2), "{}", misplaced.stderr);
}

#[test]
fn settings_come_from_the_environment() {
    let dir = TempDir::new();
    let event = dir.write("credits.json", &own_event());
    let event = event.to_str().expect("path");
    // Keyed by message id, the producer-side duplicate (m-3: order o-2 again) is processed.
    let env = [
        ("SQS_CLAIM_KEY", "message-id"),
        ("SQS_CLAIM_NAMESPACE", "other"),
    ];
    let report = payments(dir.path(), &["invoke", event, "--report", "json"], &env)
        .ok("message-id key")
        .json();
    assert_eq!(report["counts"]["processed"], json!(4), "{report}");
    assert_eq!(report["outcomes"][0]["key"], json!("other#m-1"));
    for (var, value) in [
        ("SQS_CLAIM_CONCURRENCY", "lots"),
        ("SQS_CLAIM_KEY", "json:order_id"),
        ("SQS_CLAIM_FIFO_MODE", "strict"),
        ("SQS_CLAIM_TTL_SECS", "0"),
    ] {
        let run = payments(dir.path(), &["invoke", event], &[(var, value)]);
        assert_one_line_error(&run, &format!("{var}={value}"));
        assert!(
            run.stderr.contains(var),
            "the error must name {var}: {}",
            run.stderr
        );
    }
}

fn assert_one_line_error(run: &Run, what: &str) {
    assert!(
        matches!(run.code, Some(c) if c != 0),
        "{what}: expected a non-zero exit, got {:?}\n{}{}",
        run.code,
        run.stdout,
        run.stderr
    );
    assert!(
        !run.stderr.contains("panicked"),
        "{what}: panicked:\n{}",
        run.stderr
    );
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected one line on stderr, got:\n{}",
        run.stderr
    );
    assert!(lines[0].starts_with("error: "), "{what}: {:?}", lines[0]);
    assert!(
        run.stdout.is_empty(),
        "{what}: nothing on stdout, got {:?}",
        run.stdout
    );
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let dir = TempDir::new();
    let good = dir.write("good.json", &own_event());
    let good = good.to_str().expect("path");
    dir.write("not-json.json", "{\"Records\": [");
    dir.write("object.json", "{\"detail\": {}}");
    dir.write(
        "s3.json",
        r#"{"Records":[{"eventSource":"aws:s3","s3":{"bucket":{"name":"b"}}}]}"#,
    );
    dir.write(
        "record-types.json",
        r#"{"Records":[{"messageId":42,"body":"{}"}]}"#,
    );
    dir.write(
        "no-message-id.json",
        r#"{"Records":[{"body":"{}","eventSource":"aws:sqs"}]}"#,
    );
    dir.write("garbage.db", &"x".repeat(4096));
    std::fs::create_dir_all(dir.path().join("a-directory")).expect("mkdir");
    let cases: &[(&[&str], &str)] = &[
        (&["invoke", "missing.json"], "missing.json"),
        (&["invoke", "a-directory"], "a-directory"),
        (&["invoke", "not-json.json"], "not JSON"),
        (&["invoke", "object.json"], "not an SQS event"),
        (&["invoke", "s3.json"], "aws:s3"),
        (&["invoke", "record-types.json"], "not an SQS event"),
        (&["invoke", "no-message-id.json"], "messageId"),
        (&["invoke", good, "--store", "ftp://example.com/x"], "ftp"),
        (
            &["invoke", good, "--store", "sqlite:/proc/no-such-dir/x.db"],
            "/proc/no-such-dir",
        ),
        (
            &["invoke", good, "--store", "sqlite:garbage.db"],
            "garbage.db",
        ),
        (&["invoke", good, "--store", "dynamodb:a"], "dynamodb:a"),
        (&["invoke", good, "--report", "yaml"], "yaml"),
        (&["invoke"], "event file"),
        (&["invoke", good, "extra"], "extra"),
        (&["frobnicate"], "frobnicate"),
        (&[], "missing command"),
        (&["balances", "--store"], "--store needs a value"),
        (&["balances", "--bogus"], "--bogus"),
        (
            &["balances", "--store", "postgres://user:hunter2@db/x"],
            "postgres",
        ),
    ];
    for (args, needle) in cases {
        let run = payments(dir.path(), args, &[]);
        let what = format!("payments {}", args.join(" "));
        assert_one_line_error(&run, &what);
        assert!(
            run.stderr.contains(needle),
            "{what}: error should mention {needle:?}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("hunter2"),
            "{what}: a password leaked: {}",
            run.stderr
        );
    }
    // A store that does not answer: DynamoDB on a closed port.
    let started = Instant::now();
    let unreachable = [
        ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:9"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    for args in [
        &["invoke", good, "--store", "dynamodb:claims"][..],
        &["balances", "--store", "dynamodb:claims"][..],
        &["init", "--store", "dynamodb:claims"][..],
    ] {
        let run = payments(dir.path(), args, &unreachable);
        let what = format!("payments {} (unreachable)", args.join(" "));
        assert_one_line_error(&run, &what);
        assert!(
            run.stderr.contains("could not reach"),
            "{what}: {}",
            run.stderr
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "unreachable store took {:?}",
        started.elapsed()
    );
    // None of the failures above created the default store.
    assert!(!dir.path().join(".sqs-claim").exists());
    // --help is not an error.
    let help = payments(dir.path(), &["--help"], &[]).ok("--help");
    assert!(help.stdout.contains("payments invoke EVENT.json"));
}

fn dynamodb_env() -> Vec<(&'static str, String)> {
    let endpoint = std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:8000".to_owned());
    let host = endpoint
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/');
    let reachable = host
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok());
    assert!(
        reachable,
        "DynamoDB Local does not answer at {endpoint}: run `make test`, or scripts/standins.sh up"
    );
    vec![
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

#[test]
fn every_sample_event_runs_twice_on_dynamodb_local() {
    let env_owned = dynamodb_env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let own = TempDir::new();
    let mut events = vec![own.write("credits.json", &own_event())];
    events.extend(sample_events());
    for event in &events {
        let dir = TempDir::new();
        let table = format!("cli-{}", uuid::Uuid::new_v4().simple());
        let store = format!("dynamodb:{table}");
        // Before init: one clear error that says what to run.
        let run = payments(
            dir.path(),
            &["invoke", event.to_str().expect("path"), "--store", &store],
            &env,
        );
        assert_one_line_error(&run, "invoke before init");
        assert!(run.stderr.contains("payments init"), "{}", run.stderr);
        // init is idempotent.
        for _ in 0..2 {
            let init = payments(dir.path(), &["init", "--store", &store], &env).ok("init");
            assert!(init.stderr.contains(&table), "{}", init.stderr);
        }
        run_twice(dir.path(), event, &["--store", &store], &env);
        assert!(
            !dir.path().join(".sqs-claim").exists(),
            "no local store when DynamoDB is used"
        );
    }
    // --accounts-table names the accounts table.
    let dir = TempDir::new();
    let table = format!("cli-{}", uuid::Uuid::new_v4().simple());
    let store = format!("dynamodb:{table}");
    let accounts = format!("{table}-ledger");
    let with_accounts = [
        "--store",
        store.as_str(),
        "--accounts-table",
        accounts.as_str(),
    ];
    let mut init = vec!["init"];
    init.extend_from_slice(&with_accounts);
    let out = payments(dir.path(), &init, &env).ok("init with accounts table");
    assert!(out.stderr.contains(&accounts), "{}", out.stderr);
    let event = events[0].to_str().expect("path");
    let mut invoke = vec!["invoke", event];
    invoke.extend_from_slice(&with_accounts);
    payments(dir.path(), &invoke, &env).ok("invoke with accounts table");
    assert_eq!(
        balances(dir.path(), &with_accounts, &env).get("alice"),
        Some(&1000)
    );
    // The default accounts table was never created, so reading it fails, clearly.
    let run = payments(dir.path(), &["balances", "--store", &store], &env);
    assert_one_line_error(&run, "balances on a missing accounts table");
}

#[test]
fn consumer_refuses_invalid_settings_at_startup() {
    let dir = TempDir::new();
    for (env, needle) in [
        (vec![], "SQS_CLAIM_TABLE"),
        (
            vec![
                ("SQS_CLAIM_TABLE", "claims"),
                ("SQS_CLAIM_FIFO_MODE", "strict"),
            ],
            "SQS_CLAIM_FIFO_MODE",
        ),
        (vec![("SQS_CLAIM_STORE", "ftp://x")], "SQS_CLAIM_STORE"),
        (
            vec![
                ("SQS_CLAIM_TABLE", "claims"),
                ("SQS_CLAIM_DEADLINE_MARGIN_MS", "2s"),
            ],
            "SQS_CLAIM_DEADLINE_MARGIN_MS",
        ),
        // Valid settings, but not inside Lambda: a clear error, not lambda_runtime's panic.
        (
            vec![("SQS_CLAIM_STORE", "memory:")],
            "AWS_LAMBDA_RUNTIME_API",
        ),
        (
            vec![
                ("SQS_CLAIM_TABLE", "claims"),
                ("SQS_CLAIM_DYNAMODB_PARTITION_KEY", "pk=CLAIM"),
            ],
            "SQS_CLAIM_DYNAMODB_PARTITION_KEY",
        ),
    ] {
        let run = run_program(CONSUMER, dir.path(), &[], &env);
        assert_ne!(run.code, Some(0), "{env:?}: the consumer must not start");
        let all = format!("{}{}", run.stdout, run.stderr);
        assert!(
            all.contains(needle),
            "{env:?}: the startup error must name {needle}: {all}"
        );
        assert!(!all.contains("panicked"), "{env:?}: {all}");
    }
}

/// Two `payments invoke` processes on the same event and the same SQLite file at once, as two
/// Lambda invocations given the same batch: every credit lands exactly once, each message is
/// processed by at most one of them, and the other sees it as a duplicate or held elsewhere.
/// (SQLite's lock is not fair, so one process often does most of the work; the cross-process
/// race itself is exercised, paced, in `tests/suite/test_sqlite_store.rs`.)
#[test]
fn two_processes_on_one_store_credit_once() {
    let dir = TempDir::new();
    let large = events_dir().join("large.json");
    let event = if large.is_file() {
        large
    } else {
        dir.write("credits.json", &own_event())
    };
    let path = event.to_str().expect("path").to_owned();
    let spawn = || {
        let mut cmd = Command::new(BIN);
        cmd.args(["invoke", &path, "--report", "json"])
            .current_dir(dir.path())
            .env_remove("SQS_CLAIM_STORE")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd.spawn().expect("spawn payments")
    };
    let (a, b) = (spawn(), spawn());
    let reports: Vec<Value> = [a, b]
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("wait");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "concurrent invoke failed: {stderr}");
            serde_json::from_slice(&out.stdout).expect("report JSON")
        })
        .collect();
    let outcomes: Vec<&Vec<Value>> = reports
        .iter()
        .map(|r| r["outcomes"].as_array().expect("outcomes"))
        .collect();
    for (i, (x, y)) in outcomes[0].iter().zip(outcomes[1]).enumerate() {
        let (x, y) = (
            x["outcome"].as_str().unwrap_or(""),
            y["outcome"].as_str().unwrap_or(""),
        );
        assert!(
            !(x == "processed" && y == "processed"),
            "message #{i} was processed by both processes"
        );
    }
    // A third run settles what is left (messages the other process held); then the balances
    // are those of one clean run.
    payments(dir.path(), &["invoke", &path], &[]).ok("settling run");
    let name = event
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let got = balances(dir.path(), &[], &[]);
    match expected(&name) {
        Some(exp) => {
            let want: BTreeMap<String, i64> =
                serde_json::from_value(exp["runs"][0]["balances"].clone()).expect("balances");
            assert_eq!(
                got, want,
                "{name}: concurrent runs credited a message twice or lost one"
            );
        }
        None => assert_eq!(
            got,
            BTreeMap::from([
                ("alice".into(), 1000),
                ("bob".into(), 250),
                ("carol".into(), 0)
            ])
        ),
    }
}

/// `SQS_CLAIM_OUTPUT_QUEUE_URL`: one `credited` notice per credit on a FIFO queue (ministack),
/// grouped by account, and nothing more on a repeated run (duplicates do not run the handler).
#[tokio::test]
async fn output_queue_gets_one_notice_per_credit() {
    use sqs_claim::aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    use sqs_claim::aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

    let endpoint = std::env::var("SQS_CLAIM_SQS_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned());
    let config = sqs_claim::aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static-test"))
        .endpoint_url(&endpoint)
        .build();
    let client = sqs_claim::aws_sdk_sqs::Client::from_conf(config);
    let name = format!(
        "cli-notices-{}.fifo",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let created = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .create_queue()
            .queue_name(&name)
            .attributes(QueueAttributeName::FifoQueue, "true")
            .send(),
    )
    .await;
    let url = match created {
        Ok(Ok(out)) => out.queue_url().expect("queue url").to_owned(),
        other => panic!(
            "ministack (SQS) at {endpoint} did not create a queue ({other:?}): run `make test`, \
             or scripts/standins.sh up"
        ),
    };

    let dir = TempDir::new();
    let event = dir.write("credits.json", &own_event());
    let event = event.to_str().expect("path").to_owned();
    let env = [
        ("SQS_CLAIM_OUTPUT_QUEUE_URL", url.as_str()),
        ("AWS_ENDPOINT_URL_SQS", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let mut notices = Vec::new();
    for run in 0..2 {
        // Blocking is fine here: nothing else runs on this test's runtime meanwhile.
        let out = payments(dir.path(), &["invoke", &event], &env);
        let out = out.ok(&format!("invoke #{run} with an output queue"));
        assert_eq!(failures(&out.json()), vec!["m-4"], "run {run}");
        // Drain what this run published.
        let mut got = Vec::new();
        loop {
            let page = client
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
                .send()
                .await
                .expect("ReceiveMessage");
            let messages = page.messages();
            if messages.is_empty() {
                break;
            }
            for m in messages {
                let body: Value =
                    serde_json::from_str(m.body().unwrap_or("")).expect("notice JSON");
                let group = m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                    .cloned();
                assert_eq!(
                    group.as_deref(),
                    body["account"].as_str(),
                    "grouped by account"
                );
                got.push(body);
                client
                    .delete_message()
                    .queue_url(&url)
                    .receipt_handle(m.receipt_handle().unwrap_or(""))
                    .send()
                    .await
                    .expect("DeleteMessage");
            }
        }
        notices.push(got);
    }
    let mut first: Vec<String> = notices[0]
        .iter()
        .map(|n| {
            assert_eq!(n["event"], json!("credited"));
            n["order_id"].as_str().expect("order_id").to_owned()
        })
        .collect();
    first.sort();
    assert_eq!(
        first,
        vec!["o-1", "o-2", "o-4"],
        "one notice per credit: {:?}",
        notices[0]
    );
    assert!(
        notices[1].is_empty(),
        "a repeated run published again: {:?}",
        notices[1]
    );
}

/// The balance range through the CLI on DynamoDB Local, where odd amounts once left the
/// accounts table in a state `payments balances` could not read: an amount past
/// `Payment::MAX_AMOUNT_CENTS` fails its message (`bad_body`), a credit that would take a
/// balance past `Payment::MAX_BALANCE_CENTS` fails its message (`effect_rejected`) and leaves
/// the balance readable and unchanged; and a balance `balances` cannot read (put there by
/// hand) is one error line naming the account and the problem.
#[tokio::test]
async fn the_balance_range_holds_through_the_cli_on_dynamodb() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use payments::Payment;
    let env_owned = dynamodb_env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let dir = TempDir::new();
    let table = format!("cli-range-{}", uuid::Uuid::new_v4().simple());
    let store = format!("dynamodb:{table}");
    let accounts = format!("{table}-accounts");
    payments(dir.path(), &["init", "--store", &store], &env).ok("init");
    let client = {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .endpoint_url(&env_owned[0].1)
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .build();
        aws_sdk_dynamodb::Client::from_conf(config)
    };
    let put = |account: &str, balance: &str| {
        client
            .put_item()
            .table_name(&accounts)
            .item("account", AttributeValue::S(account.to_owned()))
            .item("balance", AttributeValue::N(balance.to_owned()))
            .send()
    };
    let max = Payment::MAX_BALANCE_CENTS;
    put("whale", &(max - 5).to_string())
        .await
        .expect("seed a balance near the top");

    let invoke = |name: &str, id: &str, cents: i64| {
        let body =
            json!({"order_id": format!("o-{id}"), "account": "whale", "amount_cents": cents});
        let event = json!({"Records": [{
            "messageId": id,
            "receiptHandle": format!("rh-{id}"),
            "body": body.to_string(),
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
            "awsRegion": "us-east-1"
        }]});
        let path = dir.write(name, &event.to_string());
        let report = payments(
            dir.path(),
            &[
                "invoke",
                path.to_str().expect("path"),
                "--store",
                &store,
                "--report",
                "json",
            ],
            &env,
        )
        .ok(name)
        .json();
        let outcome = &report["outcomes"][0];
        (
            outcome["outcome"].as_str().unwrap_or("").to_owned(),
            outcome["detail"].as_str().unwrap_or("").to_owned(),
        )
    };
    let whale = || {
        balances(dir.path(), &["--store", &store], &env)
            .get("whale")
            .copied()
    };

    let (outcome, detail) = invoke("over.json", "m-over", 6);
    assert_eq!(outcome, "failed", "{detail}");
    assert!(detail.starts_with("effect_rejected"), "{detail}");
    assert_eq!(
        whale(),
        Some(max - 5),
        "a refused credit changed the balance"
    );
    let (outcome, detail) = invoke("huge.json", "m-huge", Payment::MAX_AMOUNT_CENTS + 1);
    assert_eq!(outcome, "failed", "{detail}");
    assert!(detail.contains("too large"), "{detail}");
    let (outcome, detail) = invoke("fits.json", "m-fits", 5);
    assert_eq!(outcome, "processed", "{detail}");
    assert_eq!(whale(), Some(max));

    put("odd", "18446744073709551616")
        .await
        .expect("put an unreadable balance");
    let run = payments(dir.path(), &["balances", "--store", &store], &env);
    assert_one_line_error(&run, "balances with an unreadable balance");
    assert!(
        run.stderr.contains("\"odd\"") && run.stderr.contains("beyond the 64-bit range"),
        "the error must name the account and the problem: {}",
        run.stderr
    );
    for t in [&table, &accounts] {
        let _ = client.delete_table().table_name(t).send().await;
    }
}

/// The name a binary is run by: `payments`, `sqs-claim`.
fn program_name(program: &Path) -> String {
    program
        .file_stem()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `--version` names the program and its version; every command has its own help, as
/// `help COMMAND` and as `COMMAND --help`, on stdout with exit 0 (the operator's `prune` in
/// `sqs-claim`'s).
#[test]
fn version_and_help_per_command() {
    let dir = TempDir::new();
    let version = payments(dir.path(), &["--version"], &[]).ok("--version");
    assert_eq!(
        version.stdout.trim(),
        format!("payments {}", env!("CARGO_PKG_VERSION"))
    );
    let (app, operator) = (Path::new(BIN), sqs_claim_bin());
    for (program, command, needles) in [
        (
            app,
            "invoke",
            &["EVENT.json", "--report", "--store", "SQS_CLAIM_STORE"][..],
        ),
        (app, "balances", &["tab-separated", "--accounts-table"]),
        (app, "init", &["idempotent", "--table"]),
        (operator.as_path(), "prune", &["--limit", "expired"]),
    ] {
        let name = program_name(program);
        for args in [vec!["help", command], vec![command, "--help"]] {
            let run = run_program(program, dir.path(), &args, &[])
                .ok(&format!("{name} {}", args.join(" ")));
            assert!(
                run.stdout.contains(&format!("{name} {command}")),
                "{args:?}: {}",
                run.stdout
            );
            for needle in needles {
                assert!(
                    run.stdout.contains(needle),
                    "{args:?}: no {needle}: {}",
                    run.stdout
                );
            }
            assert!(run.stderr.is_empty(), "{args:?}: {}", run.stderr);
        }
    }
    assert!(
        !dir.path().join(".sqs-claim").exists(),
        "help opened a store"
    );
}

/// A usage mistake, whether this program or clap finds it, is exit code 2 and one `error:`
/// line: no usage body, no tip, nothing on stdout (`payments`, and the operator's `sqs-claim`
/// for `prune`). Bad input found later stays exit code 1.
#[test]
fn usage_mistakes_exit_2_in_one_line() {
    let dir = TempDir::new();
    let good = dir.write("good.json", &own_event());
    let good = good.to_str().expect("path");
    let (app, operator) = (Path::new(BIN), sqs_claim_bin());
    for (program, args) in [
        (app, &["balances", "--bogus"][..]),
        (app, &["--bogus", "balances"]),
        (app, &["invoke", good, "--repot", "json"]),
        (app, &[]),
        (app, &["frobnicate"]),
        (app, &["invoke"]),
        (app, &["invoke", good, "--report", "yaml"]),
        (app, &["balances", "--store"]),
        (
            app,
            &["balances", "--store", "memory:", "--store", "memory:"],
        ),
        (
            app,
            &["balances", "--store", "memory:", "--table", "claims"],
        ),
        (operator.as_path(), &["prune", "--limit", "-1"]),
    ] {
        let run = run_program(program, dir.path(), args, &[]);
        let what = format!("{} {}", program_name(program), args.join(" "));
        assert_one_line_error(&run, &what);
        assert_eq!(run.code, Some(2), "{what}: {}", run.stderr);
        assert!(!run.stderr.contains("Usage"), "{what}: {}", run.stderr);
    }
    let run = payments(dir.path(), &["invoke", "missing.json"], &[]);
    assert_one_line_error(&run, "a missing event file");
    assert_eq!(run.code, Some(1), "bad input is not a usage mistake");
}

/// The operator's commands are `sqs-claim`'s, not the app's: `payments prune` (or `inspect`,
/// ...) is a usage mistake, exit code 2 and one `error:` line that names the command to run.
#[test]
fn operator_commands_point_to_sqs_claim() {
    let dir = TempDir::new();
    for args in [&["prune", "--store", "memory:"][..], &["inspect", "k"]] {
        let run = payments(dir.path(), args, &[]);
        let what = format!("payments {}", args.join(" "));
        assert_eq!(run.code, Some(2), "{what}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("error: ") && run.stderr.trim_end().lines().count() == 1,
            "{what}: one error line expected: {}",
            run.stderr
        );
        let command = format!("sqs-claim {}", args[0]);
        assert!(
            run.stderr.contains(&command),
            "{what}: the error must name `{command}`: {}",
            run.stderr
        );
    }
}

/// `SQS_CLAIM_STORE` is the store when no flag names one; `--store` (or `--table`) given on the
/// command line beats it.
#[test]
fn the_store_flag_falls_back_to_sqs_claim_store() {
    let dir = TempDir::new();
    let event = dir.write("credits.json", &own_event());
    let event = event.to_str().expect("path");
    let env = [("SQS_CLAIM_STORE", "sqlite:from-env.db")];
    let first = payments(dir.path(), &["invoke", event, "--report", "json"], &env)
        .ok("store from the environment")
        .json();
    assert_eq!(first["counts"]["processed"], json!(3), "{first}");
    assert!(dir.path().join("from-env.db").is_file());
    assert!(
        !dir.path().join(".sqs-claim").exists(),
        "the default store was used"
    );
    assert_eq!(balances(dir.path(), &[], &env).get("alice"), Some(&1000));
    // The flag wins: a fresh memory store processes everything again, the file is untouched.
    let flagged = payments(
        dir.path(),
        &["invoke", event, "--store", "memory:", "--report", "json"],
        &env,
    )
    .ok("--store over SQS_CLAIM_STORE")
    .json();
    assert_eq!(flagged["counts"]["processed"], json!(3), "{flagged}");
    assert_eq!(balances(dir.path(), &[], &env).get("alice"), Some(&1000));
    // A bad value names where it came from.
    let run = payments(dir.path(), &["balances"], &[("SQS_CLAIM_STORE", "ftp://x")]);
    assert_one_line_error(&run, "bad SQS_CLAIM_STORE");
    assert!(run.stderr.contains("SQS_CLAIM_STORE"), "{}", run.stderr);
    let run = payments(dir.path(), &["balances", "--store", "ftp://x"], &[]);
    assert_one_line_error(&run, "bad --store");
    assert!(run.stderr.contains("--store"), "{}", run.stderr);
}

/// The command in the "create the tables with `payments init ...`" hint, split into words
/// (without the program name).
fn init_hint(stderr: &str) -> Vec<String> {
    let start = stderr
        .find("`payments init")
        .unwrap_or_else(|| panic!("no init hint: {stderr}"));
    let rest = &stderr[start + 1..];
    let end = rest.find('`').expect("the hint's closing backtick");
    rest[..end]
        .split_whitespace()
        .skip(1)
        .map(str::to_owned)
        .collect()
}

/// Before `init`, `invoke` on DynamoDB says which `payments init` to run, and that command,
/// run as printed, creates the tables this run looks for: the accounts table given by
/// `--accounts-table` (or `SQS_CLAIM_ACCOUNTS_TABLE`) included, with the store given by
/// `--store` or `--table`.
#[test]
fn the_init_hint_keeps_the_accounts_table() {
    let env_owned = dynamodb_env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let event_dir = TempDir::new();
    let event = event_dir.write("credits.json", &own_event());
    let event = event.to_str().expect("path");
    for how in ["--store", "--table", "env"] {
        let dir = TempDir::new();
        let table = format!("cli-{}", uuid::Uuid::new_v4().simple());
        let accounts = format!("{table}-ledger");
        let store = format!("dynamodb:{table}");
        let mut args = vec!["invoke", event];
        let mut env = env.clone();
        match how {
            "--store" => args.extend(["--store", &store, "--accounts-table", &accounts]),
            "--table" => args.extend(["--table", &table, "--accounts-table", &accounts]),
            _ => env.extend([
                ("SQS_CLAIM_TABLE", table.as_str()),
                ("SQS_CLAIM_ACCOUNTS_TABLE", accounts.as_str()),
            ]),
        }
        let run = payments(dir.path(), &args, &env);
        assert_one_line_error(&run, &format!("{how}: invoke before init"));
        let hint = init_hint(&run.stderr);
        assert_eq!(
            hint,
            ["init", "--store", &store, "--accounts-table", &accounts],
            "{how}: {}",
            run.stderr
        );
        // Run the hint as printed, with none of this run's settings: it must make the run work.
        let hint: Vec<&str> = hint.iter().map(String::as_str).collect();
        let aws_only: Vec<(&str, &str)> = env
            .iter()
            .copied()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .collect();
        payments(dir.path(), &hint, &aws_only).ok(&format!("{how}: the hint"));
        let report = payments(
            dir.path(),
            &[&args[..], &["--report", "json"]].concat(),
            &env,
        )
        .ok(&format!("{how}: invoke after the hint"))
        .json();
        assert_eq!(report["counts"]["processed"], json!(3), "{how}: {report}");
        let with_accounts = [
            "--store",
            store.as_str(),
            "--accounts-table",
            accounts.as_str(),
        ];
        assert_eq!(
            balances(dir.path(), &with_accounts, &aws_only).get("alice"),
            Some(&1000),
            "{how}"
        );
    }
    // With the default accounts table the hint stays short.
    let dir = TempDir::new();
    let table = format!("cli-{}", uuid::Uuid::new_v4().simple());
    let store = format!("dynamodb:{table}");
    let run = payments(dir.path(), &["invoke", event, "--store", &store], &env);
    assert_eq!(init_hint(&run.stderr), ["init", "--store", &store]);
}

/// A DynamoDB client for DynamoDB Local at `endpoint`, with test credentials.
fn dynamodb_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// The single-table layout of the README: each claim under `CLAIM#<key>`, sort key `CLAIM`.
const SINGLE_TABLE: [(&str, &str); 2] = [
    ("SQS_CLAIM_DYNAMODB_PARTITION_KEY", "pk=CLAIM#{key}"),
    ("SQS_CLAIM_DYNAMODB_SORT_KEY", "sk=CLAIM"),
];

/// On a single-table layout (`SQS_CLAIM_DYNAMODB_PARTITION_KEY=pk=CLAIM#{key}`,
/// `SQS_CLAIM_DYNAMODB_SORT_KEY=sk=CLAIM`): the init hint keeps the layout and, run as printed,
/// creates the composite table (HASH + RANGE, TTL on); `events/plain.json` runs twice (the
/// second run all duplicates, balances unchanged); each claim is the item `CLAIM#<key>` /
/// `CLAIM`, the operator's `sqs-claim inspect` shows it, `sqs-claim forget` deletes it alone;
/// business items of other types in the same table, one in the same partition as a claim, are
/// never touched.
#[tokio::test]
async fn a_single_table_layout_runs_twice_beside_business_items() {
    use aws_sdk_dynamodb::types::{AttributeValue, KeyType, TimeToLiveStatus};
    let env_owned = dynamodb_env();
    let mut env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let aws_only = env.clone();
    env.extend(SINGLE_TABLE);
    let client = dynamodb_client(&env_owned[0].1);
    let dir = TempDir::new();
    let table = format!("cli-single-{}", uuid::Uuid::new_v4().simple());
    let store = format!("dynamodb:{table}");
    let event = events_dir().join("plain.json");
    let event = event.to_str().expect("path");

    // Before init: the hint names the layout, and run as printed (no layout in the
    // environment) it creates the table this run looks for.
    let run = payments(dir.path(), &["invoke", event, "--store", &store], &env);
    assert_one_line_error(&run, "invoke before init");
    let hint = init_hint(&run.stderr);
    assert_eq!(
        hint,
        [
            "init",
            "--store",
            &store,
            "--partition-key",
            "pk=CLAIM#{key}",
            "--sort-key",
            "sk=CLAIM"
        ],
        "{}",
        run.stderr
    );
    let hint: Vec<&str> = hint.iter().map(String::as_str).collect();
    let init = payments(dir.path(), &hint, &aws_only).ok("the init hint");
    assert!(
        init.stderr.contains("keys: pk=CLAIM#{key}, sk=CLAIM"),
        "{}",
        init.stderr
    );
    let described = client
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .expect("describe the claims table");
    let keys: Vec<(String, KeyType)> = described
        .table()
        .expect("a table")
        .key_schema()
        .iter()
        .map(|k| (k.attribute_name().to_owned(), k.key_type().clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("pk".to_owned(), KeyType::Hash),
            ("sk".to_owned(), KeyType::Range)
        ]
    );
    let ttl = client
        .describe_time_to_live()
        .table_name(&table)
        .send()
        .await
        .expect("describe TTL");
    let ttl = ttl.time_to_live_description().expect("a TTL description");
    assert_eq!(ttl.time_to_live_status(), Some(&TimeToLiveStatus::Enabled));
    assert_eq!(ttl.attribute_name(), Some("expiration"));

    // Business items: an order of its own, and a note in the same partition as a claim.
    let item = |pk: &str, sk: &str| {
        [
            ("pk".to_owned(), AttributeValue::S(pk.to_owned())),
            ("sk".to_owned(), AttributeValue::S(sk.to_owned())),
        ]
        .into_iter()
        .collect::<std::collections::HashMap<_, _>>()
    };
    let business = [
        ("ORDER#ord-1001", "ORDER"),
        ("CLAIM#payments#ord-1001", "NOTE"),
    ];
    for (pk, sk) in business {
        client
            .put_item()
            .table_name(&table)
            .set_item(Some(item(pk, sk)))
            .item("total_cents", AttributeValue::N("1250".into()))
            .send()
            .await
            .expect("put a business item");
    }

    run_twice(dir.path(), Path::new(event), &["--store", &store], &env);

    // The claim is the item CLAIM#<key> / CLAIM, and `sqs-claim inspect` shows it.
    let get = |pk: &str, sk: &str| {
        client
            .get_item()
            .table_name(&table)
            .set_key(Some(item(pk, sk)))
            .consistent_read(true)
            .send()
    };
    let claim = get("CLAIM#payments#ord-1001", "CLAIM")
        .await
        .expect("get the claim");
    let claim = claim.item().expect("the claim is CLAIM#<key> / CLAIM");
    assert_eq!(
        claim
            .get("status")
            .and_then(|v| v.as_s().ok())
            .map(String::as_str),
        Some("COMPLETED"),
        "{claim:?}"
    );
    let seen = sqs_claim(
        dir.path(),
        &[
            "inspect",
            "payments#ord-1001",
            "--store",
            &store,
            "--report",
            "json",
        ],
        &env,
    )
    .ok("inspect")
    .json();
    assert_eq!(seen["key"], json!("payments#ord-1001"), "{seen}");
    assert_eq!(seen["status"], json!("completed"), "{seen}");
    // Every item is a claim or a business item: none is keyed the default way.
    let scan = client
        .scan()
        .table_name(&table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan");
    for found in scan.items() {
        let pk = found.get("pk").and_then(|v| v.as_s().ok()).expect("a pk");
        let sk = found.get("sk").and_then(|v| v.as_s().ok()).expect("an sk");
        assert!(
            (pk.starts_with("CLAIM#payments#") && sk == "CLAIM")
                || business.contains(&(pk.as_str(), sk.as_str())),
            "an item of neither kind: {found:?}"
        );
        assert!(!found.contains_key("id"), "{found:?}");
    }

    // `sqs-claim forget` deletes the claim's item alone; `release` of a completed claim is
    // refused.
    let release = sqs_claim(
        dir.path(),
        &["release", "payments#ord-1001", "--store", &store, "--yes"],
        &env,
    );
    assert_eq!(release.code, Some(1), "{}", release.stderr);
    assert!(
        release.stderr.contains("is completed"),
        "{}",
        release.stderr
    );
    sqs_claim(
        dir.path(),
        &["forget", "payments#ord-1001", "--store", &store, "--yes"],
        &env,
    )
    .ok("forget");
    let gone = get("CLAIM#payments#ord-1001", "CLAIM")
        .await
        .expect("get the claim");
    assert!(gone.item().is_none(), "forget left the claim: {gone:?}");
    for (pk, sk) in business {
        let kept = get(pk, sk).await.expect("get a business item");
        let kept = kept.item().expect("the business item is still there");
        assert_eq!(
            kept.get("total_cents")
                .and_then(|v| v.as_n().ok())
                .map(String::as_str),
            Some("1250"),
            "{pk} / {sk}: {kept:?}"
        );
        assert_eq!(kept.len(), 3, "{pk} / {sk}: changed: {kept:?}");
    }
}

/// A key layout that does not match the claims table stops the start with one clear line
/// that shows both (the table's keys, the configured layout and its variables), for the CLI
/// and the Lambda consumer; and a default layout on a single-table table likewise. A bad
/// layout value is refused before any store is touched.
#[test]
fn a_key_layout_that_does_not_match_the_table_stops_the_start() {
    let env_owned = dynamodb_env();
    let aws: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let with_layout = [&aws[..], &SINGLE_TABLE[..]].concat();
    let dir = TempDir::new();
    let event = dir.write("credits.json", &own_event());
    let event = event.to_str().expect("path");

    // A default table, a single-table layout.
    let default_table = format!("cli-default-{}", uuid::Uuid::new_v4().simple());
    let store = format!("dynamodb:{default_table}");
    payments(dir.path(), &["init", "--store", &store], &aws).ok("init a default table");
    let run = payments(
        dir.path(),
        &["invoke", event, "--store", &store],
        &with_layout,
    );
    assert_one_line_error(&run, "a layout the table does not have");
    assert_eq!(run.code, Some(1));
    for needle in [
        "has the key schema id (HASH, S)",
        "configured for pk (HASH, S) + sk (RANGE, S)",
        "SQS_CLAIM_DYNAMODB_PARTITION_KEY=pk=CLAIM#{key}",
        "SQS_CLAIM_DYNAMODB_SORT_KEY=sk=CLAIM",
    ] {
        assert!(run.stderr.contains(needle), "no {needle:?}: {}", run.stderr);
    }
    // The flags say the same; the operator's inspect checks too.
    let run = sqs_claim(
        dir.path(),
        &[
            "inspect",
            "payments#o-1",
            "--store",
            &store,
            "--partition-key",
            "pk=CLAIM#{key}",
        ],
        &aws,
    );
    assert_one_line_error(&run, "inspect with a layout the table does not have");
    assert!(
        run.stderr.contains("configured for pk (HASH, S) ("),
        "{}",
        run.stderr
    );
    // The consumer, at its init, before it asks for an invocation.
    let lambda = [
        ("SQS_CLAIM_TABLE", default_table.as_str()),
        ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9"),
        ("AWS_LAMBDA_FUNCTION_NAME", "payments"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
    ];
    let consumer = run_program(
        CONSUMER,
        dir.path(),
        &[],
        &[&with_layout[..], &lambda[..]].concat(),
    );
    assert_ne!(consumer.code, Some(0), "{}", consumer.stdout);
    assert!(
        consumer.stdout.contains("has the key schema id (HASH, S)")
            && consumer
                .stdout
                .contains("SQS_CLAIM_DYNAMODB_SORT_KEY=sk=CLAIM"),
        "{}{}",
        consumer.stdout,
        consumer.stderr
    );

    // A single-table table, the default layout.
    let single = format!("cli-single-{}", uuid::Uuid::new_v4().simple());
    let store = format!("dynamodb:{single}");
    payments(dir.path(), &["init", "--store", &store], &with_layout).ok("init a single table");
    let run = payments(dir.path(), &["invoke", event, "--store", &store], &aws);
    assert_one_line_error(&run, "the default layout on a single table");
    for needle in [
        "has the key schema pk (HASH, S) + sk (RANGE, S)",
        "configured for id (HASH, S) (the default layout id={key}",
    ] {
        assert!(run.stderr.contains(needle), "no {needle:?}: {}", run.stderr);
    }
    // With the layout it runs.
    let report = payments(
        dir.path(),
        &["invoke", event, "--store", &store, "--report", "json"],
        &with_layout,
    )
    .ok("invoke with the layout")
    .json();
    assert_eq!(report["counts"]["processed"], json!(3), "{report}");

    // A bad value: one line naming the variable (or flag), nothing opened.
    for (vars, args, needle) in [
        (
            &[("SQS_CLAIM_DYNAMODB_PARTITION_KEY", "pk")][..],
            &[][..],
            "SQS_CLAIM_DYNAMODB_PARTITION_KEY is invalid",
        ),
        (
            &[
                ("SQS_CLAIM_DYNAMODB_PARTITION_KEY", "pk=CLAIM"),
                ("SQS_CLAIM_DYNAMODB_SORT_KEY", "sk=CLAIM"),
            ],
            &[],
            "no template contains {key}",
        ),
        (&[], &["--sort-key", "=CLAIM"], "--sort-key"),
    ] {
        let mut args = [&["invoke", event, "--store", &store][..], args].concat();
        if needle == "--sort-key" {
            args.extend(["--partition-key", "pk=CLAIM#{key}"]);
        }
        let run = payments(dir.path(), &args, &[&aws[..], vars].concat());
        assert_one_line_error(&run, needle);
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
}
