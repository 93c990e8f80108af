//! Both binaries start in bounded time whatever the store does: a store that is dark at
//! start-up (a port that accepts connections and never answers, a PostgreSQL server that goes
//! silent after the handshake) fails the start with one clear error line and a non-zero exit,
//! never a hang (issue 8). The bound is `SQS_CLAIM_STARTUP_TIMEOUT_MS` (default 15 s), on top of
//! each store client's own timeouts.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

// Only the fake runtime's start-up side is used here: nothing is ever queued.
use sqs_claim_testkit::runtime as fake_runtime;
use sqs_claim_testkit::silent;
use support::consumer;

const BIN: &str = env!("CARGO_BIN_EXE_payments");

/// Far above every bound in play (15 s start-up; each store fails sooner on its own timeout), far below "hangs": a run that takes longer
/// failed the test, it did not pass slowly.
const BOUNDED: Duration = Duration::from_secs(25);

fn plain_event() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/plain.json")
}

/// The AWS variables of a DynamoDB endpoint at `url`, with no metadata service lookups.
fn aws_env(url: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL_DYNAMODB", url),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Extra environment variables of one run.
type Env = Vec<(String, String)>;

struct Finished {
    code: Option<i32>,
    stderr: String,
    took: Duration,
}

/// Runs the CLI in a fresh directory with a clean environment plus `env`; kills it (and fails
/// the test) if it runs past [`BOUNDED`].
fn cli(args: &[String], env: &[(String, String)]) -> Finished {
    let dir = std::env::temp_dir().join(format!("sqs-claim-startup-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let stderr_path = dir.join("stderr");
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(&dir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("run sqs-claim");
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if started.elapsed() > BOUNDED {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sqs-claim {args:?} still running after {BOUNDED:?}: the start is not bounded");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    Finished { code, stderr, took }
}

fn assert_one_error_line(run: &Finished, what: &str) {
    assert_eq!(
        run.code,
        Some(1),
        "{what}: exit code; stderr: {}",
        run.stderr
    );
    let lines: Vec<&str> = run.stderr.trim_end().lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: one line expected: {:?}",
        run.stderr
    );
    assert!(lines[0].starts_with("error: "), "{what}: {:?}", lines[0]);
    assert!(!run.stderr.contains("panicked"), "{what}: {}", run.stderr);
}

/// `sqs-claim invoke` on every networked store pointing at a dark endpoint: one error line,
/// exit 1, in bounded time. The runs go in parallel (each waits seconds on purpose).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_fails_fast_on_a_dark_store() {
    let silent = silent::silent().await;
    let pg_silent = silent::fake_pg(silent::Then::Silent).await;
    let event = plain_event().to_str().expect("UTF-8 path").to_owned();
    let dark = silent.addr().to_string();
    let cases: Vec<(&str, String, Env)> = vec![
        (
            "dynamodb",
            "dynamodb:claims".into(),
            aws_env(&silent.http_url()),
        ),
        (
            "postgres",
            format!("postgres://postgres@{dark}/test"),
            vec![],
        ),
        (
            "postgres after the handshake",
            format!("postgres://postgres@{}/test", pg_silent.addr()),
            vec![],
        ),
        ("redis", format!("redis://{dark}/"), vec![]),
        (
            "tiered",
            format!(
                "tiered:redis://{dark}/|postgres://postgres@{}/test",
                pg_silent.addr()
            ),
            vec![],
        ),
    ];
    let runs: Vec<_> = cases
        .into_iter()
        .map(|(what, store, env)| {
            let args = vec!["invoke".to_owned(), event.clone(), "--store".into(), store];
            (what, tokio::task::spawn_blocking(move || cli(&args, &env)))
        })
        .collect();
    for (what, run) in runs {
        let run = run.await.expect("the run's thread");
        assert_one_error_line(&run, what);
        assert!(
            run.stderr.contains("no answer")
                || run.stderr.contains("did not answer")
                || run.stderr.contains("timed out"),
            "{what}: the error must say the store did not answer: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains("sqs-claim init") && !run.stderr.contains("payments init"),
            "{what}: a silent store is not a missing table: {}",
            run.stderr
        );
        eprintln!(
            "{what}: failed in {:?}: {}",
            run.took,
            run.stderr.trim_end()
        );
    }
}

/// `SQS_CLAIM_STARTUP_TIMEOUT_MS` is the bound: at 1 s a dark Redis (whose client would retry
/// its connection for longer) stops the start after about 1 s, and the error names the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_timeout_is_the_bound_and_is_named() {
    let silent = silent::silent().await;
    let dark = silent.addr().to_string();
    let event = plain_event().to_str().expect("UTF-8 path").to_owned();
    for (what, store, mut env) in [
        ("redis", format!("redis://{dark}/"), vec![]),
        (
            "dynamodb",
            "dynamodb:claims".to_owned(),
            aws_env(&silent.http_url()),
        ),
    ] {
        env.push(("SQS_CLAIM_STARTUP_TIMEOUT_MS".into(), "1000".into()));
        let args = vec!["invoke".to_owned(), event.clone(), "--store".into(), store];
        let run = tokio::task::spawn_blocking(move || cli(&args, &env))
            .await
            .expect("thread");
        assert_one_error_line(&run, what);
        assert!(
            run.stderr.contains("within 1000 ms at start-up")
                && run.stderr.contains("SQS_CLAIM_STARTUP_TIMEOUT_MS"),
            "{what}: {}",
            run.stderr
        );
        assert!(
            run.took < Duration::from_secs(4),
            "{what}: a 1 s start-up bound, took {:?}",
            run.took
        );
    }
}

/// The Lambda binary under the fake Runtime API, its DynamoDB endpoint dark: it stops at init
/// with one JSON error line (what to check) and a non-zero exit, in bounded time, without
/// ever asking for an invocation it could not serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_fails_its_init_fast_on_a_dark_store() {
    let silent = silent::silent().await;
    let pg_silent = silent::fake_pg(silent::Then::Silent).await;
    let mut rt = fake_runtime::FakeRuntime::start()
        .await
        .expect("fake runtime API");
    for (what, store, env) in [
        (
            "dynamodb",
            "dynamodb:claims".to_owned(),
            aws_env(&silent.http_url()),
        ),
        (
            "postgres",
            format!("postgres://postgres@{}/test", pg_silent.addr()),
            vec![],
        ),
        ("redis", format!("redis://{}/", silent.addr()), vec![]),
    ] {
        let dir = consumer::TempDir::new("sqs-claim-consumer");
        let started = Instant::now();
        let settings = [("SQS_CLAIM_STORE", store.as_str())]
            .into_iter()
            .chain(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut child = consumer::Consumer::start(dir.path(), "consumer", &rt.address(), settings);
        let status = loop {
            if let Some(status) = child.exited() {
                break status;
            }
            if started.elapsed() > BOUNDED {
                child.kill();
                panic!("{what}: the consumer still starting after {BOUNDED:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let logs = child.stdout();
        assert!(!status.success(), "{what}: must exit non-zero: {logs}");
        let errors: Vec<serde_json::Value> = logs
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["level"] == "ERROR")
            .collect();
        assert_eq!(errors.len(), 1, "{what}: one error line: {logs}");
        // Flat JSON (Lambda's format): the event's fields sit at the top, beside `message`.
        let error = errors[0]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("no answer") || error.contains("did not answer"),
            "{what}: the error says the store did not answer: {logs}"
        );
        eprintln!(
            "{what}: consumer stopped in {:?}: {error}",
            started.elapsed()
        );
        // It never answered an invocation (it may have asked for one: the check runs beside
        // the runtime's first `next`).
        assert!(
            rt.next_post(Duration::from_millis(10)).await.is_none(),
            "{what}"
        );
    }
}

/// DynamoDB Local's endpoint (`SQS_CLAIM_DYNAMODB_ENDPOINT`, default 127.0.0.1:8000).
fn dynamodb_local() -> String {
    std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8000".into())
}

/// Runs the consumer under `rt` with `env` until it exits (bounded), an event already queued:
/// its first `next` gets the event at once, while its start-up check is still on the way.
/// Returns its logs and the one `ERROR` line's `error` field.
async fn consumer_stops_before_its_event(
    rt: &mut fake_runtime::FakeRuntime,
    env: &[(String, String)],
) -> (String, String) {
    let event = std::fs::read_to_string(plain_event()).expect("events/plain.json");
    rt.queue(event, Duration::from_secs(30));
    let dir = consumer::TempDir::new("sqs-claim-consumer");
    let started = Instant::now();
    let mut child = consumer::Consumer::start(
        dir.path(),
        "consumer",
        &rt.address(),
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    let status = loop {
        if let Some(status) = child.exited() {
            break status;
        }
        if started.elapsed() > BOUNDED {
            child.kill();
            panic!(
                "the consumer still running after {BOUNDED:?}: {}",
                child.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let logs = child.stdout();
    assert_eq!(status.code(), Some(1), "exit status: {}", child.logs());
    let errors: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["level"] == "ERROR")
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {logs}");
    // The invocation was handed over and never answered: Lambda redelivers the batch.
    if let Some(posted) = rt.next_post(Duration::from_millis(100)).await {
        panic!("the consumer answered an event it must not process: {posted:?}\n{logs}");
    }
    let error = errors[0]["error"].as_str().unwrap_or_default().to_owned();
    (logs, error)
}

/// A missing claims table, the event already waiting: the consumer stops with the start-up
/// check's error, the same text as when the check ran before the runtime (the table, and the
/// command that creates both tables), and processes nothing: no message is answered, so the
/// whole batch comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_stops_the_consumer_before_its_first_event() {
    let mut rt = fake_runtime::FakeRuntime::start()
        .await
        .expect("fake runtime API");
    let table = format!("startup-missing-{}", uuid::Uuid::new_v4().simple());
    let mut env = aws_env(&dynamodb_local());
    env.push(("SQS_CLAIM_STORE".into(), format!("dynamodb:{table}")));
    let (logs, error) = consumer_stops_before_its_event(&mut rt, &env).await;
    assert_eq!(
        error,
        format!(
            "DynamoDB table {table} does not exist: create the tables with `payments init \
             --store dynamodb:{table}`, or in code with StoreAdmin::init() on this store"
        ),
        "{logs}"
    );
}

/// The configured key layout has a sort key the table lacks: writes would succeed (the sort
/// key lands as a plain attribute, every claim of a partition on one item) and only the
/// start-up check sees it. The event is waiting when the consumer starts: it stops with the
/// check's error and writes nothing, not one credit and not one claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_layout_stops_the_consumer_before_anything_is_written() {
    let mut rt = fake_runtime::FakeRuntime::start()
        .await
        .expect("fake runtime API");
    let table = format!("startup-layout-{}", uuid::Uuid::new_v4().simple());
    let store = format!("dynamodb:{table}");
    let mut env = aws_env(&dynamodb_local());
    env.push((
        "SQS_CLAIM_DYNAMODB_PARTITION_KEY".into(),
        "pk=CLAIM#{key}".into(),
    ));
    // The claims table (HASH pk) and the accounts table.
    let init = tokio::task::spawn_blocking({
        let (env, store) = (env.clone(), store.clone());
        move || cli(&["init".into(), "--store".into(), store], &env)
    })
    .await
    .expect("thread");
    assert_eq!(init.code, Some(0), "payments init: {}", init.stderr);

    let mut with_sort = env.clone();
    with_sort.push(("SQS_CLAIM_DYNAMODB_SORT_KEY".into(), "sk=CLAIM".into()));
    with_sort.push(("SQS_CLAIM_STORE".into(), store.clone()));
    let (logs, error) = consumer_stops_before_its_event(&mut rt, &with_sort).await;
    assert!(
        error.contains("has the key schema pk (HASH, S)")
            && error.contains("SQS_CLAIM_DYNAMODB_SORT_KEY=sk=CLAIM"),
        "{logs}"
    );
    // Nothing written: no account was credited (the layout the table has reads them).
    let balances = tokio::task::spawn_blocking(move || {
        cli(&["balances".into(), "--store".into(), store], &env)
    })
    .await
    .expect("thread");
    assert_eq!(balances.code, Some(0), "balances: {}", balances.stderr);
    assert!(
        balances.stderr.contains("no accounts yet"),
        "a credit was written: {}",
        balances.stderr
    );
}

/// A store that does not answer and an invocation whose deadline comes before the start-up
/// bound: the consumer stops before the deadline with an error that says the store did not
/// answer (not Lambda's bare "Task timed out"), and answers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dark_store_stops_the_consumer_before_the_first_deadline() {
    let silent = silent::silent().await;
    let mut rt = fake_runtime::FakeRuntime::start()
        .await
        .expect("fake runtime API");
    let mut env = aws_env(&silent.http_url());
    env.push(("SQS_CLAIM_STORE".into(), "dynamodb:claims".into()));
    env.push(("SQS_CLAIM_STARTUP_TIMEOUT_MS".into(), "60000".into()));
    let event = std::fs::read_to_string(plain_event()).expect("events/plain.json");
    // Queued now with a 2 s budget: the consumer gets it as soon as it asks.
    let deadline_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
        + 2_000;
    rt.queue_at(event, deadline_ms);
    let dir = consumer::TempDir::new("sqs-claim-consumer");
    let started = Instant::now();
    let mut child = consumer::Consumer::start(
        dir.path(),
        "consumer",
        &rt.address(),
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    let status = loop {
        if let Some(status) = child.exited() {
            break status;
        }
        if started.elapsed() > BOUNDED {
            child.kill();
            panic!(
                "the consumer still running after {BOUNDED:?}: {}",
                child.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let logs = child.stdout();
    assert_eq!(status.code(), Some(1), "{}", child.logs());
    assert!(
        logs.contains("did not answer the start-up check before the invocation's deadline"),
        "{logs}"
    );
    assert!(
        rt.next_post(Duration::from_millis(100)).await.is_none(),
        "{logs}"
    );
}

/// `payments invoke` sends its start-up check beside the batch's first writes where no write
/// can land on a table the check refuses (a partition key alone), and checks first where one
/// could (a sort key configured). Both ways round, on DynamoDB Local, the run stops with the
/// check's one error line and writes nothing: not one credit, not one claim (the balances and
/// a second run on the right layout, which processes every message, say so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_on_a_mis_made_table_writes_nothing() {
    let event = plain_event().to_str().expect("UTF-8 path").to_owned();
    let mut env = aws_env(&dynamodb_local());
    env.push((
        "SQS_CLAIM_DYNAMODB_PARTITION_KEY".into(),
        "pk=CLAIM#{key}".into(),
    ));
    let sort_key = (
        "SQS_CLAIM_DYNAMODB_SORT_KEY".to_owned(),
        "sk=CLAIM".to_owned(),
    );
    // (what, the layout `init` makes the tables with, the layout `invoke` is configured with)
    let cases = [
        ("a sort key the table lacks", None, Some(sort_key.clone())),
        (
            "no sort key, the table has one",
            Some(sort_key.clone()),
            None,
        ),
    ];
    for (what, made, configured) in cases {
        let store = format!("dynamodb:startup-invoke-{}", uuid::Uuid::new_v4().simple());
        let with = |layout: &Option<(String, String)>| {
            let mut env = env.clone();
            env.extend(layout.clone());
            env
        };
        let run = |args: Vec<String>, env: Env| async move {
            tokio::task::spawn_blocking(move || cli(&args, &env))
                .await
                .expect("thread")
        };
        let init = run(
            vec!["init".into(), "--store".into(), store.clone()],
            with(&made),
        )
        .await;
        assert_eq!(init.code, Some(0), "{what}: payments init: {}", init.stderr);
        let invoke = |layout| {
            run(
                vec![
                    "invoke".into(),
                    event.clone(),
                    "--store".into(),
                    store.clone(),
                ],
                with(layout),
            )
        };
        let refused = invoke(&configured).await;
        assert_one_error_line(&refused, what);
        assert!(
            refused.stderr.contains("key schema"),
            "{what}: the check's error: {}",
            refused.stderr
        );
        let balances = run(
            vec!["balances".into(), "--store".into(), store.clone()],
            with(&made),
        )
        .await;
        assert!(
            balances.code == Some(0) && balances.stderr.contains("no accounts yet"),
            "{what}: a credit was written: {}",
            balances.stderr
        );
        // Not one claim either: on the layout the tables have, every message is new.
        let right = invoke(&made).await;
        assert_eq!(right.code, Some(0), "{what}: {}", right.stderr);
        assert!(
            right
                .stderr
                .contains("4 messages: 4 processed, 0 duplicate"),
            "{what}: a claim was written by the refused run: {}",
            right.stderr
        );
    }
}

/// An accounts table that does not exist (a typo in `SQS_CLAIM_ACCOUNTS_TABLE`), the claims
/// table right: `payments invoke` fails with the check's one error line, credits nothing, and
/// leaves no claim in progress (the batch it ran beside the check released what it claimed):
/// the next run, on the right table, processes every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_with_its_accounts_table_missing_leaves_no_claim_in_progress() {
    let event = plain_event().to_str().expect("UTF-8 path").to_owned();
    let env = aws_env(&dynamodb_local());
    let store = format!(
        "dynamodb:startup-accounts-{}",
        uuid::Uuid::new_v4().simple()
    );
    let run = |args: Vec<&str>, env: Env| {
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            tokio::task::spawn_blocking(move || cli(&args, &env))
                .await
                .expect("thread")
        }
    };
    let init = run(vec!["init", "--store", &store], env.clone()).await;
    assert_eq!(init.code, Some(0), "payments init: {}", init.stderr);
    let mut typo = env.clone();
    typo.push((
        "SQS_CLAIM_ACCOUNTS_TABLE".into(),
        "startup-accounts-nowhere".into(),
    ));
    let refused = run(vec!["invoke", &event, "--store", &store], typo).await;
    assert_one_error_line(&refused, "a missing accounts table");
    assert!(
        refused.stderr.contains("startup-accounts-nowhere")
            && refused.stderr.contains("does not exist"),
        "the check's error names the missing table: {}",
        refused.stderr
    );
    let right = run(vec!["invoke", &event, "--store", &store], env.clone()).await;
    assert_eq!(right.code, Some(0), "{}", right.stderr);
    assert!(
        right
            .stderr
            .contains("4 messages: 4 processed, 0 duplicate"),
        "a claim of the refused run was left in progress: {}",
        right.stderr
    );
}
