//! `sqs-claim doctor` against real configuration: queues on ministack (SQS, and its Lambda
//! API for functions and event source mappings), claims tables on DynamoDB Local.
//!
//! * a good configuration (a redrive policy of 5 receives, visibility 180 s for a 30 s
//!   function, a table from `sqs-claim init`) is all `ok` and exits 0, whether the function's
//!   settings come from flags, from the Lambda API or from `template.yaml`;
//! * each deliberately bad configuration fails exactly the rule it breaks, and exits 1 with
//!   one `error:` line naming it;
//! * a warning fails only with `--strict`; unknown values are `skip` lines; bad input is one
//!   `error:` line (exit 1), a usage mistake exit 2.
//!
//! The servers: `SQS_CLAIM_SQS_ENDPOINT` (default `http://127.0.0.1:4566`) and
//! `SQS_CLAIM_DYNAMODB_ENDPOINT` (default `http://127.0.0.1:8000`); `scripts/standins.sh up`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TimeToLiveSpecification,
};
use serde_json::Value;
use sqs_claim::aws_sdk_sqs::types::QueueAttributeName;

const BIN: &str = env!("CARGO_BIN_EXE_sqs-claim");

/// Every rule, in the report's order.
const RULES: [&str; 14] = [
    "visibility-timeout",
    "redrive-policy",
    "report-batch-item-failures",
    "table-ttl",
    "claim-ttl-window",
    "claim-ttl-retention",
    "key-schema",
    "fifo-settings",
    "batching-window",
    "lease-window",
    "backoff-retention",
    "backoff-receives",
    "large-message-key",
    "large-message-buckets",
];

fn endpoint(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

fn sqs_endpoint() -> String {
    endpoint("SQS_CLAIM_SQS_ENDPOINT", "http://127.0.0.1:4566")
}

fn dynamodb_endpoint() -> String {
    endpoint("SQS_CLAIM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000")
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The AWS environment the CLI reads: ministack for SQS and Lambda, DynamoDB Local.
fn aws_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL_SQS", sqs_endpoint()),
        ("AWS_ENDPOINT_URL_LAMBDA", sqs_endpoint()),
        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_endpoint()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Each rule's status, from the text report; every rule present once, in order.
    fn statuses(&self) -> Vec<(String, String)> {
        let lines: Vec<(String, String)> = self
            .stdout
            .lines()
            .map(|line| {
                let (status, rest) = line
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("not a report line: {line:?}"));
                let rule = rest.trim_start().split(':').next().unwrap_or_default();
                (rule.to_owned(), status.to_owned())
            })
            .collect();
        let rules: Vec<&str> = lines.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(rules, RULES, "{}", self.stdout);
        lines
    }

    fn with_status(&self, status: &str) -> Vec<String> {
        self.statuses()
            .into_iter()
            .filter(|(_, s)| s == status)
            .map(|(r, _)| r)
            .collect()
    }

    /// The SQS rules (the first 13 lines) with `status`, whatever follows them.
    fn with_status_in_sqs(&self, status: &str) -> Vec<String> {
        self.stdout
            .lines()
            .take(RULES.len())
            .filter(|l| l.starts_with(&format!("{status} ")))
            .map(str::to_owned)
            .collect()
    }

    fn assert_all_ok(&self, what: &str) {
        assert_eq!(
            self.code,
            Some(0),
            "{what}:\n{}\n{}",
            self.stdout,
            self.stderr
        );
        for (rule, status) in self.statuses() {
            assert_eq!(status, "ok", "{what}: {rule}\n{}", self.stdout);
        }
        assert!(!self.stderr.contains("error"), "{what}: {}", self.stderr);
    }

    /// Exactly `rule` fails: exit 1, its line says `fail` with a fix, the error line names it.
    fn assert_fails_only(&self, rule: &str, what: &str) {
        assert_eq!(
            self.code,
            Some(1),
            "{what}:\n{}\n{}",
            self.stdout,
            self.stderr
        );
        assert_eq!(
            self.with_status("fail"),
            vec![rule.to_owned()],
            "{what}:\n{}",
            self.stdout
        );
        let line = self
            .stdout
            .lines()
            .find(|l| l.starts_with("fail "))
            .unwrap_or_default();
        assert!(line.contains("; fix: "), "{what}: no fix in {line:?}");
        let error = self.stderr.trim_end().lines().last().unwrap_or_default();
        assert_eq!(
            error,
            format!("error: doctor: 1 rule failed: {rule}"),
            "{what}"
        );
    }

    fn assert_one_error_line(&self, code: i32, what: &str) -> String {
        assert_eq!(
            self.code,
            Some(code),
            "{what}:\n{}\n{}",
            self.stdout,
            self.stderr
        );
        let lines: Vec<&str> = self.stderr.trim_end().lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("error: "),
            "{what}: one error line expected: {}",
            self.stderr
        );
        assert!(!self.stderr.contains("panicked"), "{what}");
        lines[0].to_owned()
    }
}

