//! [`DynamoDbStore`]: the production store, one conditional write per claim.
//!
//! # Table
//!
//! A table with a string partition key (`id` by default) and TTL enabled on `expiration`.
//! Attribute names are those of Powertools for AWS Lambda idempotency tables, plus the owner
//! token, and can be changed with [`DynamoDbStore::with_attributes`]:
//!
//! | attribute                | type | meaning |
//! |--------------------------|------|---------|
//! | `id`                     | S    | the idempotency key (hashed if longer than 2048 bytes) |
//! | `expiration`             | N    | epoch **seconds**: the TTL attribute, and the record's end |
//! | `in_progress_expiration` | N    | epoch **milliseconds**: the claimant's lease (removed on completion) |
//! | `status`                 | S    | `INPROGRESS` or `COMPLETED` |
//! | `validation`             | S    | the payload fingerprint, if any (at most [`MAX_FINGERPRINT_BYTES`]) |
//! | `claim_token`            | S    | the owner token that fences completion and release |
//! | `data`                   | S    | the handler's response, exactly as given, if the completion stored one (`""` for an empty one) |
//!
//! # Single-table layouts
//!
//! The claims can live in a table shared with business items, under a partition key and a sort
//! key whose values are made from the claim key by templates ([`DynamoDbKeySchema`],
//! [`DynamoDbStore::with_key_schema`]): `pk = "CLAIM#{key}", sk = "CLAIM"` gives each claim its
//! own partition beside items of other types; `pk = "idempotency#<function>", sk = "{key}"` is
//! Powertools' own sort-key layout. `{key}` is the full claim key, hashed to `sha256:<hex>`
//! when the value would pass DynamoDB's limit for the attribute (2048 bytes for a partition
//! key, 1024 for a sort key). At least one template must carry `{key}`. A fixed partition
//! template puts every claim under one partition key, which DynamoDB serves at about 1,000
//! write units a second: a hot partition that caps the consumer. Every request names the whole
//! primary key, so claims, completions, releases and the operator's deletes touch only the
//! claim's own item, never a business item beside it. [`StoreAdmin::init`] creates the
//! composite key.
//!
//! # The response and the 400 KB limit
//!
//! A completion stores the response in the same conditional write that marks the record
//! completed (the `UpdateItem`, or the update inside the `TransactWriteItems`), so a stale
//! claimant never writes one, and a repeated completion by the same token keeps the first.
//! Claims refused with the old item, cancelled one-shot writes and `inspect` return it.
//!
//! DynamoDB refuses an item over 400 KB (409,600 bytes, attribute names and values in UTF-8).
//! [`Capabilities::max_response_bytes`] is that less the most every other attribute of the record
//! can take (each key attribute at its limit or fixed template, numbers at 21 bytes, the
//! fingerprint at its cap, a 36-byte token, every name as configured): **406,375 bytes** with
//! the default names and layout, so a response of that length fits for every key. A longer
//! response is refused before anything is sent ([`ErrorKind::ResponseTooLarge`], nothing
//! committed, the claim still held); if DynamoDB itself refuses the item's size (an item that
//! carries attributes of someone else's), the completion fails with the same kind. For larger
//! results, store a reference to them.
//!
//! # Round trips
//!
//! * claim: one `PutItem` with the condition `attribute_not_exists(id) OR expiration <= :now_s
//!   OR (status = INPROGRESS AND in_progress_expiration <= :now_ms)` and
//!   `ReturnValuesOnConditionCheckFailure = ALL_OLD`, so a refused claim tells "completed" from
//!   "held elsewhere" without a second read. TTL deletion is lazy (up to days), so the
//!   condition compares the expiry itself: an expired item still present behaves as absent.
//!   The claim writes `expiration` as `max(expires_at, lease_until)`
//!   ([`ClaimRequest::record_expires_at`]) rounded up to a second, so TTL deletion never
//!   removes an item whose lease is live.
//! * complete without effects: one `UpdateItem` conditional on the token and `INPROGRESS`,
//!   writing the response (if any) with the status.
//! * complete with effects: one `TransactWriteItems` holding that same conditional update and
//!   the handler's writes (at most 99), all or nothing. A cancelled transaction is reported
//!   with the reason of every refused action.
//! * release: one `DeleteItem` conditional on the token and `INPROGRESS`.
//! * the operator's methods: `inspect` is one strongly consistent `GetItem`; `force_release`
//!   and `forget` are one `DeleteItem` conditional on the status (`INPROGRESS`, `COMPLETED`).
//!
//! # Timeouts and retries
//!
//! [`DynamoDbStore::from_env`] builds its client with explicit bounds ([`DynamoDbSettings`]):
//! a connect timeout, a timeout per attempt, a timeout for the whole call (retries included)
//! and the SDK's standard retry mode with a fixed number of attempts. The SDK retries what it
//! can see (throttling, 5xx, connection errors, timeouts), so the store says
//! [`Capabilities::retries_internally`] and the processor adds no loop of its own on top. A
//! client you build yourself ([`DynamoDbStore::new`]) keeps whatever you configured on it.
//!
//! Errors say how far a request got: "could not connect" (nothing was sent), "sent, but no
//! answer" (the write may or may not have been applied: the claim protocol makes either safe,
//! but an operator reading the log should not look for a network outage at the wrong end), or
//! an unreadable answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TableDescription, TableStatus,
    TimeToLiveSpecification, TimeToLiveStatus, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::waiters::table_exists::WaitUntilTableExistsError as WaiterError;

use super::{
    Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects,
    Inspected, OneShotWrite, Status, StoreAdmin, StoredResponse, epoch_millis, from_epoch_millis,
    from_epoch_seconds,
};
use crate::{Error, ErrorKind};

/// DynamoDB's limit on a partition key value, in bytes.
pub const MAX_KEY_BYTES: usize = 2048;

/// DynamoDB's limit on a sort key value, in bytes.
pub const MAX_SORT_KEY_BYTES: usize = 1024;

/// DynamoDB's limit on one item, in bytes: 400 KB, attribute names and values (UTF-8) included.
pub const MAX_ITEM_BYTES: usize = 409_600;

/// The longest payload fingerprint a claim stores, in bytes. A fingerprint is a hash (the
/// processor's is 64 hex digits, Powertools' 32); a longer one is refused before anything is
/// sent, so that [`Capabilities::max_response_bytes`] can hold
/// for every record.
pub const MAX_FINGERPRINT_BYTES: usize = 1024;

/// The most a number attribute takes in an item: DynamoDB counts 1 byte per two significant
/// digits plus 1, and an `i64` has at most 19 digits (38 would take 20): 21 is a bound.
const MAX_NUMBER_BYTES: usize = 21;

/// The owner token this store writes: a hyphenated UUID.
const TOKEN_BYTES: usize = uuid::fmt::Hyphenated::LENGTH;

/// The longest status this store writes (`INPROGRESS`).
const MAX_STATUS_BYTES: usize = 10;

/// What a hashed key takes in a key attribute: `sha256:` and 64 hex digits.
const HASHED_KEY_BYTES: usize = "sha256:".len() + 64;

/// The most effects one completion can carry: `TransactWriteItems` takes 100 actions, one of
/// which is the completion itself.
pub const MAX_EFFECTS: usize = 99;

/// Attribute names of the claims table. The defaults match Powertools idempotency tables.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DynamoDbAttributes {
    /// Partition key (S). Default `id`.
    pub key: String,
    /// Record expiry in epoch seconds, the TTL attribute (N). Default `expiration`.
    pub expiration: String,
    /// Lease of an in-progress claim in epoch milliseconds (N). Default `in_progress_expiration`.
    pub lease: String,
    /// `INPROGRESS` / `COMPLETED` (S). Default `status`.
    pub status: String,
    /// Payload fingerprint (S). Default `validation`.
    pub fingerprint: String,
    /// Owner token (S). Default `claim_token`.
    pub token: String,
    /// The handler's stored response, exactly as given (S). Default `data`, as Powertools names
    /// it. Absent when the completion stored no response; an empty response is an empty string.
    pub data: String,
}

