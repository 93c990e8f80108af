//! The deadline is a hard bound: with paused time, a step that never finishes (a hung handler,
//! a store that stalls on claim, completion or release) is cut off at `deadline - answer
//! reserve`, the batch answers, and only the affected messages are reported, each with the
//! step it was at. Then the claim rules after a cut-off, the handler timeout, the retry budget,
//! and one run on the real clock.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use sqs_claim::store::MemoryEffect;
use sqs_claim::store::{ClaimStore, Effects, Status};
use sqs_claim::{
    BoxError, Clock, Error, FailureKind, MemoryStore, Message, NotStarted, Outcome, Processor,
    RetryPolicy, Step,
};
use sqs_claim_testkit::store::{Action, Method, Spy};
use support::batch::*;
use tower::service_fn;

/// A memory store whose operations can be made to hang forever (a store that stalls or goes
/// silent), or to fail transiently: switches read at each call by the spy in front of it,
/// which counts the calls.
#[derive(Clone)]
struct Stalling {
    spy: Spy<MemoryStore>,
    hang_claim: Arc<AtomicBool>,
    hang_complete: Arc<AtomicBool>,
    hang_release: Arc<AtomicBool>,
    fail_complete: Arc<AtomicBool>,
}

impl Stalling {
    /// All switches off; the store says whether its client `retries_internally`, and the
    /// trait's defaults for the rest.
    fn new(retries_internally: bool) -> Self {
        let (hang_claim, hang_complete, hang_release, fail_complete) = (
            Arc::default(),
            Arc::default(),
            Arc::default(),
            Arc::default(),
        );
        let switches = (
            Arc::clone(&hang_claim),
            Arc::clone(&hang_complete),
            Arc::clone(&hang_release),
            Arc::clone(&fail_complete),
        );
        let spy = Spy::new(MemoryStore::new())
            .on_call(move |call| {
                let (claim, complete, release, fail) = &switches;
                let on = |flag: &AtomicBool| flag.load(Ordering::SeqCst);
                match call.method() {
                    Method::Claim if on(claim) => Action::Hang,
                    Method::Complete if on(complete) => Action::Hang,
                    Method::Complete if on(fail) => Action::Fail(Error::new(
                        sqs_claim::ErrorKind::StoreUnavailable,
                        "scripted transient failure",
                    )),
                    Method::Release if on(release) => Action::Hang,
                    _ => Action::Forward,
                }
            })
            .map_capabilities(move |_| {
                let mut caps = sqs_claim::store::Capabilities::new();
                caps.retries_internally = retries_internally;
                caps
            });
        Stalling {
            spy,
            hang_claim,
            hang_complete,
            hang_release,
            fail_complete,
        }
    }
}

impl Default for Stalling {
    fn default() -> Self {
        Stalling::new(false)
    }
}

/// A handler that hangs forever on bodies containing `HANG`, fails on `FAIL`, and otherwise
/// returns one effect that counts itself in `applied`.
fn handler(
    applied: &Arc<AtomicUsize>,
) -> impl tower::Service<
    Message,
    Response = Effects<MemoryEffect>,
    Error = BoxError,
    Future: Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    let applied = Arc::clone(applied);
    service_fn(move |msg: Message| {
        let applied = Arc::clone(&applied);
        async move {
            if msg.body().contains("HANG") {
                std::future::pending::<()>().await;
            }
            if msg.body().contains("FAIL") {
                return Err::<_, BoxError>("scripted failure".into());
            }
            if msg.body().contains("NOEFFECT") {
                return Ok(Effects::none());
            }
            Ok(Effects::one(MemoryEffect::new(move || {
                applied.fetch_add(1, Ordering::SeqCst);
            })))
        }
    })
}

/// A test's clock (paused tokio time), store and applied-effects counter.
fn fixture() -> (Clock, Stalling, Arc<AtomicUsize>) {
    (
        Clock::tokio(),
        Stalling::default(),
        Arc::new(AtomicUsize::new(0)),
    )
}

