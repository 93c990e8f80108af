//! Messages reported for retry come back when their outcome says, not after the queue's
//! visibility timeout: with `ProcessorBuilder::redelivery`, each gets its own visibility
//! through `ChangeMessageVisibilityBatch` on ministack, with the receipt handle of a real
//! receive; and a change that fails loses nothing (the message is still reported).
//!
//! Needs ministack on `SQS_CLAIM_SQS_ENDPOINT` (default `http://127.0.0.1:4566`). Every test
//! makes its own queue, with a visibility timeout of 10 minutes: a message seen again within
//! the test came back because its visibility was changed.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::QueueAttributeName;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::Retry;
use sqs_claim::events::SqsEvent;
use sqs_claim::metrics::BatchMetrics;
use sqs_claim::{BoxError, MemoryStore, Message, Outcome, Processor, Redelivery};
use support::batch::failed_ids;

fn endpoint() -> String {
    std::env::var("SQS_CLAIM_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

fn client_at(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static-test"))
        .endpoint_url(endpoint)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// A new standard queue with a 10-minute visibility timeout: its URL and ARN.
async fn queue(client: &aws_sdk_sqs::Client) -> (String, String) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let created = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .create_queue()
            .queue_name(format!("redelivery-{}", &id[..12]))
            .attributes(QueueAttributeName::VisibilityTimeout, "600")
            .send(),
    )
    .await;
    let Ok(created) = created else {
        panic!("ministack at {} did not answer", endpoint());
    };
    let url = created
        .unwrap_or_else(|e| {
            panic!(
                "CreateQueue on ministack at {}: {}",
                endpoint(),
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            )
        })
        .queue_url()
        .expect("a queue url")
        .to_owned();
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
    (url, arn)
}

/// Sends `bodies`, then receives them all: the event Lambda would deliver (real receipt
/// handles and receive counts).
async fn delivered(client: &aws_sdk_sqs::Client, url: &str, arn: &str, bodies: &[&str]) -> Value {
    for body in bodies {
        client
            .send_message()
            .queue_url(url)
            .message_body(*body)
            .send()
            .await
            .expect("SendMessage");
    }
    let mut records = Vec::new();
    while records.len() < bodies.len() {
        let out = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage");
        assert!(!out.messages().is_empty(), "every message sent is received");
        for m in out.messages() {
            let attributes: serde_json::Map<String, Value> = m
                .attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
                        .collect()
                })
                .unwrap_or_default();
            records.push(json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": attributes,
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            }));
        }
    }
    json!({ "Records": records })
}

/// Bodies received within about a second: what came back.
async fn visible_now(client: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let out = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("ReceiveMessage");
    let mut bodies: Vec<String> = out
        .messages()
        .iter()
        .map(|m| m.body().unwrap_or_default().to_owned())
        .collect();
    bodies.sort();
    bodies
}

fn lambda_event(json: Value, deadline_ms: u64) -> LambdaEvent<SqsEvent> {
    let payload: SqsEvent = serde_json::from_value(json).expect("an SQS event");
    let mut context = Context::default();
    context.deadline = deadline_ms;
    LambdaEvent::new(payload, context)
}

fn deadline_in(after: Duration) -> u64 {
    let at = std::time::SystemTime::now() + after;
    u64::try_from(sqs_claim::store::epoch_millis(at)).expect("after the epoch")
}

/// A handler failing each body `now…` with a delay of 0, `later…` with a delay of an hour,
/// and `fail…` plainly.
async fn handler(msg: Message) -> Result<(), BoxError> {
    let body = msg.body();
    let why = sqs_claim::Error::new(sqs_claim::ErrorKind::Other, "the provider is busy");
    if body.starts_with("now") {
        Err(Retry::after(Duration::ZERO, why).into())
    } else if body.starts_with("later") {
        Err(Retry::after(Duration::from_secs(3600), why).into())
    } else if body.starts_with("fail") {
        Err(why.into())
    } else {
        Ok(())
    }
}

type Metrics = Arc<Mutex<Vec<BatchMetrics>>>;