impl Default for DynamoDbAttributes {
    fn default() -> Self {
        DynamoDbAttributes {
            key: "id".into(),
            expiration: "expiration".into(),
            lease: "in_progress_expiration".into(),
            status: "status".into(),
            fingerprint: "validation".into(),
            token: "claim_token".into(),
            data: "data".into(),
        }
    }
}

impl DynamoDbAttributes {
    /// The default names, to change some of them:
    /// `DynamoDbAttributes::new().with_key("pk")`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the partition key attribute name.
    pub fn with_key(mut self, name: impl Into<String>) -> Self {
        self.key = name.into();
        self
    }

    /// Sets the expiry (TTL) attribute name.
    pub fn with_expiration(mut self, name: impl Into<String>) -> Self {
        self.expiration = name.into();
        self
    }

    /// Sets the lease attribute name.
    pub fn with_lease(mut self, name: impl Into<String>) -> Self {
        self.lease = name.into();
        self
    }

    /// Sets the status attribute name.
    pub fn with_status(mut self, name: impl Into<String>) -> Self {
        self.status = name.into();
        self
    }

    /// Sets the fingerprint attribute name.
    pub fn with_fingerprint(mut self, name: impl Into<String>) -> Self {
        self.fingerprint = name.into();
        self
    }

    /// Sets the owner token attribute name.
    pub fn with_token(mut self, name: impl Into<String>) -> Self {
        self.token = name.into();
        self
    }

    /// Sets the stored response attribute name.
    pub fn with_data(mut self, name: impl Into<String>) -> Self {
        self.data = name.into();
        self
    }

    /// The names of the attributes that are not part of the key, with what each holds.
    fn non_key(&self) -> [(&str, &'static str); 6] {
        [
            (&self.expiration, "expiration"),
            (&self.lease, "lease"),
            (&self.status, "status"),
            (&self.fingerprint, "fingerprint"),
            (&self.token, "token"),
            (&self.data, "data"),
        ]
    }

    fn names(&self) -> HashMap<String, String> {
        HashMap::from([
            ("#id".to_owned(), self.key.clone()),
            ("#exp".to_owned(), self.expiration.clone()),
            ("#lease".to_owned(), self.lease.clone()),
            ("#status".to_owned(), self.status.clone()),
            ("#token".to_owned(), self.token.clone()),
        ])
    }
}

/// The placeholder a key template replaces with the claim key.
pub const KEY_PLACEHOLDER: &str = "{key}";

/// One key attribute of the claims table: its name, and the template its value is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoDbKeyAttribute {
    name: String,
    template: String,
}

impl DynamoDbKeyAttribute {
    /// The attribute's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The template of its value: fixed text, with [`KEY_PLACEHOLDER`] (`{key}`) at most once.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Whether the value carries the claim key.
    pub fn has_key(&self) -> bool {
        self.template.contains(KEY_PLACEHOLDER)
    }

    /// The value for `key`, at most `limit` bytes: the template with `{key}` replaced by the
    /// key, or by `sha256:<hex>` of it when the key would not fit. Deterministic, so every
    /// worker maps a key to the same item.
    fn value(&self, key: &str, limit: usize) -> String {
        match self.template.split_once(KEY_PLACEHOLDER) {
            None => self.template.clone(),
            Some((before, after)) if before.len() + key.len() + after.len() <= limit => {
                format!("{before}{key}{after}")
            }
            Some((before, after)) => format!(
                "{before}sha256:{}{after}",
                crate::key::sha256_hex(key.as_bytes())
            ),
        }
    }

    /// The most its name and value take in an item.
    fn max_bytes(&self, limit: usize) -> usize {
        self.name.len()
            + if self.has_key() {
                limit
            } else {
                self.template.len()
            }
    }

    /// Checks the template of a key attribute whose values DynamoDB bounds at `limit` bytes.
    fn validate(&self, role: &str, limit: usize) -> Result<(), Error> {
        let bad = |why: String| {
            Err(Error::new(
                ErrorKind::Config,
                format!(
                    "DynamoDB key schema: the {role} key {:?} with template {:?}: {why}",
                    self.name, self.template
                ),
            ))
        };
        if self.name.is_empty() {
            return bad("the attribute name is empty".into());
        }
        if self.template.is_empty() {
            return bad("the template is empty (DynamoDB refuses an empty key value)".into());
        }
        if self.template.matches(KEY_PLACEHOLDER).count() > 1 {
            return bad(format!("{KEY_PLACEHOLDER} may appear at most once"));
        }
        let fixed = self.template.replacen(KEY_PLACEHOLDER, "", 1);
        if fixed.contains(['{', '}']) {
            return bad(format!(
                "the only placeholder is {KEY_PLACEHOLDER} (a brace elsewhere is a typo)"
            ));
        }
        if self.has_key() && fixed.len() + HASHED_KEY_BYTES > limit {
            return bad(format!(
                "its fixed text is {} bytes: with a hashed key ({HASHED_KEY_BYTES} bytes) it \
                 would pass DynamoDB's {limit}-byte limit",
                fixed.len()
            ));
        }
        if !self.has_key() && fixed.len() > limit {
            return bad(format!("it passes DynamoDB's {limit}-byte limit"));
        }
        Ok(())
    }
}

/// The claims table's primary key: a partition key, optionally a sort key, and how their
/// values are made from the claim key (templates with `{key}`).
///
/// The default is the Powertools layout: a single partition key `id` holding the key itself
/// (hashed past 2048 bytes). A single-table design puts claims beside the business items:
///
/// ```
/// use sqs_claim::store::dynamodb::DynamoDbKeySchema;
///
/// // One item per claim, under its own partition, beside the business items of other types.
/// let single_table = DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM");
/// assert!(single_table.validate().is_ok());
/// // Powertools' sort-key layout: every claim of a function under one partition key.
/// let sorted = DynamoDbKeySchema::partition("id", "idempotency#payments")
///     .with_sort("sort_key", "{key}");
/// assert!(sorted.validate().is_ok());
/// // No template carries the key: every claim would be the same item.
/// let broken = DynamoDbKeySchema::partition("pk", "CLAIM").with_sort("sk", "CLAIM");
/// assert!(broken.validate().is_err());
/// ```
///
/// `{key}` is replaced by the full claim key, or, when the value would pass DynamoDB's limit
/// (2048 bytes for a partition key, 1024 for a sort key), by `sha256:<hex>` of it: each key
/// attribute always fits. A fixed partition template (the Powertools sort-key layout) puts
/// every claim under one partition key, and DynamoDB serves one partition key at about 1,000
/// write units a second: a hot partition that caps the whole consumer's throughput.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoDbKeySchema {
    partition: DynamoDbKeyAttribute,
    sort: Option<DynamoDbKeyAttribute>,
}

impl Default for DynamoDbKeySchema {
    fn default() -> Self {
        DynamoDbKeySchema::partition("id", KEY_PLACEHOLDER)
    }
}

impl DynamoDbKeySchema {
    /// A table keyed by the partition key `name` alone, its values made from `template`.
    pub fn partition(name: impl Into<String>, template: impl Into<String>) -> Self {
        DynamoDbKeySchema {
            partition: DynamoDbKeyAttribute {
                name: name.into(),
                template: template.into(),
            },
            sort: None,
        }
    }

    /// Adds the sort key `name`, its values made from `template`.
    pub fn with_sort(mut self, name: impl Into<String>, template: impl Into<String>) -> Self {
        self.sort = Some(DynamoDbKeyAttribute {
            name: name.into(),
            template: template.into(),
        });
        self
    }

    /// The partition key.
    pub fn partition_key(&self) -> &DynamoDbKeyAttribute {
        &self.partition
    }

