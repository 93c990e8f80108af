//! The reference consumer's settings, from environment variables, and the store URLs that pick
//! a [`Ledger`]. Everything here is parsing: no file, socket or clock is touched (opening the
//! store a URL names is [`AnyLedger::open`]'s).
//!
//! Every variable is optional; an invalid value is a startup error naming the variable (a
//! consumer that starts with a typo in its configuration would quietly do the wrong thing).
//!
//! | variable | default | meaning |
//! |----------|---------|---------|
//! | `SQS_CLAIM_STORE` | Lambda: `dynamodb:$SQS_CLAIM_TABLE`; CLI: `sqlite:.sqs-claim/claims.db` | the store URL (see [`StoreUrl`]) |
//! | `SQS_CLAIM_TABLE` | none | the DynamoDB claims table, when `SQS_CLAIM_STORE` is not set |
//! | `SQS_CLAIM_ACCOUNTS_TABLE` | `<claims table>-accounts` | the DynamoDB accounts table |
//! | `SQS_CLAIM_KEY` | `json:/order_id` | the key source, [`KeySource::parse`] syntax |
//! | `SQS_CLAIM_NAMESPACE` | `payments` | the key namespace |
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
//! | `SQS_CLAIM_ANSWER_RESERVE_MS` | `250` | every step still in flight is cut off this long before the deadline, so the answer is sent in time |
//! | `SQS_CLAIM_HANDLER_TIMEOUT_MS` | none | the longest one handler call may take (it is cancelled past it, and its claim kept until its lease lapses) |
//! | `SQS_CLAIM_STARTUP_TIMEOUT_MS` | `5000` | how long connecting to the store and checking its tables may take at start-up; past it the binary stops with one error line |
//! | `SQS_CLAIM_METRICS_NAMESPACE` | `sqs-claim` | the CloudWatch namespace of the per-batch EMF metrics line the Lambda binary writes to stdout; `off` writes none (the CLI never writes them) |

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(doc)]
use super::{AnyLedger, Ledger};
use sqs_claim::{Error, ErrorKind, FifoMode, KeySource, StoreUnavailable};

/// How long opening the store and its start-up check ([`Ledger::prepare`]) may take by default.
/// A healthy store answers in milliseconds; five seconds leaves room for a cold TLS handshake
/// and a slow DNS, and still fails a Lambda init (10 s limit) with a clear line instead of a
/// timeout.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The CloudWatch namespace of the consumer's metrics when `SQS_CLAIM_METRICS_NAMESPACE` is
/// unset.
pub const DEFAULT_METRICS_NAMESPACE: &str = "sqs-claim";

/// The CLI's store when none is configured: a file under the current directory.
pub const DEFAULT_CLI_STORE: &str = ".sqs-claim/claims.db";

/// The reference consumer's settings. [`Settings::default`] is what an empty environment gives.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// `SQS_CLAIM_STORE`.
    pub store: Option<StoreUrl>,
    /// `SQS_CLAIM_TABLE`.
    pub table: Option<String>,
    /// `SQS_CLAIM_ACCOUNTS_TABLE`.
    pub accounts_table: Option<String>,
    /// `SQS_CLAIM_KEY`.
    pub key: KeySource,
    /// `SQS_CLAIM_NAMESPACE`.
    pub namespace: String,
    /// `SQS_CLAIM_TTL_SECS`.
    pub ttl: Duration,
    /// `SQS_CLAIM_LEASE_SECS`.
    pub lease: Duration,
    /// `SQS_CLAIM_LEASE_AT_LEAST_SECS`: unset, claims are leased until the deadline.
    pub lease_at_least: Option<Duration>,
    /// `SQS_CLAIM_CONCURRENCY`; unset, what the store carries
    /// ([`ClaimStore::max_in_flight`](sqs_claim::ClaimStore::max_in_flight)).
    pub concurrency: Option<usize>,
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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            store: None,
            table: None,
            accounts_table: None,
            key: KeySource::JsonPointer("/order_id".into()),
            namespace: "payments".into(),
            ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(300),
            lease_at_least: None,
            concurrency: None,
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
        s.accounts_table = get("SQS_CLAIM_ACCOUNTS_TABLE").map(|v| v.trim().to_owned());
        if let Some(v) = get("SQS_CLAIM_KEY") {
            s.key = KeySource::parse(&v).map_err(|e| invalid("SQS_CLAIM_KEY", e.message()))?;
        }
        if let Some(v) = get("SQS_CLAIM_NAMESPACE") {
            s.namespace = v.trim().to_owned();
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
        for (var, url) in [
            ("SQS_CLAIM_OUTPUT_QUEUE_URL", &s.output_queue_url),
            ("SQS_CLAIM_FAILURE_QUEUE_URL", &s.failure_queue_url),
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
        Ok(s)
    }

    /// The store the `sqs-claim` CLI uses: [`Settings::store`], else
    /// `dynamodb:`[`Settings::table`], else the SQLite file [`DEFAULT_CLI_STORE`] (created on
    /// demand, so a second run of the same event finds every message already done); with
    /// [`Settings::accounts_table`] applied to either.
    pub fn cli_store(&self) -> Result<StoreUrl, Error> {
        let url = match (&self.store, &self.table) {
            (Some(url), _) => url.clone(),
            (None, Some(table)) => StoreUrl::parse(&format!("dynamodb:{table}"))?,
            (None, None) => StoreUrl::Sqlite(PathBuf::from(DEFAULT_CLI_STORE)),
        };
        Ok(url.with_accounts_table(self.accounts_table.clone()))
    }

    /// The store the Lambda consumer uses: `SQS_CLAIM_STORE`, else `dynamodb:$SQS_CLAIM_TABLE`
    /// (with `SQS_CLAIM_ACCOUNTS_TABLE` applied to either).
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
        Ok(url.with_accounts_table(self.accounts_table.clone()))
    }
}

