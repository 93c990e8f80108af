//! Helpers shared by the processor tests: SQS events built from the real Lambda wire JSON, and
//! handlers that record what they saw.
//!
//! Each test binary uses a different subset of these helpers, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::Clock;
use sqs_claim::events::SqsEvent;

/// The ARN of the standard test queue.
pub(crate) const STANDARD_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:q";
/// The ARN of the FIFO test queue.
pub(crate) const FIFO_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:q.fifo";

/// One SQS record in the Lambda wire shape. Build with [`rec`], adjust with the methods, and
/// turn a list into an event with [`event`].
#[derive(Debug, Clone)]
pub(crate) struct Rec {
    id: Option<String>,
    body: String,
    arn: String,
    group: Option<String>,
    dedup: Option<String>,
    msg_attrs: serde_json::Map<String, Value>,
}

/// A standard-queue record with this message id and body.
pub(crate) fn rec(id: &str, body: &str) -> Rec {
    Rec {
        id: Some(id.to_owned()),
        body: body.to_owned(),
        arn: STANDARD_ARN.to_owned(),
        group: None,
        dedup: None,
        msg_attrs: serde_json::Map::new(),
    }
}

/// A FIFO record: FIFO source ARN, group, deduplication id (the message id) and a sequence number.
pub(crate) fn fifo(id: &str, group: &str, body: &str) -> Rec {
    rec(id, body).arn(FIFO_ARN).group(group).dedup(id)
}

impl Rec {
    /// Without a `messageId` field at all.
    pub(crate) fn no_id(mut self) -> Self {
        self.id = None;
        self
    }

    /// A different source ARN.
    pub(crate) fn arn(mut self, arn: &str) -> Self {
        self.arn = arn.to_owned();
        self
    }

    /// A `MessageGroupId` attribute.
    pub(crate) fn group(mut self, group: &str) -> Self {
        self.group = Some(group.to_owned());
        self
    }

    /// A `MessageDeduplicationId` attribute.
    pub(crate) fn dedup(mut self, dedup: &str) -> Self {
        self.dedup = Some(dedup.to_owned());
        self
    }

    /// A string message attribute (`messageAttributes.NAME`).
    pub(crate) fn attr(mut self, name: &str, value: &str) -> Self {
        self.msg_attrs.insert(
            name.to_owned(),
            json!({
                "stringValue": value,
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": "String"
            }),
        );
        self
    }

    /// The record as Lambda sends it.
    pub(crate) fn to_json(&self, seq: usize) -> Value {
        let mut attributes = serde_json::Map::new();
        attributes.insert("ApproximateReceiveCount".into(), json!("1"));
        attributes.insert("SentTimestamp".into(), json!("1732000000000"));
        attributes.insert("SenderId".into(), json!("AIDAEXAMPLE"));
        attributes.insert(
            "ApproximateFirstReceiveTimestamp".into(),
            json!("1732000000001"),
        );
        if let Some(g) = &self.group {
            attributes.insert("MessageGroupId".into(), json!(g));
        }
        if let Some(d) = &self.dedup {
            attributes.insert("MessageDeduplicationId".into(), json!(d));
        }
        if self.arn.ends_with(".fifo") {
            let sequence = 18_000_000_000_000_000_000u128 + seq as u128;
            attributes.insert("SequenceNumber".into(), json!(sequence.to_string()));
        }
        let mut record = json!({
            "receiptHandle": format!("AQEB-receipt-{seq}"),
            "body": self.body,
            "attributes": attributes,
            "messageAttributes": self.msg_attrs,
            // Not an MD5: the processor never reads `md5OfBody`; it is here for the wire shape.
            "md5OfBody": &sqs_claim::key::sha256_hex(self.body.as_bytes())[..32],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.arn,
            "awsRegion": "us-east-1"
        });
        if let Some(id) = &self.id {
            record["messageId"] = json!(id);
        }
        record
    }
}

/// The event JSON for these records.
pub(crate) fn event_json(records: &[Rec]) -> Value {
    let records: Vec<Value> = records
        .iter()
        .enumerate()
        .map(|(i, r)| r.to_json(i))
        .collect();
    json!({ "Records": records })
}

/// The event, parsed from its wire JSON, with a default context (no deadline).
pub(crate) fn event(records: &[Rec]) -> LambdaEvent<SqsEvent> {
    event_with_deadline(records, 0)
}