/// Runs `sqs-claim doctor ARGS` with a clean sqs-claim environment plus the stand-ins' and `env`.
fn doctor(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.arg("doctor")
        .args(args)
        .current_dir(std::env::temp_dir());
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("SQS_CLAIM_") || n.starts_with("AWS_") || n == "RUST_LOG" {
            cmd.env_remove(&name);
        }
    }
    cmd.envs(aws_env());
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run sqs-claim doctor");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A build of another checkout (or with other features) in the same target dir replaces
    // the binary: say so rather than fail mysteriously.
    assert!(
        !stderr.contains("unrecognized subcommand 'doctor'"),
        "{BIN} is a build without `doctor` (another build replaced it): `touch \
         payments/src/bin/sqs-claim.rs` and run the tests again"
    );
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn sqs() -> sqs_claim::aws_sdk_sqs::Client {
    use sqs_claim::aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    let config = sqs_claim::aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static-test"))
        .endpoint_url(sqs_endpoint())
        .build();
    sqs_claim::aws_sdk_sqs::Client::from_conf(config)
}

fn lambda() -> aws_sdk_lambda::Client {
    use aws_sdk_lambda::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_lambda::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static-test"))
        .endpoint_url(sqs_endpoint())
        .build();
    aws_sdk_lambda::Client::from_conf(config)
}

fn dynamodb() -> aws_sdk_dynamodb::Client {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static-test"))
        .endpoint_url(dynamodb_endpoint())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// Bounds a stand-in call, so a server that is down fails the test with a hint, not a hang.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(15), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in 15 s: run scripts/standins.sh up"))
}

/// A queue as the test asks for it; the URL and ARN come back.
struct Queue {
    url: String,
    arn: String,
}

/// A dead-letter queue and an input queue named `prefix-...` with `attrs`, plus a redrive
/// policy of `max_receive_count` receives unless it is `None`.
async fn queue(
    name: &str,
    attrs: &[(QueueAttributeName, &str)],
    max_receive_count: Option<u32>,
) -> Queue {
    let client = sqs();
    let mut all: HashMap<QueueAttributeName, String> = attrs
        .iter()
        .map(|(k, v)| (k.clone(), (*v).to_owned()))
        .collect();
    if let Some(count) = max_receive_count {
        let dlq = create_queue(&client, &unique("doctor-dlq"), HashMap::new()).await;
        let policy = serde_json::json!({
            "deadLetterTargetArn": dlq.arn,
            "maxReceiveCount": count.to_string(),
        });
        all.insert(QueueAttributeName::RedrivePolicy, policy.to_string());
    }
    create_queue(&client, name, all).await
}

async fn create_queue(
    client: &sqs_claim::aws_sdk_sqs::Client,
    name: &str,
    attrs: HashMap<QueueAttributeName, String>,
) -> Queue {
    let created = within(
        "SQS CreateQueue",
        client
            .create_queue()
            .queue_name(name)
            .set_attributes(Some(attrs))
            .send(),
    )
    .await
    .unwrap_or_else(|e| panic!("CreateQueue {name}: {e:?}"));
    let url = created.queue_url().expect("a queue URL").to_owned();
    let attrs = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("GetQueueAttributes");
    let arn = attrs
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .expect("a queue ARN")
        .clone();
    Queue { url, arn }
}

/// The good queue: visibility 180 s (6 x a 30 s function), 5 receives, one day's retention
/// (the claim TTL's default, so the retention rule is `ok` rather than `warn`).
async fn good_queue() -> Queue {
    queue(
        &unique("doctor-good"),
        &[
            (QueueAttributeName::VisibilityTimeout, "180"),
            (QueueAttributeName::MessageRetentionPeriod, "86400"),
        ],
        Some(5),
    )
    .await
}

