//! The lease policy (`ProcessorBuilder::lease_policy`): short and extended by default (a retry
//! at once waits the rest of a dead owner's lease out and takes over), until the invocation's
//! deadline, or at least a fixed time when asked, inside Lambda too; and the deprecated
//! `lease(d)`, which a deadline overrides, says so in the log instead of being ignored silently.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqs_claim::store::StoreAdmin;
use sqs_claim::store::{MemoryEffect, Status};
use sqs_claim::{
    BoxError, Clock, Effects, ErrorKind, FailureKind, Lease, MemoryStore, Message, Outcome,
    Processor, ProcessorBuilder,
};
use sqs_claim_testkit::store::{Action, Method, Spy};
use support::batch::*;
use tokio::sync::Notify;
use tower::service_fn;

/// A handler that signals it started, then hangs (an invocation that times out midway).
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

/// Invocation 1 (30 s deadline) claims m1 and dies; returns the store.
async fn dead_claim(clock: &Clock, lease: Lease) -> MemoryStore {
    let store = MemoryStore::new();
    let started = Arc::new(Notify::new());
    let first = Processor::builder(store.clone(), hanging(Arc::clone(&started)))
        .namespace("t")
        .clock(clock.clone())
        .lease_policy(lease)
        .build();
    let event = event_with_deadline(
        &[rec("m1", "x")],
        deadline_in(clock, Duration::from_secs(30)),
    );
    let run = tokio::spawn(async move { first.process(event).await });
    started.notified().await;
    run.abort();
    let _ = run.await;
    assert_eq!(store.status("t#m1"), Some(Status::InProgress));
    store
}

async fn redeliver(store: &MemoryStore, clock: &Clock, seen: &Seen) -> Outcome {
    let p = Processor::builder(store.clone(), scripted(seen))
        .namespace("t")
        .clock(clock.clone())
        .build();
    let report = p
        .process(event_with_deadline(
            &[rec("m1", "x")],
            deadline_in(clock, Duration::from_secs(30)),
        ))
        .await
        .expect("batch");
    outcome_of(&report, "m1").clone()
}

