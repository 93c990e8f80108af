//! A consumer's settings from the `SQS_CLAIM_*` environment variables (feature `settings`),
//! the store URLs that name a claims store, and the store a URL opens, as one
//! [`BoxStore`](crate::store::BoxStore) ([`StoreUrl::open`]: the one place that maps a URL to
//! a store type, as sqlx's `AnyPool` does). Reading the settings is parsing only; opening is
//! [`StoreUrl::open`]'s and [`Settings::open_store`]'s.
//!
//! The example app's consumer reads these, the `sqs-claim` operator commands read the ones
//! they need (the store, its key layout, the namespace, the Powertools interop, the TTL and
//! lease the doctor checks) exactly as a consumer does, and a consumer of your own reads them
//! too, without the operator CLI: [`Settings::from_env`], [`Settings::open_store`], then
//! [`Settings::configure`] (or, with feature `sqs`, `Settings::configure_all`, which adds the
//! failure queue and the backoff) on its builder.
//!
//! | file | what it holds |
//! |------|---------------|
//! | `mod.rs` | [`Settings`] and its reader ([`Settings::from_lookup`]) |
//! | `read.rs` | [`read`]: one variable, parsed with `FromStr`, one error naming it |
//! | `variables.rs` | [`VARIABLES`]: every variable, its default, meaning and the features it needs |
//! | `unknown.rs` | [`unknown_variables`]: the `SQS_CLAIM_*` variables nobody reads, warned of |
//! | `store_url.rs` | [`StoreUrl`], [`ServerUrl`] (passwords hidden) |
//! | `open.rs` | [`StoreUrl::open`], [`StoreUrl::open_checked`], [`bounded_startup`] |
//! | `configure.rs` | [`Settings::open_store`], [`Settings::configure`], the SQS steps |
//! | `key_layout.rs`, `flags.rs`, `powertools.rs` | the DynamoDB key layout, the store flags of a command line (`admin`), the Powertools interop |
//!
//! Every variable is optional; an invalid value is a startup error naming the variable (a
//! consumer that starts with a typo in its configuration would quietly do the wrong thing).
//! Each is read once, by [`read`]: the variable through a lookup function, its value parsed
//! with [`FromStr`](std::str::FromStr) (the library's types implement it: [`FifoMode`],
//! [`StoreUnavailable`], [`Envelope`], [`KeySource`], [`StoreUrl`], ...), and a value that does
//! not parse is one [`ErrorKind::Config`] error naming the variable and the accepted forms.
//!
//! The variables, their defaults and meanings are [`VARIABLES`], the data
//! docs/configuration.md's table is checked against.
//!
//! Features: `settings` turns on `dynamodb` (the Lambda default store, `dynamodb:TABLE`, and
//! the claims table's key layout). The failure queue and backoff settings need `sqs`, the
//! large messages' `s3`, the publisher's offload `sqs` and `s3`, the `SQS_CLAIM_POWERTOOLS_*`
//! variables `powertools` ([`Variable::features`]), and a store URL its store's feature
//! ([`StoreUrl::missing_feature`]): in a build without it, setting one is a start-up error
//! naming the variable and the feature, never a setting silently ignored. An `SQS_CLAIM_*`
//! variable nothing reads is warned of with the nearest known name ([`unknown_variables`]).

use std::time::Duration;

#[cfg(feature = "powertools")]
use crate::powertools::PowertoolsFormat;
#[cfg(feature = "sqs")]
use crate::processor::Permanent;
use crate::store::dynamodb::DynamoDbKeySchema;
use crate::{
    Backoff, Envelope, Error, ErrorKind, FailureKind, FifoMode, KeySource, StoreUnavailable,
};

mod configure;
#[cfg(feature = "admin")]
mod flags;
mod key_layout;
mod open;
#[cfg(feature = "powertools")]
mod powertools;
mod read;
mod store_url;
#[cfg(test)]
mod tests;
mod unknown;
mod variables;

// The key-layout helpers, the variables' table and the CLI's store are the operator tool's
// (feature `admin`); a consumer reads the layout through `Settings::dynamodb_keys`.
#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub use flags::StoreFlags;
#[cfg(not(feature = "admin"))]
pub(crate) use key_layout::{PARTITION_KEY_VAR, SORT_KEY_VAR, describe_key_layout, key_layout};
#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub use key_layout::{
    PARTITION_KEY_VAR, SORT_KEY_VAR, describe_key_layout, key_layout, key_layout_values,
};
pub use open::bounded_startup;
#[cfg(feature = "powertools")]
pub use powertools::powertools;
pub use read::read;
pub use store_url::{ServerUrl, StoreUrl};
pub use unknown::{UnknownVariable, unknown_variables};
#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub use variables::markdown_table;
pub use variables::{VARIABLES, Variable};