fn processor(
    redelivery: Redelivery,
    metrics: &Metrics,
) -> Processor<
    MemoryStore,
    impl tower::Service<Message, Response = (), Error = BoxError, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static,
> {
    let sink = Arc::clone(metrics);
    Processor::builder(MemoryStore::new(), tower::service_fn(handler))
        .namespace("t")
        .redelivery(redelivery)
        .metrics(move |m: &BatchMetrics| {
            if let Ok(mut all) = sink.lock() {
                all.push(m.clone());
            }
        })
        .build()
}

fn changed(metrics: &Metrics) -> usize {
    metrics
        .lock()
        .expect("metrics")
        .last()
        .expect("a batch")
        .visibility_changed
}

#[tokio::test]
async fn a_message_comes_back_when_its_handler_says_not_after_the_queue_timeout() {
    let client = client_at(&endpoint());
    let (url, arn) = queue(&client).await;
    let metrics = Metrics::default();
    // The queue URL is found from the records' ARN (GetQueueUrl).
    let p = processor(Redelivery::sqs(client.clone()), &metrics);
    let event = delivered(&client, &url, &arn, &["now-1", "later-1", "ok-1"]).await;
    let report = p
        .process(lambda_event(event, deadline_in(Duration::from_secs(20))))
        .await
        .expect("a batch");
    assert_eq!(failed_ids(&report.response()).len(), 2, "both reported");
    assert_eq!(changed(&metrics), 2, "SQS confirmed both changes");
    // Without the change, neither would be visible for 10 minutes.
    assert_eq!(visible_now(&client, &url).await, ["now-1"]);
}

#[tokio::test]
async fn more_than_ten_go_in_calls_of_ten_and_all_come_back() {
    let client = client_at(&endpoint());
    let (url, arn) = queue(&client).await;
    let metrics = Metrics::default();
    let p = processor(Redelivery::sqs(client.clone()).queue_url(&url), &metrics);
    let bodies: Vec<String> = (0..12).map(|i| format!("now-{i:02}")).collect();
    let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let event = delivered(&client, &url, &arn, &refs).await;
    let report = p
        .process(lambda_event(event, deadline_in(Duration::from_secs(20))))
        .await
        .expect("a batch");
    assert_eq!(failed_ids(&report.response()).len(), 12);
    assert_eq!(changed(&metrics), 12);
    let mut back = visible_now(&client, &url).await;
    back.extend(visible_now(&client, &url).await);
    assert_eq!(back.len(), 12, "{back:?}");
}

async fn assert_still_reported(redelivery: Redelivery, arn: &str) {
    let metrics = Metrics::default();
    let p = processor(redelivery, &metrics);
    let mut event = support::batch::event_json(&[
        support::batch::rec("m-1", "fail"),
        support::batch::rec("m-2", "fine"),
    ]);
    for r in event["Records"].as_array_mut().expect("records") {
        r["eventSourceARN"] = json!(arn);
    }
    let report = p
        .process(lambda_event(event, deadline_in(Duration::from_secs(6))))
        .await
        .expect("a batch");
    assert!(
        matches!(report.items()[0].outcome, Outcome::Failed(_)),
        "{:?}",
        report.items()[0]
    );
    assert_eq!(failed_ids(&report.response()), ["m-1"], "never dropped");
    assert_eq!(changed(&metrics), 0);
}

#[tokio::test]
async fn a_failed_visibility_call_still_reports_the_message() {
    // Nothing listens on port 1: connection refused.
    let down = client_at("http://127.0.0.1:1");
    assert_still_reported(
        Redelivery::sqs(down.clone()).queue_url("http://127.0.0.1:1/000000000000/q"),
        support::batch::STANDARD_ARN,
    )
    .await;
    // The URL cannot be found (GetQueueUrl fails).
    assert_still_reported(Redelivery::sqs(down), support::batch::STANDARD_ARN).await;
    // ministack answers; the receipt handle is not one of its own: the entry is refused.
    let client = client_at(&endpoint());
    let (_, arn) = queue(&client).await;
    assert_still_reported(Redelivery::sqs(client), &arn).await;
}
