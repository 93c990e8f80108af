//! The reference consumer with `SQS_CLAIM_FAILURE_QUEUE_URL` (ministack): a payment that fails
//! on its `SQS_CLAIM_MAX_RECEIVES`-th receive goes to the failure queue with its reason and is
//! not reported; one with receives left is reported as before; with the queue missing, the
//! message is reported for retry.

use std::time::Duration;

use serde_json::{Value, json};
use sqs_claim::aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};

// Only `run` is used here.
use crate::support;

use support::cli;

fn endpoint() -> String {
    std::env::var("SQS_CLAIM_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".to_owned())
}

fn record(id: &str, body: &str, receives: u32) -> Value {
    json!({
        "messageId": id,
        "receiptHandle": format!("rh-{id}"),
        "body": body,
        "attributes": {"ApproximateReceiveCount": receives.to_string(), "SentTimestamp": "1700000000000"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
        "awsRegion": "us-east-1"
    })
}

#[tokio::test]
async fn a_poison_payment_keeps_its_reason_in_the_failure_queue() {
    let endpoint = endpoint();
    let config = sqs_claim::aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static-test"))
        .endpoint_url(&endpoint)
        .build();
    let client = sqs_claim::aws_sdk_sqs::Client::from_conf(config);
    let name = format!(
        "cli-failures-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let created = tokio::time::timeout(
        Duration::from_secs(10),
        client.create_queue().queue_name(&name).send(),
    )
    .await;
    let url = match created {
        Ok(Ok(out)) => out.queue_url().expect("queue url").to_owned(),
        other => panic!("ministack (SQS) at {endpoint} did not create a queue ({other:?})"),
    };

    let ns = format!("fq-{}", uuid::Uuid::new_v4().simple());
    let event = json!({"Records": [
        record("m-poison", r#"{"order_id": "o-1", "account": "alice", "amount_cents": -5}"#, 5),
        record("m-retry", r#"{"order_id": "o-2", "account": "bob", "amount_cents": -5}"#, 2),
        record("m-ok", r#"{"order_id": "o-3", "account": "carol", "amount_cents": 5}"#, 5),
    ]});
    let path = std::env::temp_dir().join(format!("{ns}.json"));
    std::fs::write(&path, event.to_string()).expect("write the event");
    let path = path.to_str().expect("UTF-8 path").to_owned();
    let store = "memory:";
    let base = [
        ("SQS_CLAIM_NAMESPACE", ns.as_str()),
        ("AWS_ENDPOINT_URL_SQS", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("SQS_CLAIM_MAX_RECEIVES", "5"),
    ];
    // Blocking calls on the test's runtime: nothing else runs on it meanwhile.
    let invoke = |queue: String| {
        let mut env = base.to_vec();
        env.push(("SQS_CLAIM_FAILURE_QUEUE_URL", queue.as_str()));
        let (stdout, _) = cli::run(
            &["invoke", &path, "--store", store, "--report", "json"],
            &env,
        );
        serde_json::from_str::<Value>(&stdout).expect("JSON report")
    };

    let report = invoke(url.clone());
    assert_eq!(
        report["response"]["batchItemFailures"],
        json!([{"itemIdentifier": "m-retry"}]),
        "{report}"
    );
    assert_eq!(report["counts"]["dead_lettered"], json!(1), "{report}");
    assert_eq!(
        report["outcomes"][0]["outcome"],
        json!("dead_lettered"),
        "{report}"
    );

    let got = client
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_attribute_names("All")
        .send()
        .await
        .expect("ReceiveMessage");
    let messages = got.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    // The failure rides in one attribute, as JSON.
    let failure: Value = messages[0]
        .message_attributes()
        .and_then(|a| a.get("sqs-claim.failure"))
        .and_then(|v| v.string_value())
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    assert_eq!(
        failure["message_id"],
        "m-poison",
        "{failure}: {:?}",
        messages[0].message_attributes()
    );
    assert_eq!(failure["key"], json!(format!("{ns}#o-1")), "{failure}");
    assert_eq!(failure["receive_count"], 5, "{failure}");
    assert_eq!(failure["kind"], "handler_error", "{failure}");
    assert!(
        failure["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("negative"),
        "{failure}"
    );
    assert!(messages[0].body().unwrap_or_default().contains("\"o-1\""));

    // The queue missing: reported for retry, never dropped.
    let missing = format!("{endpoint}/000000000000/no-such-queue-{ns}");
    let report = invoke(missing);
    assert_eq!(
        report["response"]["batchItemFailures"],
        json!([{"itemIdentifier": "m-poison"}, {"itemIdentifier": "m-retry"}]),
        "{report}"
    );
}
