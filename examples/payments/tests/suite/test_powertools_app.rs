//! The example app on a table Powertools for AWS Lambda (Python) writes: its `payments` command
//! line with `SQS_CLAIM_POWERTOOLS_*` set, and Powertools-Python 3.37.0 itself (a `BatchProcessor`
//! with an `@idempotent_function` record handler keyed on `powertools_json(body).order_id`,
//! the app's default key `json:/order_id`; `scripts/powertools/app.py`, run by
//! `scripts/powertools/driver.py` from the venv `scripts/powertools/venv.sh` installs on first
//! use) against DynamoDB Local.
//!
//! Each side runs `events/plain.json` (or some of its records, written to a temp dir) and
//! must find what the other completed a duplicate: not credited again by the app, not run
//! again by Powertools. The operator's `sqs-claim inspect` and `forget`, with the same settings,
//! find Powertools' records from the raw order id.
//!
//! DynamoDB Local must be running: `scripts/standins.sh up` (or `make test`); its endpoint is
//! `SQS_CLAIM_DYNAMODB_ENDPOINT`, default `http://127.0.0.1:8000`.

use crate::support;

use support::operator::sqs_claim_bin;
use support::powertools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use sqs_claim::powertools::PowertoolsFormat;

const BIN: &str = env!("CARGO_BIN_EXE_payments");

/// The Lambda function the Powertools consumer runs as (`AWS_LAMBDA_FUNCTION_NAME`).
const FUNCTION: &str = "orders-fn";

/// The Powertools record handler: `record_handler` in `app.py`.
const HANDLER: &str = "app.record_handler";

/// `plain.json`'s order ids, in its order.
const ORDERS: [&str; 4] = ["ord-1001", "ord-1002", "ord-1003", "ord-1004"];

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
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

/// `program` in `dir`, with no `SQS_CLAIM_*`, `AWS_*` or `RUST_LOG` from this process, the
/// DynamoDB Local environment, and `env`.
fn run(program: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let endpoint = std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:8000".to_owned());
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir);
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("SQS_CLAIM_") || n.starts_with("AWS_") || n == "RUST_LOG" {
            cmd.env_remove(&name);
        }
    }
    cmd.envs([
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]);
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

/// The app's `payments` command line, as [`run`] runs it.
fn payments(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    run(Path::new(BIN), dir, args, env)
}

/// The operator's `sqs-claim` on the same store, as [`run`] runs it.
fn sqs_claim(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    run(&sqs_claim_bin(), dir, args, env)
}

/// A fresh claims table (and its accounts table) on DynamoDB Local, made by `payments init`;
/// its `--store` URL.
fn fresh_table(dir: &Path, prefix: &str) -> String {
    let store = format!("dynamodb:{prefix}-{}", uuid::Uuid::new_v4().simple());
    payments(dir, &["init", "--store", &store], &[]).ok("init (is DynamoDB Local up?)");
    store
}

fn balances(dir: &Path, store: &str) -> BTreeMap<String, i64> {
    let run = payments(dir, &["balances", "--store", store], &[]).ok("balances");
    run.stdout
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(account, cents)| (account.to_owned(), cents.parse().expect("integer balance")))
        .collect()
}

fn plain() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/plain.json")
}

