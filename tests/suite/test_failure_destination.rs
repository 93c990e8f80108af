//! Poison messages keep their reason: with a failure destination, a message that fails on its
//! last allowed receive is sent to that queue (ministack) with its own message attributes and
//! its failure as one more, `sqs-claim.failure` (JSON), and reported handled; one with receives
//! left, or whose send fails, is reported for retry as without a destination.
//!
//! Needs ministack on `SQS_CLAIM_SQS_ENDPOINT` (default `http://127.0.0.1:4566`). Every test
//! makes its own queues.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use sqs_claim::events::SqsEvent;
use sqs_claim::publish::{OutputLabel, deduplication_id};
use sqs_claim::{FailureDestination, MemoryStore, Outcome, Processor};
use support::batch::{Seen, failed_ids, fifo, rec, scripted};

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

/// The failure a copy carries: the JSON of its `sqs-claim.failure` attribute (`null` without).
fn failure(attrs: &HashMap<String, String>) -> Value {
    attrs
        .get(sqs_claim::processor::FAILURE_ATTRIBUTE)
        .map(|v| serde_json::from_str(v).expect("sqs-claim.failure is JSON"))
        .unwrap_or(Value::Null)
}

/// The original message id a copy names.
fn original_id(attrs: &HashMap<String, String>) -> String {
    failure(attrs)["message_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The event with each record's `ApproximateReceiveCount` set as given.
fn event(records: &[(support::batch::Rec, u32)], deadline_ms: u64) -> LambdaEvent<SqsEvent> {
    let recs: Vec<support::batch::Rec> = records.iter().map(|(r, _)| r.clone()).collect();
    let mut json = support::batch::event_json(&recs);
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
    got.sort_by_key(|a| original_id(&a.1));
    assert_eq!(got.len(), 2, "{got:?}");
    let (body, attrs, _) = &got[1];
    assert_eq!(body, r#"{"FAIL": 1}"#, "the body travels as the body");
    assert_eq!(attrs.len(), 1, "one attribute holds the failure: {attrs:?}");
    let f = failure(attrs);
    assert_eq!(f["message_id"], "m-poison");
    assert_eq!(f["kind"], "handler_error");
    assert_eq!(f["error_kind"], Value::Null);
    assert_eq!(f["receive_count"], 5);
    assert_eq!(f["key"], "t#m-poison");
    assert!(
        f["reason"]
            .as_str()
            .is_some_and(|r| r.contains("scripted failure in m-poison")),
        "{f}"
    );
    assert!(
        !attrs.values().any(|v| v.contains("FAIL")),
        "the body is never an attribute: {attrs:?}"
    );
    assert_eq!(failure(&got[0].1)["receive_count"], 9);
}

/// `n` message attributes as Lambda's event carries them: a `String` (`Idem`), a `Number`
/// (`ExtendedPayloadSize`), a `Binary` (`blob`, base64 in the event), a custom type
/// (`trace`, `String.w3c`), then `String`s `a4`...
fn attributes(n: usize) -> serde_json::Map<String, Value> {
    let attribute = |data_type: &str, value: Value| {
        let mut a = serde_json::json!({
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": data_type,
        });
        let field = if data_type.starts_with("Binary") {
            "binaryValue"
        } else {
            "stringValue"
        };
        a[field] = value;
        a
    };
    let mut all = vec![
        ("Idem".to_owned(), attribute("String", "order-7".into())),
        (
            "ExtendedPayloadSize".to_owned(),
            attribute("Number", "300000".into()),
        ),
        // base64 of the bytes 0 1 2 255
        ("blob".to_owned(), attribute("Binary", "AAEC/w==".into())),
        (
            "trace".to_owned(),
            attribute("String.w3c", "00-abc-def-01".into()),
        ),
    ];
    for i in 4..10 {
        all.push((format!("a{i}"), attribute("String", format!("v{i}").into())));
    }
    all.into_iter().take(n).collect()
}

/// What the destination holds of each message: body, and each attribute's data type and value
/// (text, or the bytes as `bytes:..` for a binary one).
async fn drain_typed(
    client: &aws_sdk_sqs::Client,
    url: &str,
) -> HashMap<String, HashMap<String, (String, String)>> {
    let out = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_attribute_names("All")
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
                        .map(|(k, v)| {
                            let value = match v.binary_value() {
                                Some(b) => format!("bytes:{:?}", b.as_ref()),
                                None => v.string_value().unwrap_or_default().to_owned(),
                            };
                            (k.clone(), (v.data_type().to_owned(), value))
                        })
                        .collect()
                })
                .unwrap_or_default();
            (m.body().unwrap_or_default().to_owned(), attrs)
        })
        .collect()
}

