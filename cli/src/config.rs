//! A consumer's settings, from the `SQS_CLAIM_*` environment variables, and the store URLs that
//! name a claims store. Everything here is parsing: no file, socket or clock is touched (opening
//! the store a URL names is [`AnyStore::open`]'s).
//!
//! The example app's consumer reads these; a consumer of your own may read them too, and the
//! `sqs-claim` commands read the ones they need (the store, its key layout, the namespace, the
//! Powertools interop, the TTL and lease the doctor checks) exactly as the consumer does.
//!
//! Every variable is optional; an invalid value is a startup error naming the variable (a
//! consumer that starts with a typo in its configuration would quietly do the wrong thing).
//!
//! | variable | default | meaning |
//! |----------|---------|---------|
//! | `SQS_CLAIM_STORE` | Lambda: `dynamodb:$SQS_CLAIM_TABLE`; CLI: `sqlite:.sqs-claim/claims.db` | the store URL (see [`StoreUrl`]) |
//! | `SQS_CLAIM_TABLE` | none | the DynamoDB claims table, when `SQS_CLAIM_STORE` is not set |
//! | `SQS_CLAIM_DYNAMODB_PARTITION_KEY` | `id={key}` | the claims table's partition key, `NAME=TEMPLATE` ([`DynamoDbKeySchema`]): `pk=CLAIM#{key}` puts each claim under `CLAIM#<key>` in a table shared with business items (the DynamoDB store, and the tiered store's DynamoDB tier) |
//! | `SQS_CLAIM_DYNAMODB_SORT_KEY` | none | the claims table's sort key, `NAME=TEMPLATE` (`sk=CLAIM`); needs `SQS_CLAIM_DYNAMODB_PARTITION_KEY`, and one of the two templates must carry `{key}` |
//! | `SQS_CLAIM_KEY` | the consumer's (the example app: `json:/order_id`) | the key source, [`KeySource::parse`] syntax |
//! | `SQS_CLAIM_ENVELOPE` | `none` | the envelope around each payload ([`Envelope`]): `sns` (SNS → SQS, raw delivery off), `eventbridge`, `s3` (S3 event notifications) or `none`; the key, the payload check and the handler read the payload inside, and the key source `envelope-id` the envelope's id (SNS `MessageId`, EventBridge `id`) |
//! | `SQS_CLAIM_NAMESPACE` | the consumer's (the example app: `payments`) | the key namespace |
//! | `SQS_CLAIM_TTL_SECS` | `86400` | how long a completed key is remembered |
//! | `SQS_CLAIM_LEASE_SECS` | `300` | the lease when the invocation has no deadline (the CLI) |
//! | `SQS_CLAIM_LEASE_AT_LEAST_SECS` | none | hold every claim at least this long, inside Lambda too ([`sqs_claim::Lease::at_least`]): a message whose invocation died or timed out does not run again before then; keep visibility timeout × `maxReceiveCount` above it, or the message reaches the DLQ first |
//! | `SQS_CLAIM_CONCURRENCY` | `10` | messages of a standard-queue batch run at once |
//! | `SQS_CLAIM_FIFO_MODE` | `per-group` | `per-group` or `whole-batch` |
//! | `SQS_CLAIM_STORE_UNAVAILABLE` | `fail-closed` | `fail-closed` or `fail-open` |
//! | `SQS_CLAIM_DEADLINE_MARGIN_MS` | `2000` | no message starts later than this before the deadline |
//! | `SQS_CLAIM_OUTPUT_QUEUE_URL` | none | publish a `credited` notice per credit to this queue |
//! | `SQS_CLAIM_FAILURE_QUEUE_URL` | none | send a message failing on its last allowed receive here, with its reason |
//! | `SQS_CLAIM_MAX_RECEIVES` | `5` | the receive count from which a failed message goes to the failure queue |
//! | `SQS_CLAIM_DEAD_LETTER_AT_ONCE` | `off` | failures sent to the failure queue on any receive, as permanent ([`Permanent::parse`]): a comma-separated list of failure kinds (`missing_key`, `payload_mismatch`, ...), error kinds (`bad_body`, ...), `permanent` (what the handler marks), `default` (`bad_body,missing_key,payload_mismatch,permanent`) or `off`; needs `SQS_CLAIM_FAILURE_QUEUE_URL` |
//! | `SQS_CLAIM_BACKOFF` | `off` | `on`: each message reported for retry gets its own visibility timeout ([`sqs_claim::Redelivery`]: a backoff from its receive count, just past a claim's lease for a held message), instead of the queue's; `off`: the queue's |
//! | `SQS_CLAIM_BACKOFF_FIRST_SECS` | `30` | the delay after a first failed receive (then doubled per receive, with jitter) |
//! | `SQS_CLAIM_BACKOFF_CAP_SECS` | `900` | the longest delay, at most `43200` (12 h, SQS's limit) |
//! | `SQS_CLAIM_BACKOFF_FOR` | none | fixed delays per failure kind, `KIND=SECS,...` (`store_unavailable=10,contention=5`) |
//! | `SQS_CLAIM_SOURCE_QUEUE_URL` | none | the input queue's URL for the visibility changes; unset, found once per process with `GetQueueUrl` from the records' ARN (which then needs `sqs:GetQueueUrl`) |
//! | `SQS_CLAIM_ANSWER_RESERVE_MS` | `250` | every step still in flight is cut off this long before the deadline, so the answer is sent in time |
//! | `SQS_CLAIM_HANDLER_TIMEOUT_MS` | none | the longest one handler call may take (it is cancelled past it, and its claim kept until its lease lapses) |
//! | `SQS_CLAIM_STARTUP_TIMEOUT_MS` | `5000` | how long connecting to the store and checking its tables may take at start-up; past it the binary stops with one error line |
//! | `SQS_CLAIM_METRICS_NAMESPACE` | `sqs-claim` | the CloudWatch namespace of the per-batch EMF metrics line the Lambda binary writes to stdout; `off` writes none (the CLI never writes them) |
//! | `SQS_CLAIM_POWERTOOLS_HANDLER` | none | Powertools interop ([`powertools`]): the `module.qualname` of the Powertools-Python `@idempotent_function` record handler whose table this consumer shares (`app.record_handler`); setting it (or `SQS_CLAIM_POWERTOOLS_KEY_PREFIX`) derives keys and payload hashes as that handler does |
//! | `SQS_CLAIM_POWERTOOLS_FUNCTION` | `$AWS_LAMBDA_FUNCTION_NAME`, else `test-func` | the Lambda function name in Powertools' keys, read as Powertools reads it; set it when this consumer runs under another name than the Powertools function |
//! | `SQS_CLAIM_POWERTOOLS_KEY_PREFIX` | none | Powertools 3.x `key_prefix`: replaces `FUNCTION.HANDLER` in the keys |
//! | `SQS_CLAIM_POWERTOOLS_HASH` | `md5` | Powertools' `hash_function`: `md5` or `sha256` |
//! | `SQS_CLAIM_POWERTOOLS_VALIDATION` | none | Powertools' `payload_validation_jmespath`: `body` or `json:/pointer` (`powertools_json(body).a.b` is `json:/a/b`, `powertools_json(body)` is `json:`) |

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(doc)]
use crate::AnyStore;
use sqs_claim::powertools::{HashFunction, PowertoolsFormat, RecordPayload};
use sqs_claim::processor::Permanent;
use sqs_claim::store::dynamodb::{DynamoDbAttributes, DynamoDbKeySchema};
use sqs_claim::{
    Backoff, Envelope, Error, ErrorKind, FailureKind, FifoMode, KeySource, StoreUnavailable,
};

/// The variable of the DynamoDB claims table's partition key (`NAME=TEMPLATE`).
pub const PARTITION_KEY_VAR: &str = "SQS_CLAIM_DYNAMODB_PARTITION_KEY";

/// The variable of the DynamoDB claims table's sort key (`NAME=TEMPLATE`).
pub const SORT_KEY_VAR: &str = "SQS_CLAIM_DYNAMODB_SORT_KEY";

/// The variable that turns the Powertools interop on: the decorated record handler's
/// `module.qualname`.
pub const POWERTOOLS_HANDLER_VAR: &str = "SQS_CLAIM_POWERTOOLS_HANDLER";