/// A claims table made by `sqs-claim init`, as the deployment guide says.
fn initialized_table() -> String {
    let table = unique("doctor-claims");
    let mut cmd = Command::new(BIN);
    cmd.args(["init", "--table", &table])
        .current_dir(std::env::temp_dir())
        .env_clear()
        .envs(aws_env());
    let out = cmd.output().expect("run sqs-claim init");
    assert!(
        out.status.success(),
        "sqs-claim init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    table
}

/// A table with a HASH key `key` of type S, and TTL on `expiration` if `ttl`.
async fn table_by_hand(key: &str, ttl: bool) -> String {
    let client = dynamodb();
    let table = unique("doctor-hand");
    within(
        "DynamoDB CreateTable",
        client
            .create_table()
            .table_name(&table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(key)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .expect("attribute"),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(key)
                    .key_type(KeyType::Hash)
                    .build()
                    .expect("key"),
            )
            .send(),
    )
    .await
    .expect("CreateTable");
    if ttl {
        client
            .update_time_to_live()
            .table_name(&table)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .enabled(true)
                    .attribute_name("expiration")
                    .build()
                    .expect("ttl"),
            )
            .send()
            .await
            .expect("UpdateTimeToLive");
    }
    table
}

/// The flags that give a good function: 30 s, ReportBatchItemFailures, 10 messages a batch.
const GOOD_FUNCTION: [&str; 6] = [
    "--function-timeout",
    "30",
    "--report-batch-item-failures",
    "yes",
    "--batch-size",
    "10",
];

fn args<'a>(queue: &'a Queue, table: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--queue-url", queue.url.as_str(), "--table", table];
    args.extend_from_slice(extra);
    args
}

#[tokio::test]
async fn a_good_configuration_is_all_ok() {
    let (queue, table) = (good_queue().await, initialized_table());
    let run = doctor(&args(&queue, &table, &GOOD_FUNCTION), &[]);
    run.assert_all_ok("good configuration, flags");
    assert!(
        run.stderr.contains("14 ok, 0 warn, 0 fail, 0 skip"),
        "{}",
        run.stderr
    );

    // A lease held past the deadline that outlasts the redelivery window: warned, with the fix.
    let run = doctor(
        &args(&queue, &table, &GOOD_FUNCTION),
        &[("SQS_CLAIM_LEASE_AT_LEAST_SECS", "86400")],
    );
    assert_eq!(
        run.with_status("warn"),
        vec!["lease-window"],
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("goes to the dead-letter queue"),
        "{}",
        run.stdout
    );

    // The machine report: the same verdicts, each with its rule, detail and no fix.
    let mut json_args = args(&queue, &table, &GOOD_FUNCTION);
    json_args.extend(["--report", "json"]);
    let run = doctor(&json_args, &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).expect("a JSON report");
    let items = report.as_array().expect("an array");
    let rules: Vec<&str> = items.iter().filter_map(|i| i["rule"].as_str()).collect();
    assert_eq!(rules, RULES);
    for item in items {
        assert_eq!(item["status"], "ok", "{item}");
        assert!(item["detail"].as_str().is_some_and(|d| !d.is_empty()));
        assert!(item["fix"].is_null(), "{item}");
    }
}

#[tokio::test]
async fn the_template_gives_the_function_s_settings() {
    let (queue, table) = (good_queue().await, initialized_table());
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml");
    let template = template.to_str().expect("a path");
    let run = doctor(&args(&queue, &table, &["--template", template]), &[]);
    run.assert_all_ok("good configuration, template.yaml");
    // Where each value came from is on its line.
    assert!(
        run.stdout
            .contains("!Ref FunctionTimeout, the parameter's Default"),
        "{}",
        run.stdout
    );
    // A flag beats the template.
    let run = doctor(
        &args(
            &queue,
            &table,
            &["--template", template, "--function-timeout", "60"],
        ),
        &[],
    );
    run.assert_fails_only(
        "visibility-timeout",
        "--function-timeout 60 over the template",
    );

    // A template whose function lacks ReportBatchItemFailures.
    let dir = tempfile::tempdir().expect("a temp dir");
    let text = std::fs::read_to_string(template).expect("read template.yaml");
    let without = text.replace("- ReportBatchItemFailures", "[]");
    assert_ne!(without, text, "the template's FunctionResponseTypes moved");
    let bad = dir.path().join("template.yaml");
    std::fs::write(&bad, without).expect("write");
    let run = doctor(
        &args(&queue, &table, &["--template", bad.to_str().expect("path")]),
        &[],
    );
    run.assert_fails_only("report-batch-item-failures", "template without RBIF");
}