#[tokio::test]
async fn a_copy_keeps_the_messages_own_attributes_and_the_failure_gives_way_to_the_tenth() {
    let client = client_at(&endpoint());
    let url = queue(&client, false).await;
    let seen = Seen::new();
    let p = processor(
        FailureDestination::sqs(client.clone(), &url).after_receives(5),
        &seen,
    );
    // "ten" has the 10 attributes SQS allows; "nine" has 9 and the failure attribute of an
    // earlier failure (it was moved back once); "none" has none.
    let mut json = support::batch::event_json(&[
        rec("ten", "FAIL ten"),
        rec("nine", "FAIL nine"),
        rec("none", "FAIL none"),
    ]);
    json["Records"][0]["messageAttributes"] = Value::Object(attributes(10));
    let mut nine = attributes(9);
    nine.insert(
        "sqs-claim.failure".into(),
        serde_json::json!({"stringValue": r#"{"kind":"earlier"}"#, "dataType": "String",
                           "stringListValues": [], "binaryListValues": []}),
    );
    json["Records"][1]["messageAttributes"] = Value::Object(nine);
    for i in 0..3 {
        json["Records"][i]["attributes"]["ApproximateReceiveCount"] = Value::String("5".into());
    }
    let payload: SqsEvent = serde_json::from_value(json).expect("an SQS event");
    let report = p
        .process(LambdaEvent::new(payload, Context::default()))
        .await
        .expect("a batch");
    for item in report.items() {
        assert!(
            matches!(item.outcome, Outcome::DeadLettered(_)),
            "each goes to the destination: {item:?}"
        );
    }

    let mut got = drain_typed(&client, &url).await;
    got.extend(drain_typed(&client, &url).await);
    assert_eq!(got.len(), 3, "{got:?}");
    let want: HashMap<String, (String, String)> = attributes(10)
        .into_iter()
        .map(|(name, a)| {
            let data_type = a["dataType"].as_str().unwrap_or_default().to_owned();
            let value = match name.as_str() {
                "blob" => "bytes:[0, 1, 2, 255]".to_owned(),
                _ => a["stringValue"].as_str().unwrap_or_default().to_owned(),
            };
            (name, (data_type, value))
        })
        .collect();
    // Ten: every one of its own, types and bytes as they were, and no room for the failure.
    assert_eq!(
        got["FAIL ten"], want,
        "the copy keeps the original attributes"
    );
    // Nine: its own nine, and this failure in place of the earlier one.
    let nine = &got["FAIL nine"];
    assert_eq!(nine.len(), 10, "{nine:?}");
    for (name, value) in want.iter().filter(|(n, _)| n.as_str() != "a9") {
        assert_eq!(nine.get(name), Some(value), "{name}");
    }
    let (data_type, f) = &nine["sqs-claim.failure"];
    assert_eq!(data_type, "String");
    let f: Value = serde_json::from_str(f).expect("JSON");
    assert_eq!(f["kind"], "handler_error", "replaced: {f}");
    assert_eq!(f["message_id"], "nine");
    assert_eq!(f["key"], "t#nine");
    // None: the failure alone.
    assert_eq!(
        got["FAIL none"].keys().collect::<Vec<_>>(),
        ["sqs-claim.failure"]
    );
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
                    rec("s-1", "FAIL from a standard queue").arn(support::batch::FIFO_ARN),
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
    let by_id: HashMap<String, &Received> = got.iter().map(|r| (original_id(&r.1), r)).collect();
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

/// A handler that parses every body as `{"amount": n}` (a body that does not parse fails with
/// `bad_body`), declines `{"amount": 0}` for good (`Retry::permanent`), and fails
/// `{"amount": -1}` plainly (a provider down).
async fn payments(msg: sqs_claim::Message) -> Result<(), sqs_claim::BoxError> {
    #[derive(serde::Deserialize)]
    struct Payment {
        amount: i64,
    }
    let p: Payment = msg.json()?;
    let why = |m: &str| sqs_claim::Error::new(sqs_claim::ErrorKind::Other, m.to_owned());
    match p.amount {
        0 => Err(sqs_claim::Retry::permanent(why("declined: amount 0")).into()),
        -1 => Err(why("provider down").into()),
        _ => Ok(()),
    }
}

type Metrics = std::sync::Arc<std::sync::Mutex<Vec<sqs_claim::metrics::BatchMetrics>>>;

fn payments_processor(
    destination: FailureDestination,
    metrics: &Metrics,
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
    let sink = std::sync::Arc::clone(metrics);
    Processor::builder(MemoryStore::new(), tower::service_fn(payments))
        .namespace("t")
        .key(sqs_claim::KeySource::JsonPointer("/id".into()))
        .failure_destination(destination)
        .metrics(move |m: &sqs_claim::metrics::BatchMetrics| {
            if let Ok(mut all) = sink.lock() {
                all.push(m.clone());
            }
        })
        .build()
}

/// A batch on its first receive: a body that never parses (its key is read from it), a
/// payment declined for good, a provider down, a payment, and a copy of it with another
/// amount (payload mismatch).
fn first_receive() -> LambdaEvent<SqsEvent> {
    event(
        &[
            (rec("bad", "{not json"), 1),
            (rec("declined", r#"{"id": "p-0", "amount": 0}"#), 1),
            (rec("down", r#"{"id": "p-1", "amount": -1}"#), 1),
            (rec("paid", r#"{"id": "p-2", "amount": 5}"#), 1),
            (rec("changed", r#"{"id": "p-2", "amount": 6}"#), 1),
            (rec("typed", r#"{"id": "p-3", "amount": "five"}"#), 1),
        ],
        0,
    )
}

#[tokio::test]
async fn a_permanent_failure_goes_to_the_destination_on_its_first_receive() {
    use sqs_claim::processor::Permanent;
    let client = client_at(&endpoint());
    let url = queue(&client, false).await;
    let metrics = Metrics::default();
    let p = payments_processor(
        FailureDestination::sqs(client.clone(), &url)
            .after_receives(5)
            .at_once(Permanent::default()),
        &metrics,
    );
    let report = p.process(first_receive()).await.expect("a batch");
    let names: Vec<&str> = report.items().iter().map(|i| i.outcome.name()).collect();
    assert_eq!(
        names,
        [
            "dead_lettered",
            "dead_lettered",
            "failed",
            "processed",
            "dead_lettered",
            "dead_lettered"
        ]
    );
    for i in [0, 1, 4, 5] {
        let Outcome::DeadLettered(f) = &report.items()[i].outcome else {
            panic!("{:?}", report.items()[i]);
        };
        assert!(f.permanent, "{f:?}");
    }
    assert!(
        report.to_json()["outcomes"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("sent to the failure destination at once")),
        "{}",
        report.to_json()
    );
    assert_eq!(
        failed_ids(&report.response()),
        ["down"],
        "only the failure retrying can fix"
    );
    {
        let m = metrics.lock().expect("metrics");
        assert_eq!(m[0].dead_lettered_at_once, 4);
        assert_eq!(m[0].counts.dead_lettered, 4);
    }

    let mut got = drain(&client, &url).await;
    got.extend(drain(&client, &url).await);
    let by_id: HashMap<String, Value> = got
        .iter()
        .map(|r| (original_id(&r.1), failure(&r.1)))
        .collect();
    assert_eq!(by_id.len(), 4, "{got:?}");
    assert_eq!(by_id["typed"]["error_kind"], "bad_body");
    assert!(
        got.iter().any(|r| r.0 == "{not json"),
        "the body travels as the body"
    );
    // The key is read from the body: a body that does not parse has no key.
    assert_eq!(by_id["bad"]["kind"], "missing_key");
    assert_eq!(by_id["bad"]["key"], Value::Null);
    assert_eq!(by_id["bad"]["receive_count"], 1);
    assert!(
        by_id["declined"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("declined: amount 0"))
    );
    assert_eq!(by_id["changed"]["kind"], "payload_mismatch");
}

#[tokio::test]
async fn without_at_once_a_permanent_failure_waits_for_its_last_receive() {
    let client = client_at(&endpoint());
    let url = queue(&client, false).await;
    let metrics = Metrics::default();
    let p = payments_processor(
        FailureDestination::sqs(client.clone(), &url).after_receives(5),
        &metrics,
    );
    let report = p.process(first_receive()).await.expect("a batch");
    assert_eq!(
        failed_ids(&report.response()),
        ["bad", "declined", "down", "changed", "typed"]
    );
    assert!(drain(&client, &url).await.is_empty());
}

#[tokio::test]
async fn a_permanent_failure_whose_send_fails_is_reported_for_retry() {
    use sqs_claim::processor::Permanent;
    let metrics = Metrics::default();
    // Nothing listens on port 1: connection refused.
    let down = client_at("http://127.0.0.1:1");
    let p = payments_processor(
        FailureDestination::sqs(down, "http://127.0.0.1:1/000000000000/failures")
            .at_once(Permanent::default()),
        &metrics,
    );
    let report = p.process(first_receive()).await.expect("a batch");
    assert_eq!(
        failed_ids(&report.response()),
        ["bad", "declined", "down", "changed", "typed"],
        "never dropped"
    );
    assert_eq!(report.counts().dead_lettered, 0);
    assert_eq!(metrics.lock().expect("metrics")[0].dead_lettered_at_once, 0);
}

#[test]
fn which_kinds_are_permanent_is_configurable() {
    use sqs_claim::processor::Permanent;
    use sqs_claim::{ErrorKind, FailureKind};
    assert_eq!(
        "default".parse::<Permanent>().expect("parses"),
        Permanent::default()
    );
    assert_eq!(
        "off".parse::<Permanent>().expect("parses"),
        Permanent::none()
    );
    assert_eq!(
        " payload_mismatch , bad_body "
            .parse::<Permanent>()
            .expect("parses"),
        Permanent::none()
            .failure_kind(FailureKind::PayloadMismatch)
            .error_kind(ErrorKind::BadBody)
    );
    let e = "bad_bodies".parse::<Permanent>().expect_err("not a kind");
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("bad_bodies"), "{e}");
}
