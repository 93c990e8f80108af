//! [`DynamoDbLedger`]: the example on [`DynamoDbStore`], balances in a second table, credited
//! by an `Update` in the completion's `TransactWriteItems`.

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use sqs_claim::aws_sdk_dynamodb::Client;
use sqs_claim::aws_sdk_dynamodb::client::Waiters;
use sqs_claim::aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use sqs_claim::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TableStatus, TransactWriteItem, Update,
};

use super::{Ledger, Payment, read_balance};
use sqs_claim::settings::key_layout_values;
use sqs_claim::store::StoreAdmin;
use sqs_claim::store::dynamodb::DynamoDbKeySchema;
use sqs_claim::store::dynamodb::DynamoDbStore;
use sqs_claim::{Error, ErrorKind};

/// The accounts table's partition key (a string) and balance attribute (a number).
const ACCOUNT: &str = "account";
const BALANCE: &str = "balance";

#[derive(Debug)]
struct Inner {
    store: DynamoDbStore,
    accounts_table: String,
}

/// A [`DynamoDbStore`] plus an accounts table. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DynamoDbLedger {
    inner: Arc<Inner>,
}

impl DynamoDbLedger {
    /// The ledger over `store`, with balances in `accounts_table` (same client).
    pub fn new(store: DynamoDbStore, accounts_table: impl Into<String>) -> Self {
        DynamoDbLedger {
            inner: Arc::new(Inner {
                store,
                accounts_table: accounts_table.into(),
            }),
        }
    }

    /// The ledger on `table` and `accounts_table`, with a client configured from the standard
    /// AWS environment (region, credentials, `AWS_ENDPOINT_URL_DYNAMODB`) and bounded as
    /// [`DynamoDbStore::from_env`] bounds it.
    pub async fn from_env(table: &str, accounts_table: &str) -> Self {
        Self::new(DynamoDbStore::from_env(table).await, accounts_table)
    }

    /// The accounts table.
    pub fn accounts_table(&self) -> &str {
        &self.inner.accounts_table
    }

    fn client(&self) -> &Client {
        self.inner.store.client()
    }

    /// Creates the accounts table (on demand, a string partition key) unless it exists, and
    /// waits until it is ACTIVE: a new table refuses writes for a few seconds on AWS.
    async fn create_accounts_table(&self) -> Result<(), Error> {
        let table = self.accounts_table();
        let created = self
            .client()
            .create_table()
            .table_name(table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(ACCOUNT)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(|e| Error::with_source(ErrorKind::Config, "accounts table", e))?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(ACCOUNT)
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(|e| Error::with_source(ErrorKind::Config, "accounts table", e))?,
            )
            .send()
            .await;
        match created {
            Ok(_) => {}
            // Already there: creation is idempotent.
            Err(e) if e.code() == Some("ResourceInUseException") => {}
            Err(e) => return Err(sdk_error("CreateTable", e)),
        }
        self.client()
            .wait_until_table_exists()
            .table_name(table)
            .wait(Duration::from_secs(60))
            .await
            .map(drop)
            .map_err(|e| {
                Error::with_source(
                    ErrorKind::StoreUnavailable,
                    format!("table {table} did not become ACTIVE"),
                    e,
                )
            })
    }

    /// The `payments init` that creates this ledger's tables: the store's `sqs-claim init`
    /// (`store_init_command`, which names the claims table's key layout whenever it is not
    /// the default) run by the app's binary, with the accounts table named whenever it is not
    /// the default, so the hint creates both tables this run looks for.
    pub fn init_command(&self) -> String {
        let table = self.inner.store.table();
        let store_command = store_init_command(&self.inner.store);
        let head = format!("sqs-claim init --store dynamodb:{table}");
        let layout = store_command.strip_prefix(&head).unwrap_or_default();
        let accounts = match self.accounts_table() {
            default if default == format!("{table}-accounts") => String::new(),
            other => format!(" --accounts-table {other}"),
        };
        format!("payments init --store dynamodb:{table}{accounts}{layout}")
    }

    /// The table's status, `None` if it does not exist.
    async fn table_status(&self, table: &str) -> Result<Option<TableStatus>, Error> {
        match self
            .client()
            .describe_table()
            .table_name(table)
            .send()
            .await
        {
            Ok(out) => Ok(out.table().and_then(|t| t.table_status()).cloned()),
            Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(None),
            Err(e) => Err(sdk_error("DescribeTable", e)),
        }
    }
}

