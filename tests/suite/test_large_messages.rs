//! Large messages through S3 (feature `s3`), on ministack's S3 and SQS: the extended clients'
//! pointers read (the object is the payload the key, the payload check and the handler see),
//! failures that lose nothing (a missing object or one over the limit fails its message alone,
//! for good; S3 going dark fails it for retry, and the retry finds it), the object deleted only
//! after its message's completion committed, and the publisher offloading the same way. The
//! peer tests drive Python's `amazon-sqs-extended-client` itself (`scripts/sqs-extended/`).
//!
//! Needs ministack on `SQS_CLAIM_SQS_ENDPOINT` (default `http://127.0.0.1:4566`), which serves
//! S3 on the same port. Every test makes its own bucket and queues.

use std::collections::HashSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use sqs_claim::large::LargeMessages;

use sqs_claim::publish::{Outgoing, Publisher};
use sqs_claim::store::{Claim, ClaimRequest, ClaimStore, ClaimToken, Completion, MemoryEffect};
use sqs_claim::{
    BatchReport, ErrorKind, FailureKind, KeySource, MemoryStore, Message, Outcome, Processor,
};
use sqs_claim_testkit::fault::{Fault, FaultProxy};
use sqs_claim_testkit::sqs::{Record, fifo, lambda_event, lambda_event_with_deadline, record};

const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";

fn endpoint() -> String {
    std::env::var("SQS_CLAIM_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

fn credentials() -> Credentials {
    Credentials::new("test", "test", None, None, "static-test")
}

/// An S3 client at `endpoint`: path-style, 2 attempts of at most 1 s each (a dark S3 costs
/// seconds, not minutes).
fn s3_at(endpoint: &str) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(credentials())
        .endpoint_url(endpoint)
        .force_path_style(true)
        .retry_config(RetryConfig::standard().with_max_attempts(2))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(1))
                .operation_attempt_timeout(Duration::from_secs(1))
                .operation_timeout(Duration::from_secs(3))
                .build(),
        )
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

fn sqs_at(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "static-test",
        ))
        .endpoint_url(endpoint)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

fn unique(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &id[..12])
}

/// A new bucket on ministack; its name.
async fn bucket(s3: &aws_sdk_s3::Client) -> String {
    let name = unique("sqs-claim-large");
    let Ok(created) = tokio::time::timeout(
        Duration::from_secs(10),
        s3.create_bucket().bucket(&name).send(),
    )
    .await
    else {
        panic!("ministack S3 at {} did not answer", endpoint());
    };
    created.unwrap_or_else(|e| {
        panic!(
            "CreateBucket on ministack at {}: {}",
            endpoint(),
            aws_sdk_s3::error::DisplayErrorContext(&e)
        )
    });
    name
}

async fn queue(sqs: &aws_sdk_sqs::Client) -> String {
    let out = sqs
        .create_queue()
        .queue_name(unique("large"))
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::MaximumMessageSize,
            "1048576",
        )
        .send()
        .await
        .expect("CreateQueue");
    out.queue_url().expect("a url").to_owned()
}

/// A payment of about `size` bytes (padded).
fn payment(order_id: &str, size: usize) -> String {
    let base = serde_json::json!({"order_id": order_id, "account": "acct-1", "amount_cents": 100, "pad": ""});
    let pad = size.saturating_sub(base.to_string().len());
    serde_json::json!({"order_id": order_id, "account": "acct-1", "amount_cents": 100, "pad": "x".repeat(pad)})
        .to_string()
}

async fn put(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, body: &str) {
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body.as_bytes().to_vec()))
        .send()
        .await
        .expect("PutObject");
}

async fn exists(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> bool {
    match s3.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => true,
        Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => false,
        Err(e) => panic!("HeadObject: {}", aws_sdk_s3::error::DisplayErrorContext(&e)),
    }
}

fn pointer(bucket: &str, key: &str) -> String {
    serde_json::json!([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}]).to_string()
}

/// The record an SQS extended client's message arrives as.
fn pointer_record(id: &str, bucket: &str, key: &str, size: usize) -> Record {
    record(id, &pointer(bucket, key)).attr("ExtendedPayloadSize", &size.to_string())
}

/// What the handler saw: (message id, payload length, order id).
type Seen = Arc<Mutex<Vec<(String, usize, String)>>>;

/// A processor keyed as `key`, reading pointers with `large`; its handler records what it saw
/// and fails the orders named `fail-*`.
fn processor(
    store: MemoryStore,
    key: KeySource,
    large: LargeMessages,
) -> (
    Processor<
        MemoryStore,
        impl tower::Service<
            Message,
            Response = (),
            Error = sqs_claim::BoxError,
            Future = impl Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static,
    >,
    Seen,
) {
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let handler = tower::service_fn(move |msg: Message| {
        let log = Arc::clone(&log);
        async move {
            let v: serde_json::Value = msg.json()?;
            let order = v["order_id"].as_str().unwrap_or_default().to_owned();
            log.lock()
                .unwrap()
                .push((msg.id().to_owned(), msg.payload()?.len(), order.clone()));
            if order.starts_with("fail-") {
                return Err(sqs_claim::BoxError::from("the bank said no"));
            }
            Ok(())
        }
    });
    let p = Processor::builder(store, handler)
        .key(key)
        .namespace("large-test")
        .large_messages(large)
        .build();
    (p, seen)
}

