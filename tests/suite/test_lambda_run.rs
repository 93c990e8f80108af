//! `sqs_claim::lambda::run`: a user's own consumer, run on an event file and under Lambda.
//!
//! The subject is `examples/local_event.rs`, a user's handler whose `main` is
//! `sqs_claim::lambda::run(processor)`, run as a user runs it: as a process, with
//! `--event FILE`, and under a fake Lambda Runtime API (`sqs_claim_testkit::runtime`) with
//! and without `AWS_LAMBDA_MAX_CONCURRENCY`. The file-reading and reporting functions it rests
//! on are also called in-process, where their errors are easier to check one by one.
//!
//! Getting the example's binary: Cargo tells integration tests where the package's `[[bin]]`s
//! are (`CARGO_BIN_EXE_*`) but not its examples, and `cargo test --test suite test_lambda_run::` does not
//! build them. So [`example`] runs `cargo build --example local_event` once, with the cargo that
//! runs this test, the same target directory, profile and package features: an example already
//! built by `cargo test` is fresh and nothing recompiles, and a stale one is rebuilt rather than
//! tested. (`cargo run --example` per test would re-check the build each time; re-running the
//! test binary as the "user's binary" would not run the example's own `main`.)

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqs_claim::{ErrorKind, MemoryStore, Message, Processor};
use sqs_claim_testkit::runtime::{FakeRuntime, Posted};

/// The message of `events/negative-amount.json` the example refuses (a negative amount).
const NEGATIVE: &str = "ce63a357-3d45-4ca8-935f-295d067c3cd9";

/// The longest any one step may take: a build, a run, an invocation answered.
const WAIT: Duration = Duration::from_secs(300);

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("events")
}

/// The example's binary, built (or found fresh) once per test process.
fn example() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        // This test runs from <target>/<profile>/deps/; the example lands in
        // <target>/<profile>/examples/.
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable in <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("target dir");
        let mut features = Vec::new();
        for (on, name) in [
            (cfg!(feature = "dynamodb"), "dynamodb"),
            (cfg!(feature = "sqs"), "sqs"),
            (cfg!(feature = "sqlite"), "sqlite"),
            (cfg!(feature = "redis"), "redis"),
            (cfg!(feature = "postgres"), "postgres"),
        ] {
            if on {
                features.push(name);
            }
        }
        let mut build = Command::new(env!("CARGO"));
        build
            .args([
                "build",
                "--quiet",
                "--example",
                "local_event",
                "-p",
                "sqs-claim",
            ])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .args(["--no-default-features", "--features", &features.join(",")])
            .env("CARGO_TARGET_DIR", target_dir);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build
            .status()
            .expect("run cargo build --example local_event");
        assert!(status.success(), "cargo build --example local_event failed");
        let binary = profile_dir.join("examples").join("local_event");
        assert!(binary.exists(), "{} was not built", binary.display());
        binary
    })
}