/// The variable of the Lambda function name in Powertools' keys.
pub const POWERTOOLS_FUNCTION_VAR: &str = "SQS_CLAIM_POWERTOOLS_FUNCTION";

/// The variable of Powertools' `key_prefix`.
pub const POWERTOOLS_KEY_PREFIX_VAR: &str = "SQS_CLAIM_POWERTOOLS_KEY_PREFIX";

/// The variable of Powertools' `hash_function`.
pub const POWERTOOLS_HASH_VAR: &str = "SQS_CLAIM_POWERTOOLS_HASH";

/// The variable of Powertools' `payload_validation_jmespath`.
pub const POWERTOOLS_VALIDATION_VAR: &str = "SQS_CLAIM_POWERTOOLS_VALIDATION";

/// How long opening the store and its start-up check ([`AnyStore::open_checked`]) may take by
/// default.
/// A healthy store answers in milliseconds; five seconds leaves room for a cold TLS handshake
/// and a slow DNS, and still fails a Lambda init (10 s limit) with a clear line instead of a
/// timeout.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The CloudWatch namespace of the consumer's metrics when `SQS_CLAIM_METRICS_NAMESPACE` is
/// unset.
pub const DEFAULT_METRICS_NAMESPACE: &str = "sqs-claim";

/// The CLI's store when none is configured: a file under the current directory.
pub const DEFAULT_CLI_STORE: &str = ".sqs-claim/claims.db";

/// A consumer's settings. [`Settings::default`] is what an empty environment gives.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// `SQS_CLAIM_STORE`.
    pub store: Option<StoreUrl>,
    /// `SQS_CLAIM_TABLE`.
    pub table: Option<String>,
    /// `SQS_CLAIM_DYNAMODB_PARTITION_KEY` and `SQS_CLAIM_DYNAMODB_SORT_KEY`, checked
    /// ([`key_layout`]); `None` for the store's default (`id={key}`).
    pub dynamodb_keys: Option<DynamoDbKeySchema>,
    /// `SQS_CLAIM_KEY`; unset, the consumer's own default.
    pub key: Option<KeySource>,
    /// `SQS_CLAIM_ENVELOPE`.
    pub envelope: Envelope,
    /// `SQS_CLAIM_NAMESPACE`; unset, the consumer's own default.
    pub namespace: Option<String>,
    /// `SQS_CLAIM_TTL_SECS`.
    pub ttl: Duration,
    /// `SQS_CLAIM_LEASE_SECS`.
    pub lease: Duration,
    /// `SQS_CLAIM_LEASE_AT_LEAST_SECS`: unset, claims are leased until the deadline.
    pub lease_at_least: Option<Duration>,
    /// `SQS_CLAIM_CONCURRENCY`; unset, what the store carries
    /// ([`Capabilities::max_in_flight`](sqs_claim::store::Capabilities::max_in_flight)).
    pub concurrency: Option<usize>,
    /// `SQS_CLAIM_WARM_CACHE`: entries of the in-process cache of completed keys
    /// ([`sqs_claim::store::CachedStore`]) in front of the store; `None` (unset or 0): no cache.
    pub warm_cache: Option<usize>,
    /// `SQS_CLAIM_FIFO_MODE`.
    pub fifo: FifoMode,
    /// `SQS_CLAIM_STORE_UNAVAILABLE`.
    pub store_unavailable: StoreUnavailable,
    /// `SQS_CLAIM_DEADLINE_MARGIN_MS`.
    pub deadline_margin: Duration,
    /// `SQS_CLAIM_OUTPUT_QUEUE_URL`.
    pub output_queue_url: Option<String>,
    /// `SQS_CLAIM_STARTUP_TIMEOUT_MS`.
    pub startup_timeout: Duration,
    /// `SQS_CLAIM_ANSWER_RESERVE_MS`.
    pub answer_reserve: Duration,
    /// `SQS_CLAIM_HANDLER_TIMEOUT_MS`.
    pub handler_timeout: Option<Duration>,
    /// `SQS_CLAIM_FAILURE_QUEUE_URL`.
    pub failure_queue_url: Option<String>,
    /// `SQS_CLAIM_MAX_RECEIVES`.
    pub max_receives: u32,
    /// `SQS_CLAIM_METRICS_NAMESPACE`; `None` for `off`.
    pub metrics_namespace: Option<String>,
    /// `SQS_CLAIM_DEAD_LETTER_AT_ONCE`: which failures go to the failure queue on any receive.
    pub dead_letter_at_once: Permanent,
    /// `SQS_CLAIM_BACKOFF`, `SQS_CLAIM_BACKOFF_FIRST_SECS` and `SQS_CLAIM_BACKOFF_CAP_SECS`:
    /// the backoff of messages reported for retry; `None` (`off`) for the queue's visibility
    /// timeout.
    pub backoff: Option<Backoff>,
    /// `SQS_CLAIM_BACKOFF_FOR`: fixed delays per failure kind.
    pub backoff_for: Vec<(FailureKind, Backoff)>,
    /// `SQS_CLAIM_SOURCE_QUEUE_URL`.
    pub source_queue_url: Option<String>,
    /// The `SQS_CLAIM_POWERTOOLS_*` variables ([`powertools`]): keys and payload hashes as a
    /// Powertools-Python record handler derives them; `None` for sqs-claim's own
    /// (`namespace#key`).
    pub powertools: Option<PowertoolsFormat>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            store: None,
            table: None,
            dynamodb_keys: None,
            key: None,
            envelope: Envelope::None,
            namespace: None,
            ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(300),
            lease_at_least: None,
            concurrency: None,
            warm_cache: None,
            fifo: FifoMode::PerGroup,
            store_unavailable: StoreUnavailable::FailClosed,
            deadline_margin: Duration::from_millis(2000),
            output_queue_url: None,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            answer_reserve: Duration::from_millis(250),
            handler_timeout: None,
            failure_queue_url: None,
            max_receives: 5,
            metrics_namespace: Some(DEFAULT_METRICS_NAMESPACE.into()),
            dead_letter_at_once: Permanent::none(),
            backoff: None,
            backoff_for: Vec::new(),
            source_queue_url: None,
            powertools: None,
        }
    }
}

fn invalid(var: &str, why: impl fmt::Display) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("environment variable {var} is invalid: {why}"),
    )
}

fn whole_number(var: &str, value: &str, unit: &str, min: u64) -> Result<u64, Error> {
    match value.trim().parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(invalid(
            var,
            format!("{value:?} is not a whole number of {unit} of at least {min}"),
        )),
    }
}

/// `SQS_CLAIM_BACKOFF` and its two durations.
fn backoff(get: &impl Fn(&str) -> Option<String>) -> Result<Option<Backoff>, Error> {
    const VAR: &str = "SQS_CLAIM_BACKOFF";
    let on = match get(VAR).as_deref().map(str::trim) {
        None | Some("off") => false,
        Some("on") => true,
        Some(other) => return Err(invalid(VAR, format!("{other:?} is not `on` or `off`"))),
    };
    let default = Backoff::default();
    let secs = |var: &str, default: Duration| -> Result<Duration, Error> {
        match get(var) {
            None => Ok(default),
            Some(v) => Ok(Duration::from_secs(whole_number(var, &v, "seconds", 1)?)),
        }
    };
    let first = secs("SQS_CLAIM_BACKOFF_FIRST_SECS", default.first())?;
    let cap = secs("SQS_CLAIM_BACKOFF_CAP_SECS", default.cap())?;
    if cap > Backoff::MAX {
        return Err(invalid(
            "SQS_CLAIM_BACKOFF_CAP_SECS",
            format!("{} s is above SQS's limit of 43200 s (12 h)", cap.as_secs()),
        ));
    }
    if first > cap {
        return Err(invalid(
            "SQS_CLAIM_BACKOFF_FIRST_SECS",
            format!(
                "{} s is above SQS_CLAIM_BACKOFF_CAP_SECS ({} s)",
                first.as_secs(),
                cap.as_secs()
            ),
        ));
    }
    Ok(on.then(|| Backoff::exponential(first, cap)))
}

