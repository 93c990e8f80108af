//! The claims table's layout: DynamoDB's limits, the attribute names and the primary key
//! schema (templates with `{key}`).

use super::*;

/// DynamoDB's limit on a partition key value, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 2048;

/// DynamoDB's limit on a sort key value, in bytes.
pub(crate) const MAX_SORT_KEY_BYTES: usize = 1024;

/// DynamoDB's limit on one item, in bytes: 400 KB, attribute names and values (UTF-8) included.
pub(crate) const MAX_ITEM_BYTES: usize = 409_600;

/// The longest payload fingerprint a claim stores, in bytes. A fingerprint is a hash (the
/// processor's is 64 hex digits, Powertools' 32); a longer one is refused before anything is
/// sent, so that [`Capabilities::max_response_bytes`] can hold
/// for every record.
pub(crate) const MAX_FINGERPRINT_BYTES: usize = 1024;

/// The most a number attribute takes in an item: DynamoDB counts 1 byte per two significant
/// digits plus 1, and an `i64` has at most 19 digits (38 would take 20): 21 is a bound.
pub(super) const MAX_NUMBER_BYTES: usize = 21;

/// The owner token this store writes: a hyphenated UUID.
pub(super) const TOKEN_BYTES: usize = uuid::fmt::Hyphenated::LENGTH;

/// The longest status this store writes (`INPROGRESS`).
pub(super) const MAX_STATUS_BYTES: usize = 10;

/// What a hashed key takes in a key attribute: `sha256:` and 64 hex digits.
pub(super) const HASHED_KEY_BYTES: usize = "sha256:".len() + 64;

/// The most effects one completion can carry: `TransactWriteItems` takes 100 actions, one of
/// which is the completion itself.
pub(crate) const MAX_EFFECTS: usize = 99;

/// The most actions one `TransactWriteItems` takes.
pub(super) const MAX_TRANSACTION_ACTIONS: usize = 100;

/// Attribute names of the claims table. The defaults match Powertools idempotency tables.
/// Change a field on the defaults (`let mut a = DynamoDbAttributes::default(); a.data =
/// "response".into();`): the struct is `non_exhaustive`, so a name added later keeps your code
/// compiling.
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
    pub(super) fn non_key(&self) -> [(&str, &'static str); 6] {
        [
            (&self.expiration, "expiration"),
            (&self.lease, "lease"),
            (&self.status, "status"),
            (&self.fingerprint, "fingerprint"),
            (&self.token, "token"),
            (&self.data, "data"),
        ]
    }

    pub(super) fn names(&self) -> HashMap<String, String> {
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
pub(crate) const KEY_PLACEHOLDER: &str = "{key}";

/// One key attribute of the claims table: its name, and the template its value is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoDbKeyAttribute {
    pub(super) name: String,
    pub(super) template: String,
}

impl DynamoDbKeyAttribute {
    /// The attribute's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The template of its value: fixed text, with `{key}` at most once.
    #[cfg_attr(not(feature = "settings"), allow(dead_code))] // read by the settings
    pub(crate) fn template(&self) -> &str {
        &self.template
    }

    /// Whether the value carries the claim key.
    pub(crate) fn has_key(&self) -> bool {
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
    pub(super) fn max_bytes(&self, limit: usize) -> usize {
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
    pub(super) partition: DynamoDbKeyAttribute,
    pub(super) sort: Option<DynamoDbKeyAttribute>,
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
    pub(super) fn max_bytes(&self) -> usize {
        self.partition.max_bytes(MAX_KEY_BYTES)
            + self
                .sort
                .as_ref()
                .map_or(0, |s| s.max_bytes(MAX_SORT_KEY_BYTES))
    }

    /// The key attributes, partition first.
    pub(super) fn attributes(&self) -> impl Iterator<Item = &DynamoDbKeyAttribute> {
        std::iter::once(&self.partition).chain(self.sort.as_ref())
    }
}
