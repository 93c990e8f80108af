//! The facts the rules read, from the services themselves where they answer: SQS
//! `GetQueueAttributes`, Lambda `GetFunctionConfiguration` and `ListEventSourceMappings`,
//! DynamoDB `DescribeTable` and `DescribeTimeToLive`. A flag beats what an API says (to ask
//! "what if"), and the API beats the template (it is what runs).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_lambda::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_lambda::types::EventSourceMappingConfiguration;
use sqs_claim::aws_config::{self, BehaviorVersion, SdkConfig, timeout::TimeoutConfig};
use sqs_claim::aws_sdk_dynamodb::types::{KeyType, ScalarAttributeType, TimeToLiveStatus};
use sqs_claim::aws_sdk_sqs::types::QueueAttributeName;
use sqs_claim::store::dynamodb::DynamoDbKeySchema;
use sqs_claim::store::dynamodb::DynamoDbStore;
use sqs_claim::{Error, ErrorKind};

use super::{DoctorArgs, Facts, template};
use crate::{Settings, StoreUrl};

/// A value and where it came from (`--function-timeout`, `Lambda GetFunctionConfiguration`,
/// `template.yaml parameter FunctionTimeout's Default`), shown beside it in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: String,
}

impl<T> Known<T> {
    /// `value`, read from `source`.
    pub fn new(value: T, source: impl Into<String>) -> Self {
        Known {
            value,
            source: source.into(),
        }
    }
}

/// What `GetQueueAttributes` says about the input queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueFacts {
    /// The queue's name (the last part of its ARN or URL).
    pub name: String,
    /// `QueueArn`, to find the event source mapping.
    pub arn: Option<String>,
    /// `VisibilityTimeout`, seconds.
    pub visibility_timeout_secs: u64,
    /// `MessageRetentionPeriod`, seconds.
    pub retention_secs: u64,
    /// `RedrivePolicy`, if any.
    pub redrive: Option<Redrive>,
    /// `FifoQueue`.
    pub fifo_queue: bool,
    /// `ContentBasedDeduplication`.
    pub content_based_dedup: bool,
}

impl QueueFacts {
    /// Facts of a queue named `name`, for tests of the rules: standard, 30 s visibility,
    /// 4 days retention, no redrive policy.
    pub fn new(name: impl Into<String>) -> Self {
        QueueFacts {
            name: name.into(),
            arn: None,
            visibility_timeout_secs: 30,
            retention_secs: 4 * 24 * 3600,
            redrive: None,
            fifo_queue: false,
            content_based_dedup: false,
        }
    }
}

/// The queue's redrive policy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Redrive {
    /// Receives before SQS moves a message to the dead-letter queue.
    pub max_receive_count: u64,
    /// The dead-letter queue.
    pub dead_letter_target_arn: String,
}

impl Redrive {
    /// A policy of `max_receive_count` receives into `dead_letter_target_arn`.
    pub fn new(max_receive_count: u64, dead_letter_target_arn: impl Into<String>) -> Self {
        Redrive {
            max_receive_count,
            dead_letter_target_arn: dead_letter_target_arn.into(),
        }
    }
}

/// The function's timeout and its SQS event source mapping's settings; each `None` is unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FunctionFacts {
    /// The function timeout, seconds.
    pub timeout_secs: Option<Known<u64>>,
    /// `FunctionResponseTypes` includes `ReportBatchItemFailures`.
    pub report_batch_item_failures: Option<Known<bool>>,
    /// `BatchSize`.
    pub batch_size: Option<Known<u64>>,
    /// `MaximumBatchingWindowInSeconds`.
    pub batching_window_secs: Option<Known<u64>>,
    /// The Lambda API says the function has no SQS event source mapping (from the queue).
    pub no_mapping: Option<String>,
    /// The function's stream event source mappings (Kinesis, DynamoDB Streams, Kafka), each
    /// checked by the `stream-*` rules.
    pub streams: Vec<StreamFacts>,
    /// Why values are unknown though a source was given (the endpoint offers no Lambda API,
    /// the template writes a value the doctor cannot evaluate), for the skip lines.
    pub notes: Vec<String>,
}