/// A zip holding one empty file `bootstrap`: what CreateFunction needs, nothing to run.
fn empty_zip() -> Vec<u8> {
    let name = b"bootstrap";
    let n = name.len() as u16;
    let mut zip = Vec::new();
    let u16le = |v: u16| v.to_le_bytes();
    let u32le = |v: u32| v.to_le_bytes();
    // Local file header: stored, no data, CRC 0.
    zip.extend(u32le(0x0403_4b50));
    zip.extend(u16le(20));
    zip.extend([0; 4 + 2 + 2 + 4 + 4 + 4]);
    zip.extend(u16le(n));
    zip.extend(u16le(0));
    zip.extend(name);
    let central = zip.len() as u32;
    zip.extend(u32le(0x0201_4b50));
    zip.extend(u16le(20));
    zip.extend(u16le(20));
    zip.extend([0; 2 + 2 + 2 + 2 + 4 + 4 + 4]);
    zip.extend(u16le(n));
    zip.extend([0; 2 + 2 + 2 + 2 + 4 + 4]);
    zip.extend(name);
    let central_len = zip.len() as u32 - central;
    zip.extend(u32le(0x0605_4b50));
    zip.extend([0; 4]);
    zip.extend(u16le(1));
    zip.extend(u16le(1));
    zip.extend(u32le(central_len));
    zip.extend(u32le(central));
    zip.extend(u16le(0));
    zip
}

/// A function of `timeout` seconds on ministack, with an SQS mapping from `queue` unless
/// `mapping` is `None` (else: whether it reports batch item failures, its batch size, window).
async fn function(
    timeout: i32,
    queue: &Queue,
    mapping: Option<(bool, i32, i32)>,
) -> (String, Option<String>) {
    use aws_sdk_lambda::primitives::Blob;
    use aws_sdk_lambda::types::{FunctionCode, FunctionResponseType, Runtime};
    let client = lambda();
    let name = unique("doctor-fn");
    within(
        "Lambda CreateFunction",
        client
            .create_function()
            .function_name(&name)
            .runtime(Runtime::Providedal2023)
            .handler("bootstrap")
            .role("arn:aws:iam::000000000000:role/doctor-test")
            .timeout(timeout)
            .code(
                FunctionCode::builder()
                    .zip_file(Blob::new(empty_zip()))
                    .build(),
            )
            .send(),
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "ministack's Lambda API did not create a function ({e:?}); is ministack running \
             with every service (SQS_CLAIM_MINISTACK_SERVICES unset)?"
        )
    });
    let Some((rbif, batch, window)) = mapping else {
        return (name, None);
    };
    let mut request = client
        .create_event_source_mapping()
        .function_name(&name)
        .event_source_arn(&queue.arn)
        .batch_size(batch)
        .maximum_batching_window_in_seconds(window);
    if rbif {
        request = request.function_response_types(FunctionResponseType::ReportBatchItemFailures);
    }
    let created = request.send().await.expect("CreateEventSourceMapping");
    (name, created.uuid().map(str::to_owned))
}

/// Removes what [`function`] made, so ministack does not keep polling the queue.
async fn remove_function(name: &str, mapping: Option<String>) {
    let client = lambda();
    if let Some(uuid) = mapping {
        let _ = client.delete_event_source_mapping().uuid(uuid).send().await;
    }
    let _ = client.delete_function().function_name(name).send().await;
}

#[tokio::test]
async fn the_lambda_api_is_read_where_the_endpoint_offers_it() {
    let (queue, table) = (good_queue().await, initialized_table());

    let (good, mapping) = function(30, &queue, Some((true, 10, 0))).await;
    let run = doctor(&args(&queue, &table, &["--function", &good]), &[]);
    remove_function(&good, mapping).await;
    run.assert_all_ok("good configuration, Lambda API");
    assert!(
        run.stdout.contains("(Lambda GetFunctionConfiguration)")
            && run.stdout.contains("(Lambda ListEventSourceMappings)"),
        "{}",
        run.stdout
    );

    // The mapping does not report batch item failures.
    let (name, mapping) = function(30, &queue, Some((false, 10, 0))).await;
    let run = doctor(&args(&queue, &table, &["--function", &name]), &[]);
    remove_function(&name, mapping).await;
    run.assert_fails_only("report-batch-item-failures", "a mapping without RBIF");

    // A large batch on a standard queue without a batching window (which ministack, unlike
    // AWS, accepts).
    let (name, mapping) = function(30, &queue, Some((true, 50, 0))).await;
    let run = doctor(&args(&queue, &table, &["--function", &name]), &[]);
    remove_function(&name, mapping).await;
    run.assert_fails_only("batching-window", "batch size 50 without a window");

    // The function does not consume this queue at all.
    let (name, _) = function(30, &queue, None).await;
    let run = doctor(&args(&queue, &table, &["--function", &name]), &[]);
    remove_function(&name, None).await;
    run.assert_fails_only("report-batch-item-failures", "no mapping");
    assert!(
        run.stdout.contains("has no SQS event source mapping"),
        "{}",
        run.stdout
    );
    // Mapping values unknown: those rules skip, saying how to give them.
    assert_eq!(
        run.with_status("skip"),
        vec!["batching-window"],
        "{}",
        run.stdout
    );

    // A function that does not exist is bad input.
    let run = doctor(
        &args(&queue, &table, &["--function", "no-such-function"]),
        &[],
    );
    let error = run.assert_one_error_line(1, "an unknown function");
    assert!(error.contains("no-such-function does not exist"), "{error}");
}

