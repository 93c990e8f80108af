//! FIFO end to end against ministack (SQS): the publisher's derived deduplication ids, order
//! within message groups through receive → Lambda event → processor → delete, and failed batch
//! entries surfaced with SQS's own code and message.
//!
//! Needs ministack on `SQS_CLAIM_SQS_ENDPOINT` (default `http://127.0.0.1:4566`): run
//! `make test`, or `scripts/standins.sh up`. Every test makes its own queues (unique names), so
//! runs and engineers sharing one ministack do not see each other's messages.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::events::{SqsEvent, SqsMessage};
use sqs_claim::publish::{Outgoing, OutputLabel, PublishFailure, Publisher};
use sqs_claim::{ErrorKind, FifoMode, MemoryStore, Message, NotStarted, Outcome, Processor};
use tower::service_fn;

fn endpoint() -> String {
    std::env::var("SQS_CLAIM_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

/// A client for ministack with static test credentials, failing fast if it is not there.
async fn sqs() -> aws_sdk_sqs::Client {
    let endpoint = endpoint();
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "static-test"))
        .endpoint_url(&endpoint)
        .build();
    let client = aws_sdk_sqs::Client::from_conf(config);
    let probe = tokio::time::timeout(Duration::from_secs(10), client.list_queues().send()).await;
    match probe {
        Ok(Ok(_)) => client,
        Ok(Err(e)) => panic!(
            "ministack (SQS) at {endpoint} did not answer ListQueues ({}): run `make test`, or \
             scripts/standins.sh up",
            aws_sdk_sqs::error::DisplayErrorContext(&e)
        ),
        Err(_) => panic!(
            "ministack (SQS) at {endpoint} did not answer within 10 s: run `make test`, or \
             scripts/standins.sh up"
        ),
    }
}

struct Queue {
    url: String,
    arn: String,
}

/// A new queue named `prefix-<uuid>` (`.fifo` added for FIFO), with `attributes`.
async fn queue(
    client: &aws_sdk_sqs::Client,
    prefix: &str,
    fifo: bool,
    attributes: &[(QueueAttributeName, &str)],
) -> Queue {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let name = format!(
        "{prefix}-{}{}",
        &suffix[..12],
        if fifo { ".fifo" } else { "" }
    );
    let mut create = client.create_queue().queue_name(&name);
    if fifo {
        create = create.attributes(QueueAttributeName::FifoQueue, "true");
    }
    for (k, v) in attributes {
        create = create.attributes(k.clone(), *v);
    }
    let url = create
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "CreateQueue {name}: {}",
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
        .expect("QueueArn")
        .clone();
    Queue { url, arn }
}

/// One ReceiveMessage call (max 10, every system attribute), mapped to Lambda's SQS record
/// exactly as the event source mapping does.
async fn receive(client: &aws_sdk_sqs::Client, q: &Queue, wait_s: i32) -> Vec<SqsMessage> {
    let out = client
        .receive_message()
        .queue_url(&q.url)
        .max_number_of_messages(10)
        .wait_time_seconds(wait_s)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .expect("ReceiveMessage");
    out.messages()
        .iter()
        .map(|m| {
            let attributes: HashMap<String, String> = m
                .attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            let message_attributes: serde_json::Map<String, Value> = m
                .message_attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| {
                            (
                                k.clone(),
                                json!({
                                    "stringValue": v.string_value(),
                                    "stringListValues": [],
                                    "binaryListValues": [],
                                    "dataType": v.data_type(),
                                }),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            // The Lambda wire shape, decoded by the same serde code that decodes real events.
            serde_json::from_value(json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": attributes,
                "messageAttributes": message_attributes,
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": q.arn,
                "awsRegion": "us-east-1",
            }))
            .expect("a Lambda SQS record")
        })
        .collect()
}

fn event(records: Vec<SqsMessage>) -> LambdaEvent<SqsEvent> {
    let mut e = SqsEvent::default();
    e.records = records;
    LambdaEvent::new(e, Context::default())
}

async fn delete(client: &aws_sdk_sqs::Client, q: &Queue, handles: Vec<String>) {
    for handle in handles {
        client
            .delete_message()
            .queue_url(&q.url)
            .receipt_handle(handle)
            .send()
            .await
            .expect("DeleteMessage");
    }
}

