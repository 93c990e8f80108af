//! [`StoreAdmin`] for [`DynamoDbStore`]: creating the table (and TTL), the start-up check of
//! its status and key schema, and the operator's conditional deletes.

use super::*;

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
    /// A missing table names the `sqs-claim init` command that creates it, and
    /// [`StoreAdmin::init`], which does the same from code (no operator CLI needed).
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
                    "DynamoDB table {} does not exist: create the tables with `{}`, or in \
                     code with StoreAdmin::init() on this store",
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
pub(super) fn layout_values(schema: &DynamoDbKeySchema) -> (String, Option<String>) {
    let value = |k: &DynamoDbKeyAttribute| format!("{}={}", k.name, k.template);
    (value(&schema.partition), schema.sort.as_ref().map(value))
}

/// `word` as one shell word: as it is when it has no character a shell would read, else in
/// single quotes.
pub(super) fn shell_word(word: &str) -> String {
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

/// Creates an on-demand table with the string partition key `partition` (and sort key `sort`,
/// if any) unless it exists, and waits until it is ACTIVE (a new table refuses writes for a few
/// seconds on AWS).
pub(crate) async fn create_table_with_keys(
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

/// How long [`create_table_with_keys`] waits for a new table to become ACTIVE.
const TABLE_ACTIVE_WITHIN: Duration = Duration::from_secs(60);

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