use read::{
    BackoffFor, Entries, Messages, MetricsNamespace, Millis, QueueUrl, Receives, Seconds, Text,
    Whole, invalid,
};
#[cfg(feature = "s3")]
use read::{Bytes, OnOff};

/// The variable that turns the Powertools interop on: the decorated record handler's
/// `module.qualname`.
#[cfg_attr(not(feature = "powertools"), allow(dead_code))] // the tests name them
pub(crate) const POWERTOOLS_HANDLER_VAR: &str = "SQS_CLAIM_POWERTOOLS_HANDLER";

/// The variable of the Lambda function name in Powertools' keys.
#[cfg_attr(not(feature = "powertools"), allow(dead_code))] // the tests name them
pub(crate) const POWERTOOLS_FUNCTION_VAR: &str = "SQS_CLAIM_POWERTOOLS_FUNCTION";

/// The variable of Powertools' `key_prefix`.
#[cfg_attr(not(feature = "powertools"), allow(dead_code))] // the tests name them
pub(crate) const POWERTOOLS_KEY_PREFIX_VAR: &str = "SQS_CLAIM_POWERTOOLS_KEY_PREFIX";

/// The variable of Powertools' `hash_function`.
#[cfg_attr(not(feature = "powertools"), allow(dead_code))] // the tests name them
pub(crate) const POWERTOOLS_HASH_VAR: &str = "SQS_CLAIM_POWERTOOLS_HASH";

/// The variable of Powertools' `payload_validation_jmespath`.
#[cfg_attr(not(feature = "powertools"), allow(dead_code))] // the tests name them
pub(crate) const POWERTOOLS_VALIDATION_VAR: &str = "SQS_CLAIM_POWERTOOLS_VALIDATION";

/// How long opening the store and its start-up check may take by default
/// (`SQS_CLAIM_STARTUP_TIMEOUT_MS`).
/// A healthy store answers in milliseconds. Start-up is several round trips in a row (connect,
/// handshake, the table checks), each bounded by the store's own timeout (4-5 s without an
/// answer); fifteen seconds lets a slow store that answers each of them seconds late start, while
/// a dark one fails first on its own timeout, with a clear line.
pub(crate) const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(15);

/// The CloudWatch namespace of the consumer's metrics when `SQS_CLAIM_METRICS_NAMESPACE` is
/// unset.
pub(crate) const DEFAULT_METRICS_NAMESPACE: &str = "sqs-claim";

/// The CLI's store when none is configured: a file under the current directory.
#[cfg(any(feature = "admin", test))]
pub(crate) const DEFAULT_CLI_STORE: &str = ".sqs-claim/claims.db";

