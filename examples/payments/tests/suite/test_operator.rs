//! The operator's commands for one key (`sqs-claim inspect`, `release`, `forget`) as an operator
//! of this app runs them: the operator's `sqs-claim` binary on the store the app's `payments`
//! binary uses, the default SQLite store (a stuck in-progress claim released, a completed one
//! forgotten, each refusing the other status) and DynamoDB Local. Redis, PostgreSQL and the
//! tiered store run the same scenario in `tests/suite/test_ledgers.rs`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use sqs_claim::SqliteStore;
use sqs_claim::store::{Claim, ClaimRequest, ClaimStore};

// Only the operator's scenario and its helpers are used here.
use crate::support;

use support::cli;
use support::operator::sqs_claim_bin;

const BIN: &str = env!("CARGO_BIN_EXE_payments");

/// `SQS_CLAIM_NAMESPACE` as an operator of this app sets it: the app's default namespace, which
/// `sqs-claim` does not assume.
const APP_NAMESPACE: [(&str, &str); 1] = [("SQS_CLAIM_NAMESPACE", "payments")];

/// Runs `program` in `dir` with a clean environment plus `env`: exit code, stdout, stderr.
fn run(program: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    )
}

/// Runs the app's `payments` in `dir` with a clean environment.
fn payments(dir: &Path, args: &[&str]) -> (i32, String, String) {
    run(Path::new(BIN), dir, args, &[])
}

/// Runs the operator's `sqs-claim` in `dir` with a clean environment.
fn sqs_claim(dir: &Path, args: &[&str]) -> (i32, String, String) {
    run(&sqs_claim_bin(), dir, args, &[])
}

/// A claim left in progress, as by a run killed midway: taken straight on the app's SQLite file.
async fn stuck_claim(db: &Path, key: &str, lease: Duration) {
    let store = SqliteStore::open(db).expect("open the app's SQLite file");
    let now = SystemTime::now();
    let claim = store
        .claim(ClaimRequest {
            key,
            now,
            lease_until: now + lease,
            expires_at: now + Duration::from_secs(3600),
            fingerprint: Some("fp-stuck"),
        })
        .await
        .expect("claim");
    assert!(matches!(claim, Claim::Acquired(_)), "{claim:?}");
}

#[tokio::test]
async fn release_frees_a_stuck_claim_and_refuses_a_completed_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let events = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/plain.json");
    let (code, _, stderr) = payments(dir.path(), &["invoke", events]);
    assert_eq!(code, 0, "{stderr}");
    let db = dir.path().join(".sqs-claim/claims.db");
    stuck_claim(&db, "payments#stuck-1", Duration::from_secs(120)).await;

    let (code, stdout, _) = sqs_claim(
        dir.path(),
        &["inspect", "payments#stuck-1", "--report", "json"],
    );
    assert_eq!(code, 0);
    let seen: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(seen["status"], "in_progress", "{seen}");
    assert_eq!(seen["state"], "held", "{seen}");
    assert_eq!(seen["fingerprint"], "fp-stuck", "{seen}");
    assert!(seen["lease_until_ms"].is_i64(), "{seen}");
    let (_, text, _) = sqs_claim(
        dir.path(),
        &["inspect", "--namespace", "payments", "stuck-1"],
    );
    assert!(
        text.contains("in progress, lease lapses at ") && text.contains("(in 1 min "),
        "{text}"
    );

    // forget never deletes an in-progress record.
    let (code, _, stderr) = sqs_claim(dir.path(), &["forget", "payments#stuck-1", "--yes"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("is in progress") && stderr.contains("release"),
        "{stderr}"
    );
    // release asks, and off a terminal refuses without --yes.
    let (code, _, stderr) = sqs_claim(dir.path(), &["release", "payments#stuck-1"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, stdout, stderr) = sqs_claim(dir.path(), &["release", "payments#stuck-1", "--yes"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "released payments#stuck-1");
    assert!(stderr.contains("the lease is live until"), "{stderr}");
    let (code, _, stderr) = sqs_claim(dir.path(), &["inspect", "payments#stuck-1"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no claim record"), "{stderr}");

    // A lapsed lease: no warning about a live worker.
    stuck_claim(&db, "payments#stuck-2", Duration::ZERO).await;
    let (_, stdout, _) = sqs_claim(
        dir.path(),
        &["inspect", "payments#stuck-2", "--report", "json"],
    );
    assert_eq!(
        serde_json::from_str::<Value>(&stdout).expect("JSON")["state"],
        "lapsed"
    );
    let (code, _, stderr) = sqs_claim(dir.path(), &["release", "payments#stuck-2", "--yes"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("the lease is live"), "{stderr}");

    // release never deletes a completed record.
    let (code, _, stderr) = sqs_claim(dir.path(), &["release", "payments#ord-1001", "--yes"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("is completed") && stderr.contains("forget"),
        "{stderr}"
    );
    let (code, stdout, _) = sqs_claim(dir.path(), &["inspect", "payments#ord-1001"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("COMPLETED"), "{stdout}");
}

#[test]
fn usage_mistakes_exit_2_and_unknown_keys_exit_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (args, env, code, want) in [
        (&["inspect"][..], &[][..], 2, "KEY"),
        // A raw key: the hint names the full key, in the app's namespace when the environment
        // names it, else a placeholder (sqs-claim never guesses a namespace).
        (
            &["inspect", "no-namespace"],
            &APP_NAMESPACE,
            2,
            "payments#no-namespace",
        ),
        (
            &["inspect", "no-namespace"],
            &[],
            2,
            "NAMESPACE#no-namespace",
        ),
        (&["inspect", "k", "--namespace", ""], &[], 2, "--namespace"),
        (&["inspect", "p#k", "--report", "yaml"], &[], 2, "yaml"),
        (&["release", "p#k", "--bogus"], &[], 2, "--bogus"),
        (
            &["inspect", "payments#nothing-here"],
            &[],
            1,
            "no claim record",
        ),
        (
            &["release", "payments#nothing-here", "--yes"],
            &[],
            1,
            "no claim record",
        ),
        (
            &["forget", "payments#nothing-here", "--yes"],
            &[],
            1,
            "no claim record",
        ),
    ] {
        let (got, _, stderr) = run(&sqs_claim_bin(), dir.path(), args, env);
        assert_eq!(got, code, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.trim_end().lines().count() == 1,
            "{args:?}: one error line expected: {stderr}"
        );
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

#[test]
fn forget_on_the_default_store_lets_the_message_run_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = format!("sqlite:{}", dir.path().join("claims.db").display());
    cli::operator_commands(&store, &[]);
}

#[test]
fn operator_commands_on_dynamodb_local() {
    let endpoint = std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:8000".to_owned());
    let env = [
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let store = format!("dynamodb:op-{}", uuid::Uuid::new_v4().simple());
    cli::run(&["init", "--store", &store], &env);
    cli::operator_commands(&store, &env);
}