    /// The sort key, if the table has one.
    pub fn sort_key(&self) -> Option<&DynamoDbKeyAttribute> {
        self.sort.as_ref()
    }

    /// Checks the schema: names present and distinct, templates within DynamoDB's key limits
    /// (with room for a hashed key), `{key}` at most once each and in at least one of them
    /// (otherwise every claim would be the same item). Fails with
    /// [`ErrorKind::Config`].
    pub fn validate(&self) -> Result<(), Error> {
        self.partition.validate("partition", MAX_KEY_BYTES)?;
        if let Some(sort) = &self.sort {
            sort.validate("sort", MAX_SORT_KEY_BYTES)?;
            if sort.name == self.partition.name {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "DynamoDB key schema: the partition and sort keys are both named {:?}",
                        sort.name
                    ),
                ));
            }
        }
        if !self.partition.has_key() && !self.sort.as_ref().is_some_and(|s| s.has_key()) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "DynamoDB key schema: no template contains {KEY_PLACEHOLDER} (partition \
                     {:?} = {:?}{}): every claim would be the same item",
                    self.partition.name,
                    self.partition.template,
                    self.sort
                        .as_ref()
                        .map(|s| format!(", sort {:?} = {:?}", s.name, s.template))
                        .unwrap_or_default()
                ),
            ));
        }
        Ok(())
    }

    /// The primary key of `key`'s item: each key attribute with its value.
    pub fn item_key(&self, key: &str) -> HashMap<String, AttributeValue> {
        let mut item = HashMap::with_capacity(2);
        item.insert(
            self.partition.name.clone(),
            AttributeValue::S(self.partition.value(key, MAX_KEY_BYTES)),
        );
        if let Some(sort) = &self.sort {
            item.insert(
                sort.name.clone(),
                AttributeValue::S(sort.value(key, MAX_SORT_KEY_BYTES)),
            );
        }
        item
    }

    /// The most the key attributes take in an item, names included.
    fn max_bytes(&self) -> usize {
        self.partition.max_bytes(MAX_KEY_BYTES)
            + self
                .sort
                .as_ref()
                .map_or(0, |s| s.max_bytes(MAX_SORT_KEY_BYTES))
    }

    /// The key attributes, partition first.
    fn attributes(&self) -> impl Iterator<Item = &DynamoDbKeyAttribute> {
        std::iter::once(&self.partition).chain(self.sort.as_ref())
    }
}

/// How the client [`DynamoDbStore::from_env_with`] builds bounds its calls.
///
/// The defaults fit a Lambda invocation. A DynamoDB write answers in single-digit
/// milliseconds; an attempt that has not answered in 2 s is lost, not slow, and is better
/// retried on a fresh connection. Three attempts would then take up to 6 s, so the operation
/// timeout (4 s) cuts the whole call first: a store that went dark costs a message at most 4 s,
/// well inside the default 30 s function timeout, and leaves time to answer the batch.
/// Connecting takes a round trip or two inside a region: 1 s is generous.
///
/// ```
/// use std::time::Duration;
/// use sqs_claim::store::dynamodb::DynamoDbSettings;
///
/// let settings = DynamoDbSettings::default()
///     .with_attempt_timeout(Duration::from_millis(500))
///     .with_max_attempts(2);
/// assert_eq!(settings.operation_timeout, Duration::from_secs(4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DynamoDbSettings {
    /// How long opening a connection may take. Default 1 s.
    pub connect_timeout: Duration,
    /// How long one attempt may take, from sending to the whole answer. Default 2 s.
    pub attempt_timeout: Duration,
    /// How long a whole call may take, every attempt and backoff included. Default 4 s.
    pub operation_timeout: Duration,
    /// Attempts per call, the first included (standard retry mode; 1 disables the SDK's
    /// retries). Default 3.
    pub max_attempts: u32,
    /// The SDK's first backoff (it adds full jitter). Default 50 ms.
    pub initial_backoff: Duration,
    /// The SDK's longest backoff. Default 1 s.
    pub max_backoff: Duration,
}

impl Default for DynamoDbSettings {
    fn default() -> Self {
        DynamoDbSettings {
            connect_timeout: Duration::from_secs(1),
            attempt_timeout: Duration::from_secs(2),
            operation_timeout: Duration::from_secs(4),
            max_attempts: 3,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl DynamoDbSettings {
    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the timeout of one attempt.
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Sets the timeout of a whole call, retries included.
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Sets the attempts per call (values below 1 count as 1).
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets the SDK's first and longest backoff.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// Applies these settings to an SDK configuration builder.
    fn apply(&self, builder: aws_sdk_dynamodb::config::Builder) -> aws_sdk_dynamodb::Config {
        use aws_sdk_dynamodb::config::retry::RetryConfig;
        use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
        builder
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(self.max_attempts.max(1))
                    .with_initial_backoff(self.initial_backoff)
                    .with_max_backoff(self.max_backoff),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(self.connect_timeout)
                    .operation_attempt_timeout(self.attempt_timeout)
                    .operation_timeout(self.operation_timeout)
                    .build(),
            )
            .build()
    }
}

/// A claim store on a DynamoDB table. Cheap to clone (the SDK client is an `Arc`).
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    client: Client,
    table: String,
    attrs: DynamoDbAttributes,
    /// Behind an `Arc`: the store is cloned per ledger and task, and kept small.
    schema: Arc<DynamoDbKeySchema>,
    /// Whether `schema` was set by [`DynamoDbStore::with_key_schema`] (otherwise it is the
    /// single partition key `attrs.key`).
    schema_set: bool,
}

impl DynamoDbStore {
    /// A store on `table`, with the default attribute names.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        let attrs = DynamoDbAttributes::default();
        DynamoDbStore {
            client,
            table: table.into(),
            schema: Arc::new(DynamoDbKeySchema::partition(
                attrs.key.clone(),
                KEY_PLACEHOLDER,
            )),
            attrs,
            schema_set: false,
        }
    }

    /// A store on `table` with a client configured from the standard AWS environment
    /// (region, credentials, and `AWS_ENDPOINT_URL_DYNAMODB` for DynamoDB Local), bounded by
    /// the default [`DynamoDbSettings`] (see there for the figures and why).
    pub async fn from_env(table: impl Into<String>) -> Self {
        Self::from_env_with(table, DynamoDbSettings::default()).await
    }

    /// [`from_env`](Self::from_env) with other timeouts and retries. They replace whatever the
    /// environment says (`AWS_MAX_ATTEMPTS`, `AWS_RETRY_MODE`): the store's bounds are part of
    /// the invocation's time budget, and must not change with a variable nobody remembers.
    pub async fn from_env_with(table: impl Into<String>, settings: DynamoDbSettings) -> Self {
        // The standard environment, with the HTTPS client on bundled roots (`crate::aws`).
        let config = crate::aws::load_config().await;
        Self::from_sdk_config(&config, table, settings)
    }

    /// A store on `table` with a client built from a shared AWS configuration (region,
    /// credentials, endpoint) and bounded by `settings`, which replace the configuration's
    /// own retry and timeout settings.
    pub fn from_sdk_config(
        config: &aws_config::SdkConfig,
        table: impl Into<String>,
        settings: DynamoDbSettings,
    ) -> Self {
        let config = settings.apply(aws_sdk_dynamodb::config::Builder::from(config));
        Self::new(Client::from_conf(config), table)
    }

    /// Uses other attribute names. Without a key schema ([`with_key_schema`]), the table's
    /// single partition key is `attrs.key`; with one, the schema names the keys and
    /// [`attributes`](Self::attributes)`().key` reports its partition key. Set the attributes
    /// first: [`with_key_schema`] checks the key names against them.
    ///
    /// [`with_key_schema`]: Self::with_key_schema
    pub fn with_attributes(mut self, mut attrs: DynamoDbAttributes) -> Self {
        if self.schema_set {
            attrs.key = self.schema.partition.name.clone();
        } else {
            self.schema = Arc::new(DynamoDbKeySchema::partition(
                attrs.key.clone(),
                KEY_PLACEHOLDER,
            ));
        }
        self.attrs = attrs;
        self
    }

