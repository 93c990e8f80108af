//! `sqs_claim::logging` (feature `logging`): Lambda's log controls and the flat JSON lines, read
//! back from an in-memory writer while the processor runs a batch whose handler logs.

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sqs_claim::logging::Logging;
use sqs_claim::{MemoryStore, Message, Processor};
use support::batch::*;
use tower::service_fn;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

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
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
    fn json(&self) -> Vec<Value> {
        self.text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

const SECRET: &str = "BODY-SECRET-91c2";

fn settings(vars: &[(&str, &str)]) -> Logging {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Logging::from_lookup(move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

/// Runs a two-message FIFO batch (one succeeds, one fails) under `logging`, the handler logging
/// at every level and `lambda_runtime` logging a raw event at TRACE; returns what was written.
async fn run_batch(logging: &Logging) -> Capture {
    let capture = Capture::default();
    let subscriber =
        tracing_subscriber::registry().with(logging.layer_with_writer(capture.clone()));
    let _guard = tracing::subscriber::set_default(subscriber);
    let handler = service_fn(|msg: Message| async move {
        tracing::trace!("handler trace");
        tracing::debug!("handler debug");
        tracing::info!(amount_cents = 1250, "inside the handler");
        // What lambda_runtime's api_response layer does with every event.
        tracing::trace!(target: "lambda_runtime::layers::api_response", body = SECRET, "raw event");
        if msg.body().contains("FAIL") {
            tracing::warn!("handler warning");
            return Err(sqs_claim::Error::new(
                sqs_claim::ErrorKind::Other,
                "refused",
            ));
        }
        Ok(())
    });
    let p = Processor::builder(MemoryStore::new(), handler)
        .namespace("t")
        .build();
    let mut event = event(&[
        fifo("m1", "g-1", &format!("{{\"memo\":\"{SECRET}\"}}")),
        fifo("m2", "g-2", &format!("FAIL {SECRET}")),
    ]);
    event.context.request_id = "req-9".into();
    p.process(event).await.unwrap();
    capture
}

#[tokio::test]
async fn json_lines_are_flat_with_the_spans_fields() {
    let logging = settings(&[("AWS_LAMBDA_LOG_FORMAT", "JSON"), ("RUST_LOG", "trace")]);
    let capture = run_batch(&logging).await;
    let lines = capture.json();
    for line in &lines {
        // What Lambda's JSON log format reads: message, level and timestamp at the top.
        assert!(line["message"].is_string(), "{line}");
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]
                .contains(&line["level"].as_str().unwrap_or("")),
            "{line}"
        );
        let ts = line["timestamp"].as_str().unwrap_or("");
        assert!(
            ts.len() >= 20 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
            "{line}"
        );
        assert!(line["target"].is_string(), "{line}");
        assert!(
            line.get("fields").is_none() && line.get("spans").is_none(),
            "flat: {line}"
        );
    }
    let inside: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "inside the handler")
        .collect();
    assert_eq!(inside.len(), 2, "{}", capture.text());
    for (line, (id, group)) in inside.iter().zip([("m1", "g-1"), ("m2", "g-2")]) {
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["amount_cents"], 1250);
        assert_eq!(line["message_id"], id, "{line}");
        assert_eq!(line["key"], format!("t#{id}"), "{line}");
        assert_eq!(line["group"], group, "{line}");
        assert_eq!(line["receive_count"], 1, "{line}");
        assert_eq!(line["request_id"], "req-9", "{line}");
    }
    let failed = lines
        .iter()
        .find(|l| l["message"] == "message failed")
        .unwrap_or_else(|| panic!("no failure line:\n{}", capture.text()));
    assert_eq!(failed["level"], "WARN");
    assert_eq!(failed["message_id"], "m2");
    assert_eq!(failed["kind"], "handler_error");
    assert_eq!(failed["request_id"], "req-9");
    let done = lines.iter().find(|l| l["message"] == "batch done").unwrap();
    assert_eq!(
        (done["processed"].clone(), done["failed"].clone()),
        (1.into(), 1.into())
    );
    // RUST_LOG=trace, and still no raw event: the runtime's TRACE lines are always dropped.
    assert!(lines.iter().any(|l| l["message"] == "handler trace"));
    assert!(!capture.text().contains("raw event"), "{}", capture.text());
    assert!(!capture.text().contains(SECRET), "{}", capture.text());
}

/// `AWS_LAMBDA_LOG_LEVEL` is a ceiling: `RUST_LOG=trace` cannot raise it.
#[tokio::test]
async fn the_lambda_level_is_a_ceiling() {
    let logging = settings(&[
        ("AWS_LAMBDA_LOG_FORMAT", "json"),
        ("AWS_LAMBDA_LOG_LEVEL", "WARN"),
        ("RUST_LOG", "trace"),
    ]);
    let lines = run_batch(&logging).await.json();
    assert!(!lines.is_empty());
    assert!(
        lines
            .iter()
            .all(|l| l["level"] == "WARN" || l["level"] == "ERROR"),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|l| l["message"] == "message failed"));
    // The spans are INFO, and their fields still reach a warning written inside them.
    let warning = lines
        .iter()
        .find(|l| l["message"] == "handler warning")
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(warning["message_id"], "m2", "{warning}");
    assert_eq!(warning["request_id"], "req-9", "{warning}");

    // Without RUST_LOG, Lambda's level is the filter too.
    let lines = run_batch(&settings(&[
        ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
        ("AWS_LAMBDA_LOG_LEVEL", "DEBUG"),
    ]))
    .await
    .json();
    assert!(lines.iter().any(|l| l["message"] == "handler debug"));
    assert!(!lines.iter().any(|l| l["message"] == "handler trace"));

    // RUST_LOG narrows below the ceiling.
    let lines = run_batch(&settings(&[
        ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
        ("AWS_LAMBDA_LOG_LEVEL", "DEBUG"),
        ("RUST_LOG", "warn"),
    ]))
    .await
    .json();
    assert!(
        !lines
            .iter()
            .any(|l| l["level"] == "INFO" || l["level"] == "DEBUG")
    );
}

/// Text format: plain lines, the spans named with their fields.
#[tokio::test]
async fn text_lines_name_the_spans() {
    let logging = settings(&[("AWS_LAMBDA_LOG_FORMAT", "Text"), ("RUST_LOG", "info")]);
    let text = run_batch(&logging).await.text();
    let line = text
        .lines()
        .find(|l| l.contains("inside the handler") && l.contains("m1"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(serde_json::from_str::<Value>(line).is_err(), "{line}");
    assert!(line.contains("batch{"), "{line}");
    assert!(
        line.contains("message{") && line.contains("message_id=\"m1\"")
            || line.contains("message_id=m1"),
        "{line}"
    );
    assert!(line.contains("INFO"), "{line}");
    assert!(!text.contains(SECRET));
    assert!(
        !text.contains('\u{1b}'),
        "no colour codes by default: {line:?}"
    );
}
