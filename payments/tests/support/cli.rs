//! The `sqs-claim` CLI on this store: init twice, credits, a repeated run that finds every
//! message a duplicate and leaves the balances alone.
//!
//! Included with `#[path]` by the Redis, PostgreSQL and tiered store tests.

use std::process::Command;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_sqs-claim");

/// Runs the CLI with a clean environment plus `env`; panics unless it exits 0.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let dir = std::env::temp_dir();
    let out = Command::new(BIN)
        .args(args)
        .current_dir(&dir)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run sqs-claim");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    // Cargo does not copy a fresh binary to target/debug again, so a `cargo build --bin
    // sqs-claim` with other features (`make demo`) in the same target dir leaves a binary
    // without this store behind: say so rather than fail mysteriously.
    assert!(
        !stderr.contains("which this build lacks"),
        "{BIN} was built without `--all-features` (a build with other features replaced \
         it): `touch payments/src/bin/sqs-claim.rs` and run the tests again\n{stderr}"
    );
    assert!(
        out.status.success(),
        "sqs-claim {args:?} failed:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

/// Runs the CLI expecting a failure: a non-zero exit and one `error: ...` line.
pub fn fails(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(std::env::temp_dir())
        .env_clear()
        .output()
        .expect("run sqs-claim");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "sqs-claim {args:?} must fail");
    assert!(
        stderr.starts_with("error: ") && stderr.trim_end().lines().count() == 1,
        "one error line expected: {stderr}"
    );
    stderr
}

fn event() -> String {
    let record = |id: &str, order: &str, account: &str, cents: i64| {
        json!({
            "messageId": id,
            "receiptHandle": format!("rh-{id}"),
            "body": json!({"order_id": order, "account": account, "amount_cents": cents}).to_string(),
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
            "awsRegion": "us-east-1"
        })
    };
    json!({"Records": [
        record("m-1", "o-1", "alice", 1000),
        record("m-2", "o-2", "bob", 250),
        record("m-3", "o-3", "alice", 5),
    ]})
    .to_string()
}

/// The whole scenario on `store` (a `--store` URL).
pub fn credits_once(store: &str) {
    let namespace = format!("cli-{}", uuid::Uuid::new_v4().simple());
    let env = [("SQS_CLAIM_NAMESPACE", namespace.as_str())];
    let path = std::env::temp_dir().join(format!("{namespace}.json"));
    std::fs::write(&path, event()).expect("write the event");
    let path = path.to_str().expect("UTF-8 path");
    for _ in 0..2 {
        let (_, stderr) = run(&["init", "--store", store], &env);
        assert!(stderr.contains("initialized"), "{stderr}");
        assert!(
            !stderr.contains("hunter2"),
            "a password was printed: {stderr}"
        );
    }
    let balances = || {
        let (stdout, _) = run(&["balances", "--store", store], &env);
        stdout.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    let report = |expect: &str| {
        let (stdout, _) = run(
            &["invoke", path, "--store", store, "--report", "json"],
            &env,
        );
        let report: Value = serde_json::from_str(&stdout).expect("JSON report");
        assert_eq!(report["counts"][expect], json!(3), "{report}");
        assert_eq!(
            report["response"]["batchItemFailures"],
            json!([]),
            "{report}"
        );
    };
    report("processed");
    let first = balances();
    assert_eq!(first, ["alice\t1005", "bob\t250"]);
    report("duplicate");
    assert_eq!(balances(), first, "a repeated run must not credit again");
    // Nothing has expired (24 h TTL): prune answers with a count (0) or says the store
    // expires records by itself, and changes nothing.
    let (pruned, _) = run(&["prune", "--store", store], &env);
    assert_eq!(pruned.trim(), "0", "prune on fresh claims");
    report("duplicate");
    let _ = std::fs::remove_file(path);
}