    /// Uses the primary key `schema` (a partition key and an optional sort key, their values
    /// made from templates: see [`DynamoDbKeySchema`]), for a single-table design or the
    /// Powertools sort-key layout.
    ///
    /// Fails with [`ErrorKind::Config`] if the schema is invalid
    /// ([`DynamoDbKeySchema::validate`]) or a key attribute has the name of one of the
    /// record's other attributes ([`DynamoDbAttributes`]).
    ///
    /// ```
    /// # fn demo(client: sqs_claim::aws_sdk_dynamodb::Client) -> Result<(), sqs_claim::Error> {
    /// use sqs_claim::DynamoDbStore;
    /// use sqs_claim::store::dynamodb::DynamoDbKeySchema;
    ///
    /// let store = DynamoDbStore::new(client, "app")
    ///     .with_key_schema(DynamoDbKeySchema::partition("pk", "CLAIM#{key}").with_sort("sk", "CLAIM"))?;
    /// # Ok(()) }
    /// ```
    pub fn with_key_schema(mut self, schema: DynamoDbKeySchema) -> Result<Self, Error> {
        schema.validate()?;
        for key in schema.attributes() {
            if let Some((_, what)) = self.attrs.non_key().iter().find(|(n, _)| *n == key.name) {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "DynamoDB key schema: the key attribute {:?} is also the record's {what}                          attribute: rename one of them",
                        key.name
                    ),
                ));
            }
        }
        self.attrs.key = schema.partition.name.clone();
        self.schema = Arc::new(schema);
        self.schema_set = true;
        Ok(self)
    }

    /// The primary key schema in use.
    pub fn key_schema(&self) -> &DynamoDbKeySchema {
        &self.schema
    }

    /// The primary key of the item that holds `key`'s claim (to read it, or to write a business
    /// item beside it, under the same layout).
    pub fn item_key(&self, key: &str) -> HashMap<String, AttributeValue> {
        self.schema.item_key(key)
    }

    /// The SDK client (to build effects on other tables with the same configuration).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The attribute names in use.
    pub fn attributes(&self) -> &DynamoDbAttributes {
        &self.attrs
    }

    /// The stored partition key for `key` under the default layout: the key itself, or
    /// `sha256:<hex>` of it when it is longer than DynamoDB allows (what
    /// [`item_key`](Self::item_key) writes; the tests compare the two).
    #[cfg(test)]
    fn storage_key(key: &str) -> String {
        if key.len() > MAX_KEY_BYTES {
            format!("sha256:{}", crate::key::sha256_hex(key.as_bytes()))
        } else {
            key.to_owned()
        }
    }

    /// The `sqs-claim init` that creates this store's table: `sqs-claim init --store
    /// dynamodb:TABLE`, with `--partition-key` and `--sort-key` whenever the key layout is not
    /// the default, so the command creates the table this store looks for. The hint of
    /// [`check_ready`](StoreAdmin::check_ready)'s error for a missing table.
    pub fn init_command(&self) -> String {
        let mut command = format!("sqs-claim init --store dynamodb:{}", self.table);
        if *self.schema != DynamoDbKeySchema::default() {
            let (partition, sort) = layout_values(&self.schema);
            command.push_str(" --partition-key ");
            command.push_str(&shell_word(&partition));
            if let Some(sort) = sort {
                command.push_str(" --sort-key ");
                command.push_str(&shell_word(&sort));
            }
        }
        command
    }

    fn key_value(&self, key: &str) -> HashMap<String, AttributeValue> {
        self.schema.item_key(key)
    }

    /// The most a record takes in an item besides its response's value: every attribute's
    /// name, and the longest value of each (the key attributes at DynamoDB's key limits, or
    /// their fixed templates; numbers at 21 bytes; the fingerprint at its cap). The lease is
    /// counted although a completion removes it.
    fn record_overhead_bytes(&self) -> usize {
        let a = &self.attrs;
        self.schema.max_bytes()
            + a.expiration.len()
            + MAX_NUMBER_BYTES
            + a.lease.len()
            + MAX_NUMBER_BYTES
            + a.status.len()
            + MAX_STATUS_BYTES
            + a.fingerprint.len()
            + MAX_FINGERPRINT_BYTES
            + a.token.len()
            + TOKEN_BYTES
            + a.data.len()
    }

    /// Refuses a fingerprint past [`MAX_FINGERPRINT_BYTES`] before anything is sent.
    fn check_fingerprint(req: &ClaimRequest<'_>) -> Result<(), Error> {
        match req.fingerprint {
            Some(fp) if fp.len() > MAX_FINGERPRINT_BYTES => Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "the payload fingerprint for key {:?} is {} bytes: the DynamoDB store keeps at most {MAX_FINGERPRINT_BYTES} (a fingerprint is a hash); nothing was sent",
                    req.key,
                    fp.len()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn parse_record(&self, item: &HashMap<String, AttributeValue>) -> Option<Parsed> {
        let status = item
            .get(&self.attrs.status)
            .and_then(|v| v.as_s().ok())
            .and_then(|s| Status::parse(s))?;
        let number = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<i64>().ok())
        };
        Some(Parsed {
            record: ClaimRecord {
                status,
                expires_at: number(&self.attrs.expiration)
                    .map(from_epoch_seconds)
                    .unwrap_or(SystemTime::UNIX_EPOCH),
                lease_until: number(&self.attrs.lease).map(from_epoch_millis),
                fingerprint: item
                    .get(&self.attrs.fingerprint)
                    .and_then(|v| v.as_s().ok())
                    .cloned(),
                // A completed record's response; an in-progress record has none.
                response: (status == Status::Completed)
                    .then(|| item.get(&self.attrs.data).and_then(|v| v.as_s().ok()))
                    .flatten()
                    .map(|text| StoredResponse::new(text.as_str())),
            },
            token: item
                .get(&self.attrs.token)
                .and_then(|v| v.as_s().ok())
                .cloned(),
        })
    }

    /// Classifies the item returned with a refused claim.
    ///
    /// The item may be our own: the SDK retries a `PutItem` whose answer was lost (a timeout, a
    /// 500 after the write), and the retry is refused by the record its first attempt wrote.
    /// That record carries this claim's token, so the claim is ours; calling it "held
    /// elsewhere" would fail the message until the lease lapsed (and stall a FIFO group).
    fn refused_claim(
        &self,
        token: ClaimToken,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> Claim {
        match item.and_then(|i| self.parse_record(i)) {
            Some(p)
                if p.record.status == Status::InProgress
                    && p.token.as_deref() == Some(token.as_str()) =>
            {
                Claim::Acquired(token)
            }
            Some(p) if p.record.status == Status::Completed => Claim::Completed(p.record),
            Some(p) => Claim::HeldElsewhere {
                lease_until: p.record.lease_until,
            },
            // An item we cannot read (written by something else, or gone between the write and
            // the answer): never run the handler on it; the message is retried later.
            None => Claim::HeldElsewhere { lease_until: None },
        }
    }

    /// After a refused completion: the same token already completed it (a retry after an
    /// ambiguous error) is a success; anything else means the claim was lost.
    fn refused_completion(
        &self,
        key: &str,
        token: &ClaimToken,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> Result<(), Error> {
        match item.and_then(|i| self.parse_record(i)) {
            Some(p)
                if p.record.status == Status::Completed
                    && p.token.as_deref() == Some(token.as_str()) =>
            {
                Ok(())
            }
            _ => Err(Error::lost_claim(key)),
        }
    }

    /// The completion's update, fenced by the token and the in-progress status; it stores the
    /// response, if any, in the same write.
    fn completion_update(
        &self,
        key: &str,
        token: &ClaimToken,
        expires_at: SystemTime,
        response: Option<StoredResponse>,
    ) -> Result<Update, Error> {
        let mut names = self.attrs.names();
        names.remove("#id");
        let mut values = HashMap::from([
            (":completed".to_owned(), s(Status::Completed.as_str())),
            (":inprogress".to_owned(), s(Status::InProgress.as_str())),
            (":exp".to_owned(), n(expiry_seconds(expires_at))),
            (":token".to_owned(), s(token.as_str())),
        ]);
        let update = match response {
            Some(response) => {
                names.insert("#data".to_owned(), self.attrs.data.clone());
                values.insert(
                    ":data".to_owned(),
                    AttributeValue::S(response.into_string()),
                );
                "SET #status = :completed, #exp = :exp, #data = :data REMOVE #lease"
            }
            None => "SET #status = :completed, #exp = :exp REMOVE #lease",
        };
        Update::builder()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .update_expression(update)
            .condition_expression("#token = :token AND #status = :inprogress")
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)
    }
}

