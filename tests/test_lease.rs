//! The lease policy (`ProcessorBuilder::lease_policy`): until the invocation's deadline by
//! default, or at least a fixed time when asked, inside Lambda too; and the deprecated
//! `lease(d)`, which a deadline overrides, says so in the log instead of being ignored silently.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use sqs_claim::store::Status;
use sqs_claim::store::StoreAdmin;
use sqs_claim::{BoxError, Clock, Lease, MemoryStore, Message, Outcome, Processor};
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
async fn the_default_lease_ends_at_the_deadline() {
    let clock = Clock::tokio();
    let store = dead_claim(&clock, Lease::default()).await;
    let seen = Seen::new();
    tokio::time::advance(Duration::from_secs(31)).await;
    assert_eq!(redeliver(&store, &clock, &seen).await, Outcome::Processed);
}

#[tokio::test(start_paused = true)]
async fn an_at_least_lease_shorter_than_the_deadline_still_covers_the_run() {
    let clock = Clock::tokio();
    let store = dead_claim(&clock, Lease::at_least(Duration::from_secs(1))).await;
    let seen = Seen::new();
    tokio::time::advance(Duration::from_secs(20)).await;
    assert_eq!(
        redeliver(&store, &clock, &seen).await.name(),
        "held_elsewhere"
    );
    let record = store.inspect("t#m1").await.unwrap().unwrap().record;
    assert!(record.lease_until.is_some());
}
