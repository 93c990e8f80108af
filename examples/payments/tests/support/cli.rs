//! The `payments` command line on this store: init twice, credits, a repeated run that finds
//! every message a duplicate and leaves the balances alone; and the operator's `sqs-claim` on
//! the same store (`prune`, `inspect`, `release`, `forget`).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::operator::sqs_claim_bin;

const BIN: &str = env!("CARGO_BIN_EXE_payments");

/// Runs `program` with a clean environment plus `env`, in the temp dir.
fn output(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(std::env::temp_dir())
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

/// Runs `program` as [`output`] does; panics unless it exits 0.
fn succeeds(program: &Path, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let out = output(program, args, env);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    // `make demo` builds target/debug/payments with `--features cli` only; `cargo test` copies
    // its own build back there before running, but a demo built while the tests run leaves a
    // binary without this store behind (`sqs-claim` has every store): say so rather than fail
    // mysteriously.
    assert!(
        !stderr.contains("which this build lacks"),
        "{} lacks this store's feature: for payments, a build with other features (make demo) \
         replaced the tests' own (run the tests again: cargo test copies its build back); for \
         sqs-claim, rebuild it (cargo build -p sqs-claim-cli --bin sqs-claim)\n{stderr}",
        program.display()
    );
    assert!(
        out.status.success(),
        "{} {args:?} failed:\n{stdout}\n{stderr}",
        program.display()
    );
    (stdout, stderr)
}

/// Runs `payments` with a clean environment plus `env`; panics unless it exits 0.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    succeeds(Path::new(BIN), args, env)
}

/// Runs the operator's `sqs-claim` ([`sqs_claim_bin`]) with a clean environment plus `env`;
/// panics unless it exits 0.
pub fn sqs_claim(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    succeeds(&sqs_claim_bin(), args, env)
}

/// Runs `payments` expecting a failure: a non-zero exit and one `error: ...` line.
pub fn fails(args: &[&str]) -> String {
    let out = output(Path::new(BIN), args, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "payments {args:?} must fail");
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
    // Nothing has expired (24 h TTL): the operator's `sqs-claim prune` answers with a count (0)
    // or says the store expires records by itself, and changes nothing.
    let (pruned, _) = sqs_claim(&["prune", "--store", store], &env);
    assert_eq!(pruned.trim(), "0", "prune on fresh claims");
    report("duplicate");
    let _ = std::fs::remove_file(path);
}

/// Runs the operator's `sqs-claim` with a clean environment plus `env`, expecting it to fail:
/// returns the exit code and the one `error: ...` line (panics if there is not exactly one, or
/// on exit 0).
pub fn sqs_claim_fails(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = output(&sqs_claim_bin(), args, env);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "sqs-claim {args:?} must fail");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line expected: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap_or(-1), errors[0].to_owned())
}

/// The operator's commands on `store`, run with `sqs-claim` beside `payments invoke` and
/// `balances` (the same `env`, the app's namespace in `SQS_CLAIM_NAMESPACE`): `inspect` a
/// completed key (full, and raw with `--namespace`), `release` refuses it, `forget` needs
/// `--yes` off a terminal, then deletes it, and the message runs (and credits) again.
pub fn operator_commands(store: &str, env: &[(&str, &str)]) {
    let namespace = format!("op-{}", uuid::Uuid::new_v4().simple());
    let mut env = env.to_vec();
    env.push(("SQS_CLAIM_NAMESPACE", namespace.as_str()));
    let env = &env[..];
    let path = std::env::temp_dir().join(format!("{namespace}.json"));
    std::fs::write(&path, event()).expect("write the event");
    let path = path.to_str().expect("UTF-8 path");
    let invoke = || {
        let (stdout, _) = run(&["invoke", path, "--store", store, "--report", "json"], env);
        serde_json::from_str::<Value>(&stdout).expect("JSON report")["counts"].clone()
    };
    let alice = || {
        let (stdout, _) = run(&["balances", "--store", store], env);
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("alice\t").map(str::to_owned))
            .unwrap_or_default()
    };
    assert_eq!(invoke()["processed"], json!(3));
    let before = alice();
    let key = format!("{namespace}#o-1");

    let (stdout, _) = sqs_claim(
        &["inspect", &key, "--store", store, "--report", "json"],
        env,
    );
    let seen: Value = serde_json::from_str(&stdout).expect("inspect JSON");
    assert_eq!(seen["key"], json!(key), "{seen}");
    assert_eq!(seen["status"], json!("completed"), "{seen}");
    assert_eq!(seen["state"], json!("completed"), "{seen}");
    assert!(seen["token"].is_string(), "{seen}");
    assert!(seen["fingerprint"].is_string(), "{seen}");
    assert!(seen["lease_until"].is_null(), "{seen}");
    let (text, _) = sqs_claim(
        &[
            "inspect",
            "o-1",
            "--namespace",
            &namespace,
            "--store",
            store,
        ],
        env,
    );
    assert!(text.contains("completed, remembered until "), "{text}");

    let (code, err) = sqs_claim_fails(&["inspect", "o-1", "--store", store], env);
    assert_eq!(code, 2, "a raw key without --namespace: {err}");
    assert!(err.contains(&key), "the hint names the full key: {err}");
    let (code, err) = sqs_claim_fails(&["release", &key, "--store", store, "--yes"], env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is completed"), "{err}");
    let (code, err) = sqs_claim_fails(&["forget", &key, "--store", store], env);
    assert_eq!(code, 2, "no terminal, no --yes: {err}");
    assert!(err.contains("--yes"), "{err}");

    let (stdout, stderr) = sqs_claim(&["forget", &key, "--store", store, "--yes"], env);
    assert_eq!(stdout.trim(), format!("forgotten {key}"));
    assert!(
        stderr.contains("credits the account a second time"),
        "{stderr}"
    );
    let (code, err) = sqs_claim_fails(&["inspect", &key, "--store", store], env);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no claim record"), "{err}");
    let (code, err) = sqs_claim_fails(&["forget", &key, "--store", store, "--yes"], env);
    assert_eq!(code, 1, "{err}");

    // What the warning said: the forgotten message runs again, and credits again.
    let counts = invoke();
    assert_eq!(
        (counts["processed"].clone(), counts["duplicate"].clone()),
        (json!(1), json!(2)),
        "{counts}"
    );
    let after: i64 = alice().parse().expect("a balance");
    assert_eq!(after, before.parse::<i64>().expect("a balance") + 1000);
    let _ = std::fs::remove_file(path);
}
