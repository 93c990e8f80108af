//! Poison messages keep their reason: with a failure destination, a message that fails on its
//! last allowed receive is sent to that queue (ministack) with its failure as message
//! attributes and reported handled; one with receives left, or whose send fails, is reported
//! for retry as without a destination.
//!
//! Needs ministack on `SQS_CLAIM_SQS_ENDPOINT` (default `http://127.0.0.1:4566`). Every test
//! makes its own queues.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use common::{Seen, failed_ids, fifo, rec, scripted};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use sqs_claim::events::SqsEvent;
use sqs_claim::publish::{OutputLabel, deduplication_id};
use sqs_claim::{FailureDestination, MemoryStore, Outcome, Processor};

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

/// A new queue on ministack (`.fifo` for FIFO); its URL.
async fn queue(client: &aws_sdk_sqs::Client, fifo: bool) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("failures-{}{}", &id[..12], if fifo { ".fifo" } else { "" });
    let mut create = client.create_queue().queue_name(&name);
    if fifo {
        create = create.attributes(QueueAttributeName::FifoQueue, "true");
    }
    let created = tokio::time::timeout(Duration::from_secs(10), create.send()).await;
    let Ok(created) = created else {
        panic!("ministack at {} did not answer", endpoint());
    };
    let out = created.unwrap_or_else(|e| {
        panic!(
            "CreateQueue on ministack at {}: {}",
            endpoint(),
            aws_sdk_sqs::error::DisplayErrorContext(&e)
        )
    });
    out.queue_url().expect("a queue url").to_owned()
}

/// What the destination holds: body, string attributes, system attributes.
type Received = (String, HashMap<String, String>, HashMap<String, String>);

async fn drain(client: &aws_sdk_sqs::Client, url: &str) -> Vec<Received> {
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
    out.messages()
        .iter()
        .map(|m| {
            let attrs = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.clone(), v.string_value().unwrap_or_default().to_owned()))
                        .collect()
                })
                .unwrap_or_default();
            let system = m
                .attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            (m.body().unwrap_or_default().to_owned(), attrs, system)
        })
        .collect()
}

/// The event with each record's `ApproximateReceiveCount` set as given.
fn event(records: &[(common::Rec, u32)], deadline_ms: u64) -> LambdaEvent<SqsEvent> {
    let recs: Vec<common::Rec> = records.iter().map(|(r, _)| r.clone()).collect();
    let mut json = common::event_json(&recs);
    for (i, (_, receives)) in records.iter().enumerate() {
        json["Records"][i]["attributes"]["ApproximateReceiveCount"] =
            Value::String(receives.to_string());
    }
    let payload: SqsEvent = serde_json::from_value(json).expect("an SQS event");
    let mut context = Context::default();
    context.deadline = deadline_ms;
    LambdaEvent::new(payload, context)
}

fn processor(
    destination: FailureDestination,
    seen: &Seen,
) -> Processor<
    MemoryStore,
    impl tower::Service<
        sqs_claim::Message,
        Response = (),
        Error = sqs_claim::BoxError,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static,
> {
    Processor::builder(MemoryStore::new(), scripted(seen))
        .namespace("t")
        .failure_destination(destination)
        .build()
}

