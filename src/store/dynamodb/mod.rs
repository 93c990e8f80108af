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
//! | `validation`             | S    | the payload fingerprint, if any (at most 1,024 bytes) |
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
//!   (`ClaimRequest::record_expires_at`) rounded up to a second, so TTL deletion never
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
    AnsweredBy, Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion,
    Effects, Extension, Inspected, OneShotWrite, Status, StoreAdmin, StoredResponse, epoch_millis,
    from_epoch_millis, from_epoch_seconds,
};
use crate::{Error, ErrorKind};

mod admin;
mod claim;
mod errors;
mod pack;
mod schema;
mod settings;

pub use schema::{DynamoDbAttributes, DynamoDbKeyAttribute, DynamoDbKeySchema};
pub(crate) use schema::{MAX_FINGERPRINT_BYTES, MAX_ITEM_BYTES};
pub use settings::DynamoDbSettings;

// The children's own items, for one another (each child reads the parent's scope).
use admin::*;
use claim::*;
use errors::*;
use schema::*;

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
    pub(crate) async fn from_env_with(
        table: impl Into<String>,
        settings: DynamoDbSettings,
    ) -> Self {
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
    /// (an empty name or template, no `{key}`) or a key attribute has the name of one of the
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
    pub(crate) fn init_command(&self) -> String {
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