#[tokio::test]
async fn an_endpoint_without_a_lambda_api_gives_skip_lines() {
    let (queue, table) = (good_queue().await, initialized_table());
    // DynamoDB Local answers HTTP but offers no Lambda API.
    let run = doctor(
        &args(&queue, &table, &["--function", "consumer"]),
        &[("AWS_ENDPOINT_URL_LAMBDA", dynamodb_endpoint().as_str())],
    );
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.with_status("skip"),
        vec![
            "visibility-timeout",
            "report-batch-item-failures",
            "batching-window"
        ],
        "{}",
        run.stdout
    );
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("skip visibility-timeout"))
        .unwrap_or_default();
    assert!(
        line.contains("--function-timeout SECS")
            && line.contains("GetFunctionConfiguration failed"),
        "{line}"
    );
    // The flags fill in what the API could not say.
    let mut with_flags = args(&queue, &table, &["--function", "consumer"]);
    with_flags.extend(GOOD_FUNCTION);
    let run = doctor(
        &with_flags,
        &[("AWS_ENDPOINT_URL_LAMBDA", dynamodb_endpoint().as_str())],
    );
    run.assert_all_ok("flags where the API is missing");
}

#[tokio::test]
async fn each_bad_queue_fails_its_rule() {
    let table = initialized_table();
    let day = [(QueueAttributeName::MessageRetentionPeriod, "86400")];
    let vis = |secs: &'static str| {
        let mut attrs = day.to_vec();
        attrs.push((QueueAttributeName::VisibilityTimeout, secs));
        attrs
    };
    let cases: Vec<(&str, Queue, &str)> = vec![
        (
            "visibility 30 s for a 30 s function",
            queue(&unique("doctor-vis"), &vis("30"), Some(5)).await,
            "visibility-timeout",
        ),
        (
            "no redrive policy",
            queue(&unique("doctor-nodlq"), &vis("180"), None).await,
            "redrive-policy",
        ),
        (
            "maxReceiveCount 2",
            queue(&unique("doctor-mrc2"), &vis("180"), Some(2)).await,
            "redrive-policy",
        ),
        (
            "a .fifo name on a standard queue",
            queue(
                &format!("{}.fifo", unique("doctor-fifo")),
                &[
                    (QueueAttributeName::VisibilityTimeout, "180"),
                    (QueueAttributeName::MessageRetentionPeriod, "86400"),
                    (QueueAttributeName::FifoQueue, "false"),
                ],
                Some(5),
            )
            .await,
            "fifo-settings",
        ),
    ];
    for (what, queue, rule) in &cases {
        let run = doctor(&args(queue, &table, &GOOD_FUNCTION), &[]);
        run.assert_fails_only(rule, what);
    }

    // The claim TTL must outlive twice the redelivery window: 180 s x 5 = 900 s.
    let good = good_queue().await;
    let run = doctor(
        &args(&good, &table, &GOOD_FUNCTION),
        &[("SQS_CLAIM_TTL_SECS", "1799")],
    );
    // Shorter than the retention too: a warning beside the failure.
    assert_eq!(run.with_status("warn"), vec!["claim-ttl-retention"]);
    run.assert_fails_only("claim-ttl-window", "claim TTL 1799 s");
    let run = doctor(
        &args(&good, &table, &GOOD_FUNCTION),
        &[("SQS_CLAIM_TTL_SECS", "1800")],
    );
    assert_eq!(run.code, Some(0), "{}", run.stdout);
    assert!(run.with_status("fail").is_empty(), "{}", run.stdout);
}

