//! The whole loop: ministack runs the `consumer` binary as a `provided.al2023` function from a
//! zip, under an SQS event source mapping that reports batch item failures, on a queue with a
//! DLQ that is also the consumer's failure queue, with the consumer's backoff on.
//!
//! ministack passes its own environment to the bootstrap, so the test starts one of its own with
//! a clean environment, on a free loopback port, from the venv `scripts/standins.sh up` installs
//! (`$SQS_CLAIM_CACHE/ministack-venv`, default `~/.cache/sqs-claim`; `SQS_CLAIM_MINISTACK` names
//! another executable), and stops it at the end. `SQS_CLAIM_E2E_ENDPOINT` uses one already
//! running instead (started as `env -i PATH=/usr/bin:/bin BIND_HOST=127.0.0.1 GATEWAY_PORT=PORT
//! TMPDIR=DIR HOME=DIR ministack`). It fails, never skips, when ministack is missing.
//!
//! The consumer: SQLite store, backoff 1 s doubling to 2 s, the DLQ as failure queue from receive
//! 10 (the queue's `maxReceiveCount`), `bad_body` and `payload_mismatch` dead-lettered at once;
//! the queue's visibility timeout 60 s. Its "provider" is the output queue it publishes a notice
//! per credit to, before the credit commits: the queue does not exist for the first 3 s (a
//! provider down), so every payment fails and comes back under the backoff until it is there.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{Environment, FunctionCode, FunctionResponseType, Runtime};
use sqs_claim::aws_sdk_sqs;
use sqs_claim::aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

const CONSUMER: &str = env!("CARGO_BIN_EXE_consumer");
const PAYMENTS: &str = env!("CARGO_BIN_EXE_payments");

fn creds() -> aws_sdk_sqs::config::Credentials {
    aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "static-test")
}

fn sqs(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(creds())
        .endpoint_url(endpoint)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

fn lambda(endpoint: &str) -> aws_sdk_lambda::Client {
    let config = aws_sdk_lambda::Config::builder()
        .behavior_version(aws_sdk_lambda::config::BehaviorVersion::latest())
        .region(aws_sdk_lambda::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_lambda::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "static-test",
        ))
        .endpoint_url(endpoint)
        .build();
    aws_sdk_lambda::Client::from_conf(config)
}

async fn create_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    attrs: &[(QueueAttributeName, String)],
) -> (String, String) {
    let mut req = client.create_queue().queue_name(name);
    for (k, v) in attrs {
        req = req.attributes(k.clone(), v);
    }
    let url = req
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .expect("a URL")
        .to_owned();
    let arn = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .expect("an ARN")
        .clone();
    (url, arn)
}

/// The consumer binary, stripped, as `bootstrap` in a zip.
fn bootstrap_zip(dir: &Path) -> Vec<u8> {
    let bin = dir.join("bootstrap");
    std::fs::copy(CONSUMER, &bin).expect("copy the consumer");
    let stripped = Command::new("strip").arg(&bin).status();
    assert!(stripped.is_ok_and(|s| s.success()), "strip the consumer");
    let zip = dir.join("function.zip");
    let script = "import sys, zipfile\n\
        info = zipfile.ZipInfo('bootstrap')\n\
        info.external_attr = 0o755 << 16\n\
        info.compress_type = zipfile.ZIP_DEFLATED\n\
        with zipfile.ZipFile(sys.argv[2], 'w') as z:\n    z.writestr(info, open(sys.argv[1], 'rb').read())\n";
    let made = Command::new("python3")
        .args(["-c", script])
        .arg(&bin)
        .arg(&zip)
        .status();
    assert!(made.is_ok_and(|s| s.success()), "zip the consumer");
    std::fs::read(&zip).expect("read the zip")
}

/// Every message the queue holds now, with its attributes (receives until an empty answer).
async fn drain(client: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    let mut all = Vec::new();
    loop {
        let out = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage");
        if out.messages().is_empty() {
            return all;
        }
        all.extend(out.messages().iter().cloned());
    }
}