struct Parsed {
    record: ClaimRecord,
    token: Option<String>,
}

impl ClaimStore for DynamoDbStore {
    type Effect = TransactWriteItem;

    /// The SDK retries throttling, server errors and lost connections by itself (with the
    /// `RetryConfig` of [`DynamoDbSettings`] when built by `from_env`): a loop of ours on top
    /// would multiply the attempts. 256 calls in flight: one HTTP/1.1 connection per call,
    /// kept in the SDK client's pool across invocations; well under Lambda's 1,024 file
    /// descriptors; an on-demand table takes it, a provisioned one may throttle (the SDK then
    /// backs off and retries). The one-shot write is one `TransactWriteItems`.
    ///
    /// The longest response: [`MAX_ITEM_BYTES`] (409,600) less the most the record's other
    /// attributes can take, so a response of this length fits for every key the store
    /// accepts: each key attribute at DynamoDB's limit (2048 bytes for the partition key, 1024
    /// for the sort key; a fixed template at its own length) with its name, the expiry and the
    /// lease at 21 bytes each (DynamoDB's bound for a number), the status at 10 (`INPROGRESS`),
    /// the fingerprint at [`MAX_FINGERPRINT_BYTES`], the token at 36 (a UUID), and every
    /// attribute name as configured, the response's own (`data`) included.
    ///
    /// With the default names and layout: 409,600 − 3,225 = **406,375 bytes** (the key 2 +
    /// 2048, `expiration` 10 + 21, `in_progress_expiration` 22 + 21, `status` 6 + 10,
    /// `validation` 10 + 1024, `claim_token` 11 + 36, `data` 4).
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_max_in_flight(256)
            .with_max_response_bytes(MAX_ITEM_BYTES.saturating_sub(self.record_overhead_bytes()))
            .with_retries_internally(true)
            .with_atomic_one_shot(true)
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        Self::check_fingerprint(&req)?;
        let token = ClaimToken::generate();
        let item = self.claim_item(&req, &token, Status::InProgress);
        let (condition, names, values) = self.claim_condition(req.now);
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Claim::Acquired(token)),
            Err(SdkError::ServiceError(e)) => match e.err() {
                PutItemError::ConditionalCheckFailedException(ccf) => {
                    Ok(self.refused_claim(token, ccf.item()))
                }
                _ => Err(classify("PutItem (claim)", SdkError::ServiceError(e))),
            },
            Err(e) => Err(classify("PutItem (claim)", e)),
        }
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<TransactWriteItem>,
    ) -> Result<(), Error> {
        // Refused before anything is sent: nothing committed, the claim stays in progress.
        completion.check_response_size(key, self.capabilities().max_response_bytes)?;
        let Completion {
            expires_at,
            response,
            effects,
            ..
        } = completion;
        if effects.len() > MAX_EFFECTS {
            return Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "{} effects in one completion: DynamoDB transactions take at most {MAX_EFFECTS} \
                     besides the completion",
                    effects.len()
                ),
            ));
        }
        let update = self.completion_update(key, token, expires_at, response)?;
        if effects.is_empty() {
            // Moved out of the `Update`: the response is sent once, not copied.
            let (names, values) = (
                update.expression_attribute_names,
                update.expression_attribute_values,
            );
            let result = self
                .client
                .update_item()
                .table_name(update.table_name)
                .set_key(Some(update.key))
                .update_expression(update.update_expression)
                .set_condition_expression(update.condition_expression)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            return match result {
                Ok(_) => Ok(()),
                Err(SdkError::ServiceError(e)) => match e.err() {
                    UpdateItemError::ConditionalCheckFailedException(ccf) => {
                        self.refused_completion(key, token, ccf.item())
                    }
                    other if item_too_large(other.code(), other.message()) => {
                        Err(Self::item_refused_as_too_large(key, other.message()))
                    }
                    _ => Err(classify("UpdateItem (complete)", SdkError::ServiceError(e))),
                },
                Err(e) => Err(classify("UpdateItem (complete)", e)),
            };
        }

        let mut items = Vec::with_capacity(effects.len() + 1);
        items.push(TransactWriteItem::builder().update(update).build());
        items.extend(effects.into_vec());
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(tc) => {
                    self.cancelled(key, token, tc.cancellation_reasons())
                }
                other if item_too_large(other.code(), other.message()) => {
                    Err(Self::item_refused_as_too_large(key, other.message()))
                }
                _ => Err(classify(
                    "TransactWriteItems (complete)",
                    SdkError::ServiceError(e),
                )),
            },
            Err(e) => Err(classify("TransactWriteItems (complete)", e)),
        }
    }

    /// One request: a `PutItem` of the record as completed under the claim's condition, or,
    /// with effects, one `TransactWriteItems` of that `Put` and the effects. A refusal comes
    /// back with the old item (`ALL_OLD`), so a duplicate costs one request too.
    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<TransactWriteItem>,
    ) -> Result<OneShotWrite, Error> {
        Self::check_fingerprint(&req)?;
        let token = ClaimToken::generate();
        let item = self.claim_item(&req, &token, Status::Completed);
        let (condition, names, values) = self.claim_condition(req.now);
        if effects.is_empty() {
            let result = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression(condition)
                .set_expression_attribute_names(Some(names))
                .set_expression_attribute_values(Some(values))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            return match result {
                Ok(_) => Ok(OneShotWrite::Committed),
                Err(SdkError::ServiceError(e)) => match e.err() {
                    PutItemError::ConditionalCheckFailedException(ccf) => {
                        Ok(self.refused_one_shot(&token, ccf.item()))
                    }
                    _ => Err(classify("PutItem (one-shot)", SdkError::ServiceError(e))),
                },
                Err(e) => Err(classify("PutItem (one-shot)", e)),
            };
        }
        if effects.len() > MAX_EFFECTS {
            return Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "{} effects in one completion: DynamoDB transactions take at most {MAX_EFFECTS} \
                     besides the completion",
                    effects.len()
                ),
            ));
        }
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build_error)?;
        let mut items = Vec::with_capacity(effects.len() + 1);
        items.push(TransactWriteItem::builder().put(put).build());
        items.extend(effects.into_vec());
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(OneShotWrite::Committed),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(tc) => {
                    let reasons = tc.cancellation_reasons();
                    let first = reasons.first();
                    if first.and_then(|r| r.code()) == Some("ConditionalCheckFailed") {
                        Ok(self.refused_one_shot(&token, first.and_then(|r| r.item())))
                    } else {
                        Err(Self::cancelled_by_effects(reasons))
                    }
                }
                _ => Err(classify(
                    "TransactWriteItems (one-shot)",
                    SdkError::ServiceError(e),
                )),
            },
            Err(e) => Err(classify("TransactWriteItems (one-shot)", e)),
        }
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let mut names = self.attrs.names();
        names.retain(|k, _| k == "#token" || k == "#status");
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .condition_expression("#token = :token AND #status = :inprogress")
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(HashMap::from([
                (":token".to_owned(), s(token.as_str())),
                (":inprogress".to_owned(), s(Status::InProgress.as_str())),
            ])))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) => match e.err() {
                DeleteItemError::ConditionalCheckFailedException(_) => Err(Error::lost_claim(key)),
                _ => Err(classify("DeleteItem (release)", SdkError::ServiceError(e))),
            },
            Err(e) => Err(classify("DeleteItem (release)", e)),
        }
    }
}