#[tokio::test]
async fn each_bad_table_fails_its_rule() {
    let queue = good_queue().await;
    let no_ttl = table_by_hand("id", false).await;
    let run = doctor(&args(&queue, &no_ttl, &GOOD_FUNCTION), &[]);
    run.assert_fails_only("table-ttl", "a table without TTL");
    assert!(
        run.stdout.contains("sqs-claim init --store dynamodb:"),
        "{}",
        run.stdout
    );

    let wrong_key = table_by_hand("pk", true).await;
    let run = doctor(&args(&queue, &wrong_key, &GOOD_FUNCTION), &[]);
    run.assert_fails_only("key-schema", "a table keyed on pk");
    assert!(run.stdout.contains("pk (HASH, S)"), "{}", run.stdout);

    // A table that does not exist fails both table rules.
    let run = doctor(&args(&queue, "doctor-no-such-table", &GOOD_FUNCTION), &[]);
    assert_eq!(run.code, Some(1));
    assert_eq!(run.with_status("fail"), vec!["table-ttl", "key-schema"]);
}

/// The `key-schema` rule checks the table against the configured key layout
/// (`SQS_CLAIM_DYNAMODB_PARTITION_KEY`, `SQS_CLAIM_DYNAMODB_SORT_KEY`, or their flags): a
/// single-table table made by `init` with the layout is ok under it, and fails under the
/// default layout.
#[tokio::test]
async fn the_key_schema_rule_uses_the_configured_layout() {
    let queue = good_queue().await;
    let layout = [
        ("SQS_CLAIM_DYNAMODB_PARTITION_KEY", "pk=CLAIM#{key}"),
        ("SQS_CLAIM_DYNAMODB_SORT_KEY", "sk=CLAIM"),
    ];
    let table = unique("doctor-single");
    let out = Command::new(BIN)
        .args(["init", "--table", &table])
        .current_dir(std::env::temp_dir())
        .env_clear()
        .envs(aws_env())
        .envs(layout)
        .output()
        .expect("run sqs-claim init");
    assert!(
        out.status.success(),
        "sqs-claim init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = doctor(&args(&queue, &table, &GOOD_FUNCTION), &layout);
    run.assert_all_ok("a single table under its layout");
    assert!(
        run.stdout.contains("the HASH key pk and the RANGE key sk"),
        "{}",
        run.stdout
    );
    let flags = [
        &GOOD_FUNCTION[..],
        &[
            "--partition-key",
            "pk=CLAIM#{key}",
            "--sort-key",
            "sk=CLAIM",
        ],
    ]
    .concat();
    doctor(&args(&queue, &table, &flags), &[]).assert_all_ok("the layout as flags");
    let run = doctor(&args(&queue, &table, &GOOD_FUNCTION), &[]);
    run.assert_fails_only("key-schema", "a single table under the default layout");
    assert!(
        run.stdout.contains("a single HASH key id"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn a_backoff_that_disagrees_with_the_queue_is_reported() {
    let (queue, table) = (good_queue().await, initialized_table());
    // The default backoff reaches its 900 s cap after receive 6; the queue allows 5.
    let run = doctor(
        &args(&queue, &table, &GOOD_FUNCTION),
        &[("SQS_CLAIM_BACKOFF", "on")],
    );
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        run.with_status("warn"),
        vec!["backoff-receives"],
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("maxReceiveCount to at least 7"),
        "{}",
        run.stdout
    );
    let enough = queue_with(3600, Some(8)).await;
    let run = doctor(
        &args(&enough, &table, &GOOD_FUNCTION),
        &[
            ("SQS_CLAIM_BACKOFF", "on"),
            ("SQS_CLAIM_BACKOFF_CAP_SECS", "7200"),
            ("SQS_CLAIM_TTL_SECS", "86400"),
        ],
    );
    run.assert_fails_only("backoff-retention", "a cap beyond the retention");
}

/// A queue like the good one with `retention` seconds and `receives` before its DLQ.
async fn queue_with(retention: u32, receives: Option<u32>) -> Queue {
    let retention = retention.to_string();
    queue(
        &unique("doctor-backoff"),
        &[
            (QueueAttributeName::VisibilityTimeout, "180"),
            (
                QueueAttributeName::MessageRetentionPeriod,
                retention.as_str(),
            ),
        ],
        receives,
    )
    .await
}

#[tokio::test]
async fn a_warning_fails_only_with_strict() {
    let table = initialized_table();
    // Four days' retention (SQS's default) against the one-day claim TTL.
    let queue = queue(
        &unique("doctor-warn"),
        &[(QueueAttributeName::VisibilityTimeout, "180")],
        Some(5),
    )
    .await;
    let run = doctor(&args(&queue, &table, &GOOD_FUNCTION), &[]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.with_status("warn"), vec!["claim-ttl-retention"]);
    let mut strict = args(&queue, &table, &GOOD_FUNCTION);
    strict.push("--strict");
    let run = doctor(&strict, &[]);
    let error = run.stderr.trim_end().lines().last().unwrap_or_default();
    assert_eq!(run.code, Some(1));
    assert!(
        error.starts_with("error: doctor: 1 rule failed or warned (--strict): claim-ttl-retention"),
        "{error}"
    );
}

#[test]
fn unknown_values_skip_and_bad_input_is_one_error_line() {
    // Nothing given: every rule that reads the queue, the function or the table skips (the
    // default store is SQLite), and that is no failure; `large-message-key` and
    // `large-message-buckets` read the settings alone.
    let run = doctor(&[], &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.with_status("skip").len(), RULES.len() - 2);
    for line in run.stdout.lines().filter(|l| !l.contains("large-message-")) {
        assert!(line.contains("give --"), "{line}");
    }

    let missing = PathBuf::from("/nonexistent/template.yaml");
    let no_queue = format!("{}/000000000000/doctor-no-such-queue", sqs_endpoint());
    for (args, code, want) in [
        (
            vec!["--queue-url", no_queue.as_str()],
            1,
            "the queue does not exist",
        ),
        (
            vec!["--template", missing.to_str().expect("path")],
            1,
            "cannot read template",
        ),
        (vec!["--queue-url", "my-queue"], 1, "not a queue URL"),
        (vec!["--report-batch-item-failures", "maybe"], 2, "maybe"),
        (vec!["--batch-size", "0"], 2, "--batch-size"),
        (vec!["--function-timeout", "901"], 2, "--function-timeout"),
        (vec!["--report", "yaml"], 2, "yaml"),
    ] {
        let run = doctor(&args, &[]);
        let error = run.assert_one_error_line(code, &format!("{args:?}"));
        assert!(error.contains(want), "{args:?}: {error}");
    }

    let dir = tempfile::tempdir().expect("a temp dir");
    let not_sam = dir.path().join("template.yaml");
    std::fs::write(&not_sam, "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n").expect("write");
    let run = doctor(&["--template", not_sam.to_str().expect("path")], &[]);
    let error = run.assert_one_error_line(1, "a template without a function");
    assert!(
        error.contains("no AWS::Serverless::Function with an SQS event"),
        "{error}"
    );
}

/// The stream rules, in the report's order, after the 13 SQS rules, for each stream mapping.
const STREAM_RULES: [&str; 6] = [
    "stream-claim-ttl",
    "stream-report-batch-item-failures",
    "stream-bisect",
    "stream-on-failure",
    "stream-retry-limit",
    "stream-lease",
];

/// The stream rules' statuses of a report on a function with one stream mapping: the SQS
/// rules first, unchanged, then the six stream lines.
fn stream_statuses(run: &Run) -> Vec<(String, String)> {
    let lines: Vec<(String, String)> = run
        .stdout
        .lines()
        .map(|line| {
            let (status, rest) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("not a report line: {line:?}"));
            let rule = rest.trim_start().split(':').next().unwrap_or_default();
            (rule.to_owned(), status.to_owned())
        })
        .collect();
    let rules: Vec<&str> = lines.iter().map(|(r, _)| r.as_str()).collect();
    let want: Vec<&str> = RULES.iter().chain(STREAM_RULES.iter()).copied().collect();
    assert_eq!(rules, want, "{}", run.stdout);
    lines[RULES.len()..].to_vec()
}

/// A DynamoDB table with a stream on ministack (not DynamoDB Local: the mapping reads
/// ministack's streams): its stream ARN.
async fn ministack_stream() -> String {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    use aws_sdk_dynamodb::types::{StreamSpecification, StreamViewType};
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static-test"))
        .endpoint_url(sqs_endpoint())
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let table = unique("doctor-orders");
    let created = within(
        "ministack DynamoDB CreateTable",
        client
            .create_table()
            .table_name(&table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .expect("attribute"),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("id")
                    .key_type(KeyType::Hash)
                    .build()
                    .expect("key"),
            )
            .stream_specification(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(StreamViewType::NewAndOldImages)
                    .build()
                    .expect("stream"),
            )
            .send(),
    )
    .await
    .expect("CreateTable with a stream on ministack");
    created
        .table_description()
        .and_then(|d| d.latest_stream_arn())
        .expect("a stream ARN")
        .to_owned()
}

/// A function reading `stream` on ministack, its mapping as docs/streams.md advises it
/// (`advised`) or with nothing set.
async fn stream_function(stream: &str, advised: bool) -> (String, Option<String>) {
    use aws_sdk_lambda::types::{
        DestinationConfig, EventSourcePosition, FunctionResponseType, OnFailure,
    };
    let none = Queue {
        url: String::new(),
        arn: String::new(),
    };
    let (name, _) = function(30, &none, None).await;
    let mut request = lambda()
        .create_event_source_mapping()
        .function_name(&name)
        .event_source_arn(stream)
        .starting_position(EventSourcePosition::Latest)
        .batch_size(100);
    if advised {
        let failures =
            create_queue(&sqs(), &unique("doctor-stream-failures"), HashMap::new()).await;
        request = request
            .function_response_types(FunctionResponseType::ReportBatchItemFailures)
            .bisect_batch_on_function_error(true)
            .maximum_retry_attempts(10)
            .maximum_record_age_in_seconds(21_600)
            .destination_config(
                DestinationConfig::builder()
                    .on_failure(OnFailure::builder().destination(failures.arn).build())
                    .build(),
            );
    }
    let created = request
        .send()
        .await
        .expect("CreateEventSourceMapping from a DynamoDB stream");
    (name, created.uuid().map(str::to_owned))
}

#[tokio::test]
async fn a_stream_consumer_s_mapping_is_checked_by_the_stream_rules() {
    let (stream, table) = (ministack_stream().await, initialized_table());

    // As docs/streams.md advises, with a claim TTL of 48 h: every stream rule ok, and the SQS
    // rules that need a queue skip (the function has no SQS mapping: not a failure).
    let (name, mapping) = stream_function(&stream, true).await;
    let two_days = [("SQS_CLAIM_TTL_SECS", "172800")];
    let advised = doctor(&["--function", &name, "--table", &table], &two_days);
    let strict = doctor(
        &["--function", &name, "--table", &table, "--strict"],
        &[("SQS_CLAIM_TTL_SECS", "3600")],
    );
    remove_function(&name, mapping).await;
    assert_eq!(
        advised.code,
        Some(0),
        "{}\n{}",
        advised.stdout,
        advised.stderr
    );
    for (rule, status) in stream_statuses(&advised) {
        assert_eq!(status, "ok", "{rule}: {}", advised.stdout);
    }
    assert!(
        advised
            .stdout
            .contains("DynamoDB Streams keep records 24 h")
            && advised.stdout.contains("(Lambda ListEventSourceMappings)")
            && advised.stdout.contains("MaximumRecordAgeInSeconds 21600"),
        "{}",
        advised.stdout
    );
    assert!(
        advised.with_status_in_sqs("fail").is_empty(),
        "{}",
        advised.stdout
    );
    let line = advised
        .stdout
        .lines()
        .find(|l| l.contains(" report-batch-item-failures:"))
        .unwrap_or_default();
    assert!(
        line.starts_with("skip") && line.contains("only 1 stream mapping"),
        "{line}"
    );
    // A claim TTL of 1 h: shorter than the 6 h the mapping retries a record for.
    let ttl = stream_statuses(&strict);
    assert_eq!(
        ttl[0],
        ("stream-claim-ttl".into(), "fail".into()),
        "{}",
        strict.stdout
    );
    assert_eq!(strict.code, Some(1));
    assert!(
        strict.stderr.contains("stream-claim-ttl"),
        "{}",
        strict.stderr
    );

    // Nothing set on the mapping: Lambda's defaults, each a warning with its fix; exit 0
    // unless --strict.
    let (name, mapping) = stream_function(&stream, false).await;
    let bare = doctor(&["--function", &name, "--table", &table], &two_days);
    let bare_strict = doctor(
        &["--function", &name, "--table", &table, "--strict"],
        &two_days,
    );
    remove_function(&name, mapping).await;
    assert_eq!(bare.code, Some(0), "{}\n{}", bare.stdout, bare.stderr);
    let bare_lines = stream_statuses(&bare);
    let statuses: Vec<&str> = bare_lines.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(
        statuses,
        ["ok", "warn", "warn", "warn", "warn", "ok"],
        "{}",
        bare.stdout
    );
    assert_eq!(bare_strict.code, Some(1), "{}", bare_strict.stderr);
}
