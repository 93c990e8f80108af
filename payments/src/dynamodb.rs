//! [`DynamoDbLedger`]: the example on [`DynamoDbStore`], balances in a second table, credited
//! by an `Update` in the completion's `TransactWriteItems`.

use std::collections::HashMap;
use std::sync::Arc;

use sqs_claim::aws_sdk_dynamodb::Client;
use sqs_claim::aws_sdk_dynamodb::error::ProvideErrorMetadata;
use sqs_claim::aws_sdk_dynamodb::types::{
    AttributeValue, KeyType, TableDescription, TableStatus, TransactWriteItem, Update,
};

use super::{Ledger, Payment, read_balance};
use crate::config::{PARTITION_KEY_VAR, SORT_KEY_VAR, key_layout_values};
use sqs_claim::store::DynamoDbStore;
use sqs_claim::store::dynamodb::{
    DynamoDbKeySchema, classify, create_table_with_key, table_status,
};
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

    async fn create_accounts_table(&self) -> Result<(), Error> {
        create_table_with_key(self.client(), self.accounts_table(), ACCOUNT).await
    }

    /// The `sqs-claim init` that creates this ledger's tables: the accounts table is named
    /// whenever it is not the default, and the claims table's key layout whenever it is not
    /// the default, so the hint creates the tables this run looks for.
    pub fn init_command(&self) -> String {
        let table = self.inner.store.table();
        let mut command = format!("sqs-claim init --store dynamodb:{table}");
        if self.accounts_table() != format!("{table}-accounts") {
            command.push_str(" --accounts-table ");
            command.push_str(self.accounts_table());
        }
        let schema = self.inner.store.key_schema();
        if *schema != DynamoDbKeySchema::default() {
            let (partition, sort) = key_layout_values(schema);
            command.push_str(" --partition-key ");
            command.push_str(&shell_word(&partition));
            if let Some(sort) = sort {
                command.push_str(" --sort-key ");
                command.push_str(&shell_word(&sort));
            }
        }
        command
    }

    /// The table's description, `None` if it does not exist.
    async fn describe(&self, table: &str) -> Result<Option<TableDescription>, Error> {
        match self
            .client()
            .describe_table()
            .table_name(table)
            .send()
            .await
        {
            Ok(out) => Ok(out.table().cloned()),
            Err(e) if e.code() == Some("ResourceNotFoundException") => Ok(None),
            Err(e) => Err(classify("DescribeTable", e)),
        }
    }

    /// The table's status, `None` if it does not exist.
    async fn table_status(&self, table: &str) -> Result<Option<TableStatus>, Error> {
        table_status(self.client(), table).await
    }

    /// Refuses a claims table whose primary key is not the configured layout's (every claim
    /// would be refused with a `ValidationException`, or, worse, land on another layout's
    /// items): a partition key of type S, and the sort key of type S if the layout has one.
    fn check_key_schema(&self, description: &TableDescription) -> Result<(), Error> {
        let schema = self.inner.store.key_schema();
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
        let (partition, sort) = key_layout_values(schema);
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
                self.inner.store.table()
            ),
        ))
    }
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
                .map_err(|e| classify("Scan", e))?;
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
        self.inner.store.create_table().await?;
        self.create_accounts_table().await
    }

    /// Checks that both tables exist and are active, and that the claims table's key schema
    /// is the configured layout's; creates nothing. The two checks run at once, so a dark
    /// endpoint costs one timeout, not two.
    async fn prepare(&self) -> Result<(), Error> {
        let tables = [self.inner.store.table(), self.accounts_table()];
        let (claims, accounts) =
            futures::future::join(self.describe(tables[0]), self.table_status(tables[1])).await;
        let claims = claims?;
        if let Some(description) = &claims {
            self.check_key_schema(description)?;
        }
        let claims = Ok(claims.and_then(|d| d.table_status().cloned()));
        for (table, status) in tables.into_iter().zip([claims, accounts]) {
            match status? {
                Some(TableStatus::Active) => {}
                None => {
                    return Err(Error::new(
                        ErrorKind::StoreRejected,
                        format!(
                            "DynamoDB table {table} does not exist: create the tables with `{}`",
                            self.init_command()
                        ),
                    ));
                }
                Some(status) => {
                    return Err(Error::new(
                        ErrorKind::StoreUnavailable,
                        format!("DynamoDB table {table} is {status}, not ACTIVE: retry shortly"),
                    ));
                }
            }
        }
        Ok(())
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
