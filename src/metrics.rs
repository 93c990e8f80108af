//! Per-batch metrics: what a batch did ([`BatchMetrics`]), a hook to send it anywhere
//! ([`MetricsSink`]), and CloudWatch Embedded Metric Format lines ([`Emf`]).
//!
//! A processor built with [`ProcessorBuilder::metrics`](crate::ProcessorBuilder::metrics)
//! hands every batch's [`BatchMetrics`] to its sink once the batch is done, before the
//! response goes back to Lambda. Without a sink nothing is measured.
//!
//! [`Emf`] prints one JSON line per batch that CloudWatch turns into metrics with no API call:
//! Lambda sends a function's stdout to CloudWatch Logs, which extracts metrics from every line
//! shaped as the [Embedded Metric Format specification] says.
//!
//! ```
//! use sqs_claim::metrics::Emf;
//! use sqs_claim::{MemoryStore, Message, Processor};
//! use tower::service_fn;
//!
//! # fn main() -> Result<(), sqs_claim::Error> {
//! let handler = service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
//! let processor = Processor::builder(MemoryStore::new(), handler)
//!     .metrics(Emf::new("payments")?)
//!     .build();
//! # let _ = processor;
//! # Ok(())
//! # }
//! ```
//!
//! The metrics (names as [`Emf`] writes them):
//!
//! | metric | unit | what |
//! |--------|------|------|
//! | `Records` | Count | messages in the batch |
//! | `Processed` | Count | handler ran, completion recorded |
//! | `Duplicate` | Count | skipped: the key was already completed |
//! | `HeldElsewhere` | Count | reported for retry: another worker holds a live claim |
//! | `Failed` | Count | reported for retry: failed, every kind |
//! | `Failed.<kind>` | Count | failed with that [`FailureKind`] (`Failed.handler_error`, ...), written only when not zero |
//! | `NotStarted` | Count | reported for retry: not started (deadline, an earlier failure in its FIFO group) |
//! | `CutOff` | Count | reported for retry: cut off by the time budget |
//! | `DeadLettered` | Count | failed on their last allowed receive and sent to the failure destination |
//! | `DeadLetteredAtOnce` | Count | of those, sent before their last receive as permanent failures (`FailureDestination::at_once`) |
//! | `VisibilityChanged` | Count | messages reported for retry given their own visibility timeout (`ProcessorBuilder::redelivery`) |
//! | `Conflicts` | Count | store writes cancelled on contention (a hot item written from several places at once), retried or not ([`BatchMetrics::conflicts`]) |
//! | `Retries` | Count | store writes sent again: after contention, or a completion after a transient error ([`BatchMetrics::retries`]) |
//! | `InFlightLimit` | Count | the adaptive in-flight limit when the batch ended ([`BatchMetrics::in_flight_limit`]) |
//! | `DedupHitRate` | Percent | `Duplicate / (Processed + Duplicate)`; written only when that is not 0 / 0 |
//! | `ClaimLatency` | Milliseconds | each claim call of the batch (see [`BatchMetrics::claim_latencies`]) |
//! | `CompletionLatency` | Milliseconds | each completion, retries included, and each one-shot write |
//!
//! [Embedded Metric Format specification]: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::outcome::{BatchReport, Counts, FailureKind, Outcome};
use crate::{Error, ErrorKind};