fn outcome<'r>(report: &'r BatchReport, id: &str) -> &'r Outcome {
    &report
        .items()
        .iter()
        .find(|i| i.message_id == id)
        .unwrap_or_else(|| panic!("no item {id}"))
        .outcome
}

fn deadline_in(secs: u64) -> u64 {
    (SystemTime::now() + Duration::from_secs(secs))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn the_object_is_the_payload_key_check_and_handler_read() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    let big = payment("order-big", 300 * 1024); // over SQS's default 256 KiB
    let huge = payment("order-huge", 1024 * 1024 + 10); // over SQS's 1 MiB
    put(&s3, &b, "k-big", &big).await;
    put(&s3, &b, "k-huge", &huge).await;
    let (p, seen) = processor(
        MemoryStore::new(),
        KeySource::JsonPointer("/order_id".into()),
        LargeMessages::new(s3.clone()),
    );
    let report = p
        .process(lambda_event(&[
            pointer_record("m-big", &b, "k-big", big.len()),
            // Older clients' attribute name.
            record("m-huge", &pointer(&b, "k-huge"))
                .attr("SQSLargePayloadSize", &huge.len().to_string()),
            // An ordinary message beside them.
            record("m-small", &payment("order-small", 100)),
        ]))
        .await
        .unwrap();
    for id in ["m-big", "m-huge", "m-small"] {
        assert_eq!(outcome(&report, id), &Outcome::Processed, "{id}");
    }
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.contains(&("m-big".into(), big.len(), "order-big".into())),
        "{seen:?}"
    );
    assert!(
        seen.contains(&("m-huge".into(), huge.len(), "order-huge".into())),
        "{seen:?}"
    );
    // The key was read from the object, not the pointer.
    let keys: HashSet<_> = report
        .items()
        .iter()
        .filter_map(|i| i.key.clone())
        .collect();
    assert!(keys.contains("large-test#order-big"), "{keys:?}");
    assert!(keys.contains("large-test#order-huge"), "{keys:?}");
    // The same order offloaded again (another object, another message): a duplicate by its
    // payload's key.
    put(&s3, &b, "k-big-again", &big).await;
    let report = p
        .process(lambda_event(&[pointer_record(
            "m-again",
            &b,
            "k-big-again",
            big.len(),
        )]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-again"), &Outcome::Duplicate);
    // Kept by default.
    assert!(exists(&s3, &b, "k-big").await && exists(&s3, &b, "k-big-again").await);
}

#[tokio::test]
async fn sns_extended_pointer_inside_the_notification() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    let big = payment("order-sns", 400 * 1024);
    put(&s3, &b, "k-sns", &big).await;
    let body = serde_json::json!({
        "Type": "Notification",
        "MessageId": "sns-msg-1",
        "TopicArn": "arn:aws:sns:us-east-1:000000000000:payments",
        "Message": pointer(&b, "k-sns"),
        "Timestamp": "2026-12-03T12:00:00.000Z",
        "MessageAttributes": {"ExtendedPayloadSize": {"Type": "Number", "Value": big.len().to_string()}}
    })
    .to_string();
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let handler = tower::service_fn(move |msg: Message| {
        let log = Arc::clone(&log);
        async move {
            let v: serde_json::Value = msg.json()?;
            log.lock().unwrap().push((
                msg.envelope_id().unwrap_or_default().to_owned(),
                msg.payload()?.len(),
                v["order_id"].as_str().unwrap_or_default().to_owned(),
            ));
            Ok::<(), sqs_claim::Error>(())
        }
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .envelope(sqs_claim::Envelope::Sns)
        .key(KeySource::JsonPointer("/order_id".into()))
        .large_messages(LargeMessages::new(s3.clone()))
        .build();
    let report = p
        .process(lambda_event(&[record("m-1", &body)]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-1"), &Outcome::Processed);
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![("sns-msg-1".to_owned(), big.len(), "order-sns".to_owned())]
    );
}

#[tokio::test]
async fn missing_or_oversized_objects_fail_their_message_alone_for_good() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    let ok = payment("order-ok", 2000);
    let big = payment("order-secret-payload", 5000);
    put(&s3, &b, "k-ok", &ok).await;
    put(&s3, &b, "k-big", &big).await;
    let (p, seen) = processor(
        MemoryStore::new(),
        KeySource::JsonPointer("/order_id".into()),
        LargeMessages::new(s3.clone()).max_bytes(4096),
    );
    let report = p
        .process(lambda_event(&[
            // Deleted (or never written) before the message arrived.
            pointer_record("m-missing", &b, "k-gone", 2000),
            // Over the limit by S3's answer (the attribute understates it).
            pointer_record("m-big", &b, "k-big", 100),
            // Over the limit by its attribute: not even fetched.
            pointer_record("m-declared", &b, "k-ok", 1_000_000),
            // A body with the attribute that is no pointer.
            record("m-bad", "not a pointer").attr("ExtendedPayloadSize", "10"),
            pointer_record("m-ok", &b, "k-ok", ok.len()),
        ]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-ok"), &Outcome::Processed);
    for id in ["m-missing", "m-big", "m-declared", "m-bad"] {
        let Outcome::Failed(f) = outcome(&report, id) else {
            panic!("{id}: {:?}", outcome(&report, id));
        };
        assert_eq!(f.kind, FailureKind::LargePayload, "{id}: {f:?}");
        assert!(f.permanent, "{id}: {f:?}");
        assert!(!f.message.contains("secret"), "{id}: {}", f.message);
        assert!(!f.message.contains("xxxx"), "{id}: {}", f.message);
    }
    let Outcome::Failed(missing) = outcome(&report, "m-missing") else {
        unreachable!()
    };
    assert!(
        missing.message.contains(&format!("s3://{b}/k-gone")),
        "{}",
        missing.message
    );
    assert!(
        missing.message.contains("does not exist"),
        "{}",
        missing.message
    );
    // Only m-ok reached the handler; the failed ones are in the partial batch response.
    assert_eq!(seen.lock().unwrap().len(), 1);
    let failed: HashSet<String> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(failed.len(), 4, "{failed:?}");
}

/// The safety rules of deletion: after the completion committed, never for a failed message,
/// never for a skipped duplicate, once per object.
#[tokio::test]
async fn objects_are_deleted_only_for_messages_done() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    for (key, order) in [
        ("k-done", "order-done"),
        ("k-fail", "fail-order"),
        ("k-shared", "order-shared"),
    ] {
        put(&s3, &b, key, &payment(order, 3000)).await;
    }
    let store = MemoryStore::new();
    let (p, _seen) = processor(
        store.clone(),
        KeySource::MessageId,
        LargeMessages::new(s3.clone()).delete_after_completion(true),
    );
    let report = p
        .process(lambda_event(&[
            pointer_record("m-done", &b, "k-done", 3000),
            pointer_record("m-fail", &b, "k-fail", 3000),
            // Two messages pointing at one object: both done, one delete.
            pointer_record("m-shared-1", &b, "k-shared", 3000),
            pointer_record("m-shared-2", &b, "k-shared", 3000),
        ]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-done"), &Outcome::Processed);
    assert!(matches!(outcome(&report, "m-fail"), Outcome::Failed(_)));
    assert!(!exists(&s3, &b, "k-done").await, "deleted once done");
    assert!(
        exists(&s3, &b, "k-fail").await,
        "a failed message keeps its object"
    );
    assert!(!exists(&s3, &b, "k-shared").await);

    // A duplicate (a redelivery of m-done, whose object went with it): skipped as one, not a
    // missing-object failure, and nothing deleted.
    let report = p
        .process(lambda_event(&[pointer_record(
            "m-done", &b, "k-done", 3000,
        )]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-done"), &Outcome::Duplicate);

    // A duplicate with an object of its own (a producer's resend through an extended client
    // uploads the payload again): skipped, and its object deleted, as nothing else would.
    put(&s3, &b, "k-done-copy", &payment("order-done", 3000)).await;
    let report = p
        .process(lambda_event(&[
            // Same message id (the key) as the message done, another object.
            pointer_record("m-done", &b, "k-done-copy", 3000),
        ]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-done"), &Outcome::Duplicate);
    assert!(
        !exists(&s3, &b, "k-done-copy").await,
        "a skipped duplicate's own object is deleted"
    );

    // The failed message's retry finds its object.
    assert!(exists(&s3, &b, "k-fail").await);
}

/// One-shot mode (the reference consumer's default), deletion on, the key from the record: a
/// redelivery of a message done before, whose object went after its completion, is skipped as
/// a duplicate (the effects function never runs without its payload), not failed for good as
/// `large_payload`; a message never done whose object is missing still fails for good, and the
/// claim taken to find out is released, so its retry runs once the object is there.
#[tokio::test]
async fn one_shot_redelivery_of_a_done_message_without_its_object_is_a_duplicate() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    put(&s3, &b, "k-done", &payment("order-done", 3000)).await;
    let store = MemoryStore::new();
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let p = Processor::one_shot(store.clone(), move |msg: &Message| {
        let v: serde_json::Value = msg.json()?;
        let order = v["order_id"].as_str().unwrap_or_default().to_owned();
        log.lock()
            .unwrap()
            .push((msg.id().to_owned(), msg.payload()?.len(), order));
        Ok(sqs_claim::Effects::one(MemoryEffect::new(|| {})))
    })
    .key(KeySource::MessageId)
    .namespace("large-one-shot")
    .large_messages(LargeMessages::new(s3.clone()).delete_after_completion(true))
    .build();
    assert!(p.is_one_shot());

    let report = p
        .process(lambda_event(&[
            pointer_record("m-done", &b, "k-done", 3000),
            // Never done, its object not there (yet).
            pointer_record("m-new", &b, "k-late", 3000),
        ]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-done"), &Outcome::Processed);
    let Outcome::Failed(f) = outcome(&report, "m-new") else {
        panic!("m-new: {:?}", outcome(&report, "m-new"));
    };
    assert_eq!(f.kind, FailureKind::LargePayload, "{f:?}");
    assert!(f.permanent, "{f:?}");
    assert!(!exists(&s3, &b, "k-done").await, "deleted once done");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "only m-done computed effects"
    );

    // The redelivery of m-done: its object is gone, its key completed.
    let report = p
        .process(lambda_event(&[pointer_record(
            "m-done", &b, "k-done", 3000,
        )]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-done"), &Outcome::Duplicate);
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "nothing ran for the duplicate"
    );

    // m-new's claim was released: its retry, its object now there, runs and commits.
    put(&s3, &b, "k-late", &payment("order-late", 3000)).await;
    let report = p
        .process(lambda_event(&[pointer_record("m-new", &b, "k-late", 3000)]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-new"), &Outcome::Processed);
    assert!(!exists(&s3, &b, "k-late").await);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// Copies of one key in one batch (a producer's resend, each with an object of its own): the
/// first runs, the later copy is a duplicate of it, and both objects go.
#[tokio::test]
async fn a_copy_in_the_batch_has_its_own_object_deleted_too() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    put(&s3, &b, "k-first", &payment("order-1", 3000)).await;
    put(&s3, &b, "k-copy", &payment("order-1", 3000)).await;
    let (p, _seen) = processor(
        MemoryStore::new(),
        KeySource::JsonPointer("/order_id".into()),
        LargeMessages::new(s3.clone()).delete_after_completion(true),
    );
    let report = p
        .process(lambda_event(&[
            pointer_record("m-first", &b, "k-first", 3000),
            pointer_record("m-copy", &b, "k-copy", 3000),
        ]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-first"), &Outcome::Processed);
    assert_eq!(outcome(&report, "m-copy"), &Outcome::Duplicate);
    assert!(!exists(&s3, &b, "k-first").await);
    assert!(
        !exists(&s3, &b, "k-copy").await,
        "the skipped copy's own object is deleted"
    );

    // Deletion off: every object stays, duplicates' too.
    put(&s3, &b, "k-kept", &payment("order-2", 3000)).await;
    put(&s3, &b, "k-kept-copy", &payment("order-2", 3000)).await;
    let (p, _seen) = processor(
        MemoryStore::new(),
        KeySource::JsonPointer("/order_id".into()),
        LargeMessages::new(s3.clone()),
    );
    let report = p
        .process(lambda_event(&[
            pointer_record("m-kept", &b, "k-kept", 3000),
            pointer_record("m-kept-copy", &b, "k-kept-copy", 3000),
        ]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-kept-copy"), &Outcome::Duplicate);
    assert!(exists(&s3, &b, "k-kept").await && exists(&s3, &b, "k-kept-copy").await);
}

/// The sender names the bucket: with an allowlist, a pointer to another bucket is never
/// fetched (nor deleted) and fails its message for good, the reason naming the bucket.
#[tokio::test]
async fn a_pointer_to_a_bucket_not_allowed_fails_for_good_naming_it() {
    let s3 = s3_at(&endpoint());
    let allowed = bucket(&s3).await;
    let other = bucket(&s3).await;
    put(&s3, &allowed, "k-ok", &payment("order-ok", 3000)).await;
    put(&s3, &other, "k-other", &payment("order-other", 3000)).await;
    let (p, seen) = processor(
        MemoryStore::new(),
        KeySource::MessageId,
        LargeMessages::new(s3.clone())
            .allowed_buckets([allowed.clone()])
            .delete_after_completion(true),
    );
    let report = p
        .process(lambda_event(&[
            pointer_record("m-ok", &allowed, "k-ok", 3000),
            pointer_record("m-other", &other, "k-other", 3000),
        ]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-ok"), &Outcome::Processed);
    let Outcome::Failed(f) = outcome(&report, "m-other") else {
        panic!("m-other: {:?}", outcome(&report, "m-other"));
    };
    assert_eq!(f.kind, FailureKind::LargePayload, "{f:?}");
    assert!(f.permanent, "{f:?}");
    assert!(
        f.message.contains(&other),
        "names the bucket: {}",
        f.message
    );
    assert!(!f.message.contains("order-other"), "{}", f.message);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "only m-ok ran: {seen:?}");
    assert!(!exists(&s3, &allowed, "k-ok").await, "deleted once done");
    assert!(
        exists(&s3, &other, "k-other").await,
        "another bucket's object is never touched"
    );
}

/// S3 going dark: the message fails for retry (not for good), inside the time budget, and its
/// retry once S3 is back finds it: nothing lost.
#[tokio::test]
async fn s3_dark_is_retried_and_nothing_is_lost() {
    let direct = s3_at(&endpoint());
    let b = bucket(&direct).await;
    let body = payment("order-dark", 50_000);
    put(&direct, &b, "k-dark", &body).await;
    let (proxy, url) = FaultProxy::in_front_of(&endpoint()).await.unwrap();
    let s3 = s3_at(&url);
    let (p, seen) = processor(
        MemoryStore::new(),
        KeySource::MessageId,
        LargeMessages::new(s3).delete_after_completion(true),
    );
    proxy.handle().set(Fault::Dark);
    let started = std::time::Instant::now();
    let report = p
        .process(lambda_event_with_deadline(
            &[pointer_record("m-dark", &b, "k-dark", body.len())],
            deadline_in(8),
        ))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "inside the budget"
    );
    let Outcome::Failed(f) = outcome(&report, "m-dark") else {
        panic!("{:?}", outcome(&report, "m-dark"));
    };
    assert_eq!(f.kind, FailureKind::LargePayload);
    assert!(!f.permanent, "an outage is transient: {f:?}");
    assert_eq!(report.response().batch_item_failures.len(), 1);
    assert!(seen.lock().unwrap().is_empty());
    assert!(exists(&direct, &b, "k-dark").await);

    // S3 back: the redelivery runs it.
    proxy.handle().set(Fault::Pass);
    let report = p
        .process(lambda_event_with_deadline(
            &[pointer_record("m-dark", &b, "k-dark", body.len()).receive_count(2)],
            deadline_in(8),
        ))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-dark"), &Outcome::Processed);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(!exists(&direct, &b, "k-dark").await);
}

/// The publisher offloads a body over its threshold in the pointer format, with the attribute.
#[tokio::test]
async fn the_publisher_offloads_as_the_extended_clients_do() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    let sqs = sqs_at(&endpoint());
    let q = queue(&sqs).await;
    let big = payment("order-out", 600 * 1024);
    let publisher = Publisher::new(sqs.clone(), q.clone())
        .max_message_bytes(1024 * 1024)
        .offload_to(s3.clone(), b.clone(), 256 * 1024);
    let mut out = publisher.batch("input-1");
    out.push(Outgoing::new(big.clone()));
    out.push(Outgoing::new(payment("order-small", 100)));
    out.send().await.expect("sent");
    let got = sqs
        .receive_message()
        .queue_url(&q)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap();
    let messages = got.messages();
    assert_eq!(messages.len(), 2);
    let offloaded = messages
        .iter()
        .find(|m| m.body().unwrap_or_default().starts_with("[\""))
        .expect("the pointer");
    let attr = &offloaded.message_attributes().unwrap()["ExtendedPayloadSize"];
    assert_eq!(attr.data_type(), "Number");
    assert_eq!(attr.string_value(), Some(big.len().to_string().as_str()));
    let v: serde_json::Value = serde_json::from_str(offloaded.body().unwrap()).unwrap();
    assert_eq!(v[0], POINTER_CLASS);
    assert_eq!(v[1]["s3BucketName"], b.as_str());
    let key = v[1]["s3Key"].as_str().unwrap();
    let object = s3.get_object().bucket(&b).key(key).send().await.unwrap();
    let bytes = object.body.collect().await.unwrap().into_bytes();
    assert_eq!(bytes.as_ref(), big.as_bytes());
}

// --- The Python extended client as the peer --------------------------------------------------

fn peer(args: &[&str]) -> serde_json::Value {
    let root = env!("CARGO_MANIFEST_DIR");
    let venv = Command::new(format!("{root}/scripts/sqs-extended/venv.sh"))
        .output()
        .expect("scripts/sqs-extended/venv.sh");
    assert!(
        venv.status.success(),
        "venv: {}",
        String::from_utf8_lossy(&venv.stderr)
    );
    let python = String::from_utf8(venv.stdout).unwrap().trim().to_owned();
    let out = Command::new(python)
        .arg(format!("{root}/scripts/sqs-extended/peer.py"))
        .args(args)
        .env("AWS_ENDPOINT_URL", endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()
        .expect("the peer");
    assert!(
        out.status.success(),
        "peer {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the peer's JSON")
}

/// Receives what the queue holds as a Lambda event's records (with their message attributes,
/// as the event source mapping passes them).
async fn receive_as_records(sqs: &aws_sdk_sqs::Client, q: &str, n: usize) -> Vec<Record> {
    let mut records = Vec::new();
    for _ in 0..10 {
        let got = sqs
            .receive_message()
            .queue_url(q)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        for m in got.messages() {
            let mut r = record(m.message_id().unwrap(), m.body().unwrap());
            for (name, v) in m.message_attributes().into_iter().flatten() {
                r = r.attr(name, v.string_value().unwrap_or_default());
            }
            records.push(r);
        }
        if records.len() >= n {
            break;
        }
    }
    records
}

#[tokio::test]
async fn we_read_what_the_python_extended_client_sends() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    let sqs = sqs_at(&endpoint());
    let q = queue(&sqs).await;
    let sizes = [
        ("py-300k", 300 * 1024, false),
        ("py-1m", 1024 * 1024 + 100, false),
        ("py-legacy", 400 * 1024, true),
        ("py-small", 1000, false),
    ];
    for (order, size, legacy) in sizes {
        let mut args = vec![
            "send".to_owned(),
            q.clone(),
            b.clone(),
            order.to_owned(),
            "acct-py".to_owned(),
            "250".to_owned(),
            size.to_string(),
        ];
        if legacy {
            args.push("legacy".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        peer(&args);
    }
    let records = receive_as_records(&sqs, &q, sizes.len()).await;
    assert_eq!(records.len(), sizes.len());
    let (p, seen) = processor(
        MemoryStore::new(),
        KeySource::JsonPointer("/order_id".into()),
        LargeMessages::new(s3.clone()).delete_after_completion(true),
    );
    let report = p.process(lambda_event(&records)).await.unwrap();
    for item in report.items() {
        assert_eq!(item.outcome, Outcome::Processed, "{item:?}");
    }
    let mut orders: Vec<(String, usize)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, len, order)| (order.clone(), *len))
        .collect();
    orders.sort();
    let mut want: Vec<(String, usize)> = sizes
        .iter()
        .map(|(o, size, _)| (o.to_string(), *size))
        .collect();
    want.sort();
    assert_eq!(orders, want);
    // Every offloaded object went once its message was done.
    let listed = s3.list_objects_v2().bucket(&b).send().await.unwrap();
    assert_eq!(listed.key_count(), Some(0), "{:?}", listed.contents());
}

#[tokio::test]
async fn the_python_extended_client_reads_what_we_send() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    let sqs = sqs_at(&endpoint());
    let q = queue(&sqs).await;
    let big = payment("rust-big", 700 * 1024);
    let small = payment("rust-small", 500);
    let publisher = Publisher::new(sqs.clone(), q.clone())
        .max_message_bytes(1024 * 1024)
        .offload_to(s3.clone(), b.clone(), 256 * 1024);
    let mut out = publisher.batch("input-py");
    out.push(Outgoing::new(big.clone()));
    out.push(Outgoing::new(small.clone()));
    out.send().await.expect("sent");
    let got = peer(&["receive", &q, &b, "2"]);
    let mut got: Vec<(String, u64)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["order_id"].as_str().unwrap().to_owned(),
                m["body_len"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("rust-big".to_owned(), big.len() as u64),
            ("rust-small".to_owned(), small.len() as u64)
        ]
    );
}

/// Received from `q` as a Lambda event's records, each attribute with its data type (as the
/// event source mapping passes them), `receives` as their `ApproximateReceiveCount`; with
/// their receipt handles.
async fn receive_typed(
    sqs: &aws_sdk_sqs::Client,
    q: &str,
    n: usize,
    receives: u32,
) -> (Vec<Record>, Vec<String>) {
    let mut handles = Vec::new();
    let mut records = Vec::new();
    for _ in 0..10 {
        let got = sqs
            .receive_message()
            .queue_url(q)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        for m in got.messages() {
            let mut r = record(m.message_id().unwrap(), m.body().unwrap()).receive_count(receives);
            for (name, v) in m.message_attributes().into_iter().flatten() {
                r = r.typed_attr(name, v.data_type(), v.string_value().unwrap_or_default());
            }
            records.push(r);
            handles.push(m.receipt_handle().unwrap().to_owned());
        }
        if records.len() >= n {
            break;
        }
    }
    (records, handles)
}

/// Deletes the messages received with `handles` from `q` (what the event source mapping does
/// with the messages a batch reported handled).
async fn delete(sqs: &aws_sdk_sqs::Client, q: &str, handles: &[String]) {
    for h in handles {
        sqs.delete_message()
            .queue_url(q)
            .receipt_handle(h)
            .send()
            .await
            .expect("DeleteMessage");
    }
}

/// What docs/operating.md does where `StartMessageMoveTask` is missing (ministack lacks it):
/// each message of `from` received with its attributes, sent to `to` with the same body and
/// attributes, then deleted from `from`. How many moved.
async fn move_back(sqs: &aws_sdk_sqs::Client, from: &str, to: &str) -> usize {
    let mut moved = 0;
    for _ in 0..5 {
        let got = sqs
            .receive_message()
            .queue_url(from)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        if got.messages().is_empty() {
            break;
        }
        for m in got.messages() {
            sqs.send_message()
                .queue_url(to)
                .message_body(m.body().unwrap())
                .set_message_attributes(m.message_attributes().cloned())
                .send()
                .await
                .expect("SendMessage");
            sqs.delete_message()
                .queue_url(from)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .expect("DeleteMessage");
            moved += 1;
        }
    }
    moved
}

/// A large message (an S3 pointer with `ExtendedPayloadSize`) and a small one, both keyed by
/// an attribute as large-messages.md advises with deletion on, fail on their last receive and
/// go to the failure queue with their own attributes; moved back after the fix, each runs
/// once (not `missing_key`, not a body read as its pointer), and a redelivery is a duplicate.
#[tokio::test]
async fn failed_large_and_attribute_keyed_messages_move_back_and_run_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let s3 = s3_at(&endpoint());
    let sqs = sqs_at(&endpoint());
    let b = bucket(&s3).await;
    let source = queue(&sqs).await;
    let failures = queue(&sqs).await;
    let big = payment("order-big", 300 * 1024);
    put(&s3, &b, "k-big", &big).await;
    // The producers: an extended client's pointer, and a plain message; each with its key.
    sqs.send_message()
        .queue_url(&source)
        .message_body(pointer(&b, "k-big"))
        .message_attributes(
            "ExtendedPayloadSize",
            aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("Number")
                .string_value(big.len().to_string())
                .build()
                .unwrap(),
        )
        .message_attributes(
            "Idem",
            aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value("idem-big")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("SendMessage");
    sqs.send_message()
        .queue_url(&source)
        .message_body(payment("order-small", 200))
        .message_attributes(
            "Idem",
            aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value("idem-small")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("SendMessage");

    // The handler fails every payment while the bank is down.
    let down = Arc::new(AtomicBool::new(true));
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let (flag, log) = (Arc::clone(&down), Arc::clone(&ran));
    let handler = tower::service_fn(move |msg: Message| {
        let (flag, log) = (Arc::clone(&flag), Arc::clone(&log));
        async move {
            let v: serde_json::Value = msg.json()?;
            if flag.load(Ordering::SeqCst) {
                return Err(sqs_claim::BoxError::from("the bank is down"));
            }
            log.lock()
                .unwrap()
                .push(v["order_id"].as_str().unwrap_or_default().to_owned());
            Ok(())
        }
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .key(KeySource::MessageAttribute("Idem".into()))
        .namespace("large-move-back")
        .large_messages(
            LargeMessages::new(s3.clone())
                .allowed_buckets([b.clone()])
                .delete_after_completion(true),
        )
        .failure_destination(
            sqs_claim::FailureDestination::publisher(
                Publisher::new(sqs.clone(), &failures).max_message_bytes(1024 * 1024),
            )
            .after_receives(5),
        )
        .build();

    // Their last allowed receive: both fail, and go to the failure queue.
    let (records, handles) = receive_typed(&sqs, &source, 2, 5).await;
    assert_eq!(records.len(), 2);
    let report = p.process(lambda_event(&records)).await.unwrap();
    for item in report.items() {
        assert!(matches!(item.outcome, Outcome::DeadLettered(_)), "{item:?}");
    }
    assert!(report.response().batch_item_failures.is_empty());
    assert!(
        exists(&s3, &b, "k-big").await,
        "a failed message keeps its object"
    );
    // Lambda deletes what was reported handled.
    delete(&sqs, &source, &handles).await;

    // In the failure queue: each with its own attributes, and why.
    let (held, handles) = receive_typed(&sqs, &failures, 2, 1).await;
    assert_eq!(held.len(), 2);
    let event = sqs_claim_testkit::sqs::event_json(&held);
    for r in event["Records"].as_array().unwrap() {
        let attrs = &r["messageAttributes"];
        assert!(attrs["Idem"]["stringValue"].is_string(), "{attrs}");
        let f: serde_json::Value =
            serde_json::from_str(attrs["sqs-claim.failure"]["stringValue"].as_str().unwrap())
                .unwrap();
        assert_eq!(f["kind"], "handler_error", "{f}");
        assert!(
            f["reason"].as_str().unwrap().contains("the bank is down"),
            "{f}"
        );
        if r["body"].as_str().unwrap().contains(POINTER_CLASS) {
            assert_eq!(
                attrs["ExtendedPayloadSize"]["dataType"], "Number",
                "{attrs}"
            );
            assert_eq!(
                attrs["ExtendedPayloadSize"]["stringValue"],
                big.len().to_string()
            );
            assert_eq!(f["key"], "large-move-back#idem-big");
        } else {
            assert_eq!(f["key"], "large-move-back#idem-small");
        }
    }

    // Read, not taken: visible again at once.
    for h in &handles {
        sqs.change_message_visibility()
            .queue_url(&failures)
            .receipt_handle(h)
            .visibility_timeout(0)
            .send()
            .await
            .expect("ChangeMessageVisibility");
    }

    // The bank is back; the messages are moved back as docs/operating.md does it without
    // StartMessageMoveTask.
    down.store(false, Ordering::SeqCst);
    let mut moved = move_back(&sqs, &failures, &source).await;
    for _ in 0..10 {
        if moved >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        moved += move_back(&sqs, &failures, &source).await;
    }
    assert_eq!(moved, 2, "both moved back");

    let (records, _) = receive_typed(&sqs, &source, 2, 1).await;
    assert_eq!(records.len(), 2);
    let report = p.process(lambda_event(&records)).await.unwrap();
    for item in report.items() {
        assert_eq!(item.outcome, Outcome::Processed, "{item:?}");
    }
    let mut done = ran.lock().unwrap().clone();
    done.sort();
    assert_eq!(done, ["order-big", "order-small"], "each ran once");
    assert!(!exists(&s3, &b, "k-big").await, "deleted once done");

    // A redelivery of both (a lost answer): duplicates by their attribute, nothing runs.
    let report = p.process(lambda_event(&records)).await.unwrap();
    for item in report.items() {
        assert_eq!(item.outcome, Outcome::Duplicate, "{item:?}");
    }
    assert_eq!(ran.lock().unwrap().len(), 2, "each processed once");
}

/// A memory store whose completions are refused for good: the handler's work is done, its
/// completion never recorded.
#[derive(Clone)]
struct CompletionRefused(MemoryStore);

impl ClaimStore for CompletionRefused {
    type Effect = MemoryEffect;

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, sqs_claim::Error> {
        self.0.claim(req).await
    }

    async fn complete_with(
        &self,
        _key: &str,
        _token: &ClaimToken,
        _completion: Completion<MemoryEffect>,
    ) -> Result<(), sqs_claim::Error> {
        Err(sqs_claim::Error::new(
            ErrorKind::StoreRejected,
            "completion refused (test)",
        ))
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), sqs_claim::Error> {
        self.0.release(key, token).await
    }
}

/// A message reported done whose completion was not recorded keeps its object: its side
/// effect happened (so it is not reported for retry), but its key is not completed, and a copy
/// of the message delivered again (at least once) runs it again, which needs the payload. Only
/// a committed completion (or a skipped duplicate) lets the cleanup delete.
#[tokio::test]
async fn an_object_stays_when_its_completion_was_not_recorded() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    put(&s3, &b, "k-unrecorded", &payment("order-unrecorded", 3000)).await;
    let handler = tower::service_fn(|_: Message| async { Ok::<(), sqs_claim::BoxError>(()) });
    let p = Processor::builder(CompletionRefused(MemoryStore::new()), handler)
        .key(KeySource::MessageId)
        .namespace("large-test")
        .large_messages(LargeMessages::new(s3.clone()).delete_after_completion(true))
        .build();
    let report = p
        .process(lambda_event(&[pointer_record(
            "m-unrecorded",
            &b,
            "k-unrecorded",
            3000,
        )]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-unrecorded"), &Outcome::Processed);
    assert!(
        exists(&s3, &b, "k-unrecorded").await,
        "the object of a message whose completion was not recorded was deleted"
    );
}

/// A FIFO extended client's message in group `group`.
fn fifo_pointer(id: &str, group: &str, bucket: &str, key: &str) -> Record {
    fifo(id, group, &pointer(bucket, key)).attr("ExtendedPayloadSize", "3000")
}

/// On a FIFO queue (the items run in lanes) the objects of the messages done go too, once
/// their completion committed; a failed message's stays, as does the rest of its group's.
#[tokio::test]
async fn fifo_messages_done_have_their_objects_deleted() {
    let s3 = s3_at(&endpoint());
    let b = bucket(&s3).await;
    for (key, order) in [
        ("k-a1", "order-a1"),
        ("k-a2", "order-a2"),
        ("k-b1", "fail-b1"),
        ("k-b2", "order-b2"),
    ] {
        put(&s3, &b, key, &payment(order, 3000)).await;
    }
    let (p, _seen) = processor(
        MemoryStore::new(),
        KeySource::MessageId,
        LargeMessages::new(s3.clone()).delete_after_completion(true),
    );
    let report = p
        .process(lambda_event(&[
            fifo_pointer("m-a1", "a", &b, "k-a1"),
            fifo_pointer("m-a2", "a", &b, "k-a2"),
            fifo_pointer("m-b1", "b", &b, "k-b1"),
            fifo_pointer("m-b2", "b", &b, "k-b2"),
        ]))
        .await
        .unwrap();
    assert_eq!(outcome(&report, "m-a1"), &Outcome::Processed);
    assert_eq!(outcome(&report, "m-a2"), &Outcome::Processed);
    assert!(matches!(outcome(&report, "m-b1"), Outcome::Failed(_)));
    assert!(matches!(outcome(&report, "m-b2"), Outcome::NotStarted(_)));
    assert!(
        !exists(&s3, &b, "k-a1").await,
        "a FIFO message done kept its object"
    );
    assert!(
        !exists(&s3, &b, "k-a2").await,
        "a FIFO message done kept its object"
    );
    assert!(
        exists(&s3, &b, "k-b1").await,
        "a failed FIFO message lost its object"
    );
    assert!(
        exists(&s3, &b, "k-b2").await,
        "a FIFO message not started lost its object"
    );
}
