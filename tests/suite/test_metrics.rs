//! Per-batch metrics: the numbers a sink gets match the batch, and the CloudWatch Embedded
//! Metric Format line [`Emf`] writes for them is valid against the specification
//! (`sqs_claim_testkit::emf`) and carries the same numbers.
//!
//! The store sleeps a fixed time per call under tokio's paused clock, so every latency is
//! exact.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use sqs_claim::metrics::{BatchDimension, BatchMetrics, Emf};
use sqs_claim::store::MemoryEffect;
use sqs_claim::store::{Capabilities, Claim, ClaimRequest, ClaimStore, Effects};
use sqs_claim::{Clock, FailureKind, MemoryStore, Message, Processor};
use sqs_claim_testkit::emf;
use sqs_claim_testkit::store::{Action, Method, Spy};
use support::batch::*;
use tower::service_fn;

const CLAIM: Duration = Duration::from_millis(5);
const COMPLETE: Duration = Duration::from_millis(7);

/// A memory store whose claims take [`CLAIM`] and completions (one-shot writes too)
/// [`COMPLETE`]; it says what the trait's default says of a store.
fn slow_store() -> Spy<MemoryStore> {
    Spy::new(MemoryStore::new())
        .on_call(|call| match call.method() {
            Method::Claim => Action::Delay(CLAIM),
            Method::Complete | Method::ClaimCompleted => Action::Delay(COMPLETE),
            _ => Action::Forward,
        })
        .map_capabilities(|_| Capabilities::new())
}

/// What a sink got: the metrics, and the EMF line for them.
#[derive(Clone)]
struct Captured {
    emf: Emf,
    got: Arc<Mutex<Vec<(BatchMetrics, String)>>>,
}

impl Captured {
    fn new(emf: Emf) -> Self {
        Captured {
            emf,
            got: Arc::default(),
        }
    }

    fn sink(&self) -> impl Fn(&BatchMetrics) + Send + Sync + 'static {
        let this = self.clone();
        move |batch: &BatchMetrics| {
            let line = this.emf.line(batch);
            this.got.lock().unwrap().push((batch.clone(), line));
        }
    }

    /// The last batch's metrics and its EMF object (checked against the specification).
    fn last(&self) -> (BatchMetrics, Value) {
        let got = self.got.lock().unwrap();
        let (metrics, line) = got.last().cloned().expect("the sink got a batch");
        let mut objects = emf::lines(&line);
        assert_eq!(objects.len(), 1, "{line}");
        (metrics, objects.remove(0))
    }

    fn batches(&self) -> usize {
        self.got.lock().unwrap().len()
    }
}

/// The metric names an EMF object declares, in order.
fn declared(object: &Value) -> Vec<String> {
    object["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Name"].as_str().unwrap().to_owned())
        .collect()
}

fn unit_of(object: &Value, name: &str) -> String {
    object["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["Name"] == name)
        .and_then(|m| m["Unit"].as_str())
        .unwrap_or_else(|| panic!("{name} is not declared"))
        .to_owned()
}

fn handler()
-> impl tower::Service<Message, Response = (), Error = sqs_claim::BoxError, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    service_fn(|msg: Message| async move {
        if msg.body().contains("PANIC") {
            panic!("scripted panic");
        }
        if msg.body().contains("FAIL") {
            return Err("scripted failure".into());
        }
        if msg.body().contains("HANG") {
            std::future::pending::<()>().await;
        }
        Ok(())
    })
}