/// Where the reference consumer keeps its claims and balances.
///
/// | URL | store |
/// |-----|-------|
/// | `memory:` | in-process, gone when the process exits |
/// | `sqlite:PATH` | an SQLite file (created if missing, with its directory) |
/// | `dynamodb:TABLE` | DynamoDB; accounts in `TABLE-accounts` unless set otherwise. Endpoint, region and credentials come from the standard AWS environment (`AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local) |
/// | `redis://HOST[:PORT][/DB][?prefix=P]`, `rediss://...` (TLS) | Redis (feature `redis`); keys under the prefix `P` (default `sqs-claim:`), balances in the hash `{P}reference:balances` |
/// | `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, `postgresql://...` | PostgreSQL (feature `postgres`); claims in `sqs_claim_processed_events`, balances in `sqs_claim_processed_events_accounts` |
/// | `tiered:REDIS_URL\|DURABLE_URL` | a Redis cache of completed keys in front of any store above (feature `redis`) |
///
/// Adding a store: a variant here, an arm in [`StoreUrl::parse`], its [`Ledger`] in a file of
/// its own, and a variant of [`AnyLedger`] (with its arm in `AnyLedger::open` and in the
/// dispatch macro there).
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
        /// The accounts table.
        accounts_table: String,
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
                    accounts_table: format!("{table}-accounts"),
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

    /// Overrides the DynamoDB accounts table (`None` keeps it). Other stores ignore it.
    pub fn with_accounts_table(self, accounts: Option<String>) -> StoreUrl {
        match (self, accounts) {
            (StoreUrl::DynamoDb { table, .. }, Some(accounts_table)) => StoreUrl::DynamoDb {
                table,
                accounts_table,
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
            StoreUrl::DynamoDb {
                table,
                accounts_table,
            } => write!(f, "dynamodb:{table} (accounts: {accounts_table})"),
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
        assert_eq!(s.key, KeySource::JsonPointer("/order_id".into()));
        assert_eq!(s.namespace, "payments");
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
                accounts_table: "claims-accounts".into()
            }
        );
        let s = settings(&[
            ("SQS_CLAIM_TABLE", "claims"),
            ("SQS_CLAIM_ACCOUNTS_TABLE", "acc"),
        ])
        .expect("valid");
        assert_eq!(
            s.lambda_store().expect("dynamodb"),
            StoreUrl::DynamoDb {
                table: "claims".into(),
                accounts_table: "acc".into()
            }
        );
    }

    #[test]
    fn every_variable_is_read() {
        let s = settings(&[
            ("SQS_CLAIM_STORE", "sqlite:/tmp/x.db"),
            ("SQS_CLAIM_KEY", "message-id"),
            ("SQS_CLAIM_NAMESPACE", "ns"),
            ("SQS_CLAIM_TTL_SECS", "60"),
            ("SQS_CLAIM_LEASE_SECS", "30"),
            ("SQS_CLAIM_CONCURRENCY", "3"),
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
        assert_eq!(s.key, KeySource::MessageId);
        assert_eq!(s.namespace, "ns");
        assert_eq!(s.ttl, Duration::from_secs(60));
        assert_eq!(s.lease, Duration::from_secs(30));
        assert_eq!(s.lease_at_least, Some(Duration::from_secs(3600)));
        assert_eq!(s.concurrency, Some(3));
        assert_eq!(s.fifo, FifoMode::WholeBatch);
        assert_eq!(s.store_unavailable, StoreUnavailable::FailOpen);
        assert_eq!(s.deadline_margin, Duration::ZERO);
        assert_eq!(s.startup_timeout, Duration::from_millis(1500));
        assert_eq!(s.answer_reserve, Duration::from_millis(400));
        assert_eq!(s.handler_timeout, Some(Duration::from_secs(5)));
        assert!(s.output_queue_url.is_some());
        assert!(s.failure_queue_url.is_some());
        assert_eq!(s.max_receives, 3);
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
        let err = settings(&[("SQS_CLAIM_TABLE", "a b")])
            .expect("read")
            .lambda_store()
            .expect_err("bad table");
        assert!(err.to_string().contains("SQS_CLAIM_TABLE"), "{err}");
    }

    #[test]
    fn cli_store_prefers_the_store_then_the_table() {
        let s = settings(&[]).expect("empty env");
        assert_eq!(
            s.cli_store().expect("default"),
            StoreUrl::Sqlite(DEFAULT_CLI_STORE.into())
        );
        let s = settings(&[
            ("SQS_CLAIM_TABLE", "claims"),
            ("SQS_CLAIM_ACCOUNTS_TABLE", "ledger"),
        ])
        .expect("valid");
        assert_eq!(
            s.cli_store().expect("dynamodb"),
            StoreUrl::DynamoDb {
                table: "claims".into(),
                accounts_table: "ledger".into()
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
}
