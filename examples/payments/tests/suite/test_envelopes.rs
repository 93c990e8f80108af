//! The example consumer behind an SNS topic and an EventBridge rule: `SQS_CLAIM_ENVELOPE`
//! opens each body, the order's key is read from the payment inside, and a payment published
//! twice (two notifications) is credited once, in both modes.

use payments::config::Settings;
use payments::{Ledger, MemoryLedger};
use serde_json::json;
use sqs_claim_testkit::envelope::{eventbridge_event, sns_notification};
use sqs_claim_testkit::sqs::{lambda_event, record};

fn settings(envelope: &str) -> Settings {
    Settings::from_lookup(|name| match name {
        "SQS_CLAIM_ENVELOPE" => Some(envelope.to_owned()),
        _ => None,
    })
    .expect("valid settings")
}

fn payment(order: &str, amount: i64) -> String {
    json!({"order_id": order, "account": "acct-alice", "amount_cents": amount}).to_string()
}

#[tokio::test]
async fn sns_wrapped_payments_are_credited_once() {
    let settings = settings("sns");
    let batch = [
        record("m-1", &sns_notification("sns-1", &payment("ord-1", 1250))),
        record("m-2", &sns_notification("sns-2", &payment("ord-2", 100))),
        // The producer published ord-1 again: a second notification, a second SQS message.
        record("m-3", &sns_notification("sns-3", &payment("ord-1", 1250))),
    ];
    for one_shot in [false, true] {
        let ledger = MemoryLedger::new();
        let counts = if one_shot {
            let p = payments::one_shot(ledger.clone(), &settings);
            p.process(lambda_event(&batch)).await.unwrap().counts()
        } else {
            let p = payments::processor(ledger.clone(), &settings);
            p.process(lambda_event(&batch)).await.unwrap().counts()
        };
        assert_eq!(
            (counts.processed, counts.duplicate, counts.failed),
            (2, 1, 0)
        );
        assert_eq!(
            ledger.balances().await.unwrap(),
            [("acct-alice".to_owned(), 1350)],
            "one_shot {one_shot}"
        );
    }
}

#[tokio::test]
async fn eventbridge_wrapped_payments_are_credited_once() {
    let settings = settings("eventbridge");
    let detail = json!({"order_id": "ord-1", "account": "acct-bob", "amount_cents": 700});
    let batch = [
        record("m-1", &eventbridge_event("e-1", "Payment", &detail)),
        record("m-2", &eventbridge_event("e-2", "Payment", &detail)),
    ];
    let ledger = MemoryLedger::new();
    let p = payments::processor(ledger.clone(), &settings);
    let counts = p.process(lambda_event(&batch)).await.unwrap().counts();
    assert_eq!((counts.processed, counts.duplicate), (1, 1));
    assert_eq!(
        ledger.balances().await.unwrap(),
        [("acct-bob".to_owned(), 700)]
    );
}

/// Without the setting, the same SNS bodies have no `order_id` at the top: every message
/// fails as missing its key, and nothing is credited (what issue 20 saw on main).
#[tokio::test]
async fn without_the_envelope_sns_bodies_have_no_key() {
    let settings = settings("none");
    let batch = [record(
        "m-1",
        &sns_notification("sns-1", &payment("ord-1", 5)),
    )];
    let ledger = MemoryLedger::new();
    let p = payments::processor(ledger.clone(), &settings);
    let counts = p.process(lambda_event(&batch)).await.unwrap().counts();
    assert_eq!(counts.failed, 1);
    assert!(ledger.balances().await.unwrap().is_empty());
}
