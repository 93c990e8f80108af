//! Helpers shared by the processor tests: SQS events built from the real Lambda wire JSON (the
//! test kit's builders, `sqs_claim_testkit::sqs`), and handlers that record what they saw.
//!
//! Each test binary uses a different subset of these helpers, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqs_claim::Clock;

// The event builders are the test kit's; these tests call them by their short names.
#[allow(unused_imports)]
pub(crate) use sqs_claim_testkit::sqs::{
    FIFO_ARN, Record as Rec, STANDARD_ARN, event_json, failed_ids, fifo, lambda_event as event,
    lambda_event_with_deadline as event_with_deadline, record as rec,
};

/// A deadline `after` from now on `clock`, in epoch milliseconds (as `Context::deadline`).
pub(crate) fn deadline_in(clock: &Clock, after: Duration) -> u64 {
    let at = clock.now() + after;
    u64::try_from(sqs_claim::store::epoch_millis(at)).expect("deadline after the epoch")
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