impl FunctionFacts {
    /// Fills every value still unknown from `other`.
    fn or(mut self, other: FunctionFacts) -> FunctionFacts {
        self.timeout_secs = self.timeout_secs.or(other.timeout_secs);
        self.report_batch_item_failures = self
            .report_batch_item_failures
            .or(other.report_batch_item_failures);
        self.batch_size = self.batch_size.or(other.batch_size);
        self.batching_window_secs = self.batching_window_secs.or(other.batching_window_secs);
        self.no_mapping = self.no_mapping.or(other.no_mapping);
        if self.streams.is_empty() {
            self.streams = other.streams;
        }
        self.notes.extend(other.notes);
        self
    }
}

/// Where a stream mapping reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamSource {
    /// Amazon Kinesis Data Streams.
    Kinesis,
    /// Amazon DynamoDB Streams (records kept 24 hours).
    DynamoDbStreams,
    /// Amazon MSK or self-managed Apache Kafka.
    Kafka,
}

impl StreamSource {
    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            StreamSource::Kinesis => "Kinesis",
            StreamSource::DynamoDbStreams => "DynamoDB Streams",
            StreamSource::Kafka => "Kafka",
        }
    }

    /// The source of a mapping reading `arn`, `None` for one that is not a stream (SQS, MQ,
    /// DocumentDB).
    pub fn of_arn(arn: &str) -> Option<StreamSource> {
        if arn.starts_with("arn:") && arn.contains(":kinesis:") {
            Some(StreamSource::Kinesis)
        } else if arn.contains(":dynamodb:") && arn.contains("/stream/") {
            Some(StreamSource::DynamoDbStreams)
        } else if arn.contains(":kafka:") {
            Some(StreamSource::Kafka)
        } else {
            None
        }
    }
}

/// The seconds DynamoDB Streams keep a record (fixed by the service).
pub const DYNAMODB_STREAMS_RETENTION_SECS: u64 = 24 * 3600;
/// A Kinesis stream's retention unless it was changed (24 hours; at most 365 days).
pub const KINESIS_DEFAULT_RETENTION_SECS: u64 = 24 * 3600;

/// One stream event source mapping (from the Lambda API or a template's stream event): the
/// facts the `stream-*` rules read. Each `None` is unknown; `-1` is "infinite", as the API
/// writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamFacts {
    /// What it reads.
    pub source: StreamSource,
    /// How the report names it (`mapping UUID from ARN`, `template: Function.Event`).
    pub name: String,
    /// How long the stream keeps a record, seconds.
    pub retention_secs: Option<Known<u64>>,
    /// `MaximumRecordAgeInSeconds` (`-1`: until the record expires).
    pub maximum_record_age_secs: Option<Known<i64>>,
    /// `MaximumRetryAttempts` (`-1`: until the record expires).
    pub maximum_retry_attempts: Option<Known<i64>>,
    /// `BisectBatchOnFunctionError`.
    pub bisect_on_error: Option<Known<bool>>,
    /// `FunctionResponseTypes` includes `ReportBatchItemFailures`.
    pub report_batch_item_failures: Option<Known<bool>>,
    /// `DestinationConfig.OnFailure.Destination`: `Some(None)` when there is none.
    pub on_failure: Option<Known<Option<String>>>,
    /// `ParallelizationFactor` (batches of one shard run at once).
    pub parallelization_factor: Option<Known<u64>>,
}

impl StreamFacts {
    /// A mapping of `source` named `name`, every value unknown but the retention DynamoDB
    /// Streams fix.
    pub fn new(source: StreamSource, name: impl Into<String>) -> Self {
        StreamFacts {
            source,
            name: name.into(),
            retention_secs: (source == StreamSource::DynamoDbStreams).then(|| {
                Known::new(
                    DYNAMODB_STREAMS_RETENTION_SECS,
                    "DynamoDB Streams keep records 24 h",
                )
            }),
            maximum_record_age_secs: None,
            maximum_retry_attempts: None,
            bisect_on_error: None,
            report_batch_item_failures: None,
            on_failure: None,
            parallelization_factor: None,
        }
    }
}

/// The claims table, as `DescribeTable` and `DescribeTimeToLive` see it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TableFacts {
    /// The store is not DynamoDB (its URL, shown): the table rules do not apply.
    NotDynamoDb(String),
    /// The table does not exist.
    Missing {
        /// The claims table.
        table: String,
    },
    /// The table exists.
    Found(TableShape),
}

/// An existing claims table and what the store expects of it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableShape {
    /// The claims table.
    pub table: String,
    /// The partition key the store writes (its `DynamoDbKeySchema`'s partition key).
    pub expected_key: String,
    /// The sort key the store writes, if its key schema has one (a single-table layout).
    pub expected_sort_key: Option<String>,
    /// The expiry attribute the store writes (`DynamoDbAttributes::expiration`).
    pub expected_ttl_attribute: String,
    /// The key schema: (attribute, `HASH` or `RANGE`, its type `S`/`N`/`B` if defined).
    pub key_schema: Vec<(String, String, Option<String>)>,
    /// The table's TTL setting.
    pub ttl: Ttl,
}

