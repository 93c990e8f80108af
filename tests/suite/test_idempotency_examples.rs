//! The idempotency examples run as a user runs them: `examples/apigw_payment.rs` and
//! `examples/stripe_webhook.rs` built and started as processes, on the sample events of
//! `examples/events/` with `--event FILE` (one process per request, sharing an SQLite file), and
//! under a fake Lambda Runtime API (`sqs_claim_testkit::runtime`).
//!
//! Each sends the same API Gateway request twice and checks that the second answer is
//! byte-identical and that the side effect happened once (the fake provider's ledger file, the
//! webhook's `applied_events` rows); the same key with another body gets 422, and a request
//! while the first still runs gets 409.
//!
//! The binaries are built as `tests/suite/test_lambda_run.rs` builds its example: once, with the
//! cargo, target directory, profile and features of this test.

#[cfg(feature = "dynamodb")]
use crate::support;

#[cfg(feature = "dynamodb")]
use support::dynamodb;
#[cfg(all(feature = "dynamodb", feature = "powertools"))]
use support::powertools;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use sqs_claim::store::StoreAdmin;
use sqs_claim::{SqlValue, SqliteStore};
use sqs_claim_testkit::runtime::{FakeRuntime, Posted};

const WAIT: Duration = Duration::from_secs(300);

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/events")
        .join(name)
}

/// Both examples' binaries, built (or found fresh) once per test process.
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable in <target>/<profile>/deps")
            .to_path_buf();
        let target_dir = profile_dir.parent().expect("target dir").to_path_buf();
        let mut features = vec!["apigw", "sqlite"];
        if cfg!(feature = "dynamodb") {
            features.push("dynamodb");
        }
        if cfg!(feature = "powertools") {
            features.push("powertools");
        }
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "--quiet", "-p", "sqs-claim"])
            .args(["--example", "apigw_payment", "--example", "stripe_webhook"])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .args(["--no-default-features", "--features", &features.join(",")])
            .env("CARGO_TARGET_DIR", &target_dir);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build --example");
        assert!(status.success(), "cargo build of the examples failed");
        profile_dir.join("examples")
    });
    let binary = dir.join(name);
    assert!(binary.exists(), "{} was not built", binary.display());
    binary
}

/// Runs `name` on `event` outside Lambda, in a clean environment plus `env`, in `dir`.
fn run(name: &str, event: &Path, dir: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(example(name))
        .arg("--event")
        .arg(event)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("run the example")
}

/// The one line of JSON an example prints, checked to be a successful run.
fn answer(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().count(), 1, "not one line: {stdout}");
    stdout.trim_end().to_owned()
}

fn status(answer: &str) -> u64 {
    let v: Value = serde_json::from_str(answer).expect("the answer is JSON");
    v["statusCode"].as_u64().expect("an HTTP answer")
}