const DEADLINE: Duration = Duration::from_secs(10);
const RESERVE: Duration = Duration::from_millis(300);

/// Processes `batch` with a deadline `DEADLINE` from now and the answer reserve `RESERVE`;
/// returns the report and how long the call took on tokio's (paused) clock.
async fn run<S, H>(
    p: &Processor<S, H>,
    clock: &Clock,
    batch: &[Rec],
) -> (sqs_claim::BatchReport, Duration)
where
    S: ClaimStore,
    H: tower::Service<Message> + Clone + Send + Sync + 'static,
    H::Future: Send + 'static,
    H::Response: Into<Effects<S::Effect>>,
    H::Error: Into<BoxError>,
{
    let start = tokio::time::Instant::now();
    let deadline = deadline_in(clock, DEADLINE);
    // Twice the deadline: a processor that does not cut work off fails here instead of hanging.
    let report = tokio::time::timeout(
        2 * DEADLINE,
        p.process(event_with_deadline(batch, deadline)),
    )
    .await
    .expect("the batch did not answer by its deadline")
    .expect("batch accepted");
    (report, start.elapsed())
}

fn processor(
    store: &Stalling,
    clock: &Clock,
    applied: &Arc<AtomicUsize>,
) -> sqs_claim::ProcessorBuilder<
    Spy<MemoryStore>,
    impl tower::Service<
        Message,
        Response = Effects<MemoryEffect>,
        Error = BoxError,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static,
> {
    Processor::builder(store.spy.clone(), handler(applied))
        .namespace("t")
        .clock(clock.clone())
        .answer_reserve(RESERVE)
}

/// Asserts the call returned exactly at the hard stop (paused time makes this exact), before
/// the deadline.
fn answered_at_the_hard_stop(took: Duration) {
    assert_eq!(took, DEADLINE - RESERVE, "answered at deadline - reserve");
}

#[tokio::test(start_paused = true)]
async fn a_hung_handler_is_cut_off_and_keeps_its_claim() {
    init_logs();
    let (clock, store, applied) = fixture();
    let p = processor(&store, &clock, &applied).build();
    let batch = [rec("m1", "ok"), rec("m2", "HANG"), rec("m3", "ok")];
    let (report, took) = run(&p, &clock, &batch).await;

    answered_at_the_hard_stop(took);
    assert_eq!(
        outcome_names(&report),
        ["processed", "cut_off", "processed"]
    );
    assert_eq!(outcome_of(&report, "m2"), &Outcome::CutOff(Step::Handler));
    assert_eq!(failed_ids(&report.response()), ["m2"]);
    assert_eq!(report.counts().cut_off, 1);
    assert_eq!(applied.load(Ordering::SeqCst), 2);
    // Kept, not released: a redelivery must not race a call that may still be in flight.
    assert_eq!(store.spy.get_ref().status("t#m2"), Some(Status::InProgress));
    assert_eq!(store.spy.count(Method::Release), 0, "no release");
    let detail = detail_of(&report, "m2");
    assert!(detail.starts_with("handler: "), "{detail}");
}

