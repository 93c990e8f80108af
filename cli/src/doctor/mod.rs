//! `sqs-claim doctor`: reads the deployed configuration (the queue, the function and its event
//! source mapping, the claims table) and checks it against the rules the claim protocol needs.
//!
//! The data flows in one direction:
//!
//! | step | where |
//! |------|-------|
//! | the command line ([`DoctorArgs`]) | here |
//! | the facts: SQS `GetQueueAttributes`, Lambda `GetFunctionConfiguration` and `ListEventSourceMappings` (the SQS mapping, and every stream mapping), DynamoDB `DescribeTable` and `DescribeTimeToLive`, else flags or `template.yaml` | `facts.rs`, `template.rs` |
//! | the rules, pure functions of the facts | `rules.rs`; for each stream mapping, `stream_rules.rs` |
//! | one line per rule (or a JSON array), and the verdict | [`Report`] |
//!
//! A value that cannot be known (no API, no flag) makes its rules `skip` lines that say how to
//! provide it; it never fails the run. Each read is bounded by `SQS_CLAIM_STARTUP_TIMEOUT_MS`.

use std::fmt;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;
use sqs_claim::{Error, ErrorKind};

use crate::{Settings, StoreUrl};

mod facts;
mod rules;
mod stream_rules;
mod template;

pub use facts::{
    DYNAMODB_STREAMS_RETENTION_SECS, FunctionFacts, KINESIS_DEFAULT_RETENTION_SECS, Known,
    QueueFacts, Redrive, StreamFacts, StreamSource, TableFacts, TableShape, Ttl,
};
pub use rules::{
    MAX_BATCH_WITHOUT_WINDOW, MIN_MAX_RECEIVE_COUNT, TTL_WINDOW_FACTOR, VISIBILITY_FACTOR, check,
};
pub use stream_rules::STREAM_RULES;

/// `sqs-claim doctor`'s own flags (the store flags `--store` and `--table` are the CLI's).
#[derive(Debug, Clone, Default, Args)]
#[non_exhaustive]
pub struct DoctorArgs {
    /// The input queue: SQS GetQueueAttributes reads its visibility timeout, redrive policy,
    /// retention and FIFO settings
    #[arg(long, value_name = "URL")]
    pub queue_url: Option<String>,

    /// The Lambda function: GetFunctionConfiguration (timeout) and ListEventSourceMappings
    /// (ReportBatchItemFailures, batch size, batching window), where the endpoint offers them
    #[arg(long, value_name = "NAME")]
    pub function: Option<String>,

    /// The function timeout in seconds (beats the API and the template)
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=900))]
    pub function_timeout: Option<u64>,

    /// Whether the event source mapping has FunctionResponseTypes ReportBatchItemFailures
    #[arg(long, value_name = "yes|no")]
    pub report_batch_item_failures: Option<YesNo>,

    /// The event source mapping's batch size
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub batch_size: Option<u64>,

    /// The event source mapping's MaximumBatchingWindowInSeconds
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(0..=300))]
    pub batching_window: Option<u64>,

    /// Read the function timeout and the SQS event's settings from a SAM template (its one
    /// AWS::Serverless::Function with an SQS event; a !Ref reads the parameter's Default)
    #[arg(long, value_name = "FILE")]
    pub template: Option<PathBuf>,

    /// Whether producers rely on the FIFO queue's ContentBasedDeduplication (the reference
    /// publisher sets a MessageDeduplicationId itself) [default: no]
    #[arg(long, value_name = "yes|no")]
    pub content_based_dedup: Option<YesNo>,

    /// The stream's retention in hours, for the stream rules: a Kinesis stream's
    /// RetentionPeriodHours or a Kafka topic's retention (not read from an API; DynamoDB Streams
    /// keep 24 h) [default for Kinesis: 24, its default, said in the report]
    #[arg(long, value_name = "HOURS", value_parser = clap::value_parser!(u64).range(1..=8760))]
    pub stream_retention_hours: Option<u64>,

    /// Exit 1 on a warning too, not only on a failure
    #[arg(long)]
    pub strict: bool,

    /// Print a JSON array of {rule, status, detail, fix} instead of one line per rule
    #[arg(long, value_name = "FORMAT")]
    pub report: Option<ReportFormat>,
}

/// A yes-or-no flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum YesNo {
    /// Yes.
    Yes,
    /// No.
    No,
}

impl YesNo {
    fn as_bool(self) -> bool {
        self == YesNo::Yes
    }
}

/// `doctor --report`: the one machine format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// A JSON array of {rule, status, detail, fix}
    Json,
}

/// What one rule found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The rule holds.
    Ok,
    /// Likely wrong, or wrong under a condition the doctor cannot see; fails only `--strict`.
    Warn,
    /// The rule is broken: exit code 1.
    Fail,
    /// A value the rule needs is unknown; the detail says how to provide it.
    Skip,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so the report's `{:<4}` lines the rules up.
        f.pad(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        })
    }
}