#[tokio::test]
async fn a_message_failing_on_its_last_receive_lands_in_the_destination_with_its_reason() {
    let client = client_at(&endpoint());
    let url = queue(&client, false).await;
    let seen = Seen::new();
    let p = processor(
        FailureDestination::sqs(client.clone(), &url).after_receives(5),
        &seen,
    );
    let report = p
        .process(event(
            &[
                (rec("m-poison", r#"{"FAIL": 1}"#), 5),
                (rec("m-retry", r#"{"FAIL": 2}"#), 3),
                (rec("m-ok", r#"{"ok": 3}"#), 5),
                (rec("m-late", r#"{"FAIL": 4}"#), 9),
            ],
            0,
        ))
        .await
        .expect("a batch");
    assert!(
        matches!(report.items()[0].outcome, Outcome::DeadLettered(_)),
        "{:?}",
        report.items()[0]
    );
    assert!(matches!(report.items()[1].outcome, Outcome::Failed(_)));
    assert_eq!(report.items()[2].outcome, Outcome::Processed);
    assert!(matches!(
        report.items()[3].outcome,
        Outcome::DeadLettered(_)
    ));
    assert_eq!(
        failed_ids(&report.response()),
        ["m-retry"],
        "only the message with receives left is reported"
    );
    assert_eq!(report.counts().dead_lettered, 2);
    assert_eq!(report.to_json()["counts"]["dead_lettered"], 2);

    let mut got = drain(&client, &url).await;
    got.extend(drain(&client, &url).await);
    got.sort_by(|a, b| {
        a.1.get("sqs-claim.message-id")
            .cmp(&b.1.get("sqs-claim.message-id"))
    });
    assert_eq!(got.len(), 2, "{got:?}");
    let (body, attrs, _) = &got[1];
    assert_eq!(body, r#"{"FAIL": 1}"#, "the body travels as the body");
    assert_eq!(attrs["sqs-claim.message-id"], "m-poison");
    assert_eq!(attrs["sqs-claim.failure-kind"], "handler_error");
    assert_eq!(attrs["sqs-claim.receive-count"], "5");
    assert_eq!(attrs["sqs-claim.key"], "t#m-poison");
    assert!(
        attrs["sqs-claim.reason"].contains("scripted failure in m-poison"),
        "{attrs:?}"
    );
    assert!(
        !attrs.values().any(|v| v.contains("FAIL\": 1")),
        "the body is never an attribute: {attrs:?}"
    );
    assert_eq!(got[0].1["sqs-claim.receive-count"], "9");
}

#[tokio::test]
async fn a_fifo_destination_keeps_the_group_and_derives_the_dedup_id_from_the_message_id() {
    let client = client_at(&endpoint());
    let url = queue(&client, true).await;
    let seen = Seen::new();
    let p = processor(
        FailureDestination::sqs(client.clone(), &url).after_receives(5),
        &seen,
    );
    let report = p
        .process(event(
            &[
                (fifo("f-1", "acct-1", "FAIL first"), 5),
                (fifo("f-2", "acct-1", "after it"), 5),
                (
                    rec("s-1", "FAIL from a standard queue").arn(common::FIFO_ARN),
                    6,
                ),
            ],
            0,
        ))
        .await
        .expect("a batch");
    assert!(matches!(
        report.items()[0].outcome,
        Outcome::DeadLettered(_)
    ));
    assert_eq!(
        failed_ids(&report.response()),
        ["f-2"],
        "the rest of the group waits for the next delivery, as without a destination"
    );
    let got = drain(&client, &url).await;
    let by_id: HashMap<&str, &Received> = got
        .iter()
        .map(|r| (r.1["sqs-claim.message-id"].as_str(), r))
        .collect();
    let (_, _, system) = by_id["f-1"];
    assert_eq!(system["MessageGroupId"], "acct-1");
    assert_eq!(
        system["MessageDeduplicationId"],
        deduplication_id(
            "sqs-claim/failure-destination",
            &OutputLabel::Named("f-1".into())
        )
    );
    let (_, _, system) = by_id["s-1"];
    assert_eq!(system["MessageGroupId"], "s-1", "no group: its own");
}

async fn assert_reported_for_retry(destination: FailureDestination, deadline_ms: u64) {
    let seen = Seen::new();
    let p = processor(destination, &seen);
    let report = p
        .process(event(
            &[(rec("m-1", "FAIL"), 5), (rec("m-2", "fine"), 5)],
            deadline_ms,
        ))
        .await
        .expect("a batch");
    assert!(
        matches!(report.items()[0].outcome, Outcome::Failed(_)),
        "a failed send keeps the failure: {:?}",
        report.items()[0]
    );
    assert_eq!(failed_ids(&report.response()), ["m-1"], "never dropped");
}

#[tokio::test]
async fn destination_down_or_missing_leaves_the_message_reported_for_retry() {
    // Nothing listens on port 1: connection refused.
    let down = client_at("http://127.0.0.1:1");
    assert_reported_for_retry(
        FailureDestination::sqs(down, "http://127.0.0.1:1/000000000000/failures"),
        0,
    )
    .await;
    // ministack answers, the queue does not exist.
    let client = client_at(&endpoint());
    let missing = format!(
        "{}/000000000000/no-such-queue-{}",
        endpoint(),
        uuid::Uuid::new_v4()
    );
    assert_reported_for_retry(FailureDestination::sqs(client, missing), 0).await;
}

#[tokio::test]
async fn a_silent_destination_is_cut_off_by_the_deadline_and_reported() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let silent = client_at(&format!("http://{addr}"));
    // Past the default 2 s deadline margin, so the message starts; the send then hangs until
    // the hard stop (deadline - 250 ms).
    let deadline = sqs_claim::store::epoch_millis(std::time::SystemTime::now()) + 3000;
    let started = Instant::now();
    assert_reported_for_retry(
        FailureDestination::sqs(silent, format!("http://{addr}/000000000000/failures")),
        u64::try_from(deadline).expect("after the epoch"),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(3000),
        "the batch answered before the deadline: {:?}",
        started.elapsed()
    );
    hold.abort();
}
