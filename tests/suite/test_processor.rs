//! The processor on a standard queue, against `MemoryStore`: every outcome, the key strategies,
//! the store policies, completion retries, atomic effects, the deadline, bounded concurrency and
//! the batch response on the wire.

use crate::support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sqs_claim::events::SqsBatchResponse;
use sqs_claim::store::MemoryEffect;
use sqs_claim::store::{Capabilities, Claim, ClaimRequest, ClaimStore, Status};
use sqs_claim::{
    BoxError, Clock, ErrorKind, FailureKind, KeySource, MemoryStore, Message, MissingKey,
    NotStarted, Outcome, PayloadCheck, Processor, RetryPolicy, StoreUnavailable,
};
use sqs_claim_testkit::store::{Action, Method, Spy};
use support::batch::*;
use tower::{ServiceExt, service_fn};

/// A set of applied effect markers, shared between a handler and the test.
type Applied = Arc<Mutex<HashSet<String>>>;

fn effect(applied: &Applied, marker: &str) -> MemoryEffect {
    let applied = Arc::clone(applied);
    let marker = marker.to_owned();
    MemoryEffect::new(move || {
        applied.lock().unwrap().insert(marker.clone());
    })
}

fn refused_effect(applied: &Applied, marker: &str) -> MemoryEffect {
    let applied = Arc::clone(applied);
    let marker = marker.to_owned();
    MemoryEffect::conditional(
        || Err("balance would go negative".to_owned()),
        move || {
            applied.lock().unwrap().insert(marker.clone());
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn processed_then_duplicate_on_redelivery() {
    init_logs();
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .build();
    let batch = [rec("m1", "a"), rec("m2", "b")];

    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed", "processed"]);
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(store.status("t#m1"), Some(Status::Completed));
    assert_eq!(report.items()[0].key.as_deref(), Some("t#m1"));

    // The same batch again (a redelivery): nothing runs, everything succeeds.
    let again = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&again), ["duplicate", "duplicate"]);
    assert!(again.response().batch_item_failures.is_empty());
    assert_eq!(seen.calls(), 2, "a duplicate must not run the handler");
    let c = again.counts();
    assert_eq!((c.processed, c.duplicate), (0, 2));
}

#[tokio::test]
async fn held_elsewhere_is_reported_failed_and_not_run() {
    let store = MemoryStore::new();
    let now = SystemTime::now();
    let other_lease = now + Duration::from_secs(600);
    let claim = store
        .claim(ClaimRequest {
            key: "t#m1",
            now,
            lease_until: other_lease,
            expires_at: now + Duration::from_secs(3600),
            fingerprint: None,
        })
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Acquired(_)));

    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p
        .process(event(&[rec("m1", "a"), rec("m2", "b")]))
        .await
        .unwrap();
    match outcome_of(&report, "m1") {
        Outcome::HeldElsewhere { lease_until } => {
            let l = lease_until.expect("memory store reports the other lease");
            assert_eq!(l, other_lease);
        }
        other => panic!("expected HeldElsewhere, got {other:?}"),
    }
    assert_eq!(outcome_of(&report, "m2"), &Outcome::Processed);
    assert_eq!(failed_ids(&report.response()), ["m1"]);
    assert_eq!(seen.ids(), ["m2"]);
    // The other worker's claim is untouched.
    assert_eq!(store.status("t#m1"), Some(Status::InProgress));
    assert_eq!(report.counts().held_elsewhere, 1);
}

#[tokio::test]
async fn handler_error_fails_that_message_only_and_releases_its_claim() {
    init_logs();
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p
        .process(event(&[rec("m1", "a"), rec("m2", "FAIL"), rec("m3", "c")]))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["processed", "failed", "processed"]);
    let f = failure_of(&report, "m2");
    assert_eq!(f.kind, FailureKind::Handler);
    assert!(
        f.message.contains("scripted failure in m2"),
        "{}",
        f.message
    );
    assert_eq!(failed_ids(&report.response()), ["m2"]);
    assert_eq!(
        store.status("t#m2"),
        None,
        "a failed message's claim is released"
    );

    // The redelivery runs m2 again at once (no lease to wait for); the others are duplicates.
    let ok = Seen::new();
    let p2 = Processor::builder(store.clone(), scripted(&ok))
        .namespace("t")
        .build();
    let again = p2
        .process(event(&[rec("m1", "a"), rec("m2", "b"), rec("m3", "c")]))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&again),
        ["duplicate", "processed", "duplicate"]
    );
    assert_eq!(ok.ids(), ["m2"]);
}

#[tokio::test]
async fn panic_fails_that_message_only() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p
        .process(event(&[rec("m1", "a"), rec("m2", "PANIC"), rec("m3", "c")]))
        .await
        .expect("a handler panic must not fail the invocation");
    assert_eq!(outcome_names(&report), ["processed", "failed", "processed"]);
    let f = failure_of(&report, "m2");
    assert_eq!(f.kind, FailureKind::Panicked);
    assert!(f.message.contains("scripted panic in m2"), "{}", f.message);
    assert_eq!(failed_ids(&report.response()), ["m2"]);
    assert_eq!(
        store.status("t#m2"),
        None,
        "a panicked message's claim is released"
    );
    assert_eq!(seen.calls(), 3);
}

#[tokio::test]
async fn panic_before_the_future_fails_that_message_only() {
    // A handler that panics synchronously in `call`, before returning its future.
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    let handler = service_fn(move |msg: Message| {
        c.fetch_add(1, Ordering::SeqCst);
        if msg.body() == "PANIC" {
            panic!("synchronous panic in {}", msg.id());
        }
        async { Ok::<(), BoxError>(()) }
    });
    let store = MemoryStore::new();
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .build();
    let report = p
        .process(event(&[rec("m1", "PANIC"), rec("m2", "b")]))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["failed", "processed"]);
    assert_eq!(failure_of(&report, "m1").kind, FailureKind::Panicked);
    assert_eq!(store.status("t#m1"), None);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[derive(serde::Deserialize)]
