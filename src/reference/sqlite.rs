//! The example on [`SqliteStore`]: balances in an `accounts` table of the same database file,
//! credited in the completion's transaction.

use super::Ledger;
use crate::Error;
use crate::store::sqlite::{SqlEffect, SqlValue, SqliteStore};

/// `CHECK (typeof(balance) = 'integer')`: SQLite turns an integer overflow into a float; the
/// check makes that a refused effect instead of a silently rounded balance.
const ACCOUNTS_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS accounts (
    account TEXT PRIMARY KEY NOT NULL,
    balance INTEGER NOT NULL CHECK (typeof(balance) = 'integer')
);
";

impl Ledger for SqliteStore {
    fn credit(&self, account: &str, amount_cents: i64) -> SqlEffect {
        SqlEffect::new(
            "INSERT INTO accounts (account, balance) VALUES (?1, ?2) \
             ON CONFLICT (account) DO UPDATE SET balance = balance + excluded.balance",
            vec![account.into(), amount_cents.into()],
        )
        .expect_rows(1)
    }

    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        let rows = self
            .query(
                "SELECT account, balance FROM accounts ORDER BY account",
                vec![],
            )
            .await?;
        rows.into_iter()
            .map(|row| match row.as_slice() {
                [SqlValue::Text(account), SqlValue::Integer(balance)] => {
                    Ok((account.clone(), *balance))
                }
                _ => Err(Error::new(
                    crate::ErrorKind::StoreRejected,
                    format!(
                        "table accounts in {} has a row that is not (text, integer)",
                        self.location()
                    ),
                )),
            })
            .collect()
    }

    async fn init(&self) -> Result<(), Error> {
        self.execute_batch(ACCOUNTS_SCHEMA).await
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
        SqliteStore::prune_expired(self, now, limit).await.map(Some)
    }
}