/// Records expire by DynamoDB's TTL, so there is nothing to prune.
impl StoreAdmin for DynamoDbStore {
    /// Creates the table (on-demand capacity; the string partition key, and the string sort
    /// key if the [key schema](Self::with_key_schema) has one), waits until it is ACTIVE, and
    /// enables TTL on the expiry attribute. Idempotent: an existing table is left as it is,
    /// and TTL is enabled only if it is not already.
    async fn init(&self) -> Result<(), Error> {
        let sort = self.schema.sort.as_ref().map(|s| s.name.as_str());
        create_table_with_keys(&self.client, &self.table, &self.schema.partition.name, sort)
            .await?;
        enable_ttl(&self.client, &self.table, &self.attrs.expiration).await
    }

    /// One `DescribeTable`: the table exists, is ACTIVE, and its primary key is the configured
    /// layout's (a partition key of type S, and the sort key of type S if the layout has one).
    /// A missing table names the [`init_command`](DynamoDbStore::init_command) that creates it.
    async fn check_ready(&self) -> Result<(), Error> {
        let description = describe_table(&self.client, &self.table).await?;
        if let Some(description) = &description {
            self.check_key_schema(description)?;
        }
        match description.and_then(|d| d.table_status().cloned()) {
            Some(TableStatus::Active) => Ok(()),
            None => Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "DynamoDB table {} does not exist: create the tables with `{}`",
                    self.table,
                    self.init_command()
                ),
            )),
            Some(status) => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "DynamoDB table {} is {status}, not ACTIVE: retry shortly",
                    self.table
                ),
            )),
        }
    }

    async fn prune_expired(&self, _now: SystemTime, _limit: u32) -> Result<Option<u64>, Error> {
        Ok(None)
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        let result = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            // An operator acting on what they read must read the latest write.
            .consistent_read(true)
            .send()
            .await;
        let out = match result {
            Ok(out) => out,
            Err(e) => return Err(classify("GetItem (inspect)", e)),
        };
        let Some(item) = out.item() else {
            return Ok(None);
        };
        match self.parse_record(item) {
            Some(p) => Ok(Some(Inspected::new(
                p.record,
                p.token.map(ClaimToken::from_string),
            ))),
            None => Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "the item for key {key:?} in table {:?} has no {:?} attribute this store \
                     can read (INPROGRESS or COMPLETED): it was not written by sqs-claim",
                    self.table, self.attrs.status
                ),
            )),
        }
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::InProgress, "DeleteItem (force release)")
            .await
    }

    async fn forget(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::Completed, "DeleteItem (forget)")
            .await
    }
}

impl DynamoDbStore {
    /// Refuses a claims table whose primary key is not the configured layout's (every claim
    /// would be refused with a `ValidationException`, or, worse, land on another layout's
    /// items): a partition key of type S, and the sort key of type S if the layout has one.
    fn check_key_schema(&self, description: &TableDescription) -> Result<(), Error> {
        let schema = &*self.schema;
        let wanted: Vec<(&str, &str)> = std::iter::once((schema.partition_key().name(), "HASH"))
            .chain(schema.sort_key().map(|k| (k.name(), "RANGE")))
            .collect();
        let type_of = |name: &str| {
            description
                .attribute_definitions()
                .iter()
                .find(|a| a.attribute_name() == name)
                .map_or("?", |a| a.attribute_type().as_str())
        };
        let seen: Vec<(&str, &str, &str)> = description
            .key_schema()
            .iter()
            .map(|k| {
                let kind = match k.key_type() {
                    KeyType::Hash => "HASH",
                    KeyType::Range => "RANGE",
                    other => other.as_str(),
                };
                (k.attribute_name(), kind, type_of(k.attribute_name()))
            })
            .collect();
        let matches = seen.len() == wanted.len()
            && seen
                .iter()
                .zip(&wanted)
                .all(|((name, kind, ty), (want, want_kind))| {
                    name == want && kind == want_kind && *ty == "S"
                });
        if matches {
            return Ok(());
        }
        let shown = |keys: Vec<String>| keys.join(" + ");
        let seen = shown(
            seen.iter()
                .map(|(name, kind, ty)| format!("{name} ({kind}, {ty})"))
                .collect(),
        );
        let wanted = shown(
            wanted
                .iter()
                .map(|(name, kind)| format!("{name} ({kind}, S)"))
                .collect(),
        );
        let (partition, sort) = layout_values(schema);
        let layout = if *schema == DynamoDbKeySchema::default() {
            format!("the default layout {partition} ({PARTITION_KEY_VAR} and {SORT_KEY_VAR} unset)")
        } else {
            let mut layout = format!("{PARTITION_KEY_VAR}={partition}");
            if let Some(sort) = sort {
                layout.push_str(&format!(", {SORT_KEY_VAR}={sort}"));
            }
            layout
        };
        Err(Error::new(
            ErrorKind::Config,
            format!(
                "DynamoDB table {} has the key schema {seen}, but the store is configured for \
                 {wanted} ({layout}): every claim would be refused. Set {PARTITION_KEY_VAR} and \
                 {SORT_KEY_VAR} (or --partition-key and --sort-key) to the table's keys, or \
                 point the store at a table with this layout (a table's key cannot be changed)",
                self.table
            ),
        ))
    }
}

/// The variables the operator's tools (and the example app) read a key layout from, named in
/// [`StoreAdmin::check_ready`]'s error for a table of another layout.
const PARTITION_KEY_VAR: &str = "SQS_CLAIM_DYNAMODB_PARTITION_KEY";
const SORT_KEY_VAR: &str = "SQS_CLAIM_DYNAMODB_SORT_KEY";

/// A key layout as the operator's settings spell it: `NAME=TEMPLATE` of the partition key,
/// and of the sort key if there is one.
fn layout_values(schema: &DynamoDbKeySchema) -> (String, Option<String>) {
    let value = |k: &DynamoDbKeyAttribute| format!("{}={}", k.name, k.template);
    (value(&schema.partition), schema.sort.as_ref().map(value))
}

/// `word` as one shell word: as it is when it has no character a shell would read, else in
/// single quotes.
fn shell_word(word: &str) -> String {
    let plain = word.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                '_' | '-' | '.' | ':' | '/' | '=' | '#' | '@' | '+' | '%' | '{' | '}'
            )
    });
    if plain && !word.is_empty() {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The table's description, `None` if it does not exist.
async fn describe_table(client: &Client, table: &str) -> Result<Option<TableDescription>, Error> {
    match client.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table().cloned()),
        Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(None),
        Err(e) => Err(classify("DescribeTable", e)),
    }
}

impl DynamoDbStore {
    /// Deletes `key`'s item only if its status is `status`: the condition travels with the
    /// delete, so a record that changed status since the operator read it is left alone.
    async fn delete_if(&self, key: &str, status: Status, op: &str) -> Result<bool, Error> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .condition_expression("#status = :status")
            .expression_attribute_names("#status", &self.attrs.status)
            .expression_attribute_values(":status", s(status.as_str()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) => match e.err() {
                DeleteItemError::ConditionalCheckFailedException(_) => Ok(false),
                _ => Err(classify(op, SdkError::ServiceError(e))),
            },
            Err(e) => Err(classify(op, e)),
        }
    }
}

