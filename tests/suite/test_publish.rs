//! The publisher without a real queue: deduplication id derivation, the checks made before any
//! call, and the retry logic against a scripted SQS endpoint on 127.0.0.1 (the real SDK speaks
//! the real JSON protocol to it; the script decides each answer).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use serde_json::{Value, json};
use sqs_claim::publish::{Outgoing, OutputLabel, PublishFailure, Publisher, deduplication_id};
use sqs_claim::{ErrorKind, Message};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// SQS's default message size limit (256 KiB), the publisher's default.
const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

const FIFO_URL: &str = "http://127.0.0.1:9/000000000000/out.fifo";
const STANDARD_URL: &str = "http://127.0.0.1:9/000000000000/out";

/// A client for `endpoint`, without the SDK's own retries (so the publisher's are what is
/// tested) and with a short timeout.
fn client(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .endpoint_url(endpoint)
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(5))
                .build(),
        )
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// A publisher whose endpoint refuses connections (port 9, discard, is closed here): a check
/// that did not happen before the call would surface as a connection error instead.
fn offline(url: &str) -> Publisher {
    Publisher::new(client("http://127.0.0.1:9"), url)
        .retry_policy(sqs_claim::RetryPolicy::new(0, Duration::from_millis(1)))
}

// ------------------------------------------------------------------ id derivation

#[test]
fn ids_are_deterministic_hex_sha256() {
    let a = deduplication_id("ns#order-1", &OutputLabel::Position(0));
    assert_eq!(a, deduplication_id("ns#order-1", &OutputLabel::Position(0)));
    assert_eq!(a.len(), 64);
    assert!(a.len() <= 128);
    assert!(
        a.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{a}"
    );
    // The documented formula, recomputed independently.
    let expected = sqs_claim::sha256_hex(b"ns#order-1\0pos:0");
    assert_eq!(a, expected);
    let named = deduplication_id("ns#order-1", &OutputLabel::Named("receipt".into()));
    assert_eq!(named, sqs_claim::sha256_hex(b"ns#order-1\0name:receipt"));
}

#[test]
fn ids_differ_per_position_name_and_key() {
    let mut ids = HashSet::new();
    for key in ["ns#a", "ns#b", "other#a", "ns#a\0pos:1"] {
        for p in 0..12 {
            assert!(ids.insert(deduplication_id(key, &OutputLabel::Position(p))));
        }
        for name in ["receipt", "0", "pos:0", ""] {
            assert!(ids.insert(deduplication_id(key, &OutputLabel::Named(name.into()))));
        }
    }
    assert_eq!(ids.len(), 4 * 16);
}

#[test]
fn ids_stay_short_for_long_keys_and_names() {
    let key = "k".repeat(10_000);
    let id = deduplication_id(&key, &OutputLabel::Named("n".repeat(10_000)));
    assert_eq!(id.len(), 64);
}

#[test]
fn named_outputs_do_not_shift_positions() {
    let p = offline(FIFO_URL);
    let mut with_named = p.batch("ns#k");
    with_named.push(Outgoing::new("a").group_id("g"));
    with_named.push(Outgoing::new("r").group_id("g").name("receipt"));
    with_named.push(Outgoing::new("b").group_id("g"));
    let mut without = p.batch("ns#k");
    without.push(Outgoing::new("a").group_id("g"));
    without.push(Outgoing::new("b").group_id("g"));
    let ids = with_named.deduplication_ids();
    assert_eq!(
        ids.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>(),
        vec![
            OutputLabel::Position(0),
            OutputLabel::Named("receipt".into()),
            OutputLabel::Position(1)
        ]
    );
    assert_eq!(ids[0], without.deduplication_ids()[0]);
    assert_eq!(ids[2], without.deduplication_ids()[1]);
}

#[test]
fn batch_for_uses_the_message_key_and_needs_one() {
    let p = offline(FIFO_URL);
    let raw: sqs_claim::events::SqsMessage =
        serde_json::from_value(json!({"messageId": "m-1", "body": "{}"})).unwrap();
    let keyed = Message::new(raw.clone(), Some("ns#m-1".into()));
    assert_eq!(p.batch_for(&keyed).unwrap().key(), "ns#m-1");
    let err = p.batch_for(&Message::new(raw, None)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingKey);
    assert!(err.to_string().contains("m-1"), "{err}");
}