/// What one batch did. Handed to a [`MetricsSink`] once per batch.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BatchMetrics {
    /// When the batch finished (the processor's clock).
    pub timestamp: SystemTime,
    /// The invocation's request id (empty outside Lambda).
    pub request_id: String,
    /// The Lambda function's name, if known (the invocation context, else
    /// `AWS_LAMBDA_FUNCTION_NAME`).
    pub function_name: Option<String>,
    /// The source queue's name, from the first record's `eventSourceARN`.
    pub queue_name: Option<String>,
    /// Whether the batch came from a FIFO queue.
    pub fifo: bool,
    /// Messages in the batch.
    pub records: usize,
    /// Messages per outcome.
    pub counts: Counts,
    /// Failed messages per kind, each kind with at least one, sorted by kind name.
    pub failed_by_kind: Vec<(FailureKind, usize)>,
    /// How long each claim call of the batch took, in the order they finished. Only calls
    /// that returned count: one cut off by the time budget is in [`Counts::cut_off`].
    pub claim_latencies: Vec<Duration>,
    /// How long each completion took, its retries included, in the order they finished; in
    /// one-shot mode, each one-shot write (which claims and completes at once).
    pub completion_latencies: Vec<Duration>,
    /// Store writes of the batch cancelled on contention (another write on one of their items
    /// in flight: DynamoDB's `TransactionConflict`, a throttled transaction, a PostgreSQL
    /// serialization failure), whether the retry then succeeded or not. A hot item written
    /// from several invocations at once shows here first.
    pub conflicts: usize,
    /// Store writes sent again: after contention, and completions retried after a transient
    /// error (by the library; the AWS SDK's own retries are not counted).
    pub retries: usize,
    /// The processor's adaptive in-flight limit when the batch ended: how many messages of a
    /// standard-queue batch may run at once (cut on contention and timeouts, grown back on
    /// success, at most [`Processor::concurrency`](crate::Processor::concurrency)).
    pub in_flight_limit: usize,
    /// Messages reported for retry whose visibility timeout SQS confirmed changing
    /// (`ProcessorBuilder::redelivery`, feature `sqs`).
    pub visibility_changed: usize,
    /// Messages sent to the failure destination before their last allowed receive, as
    /// permanent failures (`FailureDestination::at_once`, feature `sqs`); also counted in
    /// [`Counts::dead_lettered`].
    pub dead_lettered_at_once: usize,
}

impl BatchMetrics {
    pub(crate) fn new(
        report: &BatchReport,
        timestamp: SystemTime,
        request_id: String,
        function_name: Option<String>,
        queue_name: Option<String>,
        fifo: bool,
        (claim_latencies, completion_latencies): (Vec<Duration>, Vec<Duration>),
    ) -> Self {
        let mut failed_by_kind: Vec<(FailureKind, usize)> = Vec::new();
        for item in report.items() {
            if let Outcome::Failed(f) = &item.outcome {
                match failed_by_kind.iter_mut().find(|(k, _)| *k == f.kind) {
                    Some((_, n)) => *n += 1,
                    None => failed_by_kind.push((f.kind, 1)),
                }
            }
        }
        failed_by_kind.sort_by_key(|(k, _)| k.as_str());
        BatchMetrics {
            timestamp,
            request_id,
            function_name,
            queue_name,
            fifo,
            records: report.items().len(),
            counts: report.counts(),
            failed_by_kind,
            claim_latencies,
            completion_latencies,
            conflicts: 0,
            retries: 0,
            in_flight_limit: 0,
            visibility_changed: 0,
            dead_lettered_at_once: 0,
        }
    }

    /// The share of settled messages that were duplicates, in percent:
    /// `Duplicate / (Processed + Duplicate) × 100`. `None` when nothing was settled. A whole
    /// batch of redeliveries reads 100; a fresh batch 0.
    pub(crate) fn dedup_hit_rate(&self) -> Option<f64> {
        let settled = self.counts.processed + self.counts.duplicate;
        (settled > 0).then(|| self.counts.duplicate as f64 * 100.0 / settled as f64)
    }
}

/// Where a processor sends each batch's [`BatchMetrics`]: [`Emf`] for CloudWatch, or your own
/// (a `metrics` crate recorder, StatsD, a test's capture).
///
/// `record` runs once per batch, after every message has its outcome and before the response
/// is returned, on the invocation's task: keep it short and do not block on the network (the
/// Lambda deadline is still running). A sink that panics is caught and logged; the batch's
/// response is unaffected.
///
/// Any `Fn(&BatchMetrics) + Send + Sync + 'static` is a sink:
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use sqs_claim::metrics::BatchMetrics;
/// use sqs_claim::{MemoryStore, Message, Processor};
/// use tower::service_fn;
///
/// let failed = Arc::new(AtomicUsize::new(0));
/// let seen = Arc::clone(&failed);
/// let handler = service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
/// let processor = Processor::builder(MemoryStore::new(), handler)
///     .metrics(move |batch: &BatchMetrics| {
///         seen.fetch_add(batch.counts.failed, Ordering::Relaxed);
///     })
///     .build();
/// # let _ = processor;
/// ```
pub trait MetricsSink: Send + Sync + 'static {
    /// Records one batch.
    fn record(&self, batch: &BatchMetrics);
}