/// A ministack of the test's own, stopped (killed) when dropped.
struct OwnMinistack {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for OwnMinistack {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The endpoint to use, and the ministack started for it (`None` with `SQS_CLAIM_E2E_ENDPOINT`).
async fn ministack() -> (String, Option<OwnMinistack>) {
    if let Ok(endpoint) = std::env::var("SQS_CLAIM_E2E_ENDPOINT") {
        return (endpoint, None);
    }
    let exe = std::env::var("SQS_CLAIM_MINISTACK").unwrap_or_else(|_| {
        let cache = std::env::var("SQS_CLAIM_CACHE").unwrap_or_else(|_| {
            format!(
                "{}/.cache/sqs-claim",
                std::env::var("HOME").unwrap_or_default()
            )
        });
        format!("{cache}/ministack-venv/bin/ministack")
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("a temp dir");
    let child = Command::new(&exe)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path())
        .env("BIND_HOST", "127.0.0.1")
        .env("GATEWAY_PORT", port.to_string())
        .env("LOG_LEVEL", "WARNING")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start ministack {exe} ({e}): run scripts/standins.sh up once to install it"
            )
        });
    let own = OwnMinistack { child, _dir: dir };
    let endpoint = format!("http://127.0.0.1:{port}");
    let client = sqs(&endpoint);
    let started = Instant::now();
    while client.list_queues().send().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "ministack {exe} did not answer on {endpoint} within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (endpoint, Some(own))
}

