//! The DynamoDB claims table's key layout as its two settings spell it, `NAME=TEMPLATE` each
//! (`SQS_CLAIM_DYNAMODB_PARTITION_KEY`, `SQS_CLAIM_DYNAMODB_SORT_KEY`, or the CLI's flags).
//! Public with feature `admin` (the operator's tool reads and writes the layout); the
//! settings' own otherwise.
#![cfg_attr(not(feature = "admin"), allow(unreachable_pub))]

use crate::store::dynamodb::{DynamoDbAttributes, DynamoDbKeyAttribute, DynamoDbKeySchema};
use crate::{Error, ErrorKind};

/// The variable of the DynamoDB claims table's partition key (`NAME=TEMPLATE`).
pub const PARTITION_KEY_VAR: &str = "SQS_CLAIM_DYNAMODB_PARTITION_KEY";

/// The variable of the DynamoDB claims table's sort key (`NAME=TEMPLATE`).
pub const SORT_KEY_VAR: &str = "SQS_CLAIM_DYNAMODB_SORT_KEY";

/// The DynamoDB key layout from its two settings, each given as (where it came from, for the
/// error: `environment variable ...` or a flag; its `NAME=TEMPLATE` value). No I/O.
///
/// `None` when neither is given (the store's default, `id={key}`). A sort key needs a
/// partition key. Fails with [`ErrorKind::Config`], naming where the bad value came from, when
/// a value is not `NAME=TEMPLATE`, when the layout is invalid
/// (checked by `DynamoDbStore::with_key_schema`: an empty name or template, no `{key}` in either
/// template, ...), or when a key has the name of one of the record's other attributes.
///
#[cfg_attr(feature = "admin", doc = "```")]
#[cfg_attr(not(feature = "admin"), doc = "```ignore")]
/// use sqs_claim::settings::key_layout;
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
    let value = |k: &DynamoDbKeyAttribute| format!("{}={}", k.name(), k.template());
    (value(schema.partition_key()), schema.sort_key().map(value))
}