#[test]
fn fifo_is_detected_from_the_url() {
    assert!(offline(FIFO_URL).is_fifo());
    assert!(!offline(STANDARD_URL).is_fifo());
}

// ------------------------------------------------------------------ checks before any call

/// Sends `outputs` through an offline publisher and returns the failure, which must have been
/// decided before any call.
async fn refused(publisher: &Publisher, outputs: Vec<Outgoing>) -> PublishFailure {
    let mut batch = publisher.batch("ns#k");
    for o in outputs {
        batch.push(o);
    }
    let err = batch.send().await.expect_err("the batch should be refused");
    assert_eq!(err.kind(), ErrorKind::Publish, "{err}");
    let failure = PublishFailure::of(&err)
        .expect("a PublishFailure source")
        .clone();
    assert!(failure.before_any_call(), "a call was made: {err}");
    assert!(failure.sent().is_empty());
    failure
}

fn codes(f: &PublishFailure) -> Vec<(OutputLabel, String)> {
    f.failed()
        .iter()
        .map(|e| (e.output.clone(), e.code.clone()))
        .collect()
}

#[tokio::test]
async fn fifo_output_without_group_is_refused_before_any_call() {
    let f = refused(
        &offline(FIFO_URL),
        vec![Outgoing::new("a").group_id("g"), Outgoing::new("b")],
    )
    .await;
    assert_eq!(
        codes(&f),
        vec![(OutputLabel::Position(1), "MissingGroupId".into())]
    );
    assert!(f.to_string().contains("MessageGroupId"), "{f}");
}

#[tokio::test]
async fn standard_queue_needs_no_group() {
    // Nothing refused by the checks: the call is made, and fails to connect.
    let mut batch = offline(STANDARD_URL).batch("ns#k");
    batch.push(Outgoing::new("a"));
    let err = batch.send().await.unwrap_err();
    let f = PublishFailure::of(&err).unwrap();
    assert!(!f.before_any_call());
    assert_eq!(f.failed()[0].code, "DispatchFailure", "{err}");
}

#[tokio::test]
async fn oversized_message_is_refused_before_any_call() {
    let p = offline(FIFO_URL);
    let f = refused(
        &p,
        vec![Outgoing::new("x".repeat(DEFAULT_MAX_MESSAGE_BYTES + 1)).group_id("g")],
    )
    .await;
    assert_eq!(
        codes(&f),
        vec![(OutputLabel::Position(0), "MessageTooLong".into())]
    );
    // Attributes count: body exactly at the limit plus one attribute is over.
    let f = refused(
        &p,
        vec![
            Outgoing::new("x".repeat(DEFAULT_MAX_MESSAGE_BYTES - 10))
                .group_id("g")
                .attribute("abc", "defgh"),
        ],
    )
    .await;
    assert_eq!(f.failed()[0].code, "MessageTooLong");
    assert!(
        f.failed()[0]
            .message
            .contains(&DEFAULT_MAX_MESSAGE_BYTES.to_string())
    );
    // A larger configured limit lets it through to the call.
    let big = offline(FIFO_URL).max_message_bytes(1024 * 1024);
    let mut batch = big.batch("ns#k");
    batch.push(Outgoing::new("x".repeat(DEFAULT_MAX_MESSAGE_BYTES + 1)).group_id("g"));
    let err = batch.send().await.unwrap_err();
    assert!(
        !PublishFailure::of(&err).unwrap().before_any_call(),
        "{err}"
    );
}