/// A consumer's settings. [`Settings::default`] is what an empty environment gives.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// `SQS_CLAIM_STORE`.
    pub store: Option<StoreUrl>,
    /// `SQS_CLAIM_TABLE`.
    pub table: Option<String>,
    /// `SQS_CLAIM_DYNAMODB_PARTITION_KEY` and `SQS_CLAIM_DYNAMODB_SORT_KEY`, checked
    /// together; `None` for the store's default (`id={key}`).
    pub dynamodb_keys: Option<DynamoDbKeySchema>,
    /// `SQS_CLAIM_KEY`; unset, the consumer's own default.
    pub key: Option<KeySource>,
    /// `SQS_CLAIM_ENVELOPE`.
    pub(crate) envelope: Envelope,
    /// `SQS_CLAIM_NAMESPACE`; unset, the consumer's own default.
    pub namespace: Option<String>,
    /// `SQS_CLAIM_TTL_SECS`.
    pub ttl: Duration,
    /// `SQS_CLAIM_LEASE_SECS`.
    pub(crate) lease: Duration,
    /// `SQS_CLAIM_LEASE_AT_LEAST_SECS`: unset, claims are leased short and extended while the
    /// handler runs (`Lease::extended`).
    pub lease_at_least: Option<Duration>,
    /// `SQS_CLAIM_CONCURRENCY`; unset, what the store carries
    /// ([`Capabilities::max_in_flight`](crate::store::Capabilities::max_in_flight)).
    pub(crate) concurrency: Option<usize>,
    /// `SQS_CLAIM_WARM_CACHE`: entries of the in-process cache of completed keys
    /// ([`CachedStore`](crate::store::CachedStore)) in front of the store; `None` (unset or 0): no cache.
    pub(crate) warm_cache: Option<usize>,
    /// `SQS_CLAIM_FIFO_MODE`.
    pub(crate) fifo: FifoMode,
    /// `SQS_CLAIM_STORE_UNAVAILABLE`.
    pub store_unavailable: StoreUnavailable,
    /// `SQS_CLAIM_DEADLINE_MARGIN_MS`.
    pub(crate) deadline_margin: Duration,
    /// `SQS_CLAIM_STARTUP_TIMEOUT_MS`.
    pub startup_timeout: Duration,
    /// `SQS_CLAIM_ANSWER_RESERVE_MS`.
    pub(crate) answer_reserve: Duration,
    /// `SQS_CLAIM_HANDLER_TIMEOUT_MS`.
    pub(crate) handler_timeout: Option<Duration>,
    /// `SQS_CLAIM_FAILURE_QUEUE_URL`.
    pub(crate) failure_queue_url: Option<String>,
    /// `SQS_CLAIM_MAX_RECEIVES`.
    pub(crate) max_receives: u32,
    /// `SQS_CLAIM_METRICS_NAMESPACE`; `None` for `off`.
    pub metrics_namespace: Option<String>,
    /// `SQS_CLAIM_DEAD_LETTER_AT_ONCE`: which failures go to the failure queue on any receive
    /// (feature `sqs`).
    #[cfg(feature = "sqs")]
    pub(crate) dead_letter_at_once: Permanent,
    /// `SQS_CLAIM_BACKOFF`, `SQS_CLAIM_BACKOFF_FIRST_SECS` and `SQS_CLAIM_BACKOFF_CAP_SECS`:
    /// the backoff of messages reported for retry; `None` (`off`) for the queue's visibility
    /// timeout.
    pub backoff: Option<Backoff>,
    /// `SQS_CLAIM_BACKOFF_FOR`: fixed delays per failure kind.
    pub(crate) backoff_for: Vec<(FailureKind, Backoff)>,
    /// `SQS_CLAIM_SOURCE_QUEUE_URL`.
    pub(crate) source_queue_url: Option<String>,
    /// The `SQS_CLAIM_POWERTOOLS_*` variables ([`powertools()`], feature `powertools`): keys
    /// and payload hashes as a Powertools-Python record handler derives them; `None` for
    /// sqs-claim's own (`namespace#key`).
    #[cfg(feature = "powertools")]
    pub powertools: Option<PowertoolsFormat>,
    /// `SQS_CLAIM_LARGE_MESSAGES`: read the extended clients' S3 pointers (feature `s3`).
    #[cfg(feature = "s3")]
    pub large_messages: bool,
    /// `SQS_CLAIM_LARGE_MESSAGE_MAX_BYTES` (feature `s3`).
    #[cfg(feature = "s3")]
    pub large_message_max_bytes: u64,
    /// `SQS_CLAIM_LARGE_MESSAGE_DELETE`: delete each object once its message is done
    /// (feature `s3`).
    #[cfg(feature = "s3")]
    pub large_message_delete: bool,
    /// `SQS_CLAIM_LARGE_MESSAGE_BUCKETS`: the only buckets a pointer may name; empty for any
    /// (feature `s3`).
    #[cfg(feature = "s3")]
    pub large_message_buckets: Vec<String>,
    /// `SQS_CLAIM_OFFLOAD_BUCKET`: where the publisher puts large bodies (feature `s3`).
    #[cfg(feature = "s3")]
    pub offload_bucket: Option<String>,
    /// `SQS_CLAIM_OFFLOAD_OVER_BYTES` (feature `s3`).
    #[cfg(feature = "s3")]
    pub offload_over_bytes: usize,
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
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            answer_reserve: Duration::from_millis(250),
            handler_timeout: None,
            failure_queue_url: None,
            max_receives: 5,
            metrics_namespace: Some(DEFAULT_METRICS_NAMESPACE.into()),
            #[cfg(feature = "sqs")]
            dead_letter_at_once: Permanent::none(),
            backoff: None,
            backoff_for: Vec::new(),
            source_queue_url: None,
            #[cfg(feature = "powertools")]
            powertools: None,
            #[cfg(feature = "s3")]
            large_messages: false,
            #[cfg(feature = "s3")]
            large_message_max_bytes: 32 * 1024 * 1024,
            #[cfg(feature = "s3")]
            large_message_delete: false,
            #[cfg(feature = "s3")]
            large_message_buckets: Vec::new(),
            #[cfg(feature = "s3")]
            offload_bucket: None,
            #[cfg(feature = "s3")]
            offload_over_bytes: 256 * 1024,
        }
    }
}

