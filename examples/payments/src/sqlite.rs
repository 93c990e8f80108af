//! [`SqliteLedger`]: the example on [`SqliteStore`]: balances in an `accounts` table of the same database file,
//! credited in the completion's transaction.

use super::{Ledger, Payment, read_balance};
use sqs_claim::store::StoreAdmin;
use sqs_claim::{Error, ErrorKind};
use sqs_claim::{SqlEffect, SqlValue, SqliteStore};

/// `CHECK (typeof(balance) = 'integer')`: SQLite turns an integer overflow into a float; the
/// check makes that a refused effect instead of a silently rounded balance. The range check
/// repeats the credit's own condition for tables created from now on (a table created before
/// keeps its schema; the credit's `WHERE` guards it).
const ACCOUNTS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS accounts (
    account TEXT PRIMARY KEY NOT NULL,
    balance INTEGER NOT NULL
        CHECK (typeof(balance) = 'integer' AND balance BETWEEN 0 AND 9007199254740991)
);
";
// The schema's bound is written out; it must be the one credits enforce.
const _: () = assert!(Payment::MAX_BALANCE_CENTS == 9_007_199_254_740_991);

/// An [`SqliteStore`] plus an `accounts` table in the same database file. Cheap to clone (clones
/// share the connection).
#[derive(Debug, Clone)]
pub struct SqliteLedger {
    store: SqliteStore,
}

impl SqliteLedger {
    /// The ledger on `store`; [`Ledger::init`] (or [`Ledger::prepare`]) creates its table.
    pub fn new(store: SqliteStore) -> Self {
        SqliteLedger { store }
    }

    /// The store, by value.
    pub fn into_inner(self) -> SqliteStore {
        self.store
    }
}

impl Ledger for SqliteLedger {
    type Store = SqliteStore;

    fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// An upsert that must touch exactly one row: a new account only if the amount is itself a
    /// valid balance, an existing one only if the sum stays within
    /// `0..=`[`Payment::MAX_BALANCE_CENTS`]; otherwise it touches none and the completion is
    /// refused ([`ErrorKind::EffectRejected`]). (SQLite turns an overflowing sum into a float,
    /// which the range comparison refuses too.)
    fn credit(&self, account: &str, amount_cents: i64) -> SqlEffect {
        SqlEffect::new(
            format!(
                "INSERT INTO accounts (account, balance) SELECT ?1, ?2 WHERE ?2 BETWEEN 0 AND {max} \
                 ON CONFLICT (account) DO UPDATE SET balance = balance + excluded.balance \
                 WHERE balance + excluded.balance BETWEEN 0 AND {max}",
                max = Payment::MAX_BALANCE_CENTS
            ),
            vec![account.into(), amount_cents.into()],
        )
        .expect_rows(1)
    }

    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        let rows = self
            .store
            .query(
                "SELECT account, balance FROM accounts ORDER BY account",
                vec![],
            )
            .await?;
        let table = format!("table accounts in {}", self.store.location());
        rows.into_iter()
            .map(|row| match row.as_slice() {
                [SqlValue::Text(account), SqlValue::Integer(balance)] => {
                    Ok((account.clone(), *balance))
                }
                [SqlValue::Text(account), SqlValue::Text(text)] => {
                    read_balance(&table, account, text).map(|b| (account.clone(), b))
                }
                [SqlValue::Text(account), SqlValue::Real(r)] => {
                    read_balance(&table, account, &r.to_string()).map(|b| (account.clone(), b))
                }
                [SqlValue::Text(account), other] => Err(Error::new(
                    ErrorKind::StoreRejected,
                    format!(
                        "the balance of account {account:?} in {table} is {}, not an integer; \
                         fix or remove that row",
                        sql_type(other)
                    ),
                )),
                _ => Err(Error::new(
                    ErrorKind::StoreRejected,
                    format!(
                        "{table} has a row whose account is not text: is it the accounts table?"
                    ),
                )),
            })
            .collect()
    }

    async fn init(&self) -> Result<(), Error> {
        self.store.execute_batch(ACCOUNTS_SCHEMA).await
    }

    /// The database is local: create the accounts table if it is missing.
    async fn prepare(&self) -> Result<(), Error> {
        self.init().await
    }

    async fn prune_expired(
        &self,
        now: std::time::SystemTime,
        limit: u32,
    ) -> Result<Option<u64>, Error> {
        self.store.prune_expired(now, limit).await
    }
}

/// What a value that should be an integer is, for an error.
fn sql_type(v: &SqlValue) -> &'static str {
    match v {
        SqlValue::Null => "NULL",
        SqlValue::Integer(_) => "an integer",
        SqlValue::Real(_) => "a real number",
        SqlValue::Text(_) => "text",
        SqlValue::Blob(_) => "a blob",
    }
}
