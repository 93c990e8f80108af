//! The processor on FIFO queues (source ARN ending in `.fifo`): order per message group, groups
//! concurrent, a failure stops the rest of its group (or of the batch), duplicates skipped in
//! place, the deadline cut-off in order, and fair queues (standard queues with groups) left alone.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqs_claim::store::{ClaimRequest, ClaimStore, Status};
use sqs_claim::{
    BatchReport, BoxError, Clock, FailureKind, FifoMode, KeySource, MemoryStore, Message,
    NotStarted, Outcome, Processor,
};
use support::batch::*;
use tower::service_fn;

/// The ids of `seen` that belong to `group` (ids are `<group><n>`, e.g. `a1`), in call order.
fn in_group(seen: &[String], group: &str) -> Vec<String> {
    seen.iter()
        .filter(|id| id.starts_with(group))
        .cloned()
        .collect()
}

/// A handler that records the order it is entered in, and sleeps a different time per message
/// (later messages of a group sleep less), so that running a group out of order or overlapped
/// would show in the recorded order and in the per-group gauge.
fn ordered_handler(
    seen: &Seen,
    per_group: &Arc<Mutex<HashMap<String, Gauge>>>,
    overall: &Gauge,
) -> impl tower::Service<Message, Response = (), Error = BoxError, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    let (seen, per_group, overall) = (seen.clone(), Arc::clone(per_group), overall.clone());
    service_fn(move |msg: Message| {
        let (seen, overall) = (seen.clone(), overall.clone());
        let group = msg.group_id().unwrap_or("").to_owned();
        let gauge = per_group.lock().unwrap().entry(group).or_default().clone();
        async move {
            let _g = gauge.enter();
            let _o = overall.enter();
            seen.saw(msg.id());
            let n: u64 = msg.id()[1..].parse().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(50 - n * 5)).await;
            if msg.body().contains("FAIL") {
                return Err(format!("scripted failure in {}", msg.id()).into());
            }
            Ok(())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn order_is_kept_per_group_and_groups_run_concurrently() {
    init_logs();
    let seen = Seen::new();
    let per_group = Arc::new(Mutex::new(HashMap::new()));
    let overall = Gauge::new();
    let p = Processor::builder(
        MemoryStore::new(),
        ordered_handler(&seen, &per_group, &overall),
    )
    .namespace("t")
    .clock(Clock::tokio())
    .build();
    // Interleaved groups, as a FIFO batch arrives.
    let batch = [
        fifo("a1", "a", "x"),
        fifo("b1", "b", "x"),
        fifo("a2", "a", "x"),
        fifo("c1", "c", "x"),
        fifo("a3", "a", "x"),
        fifo("b2", "b", "x"),
        fifo("a4", "a", "x"),
        fifo("b3", "b", "x"),
        fifo("c2", "c", "x"),
        fifo("a5", "a", "x"),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(report.counts().processed, 10);
    let ids = seen.ids();
    assert_eq!(in_group(&ids, "a"), ["a1", "a2", "a3", "a4", "a5"]);
    assert_eq!(in_group(&ids, "b"), ["b1", "b2", "b3"]);
    assert_eq!(in_group(&ids, "c"), ["c1", "c2"]);
    for (group, gauge) in per_group.lock().unwrap().iter() {
        assert_eq!(
            gauge.max(),
            1,
            "group {group} ran more than one message at once"
        );
    }
    assert_eq!(overall.max(), 3, "the three groups run concurrently");
}

#[tokio::test]
async fn groups_run_concurrently() {
    // The first message of each group waits for the other: this completes only if both groups
    // run at the same time.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let seen = Seen::new();
    let s = seen.clone();
    let handler = service_fn(move |msg: Message| {
        let (barrier, s) = (Arc::clone(&barrier), s.clone());
        async move {
            s.saw(msg.id());
            if msg.id().ends_with('1') {
                barrier.wait().await;
            }
            Ok::<(), BoxError>(())
        }
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .namespace("t")
        .build();
    let batch = [
        fifo("a1", "a", "x"),
        fifo("a2", "a", "x"),
        fifo("b1", "b", "x"),
        fifo("b2", "b", "x"),
    ];
    let report = tokio::time::timeout(Duration::from_secs(10), p.process(event(&batch)))
        .await
        .expect("groups a and b never ran at the same time")
        .unwrap();
    assert_eq!(report.counts().processed, 4);
    // Inside a group the order still holds.
    let ids = seen.ids();
    assert_eq!(in_group(&ids, "a"), ["a1", "a2"]);
    assert_eq!(in_group(&ids, "b"), ["b1", "b2"]);
}

#[tokio::test(start_paused = true)]
async fn failure_stops_the_rest_of_its_group_only() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(
        store.clone(),
        ordered_handler(&seen, &Arc::default(), &Gauge::new()),
    )
    .namespace("t")
    .clock(Clock::tokio())
    .build();
    let batch = [
        fifo("a1", "a", "x"),
        fifo("b1", "b", "x"),
        fifo("a2", "a", "FAIL"),
        fifo("b2", "b", "x"),
        fifo("a3", "a", "x"),
        fifo("b3", "b", "x"),
        fifo("a4", "a", "x"),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(outcome_of(&report, "a1"), &Outcome::Processed);
    assert_eq!(failure_of(&report, "a2").kind, FailureKind::Handler);
    for id in ["a3", "a4"] {
        assert_eq!(
            outcome_of(&report, id),
            &Outcome::NotStarted(NotStarted::EarlierFailureInGroup),
            "{id}"
        );
        assert_eq!(
            store.status(&format!("t#{id}")),
            None,
            "{id} must not be claimed"
        );
    }
    for id in ["b1", "b2", "b3"] {
        assert_eq!(outcome_of(&report, id), &Outcome::Processed, "{id}");
    }
    let ids = seen.ids();
    assert_eq!(
        in_group(&ids, "a"),
        ["a1", "a2"],
        "nothing after a failure runs"
    );
    assert_eq!(in_group(&ids, "b"), ["b1", "b2", "b3"]);
    // Reported in batch order; every later message of the failed group is in the response.
    assert_eq!(failed_ids(&report.response()), ["a2", "a3", "a4"]);

    // The redelivery of the failed group's tail resumes in order.
    let seen2 = Seen::new();
    let p2 = Processor::builder(store.clone(), scripted(&seen2))
        .namespace("t")
        .build();
    let report = p2
        .process(event(&[
            fifo("a2", "a", "x"),
            fifo("a3", "a", "x"),
            fifo("a4", "a", "x"),
        ]))
        .await
        .unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(seen2.ids(), ["a2", "a3", "a4"]);
}

#[tokio::test]
async fn held_elsewhere_stops_the_rest_of_its_group() {
    let store = MemoryStore::new();
    let now = std::time::SystemTime::now();
    store
        .claim(ClaimRequest {
            key: "t#a1",
            now,
            lease_until: now + Duration::from_secs(600),
            expires_at: now + Duration::from_secs(3600),
            fingerprint: None,
        })
        .await
        .unwrap();
    let seen = Seen::new();
    let p = Processor::builder(store.clone(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p
        .process(event(&[
            fifo("a1", "a", "x"),
            fifo("a2", "a", "x"),
            fifo("b1", "b", "x"),
        ]))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&report),
        ["held_elsewhere", "not_started", "processed"]
    );
    assert_eq!(seen.ids(), ["b1"]);
    assert_eq!(failed_ids(&report.response()), ["a1", "a2"]);
}

#[tokio::test]
async fn panic_stops_the_rest_of_its_group() {
    let seen = Seen::new();
    let p = Processor::builder(MemoryStore::new(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p
        .process(event(&[
            fifo("a1", "a", "PANIC"),
            fifo("a2", "a", "x"),
            fifo("b1", "b", "x"),
        ]))
        .await
        .unwrap();
    assert_eq!(failure_of(&report, "a1").kind, FailureKind::Panicked);
    assert_eq!(
        outcome_of(&report, "a2"),
        &Outcome::NotStarted(NotStarted::EarlierFailureInGroup)
    );
    assert_eq!(outcome_of(&report, "b1"), &Outcome::Processed);
}

#[tokio::test(start_paused = true)]
async fn whole_batch_mode_stops_everything_after_the_first_failure() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let overall = Gauge::new();
    let p = Processor::builder(
        store.clone(),
        ordered_handler(&seen, &Arc::default(), &overall),
    )
    .namespace("t")
    .clock(Clock::tokio())
    .fifo(FifoMode::WholeBatch)
    .build();
    let batch = [
        fifo("a1", "a", "x"),
        fifo("b1", "b", "x"),
        fifo("a2", "a", "FAIL"),
        fifo("b2", "b", "x"),
        fifo("c1", "c", "x"),
        fifo("a3", "a", "x"),
    ];
    let report = p.process(event(&batch)).await.unwrap();
    assert_eq!(
        outcome_names(&report),
        [
            "processed",
            "processed",
            "failed",
            "not_started",
            "not_started",
            "not_started"
        ]
    );
    for id in ["b2", "c1", "a3"] {
        assert_eq!(
            outcome_of(&report, id),
            &Outcome::NotStarted(NotStarted::EarlierFailureInBatch),
            "{id}"
        );
    }
    assert_eq!(
        seen.ids(),
        ["a1", "b1", "a2"],
        "one at a time, in batch order"
    );
    assert_eq!(overall.max(), 1);
    assert_eq!(failed_ids(&report.response()), ["a2", "b2", "c1", "a3"]);
}

#[tokio::test(start_paused = true)]
async fn redelivered_duplicates_are_skipped_in_place() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(
        store.clone(),
        ordered_handler(&seen, &Arc::default(), &Gauge::new()),
    )
    .namespace("t")
    .clock(Clock::tokio())
    .build();
    let first = p
        .process(event(&[fifo("a1", "a", "x"), fifo("a2", "a", "x")]))
        .await
        .unwrap();
    assert_eq!(first.counts().processed, 2);
    // The same two again, followed by new ones: the old ones are skipped, the order holds.
    let report = p
        .process(event(&[
            fifo("a1", "a", "x"),
            fifo("a2", "a", "x"),
            fifo("a3", "a", "x"),
            fifo("a4", "a", "x"),
        ]))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&report),
        ["duplicate", "duplicate", "processed", "processed"]
    );
    assert_eq!(seen.ids(), ["a1", "a2", "a3", "a4"]);
}

#[tokio::test(start_paused = true)]
async fn in_batch_duplicates_are_skipped_in_place() {
    let store = MemoryStore::new();
    let seen = Seen::new();
    let p = Processor::builder(
        store.clone(),
        ordered_handler(&seen, &Arc::default(), &Gauge::new()),
    )
    .namespace("t")
    .clock(Clock::tokio())
    .key(KeySource::JsonPointer("/order_id".into()))
    .build();
    let o1 = r#"{"order_id":"o-1"}"#;
    let report = p
        .process(event(&[
            fifo("a1", "a", o1),
            fifo("a2", "a", r#"{"order_id":"o-2"}"#),
            fifo("a3", "a", o1),
            fifo("a4", "a", r#"{"order_id":"o-4"}"#),
            // The same key in another group: a duplicate there too.
            fifo("b1", "b", o1),
            fifo("b2", "b", r#"{"order_id":"o-5"}"#),
        ]))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&report),
        [
            "processed",
            "processed",
            "duplicate",
            "processed",
            "duplicate",
            "processed"
        ]
    );
    let ids = seen.ids();
    assert_eq!(in_group(&ids, "a"), ["a1", "a2", "a4"]);
    assert_eq!(in_group(&ids, "b"), ["b2"]);
    assert!(report.response().batch_item_failures.is_empty());
}

#[tokio::test(start_paused = true)]
async fn in_batch_copy_of_a_failed_key_stops_its_own_group() {
    let seen = Seen::new();
    let p = Processor::builder(
        MemoryStore::new(),
        ordered_handler(&seen, &Arc::default(), &Gauge::new()),
    )
    .namespace("t")
    .clock(Clock::tokio())
    .key(KeySource::JsonPointer("/order_id".into()))
    .build();
    let bad = r#"{"order_id":"o-1","x":"FAIL"}"#;
    let report = p
        .process(event(&[
            fifo("a1", "a", bad),
            fifo("b1", "b", bad),
            fifo("b2", "b", r#"{"order_id":"o-2"}"#),
            fifo("c1", "c", r#"{"order_id":"o-3"}"#),
        ]))
        .await
        .unwrap();
    assert_eq!(
        outcome_names(&report),
        ["failed", "failed", "not_started", "processed"]
    );
    assert_eq!(seen.ids(), ["a1", "c1"]);
    assert_eq!(failed_ids(&report.response()), ["a1", "b1", "b2"]);
}

#[tokio::test(start_paused = true)]
async fn deadline_cutoff_keeps_order() {
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
        .deadline_margin(Duration::from_secs(2))
        .build();
    // Deadline in 10 s, margin 2 s: each group starts messages at 0, 3, 6; not at 9.
    let deadline = deadline_in(&clock, Duration::from_secs(10));
    let batch = [
        fifo("a1", "a", "x"),
        fifo("b1", "b", "x"),
        fifo("a2", "a", "x"),
        fifo("a3", "a", "x"),
        fifo("a4", "a", "x"),
        fifo("b2", "b", "x"),
        fifo("a5", "a", "x"),
    ];
    let report = p
        .process(event_with_deadline(&batch, deadline))
        .await
        .unwrap();
    let ids = seen.ids();
    assert_eq!(in_group(&ids, "a"), ["a1", "a2", "a3"]);
    assert_eq!(in_group(&ids, "b"), ["b1", "b2"]);
    assert_eq!(
        outcome_of(&report, "a4"),
        &Outcome::NotStarted(NotStarted::Deadline)
    );
    assert_eq!(
        outcome_of(&report, "a5"),
        &Outcome::NotStarted(NotStarted::Deadline),
        "after the cut-off the rest of the group is not started for the same reason"
    );
    assert_eq!(failed_ids(&report.response()), ["a4", "a5"]);
    assert_eq!(store.status("t#a4"), None);
    assert_eq!(store.status("t#a3"), Some(Status::Completed));
}

#[tokio::test]
async fn fifo_deadline_in_the_past_starts_nothing() {
    let seen = Seen::new();
    let p = Processor::builder(MemoryStore::new(), scripted(&seen))
        .namespace("t")
        .build();
    let report = p
        .process(event_with_deadline(
            &[
                fifo("a1", "a", "x"),
                fifo("a2", "a", "x"),
                fifo("b1", "b", "x"),
            ],
            1,
        ))
        .await
        .unwrap();
    assert_eq!(report.counts().not_started, 3);
    assert_eq!(seen.calls(), 0);
    assert_eq!(failed_ids(&report.response()), ["a1", "a2", "b1"]);
}

/// Whether the processor treated a batch as FIFO: the failure of `g1`'s first message stops its
/// second only on FIFO.
async fn second_of_failed_group(arn: &str) -> BatchReport {
    let seen = Seen::new();
    let p = Processor::builder(MemoryStore::new(), scripted(&seen))
        .namespace("t")
        .build();
    p.process(event(&[
        rec("m1", "FAIL").arn(arn).group("g1"),
        rec("m2", "x").arn(arn).group("g1"),
    ]))
    .await
    .unwrap()
}

#[tokio::test]
async fn fair_queue_groups_are_not_fifo() {
    // A standard queue with MessageGroupId (fair queues): not FIFO, so no per-group stop...
    let report = second_of_failed_group(STANDARD_ARN).await;
    assert_eq!(outcome_names(&report), ["failed", "processed"]);
    // ...while the same records from a FIFO queue stop the group.
    let report = second_of_failed_group(FIFO_ARN).await;
    assert_eq!(outcome_names(&report), ["failed", "not_started"]);
}

#[tokio::test]
async fn fair_queue_group_members_run_concurrently() {
    // Two messages of one group on a standard queue meet at a barrier: they must run at once.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let handler = service_fn(move |_msg: Message| {
        let barrier = Arc::clone(&barrier);
        async move {
            barrier.wait().await;
            Ok::<(), BoxError>(())
        }
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .namespace("t")
        .build();
    let batch = [
        rec("m1", "x").group("g1").dedup("d1"),
        rec("m2", "x").group("g1").dedup("d2"),
    ];
    let report = tokio::time::timeout(Duration::from_secs(10), p.process(event(&batch)))
        .await
        .expect("a fair-queue group was serialized as if FIFO")
        .unwrap();
    assert_eq!(report.counts().processed, 2);
}

#[tokio::test]
async fn fifo_messages_know_they_are_fifo() {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    let handler = service_fn(move |msg: Message| {
        g.lock().unwrap().push((
            msg.is_fifo(),
            msg.group_id().map(str::to_owned),
            msg.sqs().attributes.get("MessageDeduplicationId").cloned(),
            msg.sqs().attributes.contains_key("SequenceNumber"),
        ));
        async { Ok::<(), BoxError>(()) }
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .namespace("t")
        .build();
    p.process(event(&[fifo("a1", "a", "x")])).await.unwrap();
    assert_eq!(
        got.lock().unwrap().clone(),
        [(true, Some("a".to_owned()), Some("a1".to_owned()), true)]
    );
}

/// A hand-made event without `eventSourceARN`: FIFO records (they carry `SequenceNumber`) keep
/// their order; records with only a `MessageGroupId` (fair queues) stay standard.
#[tokio::test]
async fn batch_without_source_arn_is_fifo_only_if_it_carries_sequence_numbers() {
    let strip = |mut v: serde_json::Value| {
        for r in v["Records"].as_array_mut().expect("records") {
            r.as_object_mut().expect("record").remove("eventSourceARN");
        }
        v
    };
    let run = |records: Vec<support::batch::Rec>| async move {
        let seen = Seen::new();
        let p = Processor::builder(MemoryStore::new(), scripted(&seen))
            .namespace("t")
            .build();
        let payload: sqs_claim::events::SqsEvent =
            serde_json::from_value(strip(support::batch::event_json(&records))).expect("event");
        p.process(lambda_runtime::LambdaEvent::new(
            payload,
            lambda_runtime::Context::default(),
        ))
        .await
        .expect("process")
    };
    let fifo_like = run(vec![fifo("m1", "g1", "FAIL"), fifo("m2", "g1", "x")]).await;
    assert_eq!(outcome_names(&fifo_like), ["failed", "not_started"]);
    let fair = run(vec![
        rec("m1", "FAIL").group("g1").dedup("d1"),
        rec("m2", "x").group("g1").dedup("d2"),
    ])
    .await;
    assert_eq!(outcome_names(&fair), ["failed", "processed"]);
}