/// `SQS_CLAIM_BACKOFF_FOR`: `KIND=SECS,...`.
fn backoff_for(v: &str) -> Result<Vec<(FailureKind, Backoff)>, Error> {
    const VAR: &str = "SQS_CLAIM_BACKOFF_FOR";
    let mut out: Vec<(FailureKind, Backoff)> = Vec::new();
    for pair in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((kind, secs)) = pair.split_once('=') else {
            return Err(invalid(VAR, format!("{pair:?} is not KIND=SECS")));
        };
        let kind: FailureKind = kind
            .trim()
            .parse()
            .map_err(|e: Error| invalid(VAR, e.message()))?;
        let secs = whole_number(VAR, secs, "seconds", 0)?;
        if secs > Backoff::MAX.as_secs() {
            return Err(invalid(
                VAR,
                format!("{pair:?}: above SQS's limit of 43200 s (12 h)"),
            ));
        }
        out.retain(|(k, _)| *k != kind);
        out.push((kind, Backoff::fixed(Duration::from_secs(secs))));
    }
    Ok(out)
}

impl Settings {
    /// Reads every `SQS_CLAIM_*` variable of the process environment. An empty value counts as
    /// unset.
    pub fn from_env() -> Result<Settings, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (a variable's value by name), for tests and for
    /// configuration that does not come from the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, Error> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let mut s = Settings::default();
        if let Some(v) = get("SQS_CLAIM_STORE") {
            s.store =
                Some(StoreUrl::parse(&v).map_err(|e| invalid("SQS_CLAIM_STORE", e.message()))?);
        }
        s.table = get("SQS_CLAIM_TABLE").map(|v| v.trim().to_owned());
        let (partition, sort) = (get(PARTITION_KEY_VAR), get(SORT_KEY_VAR));
        let (partition_var, sort_var) = (
            format!("environment variable {PARTITION_KEY_VAR}"),
            format!("environment variable {SORT_KEY_VAR}"),
        );
        s.dynamodb_keys = key_layout(
            partition.as_deref().map(|v| (partition_var.as_str(), v)),
            sort.as_deref().map(|v| (sort_var.as_str(), v)),
        )?;
        if let Some(v) = get("SQS_CLAIM_KEY") {
            s.key = Some(KeySource::parse(&v).map_err(|e| invalid("SQS_CLAIM_KEY", e.message()))?);
        }
        if let Some(v) = get("SQS_CLAIM_ENVELOPE") {
            s.envelope =
                Envelope::parse(&v).map_err(|e| invalid("SQS_CLAIM_ENVELOPE", e.message()))?;
        }
        if s.key == Some(KeySource::EnvelopeId) && !s.envelope.has_id() {
            // Every message would lack its key: refuse to start instead.
            return Err(invalid(
                "SQS_CLAIM_KEY",
                format!(
                    "envelope-id needs SQS_CLAIM_ENVELOPE=sns or eventbridge (it is {}): \
                     the {} envelope has no id",
                    s.envelope, s.envelope
                ),
            ));
        }
        if let Some(v) = get("SQS_CLAIM_NAMESPACE") {
            s.namespace = Some(v.trim().to_owned());
        }
        if let Some(v) = get("SQS_CLAIM_TTL_SECS") {
            s.ttl = Duration::from_secs(whole_number("SQS_CLAIM_TTL_SECS", &v, "seconds", 1)?);
        }
        if let Some(v) = get("SQS_CLAIM_LEASE_SECS") {
            s.lease = Duration::from_secs(whole_number("SQS_CLAIM_LEASE_SECS", &v, "seconds", 1)?);
        }
        if let Some(v) = get("SQS_CLAIM_LEASE_AT_LEAST_SECS") {
            s.lease_at_least = Some(Duration::from_secs(whole_number(
                "SQS_CLAIM_LEASE_AT_LEAST_SECS",
                &v,
                "seconds",
                1,
            )?));
        }
        if let Some(v) = get("SQS_CLAIM_CONCURRENCY") {
            let n = whole_number("SQS_CLAIM_CONCURRENCY", &v, "messages", 1)?;
            s.concurrency =
                Some(usize::try_from(n).map_err(|_| {
                    invalid("SQS_CLAIM_CONCURRENCY", format!("{v:?} is too large"))
                })?);
        }
        if let Some(v) = get("SQS_CLAIM_WARM_CACHE") {
            let n = whole_number("SQS_CLAIM_WARM_CACHE", &v, "entries", 0)?;
            let n = usize::try_from(n)
                .map_err(|_| invalid("SQS_CLAIM_WARM_CACHE", format!("{v:?} is too large")))?;
            s.warm_cache = (n > 0).then_some(n);
        }
        if let Some(v) = get("SQS_CLAIM_FIFO_MODE") {
            s.fifo = match v.trim() {
                "per-group" => FifoMode::PerGroup,
                "whole-batch" => FifoMode::WholeBatch,
                other => {
                    return Err(invalid(
                        "SQS_CLAIM_FIFO_MODE",
                        format!("{other:?}: expected per-group or whole-batch"),
                    ));
                }
            };
        }
        if let Some(v) = get("SQS_CLAIM_STORE_UNAVAILABLE") {
            s.store_unavailable = match v.trim() {
                "fail-closed" => StoreUnavailable::FailClosed,
                "fail-open" => StoreUnavailable::FailOpen,
                other => {
                    return Err(invalid(
                        "SQS_CLAIM_STORE_UNAVAILABLE",
                        format!("{other:?}: expected fail-closed or fail-open"),
                    ));
                }
            };
        }
        if let Some(v) = get("SQS_CLAIM_DEADLINE_MARGIN_MS") {
            s.deadline_margin = Duration::from_millis(whole_number(
                "SQS_CLAIM_DEADLINE_MARGIN_MS",
                &v,
                "milliseconds",
                0,
            )?);
        }
        if let Some(v) = get("SQS_CLAIM_ANSWER_RESERVE_MS") {
            s.answer_reserve = Duration::from_millis(whole_number(
                "SQS_CLAIM_ANSWER_RESERVE_MS",
                &v,
                "milliseconds",
                0,
            )?);
        }
        if let Some(v) = get("SQS_CLAIM_HANDLER_TIMEOUT_MS") {
            s.handler_timeout = Some(Duration::from_millis(whole_number(
                "SQS_CLAIM_HANDLER_TIMEOUT_MS",
                &v,
                "milliseconds",
                1,
            )?));
        }
        if let Some(v) = get("SQS_CLAIM_STARTUP_TIMEOUT_MS") {
            s.startup_timeout = Duration::from_millis(whole_number(
                "SQS_CLAIM_STARTUP_TIMEOUT_MS",
                &v,
                "milliseconds",
                1,
            )?);
        }
        if let Some(v) = get("SQS_CLAIM_METRICS_NAMESPACE") {
            let v = v.trim();
            s.metrics_namespace = if v.eq_ignore_ascii_case("off") {
                None
            } else {
                // Checked now, so a namespace CloudWatch would refuse stops the start.
                sqs_claim::metrics::Emf::new(v)
                    .map_err(|e| invalid("SQS_CLAIM_METRICS_NAMESPACE", e.message()))?;
                Some(v.to_owned())
            };
        }
        s.output_queue_url = get("SQS_CLAIM_OUTPUT_QUEUE_URL").map(|v| v.trim().to_owned());
        s.failure_queue_url = get("SQS_CLAIM_FAILURE_QUEUE_URL").map(|v| v.trim().to_owned());
        s.source_queue_url = get("SQS_CLAIM_SOURCE_QUEUE_URL").map(|v| v.trim().to_owned());
        for (var, url) in [
            ("SQS_CLAIM_OUTPUT_QUEUE_URL", &s.output_queue_url),
            ("SQS_CLAIM_FAILURE_QUEUE_URL", &s.failure_queue_url),
            ("SQS_CLAIM_SOURCE_QUEUE_URL", &s.source_queue_url),
        ] {
            if let Some(url) = url
                && !(url.starts_with("https://") || url.starts_with("http://"))
            {
                return Err(invalid(
                    var,
                    "expected a queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)",
                ));
            }
        }
        if let Some(v) = get("SQS_CLAIM_MAX_RECEIVES") {
            let n = whole_number("SQS_CLAIM_MAX_RECEIVES", &v, "receives", 1)?;
            s.max_receives = u32::try_from(n)
                .map_err(|_| invalid("SQS_CLAIM_MAX_RECEIVES", format!("{v:?} is too large")))?;
        }
        if let Some(v) = get("SQS_CLAIM_DEAD_LETTER_AT_ONCE") {
            s.dead_letter_at_once = Permanent::parse(&v)
                .map_err(|e| invalid("SQS_CLAIM_DEAD_LETTER_AT_ONCE", e.message()))?;
            if !s.dead_letter_at_once.is_none() && s.failure_queue_url.is_none() {
                return Err(invalid(
                    "SQS_CLAIM_DEAD_LETTER_AT_ONCE",
                    "it sends to the failure queue: set SQS_CLAIM_FAILURE_QUEUE_URL too",
                ));
            }
        }
        s.backoff = backoff(&get)?;
        if let Some(v) = get("SQS_CLAIM_BACKOFF_FOR") {
            s.backoff_for = backoff_for(&v)?;
        }
        // The function name unfiltered: Powertools keeps an empty AWS_LAMBDA_FUNCTION_NAME.
        s.powertools = powertools(&get, lookup("AWS_LAMBDA_FUNCTION_NAME"))?;
        Ok(s)
    }