/// The event with `Context::deadline` set to `deadline_ms` (epoch milliseconds, 0 = none).
pub(crate) fn event_with_deadline(records: &[Rec], deadline_ms: u64) -> LambdaEvent<SqsEvent> {
    let payload: SqsEvent =
        serde_json::from_value(event_json(records)).expect("test event must parse as SqsEvent");
    let mut context = Context::default();
    context.deadline = deadline_ms;
    LambdaEvent::new(payload, context)
}

/// A deadline `after` from now on `clock`, in epoch milliseconds (as `Context::deadline`).
pub(crate) fn deadline_in(clock: &Clock, after: Duration) -> u64 {
    let at = clock.now() + after;
    u64::try_from(sqs_claim::store::epoch_millis(at)).expect("deadline after the epoch")
}

/// The ids of the batch response, in order. Checks on the way that none is empty: an empty
/// `itemIdentifier` makes Lambda fail (and redeliver) the whole batch.
pub(crate) fn failed_ids(response: &sqs_claim::events::SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| {
            assert!(
                !f.item_identifier.is_empty(),
                "empty itemIdentifier in {response:?}"
            );
            f.item_identifier.clone()
        })
        .collect()
}

/// What a handler saw: every message id, in the order the handler was entered.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    ids: Arc<Mutex<Vec<String>>>,
    calls: Arc<AtomicUsize>,
}

impl Seen {
    /// A new, empty record.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records a call.
    pub(crate) fn saw(&self, id: &str) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.ids.lock().unwrap().push(id.to_owned());
    }

    /// How many handler calls.
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The ids seen, in call order.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.ids.lock().unwrap().clone()
    }

    /// How many times `id` was seen.
    pub(crate) fn count(&self, id: &str) -> usize {
        self.ids.lock().unwrap().iter().filter(|s| *s == id).count()
    }
}

/// Tracks how many handlers run at once, and the most that ever did.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gauge {
    current: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

impl Gauge {
    /// A new gauge at zero.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// One more running; returns a guard that counts it out when dropped (even on panic).
    pub(crate) fn enter(&self) -> GaugeGuard {
        let now = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        GaugeGuard(Arc::clone(&self.current))
    }

    /// The most that ever ran at once.
    pub(crate) fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }

    /// How many run now.
    pub(crate) fn current(&self) -> usize {
        self.current.load(Ordering::SeqCst)
    }
}

/// Counts one running handler out of its [`Gauge`] on drop.
pub(crate) struct GaugeGuard(Arc<AtomicUsize>);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Installs a test log subscriber once (respects `RUST_LOG`), so failures can be read with logs.
pub(crate) fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_test_writer()
        .try_init();
}

/// A handler that records each call and acts on the body: a body containing `FAIL` returns an
/// error, one containing `PANIC` panics, anything else succeeds.
pub(crate) fn scripted(
    seen: &Seen,
) -> impl tower::Service<
    sqs_claim::Message,
    Response = (),
    Error = sqs_claim::BoxError,
    Future: Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    let seen = seen.clone();
    tower::service_fn(move |msg: sqs_claim::Message| {
        let seen = seen.clone();
        async move {
            seen.saw(msg.id());
            if msg.body().contains("PANIC") {
                panic!("scripted panic in {}", msg.id());
            }
            if msg.body().contains("FAIL") {
                return Err(format!("scripted failure in {}", msg.id()).into());
            }
            Ok(())
        }
    })
}

/// The outcome names of a report, in batch order (`processed`, `duplicate`, ...).
pub(crate) fn outcome_names(report: &sqs_claim::BatchReport) -> Vec<&'static str> {
    report.items().iter().map(|i| i.outcome.name()).collect()
}

/// The outcome of the message with this id.
pub(crate) fn outcome_of<'a>(
    report: &'a sqs_claim::BatchReport,
    id: &str,
) -> &'a sqs_claim::Outcome {
    &report
        .items()
        .iter()
        .find(|i| i.message_id == id)
        .unwrap_or_else(|| panic!("no item {id} in the report"))
        .outcome
}

/// The failure of the message with this id (panics if it did not fail).
pub(crate) fn failure_of<'a>(
    report: &'a sqs_claim::BatchReport,
    id: &str,
) -> &'a sqs_claim::Failure {
    match outcome_of(report, id) {
        sqs_claim::Outcome::Failed(f) => f,
        other => panic!("{id}: expected a failure, got {other:?}"),
    }
}