impl DynamoDbStore {
    /// The error of a completion DynamoDB refused because the completed item would pass its
    /// 400 KB limit. [`max_response_bytes`](Capabilities::max_response_bytes) rules this out for
    /// the records this store writes; an item that carries attributes of someone else's gets
    /// here.
    fn item_refused_as_too_large(key: &str, message: Option<&str>) -> Error {
        let what = format!(
            "DynamoDB refused the completion of key {key:?}: the completed item would pass \
             DynamoDB's item limit of {MAX_ITEM_BYTES} bytes (names and values), with the \
             response and the attributes the item already holds; nothing was committed"
        );
        match message {
            Some(m) if !m.is_empty() => {
                Error::with_source(ErrorKind::ResponseTooLarge, what, m.to_owned())
            }
            _ => Error::new(ErrorKind::ResponseTooLarge, what),
        }
    }

    /// Interprets a cancelled completion transaction. Action 0 is the completion; the rest are
    /// the handler's effects.
    fn cancelled(
        &self,
        key: &str,
        token: &ClaimToken,
        reasons: &[aws_sdk_dynamodb::types::CancellationReason],
    ) -> Result<(), Error> {
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        if code(0) == "ConditionalCheckFailed" {
            // Either this token completed already (a retry after an ambiguous error: its
            // effects committed then, and must not be applied again) or the claim was lost.
            return self.refused_completion(key, token, reasons.first().and_then(|r| r.item()));
        }
        if let Some(first) = reasons.first()
            && item_too_large(first.code(), first.message())
        {
            return Err(Self::item_refused_as_too_large(key, first.message()));
        }
        Err(Self::cancelled_by_effects(reasons))
    }

    /// The error of a transaction whose first action (the claim or the completion) passed and
    /// which was cancelled anyway: an effect refused (its condition, a validation), or a
    /// transient conflict or throttle.
    fn cancelled_by_effects(reasons: &[aws_sdk_dynamodb::types::CancellationReason]) -> Error {
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        let transient = reasons.iter().any(|r| {
            matches!(
                r.code(),
                Some("TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded")
            )
        });
        let refused: Vec<String> = reasons
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, r)| r.code().is_some_and(|c| c != "None"))
            .map(|(i, r)| {
                format!(
                    "effect #{}: {}{}",
                    i - 1,
                    r.code().unwrap_or("?"),
                    r.message().map(|m| format!(" ({m})")).unwrap_or_default()
                )
            })
            .collect();
        let summary = if refused.is_empty() {
            format!("completion action: {}", code(0))
        } else {
            refused.join("; ")
        };
        let kind = if transient {
            ErrorKind::StoreUnavailable
        } else {
            ErrorKind::EffectRejected
        };
        Error::new(
            kind,
            format!("transaction cancelled, nothing was written: {summary}"),
        )
    }

    /// Classifies the item returned with a refused one-shot write, as [`refused_claim`]
    /// does for a claim: our own token on a completed record is the SDK's retry of a write
    /// that committed (`Committed`, never a duplicate of itself).
    ///
    /// [`refused_claim`]: Self::refused_claim
    fn refused_one_shot(
        &self,
        token: &ClaimToken,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> OneShotWrite {
        match item.and_then(|i| self.parse_record(i)) {
            Some(p)
                if p.record.status == Status::Completed
                    && p.token.as_deref() == Some(token.as_str()) =>
            {
                OneShotWrite::Committed
            }
            Some(p) if p.record.status == Status::Completed => OneShotWrite::Completed(p.record),
            Some(p) => OneShotWrite::HeldElsewhere {
                lease_until: p.record.lease_until,
            },
            None => OneShotWrite::HeldElsewhere { lease_until: None },
        }
    }

    /// The item a claim writes: in progress under its lease (expiring at the later of the TTL
    /// and the lease), or, for a one-shot write, completed at once (expiring at the TTL, no
    /// lease).
    fn claim_item(
        &self,
        req: &ClaimRequest<'_>,
        token: &ClaimToken,
        status: Status,
    ) -> HashMap<String, AttributeValue> {
        let mut item = self.key_value(req.key);
        let expires = match status {
            Status::InProgress => {
                item.insert(self.attrs.lease.clone(), n(epoch_millis(req.lease_until)));
                req.record_expires_at()
            }
            Status::Completed => req.expires_at,
        };
        item.insert(self.attrs.expiration.clone(), n(expiry_seconds(expires)));
        item.insert(self.attrs.status.clone(), s(status.as_str()));
        item.insert(self.attrs.token.clone(), s(token.as_str()));
        if let Some(fp) = req.fingerprint {
            item.insert(self.attrs.fingerprint.clone(), s(fp));
        }
        item
    }

    /// The claim's condition, its names and values, for a claim or a one-shot write at `now`.
    fn claim_condition(
        &self,
        now: SystemTime,
    ) -> (
        &'static str,
        HashMap<String, String>,
        HashMap<String, AttributeValue>,
    ) {
        let mut names = self.attrs.names();
        names.remove("#token");
        (
            "attribute_not_exists(#id) OR #exp <= :now_s \
             OR (#status = :inprogress AND #lease <= :now_ms)",
            names,
            HashMap::from([
                (":now_s".to_owned(), n(super::epoch_seconds(now))),
                (":now_ms".to_owned(), n(epoch_millis(now))),
                (":inprogress".to_owned(), s(Status::InProgress.as_str())),
            ]),
        )
    }
}

/// Creates an on-demand table with a string partition key `key` unless it exists, and waits
/// until it is ACTIVE (a new table refuses writes for a few seconds on AWS).
///
/// For tables of your own beside the claims table (the example app's accounts table uses it);
/// [`StoreAdmin::init`] creates the claims table itself.
pub async fn create_table_with_key(client: &Client, table: &str, key: &str) -> Result<(), Error> {
    create_table_with_keys(client, table, key, None).await
}

/// [`create_table_with_key`] with an optional string sort key `sort`.
pub async fn create_table_with_keys(
    client: &Client,
    table: &str,
    partition: &str,
    sort: Option<&str>,
) -> Result<(), Error> {
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest);
    for (name, kind) in
        std::iter::once((partition, KeyType::Hash)).chain(sort.map(|name| (name, KeyType::Range)))
    {
        request = request
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(build_error)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(name)
                    .key_type(kind)
                    .build()
                    .map_err(build_error)?,
            );
    }
    let created = request.send().await;
    match created {
        Ok(_) => {}
        // Already there: creation is idempotent.
        Err(e) if e.code() == Some("ResourceInUseException") => {}
        Err(e) => return Err(classify("CreateTable", e)),
    }
    // The SDK's own waiter (DynamoDB's `TableExists`: ACTIVE succeeds, not found retries),
    // bounded as before. Its polls are 20 s apart after the first, as AWS specifies it: a new
    // table on AWS is ready after one or two; DynamoDB Local answers ACTIVE at once.
    match client
        .wait_until_table_exists()
        .table_name(table)
        .wait(TABLE_ACTIVE_WITHIN)
        .await
    {
        Ok(_) => Ok(()),
        Err(WaiterError::ExceededMaxWait(_)) => Err(Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "table {table} did not become ACTIVE within {} s",
                TABLE_ACTIVE_WITHIN.as_secs()
            ),
        )),
        Err(WaiterError::OperationFailed(failed)) => {
            Err(classify("DescribeTable", failed.into_error()))
        }
        Err(WaiterError::FailureState(state)) => match state.into_final_poll().into_result() {
            Err(e) => {
                // A modeled error no acceptor takes: only `InternalServerError` is worth a retry.
                let kind = if e.code() == Some("InternalServerError") {
                    ErrorKind::StoreUnavailable
                } else {
                    ErrorKind::StoreRejected
                };
                let code = e.code().unwrap_or("an unnamed error").to_owned();
                Err(Error::with_source(
                    kind,
                    format!(
                        "waiting for table {table} to become ACTIVE: DescribeTable failed with {code}"
                    ),
                    e,
                ))
            }
            Ok(_) => Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "table {table} did not become ACTIVE: DescribeTable answered a state the waiter does not accept"
                ),
            )),
        },
        Err(e) => Err(Error::with_source(
            ErrorKind::StoreRejected,
            format!("cannot wait for table {table} to become ACTIVE"),
            e,
        )),
    }
}