    /// The store the `sqs-claim` CLI uses: [`Settings::store`], else
    /// `dynamodb:`[`Settings::table`], else the SQLite file [`DEFAULT_CLI_STORE`] (created on
    /// demand, so a second run of the same event finds every message already done); with
    /// [`Settings::dynamodb_keys`] applied to either's DynamoDB table.
    pub fn cli_store(&self) -> Result<StoreUrl, Error> {
        let url = match (&self.store, &self.table) {
            (Some(url), _) => url.clone(),
            (None, Some(table)) => StoreUrl::parse(&format!("dynamodb:{table}"))?,
            (None, None) => StoreUrl::Sqlite(PathBuf::from(DEFAULT_CLI_STORE)),
        };
        Ok(url.with_key_schema(self.dynamodb_keys.clone()))
    }

    /// The store the Lambda consumer uses: `SQS_CLAIM_STORE`, else `dynamodb:$SQS_CLAIM_TABLE`
    /// (with the DynamoDB key layout applied to either's DynamoDB table).
    pub fn lambda_store(&self) -> Result<StoreUrl, Error> {
        let url = match (&self.store, &self.table) {
            (Some(url), _) => url.clone(),
            (None, Some(table)) => StoreUrl::parse(&format!("dynamodb:{table}"))
                .map_err(|e| invalid("SQS_CLAIM_TABLE", e.message()))?,
            (None, None) => {
                return Err(Error::new(
                    ErrorKind::Config,
                    "no store configured: set SQS_CLAIM_TABLE to the DynamoDB claims table \
                     (or SQS_CLAIM_STORE to a store URL)",
                ));
            }
        };
        Ok(url.with_key_schema(self.dynamodb_keys.clone()))
    }
}