#[tokio::test(start_paused = true)]
async fn an_at_least_lease_keeps_a_timed_out_key_off_past_the_deadline() {
    let clock = Clock::tokio();
    let store = dead_claim(&clock, Lease::at_least(Duration::from_secs(3600))).await;
    let seen = Seen::new();

    // Long past the dead invocation's deadline, still held: the handler does not run again.
    tokio::time::advance(Duration::from_secs(600)).await;
    match redeliver(&store, &clock, &seen).await {
        Outcome::HeldElsewhere { lease_until } => {
            let left = lease_until
                .expect("a lease")
                .duration_since(clock.now())
                .expect("in the future");
            assert!(
                left > Duration::from_secs(2990) && left <= Duration::from_secs(3000),
                "an hour from the claim: {left:?} left"
            );
        }
        other => panic!("expected HeldElsewhere, got {other:?}"),
    }
    assert_eq!(seen.calls(), 0);

    // After the hour, the next delivery takes the claim over and runs.
    tokio::time::advance(Duration::from_secs(3001)).await;
    assert_eq!(redeliver(&store, &clock, &seen).await, Outcome::Processed);
    assert_eq!(seen.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_default_lease_is_short_and_a_retry_at_once_waits_it_out() {
    let clock = Clock::tokio();
    let store = dead_claim(&clock, Lease::default()).await;
    // A quarter of the 30 s: the claim lapses 7.5 s after it was taken.
    let lease = store
        .inspect("t#m1")
        .await
        .unwrap()
        .unwrap()
        .record
        .lease_until
        .unwrap();
    let left = lease.duration_since(clock.now()).unwrap();
    assert!(
        left > Duration::from_millis(7_450) && left <= Duration::from_millis(7_500),
        "{left:?}"
    );
    // A retry at once (a stream's) waits it out and takes the key over: the crash costs one
    // retry.
    let seen = Seen::new();
    let before = clock.now();
    assert_eq!(redeliver(&store, &clock, &seen).await, Outcome::Processed);
    let waited = clock.now().duration_since(before).unwrap();
    assert!(
        waited >= Duration::from_millis(7_450) && waited < Duration::from_millis(7_600),
        "{waited:?}"
    );
    assert_eq!(seen.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_until_deadline_lease_holds_a_retry_at_once_off() {
    let clock = Clock::tokio();
    let store = dead_claim(&clock, Lease::until_deadline(Duration::from_secs(300))).await;
    let seen = Seen::new();
    // It lapses at the dead invocation's deadline, after the retry's cut-off: held.
    assert_eq!(
        redeliver(&store, &clock, &seen).await.name(),
        "held_elsewhere"
    );
    tokio::time::advance(Duration::from_secs(31)).await;
    assert_eq!(redeliver(&store, &clock, &seen).await, Outcome::Processed);
    assert_eq!(seen.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_at_least_lease_shorter_than_the_deadline_still_covers_the_run() {
    let clock = Clock::tokio();
    let store = dead_claim(&clock, Lease::at_least(Duration::from_secs(1))).await;
    let record = store.inspect("t#m1").await.unwrap().unwrap().record;
    // Claimed at the start of a 30 s invocation: held until its deadline, not 1 s.
    let left = record
        .lease_until
        .unwrap()
        .duration_since(clock.now())
        .unwrap();
    assert!(
        left > Duration::from_millis(29_950) && left <= Duration::from_secs(30),
        "{left:?}"
    );
    let seen = Seen::new();
    tokio::time::advance(Duration::from_secs(20)).await;
    // The retry's budget ends after the lease: it waits the 10 s out and takes over.
    let before = clock.now();
    assert_eq!(redeliver(&store, &clock, &seen).await, Outcome::Processed);
    assert!(clock.now().duration_since(before).unwrap() >= Duration::from_secs(10));
}

/// A handler of `run` (tokio's clock) that commits one increment of `applied`, and counts its
/// calls in `seen`.
fn slow_effect(
    seen: &Seen,
    applied: &Arc<AtomicUsize>,
    run: Duration,
) -> impl tower::Service<Message, Response = Effects<MemoryEffect>, Error = BoxError, Future: Send>
+ Clone
+ Send
+ Sync
+ 'static {
    let (seen, applied) = (seen.clone(), Arc::clone(applied));
    service_fn(move |msg: Message| {
        let (seen, applied) = (seen.clone(), Arc::clone(&applied));
        async move {
            seen.saw(msg.id());
            tokio::time::sleep(run).await;
            Ok::<_, BoxError>(Effects::one(MemoryEffect::new(move || {
                applied.fetch_add(1, Ordering::SeqCst);
            })))
        }
    })
}

/// A processor on `store` (namespace `t`, on `clock`) whose handler runs `run` and commits one
/// increment of `applied` ([`slow_effect`]).
fn slow_processor(
    store: &Spy<MemoryStore>,
    clock: &Clock,
    seen: &Seen,
    applied: &Arc<AtomicUsize>,
    run: Duration,
) -> ProcessorBuilder<
    Spy<MemoryStore>,
    impl tower::Service<Message, Response = Effects<MemoryEffect>, Error = BoxError, Future: Send>
    + Clone
    + Send
    + Sync
    + 'static,
> {
    Processor::builder(store.clone(), slow_effect(seen, applied, run))
        .namespace("t")
        .clock(clock.clone())
}

/// `ids` as one batch whose invocation has 60 s left.
fn batch_of_60s(
    clock: &Clock,
    ids: &[&str],
) -> lambda_runtime::LambdaEvent<sqs_claim::events::SqsEvent> {
    let records: Vec<_> = ids.iter().map(|id| rec(id, "x")).collect();
    event_with_deadline(&records, deadline_in(clock, Duration::from_secs(60)))
}

/// A live owner whose handler runs past its first lease (40 s, against 15 s) extends it each
/// time half of it is left, and a second worker meeting the key meanwhile never takes it over:
/// it waits, then finds it done. A handler that ends inside its first half lease costs no
/// extension.
#[tokio::test(start_paused = true)]
async fn a_live_owner_past_its_first_lease_is_never_taken_over() {
    let clock = Clock::tokio();
    let store = Spy::new(MemoryStore::new());
    let applied = Arc::new(AtomicUsize::new(0));
    let (owner_seen, other_seen) = (Seen::new(), Seen::new());
    let owner = slow_processor(
        &store,
        &clock,
        &owner_seen,
        &applied,
        Duration::from_secs(40),
    )
    .build();
    let event = batch_of_60s(&clock, &["m1"]);
    let owner_run = tokio::spawn(async move { owner.process(event).await });
    tokio::time::sleep(Duration::from_secs(20)).await;
    // A second worker (a duplicate delivery) at 20 s, past the owner's first lease (15 s).
    let other = slow_processor(&store, &clock, &other_seen, &applied, Duration::ZERO).build();
    let report = other.process(batch_of_60s(&clock, &["m1"])).await.unwrap();
    let name = outcome_of(&report, "m1").name();
    assert!(
        name == "duplicate" || name == "held_elsewhere",
        "the live owner's key: {name}"
    );
    let report = owner_run.await.unwrap().unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    assert_eq!(other_seen.calls(), 0, "never taken over while it ran");
    assert_eq!(applied.load(Ordering::SeqCst), 1);
    assert!(
        store.count(Method::Extend) >= 3,
        "extended each half lease: {}",
        store.count(Method::Extend)
    );

    // A handler that ends inside its first half lease: no extension.
    let quick = Spy::new(MemoryStore::new());
    let p = slow_processor(
        &quick,
        &clock,
        &Seen::new(),
        &applied,
        Duration::from_secs(7),
    )
    .build();
    let report = p.process(batch_of_60s(&clock, &["m1"])).await.unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    assert_eq!(quick.count(Method::Extend), 0);
    assert_eq!(quick.calls(), 2, "a claim and a completion");
}

/// An owner whose store does not answer its extensions stops the handler when its lease
/// lapses: the message fails for retry, naming why, and nothing of the handler is committed;
/// another worker then takes the key over and applies it once.
#[tokio::test(start_paused = true)]
async fn an_owner_that_cannot_extend_stops_and_commits_nothing() {
    let clock = Clock::tokio();
    let dark = Arc::new(AtomicBool::new(true));
    let store = Spy::new(MemoryStore::new()).on_call({
        let dark = Arc::clone(&dark);
        move |call| match call.method() {
            Method::Extend if dark.load(Ordering::SeqCst) => Action::Fail(sqs_claim::Error::new(
                ErrorKind::StoreUnavailable,
                "scripted: connection refused",
            )),
            _ => Action::Forward,
        }
    });
    let applied = Arc::new(AtomicUsize::new(0));
    let seen = Seen::new();
    let owner = slow_processor(&store, &clock, &seen, &applied, Duration::from_secs(40)).build();
    let started = clock.now();
    let report = owner.process(batch_of_60s(&clock, &["m1"])).await.unwrap();
    let stopped_after = clock.now().duration_since(started).unwrap();
    match outcome_of(&report, "m1") {
        Outcome::Failed(f) => {
            assert_eq!(f.kind, FailureKind::StoreUnavailable, "{f:?}");
            assert!(
                f.message.contains("stopped") && f.message.contains("nothing was committed"),
                "{}",
                f.message
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(
        stopped_after >= Duration::from_millis(14_900) && stopped_after < Duration::from_secs(16),
        "stopped when its 15 s lease lapsed: {stopped_after:?}"
    );
    assert!(
        store.count(Method::Extend) >= 2,
        "tried again before it lapsed"
    );
    assert_eq!(applied.load(Ordering::SeqCst), 0, "nothing committed");
    assert_eq!(
        store.count(Method::Release),
        0,
        "the claim is left to lapse"
    );

    // The store answers again: the retry takes the lapsed claim over and applies it once.
    dark.store(false, Ordering::SeqCst);
    let retry = slow_processor(&store, &clock, &seen, &applied, Duration::ZERO).build();
    let report = retry.process(batch_of_60s(&clock, &["m1"])).await.unwrap();
    assert_eq!(outcome_of(&report, "m1"), &Outcome::Processed);
    assert_eq!(applied.load(Ordering::SeqCst), 1);
}

/// An owner paused past its lease (its handler blocks its thread for 3 s, as a stopped
/// process would, so its extensions cannot run) is taken over by a second worker, which
/// applies the key. When the owner resumes, its completion with effects is refused: its effects
/// are not committed, and the taker's stand. Real time, on two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_paused_past_its_lease_is_fenced_after_a_takeover() {
    let store = MemoryStore::new();
    let applied = Arc::new(Mutex::new(Vec::new()));
    let effect = |who: &'static str, applied: &Arc<Mutex<Vec<&'static str>>>| {
        let applied = Arc::clone(applied);
        Effects::one(MemoryEffect::new(move || applied.lock().unwrap().push(who)))
    };
    let entered = Arc::new(Notify::new());
    let owner = {
        let (applied, entered) = (Arc::clone(&applied), Arc::clone(&entered));
        Processor::builder(
            store.clone(),
            service_fn(move |_msg: Message| {
                let (applied, entered) = (Arc::clone(&applied), Arc::clone(&entered));
                async move {
                    entered.notify_one();
                    // Paused: the thread is blocked, nothing of this task runs.
                    std::thread::sleep(Duration::from_secs(3));
                    Ok::<_, BoxError>(effect("owner", &applied))
                }
            }),
        )
        .namespace("t")
        .build()
    };
    let clock = Clock::system();
    // An 8 s invocation: a 2 s lease (a quarter, at least 2 s).
    let owner_run = {
        let event = event_with_deadline(
            &[rec("m1", "x")],
            deadline_in(&clock, Duration::from_secs(8)),
        );
        tokio::spawn(async move { owner.process(event).await })
    };
    entered.notified().await;
    let taker = {
        let applied = Arc::clone(&applied);
        Processor::builder(
            store.clone(),
            service_fn(move |_msg: Message| {
                let applied = Arc::clone(&applied);
                async move { Ok::<_, BoxError>(effect("taker", &applied)) }
            }),
        )
        .namespace("t")
        .build()
    };
    let report = taker
        .process(event_with_deadline(
            &[rec("m1", "x")],
            deadline_in(&clock, Duration::from_secs(8)),
        ))
        .await
        .unwrap();
    assert_eq!(
        outcome_of(&report, "m1"),
        &Outcome::Processed,
        "the taker waited the paused owner's lease out and took the key over"
    );
    let report = owner_run.await.unwrap().unwrap();
    match outcome_of(&report, "m1") {
        Outcome::Failed(f) => assert_eq!(f.kind, FailureKind::LostClaim, "{f:?}"),
        other => panic!("the resumed owner must be fenced, got {other:?}"),
    }
    assert_eq!(
        *applied.lock().unwrap(),
        ["taker"],
        "the taker's effects stand"
    );
    assert_eq!(store.status("t#m1"), Some(Status::Completed));
}

/// An owner whose extension gets no answer at all (the store gone silent) stops its handler
/// when its lease lapses, and the batch stops starting work on that store: the messages not yet
/// started are reported at once, naming the silent store, and run nothing.
#[tokio::test(start_paused = true)]
async fn an_unanswered_extension_stops_the_batch_starting_work() {
    let clock = Clock::tokio();
    let store = Spy::new(MemoryStore::new()).on_call(|call| match call.method() {
        Method::Extend => Action::Hang,
        _ => Action::Forward,
    });
    let applied = Arc::new(AtomicUsize::new(0));
    let seen = Seen::new();
    let owner = slow_processor(&store, &clock, &seen, &applied, Duration::from_secs(40))
        .concurrency(1)
        .build();
    let report = owner
        .process(batch_of_60s(&clock, &["m1", "m2", "m3"]))
        .await
        .unwrap();
    match outcome_of(&report, "m1") {
        Outcome::Failed(f) => {
            assert_eq!(f.kind, FailureKind::StoreUnavailable, "{f:?}");
            assert!(f.message.contains("did not answer"), "{}", f.message);
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    for id in ["m2", "m3"] {
        match outcome_of(&report, id) {
            Outcome::Failed(f) => {
                assert_eq!(f.kind, FailureKind::StoreUnavailable, "{f:?}");
                assert!(f.message.contains("store dark"), "{}", f.message);
            }
            other => panic!("{id}: expected not started on a dark store, got {other:?}"),
        }
    }
    assert_eq!(seen.ids(), ["m1"], "nothing more started");
    assert_eq!(applied.load(Ordering::SeqCst), 0);
}