/// `DescribeTimeToLive`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ttl {
    /// `ENABLED`, `ENABLING`, `DISABLED` or `DISABLING`.
    pub status: String,
    /// The TTL attribute, when one is set.
    pub attribute: Option<String>,
}

impl Ttl {
    /// A TTL setting.
    pub fn new(status: impl Into<String>, attribute: Option<String>) -> Self {
        Ttl {
            status: status.into(),
            attribute,
        }
    }
}

/// Reads everything `args` points at.
pub(super) async fn gather(
    args: &DoctorArgs,
    settings: &Settings,
    store: &StoreUrl,
) -> Result<Facts, Error> {
    // Read the template first: a typo in its path should not wait for a slow endpoint.
    let from_template = match &args.template {
        Some(path) => Some(template::read(path)?),
        None => None,
    };
    if let Some(url) = &args.queue_url
        && !(url.starts_with("https://") || url.starts_with("http://"))
    {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "--queue-url {url:?} is not a queue URL \
                     (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)"
            ),
        ));
    }
    let needs_aws =
        args.queue_url.is_some() || args.function.is_some() || dynamodb_table(store).is_some();
    let config = if needs_aws {
        Some(sdk_config(settings.startup_timeout).await)
    } else {
        None
    };
    let queue = match (&args.queue_url, &config) {
        (Some(url), Some(config)) => Some(read_queue(config, url).await?),
        _ => None,
    };
    let mut function = from_flags(args);
    if let (Some(name), Some(config)) = (&args.function, &config) {
        let arn = queue.as_ref().and_then(|q| q.arn.as_deref());
        function = function.or(read_function(config, name, arn).await?);
    }
    if let Some(from_template) = from_template {
        function = function.or(from_template);
    }
    if let Some(hours) = args.stream_retention_hours {
        // DynamoDB Streams' retention is the service's; a Kinesis stream's or a Kafka topic's
        // is given (no Kinesis or Kafka API is read).
        for stream in &mut function.streams {
            if stream.source != StreamSource::DynamoDbStreams {
                stream.retention_secs = Some(Known::new(
                    hours.saturating_mul(3600),
                    "--stream-retention-hours",
                ));
            }
        }
    }
    let table = match (dynamodb_table(store), &config) {
        (Some((table, keys)), Some(config)) => read_table(config, table, keys).await?,
        _ => TableFacts::NotDynamoDb(store.to_string()),
    };
    Ok(Facts {
        queue,
        function,
        table,
        claim_ttl_secs: settings.ttl.as_secs(),
        lease_at_least_secs: settings.lease_at_least.map(|d| d.as_secs()),
        content_based_dedup_expected: args.content_based_dedup.is_some_and(|v| v.as_bool()),
        backoff: settings.backoff,
        large_message_delete: settings.large_messages && settings.large_message_delete,
        large_messages: settings.large_messages,
        large_message_buckets: settings.large_message_buckets.clone(),
        key: settings.key.clone(),
    })
}

/// The claims table of a DynamoDB store, or of a tiered store's DynamoDB tier, and its
/// configured key layout.
fn dynamodb_table(store: &StoreUrl) -> Option<(&str, Option<&DynamoDbKeySchema>)> {
    match store {
        StoreUrl::DynamoDb {
            table, key_schema, ..
        } => Some((table, key_schema.as_ref())),
        StoreUrl::Tiered { durable, .. } => dynamodb_table(durable),
        _ => None,
    }
}

/// The standard AWS configuration (region, credentials, `AWS_ENDPOINT_URL_SQS`,
/// `AWS_ENDPOINT_URL_LAMBDA`), every call bounded: the SDK has no operation timeout of its
/// own, and a silent endpoint would hang the doctor in a CI job.
async fn sdk_config(timeout: Duration) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(timeout.min(Duration::from_secs(2)))
                .operation_timeout(timeout)
                .build(),
        )
        .load()
        .await
}