impl Settings {
    /// Reads every `SQS_CLAIM_*` variable of the process environment. An empty value counts as
    /// unset. A setting this build cannot honour (its feature, or its store's, is missing) is
    /// an error naming the variable and the feature; an `SQS_CLAIM_*` variable nothing reads
    /// (a misspelling) is logged as a warning with the nearest known name
    /// ([`unknown_variables`]). An app with `SQS_CLAIM_*` variables of its own names them with
    /// [`from_env_beside`](Self::from_env_beside).
    pub fn from_env() -> Result<Settings, Error> {
        Self::from_env_beside(&[])
    }

    /// [`from_env`](Self::from_env) for an app that reads `SQS_CLAIM_*` variables of its own
    /// (`own`): those are not warned of as unknown.
    ///
    /// ```no_run
    /// use sqs_claim::settings::{Settings, read};
    ///
    /// let settings = Settings::from_env_beside(&["SQS_CLAIM_ORDERS_TABLE"])?;
    /// let env = |name: &str| std::env::var(name).ok();
    /// let orders: Option<String> = read(&env, "SQS_CLAIM_ORDERS_TABLE")?;
    /// # Ok::<(), sqs_claim::Error>(())
    /// ```
    pub fn from_env_beside(own: &[&str]) -> Result<Settings, Error> {
        let settings = Self::from_lookup(|name| std::env::var(name).ok())?;
        unknown::warn_unknown(own);
        Ok(settings)
    }

