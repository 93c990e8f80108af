//! The processor's spans: a `batch` span per invocation (its request id, then its counts) and a
//! `message` span per message around the handler and the store steps, so a handler's own
//! `tracing` events carry the message's id, key, group and receive count, and never its body.
//!
//! Read through `tracing-subscriber`'s own JSON format with the span list and span-close
//! events, so these tests do not depend on the crate's `logging` feature.

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sqs_claim::{Error, MemoryStore, Message, Processor};
use support::batch::*;
use tower::service_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::FmtSpan;

/// Log lines captured in memory.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

impl Capture {
    fn lines(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

const SECRET: &str = "BODY-SECRET-7f3a";

/// A handler that logs once per message, inside its future.
fn logging_handler()
-> impl tower::Service<Message, Response = (), Error = Error, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    service_fn(|msg: Message| async move {
        tokio::task::yield_now().await;
        tracing::info!(step = "charging", "inside the handler");
        if msg.body().contains("FAIL") {
            return Err(Error::new(sqs_claim::ErrorKind::Other, "refused"));
        }
        Ok(())
    })
}

/// A subscriber that writes JSON with every span of each event and an event per span close.
fn subscriber(capture: &Capture) -> impl tracing::Subscriber + Send + Sync {
    tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::TRACE)
        .with_current_span(true)
        .with_span_list(true)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(capture.clone())
        .finish()
}

fn spans_of(line: &Value) -> Vec<&Value> {
    line["spans"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn handler_events_carry_the_message_and_batch_spans() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(subscriber(&capture));
    let p = Processor::builder(MemoryStore::new(), logging_handler())
        .namespace("t")
        .build();
    let batch = [
        fifo("m1", "g-1", &format!("{{\"memo\":\"{SECRET}\"}}")),
        fifo("m2", "g-2", &format!("FAIL {SECRET}")),
    ];
    let mut event = event(&batch);
    event.context.request_id = "req-42".into();
    let report = p.process(event).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed", "failed"]);

    let lines = capture.lines();
    let inside: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "inside the handler")
        .collect();
    assert_eq!(inside.len(), 2, "{}", capture.text());
    for (line, (id, group)) in inside.iter().zip([("m1", "g-1"), ("m2", "g-2")]) {
        let spans = spans_of(line);
        let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
        assert_eq!(names, ["batch", "message"], "{line}");
        assert_eq!(spans[0]["request_id"], "req-42", "{line}");
        let message = spans[1];
        assert_eq!(message["message_id"], id, "{line}");
        assert_eq!(message["key"], format!("t#{id}"), "{line}");
        assert_eq!(message["group"], group, "{line}");
        assert_eq!(message["receive_count"], 1, "{line}");
    }

    // The batch span's close carries the counts, recorded when the batch was done.
    let closed: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "close" && l["span"]["name"] == "batch")
        .collect();
    assert_eq!(closed.len(), 1, "{}", capture.text());
    let span = &closed[0]["span"];
    assert_eq!(span["records"], 2);
    assert_eq!(span["processed"], 1);
    assert_eq!(span["failed"], 1);
    assert_eq!(span["duplicate"], 0);
    assert_eq!(span["fifo"], true);
    // The outcome lines are in the batch span too.
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "message failed"
                && spans_of(l)
                    .first()
                    .is_some_and(|s| s["request_id"] == "req-42")),
        "{}",
        capture.text()
    );
    assert!(
        !capture.text().contains(SECRET),
        "a body reached the logs:\n{}",
        capture.text()
    );
}

/// A duplicate runs no handler, but its claim step still runs inside its message span; a
/// message without a key (failed at planning) gets none and logs nothing inside one.
#[tokio::test]
async fn store_steps_run_inside_the_message_span() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(subscriber(&capture));
    let p = Processor::builder(MemoryStore::new(), logging_handler())
        .namespace("t")
        .build();
    p.process(event(&[rec("m1", "a")])).await.unwrap();
    let closes_before = message_closes(&capture);
    assert_eq!(closes_before, ["m1"]);
    // Redelivery: a duplicate, claim only.
    p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(message_closes(&capture), ["m1", "m1"]);
}

fn message_closes(capture: &Capture) -> Vec<String> {
    capture
        .lines()
        .iter()
        .filter(|l| l["fields"]["message"] == "close" && l["span"]["name"] == "message")
        .filter_map(|l| l["span"]["message_id"].as_str().map(str::to_owned))
        .collect()
}

/// Trace context: the batch span carries its invocation's X-Ray trace id
/// (`Context::xray_trace_id`) and the message span its producer's trace (the `AWSTraceHeader`
/// system attribute), each right while two invocations run interleaved on one thread, as they
/// do under `run_concurrent` (where the process-wide `_X_AMZN_TRACE_ID` is the last one set).
#[tokio::test]
async fn spans_carry_the_invocations_and_the_producers_traces() {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(subscriber(&capture));
    let p = Processor::builder(MemoryStore::new(), logging_handler())
        .namespace("t")
        .build();
    let invocation = |request: &str, trace: &str, ids: [&str; 2]| {
        let batch = ids.map(|id| {
            rec(id, "{}").trace_header(&format!(
                "Root=1-00000000-producer-{id};Parent=53995c3f42cd8ad8;Sampled=1"
            ))
        });
        let mut event = event(&batch);
        event.context.request_id = request.into();
        event.context.xray_trace_id = Some(trace.into());
        event
    };
    let first = invocation(
        "req-a",
        "Root=1-aaaaaaaa-invocation-a;Sampled=1",
        ["a1", "a2"],
    );
    // A message without a trace header: the field is absent, not empty.
    let second = invocation(
        "req-b",
        "Root=1-bbbbbbbb-invocation-b;Sampled=1",
        ["b1", "b2"],
    );
    let mut second = second;
    second.payload.records[1]
        .attributes
        .remove("AWSTraceHeader");
    let (a, b) = tokio::join!(p.process(first), p.process(second));
    assert_eq!(outcome_names(&a.unwrap()), ["processed", "processed"]);
    assert_eq!(outcome_names(&b.unwrap()), ["processed", "processed"]);

    let lines = capture.lines();
    let inside: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "inside the handler")
        .collect();
    assert_eq!(inside.len(), 4, "{}", capture.text());
    for line in inside {
        let spans = spans_of(line);
        let (batch, message) = (spans[0], spans[1]);
        let id = message["message_id"].as_str().unwrap();
        let invocation = &id[..1];
        assert_eq!(batch["request_id"], format!("req-{invocation}"), "{line}");
        assert_eq!(
            batch["xray_trace_id"],
            format!(
                "Root=1-{}-invocation-{invocation};Sampled=1",
                invocation.repeat(8)
            ),
            "{line}"
        );
        if id == "b2" {
            assert!(message.get("trace_header").is_none(), "{line}");
        } else {
            assert_eq!(
                message["trace_header"],
                format!("Root=1-00000000-producer-{id};Parent=53995c3f42cd8ad8;Sampled=1"),
                "{line}"
            );
        }
    }
}