fn ledger_lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("ledger"))
        .map(|l| l.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_payment_sent_twice_is_charged_once_and_answered_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("PROVIDER_LEDGER", "ledger"),
        ("IDEMPOTENCY_DB", "claims.sqlite3"),
    ];
    let first = answer(&run(
        "apigw_payment",
        &sample("payment.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(status(&first), 201);
    let body: Value = serde_json::from_str(
        serde_json::from_str::<Value>(&first).unwrap()["body"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("pay_"));
    assert_eq!(body["amount"], 1250);

    // A client retrying: another process, the same request.
    let second = answer(&run(
        "apigw_payment",
        &sample("payment.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(
        second, first,
        "the replay is byte-identical (the same payment id)"
    );
    assert_eq!(ledger_lines(dir.path()), 1, "charged once");

    let other = answer(&run(
        "apigw_payment",
        &sample("payment-other-body.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(status(&other), 422);
    let no_key = answer(&run(
        "apigw_payment",
        &sample("payment-no-key.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(status(&no_key), 400);
    assert!(no_key.contains("Idempotency-Key"), "{no_key}");
    assert_eq!(ledger_lines(dir.path()), 1, "refusals charge nothing");
}

/// A REST API event (payload format 1.0, as API Gateway's REST APIs send it, with a
/// base64-encoded body and `multiValueHeaders`) through the same binary: replayed the same way.
#[test]
fn a_rest_api_payment_with_a_base64_body_is_replayed_too() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("PROVIDER_LEDGER", "ledger"),
        ("IDEMPOTENCY_DB", "claims.sqlite3"),
    ];
    let event = sample("payment-rest.json");
    let first = answer(&run("apigw_payment", &event, dir.path(), &env));
    assert_eq!(status(&first), 201, "{first}");
    let body: Value = serde_json::from_str(
        serde_json::from_str::<Value>(&first).unwrap()["body"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(body["amount"], 990, "the decoded body was read: {first}");
    let second = answer(&run("apigw_payment", &event, dir.path(), &env));
    assert_eq!(second, first, "byte-identical replay");
    assert_eq!(ledger_lines(dir.path()), 1, "charged once");
}

/// The same on DynamoDB (Local), as deployed: `IDEMPOTENCY_TABLE` and the AWS environment.
#[cfg(feature = "dynamodb")]
#[tokio::test]
async fn on_dynamodb_a_payment_sent_twice_is_charged_once_and_answered_the_same_bytes() {
    let store = dynamodb::dynamodb_store("idempotency-example").await;
    let endpoint = dynamodb::dynamodb_endpoint();
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("PROVIDER_LEDGER", "ledger"),
        ("IDEMPOTENCY_TABLE", store.table()),
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let first = answer(&run(
        "apigw_payment",
        &sample("payment.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(status(&first), 201);
    let second = answer(&run(
        "apigw_payment",
        &sample("payment.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(second, first, "byte-identical");
    let other = answer(&run(
        "apigw_payment",
        &sample("payment-other-body.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(status(&other), 422);
    assert_eq!(ledger_lines(dir.path()), 1);
    assert!(
        !dir.path().join("idempotency.sqlite3").exists(),
        "the records went to DynamoDB, not to SQLite"
    );
}

/// A team moving an API from Powertools-Python: the example with `POWERTOOLS_HANDLER` on the
/// table a Powertools `@idempotent` handler wrote (its HTTP API key,
/// `headers."idempotency-key"`, validated on `powertools_json(body)`) replays what Powertools
/// answered and charges nothing; what the example answers, Powertools replays.
#[cfg(all(feature = "dynamodb", feature = "powertools"))]
#[tokio::test]
async fn with_powertools_handler_a_request_powertools_answered_is_replayed_not_charged() {
    let store = dynamodb::dynamodb_store("apigw-powertools").await;
    let endpoint = dynamodb::dynamodb_endpoint();
    let dir = tempfile::tempdir().unwrap();
    const FUNCTION: &str = "payments-api";
    let powertools_run = |event: &Path| {
        powertools::driver(
            FUNCTION,
            &[
                "apigw",
                "--table",
                store.table(),
                "--event",
                event.to_str().unwrap(),
                "--key",
                r#"headers."idempotency-key""#,
                "--validation",
                "powertools_json(body)",
            ],
            "",
        )
    };
    let env = [
        ("PROVIDER_LEDGER", "ledger"),
        ("IDEMPOTENCY_TABLE", store.table()),
        ("POWERTOOLS_HANDLER", "app.lambda_handler"),
        ("AWS_LAMBDA_FUNCTION_NAME", FUNCTION),
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];

    let first = powertools_run(&sample("payment.json"));
    assert_eq!(first["ran"], true, "{first}");
    assert_eq!(first["error"], Value::Null, "{first}");
    let replay = answer(&run(
        "apigw_payment",
        &sample("payment.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(
        serde_json::from_str::<Value>(&replay).unwrap(),
        first["response"],
        "Powertools' stored response, replayed"
    );
    assert_eq!(ledger_lines(dir.path()), 0, "not charged");
    // Powertools' `validation` is the example's request hash: another body is refused.
    let other = answer(&run(
        "apigw_payment",
        &sample("payment-other-body.json"),
        dir.path(),
        &env,
    ));
    assert_eq!(status(&other), 422);
    assert_eq!(ledger_lines(dir.path()), 0, "refusals charge nothing");

    // The other way: a request the example answers first is a duplicate to Powertools.
    let mut event: Value =
        serde_json::from_str(&std::fs::read_to_string(sample("payment.json")).unwrap()).unwrap();
    event["headers"]["idempotency-key"] = Value::String("7f3c9a6e-payments-0002".into());
    let second_path = dir.path().join("payment-0002.json");
    std::fs::write(&second_path, event.to_string()).unwrap();
    let ours = answer(&run("apigw_payment", &second_path, dir.path(), &env));
    assert_eq!(status(&ours), 201);
    assert_eq!(ledger_lines(dir.path()), 1);
    let dup = powertools_run(&second_path);
    assert_eq!(dup["ran"], false, "{dup}");
    assert_eq!(dup["error"], Value::Null, "{dup}");
    assert_eq!(
        dup["response"],
        serde_json::from_str::<Value>(&ours).unwrap()
    );
}

/// The example started as Lambda starts it. Killed when dropped.
struct Function {
    child: Child,
}

impl Function {
    fn start(name: &str, runtime_api: &str, dir: &Path, env: &[(&str, &str)]) -> Function {
        let child = Command::new(example(name))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
            .env("AWS_LAMBDA_FUNCTION_NAME", name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the example");
        Function { child }
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the function exited: {status}");
        }
    }
}

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The function's next response: (request id, body).
async fn next_response(rt: &mut FakeRuntime, function: &mut Function) -> (String, String) {
    let started = Instant::now();
    loop {
        if let Some(posted) = rt.next_post(Duration::from_millis(200)).await {
            match posted {
                Posted::Response { request_id, body } => return (request_id, body),
                other => panic!("not a response: {other:?}"),
            }
        }
        function.assert_running();
        assert!(started.elapsed() < WAIT, "no answer within {WAIT:?}");
    }
}

#[tokio::test]
async fn under_lambda_a_retry_while_the_charge_runs_gets_409_and_a_later_one_the_same_201() {
    let dir = tempfile::tempdir().unwrap();
    let mut rt = FakeRuntime::start().await.unwrap();
    // Two invocations in flight at once, and a charge slow enough for the second to arrive
    // while the first holds the key.
    let mut function = Function::start(
        "apigw_payment",
        &rt.address(),
        dir.path(),
        &[
            ("PROVIDER_LEDGER", "ledger"),
            ("PROVIDER_DELAY_MS", "1500"),
            ("IDEMPOTENCY_DB", "claims.sqlite3"),
            ("AWS_LAMBDA_MAX_CONCURRENCY", "2"),
        ],
    );
    let started = Instant::now();
    while rt.polling() < 2 {
        function.assert_running();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not polling twice"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let event = std::fs::read_to_string(sample("payment.json")).unwrap();
    let a = rt.queue(event.clone(), Duration::from_secs(30));
    let b = rt.queue(event.clone(), Duration::from_secs(30));
    let mut answers = [
        next_response(&mut rt, &mut function).await,
        next_response(&mut rt, &mut function).await,
    ];
    answers.sort_by_key(|(_, body)| status(body));
    let ids: Vec<&str> = answers.iter().map(|(id, _)| id.as_str()).collect();
    assert!(
        ids.contains(&a.as_str()) && ids.contains(&b.as_str()),
        "{ids:?}"
    );
    let (created, busy) = (&answers[0].1, &answers[1].1);
    assert_eq!(status(created), 201);
    assert_eq!(status(busy), 409);
    let busy: Value = serde_json::from_str(busy).unwrap();
    let retry_after: u64 = busy["headers"]["retry-after"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a Retry-After header");
    assert!((1..=30).contains(&retry_after), "{retry_after}");

    // After the first finished: the same bytes, no second charge.
    let c = rt.queue(event, Duration::from_secs(30));
    let (id, replay) = next_response(&mut rt, &mut function).await;
    assert_eq!(id, c);
    assert_eq!(&replay, created, "byte-identical replay");
    assert_eq!(ledger_lines(dir.path()), 1);
}

#[tokio::test]
async fn a_webhook_delivered_twice_is_applied_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("webhooks.sqlite3");
    let env = [("STRIPE_TOLERANCE_SECS", "0")];
    let event = sample("stripe-payment-succeeded.json");

    // Under Lambda: two deliveries of one event.
    let mut rt = FakeRuntime::start().await.unwrap();
    let mut function = Function::start("stripe_webhook", &rt.address(), dir.path(), &env);
    let text = std::fs::read_to_string(&event).unwrap();
    rt.queue(text.clone(), Duration::from_secs(30));
    let (_, first) = next_response(&mut rt, &mut function).await;
    rt.queue(text.clone(), Duration::from_secs(30));
    let (_, second) = next_response(&mut rt, &mut function).await;
    assert_eq!(status(&first), 200);
    assert_eq!(second, first, "byte-identical");
    drop(function);

    // And once more from the command line, on the same file.
    let third = answer(&run("stripe_webhook", &event, dir.path(), &env));
    assert_eq!(third, first);

    let store = SqliteStore::open(&db).unwrap();
    let rows = store
        .query("SELECT event_id, amount FROM applied_events", vec![])
        .await
        .unwrap();
    assert_eq!(
        rows,
        vec![vec![
            SqlValue::Text("evt_1QxYz2AbCdEfGh".into()),
            SqlValue::Integer(1250)
        ]],
        "applied once"
    );

    // A forged delivery and a stale one are refused before anything is claimed.
    let mut forged: Value = serde_json::from_str(&text).unwrap();
    forged["body"] = Value::String(
        forged["body"]
            .as_str()
            .unwrap()
            .replace("evt_1QxYz2AbCdEfGh", "evt_forged"),
    );
    let forged_path = dir.path().join("forged.json");
    std::fs::write(&forged_path, forged.to_string()).unwrap();
    let refused = answer(&run("stripe_webhook", &forged_path, dir.path(), &env));
    assert_eq!(status(&refused), 400);
    assert!(refused.contains("does not match"), "{refused}");
    let stale = answer(&run("stripe_webhook", &event, dir.path(), &[]));
    assert_eq!(status(&stale), 400, "signed long ago, default tolerance");
    assert!(
        store
            .inspect("stripe-webhooks#evt_forged")
            .await
            .unwrap()
            .is_none(),
        "nothing claimed for a forged delivery"
    );
}