    /// Reads the settings through `lookup` (a variable's value by name), for tests and for
    /// configuration that does not come from the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, Error> {
        let env: &dyn Fn(&str) -> Option<String> = &lookup;
        refuse_missing_features(env)?;
        let mut s = Settings::default();
        let or = |value: Option<Duration>, default: Duration| value.unwrap_or(default);
        s.store = read::<StoreUrl>(env, "SQS_CLAIM_STORE")?;
        if let Some(feature) = s.store.as_ref().and_then(StoreUrl::missing_feature) {
            return Err(invalid(
                "SQS_CLAIM_STORE",
                format!(
                    "store URL {} needs the `{feature}` feature of sqs-claim, which this build \
                     lacks",
                    s.store
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default()
                ),
            ));
        }
        s.table = read::<Text>(env, "SQS_CLAIM_TABLE")?.map(|t| t.0);
        s.dynamodb_keys = dynamodb_keys(env)?;
        s.key = read::<KeySource>(env, "SQS_CLAIM_KEY")?;
        s.envelope = read::<Envelope>(env, "SQS_CLAIM_ENVELOPE")?.unwrap_or(s.envelope);
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
        s.namespace = read::<Text>(env, "SQS_CLAIM_NAMESPACE")?.map(|t| t.0);
        let secs = |var| Ok::<_, Error>(read::<Whole<Seconds, 1>>(env, var)?.map(|w| w.duration()));
        let millis =
            |var| Ok::<_, Error>(read::<Whole<Millis, 0>>(env, var)?.map(|w| w.duration()));
        let positive_millis =
            |var| Ok::<_, Error>(read::<Whole<Millis, 1>>(env, var)?.map(|w| w.duration()));
        s.ttl = or(secs("SQS_CLAIM_TTL_SECS")?, s.ttl);
        s.lease = or(secs("SQS_CLAIM_LEASE_SECS")?, s.lease);
        s.lease_at_least = secs("SQS_CLAIM_LEASE_AT_LEAST_SECS")?;
        s.concurrency = read::<Whole<Messages, 1>>(env, "SQS_CLAIM_CONCURRENCY")?
            .map(|n| n.usize())
            .transpose()
            .map_err(|e| invalid("SQS_CLAIM_CONCURRENCY", e))?;
        s.warm_cache = read::<Whole<Entries, 0>>(env, "SQS_CLAIM_WARM_CACHE")?
            .map(|n| n.usize())
            .transpose()
            .map_err(|e| invalid("SQS_CLAIM_WARM_CACHE", e))?
            .filter(|n| *n > 0);
        s.fifo = read::<FifoMode>(env, "SQS_CLAIM_FIFO_MODE")?.unwrap_or(s.fifo);
        s.store_unavailable = read::<StoreUnavailable>(env, "SQS_CLAIM_STORE_UNAVAILABLE")?
            .unwrap_or(s.store_unavailable);
        s.deadline_margin = or(millis("SQS_CLAIM_DEADLINE_MARGIN_MS")?, s.deadline_margin);
        s.answer_reserve = or(millis("SQS_CLAIM_ANSWER_RESERVE_MS")?, s.answer_reserve);
        s.handler_timeout = positive_millis("SQS_CLAIM_HANDLER_TIMEOUT_MS")?;
        s.startup_timeout = or(
            positive_millis("SQS_CLAIM_STARTUP_TIMEOUT_MS")?,
            s.startup_timeout,
        );
        if let Some(namespace) = read::<MetricsNamespace>(env, "SQS_CLAIM_METRICS_NAMESPACE")? {
            s.metrics_namespace = namespace.0;
        }
        let queue = |var| Ok::<_, Error>(read::<QueueUrl>(env, var)?.map(|q| q.0));
        s.failure_queue_url = queue("SQS_CLAIM_FAILURE_QUEUE_URL")?;
        s.source_queue_url = queue("SQS_CLAIM_SOURCE_QUEUE_URL")?;
        s.max_receives = read::<Whole<Receives, 1>>(env, "SQS_CLAIM_MAX_RECEIVES")?
            .map(|n| u32::try_from(n.get()).map_err(|_| format!("\"{}\" is too large", n.get())))
            .transpose()
            .map_err(|e| invalid("SQS_CLAIM_MAX_RECEIVES", e))?
            .unwrap_or(s.max_receives);
        #[cfg(feature = "sqs")]
        s.read_dead_letter_at_once(env)?;
        s.backoff = read::backoff(env)?;
        s.backoff_for = read::<BackoffFor>(env, "SQS_CLAIM_BACKOFF_FOR")?
            .unwrap_or_default()
            .0;
        #[cfg(feature = "powertools")]
        s.read_powertools(env)?;
        #[cfg(feature = "s3")]
        s.read_large_messages(env)?;
        Ok(s)
    }

    /// The `SQS_CLAIM_LARGE_MESSAGE*` and `SQS_CLAIM_OFFLOAD_*` variables.
    #[cfg(feature = "s3")]
    fn read_large_messages(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), Error> {
        self.large_messages = read::<OnOff>(env, "SQS_CLAIM_LARGE_MESSAGES")?.is_some_and(|o| o.0);
        if let Some(max) = read::<Whole<Bytes, 1>>(env, "SQS_CLAIM_LARGE_MESSAGE_MAX_BYTES")? {
            self.large_message_max_bytes = max.get();
        }
        self.large_message_delete =
            read::<OnOff>(env, "SQS_CLAIM_LARGE_MESSAGE_DELETE")?.is_some_and(|o| o.0);
        if self.large_message_delete && !self.large_messages {
            return Err(invalid(
                "SQS_CLAIM_LARGE_MESSAGE_DELETE",
                "it deletes the objects of the pointers read: set SQS_CLAIM_LARGE_MESSAGES=on too",
            ));
        }
        self.large_message_buckets = read::<Text>(env, "SQS_CLAIM_LARGE_MESSAGE_BUCKETS")?
            .map(|t| {
                t.0.split(',')
                    .map(str::trim)
                    .filter(|b| !b.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if !self.large_message_buckets.is_empty() && !self.large_messages {
            return Err(invalid(
                "SQS_CLAIM_LARGE_MESSAGE_BUCKETS",
                "it limits the buckets the pointers read may name: set SQS_CLAIM_LARGE_MESSAGES=on too",
            ));
        }
        self.offload_bucket = read::<Text>(env, "SQS_CLAIM_OFFLOAD_BUCKET")?.map(|t| t.0);
        if let Some(over) = read::<Whole<Bytes, 1>>(env, "SQS_CLAIM_OFFLOAD_OVER_BYTES")? {
            self.offload_over_bytes = over
                .usize()
                .map_err(|e| invalid("SQS_CLAIM_OFFLOAD_OVER_BYTES", e))?;
        }
        Ok(())
    }

    /// `SQS_CLAIM_DEAD_LETTER_AT_ONCE`, which sends to the failure queue: it needs
    /// `SQS_CLAIM_FAILURE_QUEUE_URL` (read before it).
    #[cfg(feature = "sqs")]
    fn read_dead_letter_at_once(
        &mut self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), Error> {
        const VAR: &str = "SQS_CLAIM_DEAD_LETTER_AT_ONCE";
        if let Some(permanent) = read::<Permanent>(env, VAR)? {
            if !permanent.is_none() && self.failure_queue_url.is_none() {
                return Err(invalid(
                    VAR,
                    "it sends to the failure queue: set SQS_CLAIM_FAILURE_QUEUE_URL too",
                ));
            }
            self.dead_letter_at_once = permanent;
        }
        Ok(())
    }

    /// The `SQS_CLAIM_POWERTOOLS_*` variables ([`powertools()`]).
    #[cfg(feature = "powertools")]
    fn read_powertools(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), Error> {
        // The function name unfiltered: Powertools keeps an empty AWS_LAMBDA_FUNCTION_NAME.
        self.powertools = powertools(env, env("AWS_LAMBDA_FUNCTION_NAME"))?;
        Ok(())
    }

    /// The store the `sqs-claim` CLI uses: [`Settings::store`], else
    /// `dynamodb:`[`Settings::table`], else the SQLite file `.sqs-claim/claims.db` (created on
    /// demand, so a second run of the same event finds every message already done); with
    /// [`Settings::dynamodb_keys`] applied to either's DynamoDB table. With feature `admin`.
    #[cfg(any(feature = "admin", test))]
    #[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
    pub fn cli_store(&self) -> Result<StoreUrl, Error> {
        let url = match (&self.store, &self.table) {
            (Some(url), _) => url.clone(),
            (None, Some(table)) => StoreUrl::parse(&format!("dynamodb:{table}"))?,
            (None, None) => StoreUrl::Sqlite(std::path::PathBuf::from(DEFAULT_CLI_STORE)),
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

/// The claims table's key layout from `SQS_CLAIM_DYNAMODB_PARTITION_KEY` and
/// `SQS_CLAIM_DYNAMODB_SORT_KEY`, checked together (`key_layout`).
fn dynamodb_keys(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<DynamoDbKeySchema>, Error> {
    let (partition, sort) = (
        read::<Text>(env, PARTITION_KEY_VAR)?,
        read::<Text>(env, SORT_KEY_VAR)?,
    );
    let (partition_var, sort_var) = (
        format!("environment variable {PARTITION_KEY_VAR}"),
        format!("environment variable {SORT_KEY_VAR}"),
    );
    key_layout(
        partition
            .as_ref()
            .map(|v| (partition_var.as_str(), v.0.as_str())),
        sort.as_ref().map(|v| (sort_var.as_str(), v.0.as_str())),
    )
}

/// A `Config` error for the first variable of [`VARIABLES`] that is set (to anything but
/// `off`) in a build lacking a feature it needs ([`Variable::missing_feature`]): a setting a
/// build cannot honour stops the start (the failure queue unset would leave every poison
/// message failing; Powertools' keys unset, another consumer's table misread).
fn refuse_missing_features(env: &dyn Fn(&str) -> Option<String>) -> Result<(), Error> {
    for variable in VARIABLES {
        let Some(feature) = variable.missing_feature() else {
            continue;
        };
        let Some(value) = read::<Text>(env, variable.name)? else {
            continue;
        };
        if !value.0.eq_ignore_ascii_case("off") {
            return Err(invalid(
                variable.name,
                format!(
                    "it needs the `{feature}` feature of sqs-claim, which this build lacks \
                     (build with `--features {feature}`, or unset it)"
                ),
            ));
        }
    }
    Ok(())
}

/// Whether this build of sqs-claim has `feature` (one of its Cargo features; a name it does
/// not have is not enabled).
pub(crate) fn feature_enabled(feature: &str) -> bool {
    const ENABLED: &[&str] = &[
        #[cfg(feature = "dynamodb")]
        "dynamodb",
        #[cfg(feature = "sqs")]
        "sqs",
        #[cfg(feature = "s3")]
        "s3",
        #[cfg(feature = "sqlite")]
        "sqlite",
        #[cfg(feature = "redis")]
        "redis",
        #[cfg(feature = "postgres")]
        "postgres",
        #[cfg(feature = "apigw")]
        "apigw",
        #[cfg(feature = "logging")]
        "logging",
        #[cfg(feature = "settings")]
        "settings",
        #[cfg(feature = "streams")]
        "streams",
        #[cfg(feature = "powertools")]
        "powertools",
    ];
    ENABLED.contains(&feature)
}
