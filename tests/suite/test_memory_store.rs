//! `MemoryStore` keeps the store contract (the shared conformance suite, atomic effects
//! included), and leases lapse and are fenced end to end through the processor, on paused time.

use crate::support;

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sqs_claim::store::MemoryEffect;
use sqs_claim::store::{Claim, ClaimStore, ClaimToken, Completion, Effects, Status};
use sqs_claim::{
    BoxError, Clock, ErrorKind, FailureKind, Lease, MemoryStore, Message, Outcome, Processor,
};
use sqs_claim_testkit::conformance::request;
use sqs_claim_testkit::conformance::{self, EffectProbe};
use support::batch::*;
use tokio::sync::{Notify, oneshot};
use tower::service_fn;

/// Effects on a shared set of markers: `write` inserts its marker, `rejected` refuses.
#[derive(Clone, Default)]
struct Probe {
    applied: Arc<Mutex<HashSet<String>>>,
}

impl Probe {
    fn insert(&self, marker: &str) -> MemoryEffect {
        let applied = Arc::clone(&self.applied);
        let marker = marker.to_owned();
        MemoryEffect::new(move || {
            applied.lock().unwrap().insert(marker.clone());
        })
    }

    fn has(&self, marker: &str) -> bool {
        self.applied.lock().unwrap().contains(marker)
    }
}

impl EffectProbe<MemoryStore> for Probe {
    fn write(&self, marker: &str) -> MemoryEffect {
        self.insert(marker)
    }

    fn rejected(&self, marker: &str) -> MemoryEffect {
        let applied = Arc::clone(&self.applied);
        let marker = marker.to_owned();
        MemoryEffect::conditional(
            || Err("condition failed".to_owned()),
            move || {
                applied.lock().unwrap().insert(marker.clone());
            },
        )
    }

    fn applied(&self, marker: &str) -> impl Future<Output = bool> + Send {
        let applied = self.has(marker);
        async move { applied }
    }
}