/// The Powertools interop from the `SQS_CLAIM_POWERTOOLS_*` variables (`get` reads one, an
/// empty value counting as unset; `aws_function_name` is `AWS_LAMBDA_FUNCTION_NAME` as
/// Lambda sets it). No I/O.
///
/// Off (`None`) unless `SQS_CLAIM_POWERTOOLS_HANDLER` or `SQS_CLAIM_POWERTOOLS_KEY_PREFIX` is
/// set. On, the key is `{FUNCTION}.{HANDLER}#{hash}` as Powertools writes it
/// ([`PowertoolsFormat::new`]), the function name being `SQS_CLAIM_POWERTOOLS_FUNCTION`, else
/// `AWS_LAMBDA_FUNCTION_NAME` (an empty value kept, as Python's `os.getenv` returns it), else
/// `test-func`: what [`PowertoolsFormat::from_env`] reads, through `get` rather than the
/// process environment. A key prefix replaces `{FUNCTION}.{HANDLER}`, as Powertools'
/// `key_prefix` does. Fails with [`ErrorKind::Config`] naming the variable for a handler that
/// is not `module.qualname`, a hash other than `md5` or `sha256`, a validation other than
/// `body` or `json:/pointer`, and for any `SQS_CLAIM_POWERTOOLS_*` set while the interop is
/// off (a typo in the switch would otherwise silently keep sqs-claim's own keys).
///
/// ```
/// use sqs_claim_cli::config::powertools;
///
/// let env = |name: &str| match name {
///     "SQS_CLAIM_POWERTOOLS_HANDLER" => Some("app.record_handler".to_owned()),
///     _ => None,
/// };
/// let format = powertools(&env, Some("orders-fn".into())).unwrap().unwrap();
/// assert_eq!(format.prefix(), "orders-fn.app.record_handler");
/// assert!(powertools(&|_: &str| None, None).unwrap().is_none());
/// ```
pub fn powertools(
    get: &dyn Fn(&str) -> Option<String>,
    aws_function_name: Option<String>,
) -> Result<Option<PowertoolsFormat>, Error> {
    let get = |name: &str| {
        get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let handler = get(POWERTOOLS_HANDLER_VAR);
    let key_prefix = get(POWERTOOLS_KEY_PREFIX_VAR);
    if handler.is_none() && key_prefix.is_none() {
        for var in [
            POWERTOOLS_FUNCTION_VAR,
            POWERTOOLS_HASH_VAR,
            POWERTOOLS_VALIDATION_VAR,
        ] {
            if get(var).is_some() {
                return Err(invalid(
                    var,
                    format!(
                        "it is set but the Powertools interop is off: set \
                         {POWERTOOLS_HANDLER_VAR} (the record handler's module.qualname, e.g. \
                         app.record_handler) or {POWERTOOLS_KEY_PREFIX_VAR}"
                    ),
                ));
            }
        }
        return Ok(None);
    }
    let mut format = match (key_prefix, handler) {
        (Some(prefix), _) => PowertoolsFormat::with_key_prefix(prefix),
        (None, Some(handler)) => {
            // `{module}.{qualname}`: a module and a name, nothing that would end the prefix
            // (`#`) or could not be in a Python name.
            let ok = handler.contains('.')
                && !handler.starts_with('.')
                && !handler.ends_with('.')
                && !handler.contains(|c: char| c == '#' || c.is_whitespace());
            if !ok {
                return Err(invalid(
                    POWERTOOLS_HANDLER_VAR,
                    format!(
                        "{handler:?} is not the decorated function's module.qualname (e.g. \
                         app.record_handler for record_handler in app.py)"
                    ),
                ));
            }
            let function = get(POWERTOOLS_FUNCTION_VAR)
                .or(aws_function_name)
                .unwrap_or_else(|| sqs_claim::powertools::DEFAULT_FUNCTION_NAME.to_owned());
            PowertoolsFormat::new(function, handler)
        }
        (None, None) => return Ok(None),
    };
    if let Some(v) = get(POWERTOOLS_HASH_VAR) {
        format = format.with_hash_function(match v.as_str() {
            "md5" => HashFunction::Md5,
            "sha256" => HashFunction::Sha256,
            other => {
                return Err(invalid(
                    POWERTOOLS_HASH_VAR,
                    format!("{other:?}: expected md5 or sha256 (Powertools' hash_function)"),
                ));
            }
        });
    }
    if let Some(v) = get(POWERTOOLS_VALIDATION_VAR) {
        let payload = match v.as_str() {
            "body" => RecordPayload::Body,
            other => match other.strip_prefix("json:") {
                Some(ptr) if ptr.is_empty() || ptr.starts_with('/') => {
                    RecordPayload::BodyJson(ptr.to_owned())
                }
                _ => {
                    return Err(invalid(
                        POWERTOOLS_VALIDATION_VAR,
                        format!(
                            "{other:?}: expected body or json:/pointer (json:/amount for \
                             powertools_json(body).amount, json: for powertools_json(body))"
                        ),
                    ));
                }
            },
        };
        format = format.with_record_validation(payload);
    }
    Ok(Some(format))
}

/// The DynamoDB key layout from its two settings, each given as (where it came from, for the
/// error: `environment variable ...` or a flag; its `NAME=TEMPLATE` value). No I/O.
///
/// `None` when neither is given (the store's default, `id={key}`). A sort key needs a
/// partition key. Fails with [`ErrorKind::Config`], naming where the bad value came from, when
/// a value is not `NAME=TEMPLATE`, when the layout is invalid
/// ([`DynamoDbKeySchema::validate`]: an empty name or template, no `{key}` in either
/// template, ...), or when a key has the name of one of the record's other attributes.
///
/// ```
/// use sqs_claim_cli::config::key_layout;
///
/// let partition = Some(("--partition-key", "pk=CLAIM#{key}"));
/// let layout = key_layout(partition, Some(("--sort-key", "sk=CLAIM")))
///     .expect("valid")
///     .expect("given");
/// assert_eq!(layout.sort_key().map(|k| k.name()), Some("sk"));
/// assert!(key_layout(Some(("--partition-key", "pk=CLAIM")), None).is_err()); // no {key}
/// ```
pub fn key_layout(
    partition: Option<(&str, &str)>,
    sort: Option<(&str, &str)>,
) -> Result<Option<DynamoDbKeySchema>, Error> {
    let config = |message: String| Error::new(ErrorKind::Config, message);
    let split = |(source, value): (&str, &str)| {
        let value = value.trim();
        match value.split_once('=') {
            Some((name, template)) => Ok((name.trim().to_owned(), template.trim().to_owned())),
            None => Err(config(format!(
                "{source} is invalid: {value:?} is not NAME=TEMPLATE (e.g. pk=CLAIM#{{key}})"
            ))),
        }
    };
    let schema = match (partition.map(split).transpose()?, sort) {
        (None, None) => return Ok(None),
        (None, Some((source, _))) => {
            return Err(config(format!(
                "{source} is invalid: a sort key needs a partition key too \
                 ({PARTITION_KEY_VAR} or --partition-key, e.g. pk=CLAIM#{{key}})"
            )));
        }
        (Some((name, template)), sort) => {
            let schema = DynamoDbKeySchema::partition(name, template);
            match sort.map(split).transpose()? {
                Some((name, template)) => schema.with_sort(name, template),
                None => schema,
            }
        }
    };
    let sources = [partition, sort]
        .into_iter()
        .flatten()
        .map(|(source, _)| source)
        .collect::<Vec<_>>();
    let invalid = |why: &str| {
        let verb = if sources.len() > 1 { "are" } else { "is" };
        config(format!("{} {verb} invalid: {why}", sources.join(" and ")))
    };
    schema.validate().map_err(|e| invalid(e.message()))?;
    // The store's own check (`DynamoDbStore::with_key_schema`), made here so a clash stops the
    // start before any client is built.
    let attrs = DynamoDbAttributes::default();
    let others = [
        (&attrs.expiration, "expiry"),
        (&attrs.lease, "lease"),
        (&attrs.status, "status"),
        (&attrs.fingerprint, "fingerprint"),
        (&attrs.token, "token"),
        (&attrs.data, "response"),
    ];
    for key in std::iter::once(schema.partition_key()).chain(schema.sort_key()) {
        if let Some((_, what)) = others.iter().find(|(name, _)| *name == key.name()) {
            return Err(invalid(&format!(
                "the key attribute {:?} is also the record's {what} attribute: name the key \
                 otherwise",
                key.name()
            )));
        }
    }
    Ok(Some(schema))
}

/// A key layout in words, as a store's description shows it: `keys: pk=CLAIM#{key}, sk=CLAIM`.
pub fn describe_key_layout(schema: &DynamoDbKeySchema) -> String {
    let (partition, sort) = key_layout_values(schema);
    match sort {
        Some(sort) => format!("keys: {partition}, {sort}"),
        None => format!("keys: {partition}"),
    }
}

/// A key layout as its settings' values: `(NAME=TEMPLATE of the partition key, of the sort
/// key)`, as [`key_layout`] reads them.
pub fn key_layout_values(schema: &DynamoDbKeySchema) -> (String, Option<String>) {
    let value = |k: &sqs_claim::store::dynamodb::DynamoDbKeyAttribute| {
        format!("{}={}", k.name(), k.template())
    };
    (value(schema.partition_key()), schema.sort_key().map(value))
}

/// Where a consumer keeps its claims.
///
/// | URL | store |
/// |-----|-------|
/// | `memory:` | in-process, gone when the process exits |
/// | `sqlite:PATH` | an SQLite file (created if missing, with its directory) |
/// | `dynamodb:TABLE` | DynamoDB. Endpoint, region and credentials come from the standard AWS environment (`AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local) |
/// | `redis://HOST[:PORT][/DB][?prefix=P]`, `rediss://...` (TLS) | Redis; keys under the prefix `P` (default `sqs-claim:`) |
/// | `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, `postgresql://...` | PostgreSQL; claims in `sqs_claim_processed_events` |
/// | `tiered:REDIS_URL\|DURABLE_URL` | a Redis cache of completed keys in front of any store above |
///
/// Adding a store: a variant here, an arm in [`StoreUrl::parse`], and a variant of
/// [`AnyStore`] (with its arm in `AnyStore::open` and in the dispatch macro there).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory:`.
    Memory,
    /// `sqlite:PATH`.
    Sqlite(PathBuf),
    /// `dynamodb:TABLE`.
    DynamoDb {
        /// The claims table.
        table: String,
        /// The claims table's key layout; `None` for the store's default (`id={key}`).
        key_schema: Option<DynamoDbKeySchema>,
    },
    /// `redis://...` or `rediss://...`.
    Redis(ServerUrl),
    /// `postgres://...` or `postgresql://...`.
    Postgres(ServerUrl),
    /// `tiered:REDIS_URL|DURABLE_URL`.
    Tiered {
        /// The Redis cache.
        cache: ServerUrl,
        /// The durable store (not itself tiered).
        durable: Box<StoreUrl>,
    },
}

/// A server URL that may carry a password: `Debug` and `Display` show it with the password
/// replaced by `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerUrl(String);

impl ServerUrl {
    /// The URL, password included, to connect with.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((scheme, rest)) = self.0.split_once("://") else {
            return f.write_str(&self.0);
        };
        match rest.rsplit_once('@') {
            Some((userinfo, host)) if userinfo.contains(':') => {
                let user = userinfo.split(':').next().unwrap_or("");
                write!(f, "{scheme}://{user}:***@{host}")
            }
            _ => f.write_str(&self.0),
        }
    }
}

impl fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerUrl({self})")
    }
}

impl StoreUrl {
    /// Parses a store URL. Errors name the scheme, never the rest of the URL (a database URL
    /// can carry a password).
    pub fn parse(url: &str) -> Result<StoreUrl, Error> {
        let url = url.trim();
        let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
        let bad = |why: String| Error::new(ErrorKind::Config, why);
        match scheme.to_ascii_lowercase().as_str() {
            "memory" => Ok(StoreUrl::Memory),
            "sqlite" => {
                // Accept sqlite:PATH and the URL-ish sqlite://PATH (sqlite:///abs/path).
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(bad(
                        "store URL sqlite: needs a path, e.g. sqlite:claims.db".into()
                    ));
                }
                Ok(StoreUrl::Sqlite(PathBuf::from(path)))
            }
            "dynamodb" => {
                let table = rest.strip_prefix("//").unwrap_or(rest);
                check_table_name(table)?;
                Ok(StoreUrl::DynamoDb {
                    table: table.to_owned(),
                    key_schema: None,
                })
            }
            "redis" | "rediss" => Ok(StoreUrl::Redis(ServerUrl(url.to_owned()))),
            "postgres" | "postgresql" => Ok(StoreUrl::Postgres(ServerUrl(url.to_owned()))),
            "tiered" => {
                let usage = "store URL tiered: expects tiered:REDIS_URL|DURABLE_URL, e.g. \
                             tiered:redis://127.0.0.1:6379/|postgres://postgres@127.0.0.1/test";
                let (cache, durable) = rest.split_once('|').ok_or_else(|| bad(usage.into()))?;
                if !matches!(StoreUrl::parse(cache)?, StoreUrl::Redis(_)) {
                    return Err(bad(format!("{usage} (the cache must be a Redis URL)")));
                }
                let durable = StoreUrl::parse(durable)?;
                if matches!(durable, StoreUrl::Tiered { .. }) {
                    return Err(bad(format!("{usage} (tiers do not nest)")));
                }
                Ok(StoreUrl::Tiered {
                    cache: ServerUrl(cache.trim().to_owned()),
                    durable: Box::new(durable),
                })
            }
            _ => Err(bad(format!(
                "unknown store URL scheme {scheme:?}: expected memory:, sqlite:PATH, \
                 dynamodb:TABLE, redis://, rediss://, postgres://, postgresql:// or tiered:"
            ))),
        }
    }

    /// Sets the DynamoDB claims table's key layout (`None` keeps it), of a `dynamodb:` store
    /// or of a tiered store's DynamoDB tier. Other stores ignore it: they have no key layout.
    pub fn with_key_schema(self, schema: Option<DynamoDbKeySchema>) -> StoreUrl {
        match (self, schema) {
            (StoreUrl::DynamoDb { table, .. }, Some(schema)) => StoreUrl::DynamoDb {
                table,
                key_schema: Some(schema),
            },
            (StoreUrl::Tiered { cache, durable }, schema @ Some(_)) => StoreUrl::Tiered {
                cache,
                durable: Box::new(durable.with_key_schema(schema)),
            },
            (url, _) => url,
        }
    }
}

