//! A request still running (`IdempotencyBuilder::wait_in_progress`): a second request with its
//! key waits for the first, polling the record, and replays the first's response when it
//! completes; it runs its own handler when the first failed and released the key; it answers
//! `InProgress` as without a wait when the wait, or the invocation's budget, runs out. Memory
//! store and paused time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::idempotency::{Idempotency, key};
use sqs_claim::store::Status;
use sqs_claim::{BoxError, Clock, ErrorKind, MemoryStore};
use tokio::sync::Notify;

fn deadline_in(budget: Duration) -> Context {
    let mut context = Context::default();
    context.deadline = sqs_claim::store::epoch_millis(Clock::tokio().now() + budget) as u64;
    context
}

fn order(budget: Duration) -> LambdaEvent<Value> {
    LambdaEvent::new(json!({"order": "o-1", "cents": 5}), deadline_in(budget))
}

fn layer(store: &MemoryStore, wait: Duration) -> Idempotency<MemoryStore, key::JsonPointer> {
    Idempotency::builder(store.clone(), key::json_pointer("/order"))
        .namespace("orders")
        .clock(Clock::tokio())
        .wait_in_progress(wait)
        .build()
}

fn kind(
    result: &Result<sqs_claim::idempotency::IdempotentResponse, BoxError>,
) -> Option<ErrorKind> {
    result
        .as_ref()
        .err()
        .and_then(|e| e.downcast_ref::<sqs_claim::Error>())
        .map(sqs_claim::Error::kind)
}

/// Starts the first request: its handler holds the key until `release` is notified, then
/// answers `{"charge": "ch_1"}` (or fails, if `fail`).
async fn first_request(
    idempotency: &Idempotency<MemoryStore, key::JsonPointer>,
    store: &MemoryStore,
    release: &Arc<Notify>,
    runs: &Arc<AtomicUsize>,
    fail: bool,
) -> tokio::task::JoinHandle<Result<sqs_claim::idempotency::IdempotentResponse, BoxError>> {
    let (idempotency, release, runs) = (idempotency.clone(), release.clone(), runs.clone());
    let first = tokio::spawn(async move {
        idempotency
            .call(order(Duration::from_secs(60)), |_event| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                release.notified().await;
                if fail {
                    return Err::<Value, BoxError>("the bank said no".into());
                }
                Ok(json!({"charge": "ch_1", "n": 1}))
            })
            .await
    });
    while store.status("orders#o-1") != Some(Status::InProgress) {
        tokio::task::yield_now().await;
    }
    first
}

#[tokio::test(start_paused = true)]
async fn a_waiting_request_replays_the_first_response_when_it_completes() {
    let store = MemoryStore::new();
    let idempotency = layer(&store, Duration::from_secs(10));
    let (release, runs) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
    let first = first_request(&idempotency, &store, &release, &runs, false).await;

    let second = {
        let (idempotency, runs) = (idempotency.clone(), runs.clone());
        tokio::spawn(async move {
            idempotency
                .call(order(Duration::from_secs(60)), |_event| async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, BoxError>(json!({"charge": "ch_2"}))
                })
                .await
        })
    };
    // The first runs for 3 s while the second waits.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!second.is_finished(), "the second request waits");
    release.notify_one();
    let first = first.await.unwrap().unwrap();
    let second = second.await.unwrap().unwrap();
    assert!(second.is_replay());
    assert_eq!(second.json(), first.json());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the second handler never ran"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_runs_out_answers_in_progress() {
    let store = MemoryStore::new();
    let idempotency = layer(&store, Duration::from_secs(2));
    let (release, runs) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
    let first = first_request(&idempotency, &store, &release, &runs, false).await;

    let started = tokio::time::Instant::now();
    let second = idempotency
        .call(order(Duration::from_secs(60)), |_event| async {
            Ok::<_, BoxError>(json!({"charge": "ch_2"}))
        })
        .await;
    assert_eq!(kind(&second), Some(ErrorKind::InProgress));
    let waited = started.elapsed();
    assert!(
        waited <= Duration::from_secs(2) && waited >= Duration::from_secs(1),
        "waited {waited:?}, within the 2 s wait"
    );
    release.notify_one();
    first.await.unwrap().unwrap();

    // Without a wait: refused at once, as before.
    let store = MemoryStore::new();
    let idempotency = Idempotency::builder(store.clone(), key::json_pointer("/order"))
        .namespace("orders")
        .clock(Clock::tokio())
        .build();
    let first = first_request(&idempotency, &store, &release, &runs, false).await;
    let started = tokio::time::Instant::now();
    let second = idempotency
        .call(order(Duration::from_secs(60)), |_event| async {
            Ok::<_, BoxError>(json!({}))
        })
        .await;
    assert_eq!(kind(&second), Some(ErrorKind::InProgress));
    assert_eq!(started.elapsed(), Duration::ZERO);
    release.notify_one();
    first.await.unwrap().unwrap();
}

/// The wait never outlasts the invocation: with 1.5 s left and a 30 s wait, the answer comes
/// before the deadline minus the answer reserve.
#[tokio::test(start_paused = true)]
async fn the_wait_stays_inside_the_deadline() {
    let store = MemoryStore::new();
    let idempotency = layer(&store, Duration::from_secs(30));
    let (release, runs) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
    let first = first_request(&idempotency, &store, &release, &runs, false).await;

    let started = tokio::time::Instant::now();
    let second = idempotency
        .call(order(Duration::from_millis(1500)), |_event| async {
            Ok::<_, BoxError>(json!({}))
        })
        .await;
    assert_eq!(kind(&second), Some(ErrorKind::InProgress));
    // At most the deadline less the reserve: tokio's timer rounds a sleep up to the next
    // millisecond, so an answer due 1,249.x ms in shows as 1,250 ms on the paused clock.
    assert!(
        started.elapsed() <= Duration::from_millis(1250),
        "answered {:?} after the start, past the 250 ms reserve",
        started.elapsed()
    );
    release.notify_one();
    first.await.unwrap().unwrap();
}

/// The first request fails and releases the key: the waiting one acquires it at its next poll
/// and runs its own handler, as a retry would.
#[tokio::test(start_paused = true)]
async fn a_waiting_request_runs_when_the_first_fails() {
    let store = MemoryStore::new();
    let idempotency = layer(&store, Duration::from_secs(10));
    let (release, runs) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
    let first = first_request(&idempotency, &store, &release, &runs, true).await;

    let second = {
        let idempotency = idempotency.clone();
        tokio::spawn(async move {
            idempotency
                .call(order(Duration::from_secs(60)), |_event| async {
                    Ok::<_, BoxError>(json!({"charge": "ch_2"}))
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    release.notify_one();
    assert!(first.await.unwrap().is_err(), "the first request failed");
    let second = second.await.unwrap().unwrap();
    assert!(!second.is_replay());
    assert_eq!(second.json(), r#"{"charge":"ch_2"}"#);
}