impl<F> MetricsSink for F
where
    F: Fn(&BatchMetrics) + Send + Sync + 'static,
{
    fn record(&self, batch: &BatchMetrics) {
        self(batch)
    }
}

impl<T: MetricsSink + ?Sized> MetricsSink for Arc<T> {
    fn record(&self, batch: &BatchMetrics) {
        (**self).record(batch)
    }
}

/// The processor's sink, shared by its clones.
#[derive(Clone)]
pub(crate) struct Sink(pub(crate) Arc<dyn MetricsSink>);

impl fmt::Debug for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MetricsSink")
    }
}

/// What one batch's store calls did, counted as they return: the latencies (when metrics are
/// on), the writes cancelled on contention and the writes sent again. Passed beside the time
/// budget (which is time alone) and read once, into [`BatchMetrics`] and the batch's log line,
/// when the batch is done.
#[derive(Debug, Default)]
pub(crate) struct BatchStats {
    /// `None` unless metrics are on: nothing is timed for nobody.
    latencies: Option<Latencies>,
    conflicts: AtomicUsize,
    retries: AtomicUsize,
}

impl BatchStats {
    /// Counters for one batch, timing the store calls if `measuring`.
    pub(crate) fn new(measuring: bool) -> Self {
        BatchStats {
            latencies: measuring.then(Latencies::default),
            ..BatchStats::default()
        }
    }

    /// Counts a store write cancelled on contention.
    pub(crate) fn note_conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a store write sent again (after contention or a transient error).
    pub(crate) fn note_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// The writes cancelled on contention so far.
    pub(crate) fn conflicts(&self) -> usize {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// The writes sent again so far.
    pub(crate) fn retries(&self) -> usize {
        self.retries.load(Ordering::Relaxed)
    }

    /// The latencies of the store calls, when measuring (where a call's clock starts).
    pub(crate) fn latencies(&self) -> Option<&Latencies> {
        self.latencies.as_ref()
    }

    /// The claim and completion latencies measured so far, taken out (empty unless measuring).
    pub(crate) fn take_latencies(&self) -> (Vec<Duration>, Vec<Duration>) {
        self.latencies
            .as_ref()
            .map(Latencies::take)
            .unwrap_or_default()
    }
}

/// The store latencies of one batch, filled in as its calls return.
#[derive(Debug, Default)]
pub(crate) struct Latencies {
    claim: Mutex<Vec<Duration>>,
    completion: Mutex<Vec<Duration>>,
}

/// Which store call a latency is of.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StoreCall {
    Claim,
    Completion,
}

impl Latencies {
    pub(crate) fn push(&self, call: StoreCall, took: Duration) {
        let list = match call {
            StoreCall::Claim => &self.claim,
            StoreCall::Completion => &self.completion,
        };
        // A poisoned lock only means a panic elsewhere while pushing: the list is still good.
        list.lock().unwrap_or_else(|e| e.into_inner()).push(took);
    }

    pub(crate) fn take(&self) -> (Vec<Duration>, Vec<Duration>) {
        let take = |m: &Mutex<Vec<Duration>>| {
            std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner()))
        };
        (take(&self.claim), take(&self.completion))
    }
}

/// The queue name in an SQS ARN (`arn:aws:sqs:REGION:ACCOUNT:NAME`).
pub(crate) fn queue_name(arn: &str) -> Option<&str> {
    arn.rsplit(':').next().filter(|s| !s.is_empty())
}

/// A dimension whose value comes from each batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchDimension {
    /// `FunctionName`: the Lambda function's name (`unknown` outside Lambda).
    FunctionName,
    /// `QueueName`: the source queue's name (`unknown` when the event has no ARN).
    QueueName,
}