/// How long [`create_table_with_key`] waits for a new table to become ACTIVE.
const TABLE_ACTIVE_WITHIN: Duration = Duration::from_secs(60);

/// The table's status, `None` if it does not exist.
pub async fn table_status(client: &Client, table: &str) -> Result<Option<TableStatus>, Error> {
    match client.describe_table().table_name(table).send().await {
        Ok(out) => Ok(out.table().and_then(|t| t.table_status()).cloned()),
        Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(None),
        Err(e) => Err(classify("DescribeTable", e)),
    }
}

/// Enables TTL on `attribute` unless it already is (enabling twice is an error in DynamoDB).
pub(crate) async fn enable_ttl(client: &Client, table: &str, attribute: &str) -> Result<(), Error> {
    let current = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| classify("DescribeTimeToLive", e))?;
    if let Some(d) = current.time_to_live_description() {
        let on = matches!(
            d.time_to_live_status(),
            Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
        );
        if on {
            return match d.attribute_name() {
                Some(a) if a != attribute => Err(Error::new(
                    ErrorKind::StoreRejected,
                    format!("table {table} has TTL on {a:?}, but the store expects {attribute:?}"),
                )),
                _ => Ok(()),
            };
        }
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(attribute)
                .build()
                .map_err(build_error)?,
        )
        .send()
        .await
        .map_err(|e| classify("UpdateTimeToLive", e))?;
    Ok(())
}

/// Record expiry in whole seconds, rounded up: a record may outlive its TTL by under a second,
/// never fall short of it.
fn expiry_seconds(t: SystemTime) -> i64 {
    let ms = epoch_millis(t);
    ms.div_euclid(1000) + i64::from(ms.rem_euclid(1000) != 0)
}

/// Whether DynamoDB refused a write because the item would pass its 400 KB limit: a
/// `ValidationException` (or, inside a transaction, a `ValidationError` reason) saying "Item
/// size has exceeded the maximum allowed size" ("Item size to update has ..." for an update).
fn item_too_large(code: Option<&str>, message: Option<&str>) -> bool {
    matches!(code, Some("ValidationException" | "ValidationError"))
        && message.is_some_and(|m| m.contains("Item size") && m.contains("exceeded the maximum"))
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn build_error(e: aws_sdk_dynamodb::error::BuildError) -> Error {
    Error::with_source(ErrorKind::StoreRejected, "invalid DynamoDB request", e)
}

/// Maps an SDK error to the crate's kinds: throttling, server errors, timeouts and network
/// failures are transient (`StoreUnavailable`); the rest (missing table, validation, access
/// denied) will not fix themselves (`StoreRejected`).
///
/// The message says how far the request got, because that is what an operator acts on:
/// * could not connect: nothing was sent (network, DNS, security group, endpoint);
/// * could not be sent (credentials, request signing): nothing was sent;
/// * sent, but no answer (timed out, or the connection dropped after sending): the request may
///   or may not have been applied;
/// * an answer that could not be read: it may or may not have been applied.
///
/// Public so that the DynamoDB calls of your own (a business table beside the claims) fail
/// with the same kinds and wording as the store's.
pub fn classify<E, R>(op: &str, e: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let transient_codes = [
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ThrottlingException",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
        "TransactionInProgressException",
        "LimitExceededException",
    ];
    let code = e.code().map(str::to_owned);
    let (kind, what) = match &e {
        SdkError::ServiceError(_) => {
            let c = code.as_deref().unwrap_or("unknown");
            let kind = if transient_codes.contains(&c) {
                ErrorKind::StoreUnavailable
            } else {
                ErrorKind::StoreRejected
            };
            (kind, format!("DynamoDB {op} failed: {c}"))
        }
        SdkError::ConstructionFailure(_) => (
            ErrorKind::StoreRejected,
            format!("DynamoDB {op}: request could not be built"),
        ),
        SdkError::TimeoutError(_) => (
            ErrorKind::StoreUnavailable,
            format!(
                "DynamoDB {op}: no answer within the client's timeout (the endpoint is silent: \
                 a partition, or replies dropped); the request may or may not have been applied"
            ),
        ),
        SdkError::DispatchFailure(d) => (
            ErrorKind::StoreUnavailable,
            match dispatch_stage(d.is_io() || d.is_timeout() || d.as_other().is_some(), &e) {
                Dispatch::Connect => format!(
                    "DynamoDB {op}: could not reach the endpoint (network, DNS, firewall or \
                     endpoint URL); nothing was sent"
                ),
                Dispatch::NotSent => format!(
                    "DynamoDB {op}: the request could not be sent (credentials, signing or client \
                     configuration); nothing was sent"
                ),
                Dispatch::Sent => format!(
                    "DynamoDB {op}: sent, but no answer (the connection failed after the request \
                     went out; it may or may not have been applied)"
                ),
            },
        ),
        SdkError::ResponseError(_) => (
            ErrorKind::StoreUnavailable,
            format!(
                "DynamoDB {op}: sent, but the answer could not be read (truncated or malformed; \
                 it may or may not have been applied)"
            ),
        ),
        _ => (
            ErrorKind::StoreUnavailable,
            format!("DynamoDB {op}: unexpected response"),
        ),
    };
    // One readable cause, not the SDK's whole context dump: the service's own message, or the
    // innermost transport error ("Connection refused", "dns error", ...).
    let detail = match &e {
        SdkError::ServiceError(_) => e.message().unwrap_or_default().to_owned(),
        _ => {
            let mut cause: &dyn std::error::Error = &e;
            while let Some(next) = cause.source() {
                cause = next;
            }
            cause.to_string()
        }
    };
    if detail.is_empty() {
        Error::new(kind, what)
    } else {
        Error::with_source(kind, what, detail)
    }
}

/// How far a request that failed in dispatch got.
#[derive(Debug, PartialEq, Eq)]
enum Dispatch {
    /// The connection could not be opened (refused, DNS, connect timeout).
    Connect,
    /// The request failed before it was sent (credentials, signing).
    NotSent,
    /// The connection was open and the request (maybe partly) written: lost after sending.
    Sent,
}

/// `io_or_timeout`: the SDK's own classification of the dispatch failure (I/O, timeout, or a
/// transient "other" such as a connection closed before the answer was complete).
fn dispatch_stage(io_or_timeout: bool, e: &(dyn std::error::Error + 'static)) -> Dispatch {
    // The HTTP client marks a failed connect in its error chain: hyper-util's
    // "client error (Connect)", and the SDK's own "HTTP connect timeout". Anything else of the
    // I/O or timeout kind happened on an open connection, after the request went out.
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if text.contains("(Connect)") || text.contains("connect timeout") {
            return Dispatch::Connect;
        }
        cause = c.source();
    }
    if io_or_timeout {
        Dispatch::Sent
    } else {
        Dispatch::NotSent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_are_hashed_deterministically() {
        let short = "ns#order-1";
        assert_eq!(DynamoDbStore::storage_key(short), short);
        let long = format!("ns#{}", "x".repeat(3000));
        let a = DynamoDbStore::storage_key(&long);
        assert_eq!(a, DynamoDbStore::storage_key(&long));
        assert!(a.len() <= MAX_KEY_BYTES);
        assert_ne!(a, DynamoDbStore::storage_key(&format!("{long}y")));
        let exactly = "k".repeat(MAX_KEY_BYTES);
        assert_eq!(DynamoDbStore::storage_key(&exactly), exactly);
    }

    #[test]
    fn expiry_rounds_up() {
        assert_eq!(expiry_seconds(from_epoch_millis(10_000)), 10);
        assert_eq!(expiry_seconds(from_epoch_millis(10_001)), 11);
        assert_eq!(expiry_seconds(from_epoch_millis(10_999)), 11);
    }
}