#[tokio::test]
async fn every_check_reports_its_output() {
    let f = refused(
        &offline(FIFO_URL),
        vec![
            Outgoing::new("ok").group_id("g"),
            Outgoing::new("").group_id("g"),
            Outgoing::new("nul \u{0} inside").group_id("g"),
            Outgoing::new("a").group_id("g".repeat(129)),
            Outgoing::new("a").group_id("has space"),
            Outgoing::new("a").group_id("g").name("dup"),
            Outgoing::new("b").group_id("g").name("dup"),
            Outgoing::new("a")
                .group_id("g")
                .attribute("AWS.reserved", "v"),
        ],
    )
    .await;
    assert_eq!(
        codes(&f),
        vec![
            (OutputLabel::Position(1), "EmptyBody".into()),
            (OutputLabel::Position(2), "InvalidCharacters".into()),
            (OutputLabel::Position(3), "InvalidGroupId".into()),
            (OutputLabel::Position(4), "InvalidGroupId".into()),
            (OutputLabel::Named("dup".into()), "DuplicateName".into()),
            (OutputLabel::Position(5), "InvalidAttributeName".into()),
        ]
    );
    // The body is never quoted in the error.
    assert!(!f.to_string().contains("nul"), "{f}");
}

#[tokio::test]
async fn more_than_ten_attributes_or_a_name_twice_is_refused_with_why() {
    let ten = (0..10).fold(Outgoing::new("ten").group_id("g"), |o, i| {
        o.attribute(format!("a{i}"), "v")
    });
    let eleven = ten.clone().attribute("a10", "v");
    let twice = Outgoing::new("twice")
        .group_id("g")
        .attribute("trace", "1")
        .attribute("trace", "2");
    let f = refused(&offline(FIFO_URL), vec![ten.clone(), eleven, twice]).await;
    assert_eq!(
        codes(&f),
        vec![
            (OutputLabel::Position(1), "TooManyAttributes".into()),
            (OutputLabel::Position(2), "DuplicateAttribute".into()),
        ]
    );
    let text = f.to_string();
    assert!(
        text.contains("11 message attributes") && text.contains("at most 10"),
        "{text}"
    );
    assert!(text.contains("\"trace\" twice"), "{text}");
    // The id attribute counts: ten of the caller's and it make eleven, and its name may not
    // be one of theirs.
    let with_id = offline(FIFO_URL).id_attribute("a0");
    let f = refused(&with_id, vec![ten]).await;
    let codes: Vec<String> = f.failed().iter().map(|e| e.code.clone()).collect();
    assert_eq!(codes, ["TooManyAttributes", "DuplicateAttribute"], "{f}");
}

// ------------------------------------------------------------------ retries (scripted endpoint)