fn check_table_name(table: &str) -> Result<(), Error> {
    let ok = (3..=255).contains(&table.len())
        && table
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Config,
            format!(
                "store URL dynamodb:{table} does not name a valid DynamoDB table (3 to 255 \
                 characters among a-z A-Z 0-9 _ - .)"
            ),
        ))
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Memory => f.write_str("memory:"),
            StoreUrl::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            StoreUrl::DynamoDb { table, key_schema } => {
                write!(f, "dynamodb:{table}")?;
                if let Some(schema) = key_schema {
                    write!(f, " ({})", describe_key_layout(schema))?;
                }
                Ok(())
            }
            StoreUrl::Redis(url) | StoreUrl::Postgres(url) => write!(f, "{url}"),
            StoreUrl::Tiered { cache, durable } => write!(f, "tiered:{cache}|{durable}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, Error> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let s = settings(&[]).expect("empty env is valid");
        assert_eq!(s.key, None);
        assert_eq!(s.namespace, None);
        assert_eq!(
            s.metrics_namespace.as_deref(),
            Some(DEFAULT_METRICS_NAMESPACE)
        );
        assert!(s.lambda_store().is_err(), "Lambda needs a table or a store");
        let s = settings(&[("SQS_CLAIM_TABLE", "claims")]).expect("valid");
        assert_eq!(
            s.lambda_store().expect("dynamodb"),
            StoreUrl::DynamoDb {
                table: "claims".into(),
                key_schema: None,
            }
        );
    }

    #[test]
    fn every_variable_is_read() {
        let s = settings(&[
            ("SQS_CLAIM_STORE", "sqlite:/tmp/x.db"),
            ("SQS_CLAIM_KEY", "message-id"),
            ("SQS_CLAIM_ENVELOPE", "eventbridge"),
            ("SQS_CLAIM_NAMESPACE", "ns"),
            ("SQS_CLAIM_TTL_SECS", "60"),
            ("SQS_CLAIM_LEASE_SECS", "30"),
            ("SQS_CLAIM_CONCURRENCY", "3"),
            ("SQS_CLAIM_WARM_CACHE", "500"),
            ("SQS_CLAIM_FIFO_MODE", "whole-batch"),
            ("SQS_CLAIM_STORE_UNAVAILABLE", "fail-open"),
            ("SQS_CLAIM_DEADLINE_MARGIN_MS", "0"),
            ("SQS_CLAIM_STARTUP_TIMEOUT_MS", "1500"),
            ("SQS_CLAIM_ANSWER_RESERVE_MS", "400"),
            ("SQS_CLAIM_HANDLER_TIMEOUT_MS", "5000"),
            (
                "SQS_CLAIM_OUTPUT_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/q.fifo",
            ),
            (
                "SQS_CLAIM_FAILURE_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/failures",
            ),
            ("SQS_CLAIM_MAX_RECEIVES", "3"),
            ("SQS_CLAIM_LEASE_AT_LEAST_SECS", "3600"),
        ])
        .expect("valid");
        assert_eq!(s.store, Some(StoreUrl::Sqlite("/tmp/x.db".into())));
        assert_eq!(s.key, Some(KeySource::MessageId));
        assert_eq!(s.envelope, Envelope::EventBridge);
        assert_eq!(s.namespace.as_deref(), Some("ns"));
        assert_eq!(s.ttl, Duration::from_secs(60));
        assert_eq!(s.lease, Duration::from_secs(30));
        assert_eq!(s.lease_at_least, Some(Duration::from_secs(3600)));
        assert_eq!(s.concurrency, Some(3));
        assert_eq!(s.warm_cache, Some(500));
        assert_eq!(s.fifo, FifoMode::WholeBatch);
        assert_eq!(s.store_unavailable, StoreUnavailable::FailOpen);
        assert_eq!(s.deadline_margin, Duration::ZERO);
        assert_eq!(s.startup_timeout, Duration::from_millis(1500));
        assert_eq!(s.answer_reserve, Duration::from_millis(400));
        assert_eq!(s.handler_timeout, Some(Duration::from_secs(5)));
        assert!(s.output_queue_url.is_some());
        assert!(s.failure_queue_url.is_some());
        assert_eq!(s.max_receives, 3);
        assert_eq!(s.backoff, None, "off unless asked");
        assert!(s.dead_letter_at_once.is_none(), "off unless asked");
        let metrics = |v: &str| {
            settings(&[("SQS_CLAIM_METRICS_NAMESPACE", v)])
                .expect("valid")
                .metrics_namespace
        };
        assert_eq!(metrics("payments/prod").as_deref(), Some("payments/prod"));
        assert_eq!(metrics("off"), None);
        assert_eq!(metrics("OFF"), None);
    }

    #[test]
    fn invalid_values_name_the_variable() {
        for (var, value) in [
            ("SQS_CLAIM_STORE", "ftp://x"),
            ("SQS_CLAIM_KEY", "json:order_id"),
            ("SQS_CLAIM_ENVELOPE", "kinesis"),
            ("SQS_CLAIM_KEY", "envelope-id"),
            ("SQS_CLAIM_TTL_SECS", "0"),
            ("SQS_CLAIM_TTL_SECS", "1h"),
            ("SQS_CLAIM_LEASE_SECS", "-1"),
            ("SQS_CLAIM_CONCURRENCY", "0"),
            ("SQS_CLAIM_FIFO_MODE", "strict"),
            ("SQS_CLAIM_STORE_UNAVAILABLE", "open"),
            ("SQS_CLAIM_DEADLINE_MARGIN_MS", "2s"),
            ("SQS_CLAIM_STARTUP_TIMEOUT_MS", "0"),
            ("SQS_CLAIM_HANDLER_TIMEOUT_MS", "0"),
            ("SQS_CLAIM_ANSWER_RESERVE_MS", "-1"),
            ("SQS_CLAIM_STARTUP_TIMEOUT_MS", "5s"),
            ("SQS_CLAIM_OUTPUT_QUEUE_URL", "my-queue"),
            ("SQS_CLAIM_FAILURE_QUEUE_URL", "failures"),
            ("SQS_CLAIM_MAX_RECEIVES", "0"),
            ("SQS_CLAIM_MAX_RECEIVES", "5x"),
            ("SQS_CLAIM_METRICS_NAMESPACE", "AWS/Lambda"),
            ("SQS_CLAIM_METRICS_NAMESPACE", "naïve"),
        ] {
            let err = settings(&[(var, value)]).expect_err(var);
            assert_eq!(err.kind(), ErrorKind::Config);
            assert!(err.to_string().contains(var), "{var}: {err}");
        }
        for envelope in ["none", "s3"] {
            let err = settings(&[
                ("SQS_CLAIM_KEY", "envelope-id"),
                ("SQS_CLAIM_ENVELOPE", envelope),
            ])
            .expect_err(envelope);
            assert!(err.to_string().contains("SQS_CLAIM_ENVELOPE"), "{err}");
        }
        for envelope in ["sns", "eventbridge"] {
            let s = settings(&[
                ("SQS_CLAIM_KEY", "envelope-id"),
                ("SQS_CLAIM_ENVELOPE", envelope),
            ])
            .expect(envelope);
            assert_eq!(s.key, Some(KeySource::EnvelopeId));
        }
        let err = settings(&[("SQS_CLAIM_TABLE", "a b")])
            .expect("read")
            .lambda_store()
            .expect_err("bad table");
        assert!(err.to_string().contains("SQS_CLAIM_TABLE"), "{err}");
    }

    /// `SQS_CLAIM_DYNAMODB_PARTITION_KEY` and `SQS_CLAIM_DYNAMODB_SORT_KEY` give the claims
    /// table's layout, applied to a `dynamodb:` store and to a tiered store's DynamoDB tier
    /// (and ignored by stores without one); unset, the store's default.
    #[test]
    fn the_key_layout_comes_from_its_two_variables() {
        let single_table =
            DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM");
        let s = settings(&[
            ("SQS_CLAIM_TABLE", "app"),
            (PARTITION_KEY_VAR, " pk=CLAIM#{key} "),
            (SORT_KEY_VAR, "sk=CLAIM"),
        ])
        .expect("valid");
        assert_eq!(s.dynamodb_keys.as_ref(), Some(&single_table));
        for url in [
            s.lambda_store().expect("lambda"),
            s.cli_store().expect("cli"),
        ] {
            assert_eq!(
                url,
                StoreUrl::DynamoDb {
                    table: "app".into(),
                    key_schema: Some(single_table.clone()),
                }
            );
            assert_eq!(
                url.to_string(),
                "dynamodb:app (keys: pk=CLAIM#{key}, sk=CLAIM)"
            );
        }
        let s = settings(&[
            ("SQS_CLAIM_STORE", "tiered:redis://h/|dynamodb:app"),
            (PARTITION_KEY_VAR, "pk=CLAIM#{key}"),
            (SORT_KEY_VAR, "sk=CLAIM"),
        ])
        .expect("valid");
        let StoreUrl::Tiered { durable, .. } = s.lambda_store().expect("tiered") else {
            panic!("not tiered");
        };
        assert!(
            matches!(
                *durable,
                StoreUrl::DynamoDb { key_schema: Some(ref k), .. } if *k == single_table
            ),
            "{durable:?}"
        );
        let s = settings(&[
            ("SQS_CLAIM_STORE", "sqlite:x.db"),
            (PARTITION_KEY_VAR, "pk=CLAIM#{key}"),
        ])
        .expect("valid");
        assert_eq!(
            s.cli_store().expect("sqlite"),
            StoreUrl::Sqlite("x.db".into())
        );
        // A partition key alone; a fixed partition with the key in the sort key.
        let s = settings(&[(PARTITION_KEY_VAR, "pk=CLAIM#{key}")]).expect("valid");
        assert_eq!(
            s.dynamodb_keys,
            Some(DynamoDbKeySchema::partition("pk", "CLAIM#{key}"))
        );
        let s = settings(&[(PARTITION_KEY_VAR, "pk=CLAIMS"), (SORT_KEY_VAR, "sk={key}")])
            .expect("valid");
        assert_eq!(
            s.dynamodb_keys,
            Some(DynamoDbKeySchema::partition("pk", "CLAIMS").with_sort("sk", "{key}"))
        );
        // Unset or empty: the default layout.
        for vars in [&[][..], &[(PARTITION_KEY_VAR, " "), (SORT_KEY_VAR, "")]] {
            let s = settings(vars).expect("valid");
            assert_eq!(s.dynamodb_keys, None);
            let s = settings(&[&[("SQS_CLAIM_TABLE", "app")], vars].concat()).expect("valid");
            assert!(matches!(
                s.lambda_store().expect("dynamodb"),
                StoreUrl::DynamoDb {
                    key_schema: None,
                    ..
                }
            ));
        }
    }

    /// A bad layout is one `Config` error that names the variable(s) it came from and says
    /// what is wrong, in the library's words where the library checks it.
    #[test]
    fn a_bad_key_layout_names_its_variable_and_the_fault() {
        for (vars, names, says) in [
            (
                &[(PARTITION_KEY_VAR, "pk")][..],
                &[PARTITION_KEY_VAR][..],
                "is not NAME=TEMPLATE",
            ),
            (
                &[(PARTITION_KEY_VAR, "pk={key}"), (SORT_KEY_VAR, "CLAIM")],
                &[SORT_KEY_VAR],
                "is not NAME=TEMPLATE",
            ),
            (
                &[(PARTITION_KEY_VAR, "=CLAIM#{key}")],
                &[PARTITION_KEY_VAR],
                "the attribute name is empty",
            ),
            (
                &[(PARTITION_KEY_VAR, "pk={key}"), (SORT_KEY_VAR, " =CLAIM")],
                &[PARTITION_KEY_VAR, SORT_KEY_VAR],
                "the attribute name is empty",
            ),
            (
                &[(PARTITION_KEY_VAR, "pk=CLAIM"), (SORT_KEY_VAR, "sk=CLAIM")],
                &[PARTITION_KEY_VAR, SORT_KEY_VAR],
                "no template contains {key}",
            ),
            (
                &[(PARTITION_KEY_VAR, "pk=CLAIM")],
                &[PARTITION_KEY_VAR],
                "no template contains {key}",
            ),
            (
                &[(PARTITION_KEY_VAR, "pk=")],
                &[PARTITION_KEY_VAR],
                "the template is empty",
            ),
            (
                &[(PARTITION_KEY_VAR, "pk={key}"), (SORT_KEY_VAR, "pk=CLAIM")],
                &[PARTITION_KEY_VAR, SORT_KEY_VAR],
                "both named",
            ),
            (
                &[(PARTITION_KEY_VAR, "pk={key}#{key}")],
                &[PARTITION_KEY_VAR],
                "at most once",
            ),
            (
                &[(PARTITION_KEY_VAR, "status={key}")],
                &[PARTITION_KEY_VAR],
                "also the record's status attribute",
            ),
            (
                &[(SORT_KEY_VAR, "sk={key}")],
                &[SORT_KEY_VAR],
                "needs a partition key",
            ),
        ] {
            let err = settings(vars).expect_err(&format!("{vars:?}"));
            assert_eq!(err.kind(), ErrorKind::Config, "{vars:?}");
            let text = err.to_string();
            assert!(text.contains(says), "{vars:?}: {text}");
            for name in names {
                assert!(text.contains(name), "{vars:?}: {text}");
            }
        }
    }

    /// The interop is on with a handler (or a key prefix), its function name read as
    /// Powertools reads it: the variable, else `AWS_LAMBDA_FUNCTION_NAME` (empty kept), else
    /// `test-func`.
    #[test]
    fn powertools_keys_come_from_their_variables() {
        use serde_json::json;
        assert_eq!(settings(&[]).expect("valid").powertools, None);
        let handler = (POWERTOOLS_HANDLER_VAR, " app.record_handler ");
        let with = |vars: &[(&str, &str)]| {
            settings(vars)
                .expect("valid")
                .powertools
                .expect("interop on")
        };
        assert_eq!(
            with(&[handler]),
            PowertoolsFormat::new("test-func", "app.record_handler")
        );
        assert_eq!(
            with(&[handler, ("AWS_LAMBDA_FUNCTION_NAME", "orders-fn")]).prefix(),
            "orders-fn.app.record_handler"
        );
        assert_eq!(
            with(&[handler, ("AWS_LAMBDA_FUNCTION_NAME", "")]).prefix(),
            ".app.record_handler",
            "Powertools keeps an empty function name"
        );
        assert_eq!(
            with(&[
                handler,
                ("AWS_LAMBDA_FUNCTION_NAME", "sqs-claim-fn"),
                (POWERTOOLS_FUNCTION_VAR, "orders-fn"),
            ])
            .prefix(),
            "orders-fn.app.record_handler"
        );
        assert_eq!(
            with(&[handler, (POWERTOOLS_KEY_PREFIX_VAR, "orders")]).prefix(),
            "orders"
        );
        assert_eq!(
            with(&[(POWERTOOLS_KEY_PREFIX_VAR, "orders")]),
            PowertoolsFormat::with_key_prefix("orders")
        );
        assert_eq!(
            with(&[handler, (POWERTOOLS_HASH_VAR, "sha256")]).hash_function(),
            HashFunction::Sha256
        );
        assert_eq!(
            with(&[handler, (POWERTOOLS_HASH_VAR, "md5")]).hash_function(),
            HashFunction::Md5
        );
        for (value, payload) in [
            ("body", RecordPayload::Body),
            ("json:/amount", RecordPayload::BodyJson("/amount".into())),
            ("json:", RecordPayload::BodyJson(String::new())),
        ] {
            assert_eq!(
                with(&[handler, (POWERTOOLS_VALIDATION_VAR, value)]),
                PowertoolsFormat::new("test-func", "app.record_handler")
                    .with_record_validation(payload),
                "{value}"
            );
        }
        // The record handler of the app's default key, `powertools_json(body).order_id`.
        let format = with(&[handler, ("AWS_LAMBDA_FUNCTION_NAME", "orders-fn")]);
        assert_eq!(
            format.key(&json!("ord-1001")),
            PowertoolsFormat::new("orders-fn", "app.record_handler").key(&json!("ord-1001"))
        );
    }

    #[test]
    fn bad_powertools_settings_name_the_variable() {
        let handler = (POWERTOOLS_HANDLER_VAR, "app.record_handler");
        for vars in [
            &[(POWERTOOLS_HANDLER_VAR, "record_handler")][..],
            &[(POWERTOOLS_HANDLER_VAR, "app.record handler")],
            &[(POWERTOOLS_HANDLER_VAR, "app.h#1")],
            &[(POWERTOOLS_HANDLER_VAR, ".record_handler")],
            &[handler, (POWERTOOLS_HASH_VAR, "sha1")],
            &[handler, (POWERTOOLS_HASH_VAR, "MD5")],
            &[handler, (POWERTOOLS_VALIDATION_VAR, "json:amount")],
            &[
                handler,
                (POWERTOOLS_VALIDATION_VAR, "powertools_json(body)"),
            ],
            // Set while the interop is off: a typo in the switch must not pass silently.
            &[(POWERTOOLS_FUNCTION_VAR, "orders-fn")],
            &[(POWERTOOLS_HASH_VAR, "sha256")],
            &[(POWERTOOLS_VALIDATION_VAR, "body")],
        ] {
            let err = settings(vars).expect_err(&format!("{vars:?}"));
            assert_eq!(err.kind(), ErrorKind::Config, "{vars:?}");
            let named = vars.last().expect("a variable").0;
            assert!(err.to_string().contains(named), "{vars:?}: {err}");
        }
    }

    #[test]
    fn cli_store_prefers_the_store_then_the_table() {
        let s = settings(&[]).expect("empty env");
        assert_eq!(
            s.cli_store().expect("default"),
            StoreUrl::Sqlite(DEFAULT_CLI_STORE.into())
        );
        let s = settings(&[("SQS_CLAIM_TABLE", "claims")]).expect("valid");
        assert_eq!(
            s.cli_store().expect("dynamodb"),
            StoreUrl::DynamoDb {
                table: "claims".into(),
                key_schema: None,
            }
        );
        let s = settings(&[
            ("SQS_CLAIM_STORE", "memory:"),
            ("SQS_CLAIM_TABLE", "claims"),
        ])
        .expect("valid");
        assert_eq!(s.cli_store().expect("memory"), StoreUrl::Memory);
        let s = settings(&[("SQS_CLAIM_TABLE", "a b")]).expect("read");
        assert!(s.cli_store().is_err(), "an invalid table name");
    }

    #[test]
    fn store_urls() {
        assert_eq!(
            StoreUrl::parse("memory:").expect("memory"),
            StoreUrl::Memory
        );
        assert_eq!(
            StoreUrl::parse("sqlite:///tmp/a.db").expect("sqlite"),
            StoreUrl::Sqlite("/tmp/a.db".into())
        );
        assert_eq!(
            StoreUrl::parse("sqlite:a.db").expect("sqlite"),
            StoreUrl::Sqlite("a.db".into())
        );
        assert!(StoreUrl::parse("sqlite:").is_err());
        assert!(StoreUrl::parse("dynamodb:").is_err());
        let url =
            StoreUrl::parse("tiered:redis://h/|postgres://user:hunter2@db/x").expect("tiered");
        for shown in [url.to_string(), format!("{url:?}")] {
            assert!(
                !shown.contains("hunter2") && shown.contains("user:***@db"),
                "{shown}"
            );
        }
        assert!(
            StoreUrl::parse("tiered:postgres://db/x|memory:").is_err(),
            "cache must be Redis"
        );
        assert!(
            StoreUrl::parse("tiered:redis://h/").is_err(),
            "needs a durable URL"
        );
        assert!(StoreUrl::parse("nope").is_err());
    }

    #[test]
    fn backoff_and_dead_letter_at_once_settings() {
        let s = settings(&[
            ("SQS_CLAIM_BACKOFF", "on"),
            ("SQS_CLAIM_BACKOFF_FIRST_SECS", "10"),
            ("SQS_CLAIM_BACKOFF_CAP_SECS", "600"),
            ("SQS_CLAIM_BACKOFF_FOR", "store_unavailable=5, contention=0"),
            (
                "SQS_CLAIM_FAILURE_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/dlq",
            ),
            ("SQS_CLAIM_DEAD_LETTER_AT_ONCE", "default"),
            (
                "SQS_CLAIM_SOURCE_QUEUE_URL",
                "https://sqs.us-east-1.amazonaws.com/1/in",
            ),
        ])
        .expect("valid");
        assert_eq!(
            s.backoff,
            Some(Backoff::exponential(
                Duration::from_secs(10),
                Duration::from_secs(600)
            ))
        );
        assert_eq!(
            s.backoff_for,
            [
                (
                    FailureKind::StoreUnavailable,
                    Backoff::fixed(Duration::from_secs(5))
                ),
                (FailureKind::Contention, Backoff::fixed(Duration::ZERO)),
            ]
        );
        assert_eq!(s.dead_letter_at_once, Permanent::default());
        assert!(s.source_queue_url.is_some());
        let on = settings(&[("SQS_CLAIM_BACKOFF", "on")]).expect("valid");
        assert_eq!(on.backoff, Some(Backoff::default()));
        for (vars, names) in [
            (vec![("SQS_CLAIM_BACKOFF", "yes")], "SQS_CLAIM_BACKOFF"),
            (
                vec![("SQS_CLAIM_BACKOFF_CAP_SECS", "43201")],
                "SQS_CLAIM_BACKOFF_CAP_SECS",
            ),
            (
                vec![
                    ("SQS_CLAIM_BACKOFF_FIRST_SECS", "100"),
                    ("SQS_CLAIM_BACKOFF_CAP_SECS", "50"),
                ],
                "SQS_CLAIM_BACKOFF_FIRST_SECS",
            ),
            (
                vec![("SQS_CLAIM_BACKOFF_FOR", "slow=5")],
                "SQS_CLAIM_BACKOFF_FOR",
            ),
            (
                vec![("SQS_CLAIM_BACKOFF_FOR", "contention")],
                "SQS_CLAIM_BACKOFF_FOR",
            ),
            (
                vec![("SQS_CLAIM_DEAD_LETTER_AT_ONCE", "default")],
                "SQS_CLAIM_DEAD_LETTER_AT_ONCE",
            ),
            (
                vec![
                    ("SQS_CLAIM_FAILURE_QUEUE_URL", "https://x/1/q"),
                    ("SQS_CLAIM_DEAD_LETTER_AT_ONCE", "bad_bodies"),
                ],
                "SQS_CLAIM_DEAD_LETTER_AT_ONCE",
            ),
        ] {
            let e = settings(&vars).expect_err("invalid");
            assert_eq!(e.kind(), ErrorKind::Config);
            assert!(e.to_string().contains(names), "{e}");
        }
    }
}