/// Runs the example outside Lambda with `args`, in a clean environment.
fn run_example(args: &[&str]) -> Output {
    Command::new(example())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run the example")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_example_processes_an_event_file_and_prints_the_report() {
    let event = events_dir().join("negative-amount.json");
    let out = run_example(&["--event", event.to_str().unwrap()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let response: Value = serde_json::from_str(&stdout).expect("stdout is the batch response");
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": NEGATIVE}]})
    );
    assert!(
        stderr.contains(
            "3 messages: 2 processed, 0 duplicate, 0 held elsewhere, 1 failed, 0 not started\n"
        ),
        "{stderr}"
    );
    let retried = stderr
        .lines()
        .find(|l| l.contains(NEGATIVE))
        .unwrap_or_else(|| panic!("no line for the failed message: {stderr}"));
    assert!(
        retried.contains("failed")
            && retried.contains("handler_error: order ord-4002 has a negative amount"),
        "{retried}"
    );
    // Bodies never reach the output: the refused body's amount is not quoted.
    assert!(
        !stdout.contains("-500") && !stderr.contains("-500"),
        "{stderr}"
    );

    // --report json: every message's outcome, as BatchReport::to_json shapes it.
    let out = run_example(&["--event", event.to_str().unwrap(), "--report", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(report["response"], response);
    assert_eq!(report["counts"]["processed"], 2);
    assert_eq!(report["outcomes"].as_array().map(Vec::len), Some(3));
    assert_eq!(report["outcomes"][1]["outcome"], "failed");
}

#[test]
fn the_example_refuses_bad_input_with_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let not_json = dir.path().join("not-json.json");
    std::fs::write(&not_json, "{\"Records\": [").unwrap();
    let missing = dir.path().join("missing.json");
    let no_id = dir.path().join("no-id.json");
    std::fs::write(
        &no_id,
        r#"{"Records": [{"body": "{}", "eventSource": "aws:sqs"}]}"#,
    )
    .unwrap();
    for (args, code, says) in [
        (
            vec!["--event".to_owned(), missing.display().to_string()],
            1,
            "cannot read event file",
        ),
        (
            vec!["--event".to_owned(), not_json.display().to_string()],
            1,
            "is not JSON",
        ),
        (
            vec!["--event".to_owned(), no_id.display().to_string()],
            1,
            "has no messageId",
        ),
        // Started outside Lambda without an event: say how to run it.
        (vec![], 2, "run with --event FILE"),
        (
            vec![
                "--timeout".into(),
                "soon".into(),
                "--event".into(),
                "x".into(),
            ],
            2,
            "--timeout",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_example(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: printed {}",
            text(&out.stdout)
        );
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: not one line: {stderr}");
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(says),
            "{args:?}: {stderr}"
        );
    }
}

/// The library's half of the example, in-process: an event file through a processor, and each
/// kind of bad file refused with `InvalidEvent` and no content quoted.
#[tokio::test]
async fn run_event_file_reports_and_refuses_bad_files() {
    let handler = tower::service_fn(|msg: Message| async move {
        let v: Value = msg.json()?;
        if v["amount_cents"].as_i64().is_some_and(|a| a < 0) {
            return Err("negative".into());
        }
        Ok::<(), sqs_claim::BoxError>(())
    });
    let processor = Processor::builder(MemoryStore::new(), handler)
        .namespace("test")
        .build();
    let event = events_dir().join("negative-amount.json");
    let report = sqs_claim::lambda::run_event_file(&processor, &event, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(report.counts().processed, 2);
    assert_eq!(report.counts().failed, 1);
    let summary = sqs_claim::lambda::summary(&report);
    assert!(
        summary.starts_with("3 messages: 2 processed, 0 duplicate"),
        "{summary}"
    );
    // The same file again on the same store: every success is now a duplicate.
    let again = sqs_claim::lambda::run_event_file(&processor, &event, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(again.counts().duplicate, 2);

    let dir = tempfile::tempdir().unwrap();
    let secret = "4242424242";
    let cases = [
        (
            "s3.json",
            json!({"Records": [{"eventSource": "aws:s3", "messageId": "a"}]}).to_string(),
            "comes from \"aws:s3\"",
        ),
        (
            "no-records.json",
            json!({"records": []}).to_string(),
            "no \"Records\" array",
        ),
        (
            "not-object.json",
            json!({"Records": [1]}).to_string(),
            "record #0 is not an object",
        ),
        (
            "wrong-type.json",
            // A body that is not a string: the error gives its place, never its value (serde's
            // own message would quote the number).
            format!("{{\"Records\": [{{\"messageId\": \"a\",\n \"body\": {secret}}}]}}"),
            "line 2 column",
        ),
        (
            "empty-id.json",
            json!({"Records": [{"messageId": ""}]}).to_string(),
            "has no messageId",
        ),
    ];
    for (name, content, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        let err = sqs_claim::lambda::run_event_file(&processor, &path, Duration::ZERO)
            .await
            .expect_err(name);
        assert_eq!(err.kind(), ErrorKind::InvalidEvent, "{name}: {err}");
        let shown = err.to_string();
        assert!(shown.contains(says), "{name}: {shown}");
        assert!(
            !shown.contains(secret),
            "{name} quotes the content: {shown}"
        );
    }
}

/// The example started as Lambda starts it: the Runtime API address and the function's
/// environment. Killed when dropped.
struct Function {
    child: Child,
}

impl Function {
    fn start(runtime_api: &str, extra: &[(&str, &str)]) -> Function {
        let child = Command::new(example())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
            .env("AWS_LAMBDA_FUNCTION_NAME", "local_event")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .envs(extra.iter().copied())
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

/// Waits for the function's next post; fails if it exits or takes longer than [`WAIT`].
async fn next_post(rt: &mut FakeRuntime, function: &mut Function) -> Posted {
    let started = Instant::now();
    loop {
        if let Some(posted) = rt.next_post(Duration::from_millis(200)).await {
            return posted;
        }
        function.assert_running();
        assert!(started.elapsed() < WAIT, "no answer within {WAIT:?}");
    }
}

fn event(name: &str) -> String {
    std::fs::read_to_string(events_dir().join(name)).unwrap()
}

/// The response each sample event gets from a fresh store (`events/expected.json`'s
/// processed-or-not, as the example refuses only negative amounts).
fn assert_response(posted: Posted, request_id: &str, failures: &[&str]) {
    let Posted::Response {
        request_id: id,
        body,
    } = posted
    else {
        panic!("not a response: {posted:?}");
    };
    assert_eq!(id, request_id);
    let body: Value = serde_json::from_str(&body).unwrap();
    let expected: Vec<Value> = failures
        .iter()
        .map(|f| json!({"itemIdentifier": f}))
        .collect();
    assert_eq!(body, json!({"batchItemFailures": expected}));
}

#[tokio::test]
async fn under_lambda_it_serves_invocations_one_at_a_time() {
    let mut rt = FakeRuntime::start().await.unwrap();
    let mut function = Function::start(&rt.address(), &[]);
    let id = rt.queue(event("negative-amount.json"), Duration::from_secs(30));
    assert_response(next_post(&mut rt, &mut function).await, &id, &[NEGATIVE]);
    // The same batch again: the successes are duplicates, the failure is retried and fails.
    let id = rt.queue(event("negative-amount.json"), Duration::from_secs(30));
    assert_response(next_post(&mut rt, &mut function).await, &id, &[NEGATIVE]);
    // Sequential: never more than one `next` waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rt.polling(), 1);
}

#[tokio::test]
async fn with_max_concurrency_it_runs_invocations_concurrently() {
    let mut rt = FakeRuntime::start().await.unwrap();
    let mut function = Function::start(&rt.address(), &[("AWS_LAMBDA_MAX_CONCURRENCY", "2")]);
    // `run_concurrent` starts one polling worker per slot: two `next` requests wait at once,
    // which `lambda_runtime::run` never does.
    let started = Instant::now();
    while rt.polling() < 2 {
        function.assert_running();
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "only {} invocation(s) polled at once: not run_concurrent",
            rt.polling()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Both waiting workers take one each: two invocations in flight together.
    let a = rt.queue(event("negative-amount.json"), Duration::from_secs(30));
    let b = rt.queue(event("plain.json"), Duration::from_secs(30));
    let mut answered = Vec::new();
    for _ in 0..2 {
        match next_post(&mut rt, &mut function).await {
            Posted::Response { request_id, body } => answered.push((request_id, body)),
            other => panic!("not a response: {other:?}"),
        }
    }
    answered.sort_by_key(|(id, _)| if *id == a { 0 } else { 1 });
    assert_eq!(answered[0].0, a);
    assert_eq!(answered[1].0, b);
    let failures =
        |body: &str| serde_json::from_str::<Value>(body).unwrap()["batchItemFailures"].clone();
    assert_eq!(
        failures(&answered[0].1),
        json!([{"itemIdentifier": NEGATIVE}])
    );
    assert_eq!(failures(&answered[1].1), json!([]));
}