/// The `sqs-claim init` that creates `store`'s claims table, as the store's own "table does not
/// exist" error names it: `--partition-key` and `--sort-key` whenever the key layout is not
/// the default.
fn store_init_command(store: &DynamoDbStore) -> String {
    let mut command = format!("sqs-claim init --store dynamodb:{}", store.table());
    if *store.key_schema() != DynamoDbKeySchema::default() {
        let (partition, sort) = key_layout_values(store.key_schema());
        command.push_str(" --partition-key ");
        command.push_str(&shell_word(&partition));
        if let Some(sort) = sort {
            command.push_str(" --sort-key ");
            command.push_str(&shell_word(&sort));
        }
    }
    command
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

/// An SDK error of the accounts table's calls: throttling and answers that never came are
/// transient (`StoreUnavailable`), the rest (a missing table, access denied) are not.
fn sdk_error<E, R>(op: &str, e: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let code = e.code().map(str::to_owned);
    let throttled = matches!(
        code.as_deref(),
        Some(
            "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
                | "ThrottlingException"
                | "InternalServerError"
                | "ServiceUnavailable"
        )
    );
    let kind = match &e {
        SdkError::ServiceError(_) if !throttled => ErrorKind::StoreRejected,
        SdkError::ConstructionFailure(_) => ErrorKind::StoreRejected,
        _ => ErrorKind::StoreUnavailable,
    };
    let what = code.unwrap_or_else(|| "no answer".to_owned());
    Error::with_source(kind, format!("DynamoDB {op} failed: {what}"), e)
}

impl Ledger for DynamoDbLedger {
    type Store = DynamoDbStore;

    fn store(&self) -> &DynamoDbStore {
        &self.inner.store
    }

    /// An `Update` in the completion's transaction whose condition keeps the balance within
    /// `0..=`[`Payment::MAX_BALANCE_CENTS`]: it holds only if the balance is a number in
    /// `-amount..=MAX - amount` (or, for a new account, if the amount is itself a valid
    /// balance). Otherwise the transaction is cancelled and the completion fails with
    /// [`ErrorKind::EffectRejected`], nothing written. A balance stored as anything but a
    /// number fails the comparison, so it is refused too.
    fn credit(&self, account: &str, amount_cents: i64) -> TransactWriteItem {
        // `ADD` creates the item and the attribute (from 0) if missing: one write, no read.
        // The bounds are computed in i128: no amount can overflow them.
        let amount = i128::from(amount_cents);
        let (low, high) = (-amount, i128::from(Payment::MAX_BALANCE_CENTS) - amount);
        let condition = if (0..=Payment::MAX_BALANCE_CENTS).contains(&amount_cents) {
            "attribute_not_exists(#balance) OR #balance BETWEEN :low AND :high"
        } else {
            "#balance BETWEEN :low AND :high"
        };
        let update = Update::builder()
            .table_name(self.accounts_table())
            .key(ACCOUNT, AttributeValue::S(account.to_owned()))
            .update_expression("ADD #balance :amount")
            .condition_expression(condition)
            .expression_attribute_names("#balance", BALANCE)
            .expression_attribute_values(":amount", AttributeValue::N(amount_cents.to_string()))
            .expression_attribute_values(":low", AttributeValue::N(low.to_string()))
            .expression_attribute_values(":high", AttributeValue::N(high.to_string()))
            .build()
            // Only fails if a required field (table, key, expression) is unset; all are set
            // above, from values that are always present.
            .expect("table name, key and update expression are set");
        TransactWriteItem::builder().update(update).build()
    }

    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        let table = self.accounts_table();
        let mut balances = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client()
                .scan()
                .table_name(table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| sdk_error("Scan", e))?;
            for item in page.items() {
                let Some(account) = item.get(ACCOUNT).and_then(|v| v.as_s().ok()) else {
                    return Err(Error::new(
                        ErrorKind::StoreRejected,
                        format!(
                            "table {table} has an item without a string {ACCOUNT:?}: is it the \
                             accounts table?"
                        ),
                    ));
                };
                let balance = match item.get(BALANCE) {
                    Some(AttributeValue::N(n)) => {
                        read_balance(&format!("table {table}"), account, n)?
                    }
                    other => {
                        let what = match other {
                            None => "missing".to_owned(),
                            Some(v) => format!("a {}, not a number", attribute_type(v)),
                        };
                        return Err(Error::new(
                            ErrorKind::StoreRejected,
                            format!(
                                "the {BALANCE:?} attribute of account {account:?} in table \
                                 {table} is {what}; fix or remove that item"
                            ),
                        ));
                    }
                };
                balances.push((account.clone(), balance));
            }
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        balances.sort();
        Ok(balances)
    }

    async fn init(&self) -> Result<(), Error> {
        self.inner.store.init().await?;
        self.create_accounts_table().await
    }

    /// A partition key alone (the default layout): see [`Ledger::check_may_overlap_writes`].
    fn check_may_overlap_writes(&self) -> bool {
        self.inner.store.key_schema().sort_key().is_none()
    }

    /// Checks that both tables exist and are active, and that the claims table's key schema
    /// is the configured layout's ([`StoreAdmin::check_ready`]); creates nothing. The two
    /// checks run at once, so a dark endpoint costs one timeout, not two.
    async fn prepare(&self) -> Result<(), Error> {
        let table = self.accounts_table();
        let (claims, accounts) =
            futures::future::join(self.inner.store.check_ready(), self.table_status(table)).await;
        let store_hint = format!("{}`", store_init_command(&self.inner.store));
        let ledger_hint = format!("{}`", self.init_command());
        claims.map_err(|e| crate::with_app_hint(e, &store_hint, &ledger_hint))?;
        match accounts? {
            Some(TableStatus::Active) => Ok(()),
            None => Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "DynamoDB table {table} does not exist: create the tables with `{}`",
                    self.init_command()
                ),
            )),
            Some(status) => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!("DynamoDB table {table} is {status}, not ACTIVE: retry shortly"),
            )),
        }
    }
}

/// The DynamoDB type of an attribute value, for an error.
fn attribute_type(v: &AttributeValue) -> &'static str {
    match v {
        AttributeValue::S(_) => "string",
        AttributeValue::N(_) => "number",
        AttributeValue::B(_) => "binary",
        AttributeValue::Bool(_) => "boolean",
        AttributeValue::Null(_) => "null",
        AttributeValue::L(_) => "list",
        AttributeValue::M(_) => "map",
        AttributeValue::Ss(_) | AttributeValue::Ns(_) | AttributeValue::Bs(_) => "set",
        _ => "value of an unknown type",
    }
}
