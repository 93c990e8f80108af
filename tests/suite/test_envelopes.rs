//! Envelopes: SNS → SQS, EventBridge → SQS and S3 notifications → SQS, in AWS's documented
//! shapes (`sqs_claim_testkit::envelope`), keyed and handed to the handler through the
//! processor's [`Envelope`], and the `~json` pointer that reads through a string holding JSON
//! without one.

use crate::support;

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use sqs_claim::claim::KeyFormat;
use sqs_claim::store::{Status, StoreAdmin};
use sqs_claim::{
    Envelope, ErrorKind, FailureKind, KeySource, MemoryStore, Message, Outcome, Processor,
};
use sqs_claim_testkit::envelope::{
    eventbridge_event, s3_notification, s3_record, s3_test_event, sns_notification,
    sns_subscription_confirmation,
};
use support::batch::*;

/// What a handler saw: (message id, the payload as JSON, the envelope id).
type Payloads = Arc<Mutex<Vec<(String, Value, Option<String>)>>>;

/// A processor whose handler decodes each payload as JSON and records it.
fn processor(
    store: &MemoryStore,
    envelope: Envelope,
    key: &str,
) -> (
    Processor<
        MemoryStore,
        impl tower::Service<Message, Response = (), Error = sqs_claim::Error, Future: Send + 'static>
        + Clone
        + Send
        + Sync
        + 'static,
    >,
    Payloads,
) {
    let seen: Payloads = Arc::default();
    let handler = {
        let seen = Arc::clone(&seen);
        tower::service_fn(move |msg: Message| {
            let seen = Arc::clone(&seen);
            async move {
                let payload: Value = msg.json()?;
                let envelope_id = msg.envelope_id().map(str::to_owned);
                seen.lock()
                    .unwrap()
                    .push((msg.id().to_owned(), payload, envelope_id));
                Ok::<(), sqs_claim::Error>(())
            }
        })
    };
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .envelope(envelope)
        .key(key.parse::<KeySource>().unwrap())
        .build();
    (p, seen)
}

fn order(id: &str, amount: i64) -> String {
    json!({"order_id": id, "account": "acct-alice", "amount_cents": amount}).to_string()
}

async fn completed(store: &MemoryStore, key: &str) -> bool {
    store.status(key) == Some(Status::Completed)
}