fn from_flags(args: &DoctorArgs) -> FunctionFacts {
    let flag = |name: &str| format!("--{name}");
    FunctionFacts {
        timeout_secs: args
            .function_timeout
            .map(|v| Known::new(v, flag("function-timeout"))),
        report_batch_item_failures: args
            .report_batch_item_failures
            .map(|v| Known::new(v.as_bool(), flag("report-batch-item-failures"))),
        batch_size: args.batch_size.map(|v| Known::new(v, flag("batch-size"))),
        batching_window_secs: args
            .batching_window
            .map(|v| Known::new(v, flag("batching-window"))),
        ..FunctionFacts::default()
    }
}

/// A DynamoDB call of the doctor's that failed, as the store's failure: no answer (a timeout,
/// the network) is `StoreUnavailable`, an answer refusing it `StoreRejected`.
fn dynamodb_error<E, R>(op: &str, e: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let kind = match &e {
        SdkError::ServiceError(_) | SdkError::ConstructionFailure(_) => ErrorKind::StoreRejected,
        _ => ErrorKind::StoreUnavailable,
    };
    let what = sdk_error(&e);
    Error::with_source(kind, format!("DynamoDB {op} failed: {what}"), e)
}

/// An SDK error, short: a service's code and message (its raw response is noise in a report
/// line), else the cause chain (connection refused, DNS, TLS).
fn sdk_error<E, R>(e: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match e {
        SdkError::ServiceError(s) => {
            let err = s.err();
            let code = err.code().unwrap_or("an unknown error");
            match err.message() {
                Some(message) if !message.is_empty() => format!("{code}: {message}"),
                _ => code.to_owned(),
            }
        }
        SdkError::TimeoutError(_) => {
            "no answer in time (SQS_CLAIM_STARTUP_TIMEOUT_MS bounds each call)".to_owned()
        }
        other => {
            // The chain's messages only: `DisplayErrorContext` appends the whole `Debug` form.
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

async fn read_queue(config: &SdkConfig, url: &str) -> Result<QueueFacts, Error> {
    let client = sqs_claim::aws_sdk_sqs::Client::new(config);
    let out = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| {
            let why = match e.code() {
                Some("AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist") => {
                    "the queue does not exist".to_owned()
                }
                _ => sdk_error(&e),
            };
            Error::new(
                ErrorKind::Config,
                format!("cannot read queue {url} (SQS GetQueueAttributes): {why}"),
            )
        })?;
    let attrs: HashMap<QueueAttributeName, String> = out.attributes.unwrap_or_default();
    let bad = |why: String| Error::new(ErrorKind::Other, format!("queue {url}: {why}"));
    let number = |name: QueueAttributeName| -> Result<u64, Error> {
        let value = attrs
            .get(&name)
            .ok_or_else(|| bad(format!("GetQueueAttributes returned no {}", name.as_str())))?;
        value.trim().parse().map_err(|_| {
            bad(format!(
                "{} is {value:?}, not a whole number",
                name.as_str()
            ))
        })
    };
    let flag = |name: QueueAttributeName| attrs.get(&name).is_some_and(|v| v.trim() == "true");
    let arn = attrs.get(&QueueAttributeName::QueueArn).cloned();
    let name = arn
        .as_deref()
        .and_then(|a| a.rsplit(':').next())
        .or_else(|| url.trim_end_matches('/').rsplit('/').next())
        .unwrap_or(url)
        .to_owned();
    let redrive = match attrs.get(&QueueAttributeName::RedrivePolicy) {
        Some(text) if !text.trim().is_empty() => Some(parse_redrive(text).map_err(bad)?),
        _ => None,
    };
    Ok(QueueFacts {
        name,
        arn,
        visibility_timeout_secs: number(QueueAttributeName::VisibilityTimeout)?,
        retention_secs: number(QueueAttributeName::MessageRetentionPeriod)?,
        redrive,
        fifo_queue: flag(QueueAttributeName::FifoQueue),
        content_based_dedup: flag(QueueAttributeName::ContentBasedDeduplication),
    })
}

/// `{"deadLetterTargetArn": "...", "maxReceiveCount": 5}`; SQS writes the count as a number or
/// as a string, depending on how the policy was set.
fn parse_redrive(text: &str) -> Result<Redrive, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("its RedrivePolicy is not JSON ({e})"))?;
    let count = match &value["maxReceiveCount"] {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .ok_or("its RedrivePolicy has no whole maxReceiveCount")?;
    let target = value["deadLetterTargetArn"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Ok(Redrive::new(count, target))
}

async fn read_function(
    config: &SdkConfig,
    name: &str,
    queue_arn: Option<&str>,
) -> Result<FunctionFacts, Error> {
    let client = aws_sdk_lambda::Client::new(config);
    let api = "Lambda GetFunctionConfiguration";
    let mut facts = FunctionFacts::default();
    match client
        .get_function_configuration()
        .function_name(name)
        .send()
        .await
    {
        Ok(out) => {
            facts.timeout_secs = out
                .timeout()
                .and_then(|t| u64::try_from(t).ok())
                .map(|t| Known::new(t, api));
        }
        Err(e) if e.code() == Some("ResourceNotFoundException") => {
            return Err(Error::new(
                ErrorKind::Config,
                format!("Lambda function {name} does not exist ({api})"),
            ));
        }
        // The endpoint may offer no Lambda API at all (a stand-in for SQS only), or this
        // role may not read it: the rules that need it say so and how else to give it. The
        // mappings are on the same endpoint: one wait for a dark one is enough.
        Err(e) => {
            facts.notes.push(format!("{api} failed: {}", sdk_error(&e)));
            return Ok(facts);
        }
    }

    let api = "Lambda ListEventSourceMappings";
    let mut mappings = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        // Every mapping of the function (its stream mappings too): the queue's is picked
        // below.
        let page = client
            .list_event_source_mappings()
            .function_name(name)
            .set_marker(marker.take())
            .send()
            .await;
        let page = match page {
            Ok(page) => page,
            Err(e) => {
                facts.notes.push(format!("{api} failed: {}", sdk_error(&e)));
                return Ok(facts);
            }
        };
        mappings.extend(page.event_source_mappings().iter().cloned());
        match page.next_marker() {
            Some(m) if !m.is_empty() => marker = Some(m.to_owned()),
            _ => break,
        }
    }
    facts.streams = mappings
        .iter()
        .filter_map(|m| stream_facts(m, api))
        .collect();
    // The queue's SQS mapping, filtered here (some endpoints ignore an EventSourceArn filter).
    mappings.retain(|m| {
        let source = m.event_source_arn().unwrap_or_default();
        source.contains(":sqs:") && queue_arn.is_none_or(|q| source == q)
    });
    let from = match queue_arn {
        Some(q) => format!(" from {q}"),
        None => String::new(),
    };
    match mappings.as_slice() {
        // A stream consumer: its mappings are the stream rules'.
        [] if queue_arn.is_none() && !facts.streams.is_empty() => facts.notes.push(format!(
            "function {name} has no SQS event source mapping, only {} stream mapping{} (the \
             stream-* rules)",
            facts.streams.len(),
            if facts.streams.len() == 1 { "" } else { "s" }
        )),
        [] => {
            facts.no_mapping = Some(format!(
                "function {name} has no SQS event source mapping{from} ({api})"
            ))
        }
        [m] => {
            let rbif = m
                .function_response_types()
                .iter()
                .any(|t| t.as_str() == "ReportBatchItemFailures");
            facts.report_batch_item_failures = Some(Known::new(rbif, api));
            facts.batch_size = m
                .batch_size()
                .and_then(|n| u64::try_from(n).ok())
                .map(|n| Known::new(n, api));
            // Absent means 0: Lambda invokes as soon as messages arrive.
            let window = m.maximum_batching_window_in_seconds().unwrap_or(0);
            facts.batching_window_secs = u64::try_from(window).ok().map(|w| Known::new(w, api));
        }
        several => facts.notes.push(format!(
            "function {name} has {} SQS event source mappings: give --queue-url to pick one",
            several.len()
        )),
    }
    Ok(facts)
}

/// A stream mapping's facts, `None` for a mapping that is not a stream's. Lambda writes `-1`
/// for an unlimited age or retry count and omits what was never set: an absent value is
/// Lambda's default (`-1`, no bisection, no destination), and the report says so.
fn stream_facts(m: &EventSourceMappingConfiguration, api: &str) -> Option<StreamFacts> {
    let arn = m.event_source_arn().unwrap_or_default();
    let source = match StreamSource::of_arn(arn) {
        Some(source) => source,
        None if m.self_managed_event_source().is_some() => StreamSource::Kafka,
        None => return None,
    };
    let from = if arn.is_empty() {
        "a self-managed Kafka cluster".to_owned()
    } else {
        arn.to_owned()
    };
    let mut facts = StreamFacts::new(
        source,
        format!(
            "{} mapping {} from {from}",
            source.name(),
            m.uuid().unwrap_or("?")
        ),
    );
    let default = format!("{api}: not set, Lambda's default");
    let signed = |v: Option<i32>| match v {
        Some(v) => Known::new(i64::from(v), api),
        None => Known::new(-1, default.clone()),
    };
    // Kafka mappings offer none of these outside provisioned mode: unknown unless written.
    if source == StreamSource::Kafka {
        facts.maximum_record_age_secs = m
            .maximum_record_age_in_seconds()
            .map(|v| Known::new(i64::from(v), api));
        facts.maximum_retry_attempts = m
            .maximum_retry_attempts()
            .map(|v| Known::new(i64::from(v), api));
        facts.bisect_on_error = m
            .bisect_batch_on_function_error()
            .map(|v| Known::new(v, api));
    } else {
        facts.maximum_record_age_secs = Some(signed(m.maximum_record_age_in_seconds()));
        facts.maximum_retry_attempts = Some(signed(m.maximum_retry_attempts()));
        facts.bisect_on_error = Some(match m.bisect_batch_on_function_error() {
            Some(v) => Known::new(v, api),
            None => Known::new(false, default.clone()),
        });
        facts.parallelization_factor = Some(match m.parallelization_factor() {
            Some(v) => Known::new(u64::try_from(v).unwrap_or(1), api),
            None => Known::new(1, default.clone()),
        });
    }
    facts.report_batch_item_failures = Some(Known::new(
        m.function_response_types()
            .iter()
            .any(|t| t.as_str() == "ReportBatchItemFailures"),
        api,
    ));
    let destination = m
        .destination_config()
        .and_then(|d| d.on_failure())
        .and_then(|f| f.destination())
        .filter(|d| !d.is_empty())
        .map(str::to_owned);
    facts.on_failure = Some(Known::new(destination, api));
    Some(facts)
}

async fn read_table(
    config: &SdkConfig,
    table: &str,
    keys: Option<&DynamoDbKeySchema>,
) -> Result<TableFacts, Error> {
    // The store the consumer builds, so the client's bounds, the attribute names and the key
    // layout it expects are the consumer's own.
    let mut store = DynamoDbStore::from_sdk_config(config, table, Default::default());
    if let Some(keys) = keys {
        store = store.with_key_schema(keys.clone())?;
    }
    let attrs = store.attributes();
    let client = store.client();
    let described = match client.describe_table().table_name(table).send().await {
        Ok(out) => out,
        Err(e) if e.code() == Some("ResourceNotFoundException") => {
            return Ok(TableFacts::Missing {
                table: table.to_owned(),
            });
        }
        Err(e) => return Err(dynamodb_error("DescribeTable", e)),
    };
    let description = described.table();
    let types: HashMap<&str, &ScalarAttributeType> = description
        .map(|d| d.attribute_definitions())
        .unwrap_or_default()
        .iter()
        .map(|a| (a.attribute_name(), a.attribute_type()))
        .collect();
    let key_schema = description
        .map(|d| d.key_schema())
        .unwrap_or_default()
        .iter()
        .map(|k| {
            let kind = match k.key_type() {
                KeyType::Hash => "HASH".to_owned(),
                KeyType::Range => "RANGE".to_owned(),
                other => other.as_str().to_owned(),
            };
            let name = k.attribute_name();
            (
                name.to_owned(),
                kind,
                types.get(name).map(|t| t.as_str().to_owned()),
            )
        })
        .collect();
    let ttl = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| dynamodb_error("DescribeTimeToLive", e))?;
    let ttl = match ttl.time_to_live_description() {
        Some(d) => Ttl::new(
            d.time_to_live_status()
                .map_or("DISABLED", TimeToLiveStatus::as_str),
            d.attribute_name().map(str::to_owned),
        ),
        None => Ttl::new("DISABLED", None),
    };
    Ok(TableFacts::Found(TableShape {
        table: table.to_owned(),
        expected_key: store.key_schema().partition_key().name().to_owned(),
        expected_sort_key: store.key_schema().sort_key().map(|s| s.name().to_owned()),
        expected_ttl_attribute: attrs.expiration.clone(),
        key_schema,
        ttl,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redrive_policy_counts_as_a_number_or_a_string() {
        for text in [
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":5}"#,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:1:dlq","maxReceiveCount":"5"}"#,
        ] {
            assert_eq!(
                parse_redrive(text),
                Ok(Redrive::new(5, "arn:aws:sqs:us-east-1:1:dlq"))
            );
        }
        assert!(parse_redrive("{}").is_err());
        assert!(parse_redrive("not json").is_err());
    }
}