/// Receives (and deletes) until `deadline` or until a receive comes back empty after at least
/// `min` messages arrived. Bounded: at most one call per 100 ms until the deadline.
async fn drain(
    client: &aws_sdk_sqs::Client,
    q: &Queue,
    min: usize,
    within: Duration,
) -> Vec<SqsMessage> {
    let deadline = Instant::now() + within;
    let mut all = Vec::new();
    while Instant::now() < deadline {
        let got = receive(client, q, 1).await;
        if got.is_empty() && all.len() >= min {
            break;
        }
        delete(
            client,
            q,
            got.iter()
                .filter_map(|m| m.receipt_handle.clone())
                .collect(),
        )
        .await;
        all.extend(got);
    }
    all
}

// --------------------------------------------------------------------------------------------

/// A handler publishes 3 outputs, then fails; the processor releases the claim; the retry
/// publishes the same 3 (same derived ids) and succeeds. The output queue holds each once.
#[tokio::test]
async fn retried_handler_outputs_arrive_once() {
    let client = sqs().await;
    let out_q = queue(&client, "e2e-out", true, &[]).await;
    let publisher = Publisher::new(client.clone(), &out_q.url);
    let calls = Arc::new(AtomicUsize::new(0));
    let published: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let handler = {
        let (calls, published) = (calls.clone(), published.clone());
        service_fn(move |msg: Message| {
            let (publisher, calls, published) =
                (publisher.clone(), calls.clone(), published.clone());
            async move {
                let call = calls.fetch_add(1, Ordering::SeqCst);
                let mut out = publisher.batch_for(&msg)?;
                out.push(Outgoing::new(r#"{"debit":10}"#).group_id("acct-42"));
                out.push(Outgoing::new(r#"{"credit":10}"#).group_id("acct-43"));
                out.push(
                    Outgoing::new(r#"{"receipt":true}"#)
                        .group_id("acct-42")
                        .name("receipt"),
                );
                let sent = out.send().await?;
                published
                    .lock()
                    .unwrap()
                    .push(sent.into_iter().map(|s| s.message_id).collect());
                if call == 0 {
                    return Err(sqs_claim::Error::new(
                        ErrorKind::Other,
                        "crash after publishing",
                    ));
                }
                Ok::<(), sqs_claim::Error>(())
            }
        })
    };
    let processor = Processor::builder(MemoryStore::new(), handler)
        .namespace("e2e")
        .build();
    let input: SqsMessage = serde_json::from_value(json!({
        "messageId": "in-1",
        "receiptHandle": "rh-1",
        "body": r#"{"transfer":10}"#,
        "attributes": {"MessageGroupId": "transfers", "MessageDeduplicationId": "in-1",
                       "SequenceNumber": "1", "ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:in.fifo",
        "awsRegion": "us-east-1",
    }))
    .unwrap();

    let first = processor.process(event(vec![input.clone()])).await.unwrap();
    assert!(
        matches!(first.items()[0].outcome, Outcome::Failed(_)),
        "{first:?}"
    );
    let second = processor.process(event(vec![input.clone()])).await.unwrap();
    assert_eq!(second.items()[0].outcome, Outcome::Processed, "{second:?}");
    let third = processor.process(event(vec![input])).await.unwrap();
    assert_eq!(third.items()[0].outcome, Outcome::Duplicate, "{third:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the handler ran twice: the failure, then the retry"
    );

    // SQS answered the retry's copies with the first copies' message ids.
    let published = published.lock().unwrap().clone();
    assert_eq!(published.len(), 2);
    assert_eq!(
        published[0], published[1],
        "the retry's sends were deduplicated by SQS"
    );

    let received = drain(&client, &out_q, 3, Duration::from_secs(15)).await;
    let mut bodies: Vec<&str> = received.iter().filter_map(|m| m.body.as_deref()).collect();
    bodies.sort_unstable();
    assert_eq!(
        bodies,
        vec![r#"{"credit":10}"#, r#"{"debit":10}"#, r#"{"receipt":true}"#]
    );
    let ids: HashSet<&str> = received
        .iter()
        .filter_map(|m| m.message_id.as_deref())
        .collect();
    assert_eq!(ids, published[0].iter().map(String::as_str).collect());
    // The deduplication ids on the wire are the derived ones.
    let dedup: HashSet<String> = received
        .iter()
        .filter_map(|m| m.attributes.get("MessageDeduplicationId").cloned())
        .collect();
    let expected: HashSet<String> = [
        OutputLabel::Position(0),
        OutputLabel::Position(1),
        OutputLabel::Named("receipt".into()),
    ]
    .iter()
    .map(|l| sqs_claim::publish::deduplication_id("e2e#in-1", l))
    .collect();
    assert_eq!(dedup, expected);
}

/// Messages in 3 groups go through ministack, the processor and back; one fails once. Each
/// group is handled in send order, the failed message's group comes back after the
/// visibility timeout, and everything is processed exactly once.
#[tokio::test]
async fn group_order_survives_a_failure_end_to_end() {
    let client = sqs().await;
    let in_q = queue(
        &client,
        "e2e-in",
        true,
        &[(QueueAttributeName::VisibilityTimeout, "2")],
    )
    .await;
    let producer = Publisher::new(client.clone(), &in_q.url);
    let groups = ["red", "green", "blue"];
    let per_group_n = 5;
    let mut batch = producer.batch("producer#run-1");
    for seq in 0..per_group_n {
        for g in groups {
            batch.push(Outgoing::new(json!({"group": g, "seq": seq}).to_string()).group_id(g));
        }
    }
    assert_eq!(batch.send().await.expect("publish the input").len(), 15);

    // green #1 fails on its first attempt only.
    let poison = json!({"group": "green", "seq": 1}).to_string();
    let attempts: Arc<Mutex<Vec<(String, u64, bool)>>> = Arc::default();
    let failed_once = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (attempts, poison, failed_once) =
            (attempts.clone(), poison.clone(), failed_once.clone());
        service_fn(move |msg: Message| {
            let (attempts, poison, failed_once) =
                (attempts.clone(), poison.clone(), failed_once.clone());
            async move {
                let v: Value = msg.json()?;
                let group = v["group"].as_str().unwrap_or_default().to_owned();
                // The wire attributes reached the handler: recorded here, asserted below (a panic
                // in here would only fail the message).
                let wire_ok = msg.group_id() == Some(group.as_str())
                    && msg.is_fifo()
                    && msg.sqs().attributes.contains_key("SequenceNumber")
                    && msg.sqs().attributes.contains_key("MessageDeduplicationId");
                let group = if wire_ok {
                    group
                } else {
                    format!("{group} (attributes missing)")
                };
                let fail = msg.body() == poison && failed_once.fetch_add(1, Ordering::SeqCst) == 0;
                attempts
                    .lock()
                    .unwrap()
                    .push((group, v["seq"].as_u64().unwrap_or(99), !fail));
                if fail {
                    return Err(sqs_claim::Error::new(
                        ErrorKind::Other,
                        "transient downstream error",
                    ));
                }
                Ok::<(), sqs_claim::Error>(())
            }
        })
    };
    let processor = Processor::builder(MemoryStore::new(), handler)
        .namespace("e2e-order")
        .fifo(FifoMode::PerGroup)
        .build();

    let mut processed = 0;
    let mut green_skipped = false;
    let mut redelivered_counts = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while processed < 15 && Instant::now() < deadline {
        let records = receive(&client, &in_q, 1).await;
        if records.is_empty() {
            continue;
        }
        for r in &records {
            let count: u32 = r
                .attributes
                .get("ApproximateReceiveCount")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            if count > 1 {
                redelivered_counts.push((r.body.clone().unwrap_or_default(), count));
            }
        }
        let handles: HashMap<String, String> = records
            .iter()
            .map(|r| {
                (
                    r.message_id.clone().unwrap_or_default(),
                    r.receipt_handle.clone().unwrap_or_default(),
                )
            })
            .collect();
        let report = processor
            .process(event(records))
            .await
            .expect("a valid FIFO event");
        let mut done = Vec::new();
        for item in report.items() {
            match &item.outcome {
                Outcome::Processed => {
                    processed += 1;
                    done.push(handles[&item.message_id].clone());
                }
                Outcome::NotStarted(NotStarted::EarlierFailureInGroup) => green_skipped = true,
                Outcome::Failed(f) => {
                    assert!(
                        f.message.contains("transient downstream error"),
                        "unexpected failure {f:?}"
                    )
                }
                other => panic!("unexpected outcome {other:?} for {}", item.message_id),
            }
        }
        // What Lambda does with the partial batch response: delete the successes only.
        let failed: HashSet<String> = report
            .response()
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        assert!(done.iter().all(|h| !failed.contains(h)));
        delete(&client, &in_q, done).await;
    }
    assert_eq!(processed, 15, "every message processed once, within 30 s");
    assert!(
        green_skipped,
        "the rest of the failed message's group was held back"
    );
    assert_eq!(
        failed_once.load(Ordering::SeqCst),
        2,
        "the poison message ran twice"
    );
    assert!(
        redelivered_counts
            .iter()
            .any(|(b, c)| *b == poison && *c >= 2),
        "the failed message came back on a later receive: {redelivered_counts:?}"
    );

    let attempts = attempts.lock().unwrap().clone();
    let mut per_group: BTreeMap<String, Vec<(u64, bool)>> = BTreeMap::new();
    for (g, seq, ok) in attempts {
        per_group.entry(g).or_default().push((seq, ok));
    }
    assert_eq!(
        per_group.keys().map(String::as_str).collect::<HashSet<_>>(),
        groups.into_iter().collect::<HashSet<_>>(),
        "every message reached the handler with its FIFO attributes"
    );
    for g in groups {
        let seen = &per_group[g];
        let expected: Vec<(u64, bool)> = if g == "green" {
            // 0 ok, 1 fails, then 1 again (after the visibility timeout) and the rest in order.
            vec![
                (0, true),
                (1, false),
                (1, true),
                (2, true),
                (3, true),
                (4, true),
            ]
        } else {
            (0..per_group_n as u64).map(|s| (s, true)).collect()
        };
        assert_eq!(seen, &expected, "group {g} handled out of order");
    }
}

/// A real per-entry failure from SQS: a queue whose MaximumMessageSize (1 KiB) is below what
/// the publisher assumes refuses the large entry; the others go through.
#[tokio::test]
async fn failed_batch_entry_is_surfaced_with_sqs_code_and_message() {
    let client = sqs().await;
    let q = queue(
        &client,
        "e2e-small",
        true,
        &[(QueueAttributeName::MaximumMessageSize, "1024")],
    )
    .await;
    let publisher = Publisher::new(client.clone(), &q.url);
    let mut batch = publisher.batch("e2e#big");
    batch.push(Outgoing::new("small a").group_id("a"));
    batch.push(Outgoing::new("x".repeat(2000)).group_id("b"));
    batch.push(Outgoing::new("small c").group_id("c"));
    let err = batch
        .send()
        .await
        .expect_err("the 2000-byte entry must fail");
    assert_eq!(err.kind(), ErrorKind::Publish);
    let f = PublishFailure::of(&err).expect("a PublishFailure");
    assert!(!f.before_any_call());
    assert_eq!(f.failed().len(), 1, "{f}");
    let entry = &f.failed()[0];
    assert_eq!(entry.output, OutputLabel::Position(1));
    assert_eq!(entry.code, "InvalidParameterValue", "{entry:?}");
    assert!(entry.message.contains("1024"), "{entry:?}");
    assert!(entry.sender_fault);
    assert_eq!(
        f.sent()
            .iter()
            .map(|s| s.output.clone())
            .collect::<Vec<_>>(),
        vec![OutputLabel::Position(0), OutputLabel::Position(2)]
    );
    // The error an on-call engineer reads names the output, the code and SQS's message.
    // The whole chain (`{:#}`): `Display` alone is the error's own message.
    let text = format!("{err:#}");
    assert!(
        text.contains("output #1 InvalidParameterValue") && text.contains("1024"),
        "{text}"
    );
    assert!(
        !text.contains("xxxx"),
        "the body leaked into the error: {text}"
    );

    let received = drain(&client, &q, 2, Duration::from_secs(10)).await;
    let mut bodies: Vec<&str> = received.iter().filter_map(|m| m.body.as_deref()).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, vec!["small a", "small c"]);
}

/// A whole call that fails (the queue was deleted) reports SQS's code for every output.
#[tokio::test]
async fn deleted_queue_is_reported_for_every_output() {
    let client = sqs().await;
    let q = queue(&client, "e2e-gone", true, &[]).await;
    client
        .delete_queue()
        .queue_url(&q.url)
        .send()
        .await
        .expect("DeleteQueue");
    let publisher = Publisher::new(client.clone(), &q.url)
        .retry_policy(sqs_claim::RetryPolicy::new(1, Duration::from_millis(10)));
    let mut batch = publisher.batch("e2e#gone");
    batch.push(Outgoing::new("a").group_id("a"));
    batch.push(Outgoing::new("b").group_id("a"));
    let err = batch.send().await.expect_err("the queue is gone");
    let f = PublishFailure::of(&err).expect("a PublishFailure");
    assert_eq!(f.failed().len(), 2);
    for e in f.failed() {
        assert!(
            e.code.contains("NonExistentQueue") || e.code.contains("QueueDoesNotExist"),
            "{e:?}"
        );
        assert!(e.sender_fault, "a missing queue is not retried: {e:?}");
    }
    assert!(f.sent().is_empty());
}
