//! The example on [`PostgresStore`] (feature `postgres`): balances in a table next to the claims
//! table (`{claims table}_accounts`), credited by an upsert in the completion's transaction.

use super::{Ledger, Payment};
use crate::store::postgres::{PgEffect, PostgresStore};
use crate::{Error, ErrorKind};

/// The accounts table of `store`: `{claims table}_accounts`, in the same schema.
pub fn accounts_table(store: &PostgresStore) -> String {
    format!("{}_accounts", store.table())
}

/// `name` quoted as the store quotes its own table (case preserved).
fn quoted(name: &str) -> String {
    name.split('.')
        .map(|part| format!("\"{part}\""))
        .collect::<Vec<_>>()
        .join(".")
}

fn db_err(store: &PostgresStore, what: &str, e: tokio_postgres::Error) -> Error {
    let kind = match e.code() {
        Some(code) if code.code().starts_with("08") || code.code().starts_with("57P") => {
            ErrorKind::StoreUnavailable
        }
        Some(_) => ErrorKind::StoreRejected,
        None => ErrorKind::StoreUnavailable,
    };
    Error::with_source(
        kind,
        format!(
            "{what} (table {}); run `sqs-claim init` (or Ledger::init) to create the tables",
            accounts_table(store)
        ),
        e,
    )
}

async fn client(store: &PostgresStore) -> Result<deadpool_postgres::Client, Error> {
    store.pool().get().await.map_err(|e| {
        Error::with_source(
            ErrorKind::StoreUnavailable,
            "no PostgreSQL connection available; check that the database is up and reachable",
            e,
        )
    })
}

impl Ledger for PostgresStore {
    /// An upsert that must touch exactly one row: a new account only if the amount is itself a
    /// valid balance, an existing one only if the sum stays within
    /// `0..=`[`Payment::MAX_BALANCE_CENTS`] (summed as `numeric`, so no sum can overflow);
    /// otherwise it touches none and the completion is refused
    /// ([`ErrorKind::EffectRejected`]). The table's `CHECK` repeats the rule.
    fn credit(&self, account: &str, amount_cents: i64) -> PgEffect {
        let table = quoted(&accounts_table(self));
        let max = Payment::MAX_BALANCE_CENTS;
        PgEffect::new(format!(
            "INSERT INTO {table} AS a (account, balance) \
             SELECT $1::text, $2::bigint WHERE $2::bigint BETWEEN 0 AND {max} \
             ON CONFLICT (account) DO UPDATE SET balance = a.balance + EXCLUDED.balance \
             WHERE a.balance::numeric + EXCLUDED.balance BETWEEN 0 AND {max}"
        ))
        .bind(account.to_owned())
        .bind(amount_cents)
        .expect_rows(1)
    }

    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        let client = client(self).await?;
        let sql = format!(
            "SELECT account, balance FROM {} ORDER BY account",
            quoted(&accounts_table(self))
        );
        let rows = client
            .query(&sql, &[])
            .await
            .map_err(|e| db_err(self, "cannot read the balances", e))?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get(0)
                        .map_err(|e| db_err(self, "unexpected accounts row", e))?,
                    row.try_get(1)
                        .map_err(|e| db_err(self, "unexpected accounts row", e))?,
                ))
            })
            .collect()
    }

    /// Creates the claims table ([`PostgresStore::migrate`]) and the accounts table.
    async fn init(&self) -> Result<(), Error> {
        self.migrate().await?;
        let client = client(self).await?;
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (\
               account TEXT PRIMARY KEY, \
               balance BIGINT NOT NULL CHECK (balance BETWEEN 0 AND {}))",
            quoted(&accounts_table(self)),
            Payment::MAX_BALANCE_CENTS
        );
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| db_err(self, "cannot create the accounts table", e))
    }

    /// Checks that both tables exist and answer; creates nothing.
    async fn prepare(&self) -> Result<(), Error> {
        let client = client(self).await?;
        let sql = format!("SELECT 1 FROM {} LIMIT 0", quoted(self.table()));
        client.batch_execute(&sql).await.map_err(|e| {
            Error::with_source(
                ErrorKind::StoreRejected,
                format!(
                    "the claims table {} is not usable; run `sqs-claim init` (or \
                     PostgresStore::migrate) first",
                    self.table()
                ),
                e,
            )
        })?;
        self.balances().await.map(|_| ())
    }

    async fn prune_expired(
        &self,
        now: std::time::SystemTime,
        limit: u32,
    ) -> Result<Option<u64>, Error> {
        PostgresStore::prune_expired(self, now, limit)
            .await
            .map(Some)
    }
}