fn balances(db: &Path) -> BTreeMap<String, i64> {
    let out = Command::new(PAYMENTS)
        .args(["balances", "--store"])
        .arg(format!("sqlite:{}", db.display()))
        .env_remove("SQS_CLAIM_STORE")
        .output()
        .expect("payments balances");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(a, c)| Some((a.to_owned(), c.parse().ok()?)))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_whole_loop_under_an_event_source_mapping() {
    let (endpoint, _own) = ministack().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = dir.path().join("ledger.db");
    let id = uuid::Uuid::new_v4().simple().to_string();
    let id = &id[..10];
    let sqs = sqs(&endpoint);
    let (dlq_url, dlq_arn) = create_queue(&sqs, &format!("e2e-dlq-{id}"), &[]).await;
    let redrive = serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "10"});
    // The provider, down until it is created below.
    let out_name = format!("e2e-out-{id}.fifo");
    let out_url = format!("{endpoint}/000000000000/{out_name}");
    let (url, arn) = create_queue(
        &sqs,
        &format!("e2e-in-{id}"),
        &[
            (QueueAttributeName::VisibilityTimeout, "60".into()),
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
        ],
    )
    .await;

    let env = [
        ("SQS_CLAIM_STORE", format!("sqlite:{}", db.display())),
        ("SQS_CLAIM_BACKOFF", "on".into()),
        ("SQS_CLAIM_BACKOFF_FIRST_SECS", "1".into()),
        ("SQS_CLAIM_BACKOFF_CAP_SECS", "2".into()),
        ("SQS_CLAIM_SOURCE_QUEUE_URL", url.clone()),
        ("SQS_CLAIM_FAILURE_QUEUE_URL", dlq_url.clone()),
        ("SQS_CLAIM_MAX_RECEIVES", "10".into()),
        ("SQS_CLAIM_OUTPUT_QUEUE_URL", out_url.clone()),
        (
            "SQS_CLAIM_DEAD_LETTER_AT_ONCE",
            "bad_body,payload_mismatch".into(),
        ),
        ("SQS_CLAIM_METRICS_NAMESPACE", "off".into()),
        ("AWS_ENDPOINT_URL_SQS", endpoint.clone()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("RUST_LOG", "info".into()),
    ];
    let mut vars = Environment::builder();
    for (k, v) in &env {
        vars = vars.variables(*k, v);
    }
    let lambda = lambda(&endpoint);
    let name = format!("e2e-consumer-{id}");
    lambda
        .create_function()
        .function_name(&name)
        .runtime(Runtime::Providedal2023)
        .handler("bootstrap")
        .role("arn:aws:iam::000000000000:role/e2e")
        .timeout(10)
        .environment(vars.build())
        .code(
            FunctionCode::builder()
                .zip_file(Blob::new(bootstrap_zip(dir.path())))
                .build(),
        )
        .send()
        .await
        .expect("CreateFunction");

    // Payments, each twice (a producer's resend), a poison body, and a message whose key is a
    // payment's with another amount (a payload mismatch, permanent).
    let pay = |order: &str, account: &str, cents: i64| {
        serde_json::json!({"order_id": order, "account": account, "amount_cents": cents})
            .to_string()
    };
    let mut bodies = Vec::new();
    for i in 0..5 {
        bodies.push(pay(&format!("o-{i}"), &format!("acct-{}", i % 2), 100));
        bodies.push(pay(&format!("o-{i}"), &format!("acct-{}", i % 2), 100));
    }
    bodies.push(r#"{"order_id": "o-poison", "amount_cents": "lots"}"#.to_owned());
    // No key: `missing_key`, not dead-lettered at once here, so it is retried with the backoff
    // (1-2 s) until the failure queue takes it on receive 10. At the queue's 60 s visibility
    // timeout the input queue could not be empty within the minute.
    bodies.push(r#"{"account": "acct-9", "amount_cents": 5}"#.to_owned());
    for body in &bodies {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .expect("SendMessage");
    }
    let started = Instant::now();
    let mapping = lambda
        .create_event_source_mapping()
        .function_name(&name)
        .event_source_arn(&arn)
        .batch_size(10)
        .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        .send()
        .await
        .expect("CreateEventSourceMapping");

    // The provider comes back after 3 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let out = sqs
        .create_queue()
        .queue_name(&out_name)
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect("CreateQueue (output)");
    assert_eq!(
        out.queue_url(),
        Some(out_url.as_str()),
        "ministack's queue URL form"
    );
    // Until the input queue is empty (in flight included), at most a minute.
    let mut left = u64::MAX;
    while started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let attrs = sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .expect("GetQueueAttributes");
        let n = |k: QueueAttributeName| -> u64 {
            attrs
                .attributes()
                .and_then(|a| a.get(&k))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        left = n(QueueAttributeName::ApproximateNumberOfMessages)
            + n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible);
        if left == 0 {
            break;
        }
    }
    if let Some(uuid) = mapping.uuid() {
        let _ = lambda.delete_event_source_mapping().uuid(uuid).send().await;
    }
    let _ = lambda.delete_function().function_name(&name).send().await;
    assert_eq!(left, 0, "the input queue emptied within a minute");

    let b = balances(&db);
    assert_eq!(b.get("acct-0"), Some(&300), "{b:?}");
    assert_eq!(b.get("acct-1"), Some(&200), "{b:?}");
    let dead = drain(&sqs, &dlq_url).await;
    // The failure destination's one attribute: the failure as JSON.
    let failure = |m: &aws_sdk_sqs::types::Message| {
        m.message_attributes()
            .and_then(|a| a.get("sqs-claim.failure"))
            .and_then(|v| v.string_value())
            .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
            .unwrap_or_default()
    };
    let mut got: Vec<(String, String, String)> = dead
        .iter()
        .map(|m| {
            let f = failure(m);
            (
                f["kind"].as_str().unwrap_or_default().to_owned(),
                f["error_kind"].as_str().unwrap_or_default().to_owned(),
                f["receive_count"].to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("handler_error".into(), "bad_body".into(), "1".into()),
            ("missing_key".into(), String::new(), "10".into()),
        ],
        "the poison message at once, the keyless one on its last receive, both with reasons"
    );
    // One notice per payment: each published once it could be, none for the failed attempts.
    let notices = drain(&sqs, &out_url).await;
    let mut orders: Vec<String> = notices
        .iter()
        .filter_map(|m| serde_json::from_str::<serde_json::Value>(m.body()?).ok())
        .filter_map(|v| v["order_id"].as_str().map(str::to_owned))
        .collect();
    orders.sort();
    assert_eq!(orders, ["o-0", "o-1", "o-2", "o-3", "o-4"], "{notices:?}");
    eprintln!("the loop emptied the queue in {:?}", started.elapsed());
}
