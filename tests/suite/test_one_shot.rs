//! The one-shot mode (`Processor::one_shot`): the handler computes the effects, then one
//! atomic write claims the key as completed and commits them. One store call per message,
//! fresh or duplicate; a failure anywhere writes nothing.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::SystemTime;

use sqs_claim::store::MemoryEffect;
use sqs_claim::store::{ClaimStore, Completion};
use sqs_claim::{BoxError, Effects, FailureKind, MemoryStore, Message, OneShot, Processor};
use sqs_claim_testkit::store::{Method, Spy};
use support::batch::*;

/// A memory store that counts its calls by kind (the spy), saying it writes a one-shot
/// atomically and takes the trait's default for the rest.
type Counting = Spy<MemoryStore>;

fn counting() -> Counting {
    Spy::new(MemoryStore::new()).map_capabilities(|_| {
        let mut caps = sqs_claim::store::Capabilities::new();
        caps.atomic_one_shot = true;
        caps
    })
}

/// A processor crediting `{"amount": N}` to `balance` in one shot; a negative amount is
/// refused by the effect's check, a body "panic" panics, a body that is not JSON fails.
type Effects1 = Box<dyn Fn(&Message) -> Result<Effects<MemoryEffect>, BoxError> + Send + Sync>;

fn credit(
    store: Counting,
    balance: Arc<AtomicI64>,
) -> Processor<Counting, OneShot<Effects1, MemoryEffect>> {
    let effects: Effects1 = Box::new(move |msg: &Message| {
        if msg.body() == "panic" {
            panic!("the handler panicked");
        }
        let body: serde_json::Value = msg.json()?;
        let amount = body["amount"].as_i64().unwrap_or(0);
        let (check, apply) = (Arc::clone(&balance), Arc::clone(&balance));
        Ok(Effects::one(MemoryEffect::conditional(
            move || {
                if check.load(Ordering::SeqCst) + amount < 0 {
                    Err("the balance would go negative".to_owned())
                } else {
                    Ok(())
                }
            },
            move || {
                apply.fetch_add(amount, Ordering::SeqCst);
            },
        )))
    });
    Processor::one_shot(store, effects).namespace("t").build()
}

#[tokio::test]
async fn one_write_per_message_and_duplicates_apply_nothing() {
    let store = counting();
    let balance = Arc::new(AtomicI64::new(0));
    let p = credit(store.clone(), Arc::clone(&balance));
    let batch: Vec<Rec> = (0..20)
        .map(|i| rec(&format!("m{i}"), r#"{"amount": 5}"#))
        .collect();
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(report.counts().processed, 20);
    assert_eq!(balance.load(Ordering::SeqCst), 100);
    assert_eq!(
        store.count(Method::ClaimCompleted),
        20,
        "one write per message"
    );
    assert_eq!(store.count(Method::Claim), 0, "no separate claim");
    assert_eq!(store.count(Method::Complete), 0, "no separate completion");

    let again = p.process(event(&batch)).await.unwrap();
    assert_eq!(again.counts().duplicate, 20);
    assert_eq!(
        balance.load(Ordering::SeqCst),
        100,
        "a duplicate applies nothing"
    );
    assert_eq!(
        store.count(Method::ClaimCompleted),
        40,
        "one write per duplicate"
    );
    assert!(again.response().batch_item_failures.is_empty());
}

#[tokio::test]
async fn failures_write_nothing_and_are_reported() {
    let store = counting();
    let balance = Arc::new(AtomicI64::new(0));
    let p = credit(store.clone(), Arc::clone(&balance));
    let batch = [
        rec("refused", r#"{"amount": -5}"#),
        rec("bad", "not json"),
        rec("boom", "panic"),
        rec("ok", r#"{"amount": 7}"#),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(
        failure_of(&report, "refused").kind,
        FailureKind::EffectRejected
    );
    assert_eq!(failure_of(&report, "boom").kind, FailureKind::Panicked);
    assert!(matches!(
        outcome_of(&report, "bad"),
        sqs_claim::Outcome::Failed(_)
    ));
    assert_eq!(failed_ids(&report.response()), ["refused", "bad", "boom"]);
    assert_eq!(balance.load(Ordering::SeqCst), 7);
    // Only the handler's success reached the store; the refused write left the key free.
    assert_eq!(store.count(Method::ClaimCompleted), 2);
    assert_eq!(
        store.count(Method::Release),
        0,
        "nothing held, nothing to release"
    );
    for key in ["t#refused", "t#bad", "t#boom"] {
        assert_eq!(
            store.get_ref().status(key),
            None,
            "{key}: a failure writes nothing"
        );
    }
}

#[tokio::test]
async fn a_key_held_elsewhere_is_retried_and_left_alone() {
    let store = counting();
    let now = SystemTime::now();
    let token = sqs_claim_testkit::conformance::acquire(
        store.get_ref(),
        sqs_claim_testkit::conformance::request("t#held", now),
    )
    .await;
    let balance = Arc::new(AtomicI64::new(0));
    let p = credit(store.clone(), Arc::clone(&balance));
    let report = p
        .process(event(&[rec("held", r#"{"amount": 5}"#)]))
        .await
        .unwrap();
    assert_eq!(report.counts().held_elsewhere, 1);
    assert_eq!(failed_ids(&report.response()), ["held"]);
    assert_eq!(balance.load(Ordering::SeqCst), 0);
    store
        .get_ref()
        .complete_with(
            "t#held",
            &token,
            Completion::new(now + std::time::Duration::from_secs(60)),
        )
        .await
        .expect("the holder still completes");
}

#[tokio::test]
async fn a_store_outage_fails_closed_and_writes_nothing() {
    let store = counting();
    store.get_ref().set_unavailable(true);
    let balance = Arc::new(AtomicI64::new(0));
    let p = credit(store.clone(), Arc::clone(&balance));
    let report = p
        .process(event(&[rec("m", r#"{"amount": 5}"#)]))
        .await
        .unwrap();
    assert_eq!(failure_of(&report, "m").kind, FailureKind::StoreUnavailable);
    assert_eq!(balance.load(Ordering::SeqCst), 0);
}