#[tokio::test]
async fn conformance_suite() {
    conformance::run_all(&MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_admin_operations() {
    conformance::run_admin(&MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_races_on_a_multi_thread_runtime() {
    let store = MemoryStore::new();
    conformance::race(&store, 100, 32).await;
    conformance::takeover_race(&store, 50, 32).await;
}

#[tokio::test]
async fn conformance_atomic_effects() {
    let probe = Probe::default();
    conformance::run_effects(&MemoryStore::new(), &probe).await;
    // The suite's refused effect was never applied either.
    assert!(
        !probe
            .applied
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.ends_with("#bad")),
        "a refused effect was applied: {:?}",
        probe.applied.lock().unwrap()
    );
}

async fn acquire(store: &MemoryStore, key: &str, now: SystemTime) -> ClaimToken {
    match store.claim(request(key, now)).await.unwrap() {
        Claim::Acquired(t) => t,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

#[tokio::test]
async fn unavailable_store_fails_every_call_and_recovers() {
    let store = MemoryStore::new();
    let now = SystemTime::now();
    let token = acquire(&store, "k", now).await;
    store.set_unavailable(true);
    for err in [
        store.claim(request("k2", now)).await.unwrap_err(),
        store
            .complete_with("k", &token, Completion::new(now))
            .await
            .unwrap_err(),
        store.release("k", &token).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
        assert!(err.is_transient());
    }
    store.set_unavailable(false);
    assert_eq!(
        store.status("k"),
        Some(Status::InProgress),
        "an outage changes nothing"
    );
    store.release("k", &token).await.unwrap();
    assert!(store.status("k").is_none());
}

#[tokio::test]
async fn injected_completion_failures_are_counted_and_write_nothing() {
    let store = MemoryStore::new();
    let probe = Probe::default();
    let now = SystemTime::now();
    let token = acquire(&store, "k", now).await;
    store.fail_next_completions(2);
    for _ in 0..2 {
        let err = store
            .complete_with(
                "k",
                &token,
                Completion::new(now).with_effects(Effects::one(probe.insert("e"))),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
        assert!(!probe.has("e"));
        assert_eq!(store.status("k"), Some(Status::InProgress));
    }
    store
        .complete_with(
            "k",
            &token,
            Completion::new(now + Duration::from_secs(60))
                .with_effects(Effects::one(probe.insert("e"))),
        )
        .await
        .unwrap();
    assert!(probe.has("e"));
    assert_eq!(store.status("k"), Some(Status::Completed));
}

// ---------------------------------------------------------------------------------------------
// Lease lapse and fencing through the processor, on paused time
// ---------------------------------------------------------------------------------------------

/// A handler that signals when it has started, then waits forever (an invocation that hangs and
/// is killed at its deadline).
fn hanging(
    started: Arc<Notify>,
) -> impl tower::Service<Message, Response = (), Error = BoxError, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    service_fn(move |_msg: Message| {
        let started = Arc::clone(&started);
        async move {
            started.notify_one();
            std::future::pending::<()>().await;
            Ok::<(), BoxError>(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn claim_of_a_dead_invocation_is_taken_over_after_its_deadline() {
    init_logs();
    let clock = Clock::tokio();
    let store = MemoryStore::new();
    let batch = [rec("m1", "x"), rec("m2", "y")];

    // Invocation 1 claims m1 until its deadline (`Lease::until_deadline`) and hangs in the
    // handler; then Lambda kills it at its deadline.
    let started = Arc::new(Notify::new());
    let first = Processor::builder(store.clone(), hanging(Arc::clone(&started)))
        .namespace("t")
        .clock(clock.clone())
        .concurrency(1)
        .lease_policy(Lease::until_deadline(Duration::from_secs(300)))
        .build();
    let deadline1 = deadline_in(&clock, Duration::from_secs(30));
    let run1 = tokio::spawn({
        let event = event_with_deadline(&batch[..1], deadline1);
        async move { first.process(event).await }
    });
    started.notified().await;
    run1.abort();
    assert!(run1.await.unwrap_err().is_cancelled());
    assert_eq!(
        store.status("t#m1"),
        Some(Status::InProgress),
        "the dead claim remains"
    );

    // Invocation 2 at once, with the same 30 s: m1's lease lapses after its cut-off (30 s less
    // the 2 s margin), so m1 is held elsewhere, until that deadline.
    let seen = Seen::new();
    let second = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .clock(clock.clone())
        .build();
    let report = second
        .process(event_with_deadline(
            &batch,
            deadline_in(&clock, Duration::from_secs(30)),
        ))
        .await
        .unwrap();
    match outcome_of(&report, "m1") {
        Outcome::HeldElsewhere { lease_until } => {
            let lease = sqs_claim::store::epoch_millis(lease_until.unwrap());
            assert_eq!(
                lease, deadline1 as i64,
                "the lease is the invocation's deadline"
            );
        }
        other => panic!("expected HeldElsewhere, got {other:?}"),
    }
    assert_eq!(outcome_of(&report, "m2"), &Outcome::Processed);
    assert_eq!(failed_ids(&report.response()), ["m1"]);
    assert_eq!(seen.ids(), ["m2"]);

    // Just before the deadline, the lease lapses inside the redelivery's budget: it waits the
    // lease out (1 s), takes the claim over and runs the handler.
    tokio::time::advance(Duration::from_millis(29_000)).await;
    let before = clock.now();
    let report = second
        .process(event_with_deadline(
            &batch,
            deadline_in(&clock, Duration::from_secs(30)),
        ))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["processed", "duplicate"]);
    let waited = clock.now().duration_since(before).unwrap();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_millis(1_100),
        "waited the lease out, no longer: {waited:?}"
    );
    assert_eq!(seen.ids(), ["m2", "m1"]);
    assert_eq!(store.status("t#m1"), Some(Status::Completed));
}

#[tokio::test(start_paused = true)]
async fn claim_without_a_deadline_lapses_after_the_configured_lease() {
    let clock = Clock::tokio();
    let store = MemoryStore::new();
    let started = Arc::new(Notify::new());
    let first = Processor::builder(store.clone(), hanging(Arc::clone(&started)))
        .namespace("t")
        .clock(clock.clone())
        .lease_policy(Lease::until_deadline(Duration::from_secs(60)))
        .build();
    // `Context::deadline` 0: no deadline, so the lease is the configured one.
    let run1 = tokio::spawn(async move { first.process(event(&[rec("m1", "x")])).await });
    started.notified().await;
    run1.abort();
    let _ = run1.await;

    let seen = Seen::new();
    let second = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .clock(clock.clone())
        .build();
    tokio::time::advance(Duration::from_secs(59)).await;
    let report = second.process(event(&[rec("m1", "x")])).await.unwrap();
    assert_eq!(outcome_of(&report, "m1").name(), "held_elsewhere");
    tokio::time::advance(Duration::from_secs(2)).await;
    let report = second.process(event(&[rec("m1", "x")])).await.unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    assert_eq!(seen.calls(), 1);
}

/// A handler that returns one effect (marker = `<tag>:<message id>`) once `go` fires, counting
/// its calls.
fn gated_with_effect(
    probe: &Probe,
    tag: &'static str,
    gate: Arc<Mutex<Option<oneshot::Receiver<()>>>>,
    started: Arc<Notify>,
    calls: Arc<AtomicUsize>,
) -> impl tower::Service<Message, Response = Vec<MemoryEffect>, Error = BoxError, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    let probe = probe.clone();
    service_fn(move |msg: Message| {
        calls.fetch_add(1, Ordering::SeqCst);
        let effect = probe.insert(&format!("{tag}:{}", msg.id()));
        let gate = gate.lock().unwrap().take();
        let started = Arc::clone(&started);
        async move {
            started.notify_one();
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            Ok::<_, BoxError>(vec![effect])
        }
    })
}

#[tokio::test(start_paused = true)]
async fn late_completion_of_a_lapsed_claim_is_fenced() {
    let clock = Clock::tokio();
    let store = MemoryStore::new();
    let probe = Probe::default();
    let batch = [rec("m1", "x")];

    // Invocation 1 claims m1; its handler is slow and outlives the lease.
    let (go, gate) = oneshot::channel();
    let started = Arc::new(Notify::new());
    let calls1 = Arc::new(AtomicUsize::new(0));
    let slow = Processor::builder(
        store.clone(),
        gated_with_effect(
            &probe,
            "slow",
            Arc::new(Mutex::new(Some(gate))),
            Arc::clone(&started),
            Arc::clone(&calls1),
        ),
    )
    .namespace("t")
    .clock(clock.clone())
    .build();
    let deadline1 = deadline_in(&clock, Duration::from_secs(30));
    let run1 = tokio::spawn({
        let event = event_with_deadline(&batch, deadline1);
        async move { slow.process(event).await }
    });
    started.notified().await;

    // Past its deadline, invocation 2 takes the claim over and completes, with its effect.
    tokio::time::advance(Duration::from_secs(31)).await;
    let calls2 = Arc::new(AtomicUsize::new(0));
    let fast = Processor::builder(
        store.clone(),
        gated_with_effect(
            &probe,
            "fast",
            Arc::default(),
            Arc::new(Notify::new()),
            Arc::clone(&calls2),
        ),
    )
    .namespace("t")
    .clock(clock.clone())
    .build();
    let report = fast
        .process(event_with_deadline(
            &batch,
            deadline_in(&clock, Duration::from_secs(30)),
        ))
        .await
        .unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    assert!(probe.has("fast:m1"));

    // Invocation 1 finally finishes: its completion carries a stale token and is refused.
    go.send(()).unwrap();
    let late = run1.await.unwrap().unwrap();
    let f = failure_of(&late, "m1");
    assert_eq!(f.kind, FailureKind::LostClaim, "{}", f.message);
    assert!(
        !probe.has("slow:m1"),
        "a fenced completion must not apply its effects"
    );
    assert_eq!(
        store.status("t#m1"),
        Some(Status::Completed),
        "the new owner's record stands"
    );
    assert_eq!(
        (calls1.load(Ordering::SeqCst), calls2.load(Ordering::SeqCst)),
        (1, 1)
    );

    // And the record stays a duplicate for everyone.
    let report = fast.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Duplicate);
}

#[tokio::test(start_paused = true)]
async fn late_completion_without_effects_is_fenced_but_reported_processed() {
    // Without effects the slow handler's side effect has happened whatever the store says, so
    // the message is reported processed (a retry would run it once more); the store still
    // refuses the stale token, so the new owner's record stands.
    let clock = Clock::tokio();
    let store = MemoryStore::new();
    let (go, gate) = oneshot::channel::<()>();
    let gate = Arc::new(Mutex::new(Some(gate)));
    let started = Arc::new(Notify::new());
    let handler = {
        let started = Arc::clone(&started);
        service_fn(move |_msg: Message| {
            let gate = gate.lock().unwrap().take();
            let started = Arc::clone(&started);
            async move {
                started.notify_one();
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                Ok::<(), BoxError>(())
            }
        })
    };
    let slow = Processor::builder(store.clone(), handler)
        .namespace("t")
        .clock(clock.clone())
        .build();
    let run1 = tokio::spawn({
        let event = event_with_deadline(
            &[rec("m1", "x")],
            deadline_in(&clock, Duration::from_secs(30)),
        );
        async move { slow.process(event).await }
    });
    started.notified().await;
    tokio::time::advance(Duration::from_secs(31)).await;

    // The new owner takes over and is still running when the slow one finishes.
    let now = clock.now();
    let token2 = acquire(&store, "t#m1", now).await;
    go.send(()).unwrap();
    let late = run1.await.unwrap().unwrap();
    assert_eq!(outcome_of(&late, "m1"), &Outcome::Processed);
    assert_eq!(
        store.status("t#m1"),
        Some(Status::InProgress),
        "the stale completion must not complete the new owner's claim"
    );
    store
        .complete_with(
            "t#m1",
            &token2,
            Completion::new(now + Duration::from_secs(60)),
        )
        .await
        .expect("the new owner still completes");
}

#[tokio::test(start_paused = true)]
async fn late_release_of_a_lapsed_claim_is_fenced() {
    // Invocation 1's handler fails after its lease lapsed and was taken over: its release must
    // not delete the new owner's claim.
    let clock = Clock::tokio();
    let store = MemoryStore::new();
    let (go, gate) = oneshot::channel::<()>();
    let gate = Arc::new(Mutex::new(Some(gate)));
    let started = Arc::new(Notify::new());
    let handler = {
        let started = Arc::clone(&started);
        service_fn(move |_msg: Message| {
            let gate = gate.lock().unwrap().take();
            let started = Arc::clone(&started);
            async move {
                started.notify_one();
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                Err::<(), BoxError>("failed late".into())
            }
        })
    };
    let slow = Processor::builder(store.clone(), handler)
        .namespace("t")
        .clock(clock.clone())
        .build();
    let run1 = tokio::spawn({
        let event = event_with_deadline(
            &[rec("m1", "x")],
            deadline_in(&clock, Duration::from_secs(30)),
        );
        async move { slow.process(event).await }
    });
    started.notified().await;
    tokio::time::advance(Duration::from_secs(31)).await;

    // Invocation 2 takes over and is still running (holds the claim) when 1 fails.
    let now = clock.now();
    let token2 = acquire(&store, "t#m1", now).await;
    go.send(()).unwrap();
    let late = run1.await.unwrap().unwrap();
    assert_eq!(failure_of(&late, "m1").kind, FailureKind::Handler);
    assert_eq!(
        store.status("t#m1"),
        Some(Status::InProgress),
        "a stale release must not delete the new owner's claim"
    );
    store
        .complete_with(
            "t#m1",
            &token2,
            Completion::new(now + Duration::from_secs(60)),
        )
        .await
        .expect("the new owner still completes");
}