impl BatchDimension {
    fn name(self) -> &'static str {
        match self {
            BatchDimension::FunctionName => "FunctionName",
            BatchDimension::QueueName => "QueueName",
        }
    }

    fn value(self, batch: &BatchMetrics) -> &str {
        let v = match self {
            BatchDimension::FunctionName => batch.function_name.as_deref(),
            BatchDimension::QueueName => batch.queue_name.as_deref(),
        };
        v.filter(|s| !s.is_empty()).unwrap_or("unknown")
    }
}

/// Where [`Emf`] writes its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Stdout,
    Stderr,
}

/// The most dimensions one EMF dimension set may hold (the specification's limit).
pub(crate) const MAX_DIMENSIONS: usize = 30;

/// The most values one EMF metric may carry in one line (the specification's limit).
pub(crate) const MAX_VALUES: usize = 100;

/// A [`MetricsSink`] that writes each batch as one CloudWatch Embedded Metric Format line.
///
/// One JSON object per batch, on one line:
///
/// ```json
/// {"_aws":{"Timestamp":1764590000000,"CloudWatchMetrics":[{"Namespace":"payments",
///   "Dimensions":[["FunctionName","QueueName"]],"Metrics":[{"Name":"Records","Unit":"Count"},...]}]},
///  "FunctionName":"consumer","QueueName":"payments-input","Records":10,"Processed":9,
///  "Failed":1,"Failed.handler_error":1,...,"ClaimLatency":[4.1,3.9,...],"RequestId":"..."}
/// ```
///
/// (shown wrapped here; each is one line). The dimensions are low-cardinality only: by default
/// `FunctionName` and `QueueName` ([`BatchDimension`]), plus any fixed ones you add
/// ([`Emf::dimension`]). The request id is a plain member, searchable in the logs but not a
/// dimension. Latency arrays carry at most 100 values: every value, or for a larger
/// batch that many evenly spaced quantiles of the batch's values (its minimum and maximum
/// included).
///
/// Lines go to stdout inside Lambda (`AWS_LAMBDA_RUNTIME_API` set when the sink is made), where
/// Lambda's log pipeline reads them, and to stderr elsewhere, so a local run's own output on
/// stdout (a report, piped to `jq`) stays clean.
///
/// Lambda's log-level filtering (JSON log format with an application log level) reads a line
/// without a `level` as `INFO`: keep the function's `ApplicationLogLevel` at `INFO` or more
/// verbose, or Lambda drops these lines and the metrics with them (lower `RUST_LOG` to log
/// less).
#[derive(Debug, Clone)]
pub struct Emf {
    namespace: String,
    batch_dimensions: Vec<BatchDimension>,
    fixed: Vec<(String, String)>,
    output: Output,
}

fn config_error(why: String) -> Error {
    Error::new(ErrorKind::Config, why)
}

impl Emf {
    /// EMF lines in `namespace`, with the dimensions `FunctionName` and `QueueName`.
    ///
    /// Fails ([`ErrorKind::Config`]) when CloudWatch would refuse the namespace: empty, longer
    /// than 255 characters, a character other than ASCII letters, digits and `. - _ / # :` or
    /// space, or starting with `AWS/` (reserved for AWS).
    pub fn new(namespace: impl Into<String>) -> Result<Emf, Error> {
        let namespace = namespace.into();
        let allowed = |c: char| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/' | '#' | ':' | ' ')
        };
        if namespace.trim().is_empty() || namespace.len() > 255 || !namespace.chars().all(allowed) {
            return Err(config_error(format!(
                "metrics namespace {namespace:?} is not a CloudWatch namespace: 1 to 255 ASCII \
                 letters, digits, spaces or . - _ / # :"
            )));
        }
        if namespace.starts_with("AWS/") {
            return Err(config_error(format!(
                "metrics namespace {namespace:?} starts with AWS/, which is reserved for AWS"
            )));
        }
        let output = if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some_and(|v| !v.is_empty()) {
            Output::Stdout
        } else {
            Output::Stderr
        };
        Ok(Emf {
            namespace,
            batch_dimensions: vec![BatchDimension::FunctionName, BatchDimension::QueueName],
            fixed: Vec::new(),
            output,
        })
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Which per-batch dimensions to write (default: `FunctionName`, `QueueName`). An empty
    /// list with no fixed dimension gives metrics without dimensions.
    pub fn batch_dimensions(mut self, dimensions: &[BatchDimension]) -> Self {
        self.batch_dimensions.clear();
        for d in dimensions {
            if !self.batch_dimensions.contains(d) {
                self.batch_dimensions.push(*d);
            }
        }
        self
    }