/// Every outcome in one batch: the counts, the failures by kind, the hit rate and one latency
/// per store call, in the metrics and in the EMF line.
#[tokio::test(start_paused = true)]
async fn the_emf_line_counts_what_the_batch_did() {
    let store = slow_store();
    // Another worker holds m5's key.
    let now = SystemTime::now();
    let held = store
        .get_ref()
        .claim(ClaimRequest {
            key: "t#k5",
            now,
            lease_until: now + Duration::from_secs(600),
            expires_at: now + Duration::from_secs(3600),
            fingerprint: None,
        })
        .await
        .unwrap();
    assert!(matches!(held, Claim::Acquired(_)));

    let captured = Captured::new(Emf::new("payments-test").unwrap());
    let p = Processor::builder(store, handler())
        .namespace("t")
        .key(sqs_claim::KeySource::MessageAttribute("k".into()))
        .metrics(captured.sink())
        .build();
    let batch = [
        rec("m1", "ok").attr("k", "k1"),
        rec("m2", "ok").attr("k", "k2"),
        rec("m3", "ok").attr("k", "k1"), // a later copy of m1: duplicate
        rec("m4", "FAIL").attr("k", "k4"),
        rec("m5", "ok").attr("k", "k5"), // held elsewhere
        rec("m6", "PANIC").attr("k", "k6"),
        rec("m7", "no key"),
    ];
    let mut event = event(&batch);
    event.context.request_id = "req-7".into();
    event.context.env_config = Arc::new(lambda_runtime::Config {
        function_name: "consumer-fn".into(),
        ..Default::default()
    });
    let report = p.process(event).await.unwrap();
    assert_eq!(
        outcome_names(&report),
        [
            "processed",
            "processed",
            "duplicate",
            "failed",
            "held_elsewhere",
            "failed",
            "failed"
        ]
    );

    let (m, o) = captured.last();
    assert_eq!(m.request_id, "req-7");
    assert_eq!(m.records, 7);
    assert_eq!(m.counts, report.counts());
    assert_eq!(
        m.failed_by_kind,
        [
            (FailureKind::Handler, 1),
            (FailureKind::Panicked, 1),
            (FailureKind::MissingKey, 1),
        ]
    );
    // Claims: m1, m2, m4, m5, m6 (the copy and the keyless message claim nothing).
    assert_eq!(m.claim_latencies, vec![CLAIM; 5]);
    assert_eq!(m.completion_latencies, vec![COMPLETE; 2]);

    // The line: its dimensions, then every number.
    assert_eq!(
        o["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "payments-test"
    );
    assert_eq!(
        o["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        json!([["FunctionName", "QueueName"]])
    );
    assert_eq!(o["FunctionName"], "consumer-fn");
    assert_eq!(o["QueueName"], "q");
    assert_eq!(o["RequestId"], "req-7");
    for (name, want) in [
        ("Records", 7),
        ("Processed", 2),
        ("Duplicate", 1),
        ("HeldElsewhere", 1),
        ("Failed", 3),
        ("Failed.handler_error", 1),
        ("Failed.handler_panic", 1),
        ("Failed.missing_key", 1),
        ("NotStarted", 0),
        ("CutOff", 0),
        ("DeadLettered", 0),
    ] {
        assert_eq!(o[name], want, "{name} in {o}");
        assert_eq!(unit_of(&o, name), "Count", "{name}");
    }
    // Kinds that did not happen are not written.
    assert!(o.get("Failed.store_unavailable").is_none(), "{o}");
    // One duplicate of three settled messages.
    let rate = o["DedupHitRate"].as_f64().unwrap();
    assert!((rate - 100.0 / 3.0).abs() < 1e-9, "{rate}");
    assert_eq!(unit_of(&o, "DedupHitRate"), "Percent");
    assert_eq!(o["ClaimLatency"], json!([5.0, 5.0, 5.0, 5.0, 5.0]));
    assert_eq!(o["CompletionLatency"], json!([7.0, 7.0]));
    assert_eq!(unit_of(&o, "ClaimLatency"), "Milliseconds");
    let timestamp = o["_aws"]["Timestamp"].as_u64().unwrap();
    let now_ms = sqs_claim::store::epoch_millis(SystemTime::now()) as u64;
    assert!(
        now_ms.abs_diff(timestamp) < 60_000,
        "{timestamp} vs {now_ms}"
    );

    // The redelivery of the two processed keys: all duplicates, a 100 % hit rate, claims only.
    let again = [
        rec("m1", "ok").attr("k", "k1"),
        rec("m2", "ok").attr("k", "k2"),
    ];
    p.process(event_fn(&again)).await.unwrap();
    let (m, o) = captured.last();
    assert_eq!((m.counts.duplicate, m.counts.processed), (2, 0));
    assert_eq!(o["DedupHitRate"], 100.0);
    assert_eq!(o["ClaimLatency"], json!([5.0, 5.0]));
    assert!(o.get("CompletionLatency").is_none(), "no completion: {o}");
    assert!(!declared(&o).contains(&"CompletionLatency".to_owned()));
    assert_eq!(captured.batches(), 2);
}

fn event_fn(records: &[Rec]) -> lambda_runtime::LambdaEvent<sqs_claim::events::SqsEvent> {
    event(records)
}

/// Cut off and not started: a handler that hangs past the hard stop, and the message that
/// could not start after it.
#[tokio::test(start_paused = true)]
async fn cut_off_and_not_started_are_counted() {
    let captured = Captured::new(Emf::new("ns").unwrap());
    let clock = Clock::tokio();
    let p = Processor::builder(slow_store(), handler())
        .namespace("t")
        .clock(clock.clone())
        .concurrency(1)
        .metrics(captured.sink())
        .build();
    let deadline = deadline_in(&clock, Duration::from_secs(10));
    let report = p
        .process(event_with_deadline(
            &[rec("m1", "HANG"), rec("m2", "ok")],
            deadline,
        ))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["cut_off", "not_started"]);
    let (_, o) = captured.last();
    assert_eq!(
        (o["CutOff"].clone(), o["NotStarted"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(o["Processed"], 0);
    // Nothing settled: no hit rate (0 / 0 is not 0 %).
    assert!(o.get("DedupHitRate").is_none(), "{o}");
    assert_eq!(o["ClaimLatency"], json!([5.0]));
}

/// One-shot mode: the one write per message is its completion latency; nothing is a claim.
#[tokio::test(start_paused = true)]
async fn one_shot_writes_are_completions() {
    let captured = Captured::new(Emf::new("ns").unwrap());
    let p = Processor::one_shot(slow_store(), |_m: &Message| {
        Ok(Effects::one(MemoryEffect::new(|| {})))
    })
    .namespace("t")
    .metrics(captured.sink())
    .build();
    p.process(event(&[rec("m1", "a"), rec("m2", "b")]))
        .await
        .unwrap();
    let (m, o) = captured.last();
    assert!(m.claim_latencies.is_empty());
    assert_eq!(o["CompletionLatency"], json!([7.0, 7.0]));
    assert!(o.get("ClaimLatency").is_none());
    assert_eq!(o["Processed"], 2);
}

/// Dimensions are configurable; none of them is per message or per request.
#[tokio::test]
async fn dimensions_are_configurable_and_low_cardinality() {
    let emf = Emf::new("ns")
        .unwrap()
        .batch_dimensions(&[BatchDimension::QueueName])
        .dimension("Stage", "prod")
        .unwrap();
    let captured = Captured::new(emf);
    let p = Processor::builder(MemoryStore::new(), handler())
        .namespace("t")
        .metrics(captured.sink())
        .build();
    p.process(event(&[rec("m1", "a")])).await.unwrap();
    let (_, o) = captured.last();
    assert_eq!(
        o["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        json!([["QueueName", "Stage"]])
    );
    assert_eq!(o["Stage"], "prod");
    assert!(o.get("FunctionName").is_none());
    // No function name outside Lambda: the default dimension says so rather than vanish.
    let captured = Captured::new(Emf::new("ns").unwrap());
    let p = Processor::builder(MemoryStore::new(), handler())
        .metrics(captured.sink())
        .build();
    p.process(event(&[rec("m1", "a")])).await.unwrap();
    let (_, o) = captured.last();
    if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_none() {
        assert_eq!(o["FunctionName"], "unknown");
    }
}

/// A sink that panics loses its batch's metrics, not the batch: the response is the same.
#[tokio::test]
async fn a_panicking_sink_does_not_fail_the_batch() {
    let p = Processor::builder(MemoryStore::new(), handler())
        .namespace("t")
        .metrics(|_: &BatchMetrics| panic!("sink down"))
        .build();
    let report = p
        .process(event(&[rec("m1", "ok"), rec("m2", "FAIL")]))
        .await
        .unwrap();
    assert_eq!(outcome_names(&report), ["processed", "failed"]);
}

/// The checker itself rejects what the specification forbids, so the checks above can fail.
#[test]
fn the_emf_checker_rejects_invalid_lines() {
    let good = json!({
        "_aws": {"Timestamp": 1_764_590_000_000u64, "CloudWatchMetrics": [{
            "Namespace": "ns", "Dimensions": [["FunctionName"]],
            "Metrics": [{"Name": "Processed", "Unit": "Count"}, {"Name": "L", "Unit": "Milliseconds"}]}]},
        "FunctionName": "f", "Processed": 1, "L": [1.5, 2.0]
    });
    assert!(emf::problems(&good.to_string()).is_empty());
    let broken = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        emf::problems(&v.to_string())
    };
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "timestamp in seconds",
            broken(&|v| v["_aws"]["Timestamp"] = json!(1_764_590_000u64)),
        ),
        (
            "no namespace",
            broken(&|v| v["_aws"]["CloudWatchMetrics"][0]["Namespace"] = json!("")),
        ),
        (
            "a value missing",
            broken(&|v| {
                v.as_object_mut().unwrap().remove("Processed");
            }),
        ),
        (
            "a value as a string",
            broken(&|v| v["Processed"] = json!("1")),
        ),
        (
            "a dimension missing",
            broken(&|v| {
                v.as_object_mut().unwrap().remove("FunctionName");
            }),
        ),
        (
            "a bad unit",
            broken(&|v| v["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] = json!("Counts")),
        ),
        (
            "too many values",
            broken(&|v| v["L"] = json!(vec![1.0; 101])),
        ),
        (
            "too many dimensions",
            broken(&|v| {
                let names: Vec<String> = (0..31).map(|i| format!("D{i}")).collect();
                for n in &names {
                    v[n] = json!("x");
                }
                v["_aws"]["CloudWatchMetrics"][0]["Dimensions"] = json!([names]);
            }),
        ),
        (
            "too many metrics",
            broken(&|v| {
                let metrics: Vec<Value> = (0..101)
                    .map(|i| json!({"Name": format!("M{i}"), "Unit": "Count"}))
                    .collect();
                for i in 0..101 {
                    v[format!("M{i}")] = json!(1);
                }
                v["_aws"]["CloudWatchMetrics"][0]["Metrics"] = json!(metrics);
            }),
        ),
    ];
    for (what, problems) in cases {
        assert!(!problems.is_empty(), "{what} was accepted");
    }
}