fn failure(outcome: &Outcome) -> &sqs_claim::Failure {
    match outcome {
        Outcome::Failed(f) => f,
        other => panic!("expected a failure, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// SNS → SQS
// ---------------------------------------------------------------------------------------------

/// A producer that publishes one order twice to the topic: two notifications (their own SNS
/// message ids, so two envelopes that differ), two SQS messages. Keyed on the payload's
/// `order_id`, the second is a duplicate, and the payloads compare equal (the envelopes do not).
#[tokio::test]
async fn sns_payload_keys_catch_a_producer_that_publishes_twice() {
    init_logs();
    let store = MemoryStore::new();
    let (p, seen) = processor(&store, Envelope::Sns, "json:/order_id");
    let batch = [
        rec("m-1", &sns_notification("sns-1", &order("ord-1", 500))),
        rec("m-2", &sns_notification("sns-2", &order("ord-2", 700))),
        rec("m-3", &sns_notification("sns-3", &order("ord-1", 500))),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(
        outcome_names(&report),
        ["processed", "processed", "duplicate"]
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].1["order_id"], "ord-1");
    assert_eq!(seen[0].1["amount_cents"], 500);
    assert_eq!(seen[0].2.as_deref(), Some("sns-1"));
    assert!(completed(&store, "t#ord-1").await);
    assert!(completed(&store, "t#ord-2").await);

    // Published again later: a new notification, a new SQS message, across batches.
    let again = [rec("m-4", &sns_notification("sns-4", &order("ord-1", 500)))];
    let report = p.process(event(&again)).await.unwrap();
    assert_eq!(outcome_names(&report), ["duplicate"]);
}

/// Same key, other payload, through the envelope: the payload check still sees it.
#[tokio::test]
async fn sns_payload_check_compares_payloads_not_envelopes() {
    let store = MemoryStore::new();
    let (p, _) = processor(&store, Envelope::Sns, "json:/order_id");
    let batch = [
        rec("m-1", &sns_notification("sns-1", &order("ord-1", 500))),
        rec("m-2", &sns_notification("sns-2", &order("ord-1", 999))),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    let f = failure(&report.items()[1].outcome);
    assert_eq!(f.kind, FailureKind::PayloadMismatch, "{f:?}");
}

/// SNS resends a notification under its first `MessageId`; each resend is a new SQS message.
/// `envelope-id` catches it; a second publish of the same payload (a new `MessageId`) is new.
#[tokio::test]
async fn sns_message_id_catches_sns_redeliveries() {
    let store = MemoryStore::new();
    let (p, seen) = processor(&store, Envelope::Sns, "envelope-id");
    let body = sns_notification("63a3f6b6-d533-4a47-aef9-fcf5cf758c76", &order("ord-1", 5));
    let batch = [
        rec("m-1", &body),
        rec("m-2", &sns_notification("sns-other", &order("ord-1", 5))),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed", "processed"]);
    assert!(completed(&store, "t#63a3f6b6-d533-4a47-aef9-fcf5cf758c76").await);

    let resent = [rec("m-3", &body)];
    let report = p.process(event(&resent)).await.unwrap();
    assert_eq!(outcome_names(&report), ["duplicate"]);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// Without an envelope, `~json` reads the same key out of the same bodies.
#[tokio::test]
async fn json_in_a_string_pointer_keys_sns_bodies_without_an_envelope() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .key("json:/Message/~json/order_id".parse::<KeySource>().unwrap())
        .build();
    let batch = [
        rec("m-1", &sns_notification("sns-1", &order("ord-1", 500))),
        rec("m-2", &sns_notification("sns-2", &order("ord-1", 500))),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    // The bodies differ (two envelopes), so without an envelope the payload check, which
    // fingerprints the raw body, calls the copy's payload different.
    assert_eq!(outcome_names(&report)[0], "processed");
    assert_eq!(
        failure(&report.items()[1].outcome).kind,
        FailureKind::PayloadMismatch
    );
    assert!(completed(&store, "t#ord-1").await);
}

/// A big integer id in the SNS payload is a key as written: two ids one apart, two keys.
#[tokio::test]
async fn sns_payload_big_integer_keys_are_exact() {
    let store = MemoryStore::new();
    let (p, _) = processor(&store, Envelope::Sns, "json:/order_id");
    let batch = [
        rec(
            "m-1",
            &sns_notification("sns-1", r#"{"order_id":123456789012345678901}"#),
        ),
        rec(
            "m-2",
            &sns_notification("sns-2", r#"{"order_id":123456789012345678902}"#),
        ),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed", "processed"]);
    assert!(completed(&store, "t#123456789012345678901").await);
}

/// A `SubscriptionConfirmation` (a queue subscribed from another account) is not a
/// notification: it fails alone, with a reason that quotes nothing of the body.
#[tokio::test]
async fn not_a_notification_fails_that_message_alone() {
    let store = MemoryStore::new();
    let (p, seen) = processor(&store, Envelope::Sns, "json:/order_id");
    let batch = [
        rec("m-1", &sns_subscription_confirmation("sns-c")),
        rec("m-2", "not json, card 4242 secret"),
        rec("m-3", &sns_notification("sns-3", &order("ord-3", 1))),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&report), ["failed", "failed", "processed"]);
    for item in &report.items()[..2] {
        let f = failure(&item.outcome);
        assert_eq!(f.kind, FailureKind::MissingKey, "{f:?}");
        assert!(f.message.contains("not an sns envelope"), "{}", f.message);
        assert!(!f.message.contains("secret"), "{}", f.message);
    }
    assert!(
        failure(&report.items()[0].outcome)
            .message
            .contains("SubscriptionConfirmation")
    );
    assert_eq!(seen.lock().unwrap().len(), 1);

    // Keyed on the SQS message id, the handler asks for the payload and fails with BadBody.
    let (p, _) = processor(&MemoryStore::new(), Envelope::Sns, "message-id");
    let report = p.process(event(&batch[..1])).await.unwrap();
    let f = failure(&report.items()[0].outcome);
    assert_eq!(f.kind, FailureKind::Handler);
    assert_eq!(f.error_kind, Some(ErrorKind::BadBody));
}

// ---------------------------------------------------------------------------------------------
// EventBridge → SQS
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn eventbridge_detail_is_the_payload_and_id_the_envelope_id() {
    let store = MemoryStore::new();
    let (p, seen) = processor(&store, Envelope::EventBridge, "json:/order_id");
    let detail = json!({"order_id": "ord-9", "amount_cents": 1250});
    let batch = [
        rec(
            "m-1",
            &eventbridge_event(
                "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
                "Order Placed",
                &detail,
            ),
        ),
        // The producer put the same event twice: a new EventBridge id.
        rec(
            "m-2",
            &eventbridge_event(
                "7b8f9a0c-0000-4cf7-a9f1-bf3703467718",
                "Order Placed",
                &detail,
            ),
        ),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed", "duplicate"]);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].1, detail);
    assert_eq!(
        seen[0].2.as_deref(),
        Some("6a7e8feb-b491-4cf7-a9f1-bf3703467718")
    );

    let store = MemoryStore::new();
    let (p, _) = processor(&store, Envelope::EventBridge, "envelope-id");
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed", "processed"]);
    assert!(completed(&store, "t#6a7e8feb-b491-4cf7-a9f1-bf3703467718").await);
}

// ---------------------------------------------------------------------------------------------
// S3 event notifications → SQS
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn s3_record_is_the_payload() {
    let store = MemoryStore::new();
    let (p, seen) = processor(&store, Envelope::S3, "json:/s3/object/key");
    let batch = [
        rec(
            "m-1",
            &s3_notification("amzn-s3-demo-bucket", "in/a.csv", "0A1B2C3D4E5F678901"),
        ),
        // S3 delivered the same notification twice: the same record, a new SQS message.
        rec(
            "m-2",
            &s3_notification("amzn-s3-demo-bucket", "in/a.csv", "0A1B2C3D4E5F678901"),
        ),
        rec("m-3", &s3_test_event("amzn-s3-demo-bucket")),
        rec(
            "m-4",
            &json!({"Records": [
                s3_record("amzn-s3-demo-bucket", "in/b.csv", "01"),
                s3_record("amzn-s3-demo-bucket", "in/c.csv", "02"),
            ]})
            .to_string(),
        ),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(
        outcome_names(&report),
        ["processed", "duplicate", "failed", "failed"]
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].1["s3"]["bucket"]["name"], "amzn-s3-demo-bucket");
    assert_eq!(seen[0].1["eventName"], "ObjectCreated:Put");
    assert!(completed(&store, "t#in/a.csv").await);
    assert!(
        failure(&report.items()[2].outcome)
            .message
            .contains("s3:TestEvent")
    );
    assert!(
        failure(&report.items()[3].outcome)
            .message
            .contains("2 records")
    );
}

/// `body-sha256` under an envelope hashes the payload: S3's duplicate notification is one key.
#[tokio::test]
async fn body_hash_under_an_envelope_is_the_payloads() {
    let store = MemoryStore::new();
    let (p, _) = processor(&store, Envelope::S3, "body-sha256");
    let record = s3_record("bkt", "k", "01");
    let batch = [
        rec("m-1", &json!({"Records": [record.clone()]}).to_string()),
        rec("m-2", &json!({"Records": [record.clone()]}).to_string()),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed", "duplicate"]);
    let key = format!("t#{}", sqs_claim::sha256_hex(record.to_string().as_bytes()));
    assert!(completed(&store, &key).await, "{key}");
}

/// S3 → SNS → SQS: the SNS envelope's payload is the S3 notification; a pointer reads its
/// record (docs/events.md).
#[tokio::test]
async fn s3_through_sns_is_read_with_a_pointer_into_the_notification() {
    let store = MemoryStore::new();
    let (p, seen) = processor(&store, Envelope::Sns, "json:/Records/0/s3/object/key");
    let notification = s3_notification("amzn-s3-demo-bucket", "in/a.csv", "01");
    let batch = [
        rec("m-1", &sns_notification("sns-1", &notification)),
        rec("m-2", &sns_notification("sns-2", &notification)),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed", "duplicate"]);
    assert_eq!(
        seen.lock().unwrap()[0].1["Records"][0]["eventSource"],
        "aws:s3"
    );
    // Without an envelope, `~json` reads the same key: SNS's Message holds the notification
    // as text.
    let key = "json:/Message/~json/Records/0/s3/object/key"
        .parse::<KeySource>()
        .unwrap();
    let event = sqs_claim_testkit::sqs::sqs_event(&batch[..1]);
    assert_eq!(
        key.extract(&event.records[0], Envelope::None)
            .unwrap()
            .as_deref(),
        Some("in/a.csv")
    );
}

// ---------------------------------------------------------------------------------------------
// The public key API and Powertools
// ---------------------------------------------------------------------------------------------

#[test]
fn key_source_extracts_through_an_envelope() {
    let body = sns_notification("sns-1", &order("ord-1", 5));
    let event = sqs_claim_testkit::sqs::sqs_event(&[rec("m-1", &body)]);
    let msg = &event.records[0];
    let pointer = "json:/order_id".parse::<KeySource>().unwrap();
    assert_eq!(pointer.extract(msg, Envelope::None).unwrap(), None);
    assert_eq!(
        pointer.extract(msg, Envelope::Sns).unwrap().as_deref(),
        Some("ord-1")
    );
    assert_eq!(
        KeySource::EnvelopeId
            .extract(msg, Envelope::Sns)
            .unwrap()
            .as_deref(),
        Some("sns-1")
    );
    let err = pointer.extract(msg, Envelope::S3).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingKey);
}

/// Powertools keys what its JMESPath selects: `powertools_json(powertools_json(body).Message)
/// .order_id` is, under the SNS envelope, `json:/order_id`, and hashes the same value as the
/// same payload sent without SNS.
#[cfg(feature = "powertools")]
#[tokio::test]
async fn powertools_keys_the_payload_through_the_envelope() {
    use sqs_claim::powertools::{PowertoolsFormat, RecordPayload};

    let format = PowertoolsFormat::new("orders-fn", "app.record_handler")
        .with_record_validation(RecordPayload::BodyJson("/amount_cents".into()));
    let payload = r#"{"order_id":"ord-1","amount_cents":123456789012345678901}"#;
    let plain = sqs_claim_testkit::sqs::sqs_event(&[rec("m-1", payload)]);
    let pointer = KeySource::JsonPointer("/order_id".into());
    // What Powertools keys the plain record by: the body is the payload.
    let want_key = format
        .record_key("", &pointer, &plain.records[0], payload)
        .unwrap()
        .unwrap();
    let want_validation = format
        .record_fingerprint(&plain.records[0], payload)
        .unwrap();

    let store = MemoryStore::new();
    let handler = tower::service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
    let p = Processor::builder(store.clone(), handler)
        .envelope(Envelope::Sns)
        .key(pointer)
        .key_format(format)
        .build();
    let report = p
        .process(event(&[rec("m-1", &sns_notification("sns-1", payload))]))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["processed"]);
    let stored = store
        .inspect(&want_key)
        .await
        .unwrap()
        .expect("the Powertools key");
    assert_eq!(
        stored.record.fingerprint.as_deref(),
        Some(want_validation.as_str())
    );
}