struct Order {
    #[allow(dead_code)]
    order_id: String,
    amount: u64,
}

#[tokio::test]
async fn bad_body_fails_that_message_only() {
    let total = Arc::new(AtomicUsize::new(0));
    let t = Arc::clone(&total);
    let handler = service_fn(move |msg: Message| {
        let t = Arc::clone(&t);
        async move {
            let order: Order = msg.json()?;
            t.fetch_add(order.amount as usize, Ordering::SeqCst);
            Ok::<(), sqs_claim::Error>(())
        }
    });
    let store = MemoryStore::new();
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .build();
    let report = p
        .process(event(&[
            rec("m1", r#"{"order_id":"o-1","amount":5}"#),
            rec("m2", "{not json, card=4111111111111111"),
            rec("m3", r#"{"order_id":"o-3","amount":"seven"}"#),
            rec("m4", r#"{"order_id":"o-4","amount":7}"#),
        ]))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&report),
        ["processed", "failed", "failed", "processed"]
    );
    assert_eq!(total.load(Ordering::SeqCst), 12);
    assert_eq!(failed_ids(&report.response()), ["m2", "m3"]);
    let syntax = failure_of(&report, "m2");
    assert_eq!(syntax.kind, FailureKind::Handler);
    assert!(
        syntax.message.contains("not valid JSON"),
        "{}",
        syntax.message
    );
    assert!(
        !syntax.message.contains("4111"),
        "body leaked: {}",
        syntax.message
    );
    let shape = failure_of(&report, "m3");
    assert!(shape.message.contains("wrong shape"), "{}", shape.message);
    assert!(
        !shape.message.contains("seven"),
        "body leaked: {}",
        shape.message
    );
}

// ---------------------------------------------------------------------------------------------
// In-batch duplicates
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn in_batch_duplicate_keys_run_once() {
    for concurrency in [1, 2, 10] {
        let store = MemoryStore::new();
        let seen = Seen::new();
        let p = Processor::builder(store.clone(), scripted(&seen))
            .namespace("t")
            .key(KeySource::JsonPointer("/order_id".into()))
            .concurrency(concurrency)
            .build();
        let body1 = r#"{"order_id":"o-1"}"#;
        let report = p
            .process(event(&[
                rec("m1", body1),
                rec("m2", r#"{"order_id":"o-2"}"#),
                rec("m3", body1),
                rec("m4", body1),
            ]))
            .await
            .unwrap();
        assert_eq!(
            outcome_names(&report),
            ["processed", "processed", "duplicate", "duplicate"],
            "concurrency {concurrency}"
        );
        assert_eq!(
            seen.calls(),
            2,
            "concurrency {concurrency}: one call per key"
        );
        assert!(report.response().batch_item_failures.is_empty());
    }
}

#[tokio::test]
async fn in_batch_copies_of_a_failed_message_fail_with_it() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .key(KeySource::JsonPointer("/order_id".into()))
        .build();
    let bad = r#"{"order_id":"o-1","x":"FAIL"}"#;
    let report = p
        .process(event(&[rec("m1", bad), rec("m2", "{}"), rec("m3", bad)]))
        .await
        .unwrap();
    assert_eq!(seen.count("m1") + seen.count("m3"), 1, "the key runs once");
    let f = failure_of(&report, "m3");
    assert_eq!(f.kind, FailureKind::Handler);
    assert!(f.message.contains("which failed"), "{}", f.message);
    // The copy names its leader by message id, as reports and logs do, not by a bare index
    // that an on-call engineer would have to count out in the event.
    assert!(f.message.contains("message m1 (#0)"), "{}", f.message);
    // m2 lacks the key: failed too (missing key), so all three are retried.
    assert_eq!(failed_ids(&report.response()), ["m1", "m2", "m3"]);
}

#[tokio::test]
async fn in_batch_copy_with_another_body_is_a_payload_mismatch() {
    for (check, expected) in [
        (PayloadCheck::Fail, "failed"),
        (PayloadCheck::Warn, "duplicate"),
        (PayloadCheck::Off, "duplicate"),
    ] {
        let store = MemoryStore::new();
        let seen = Seen::new();
        let p = Processor::builder(store.clone(), scripted(&seen))
            .namespace("t")
            .key(KeySource::JsonPointer("/order_id".into()))
            .payload_check(check)
            .build();
        let report = p
            .process(event(&[
                rec("m1", r#"{"order_id":"o-1","amount":10}"#),
                rec("m2", r#"{"order_id":"o-1","amount":99}"#),
                rec("m3", r#"{"order_id":"o-1","amount":10}"#),
            ]))
            .await
            .unwrap();
        assert_eq!(
            outcome_names(&report),
            ["processed", expected, "duplicate"],
            "{check:?}"
        );
        assert_eq!(seen.calls(), 1, "{check:?}");
        if expected == "failed" {
            assert_eq!(failure_of(&report, "m2").kind, FailureKind::PayloadMismatch);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Store unavailable: fail closed (default) or open
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn store_unavailable_fails_closed_by_default() {
    let store = MemoryStore::new();
    store.set_unavailable(true);
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p
        .process(event(&[rec("m1", "a"), rec("m2", "b")]))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["failed", "failed"]);
    assert_eq!(
        failure_of(&report, "m1").kind,
        FailureKind::StoreUnavailable
    );
    assert_eq!(failed_ids(&report.response()), ["m1", "m2"]);
    assert_eq!(seen.calls(), 0, "fail-closed: nothing runs unclaimed");
}

#[tokio::test]
async fn store_unavailable_fail_open_runs_unclaimed() {
    let store = MemoryStore::new();
    store.set_unavailable(true);
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .on_store_unavailable(StoreUnavailable::FailOpen)
        .build();
    let report = p
        .process(event(&[rec("m1", "a"), rec("m2", "FAIL")]))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["processed", "failed"]);
    assert_eq!(seen.calls(), 2);
    store.set_unavailable(false);
    assert!(store.is_empty(), "fail-open writes nothing");

    // A handler with effects cannot commit them without the store: it fails.
    store.set_unavailable(true);
    let applied: Applied = Arc::default();
    let a = Arc::clone(&applied);
    let with_effects = service_fn(move |msg: Message| {
        let e = effect(&a, msg.id());
        async move { Ok::<_, BoxError>(vec![e]) }
    });
    let p = Processor::builder(store.clone(), with_effects)
        .namespace("t")
        .on_store_unavailable(StoreUnavailable::FailOpen)
        .build();
    let report = p.process(event(&[rec("m3", "a")])).await.unwrap();
    assert_eq!(
        failure_of(&report, "m3").kind,
        FailureKind::StoreUnavailable
    );
    assert!(applied.lock().unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Completion retries and atomic effects
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn transient_completion_failure_is_retried() {
    let store = MemoryStore::new();
    store.fail_next_completions(2);
    let applied: Applied = Arc::default();
    let a = Arc::clone(&applied);
    let handler = service_fn(move |msg: Message| {
        let e = effect(&a, msg.id());
        async move { Ok::<_, BoxError>(vec![e]) }
    });
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .clock(Clock::tokio())
        .completion_retry(RetryPolicy::new(3, Duration::from_millis(50)))
        .build();
    let report = p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    assert_eq!(store.status("t#m1"), Some(Status::Completed));
    assert!(applied.lock().unwrap().contains("m1"));
}

#[tokio::test(start_paused = true)]
async fn completion_keeps_failing_without_effects_reports_success() {
    let store = MemoryStore::new();
    store.fail_next_completions(100);
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .clock(Clock::tokio())
        .completion_retry(RetryPolicy::new(2, Duration::from_millis(10)))
        .build();
    let report = p.process(event(&[rec("m1", "a")])).await.unwrap();
    // The handler's side effect happened: failing it would run it again on redelivery.
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    assert!(report.response().batch_item_failures.is_empty());
    // The claim was not recorded completed; it stays in progress and lapses with its lease.
    assert_eq!(store.status("t#m1"), Some(Status::InProgress));
    assert_eq!(seen.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn completion_keeps_failing_with_effects_fails_and_releases() {
    let store = MemoryStore::new();
    store.fail_next_completions(3);
    let applied: Applied = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let (a, c) = (Arc::clone(&applied), Arc::clone(&calls));
    let handler = service_fn(move |msg: Message| {
        c.fetch_add(1, Ordering::SeqCst);
        let e = effect(&a, msg.id());
        async move { Ok::<_, BoxError>(vec![e]) }
    });
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .clock(Clock::tokio())
        .completion_retry(RetryPolicy::new(2, Duration::from_millis(10)))
        .build();
    let report = p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(
        failure_of(&report, "m1").kind,
        FailureKind::StoreUnavailable
    );
    assert_eq!(failed_ids(&report.response()), ["m1"]);
    assert!(applied.lock().unwrap().is_empty(), "nothing was committed");
    assert_eq!(store.status("t#m1"), None, "the claim is released");

    // The redelivery runs it again and commits once.
    let report = p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(applied.lock().unwrap().contains("m1"));
}

/// A store whose completions commit and then answer a transient error, as a timeout after the
/// write reached DynamoDB does. It says what the trait's default says of a store.
fn commits_then_times_out() -> Spy<MemoryStore> {
    Spy::new(MemoryStore::new())
        .on_call(|call| match call.method() {
            Method::Complete => Action::FailAfter(sqs_claim::Error::new(
                ErrorKind::StoreUnavailable,
                "timed out waiting for the answer",
            )),
            _ => Action::Forward,
        })
        .map_capabilities(|_| Capabilities::new())
}

/// After an ambiguous completion error the effects may well have committed: the failure must
/// not claim otherwise (an engineer would re-apply a credit by hand), and the redelivery is a
/// duplicate, with the effects applied once.
#[tokio::test(start_paused = true)]
async fn ambiguous_completion_with_effects_does_not_claim_nothing_was_committed() {
    let store = commits_then_times_out();
    let applied = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&applied);
    let handler = service_fn(move |_msg: Message| {
        let a = Arc::clone(&a);
        let credit = MemoryEffect::new(move || {
            a.fetch_add(1, Ordering::SeqCst);
        });
        async move { Ok::<_, BoxError>(vec![credit]) }
    });
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .clock(Clock::tokio())
        .completion_retry(RetryPolicy::new(0, Duration::from_millis(10)))
        .build();
    let report = p.process(event(&[rec("m1", "a")])).await.unwrap();
    let failure = failure_of(&report, "m1");
    assert_eq!(failure.kind, FailureKind::StoreUnavailable);
    assert!(
        !failure.message.contains("nothing was committed"),
        "the commit may have happened: {failure:?}"
    );
    assert!(failure.message.contains("may or may not"), "{failure:?}");
    assert_eq!(applied.load(Ordering::SeqCst), 1, "it did commit here");

    let again = p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(outcome_of(&again, "m1"), &Outcome::Duplicate);
    assert_eq!(applied.load(Ordering::SeqCst), 1, "applied once");
}

/// A huge TTL or lease (say `SQS_CLAIM_TTL_SECS=18446744073709551615`) once overflowed
/// `SystemTime` and panicked mid-batch: every invocation crashed and the batch came back until
/// it reached the DLQ. It now means "practically forever".
#[tokio::test(start_paused = true)]
async fn huge_ttl_and_lease_do_not_overflow_the_clock() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .clock(Clock::tokio())
        .ttl(Duration::MAX)
        .lease_policy(sqs_claim::Lease::until_deadline(Duration::MAX))
        .build();
    let first = p
        .process(event(&[rec("m1", "a"), rec("m2", "FAIL")]))
        .await
        .unwrap();
    assert_eq!(outcome_names(&first), ["processed", "failed"]);
    tokio::time::advance(Duration::from_secs(10 * 365 * 24 * 3600)).await;
    let again = p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(outcome_names(&again), ["duplicate"], "still remembered");
    assert_eq!(seen.count("m1"), 1);
}

#[tokio::test]
async fn rejected_effect_fails_the_message_and_applies_nothing() {
    let store = MemoryStore::new();
    let applied: Applied = Arc::default();
    let refuse = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (a, r) = (Arc::clone(&applied), Arc::clone(&refuse));
    let handler = service_fn(move |msg: Message| {
        let mut effects = vec![effect(&a, &format!("{}-debit", msg.id()))];
        if r.load(Ordering::SeqCst) {
            effects.push(refused_effect(&a, &format!("{}-credit", msg.id())));
        } else {
            effects.push(effect(&a, &format!("{}-credit", msg.id())));
        }
        async move { Ok::<_, BoxError>(effects) }
    });
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .build();
    let report = p
        .process(event(&[rec("m1", "a"), rec("m2", "b")]))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["failed", "failed"]);
    let f = failure_of(&report, "m1");
    assert_eq!(f.kind, FailureKind::EffectRejected);
    assert!(
        f.message.contains("balance would go negative"),
        "{}",
        f.message
    );
    assert!(
        applied.lock().unwrap().is_empty(),
        "all or nothing: {:?}",
        applied.lock().unwrap()
    );
    assert_eq!(
        store.status("t#m1"),
        None,
        "claim released so a retry can run"
    );

    refuse.store(false, Ordering::SeqCst);
    let report = p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    let got = applied.lock().unwrap().clone();
    assert_eq!(
        got,
        HashSet::from(["m1-debit".to_owned(), "m1-credit".to_owned()])
    );
}

// ---------------------------------------------------------------------------------------------
// Payload fingerprint
// ---------------------------------------------------------------------------------------------

async fn replay_with_other_body(check: Option<PayloadCheck>) -> (sqs_claim::BatchReport, usize) {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let mut b = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .key(KeySource::JsonPointer("/order_id".into()));
    if let Some(check) = check {
        b = b.payload_check(check);
    }
    let p = b.build();
    let first = p
        .process(event(&[rec("m1", r#"{"order_id":"o-1","amount":10}"#)]))
        .await
        .unwrap();
    assert_eq!(outcome_of(&first, "m1"), &Outcome::Processed);
    // Same body, another message id: a plain duplicate whatever the check.
    let same = p
        .process(event(&[rec("m2", r#"{"order_id":"o-1","amount":10}"#)]))
        .await
        .unwrap();
    assert_eq!(outcome_of(&same, "m2"), &Outcome::Duplicate);
    let other = p
        .process(event(&[rec("m3", r#"{"order_id":"o-1","amount":99}"#)]))
        .await
        .unwrap();
    (other, seen.calls())
}

#[tokio::test]
async fn payload_mismatch_fails_by_default() {
    let (report, calls) = replay_with_other_body(None).await;
    let f = failure_of(&report, "m3");
    assert_eq!(f.kind, FailureKind::PayloadMismatch);
    assert!(!f.message.contains("99"), "body leaked: {}", f.message);
    assert_eq!(failed_ids(&report.response()), ["m3"]);
    assert_eq!(calls, 1);
}

#[tokio::test]
async fn payload_mismatch_warn_skips() {
    let (report, calls) = replay_with_other_body(Some(PayloadCheck::Warn)).await;
    assert_eq!(outcome_of(&report, "m3"), &Outcome::Duplicate);
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(calls, 1);
}

#[tokio::test]
async fn payload_check_off_skips() {
    let (report, calls) = replay_with_other_body(Some(PayloadCheck::Off)).await;
    assert_eq!(outcome_of(&report, "m3"), &Outcome::Duplicate);
    assert_eq!(calls, 1);
}

// ---------------------------------------------------------------------------------------------
// Key strategies and namespacing
// ---------------------------------------------------------------------------------------------

/// Runs `first` then `second` (separate batches) with `key`; returns both outcomes' names and
/// the first item's key.
async fn two_batches(
    key: KeySource,
    first: Rec,
    second: Rec,
) -> (&'static str, &'static str, Option<String>) {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .key(key)
        .build();
    let a = p.process(event(&[first])).await.unwrap();
    let b = p.process(event(&[second])).await.unwrap();
    (
        a.items()[0].outcome.name(),
        b.items()[0].outcome.name(),
        a.items()[0].key.clone(),
    )
}

#[tokio::test]
async fn key_message_id() {
    let (a, b, key) = two_batches(KeySource::MessageId, rec("m1", "x"), rec("m1", "x")).await;
    assert_eq!((a, b), ("processed", "duplicate"));
    assert_eq!(key.as_deref(), Some("t#m1"));
    // Another message id with the same body is not a duplicate under this strategy.
    let (_, b, _) = two_batches(KeySource::MessageId, rec("m1", "x"), rec("m2", "x")).await;
    assert_eq!(b, "processed");
}

#[tokio::test]
async fn key_json_pointer() {
    let k = || KeySource::JsonPointer("/payment/id".into());
    let (a, b, key) = two_batches(
        k(),
        rec("m1", r#"{"payment":{"id":"p-1"},"n":1}"#),
        rec("m2", r#"{"n":1,"payment":{"id":"p-1"}}"#),
    )
    .await;
    assert_eq!(a, "processed");
    assert_eq!(key.as_deref(), Some("t#p-1"));
    // Same business key, other message id and other body text: the default payload check
    // fails it (the fingerprint is of the raw body).
    assert_eq!(b, "failed");

    let (_, b, _) = two_batches(
        k(),
        rec("m1", r#"{"payment":{"id":"p-1"}}"#),
        rec("m2", r#"{"payment":{"id":"p-1"}}"#),
    )
    .await;
    assert_eq!(b, "duplicate");
    // Numbers are keys too, as their JSON text.
    let (_, _, key) =
        two_batches(k(), rec("m1", r#"{"payment":{"id":42}}"#), rec("m2", "{}")).await;
    assert_eq!(key.as_deref(), Some("t#42"));
}

/// `json:` with no pointer is RFC 6901's whole document: the body would become the key, and
/// keys are logged and stored. The textual form (`SQS_CLAIM_KEY`) refuses it.
#[test]
fn key_json_pointer_must_not_be_the_whole_body() {
    for text in ["json:", " json: "] {
        let err = text.parse::<KeySource>().expect_err(text);
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.to_string().contains("body-sha256"), "{err}");
    }
    assert_eq!(
        "json:/order_id".parse::<KeySource>().expect("a pointer"),
        KeySource::JsonPointer("/order_id".into())
    );
}

#[tokio::test]
async fn key_message_attribute() {
    let k = || KeySource::MessageAttribute("IdempotencyKey".into());
    let (a, b, key) = two_batches(
        k(),
        rec("m1", "x").attr("IdempotencyKey", "ik-1"),
        rec("m2", "x").attr("IdempotencyKey", "ik-1"),
    )
    .await;
    assert_eq!((a, b), ("processed", "duplicate"));
    assert_eq!(key.as_deref(), Some("t#ik-1"));
    let (_, b, _) = two_batches(
        k(),
        rec("m1", "x").attr("IdempotencyKey", "ik-1"),
        rec("m2", "x").attr("IdempotencyKey", "ik-2"),
    )
    .await;
    assert_eq!(b, "processed");
}

#[tokio::test]
async fn key_body_sha256() {
    let (a, b, key) = two_batches(
        KeySource::BodySha256,
        rec("m1", "same body"),
        rec("m2", "same body"),
    )
    .await;
    assert_eq!((a, b), ("processed", "duplicate"));
    let expected = format!("t#{}", sqs_claim::sha256_hex(b"same body"));
    assert_eq!(key.as_deref(), Some(expected.as_str()));
    let (_, b, _) = two_batches(
        KeySource::BodySha256,
        rec("m1", "same body"),
        rec("m2", "other body"),
    )
    .await;
    assert_eq!(b, "processed");
}

#[tokio::test]
async fn key_deduplication_id() {
    let (a, b, key) = two_batches(
        KeySource::DeduplicationId,
        rec("m1", "x").dedup("d-1"),
        rec("m2", "x").dedup("d-1"),
    )
    .await;
    assert_eq!((a, b), ("processed", "duplicate"));
    assert_eq!(key.as_deref(), Some("t#d-1"));
}

#[tokio::test]
async fn namespaces_do_not_collide_on_one_store() {
    let store = MemoryStore::new();
    let (sa, sb) = (Seen::new(), Seen::new());
    let a = Processor::builder(store.clone(), scripted(&sa))
        .namespace("billing")
        .build();
    let b = Processor::builder(store.clone(), scripted(&sb))
        .namespace("shipping")
        .build();
    let batch = [rec("m1", "x")];
    let ra = a.process(event(&batch)).await.unwrap();
    let rb = b.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_of(&ra, "m1"), &Outcome::Processed);
    assert_eq!(
        outcome_of(&rb, "m1"),
        &Outcome::Processed,
        "other namespace, other key"
    );
    assert_eq!(ra.items()[0].key.as_deref(), Some("billing#m1"));
    assert_eq!(rb.items()[0].key.as_deref(), Some("shipping#m1"));
    assert_eq!(store.len(), 2);
    // Each still deduplicates within its own namespace.
    let again = a.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_of(&again, "m1"), &Outcome::Duplicate);
    assert_eq!((sa.calls(), sb.calls()), (1, 1));
}

#[tokio::test]
async fn missing_key_fails_by_default() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .key(KeySource::JsonPointer("/order_id".into()))
        .build();
    let report = p
        .process(event(&[
            rec("m1", r#"{"other":1}"#),
            rec("m2", "not json: secret-4111"),
            rec("m3", r#"{"order_id":null}"#),
            rec("m4", r#"{"order_id":"o-4"}"#),
        ]))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&report),
        ["failed", "failed", "failed", "processed"]
    );
    for id in ["m1", "m2", "m3"] {
        let f = failure_of(&report, id);
        assert_eq!(f.kind, FailureKind::MissingKey, "{id}");
        assert!(!f.message.contains("secret"), "body leaked: {}", f.message);
    }
    assert!(report.items()[0].key.is_none());
    assert_eq!(seen.ids(), ["m4"]);
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn missing_key_process_without_dedup_runs_every_time() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .key(KeySource::MessageAttribute("IdempotencyKey".into()))
        .missing_key(MissingKey::ProcessWithoutDedup)
        .build();
    let batch = [
        rec("m1", "x"),
        rec("m2", "x").attr("IdempotencyKey", "ik-2"),
    ];
    let first = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&first), ["processed", "processed"]);
    assert!(first.items()[0].key.is_none());
    let second = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_names(&second), ["processed", "duplicate"]);
    assert_eq!(seen.count("m1"), 2, "no key, no deduplication");
    assert_eq!(seen.count("m2"), 1);
    assert_eq!(store.len(), 1);
}

/// A keyless message run without deduplication cannot commit effects (they need a claim): it
/// fails, and the failure names the missing key, not a store outage that did not happen.
#[tokio::test]
async fn missing_key_process_without_dedup_with_effects_fails_as_missing_key() {
    let store = MemoryStore::new();
    let applied: Applied = Arc::default();
    let a = Arc::clone(&applied);
    let with_effects = service_fn(move |msg: Message| {
        let e = effect(&a, msg.id());
        async move { Ok::<_, BoxError>(vec![e]) }
    });
    let p = Processor::builder(store.clone(), with_effects)
        .namespace("t")
        .key(KeySource::MessageAttribute("IdempotencyKey".into()))
        .missing_key(MissingKey::ProcessWithoutDedup)
        .build();
    let report = p.process(event(&[rec("m1", "x")])).await.unwrap();
    let failure = failure_of(&report, "m1");
    assert_eq!(failure.kind, FailureKind::MissingKey, "{failure:?}");
    assert!(
        failure.message.contains("ProcessWithoutDedup"),
        "{failure:?}"
    );
    assert!(applied.lock().unwrap().is_empty());
    assert!(store.is_empty());
}

// ---------------------------------------------------------------------------------------------
// The event and the response
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn record_without_message_id_is_an_invalid_event() {
    for bad in [rec("x", "b").no_id(), rec("", "b")] {
        let store = MemoryStore::new();
        let seen = Seen::new();
        let p = Processor::builder(store.clone(), scripted(&seen))
            .namespace("t")
            .build();
        let batch = [rec("m1", "a"), bad, rec("m3", "FAIL")];
        let err = p.process(event(&batch)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidEvent);
        assert!(err.to_string().contains("record #1"), "{err}");
        assert_eq!(
            seen.calls(),
            0,
            "nothing runs when the batch cannot be reported"
        );
        assert!(store.is_empty());

        // As the Lambda service: an error (whole batch redelivered), never an empty identifier.
        let result = p.clone().oneshot(event(&batch)).await;
        assert!(result.is_err(), "got {result:?}");
    }
}

#[tokio::test]
async fn response_lists_each_failed_id_once_in_batch_order() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .build();
    // SQS standard queues may deliver one message twice in a batch: m2 appears twice.
    let batch = [
        rec("m1", "a"),
        rec("m2", "FAIL"),
        rec("m3", "c"),
        rec("m4", "FAIL"),
        rec("m2", "FAIL"),
        rec("m5", "PANIC"),
        rec("m6", "f"),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(report.items().len(), 7);
    assert_eq!(failed_ids(&report.response()), ["m2", "m4", "m5"]);
    assert_eq!(seen.count("m2"), 1, "one key, one run");
    let json = serde_json::to_string(&report.response()).unwrap();
    assert_eq!(
        json,
        r#"{"batchItemFailures":[{"itemIdentifier":"m2"},{"itemIdentifier":"m4"},{"itemIdentifier":"m5"}]}"#
    );
}

#[tokio::test(start_paused = true)]
async fn response_is_in_batch_order_not_completion_order() {
    // Later messages finish first: the response must still follow the batch.
    let handler = service_fn(|msg: Message| async move {
        let n: u64 = msg.id()[1..].parse().unwrap();
        tokio::time::sleep(Duration::from_millis(100 - n * 10)).await;
        if n.is_multiple_of(2) {
            return Err::<(), BoxError>("even".into());
        }
        Ok(())
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .namespace("t")
        .clock(Clock::tokio())
        .build();
    let batch: Vec<Rec> = (1..=8).map(|i| rec(&format!("m{i}"), "x")).collect();
    let report = p.process(event(&batch)).await.unwrap();
    let ids: Vec<&str> = report
        .items()
        .iter()
        .map(|i| i.message_id.as_str())
        .collect();
    assert_eq!(ids, ["m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"]);
    assert_eq!(failed_ids(&report.response()), ["m2", "m4", "m6", "m8"]);
}

#[tokio::test]
async fn batch_response_json_round_trips_exactly() {
    let p = Processor::builder(MemoryStore::new(), scripted(&Seen::new()))
        .namespace("t")
        .build();
    // Through the tower service, as `lambda_runtime::run` calls it.
    let response: SqsBatchResponse = p
        .clone()
        .oneshot(event(&[rec("m1", "a"), rec("m2", "FAIL")]))
        .await
        .unwrap();
    let json = serde_json::to_string(&response).unwrap();
    assert_eq!(json, r#"{"batchItemFailures":[{"itemIdentifier":"m2"}]}"#);
    let back: SqsBatchResponse = serde_json::from_str(&json).unwrap();
    assert_eq!(back, response);

    // All succeeded: an empty list (Lambda deletes the whole batch).
    let response = p.clone().oneshot(event(&[rec("m3", "a")])).await.unwrap();
    assert_eq!(
        serde_json::to_string(&response).unwrap(),
        r#"{"batchItemFailures":[]}"#
    );
}

#[tokio::test]
async fn empty_batch_succeeds() {
    let seen = Seen::new();
    let p = Processor::builder(MemoryStore::new(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p.process(event(&[])).await.unwrap();
    assert!(report.items().is_empty());
    assert_eq!(
        serde_json::to_string(&report.response()).unwrap(),
        r#"{"batchItemFailures":[]}"#
    );
    assert_eq!(seen.calls(), 0);
}

#[tokio::test]
async fn real_lambda_event_fixture_parses_and_processes() {
    // The shape Lambda sends, verbatim (from the AWS documentation's example event).
    let raw = r#"{
      "Records": [
        {
          "messageId": "059f36b4-87a3-44ab-83d2-661975830a7d",
          "receiptHandle": "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a...",
          "body": "{\"order_id\":\"o-1\"}",
          "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1545082649183",
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": "1545082649185"
          },
          "messageAttributes": {
            "Trace": {"stringValue": "t-1", "stringListValues": [], "binaryListValues": [], "dataType": "String"}
          },
          "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
          "eventSource": "aws:sqs",
          "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:my-queue",
          "awsRegion": "us-east-2"
        },
        {
          "messageId": "2e1424d4-f796-459a-8184-9c92662be6da",
          "receiptHandle": "AQEBzWwaftRI0KuVm4tP+/7q1rGgNqicHq...",
          "body": "FAIL",
          "attributes": {
            "ApproximateReceiveCount": "3",
            "SentTimestamp": "1545082650636",
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": "1545082650649"
          },
          "messageAttributes": {},
          "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
          "eventSource": "aws:sqs",
          "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:my-queue",
          "awsRegion": "us-east-2"
        }
      ]
    }"#;
    let payload: sqs_claim::events::SqsEvent = serde_json::from_str(raw).unwrap();
    let receive_counts = Arc::new(Mutex::new(Vec::new()));
    let rc = Arc::clone(&receive_counts);
    let handler = service_fn(move |msg: Message| {
        rc.lock().unwrap().push((
            msg.id().to_owned(),
            msg.receive_count(),
            msg.sqs()
                .message_attributes
                .get("Trace")
                .and_then(|a| a.string_value.clone()),
            msg.is_fifo(),
        ));
        let fail = msg.body() == "FAIL";
        async move {
            if fail {
                return Err::<(), BoxError>("nope".into());
            }
            Ok(())
        }
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .namespace("t")
        .concurrency(1)
        .build();
    let report = p
        .process(lambda_runtime::LambdaEvent::new(
            payload,
            Default::default(),
        ))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_string(&report.response()).unwrap(),
        r#"{"batchItemFailures":[{"itemIdentifier":"2e1424d4-f796-459a-8184-9c92662be6da"}]}"#
    );
    let got = receive_counts.lock().unwrap().clone();
    assert_eq!(
        got,
        [
            (
                "059f36b4-87a3-44ab-83d2-661975830a7d".to_owned(),
                Some(1),
                Some("t-1".to_owned()),
                false
            ),
            (
                "2e1424d4-f796-459a-8184-9c92662be6da".to_owned(),
                Some(3),
                None,
                false
            ),
        ]
    );
    // The report's JSON names every outcome, and never the body.
    let json = report.to_json();
    assert_eq!(json["counts"]["processed"], 1);
    assert_eq!(json["counts"]["failed"], 1);
    assert_eq!(json["outcomes"][1]["outcome"], "failed");
    assert!(
        !json.to_string().contains("order_id"),
        "body leaked into the report: {json}"
    );
}

// ---------------------------------------------------------------------------------------------
// Deadline
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn deadline_zero_means_no_deadline() {
    let seen = Seen::new();
    let p = Processor::builder(MemoryStore::new(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p
        .process(event_with_deadline(&[rec("m1", "a"), rec("m2", "b")], 0))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["processed", "processed"]);
}

#[tokio::test]
async fn deadline_in_the_past_starts_nothing() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .build();
    // 1 ms after the epoch: a real deadline, long gone (not "no deadline").
    let report = p
        .process(event_with_deadline(&[rec("m1", "a"), rec("m2", "b")], 1))
        .await
        .unwrap();
    for item in report.items() {
        assert_eq!(item.outcome, Outcome::NotStarted(NotStarted::Deadline));
    }
    assert_eq!(failed_ids(&report.response()), ["m1", "m2"]);
    assert_eq!(seen.calls(), 0);
    assert!(store.is_empty(), "nothing claimed");
}

#[tokio::test(start_paused = true)]
async fn deadline_cutoff_stops_starting_messages() {
    let clock = Clock::tokio();
    let store = MemoryStore::new();
    let seen = Seen::new();
    let s = seen.clone();
    let handler = service_fn(move |msg: Message| {
        let s = s.clone();
        async move {
            s.saw(msg.id());
            tokio::time::sleep(Duration::from_secs(3)).await;
            Ok::<(), BoxError>(())
        }
    });
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .clock(clock.clone())
        .concurrency(1)
        .deadline_margin(Duration::from_secs(2))
        .build();
    // Deadline in 10 s, margin 2 s: messages start at 0, 3, 6; the one due at 9 does not.
    let deadline = deadline_in(&clock, Duration::from_secs(10));
    let batch: Vec<Rec> = (1..=5).map(|i| rec(&format!("m{i}"), "x")).collect();
    let report = p
        .process(event_with_deadline(&batch, deadline))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&report),
        [
            "processed",
            "processed",
            "processed",
            "not_started",
            "not_started"
        ]
    );
    assert_eq!(
        outcome_of(&report, "m4"),
        &Outcome::NotStarted(NotStarted::Deadline)
    );
    assert_eq!(failed_ids(&report.response()), ["m4", "m5"]);
    assert_eq!(seen.ids(), ["m1", "m2", "m3"]);
    assert_eq!(
        store.status("t#m4"),
        None,
        "an unstarted message is not claimed"
    );
    assert_eq!(report.counts().not_started, 2);
}

// ---------------------------------------------------------------------------------------------
// Bounded concurrency (standard queue)
// ---------------------------------------------------------------------------------------------

/// Runs `3 * limit` messages whose handlers meet at a barrier of `limit`: the batch completes
/// only if `limit` handlers really run at once, and the gauge shows no more ever did.
async fn concurrency_is(limit: usize, configured: Option<usize>) {
    concurrency_on(MemoryStore::new(), limit, configured).await;
}

/// A memory store that says it carries `calls` at once.
fn carries(calls: usize) -> Spy<MemoryStore> {
    Spy::new(MemoryStore::new()).map_capabilities(move |_| {
        let mut caps = Capabilities::new();
        caps.max_in_flight = calls;
        caps
    })
}

async fn concurrency_on<S: ClaimStore + Clone + Send + Sync + 'static>(
    store: S,
    limit: usize,
    configured: Option<usize>,
) {
    let gauge = Gauge::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(limit));
    let g = gauge.clone();
    let handler = service_fn(move |_msg: Message| {
        let (g, barrier) = (g.clone(), Arc::clone(&barrier));
        async move {
            let _running = g.enter();
            barrier.wait().await;
            // Stay a little longer so a processor over the limit would be caught overlapping.
            for _ in 0..5 {
                tokio::task::yield_now().await;
            }
            Ok::<(), BoxError>(())
        }
    });
    let mut b = Processor::builder(store, handler).namespace("t");
    if let Some(n) = configured {
        b = b.concurrency(n);
    }
    let p = b.build();
    let batch: Vec<Rec> = (0..3 * limit).map(|i| rec(&format!("m{i}"), "x")).collect();
    let report = tokio::time::timeout(Duration::from_secs(10), p.process(event(&batch)))
        .await
        .unwrap_or_else(|_| panic!("fewer than {limit} handlers ever ran at once"))
        .unwrap();
    assert_eq!(report.counts().processed, 3 * limit);
    assert_eq!(gauge.max(), limit, "max concurrently running handlers");
    assert_eq!(gauge.current(), 0);
}

#[tokio::test]
async fn standard_concurrency_is_bounded_and_reached() {
    concurrency_is(4, Some(4)).await;
    concurrency_is(1, Some(1)).await;
    concurrency_is(1, Some(0)).await;
}

/// The default is what the store says it carries; a builder setting overrides it.
#[tokio::test]
async fn standard_concurrency_default_is_the_stores_bound() {
    concurrency_on(carries(7), 7, None).await;
    concurrency_on(carries(7), 3, Some(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_concurrency_is_bounded_on_a_multi_thread_runtime() {
    concurrency_is(3, Some(3)).await;
}

/// One slow message among 100 (10 at once, 100 ms each, the first 1 s late) holds its own
/// place in the window, not the places behind it: the other nine keep turning, and the batch
/// takes about as long as its slowest message. A window that waited for its oldest message
/// (`buffered`) took 2.0 s here: the nine finished places stayed taken until the head was done.
/// Virtual time (paused clock): the figure is exact and the same on every machine.
#[tokio::test(start_paused = true)]
async fn a_slow_message_does_not_hold_back_the_window() {
    let gauge = Gauge::new();
    let g = gauge.clone();
    let handler = service_fn(move |msg: Message| {
        let g = g.clone();
        async move {
            let _running = g.enter();
            let late = if msg.id() == "m0" { 1_000 } else { 0 };
            tokio::time::sleep(Duration::from_millis(100 + late)).await;
            Ok::<(), BoxError>(())
        }
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .namespace("t")
        .clock(Clock::tokio())
        .concurrency(10)
        .build();
    let batch: Vec<Rec> = (0..100).map(|i| rec(&format!("m{i}"), "x")).collect();
    let started = tokio::time::Instant::now();
    let report = p.process(event(&batch)).await.unwrap();
    let took = started.elapsed();
    println!("100 messages, 10 at once, the first 1 s late: {took:?} (virtual)");
    assert_eq!(report.counts().processed, 100);
    assert_eq!(gauge.max(), 10, "the window is still 10 messages");
    // 1.1 s for the slow one; 99 others on 9 places is 1.1 s too. 2.0 s if the window stalls.
    assert!(
        took < Duration::from_millis(1_300),
        "the batch took {took:?}: the window waited for its slow first message"
    );
    let ids: Vec<&str> = report
        .items()
        .iter()
        .map(|i| i.message_id.as_str())
        .collect();
    let expected: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    assert_eq!(ids, expected, "outcomes in batch order");
}

// ---------------------------------------------------------------------------------------------
// After the batch
// ---------------------------------------------------------------------------------------------

/// A step registered with `after_batch` runs once per batch on every outcome, sees what it
/// asked to keep of each record, and what it changes is what the report and the response say.
#[tokio::test]
async fn an_after_batch_step_sees_every_outcome_and_its_changes_are_reported() {
    use futures::future::BoxFuture;
    use sqs_claim::processor::{AfterBatch, Finished};

    /// Reports a failed message handled when its body says it may be dropped.
    #[derive(Debug, Default)]
    struct DropFailed(AtomicUsize);

    impl AfterBatch for DropFailed {
        fn keeps_body(&self, _receive_count: Option<u32>) -> bool {
            true
        }

        fn after<'a>(&'a self, batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                self.0.fetch_add(1, Ordering::Relaxed);
                let drop: Vec<bool> = batch
                    .received()
                    .iter()
                    .map(|r| r.body() == Some("FAIL"))
                    .collect();
                // Inside the budget, as a call out would be.
                assert_eq!(batch.bounded(async { 7 }).await, Some(7));
                for (item, drop) in batch.items_mut().iter_mut().zip(drop) {
                    if drop && matches!(item.outcome, Outcome::Failed(_)) {
                        item.outcome = Outcome::Processed;
                    }
                }
            })
        }
    }

    init_logs();
    let seen = Seen::new();
    let step = Arc::new(DropFailed::default());
    let p = Processor::builder(MemoryStore::new(), scripted(&seen))
        .namespace("t")
        .after_batch(Arc::clone(&step))
        .build();
    let report = p
        .process(event(&[rec("m1", "a"), rec("m2", "FAIL"), rec("m3", "c")]))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&report),
        ["processed", "processed", "processed"]
    );
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(step.0.load(Ordering::Relaxed), 1);
}

/// A step of yours that hangs, or panics, cannot take the answer down with it: the processor
/// cuts it off at the hard stop (deadline − answer reserve), or passes over its panic, and the
/// batch is reported with the outcomes the run gave.
#[tokio::test(start_paused = true)]
async fn an_after_batch_step_that_hangs_or_panics_never_holds_the_answer() {
    use futures::future::BoxFuture;
    use sqs_claim::processor::{AfterBatch, Finished};

    #[derive(Debug)]
    struct Hangs;
    impl AfterBatch for Hangs {
        fn after<'a>(&'a self, _batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
            Box::pin(std::future::pending())
        }
    }

    #[derive(Debug)]
    struct Panics;
    impl AfterBatch for Panics {
        fn after<'a>(&'a self, _batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
            Box::pin(async { panic!("a step of yours") })
        }
    }

    init_logs();
    let clock = Clock::tokio();
    let seen = Seen::new();
    let p = Processor::builder(MemoryStore::new(), scripted(&seen))
        .namespace("t")
        .clock(clock.clone())
        .answer_reserve(Duration::from_millis(250))
        .after_batch(Panics)
        .after_batch(Hangs)
        .build();
    let started = tokio::time::Instant::now();
    let deadline = deadline_in(&clock, Duration::from_secs(10));
    let report = p
        .process(event_with_deadline(
            &[rec("m1", "a"), rec("m2", "FAIL")],
            deadline,
        ))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["processed", "failed"]);
    assert_eq!(failed_ids(&report.response()), ["m2"]);
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(9_750) + Duration::from_millis(50),
        "answered by the hard stop, took {took:?}"
    );
}