/// A scripted SQS endpoint: each request's decoded JSON body goes to `requests`, and `answer`
/// (given the request number and body) decides the status and JSON reply.
struct Scripted {
    url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

type Answer = dyn Fn(usize, &Value) -> (u16, Value) + Send + Sync;

async fn scripted(
    answer: impl Fn(usize, &Value) -> (u16, Value) + Send + Sync + 'static,
) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
    let answer: Arc<Answer> = Arc::new(answer);
    let log = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let log = log.clone();
            let answer = answer.clone();
            tokio::spawn(async move {
                // HTTP/1.1 with keep-alive: several requests per connection.
                let mut buf: Vec<u8> = Vec::new();
                loop {
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut chunk = [0u8; 4096];
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        let mut chunk = [0u8; 4096];
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body: Value = serde_json::from_slice(&buf[head_end..head_end + len])
                        .unwrap_or(Value::Null);
                    buf.drain(..head_end + len);
                    let n = {
                        let mut log = log.lock().unwrap();
                        log.push(body.clone());
                        log.len() - 1
                    };
                    let (status, reply) = answer(n, &body);
                    let reply = reply.to_string();
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/x-amz-json-1.0\r\n\
                         content-length: {}\r\n\r\n{reply}",
                        reply.len()
                    );
                    if conn.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Scripted { url, requests }
}

fn entry_ids(request: &Value) -> Vec<String> {
    request["Entries"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["Id"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn ok(id: &str) -> Value {
    json!({"Id": id, "MessageId": format!("mid-{id}"), "MD5OfMessageBody": "0", "SequenceNumber": "1"})
}

fn fail(id: &str, sender_fault: bool, code: &str) -> Value {
    json!({"Id": id, "SenderFault": sender_fault, "Code": code, "Message": format!("{code} for {id}")})
}

fn publisher(endpoint: &Scripted, url_path: &str) -> Publisher {
    Publisher::new(
        client(&endpoint.url),
        format!("{}/000000000000/{url_path}", endpoint.url),
    )
    .retry_policy(sqs_claim::RetryPolicy::new(2, Duration::from_millis(1)))
}

#[tokio::test]
async fn server_side_entry_failures_are_retried() {
    // o1 fails with SenderFault=false on the first call, then succeeds.
    let sqs = scripted(|n, req| {
        let ids = entry_ids(req);
        let (good, bad): (Vec<_>, Vec<_>) = ids.iter().partition(|id| n > 0 || id.as_str() != "o1");
        (
            200,
            json!({
                "Successful": good.iter().map(|id| ok(id)).collect::<Vec<_>>(),
                "Failed": bad.iter().map(|id| fail(id, false, "InternalError")).collect::<Vec<_>>(),
            }),
        )
    })
    .await;
    let p = publisher(&sqs, "out.fifo");
    let mut batch = p.batch("ns#k");
    for i in 0..3 {
        batch.push(Outgoing::new(format!("body {i}")).group_id("g"));
    }
    let expected_ids = batch.deduplication_ids();
    let sent = batch.send().await.expect("retried to success");
    assert_eq!(sent.len(), 3);
    let requests = sqs.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(entry_ids(&requests[0]), vec!["o0", "o1", "o2"]);
    assert_eq!(
        entry_ids(&requests[1]),
        vec!["o1"],
        "only the failed entry is retried"
    );
    // The wire carries the derived ids and the group.
    let entries = requests[0]["Entries"].as_array().unwrap();
    for (entry, (_, id)) in entries.iter().zip(&expected_ids) {
        assert_eq!(entry["MessageDeduplicationId"], json!(id));
        assert_eq!(entry["MessageGroupId"], json!("g"));
    }
    assert_eq!(
        requests[1]["Entries"][0]["MessageDeduplicationId"],
        json!(expected_ids[1].1)
    );
}

#[tokio::test]
async fn sender_faults_are_not_retried_and_are_reported() {
    let sqs = scripted(|_, req| {
        let ids = entry_ids(req);
        (
            200,
            json!({
                "Successful": ids.iter().filter(|i| *i != "o1").map(|id| ok(id)).collect::<Vec<_>>(),
                "Failed": [fail("o1", true, "InvalidParameterValue")],
            }),
        )
    })
    .await;
    let p = publisher(&sqs, "out");
    let mut batch = p.batch("ns#k");
    for i in 0..3 {
        batch.push(Outgoing::new(format!("body {i}")));
    }
    let err = batch.send().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Publish);
    let f = PublishFailure::of(&err).unwrap();
    assert_eq!(f.failed().len(), 1);
    assert_eq!(f.failed()[0].output, OutputLabel::Position(1));
    assert_eq!(f.failed()[0].code, "InvalidParameterValue");
    assert_eq!(f.failed()[0].message, "InvalidParameterValue for o1");
    assert!(f.failed()[0].sender_fault);
    assert_eq!(f.sent().len(), 2);
    assert!(
        format!("{err:#}").contains("InvalidParameterValue for o1"),
        "{err:#}"
    );
    assert_eq!(
        sqs.requests.lock().unwrap().len(),
        1,
        "a sender fault must not be retried"
    );
    // A standard queue gets no deduplication id on the wire.
    let requests = sqs.requests.lock().unwrap().clone();
    assert!(
        requests[0]["Entries"][0]
            .get("MessageDeduplicationId")
            .is_none(),
        "{requests:?}"
    );
}

/// A client for `endpoint` whose SDK retries a failed call: `attempts` attempts, tiny backoff.
fn client_with_sdk_retries(endpoint: &str, attempts: u32) -> aws_sdk_sqs::Client {
    let config = client(endpoint)
        .config()
        .to_builder()
        .retry_config(
            aws_sdk_sqs::config::retry::RetryConfig::standard()
                .with_max_attempts(attempts)
                .with_initial_backoff(Duration::from_millis(1))
                .with_max_backoff(Duration::from_millis(5)),
        )
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// A whole call that fails is the SDK's to retry (it sees the 500); the publisher must not
/// loop on top of it, or 3 attempts of ours over 3 of the SDK's make 9 calls.
#[tokio::test]
async fn whole_call_server_errors_are_left_to_the_sdk_and_reported() {
    let sqs = scripted(|_, _| {
        (
            500,
            json!({"__type": "com.amazonaws.sqs#InternalError", "message": "we broke"}),
        )
    })
    .await;
    let send = |client: aws_sdk_sqs::Client| {
        let p = Publisher::new(client, format!("{}/000000000000/out.fifo", sqs.url))
            .retry_policy(sqs_claim::RetryPolicy::new(2, Duration::from_millis(1)));
        let mut batch = p.batch("ns#k");
        batch.push(Outgoing::new("a").group_id("g"));
        batch.push(Outgoing::new("b").group_id("g"));
        batch.send()
    };
    // The SDK's 3 attempts, and no more.
    let err = send(client_with_sdk_retries(&sqs.url, 3))
        .await
        .unwrap_err();
    assert_eq!(
        sqs.requests.lock().unwrap().len(),
        3,
        "the SDK's 3 attempts, none of ours on top"
    );
    let f = PublishFailure::of(&err).unwrap();
    assert_eq!(f.failed().len(), 2);
    assert!(
        f.failed()
            .iter()
            .all(|e| e.code == "InternalError" && !e.sender_fault),
        "{f:?}"
    );
    assert!(format!("{err:#}").contains("we broke"), "{err:#}");
    // Without SDK retries: one call.
    sqs.requests.lock().unwrap().clear();
    send(client(&sqs.url)).await.unwrap_err();
    assert_eq!(
        sqs.requests.lock().unwrap().len(),
        1,
        "no loop of ours on a whole call"
    );
}

/// An endpoint whose every entry fails server-side (`SenderFault=false`) inside a 200 answer.
async fn failing_inside_200() -> Scripted {
    scripted(|_, req| {
        let ids = entry_ids(req);
        (
            200,
            json!({
                "Successful": [],
                "Failed": ids.iter().map(|id| fail(id, false, "InternalError")).collect::<Vec<_>>(),
            }),
        )
    })
    .await
}

/// An entry that keeps failing server-side inside a 200 answer (which the SDK cannot see) is
/// retried by the publisher's policy: `RetryPolicy::new(2, ..)` is 3 attempts in all.
#[tokio::test]
async fn entries_failed_inside_a_200_are_retried_by_the_policy_only() {
    let sqs = failing_inside_200().await;
    let p = Publisher::new(
        client_with_sdk_retries(&sqs.url, 3),
        format!("{}/000000000000/out.fifo", sqs.url),
    )
    .retry_policy(sqs_claim::RetryPolicy::new(2, Duration::from_millis(1)));
    let mut batch = p.batch("ns#k");
    batch.push(Outgoing::new("a").group_id("g"));
    let err = batch.send().await.unwrap_err();
    assert_eq!(
        sqs.requests.lock().unwrap().len(),
        3,
        "1 attempt + 2 retries"
    );
    let f = PublishFailure::of(&err).unwrap();
    assert_eq!(f.failed()[0].code, "InternalError");
    assert!(!f.failed()[0].sender_fault);
}

/// `send_by`: no retry whose backoff would end past the budget's stop.
#[tokio::test]
async fn send_by_never_retries_past_the_stop() {
    let sqs = failing_inside_200().await;
    let p = Publisher::new(client(&sqs.url), format!("{}/000000000000/out", sqs.url))
        .retry_policy(sqs_claim::RetryPolicy::new(5, Duration::from_secs(10)));
    let mut batch = p.batch("ns#k");
    batch.push(Outgoing::new("a"));
    let stop = tokio::time::Instant::now() + Duration::from_secs(1);
    let err = batch.send_by(stop).await.unwrap_err();
    assert!(
        tokio::time::Instant::now() < stop,
        "answered before the stop"
    );
    assert_eq!(
        sqs.requests.lock().unwrap().len(),
        1,
        "a 5 s backoff does not fit in a 1 s budget"
    );
    assert_eq!(
        PublishFailure::of(&err).unwrap().failed()[0].code,
        "InternalError"
    );
}

#[tokio::test]
async fn whole_call_client_errors_are_not_retried() {
    let sqs = scripted(|_, _| {
        (
            400,
            json!({"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "no such queue"}),
        )
    })
    .await;
    let mut batch = publisher(&sqs, "gone.fifo").batch("ns#k");
    batch.push(Outgoing::new("a").group_id("g"));
    let err = batch.send().await.unwrap_err();
    assert_eq!(sqs.requests.lock().unwrap().len(), 1);
    let f = PublishFailure::of(&err).unwrap();
    assert!(f.failed()[0].code.contains("QueueDoesNotExist"), "{f:?}");
    assert!(f.failed()[0].sender_fault);
}

#[tokio::test]
async fn batches_of_ten_and_a_broken_fifo_group_stops() {
    // Output #3 (group "a") fails for good in the first call. Group "a" outputs in the second
    // call must be held back; group "b" goes on.
    let sqs = scripted(|_, req| {
        let ids = entry_ids(req);
        (
            200,
            json!({
                "Successful": ids.iter().filter(|i| *i != "o3").map(|id| ok(id)).collect::<Vec<_>>(),
                "Failed": ids.iter().filter(|i| *i == "o3").map(|id| fail(id, true, "InvalidMessageContents")).collect::<Vec<_>>(),
            }),
        )
    })
    .await;
    let p = publisher(&sqs, "out.fifo");
    let mut batch = p.batch("ns#k");
    for i in 0..14 {
        let group = if i % 2 == 0 { "b" } else { "a" };
        batch.push(Outgoing::new(format!("body {i}")).group_id(group));
    }
    let err = batch.send().await.unwrap_err();
    let requests = sqs.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(entry_ids(&requests[0]).len(), 10);
    // Second call: only group b's outputs 10 and 12.
    assert_eq!(entry_ids(&requests[1]), vec!["o10", "o12"]);
    let f = PublishFailure::of(&err).unwrap();
    assert_eq!(
        codes(f),
        vec![
            (OutputLabel::Position(3), "InvalidMessageContents".into()),
            (
                OutputLabel::Position(11),
                "NotSentAfterEarlierFailure".into()
            ),
            (
                OutputLabel::Position(13),
                "NotSentAfterEarlierFailure".into()
            ),
        ]
    );
    assert_eq!(f.sent().len(), 11);
}

#[tokio::test]
async fn batches_are_cut_by_total_size() {
    let sqs = scripted(|_, req| {
        let ids = entry_ids(req);
        (
            200,
            json!({"Successful": ids.iter().map(|id| ok(id)).collect::<Vec<_>>(), "Failed": []}),
        )
    })
    .await;
    let p = publisher(&sqs, "out").max_message_bytes(100 * 1024);
    let mut batch = p.batch("ns#k");
    for _ in 0..5 {
        batch.push(Outgoing::new("x".repeat(40 * 1024)));
    }
    let sent = batch.send().await.unwrap();
    assert_eq!(sent.len(), 5);
    let sizes: Vec<usize> = sqs
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| entry_ids(r).len())
        .collect();
    assert_eq!(sizes, vec![2, 2, 1], "each call stays under 100 KiB");
}

#[test]
fn group_id_validity_matches_sqs_rules() {
    use sqs_claim::publish::is_valid_group_id;
    assert!(is_valid_group_id("acct-42"));
    assert!(is_valid_group_id(&"a".repeat(128)));
    assert!(!is_valid_group_id(&"a".repeat(129)));
    assert!(!is_valid_group_id(""));
    assert!(!is_valid_group_id("konto-ø"));
    assert!(!is_valid_group_id("with space"));
}