/// One rule's line: its name, what it found, the values seen and what to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Finding {
    /// The rule's stable name, e.g. `visibility-timeout`.
    pub rule: &'static str,
    /// What the rule found.
    pub status: Status,
    /// The values seen (and where they came from).
    pub detail: String,
    /// What to change; `None` when nothing needs to.
    pub fix: Option<String>,
}

impl Finding {
    pub(crate) fn new(rule: &'static str, status: Status, detail: impl Into<String>) -> Self {
        Finding {
            rule,
            status,
            detail: detail.into(),
            fix: None,
        }
    }

    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4} {}: {}", self.status, self.rule, self.detail)?;
        if let Some(fix) = &self.fix {
            write!(f, "; fix: {fix}")?;
        }
        Ok(())
    }
}

/// Every rule's finding, in a fixed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    findings: Vec<Finding>,
}

impl Report {
    /// The report of these findings.
    pub fn new(findings: Vec<Finding>) -> Self {
        Report { findings }
    }

    /// The findings, one per rule.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// One line per rule, or with [`ReportFormat::Json`] the JSON array.
    pub fn render(&self, format: Option<ReportFormat>) -> String {
        match format {
            None => self.findings.iter().map(|f| format!("{f}\n")).collect(),
            Some(ReportFormat::Json) => {
                // A Vec of plain structs with string fields always serializes.
                let mut text =
                    serde_json::to_string_pretty(&self.findings).unwrap_or_else(|_| "[]".into());
                text.push('\n');
                text
            }
        }
    }

    /// `ok, warn, fail, skip` counts, for the summary line.
    pub fn summary(&self) -> String {
        let count = |s: Status| self.findings.iter().filter(|f| f.status == s).count();
        format!(
            "doctor: {} rules: {} ok, {} warn, {} fail, {} skip",
            self.findings.len(),
            count(Status::Ok),
            count(Status::Warn),
            count(Status::Fail),
            count(Status::Skip)
        )
    }

    /// The rules that make the run fail: every `fail`, and with `strict` every `warn`; each
    /// once, though a stream rule has a line per mapping.
    pub fn failing(&self, strict: bool) -> Vec<&'static str> {
        let mut rules: Vec<&'static str> = Vec::new();
        for f in &self.findings {
            if (f.status == Status::Fail || (strict && f.status == Status::Warn))
                && !rules.contains(&f.rule)
            {
                rules.push(f.rule);
            }
        }
        rules
    }
}

/// Everything the rules look at. A `None` is a value the doctor could not learn.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Facts {
    /// The input queue, if `--queue-url` was given.
    pub queue: Option<QueueFacts>,
    /// The function and its event source mapping, from flags, the API or the template.
    pub function: FunctionFacts,
    /// The claims table, if the store is DynamoDB.
    pub table: TableFacts,
    /// How long a completed key is remembered (`SQS_CLAIM_TTL_SECS`), in seconds.
    pub claim_ttl_secs: u64,
    /// The least lease of a claim (`SQS_CLAIM_LEASE_AT_LEAST_SECS`), in seconds, if set.
    pub lease_at_least_secs: Option<u64>,
    /// Whether producers rely on content-based deduplication (`--content-based-dedup`).
    pub content_based_dedup_expected: bool,
    /// The backoff of messages reported for retry (`SQS_CLAIM_BACKOFF*`), if on.
    pub backoff: Option<sqs_claim::Backoff>,
    /// Whether objects offloaded to S3 are deleted once their message is done
    /// (`SQS_CLAIM_LARGE_MESSAGE_DELETE=on`).
    pub large_message_delete: bool,
    /// Whether pointers to S3 are read (`SQS_CLAIM_LARGE_MESSAGES=on`).
    pub large_messages: bool,
    /// The only buckets a pointer may name (`SQS_CLAIM_LARGE_MESSAGE_BUCKETS`); empty for
    /// any.
    pub large_message_buckets: Vec<String>,
    /// The key source (`SQS_CLAIM_KEY`), if set (unset: the consumer's own default).
    pub key: Option<sqs_claim::KeySource>,
}

/// Reads the facts `args`, `settings` and `store` point at, checks every rule, prints the
/// report on stdout and the summary on stderr. `Err` for input the doctor cannot read (a
/// queue or function that does not exist, an endpoint that does not answer, a bad template),
/// and when a rule fails (or, with `--strict`, warns): the message names the rules.
pub async fn run(args: &DoctorArgs, settings: &Settings, store: &StoreUrl) -> Result<(), Error> {
    let facts = facts::gather(args, settings, store).await?;
    let report = Report::new(check(&facts));
    print!("{}", report.render(args.report));
    eprintln!("{}", report.summary());
    let failing = report.failing(args.strict);
    if failing.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Config,
        format!(
            "doctor: {} rule{} {}: {}",
            failing.len(),
            if failing.len() == 1 { "" } else { "s" },
            if args.strict {
                "failed or warned (--strict)"
            } else {
                "failed"
            },
            failing.join(", ")
        ),
    ))
}