    /// Adds a fixed dimension to every line (a stage, a service name). Keep its values few:
    /// every distinct value is a separate set of CloudWatch metrics, billed as such.
    ///
    /// Fails ([`ErrorKind::Config`]) on an empty name or value, a name starting with `:` or
    /// naming a member the line already has (a metric, `_aws`, `RequestId`), a name or value
    /// longer than 255 or 1024 characters, or past 30 dimensions in all.
    pub fn dimension(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Emf, Error> {
        let (name, value) = (name.into(), value.into());
        let taken = name == "_aws"
            || name == "RequestId"
            || METRIC_NAMES.contains(&name.as_str())
            || name.starts_with("Failed.")
            || BatchDimension::FunctionName.name() == name
            || BatchDimension::QueueName.name() == name
            || self.fixed.iter().any(|(n, _)| *n == name);
        if name.trim().is_empty() || name.starts_with(':') || name.len() > 255 || taken {
            return Err(config_error(format!(
                "metrics dimension name {name:?} is empty, too long, starts with ':' or is \
                 already used in the line"
            )));
        }
        if value.trim().is_empty() || value.len() > 1024 {
            return Err(config_error(format!(
                "metrics dimension {name:?} needs a value of 1 to 1024 characters"
            )));
        }
        // Room for both per-batch dimensions, whichever `batch_dimensions` picks later.
        if self.fixed.len() + 2 >= MAX_DIMENSIONS {
            return Err(config_error(format!(
                "at most {MAX_DIMENSIONS} metrics dimensions"
            )));
        }
        self.fixed.push((name, value));
        Ok(self)
    }

    /// The EMF line for `batch`, without the trailing newline: what [`MetricsSink::record`]
    /// writes. Useful for a sink of your own that sends the line somewhere else.
    pub fn line(&self, batch: &BatchMetrics) -> String {
        self.object(batch).to_string()
    }

    fn object(&self, batch: &BatchMetrics) -> Value {
        let mut top = Map::new();
        let mut declared = Vec::new();
        let mut put = |name: &str, unit: &str, value: Value| {
            declared.push(json!({"Name": name, "Unit": unit}));
            top.insert(name.to_owned(), value);
        };
        let c = &batch.counts;
        put("Records", "Count", json!(batch.records));
        put("Processed", "Count", json!(c.processed));
        put("Duplicate", "Count", json!(c.duplicate));
        put("HeldElsewhere", "Count", json!(c.held_elsewhere));
        put("Failed", "Count", json!(c.failed));
        for (kind, n) in &batch.failed_by_kind {
            put(&format!("Failed.{}", kind.as_str()), "Count", json!(n));
        }
        put("NotStarted", "Count", json!(c.not_started));
        put("CutOff", "Count", json!(c.cut_off));
        // Failed for good on their last receive and sent to the failure queue with their
        // reason (`ProcessorBuilder::failure_destination`): handled, but worth an alarm.
        put("DeadLettered", "Count", json!(c.dead_lettered));
        put(
            "DeadLetteredAtOnce",
            "Count",
            json!(batch.dead_lettered_at_once),
        );
        put(
            "VisibilityChanged",
            "Count",
            json!(batch.visibility_changed),
        );
        put("Conflicts", "Count", json!(batch.conflicts));
        put("Retries", "Count", json!(batch.retries));
        put("InFlightLimit", "Count", json!(batch.in_flight_limit));
        if let Some(rate) = batch.dedup_hit_rate() {
            put("DedupHitRate", "Percent", json!(rate));
        }
        for (name, values) in [
            ("ClaimLatency", &batch.claim_latencies),
            ("CompletionLatency", &batch.completion_latencies),
        ] {
            if !values.is_empty() {
                put(name, "Milliseconds", json!(milliseconds(values)));
            }
        }
        let mut dimension_names = Vec::new();
        for d in &self.batch_dimensions {
            dimension_names.push(d.name().to_owned());
            top.insert(d.name().to_owned(), json!(d.value(batch)));
        }
        for (name, value) in &self.fixed {
            dimension_names.push(name.clone());
            top.insert(name.clone(), json!(value));
        }
        top.insert("RequestId".to_owned(), json!(batch.request_id));
        let timestamp = batch
            .timestamp
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        top.insert(
            "_aws".to_owned(),
            json!({
                "Timestamp": timestamp,
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": [dimension_names],
                    "Metrics": declared,
                }],
            }),
        );
        Value::Object(top)
    }
}