/// `plain.json` with only its records at `indexes`, written to `dir`.
fn plain_records(dir: &Path, indexes: &[usize]) -> PathBuf {
    let event: Value =
        serde_json::from_str(&std::fs::read_to_string(plain()).expect("events/plain.json"))
            .expect("JSON");
    let records = event["Records"].as_array().expect("Records");
    let picked: Vec<Value> = indexes.iter().map(|&i| records[i].clone()).collect();
    let path = dir.join(format!("plain-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, json!({ "Records": picked }).to_string()).expect("write");
    path
}

/// The message ids of `plain.json`'s records at `indexes`.
fn message_ids(indexes: &[usize]) -> Vec<String> {
    let event: Value =
        serde_json::from_str(&std::fs::read_to_string(plain()).expect("events/plain.json"))
            .expect("JSON");
    indexes
        .iter()
        .map(|&i| {
            event["Records"][i]["messageId"]
                .as_str()
                .expect("messageId")
                .to_owned()
        })
        .collect()
}

/// Powertools' batch consumer on `event`; the message ids its record handler ran.
fn powertools_batch(store: &str, event: &Path) -> Vec<String> {
    let table = store.strip_prefix("dynamodb:").expect("a dynamodb: store");
    let out = powertools::driver(
        FUNCTION,
        &[
            "sqs-record",
            "--table",
            table,
            "--event",
            event.to_str().expect("path"),
            "--key",
            "powertools_json(body).order_id",
        ],
        "",
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["response"]["batchItemFailures"], json!([]), "{out}");
    serde_json::from_value(out["ran"].clone()).expect("ran: message ids")
}

/// `(message id, outcome)` of `invoke --report json`, and the keys.
fn outcomes(report: &Value) -> (Vec<(String, String)>, Vec<String>) {
    let items = report["outcomes"].as_array().expect("outcomes");
    (
        items
            .iter()
            .map(|o| {
                (
                    o["message_id"].as_str().unwrap_or("").to_owned(),
                    o["outcome"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect(),
        items
            .iter()
            .map(|o| o["key"].as_str().unwrap_or("").to_owned())
            .collect(),
    )
}

fn powertools_key(order_id: &str) -> String {
    PowertoolsFormat::new(FUNCTION, HANDLER).key(&json!(order_id))
}

/// The interop as a migrating team sets it: the handler, and the Powertools function's name
/// (this consumer runs under another).
const INTEROP: [(&str, &str); 3] = [
    ("SQS_CLAIM_POWERTOOLS_HANDLER", HANDLER),
    ("SQS_CLAIM_POWERTOOLS_FUNCTION", FUNCTION),
    ("AWS_LAMBDA_FUNCTION_NAME", "payments-consumer"),
];

#[test]
fn orders_powertools_completed_are_duplicates_for_the_app_and_not_credited() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = fresh_table(dir.path(), "pt-app");
    // Powertools first, on ord-1001 (acct-alice 1250) and ord-1002 (acct-bob 700).
    let ran = powertools_batch(&store, &plain_records(dir.path(), &[0, 1]));
    assert_eq!(ran, message_ids(&[0, 1]));

    let plain = plain();
    let run = payments(
        dir.path(),
        &[
            "invoke",
            plain.to_str().expect("path"),
            "--store",
            &store,
            "--report",
            "json",
        ],
        &INTEROP,
    )
    .ok("invoke with the interop");
    let report = run.json();
    let ids = message_ids(&[0, 1, 2, 3]);
    let (got, keys) = outcomes(&report);
    assert_eq!(
        got,
        [
            (ids[0].clone(), "duplicate".to_owned()),
            (ids[1].clone(), "duplicate".to_owned()),
            (ids[2].clone(), "processed".to_owned()),
            (ids[3].clone(), "processed".to_owned()),
        ],
        "{}",
        run.stderr
    );
    assert_eq!(keys, ORDERS.map(powertools_key), "Powertools' keys");
    assert_eq!(report["response"]["batchItemFailures"], json!([]));
    // Only ord-1003 (acct-carol 99) and ord-1004 (acct-alice 500) were credited.
    assert_eq!(
        balances(dir.path(), &store),
        BTreeMap::from([
            ("acct-alice".to_owned(), 500),
            ("acct-carol".to_owned(), 99)
        ])
    );

    // inspect finds Powertools' own record from the raw order id, and from its stored key.
    for key in ["ord-1001".to_owned(), powertools_key("ord-1001")] {
        let run = sqs_claim(
            dir.path(),
            &["inspect", &key, "--store", &store, "--report", "json"],
            &INTEROP,
        )
        .ok("inspect");
        let found = run.json();
        assert_eq!(found["key"], powertools_key("ord-1001"), "{key}");
        assert_eq!(found["status"], "completed", "{key}");
        assert_eq!(found["token"], Value::Null, "Powertools writes no token");
    }
    // --namespace has no meaning for Powertools keys: a usage mistake.
    let run = sqs_claim(
        dir.path(),
        &[
            "inspect",
            "ord-1001",
            "--namespace",
            "payments",
            "--store",
            &store,
        ],
        &INTEROP,
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    // Without the interop sqs-claim looks for the app's own keys: `payments#ord-1001` is not
    // there.
    let run = sqs_claim(
        dir.path(),
        &["inspect", "payments#ord-1001", "--store", &store],
        &[],
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
}

#[test]
fn orders_the_app_completed_are_skipped_by_powertools() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = fresh_table(dir.path(), "pt-app-rev");
    // The app first, on ord-1001 and ord-1003, its function name as Lambda would set it when
    // it keeps the Powertools function's name (an in-place rewrite).
    let in_place = [
        ("SQS_CLAIM_POWERTOOLS_HANDLER", HANDLER),
        ("AWS_LAMBDA_FUNCTION_NAME", FUNCTION),
    ];
    let some = plain_records(dir.path(), &[0, 2]);
    let run = payments(
        dir.path(),
        &[
            "invoke",
            some.to_str().expect("path"),
            "--store",
            &store,
            "--report",
            "json",
        ],
        &in_place,
    )
    .ok("invoke with the interop");
    let (got, keys) = outcomes(&run.json());
    assert!(got.iter().all(|(_, o)| o == "processed"), "{got:?}");
    assert_eq!(keys, [powertools_key(ORDERS[0]), powertools_key(ORDERS[2])]);

    // Powertools on the whole batch runs only the two the app did not complete.
    let ran = powertools_batch(&store, &plain());
    assert_eq!(ran, message_ids(&[1, 3]));
    assert_eq!(powertools_batch(&store, &plain()), Vec::<String>::new());

    // `forget ord-1001` deletes the very record Powertools reads: it runs that order again.
    let run = sqs_claim(
        dir.path(),
        &["forget", "ord-1001", "--yes", "--store", &store],
        &in_place,
    )
    .ok("forget");
    assert_eq!(
        run.stdout.trim(),
        format!("forgotten {}", powertools_key("ord-1001"))
    );
    assert_eq!(powertools_batch(&store, &plain()), message_ids(&[0]));
}