#[tokio::test(start_paused = true)]
async fn the_kept_claim_lapses_with_its_lease_and_the_redelivery_takes_over() {
    let (clock, store, applied) = fixture();
    let p = processor(&store, &clock, &applied).build();
    let (report, _) = run(&p, &clock, &[rec("m1", "HANG")]).await;
    assert_eq!(outcome_names(&report), ["cut_off"]);

    // Right after the answer, the first lease is live for RESERVE more: the hung handler
    // extended it up to its deadline, never past it. A redelivery at once waits that out (its
    // own cut-off is later) and takes the key over.
    let p2 = processor(&store, &clock, &applied).build();
    let (early, took) = run(&p2, &clock, &[rec("m1", "ok")]).await;
    assert_eq!(outcome_names(&early), ["processed"]);
    assert!(
        took >= RESERVE && took < RESERVE + Duration::from_millis(100),
        "waited the kept lease out: {took:?}"
    );
    assert_eq!(applied.load(Ordering::SeqCst), 1, "applied once");
    let (later, _) = run(&p2, &clock, &[rec("m1", "ok")]).await;
    assert_eq!(outcome_names(&later), ["duplicate"]);
    assert_eq!(applied.load(Ordering::SeqCst), 1, "applied once");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_claim_is_cut_off_and_nothing_runs() {
    let (clock, store, applied) = fixture();
    store.hang_claim.store(true, Ordering::SeqCst);
    let p = processor(&store, &clock, &applied).build();
    let (report, took) = run(&p, &clock, &[rec("m1", "ok"), rec("m2", "ok")]).await;

    answered_at_the_hard_stop(took);
    assert_eq!(outcome_names(&report), ["cut_off", "cut_off"]);
    assert_eq!(outcome_of(&report, "m1"), &Outcome::CutOff(Step::Claim));
    assert_eq!(failed_ids(&report.response()), ["m1", "m2"]);
    assert_eq!(applied.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_completion_with_effects_is_cut_off_and_reported() {
    let (clock, store, applied) = fixture();
    store.hang_complete.store(true, Ordering::SeqCst);
    let p = processor(&store, &clock, &applied).build();
    let (report, took) = run(&p, &clock, &[rec("m1", "ok")]).await;

    answered_at_the_hard_stop(took);
    assert_eq!(
        outcome_of(&report, "m1"),
        &Outcome::CutOff(Step::Completion)
    );
    assert_eq!(failed_ids(&report.response()), ["m1"]);
    let detail = detail_of(&report, "m1");
    assert!(detail.contains("may or may not have committed"), "{detail}");
    assert_eq!(applied.load(Ordering::SeqCst), 0);

    // The redelivery, after the lease lapsed, applies the effects once.
    store.hang_complete.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(1)).await;
    let (again, _) = run(&p, &clock, &[rec("m1", "ok")]).await;
    assert_eq!(outcome_names(&again), ["processed"]);
    assert_eq!(applied.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_completion_without_effects_is_reported_processed() {
    // The handler's own side effect already happened: as for a completion that failed,
    // reporting a failure would run it again on redelivery.
    let (clock, store, applied) = fixture();
    store.hang_complete.store(true, Ordering::SeqCst);
    let p = processor(&store, &clock, &applied).build();
    let (report, took) = run(&p, &clock, &[rec("m1", "NOEFFECT")]).await;
    answered_at_the_hard_stop(took);
    assert_eq!(outcome_names(&report), ["processed"]);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_release_still_answers_with_the_handler_failure() {
    let (clock, store, applied) = fixture();
    store.hang_release.store(true, Ordering::SeqCst);
    let p = processor(&store, &clock, &applied).build();
    let (report, took) = run(&p, &clock, &[rec("m1", "FAIL"), rec("m2", "ok")]).await;

    answered_at_the_hard_stop(took);
    assert_eq!(outcome_names(&report), ["failed", "processed"]);
    assert_eq!(
        failure_of(&report, "m1").kind,
        FailureKind::Handler,
        "the handler's failure, not the release's"
    );
    assert_eq!(failed_ids(&report.response()), ["m1"]);
}

#[tokio::test(start_paused = true)]
async fn completion_retries_stop_before_the_budget_runs_out() {
    let (clock, store, applied) = fixture();
    store.fail_complete.store(true, Ordering::SeqCst);
    // Retries that would take far longer than the budget.
    let p = processor(&store, &clock, &applied)
        .completion_retry(
            RetryPolicy::new(1000, Duration::from_secs(1)).with_cap(Duration::from_secs(4)),
        )
        .build();
    let (report, took) = run(&p, &clock, &[rec("m1", "ok")]).await;
    assert!(
        took < DEADLINE - RESERVE,
        "gave up before the hard stop: {took:?}"
    );
    assert_eq!(
        failure_of(&report, "m1").kind,
        FailureKind::StoreUnavailable
    );
    let tries = store.spy.count(Method::Complete);
    assert!((2..1000).contains(&tries), "{tries} attempts");
}

#[tokio::test(start_paused = true)]
async fn no_retry_loop_on_top_of_a_client_that_retries_itself() {
    let clock = Clock::tokio();
    let store = Stalling::new(true);
    store.fail_complete.store(true, Ordering::SeqCst);
    let applied = Arc::new(AtomicUsize::new(0));
    let p = processor(&store, &clock, &applied)
        .completion_retry(RetryPolicy::new(5, Duration::from_millis(10)))
        .build();
    let (report, _) = run(&p, &clock, &[rec("m1", "ok")]).await;
    assert_eq!(
        failure_of(&report, "m1").kind,
        FailureKind::StoreUnavailable
    );
    assert_eq!(
        store.spy.count(Method::Complete),
        1,
        "one call: the client retries"
    );
}

#[tokio::test(start_paused = true)]
async fn the_handler_timeout_fails_one_message_and_keeps_its_claim() {
    let (clock, store, applied) = fixture();
    let p = processor(&store, &clock, &applied)
        .handler_timeout(Duration::from_secs(1))
        .build();
    let (report, took) = run(&p, &clock, &[rec("m1", "HANG"), rec("m2", "ok")]).await;

    assert_eq!(
        took,
        Duration::from_secs(1),
        "the timeout, not the deadline"
    );
    assert_eq!(outcome_names(&report), ["failed", "processed"]);
    let f = failure_of(&report, "m1");
    assert_eq!(f.kind, FailureKind::HandlerTimeout);
    assert!(f.message.contains("1000 ms"), "{}", f.message);
    assert_eq!(store.spy.get_ref().status("t#m1"), Some(Status::InProgress));
    assert_eq!(store.spy.count(Method::Release), 0);
}

#[tokio::test(start_paused = true)]
async fn fifo_a_hung_group_stops_there_and_other_groups_finish() {
    let (clock, store, applied) = fixture();
    let p = processor(&store, &clock, &applied).build();
    let batch = [
        fifo("a1", "A", "ok"),
        fifo("a2", "A", "HANG"),
        fifo("b1", "B", "ok"),
        fifo("a3", "A", "ok"),
        fifo("b2", "B", "ok"),
    ];
    let (report, took) = run(&p, &clock, &batch).await;
    answered_at_the_hard_stop(took);
    assert_eq!(
        outcome_names(&report),
        [
            "processed",
            "cut_off",
            "processed",
            "not_started",
            "processed"
        ]
    );
    assert_eq!(
        outcome_of(&report, "a3"),
        &Outcome::NotStarted(NotStarted::Deadline),
        "the rest of the lane is not started, for the deadline"
    );
    assert_eq!(failed_ids(&report.response()), ["a2", "a3"]);
}

#[tokio::test(start_paused = true)]
async fn a_copy_of_a_cut_off_key_is_not_started() {
    let (clock, store, applied) = fixture();
    let p = processor(&store, &clock, &applied)
        .key(sqs_claim::KeySource::JsonPointer("/k".into()))
        .payload_check(sqs_claim::PayloadCheck::Off)
        .build();
    let batch = [
        rec("m1", r#"{"k":"x","HANG":1}"#),
        rec("m2", r#"{"k":"y"}"#),
        rec("m3", r#"{"k":"x","HANG":1}"#),
    ];
    let (report, took) = run(&p, &clock, &batch).await;
    answered_at_the_hard_stop(took);
    assert_eq!(
        outcome_names(&report),
        ["cut_off", "processed", "not_started"]
    );
    assert_eq!(failed_ids(&report.response()), ["m1", "m3"]);
}

#[tokio::test(start_paused = true)]
async fn every_message_of_a_large_batch_is_answered_when_all_hang() {
    // More messages than the concurrency: the queued ones never start, the running ones are
    // cut off, and all of them are reported.
    let (clock, store, applied) = fixture();
    let p = processor(&store, &clock, &applied).concurrency(4).build();
    let batch: Vec<Rec> = (0..50).map(|i| rec(&format!("m{i}"), "HANG")).collect();
    let (report, took) = run(&p, &clock, &batch).await;
    answered_at_the_hard_stop(took);
    let c = report.counts();
    assert_eq!(c.cut_off + c.not_started, 50, "{c:?}");
    assert_eq!(c.cut_off, 4, "the four that started");
    assert_eq!(report.response().batch_item_failures.len(), 50);
}

#[tokio::test(start_paused = true)]
async fn no_deadline_means_nothing_is_cut_off() {
    let (clock, store, applied) = fixture();
    let slow = service_fn(|_msg: Message| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<(), BoxError>(())
    });
    let p = Processor::builder(store.spy.clone(), slow)
        .namespace("t")
        .clock(clock.clone())
        .build();
    let _ = &applied;
    let report = p.process(event(&[rec("m1", "x")])).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed"]);
}

/// The same bound on the real clock, end to end: a handler that never returns, a deadline
/// 1.5 s away. The answer comes before the deadline.
#[tokio::test]
async fn on_the_real_clock_the_answer_comes_before_the_deadline() {
    let store = Stalling::default();
    let applied = Arc::new(AtomicUsize::new(0));
    let p = Processor::builder(store.spy.clone(), handler(&applied))
        .namespace("t")
        .deadline_margin(Duration::from_millis(500))
        .build();
    let deadline = SystemTime::now() + Duration::from_millis(1500);
    let deadline_ms = sqs_claim::store::epoch_millis(deadline) as u64;
    let work = p.process(event_with_deadline(
        &[rec("m1", "HANG"), rec("m2", "ok")],
        deadline_ms,
    ));
    let report = tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .expect("the batch did not answer by its deadline")
        .unwrap();
    assert!(SystemTime::now() < deadline, "answered after the deadline");
    assert_eq!(outcome_names(&report), ["cut_off", "processed"]);
}

#[tokio::test(start_paused = true)]
async fn the_handler_is_told_when_the_budget_ends() {
    let clock = Clock::tokio();
    let store = Stalling::default();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let handler = service_fn(move |msg: Message| {
        let s = Arc::clone(&s);
        async move {
            let left = msg
                .stop_at()
                .map(|at| at.saturating_duration_since(tokio::time::Instant::now()));
            s.lock().unwrap().push((msg.stop_at(), left));
            Ok::<(), BoxError>(())
        }
    });
    let p = Processor::builder(store.spy.clone(), handler)
        .namespace("t")
        .clock(clock.clone())
        .answer_reserve(RESERVE)
        .build();
    let start = tokio::time::Instant::now();
    let (report, _) = run(&p, &clock, &[rec("m1", "x")]).await;
    assert_eq!(outcome_names(&report), ["processed"]);
    let (stop_at, left) = seen.lock().unwrap()[0];
    // The deadline is whole epoch milliseconds: equal to within one.
    let want = start + DEADLINE - RESERVE;
    let stop_at = stop_at.expect("a deadline");
    assert!(
        stop_at <= want && want - stop_at < Duration::from_millis(1),
        "{stop_at:?}"
    );
    let left = left.expect("a deadline");
    assert!(
        DEADLINE - RESERVE - left < Duration::from_millis(1),
        "{left:?}"
    );

    // Without a deadline there is nothing to tell.
    seen.lock().unwrap().clear();
    p.process(event(&[rec("m2", "x")])).await.unwrap();
    assert_eq!(seen.lock().unwrap()[0], (None, None));
}

/// The one-line explanation of message `id`'s outcome, as the batch report's JSON gives it.
fn detail_of(report: &sqs_claim::BatchReport, id: &str) -> String {
    let json = report.to_json();
    let items = json["outcomes"].as_array().expect("outcomes");
    let item = items
        .iter()
        .find(|i| i["message_id"] == id)
        .unwrap_or_else(|| panic!("no item {id} in the report"));
    item["detail"].as_str().expect("a detail").to_owned()
}