/// The metric names every line may declare, besides `Failed.<kind>`.
const METRIC_NAMES: &[&str] = &[
    "Records",
    "Processed",
    "Duplicate",
    "HeldElsewhere",
    "Failed",
    "NotStarted",
    "CutOff",
    "DeadLettered",
    "DeadLetteredAtOnce",
    "VisibilityChanged",
    "Conflicts",
    "Retries",
    "InFlightLimit",
    "DedupHitRate",
    "ClaimLatency",
    "CompletionLatency",
];

/// At most [`MAX_VALUES`] values in milliseconds (µs precision): every value, or evenly spaced
/// quantiles of the sorted values, the minimum and maximum included.
fn milliseconds(values: &[Duration]) -> Vec<f64> {
    let ms = |d: &Duration| (d.as_micros() as f64) / 1000.0;
    if values.len() <= MAX_VALUES {
        return values.iter().map(ms).collect();
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let last = sorted.len() - 1;
    (0..MAX_VALUES)
        .map(|i| ms(&sorted[i * last / (MAX_VALUES - 1)]))
        .collect()
}

impl MetricsSink for Emf {
    fn record(&self, batch: &BatchMetrics) {
        let mut line = self.line(batch);
        line.push('\n');
        // One `write_all` under the lock: the line never interleaves with a log line.
        let written = match self.output {
            Output::Stdout => std::io::stdout().lock().write_all(line.as_bytes()),
            Output::Stderr => std::io::stderr().lock().write_all(line.as_bytes()),
        };
        if let Err(e) = written {
            tracing::warn!(error = %e, "could not write the batch's metrics line");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_cloudwatch_refuses_are_refused() {
        for good in ["payments", "sqs-claim", "a/b.c_d#e:f g"] {
            assert!(Emf::new(good).is_ok(), "{good}");
        }
        for bad in ["", " ", "AWS/Lambda", "naïve", "a\nb", &"x".repeat(256)] {
            let e = Emf::new(bad).expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::Config);
        }
    }

    #[test]
    fn dimensions_cannot_shadow_members() {
        let emf = Emf::new("ns").unwrap();
        for taken in [
            "Failed",
            "_aws",
            "RequestId",
            "QueueName",
            "Failed.panic",
            ":x",
            "",
        ] {
            assert!(emf.clone().dimension(taken, "v").is_err(), "{taken}");
        }
        assert!(emf.clone().dimension("Stage", "").is_err());
        let emf = emf.dimension("Stage", "prod").unwrap();
        assert!(emf.dimension("Stage", "dev").is_err(), "twice");
    }

    #[test]
    fn large_batches_keep_the_extremes_within_the_value_limit() {
        let values: Vec<Duration> = (1..=1000u64).rev().map(Duration::from_millis).collect();
        let ms = milliseconds(&values);
        assert_eq!(ms.len(), MAX_VALUES);
        assert_eq!(ms.first().copied(), Some(1.0));
        assert_eq!(ms.last().copied(), Some(1000.0));
        assert!(ms.windows(2).all(|w| w[0] <= w[1]));
        let few = milliseconds(&[Duration::from_micros(1500), Duration::from_micros(250)]);
        assert_eq!(few, [1.5, 0.25]);
    }

    #[test]
    fn queue_names_from_arns() {
        assert_eq!(
            queue_name("arn:aws:sqs:us-east-1:123456789012:payments.fifo"),
            Some("payments.fifo")
        );
        assert_eq!(queue_name("arn:aws:sqs:us-east-1:1:"), None);
    }
}
