//! [`PostgresLedger`]: the example on [`PostgresStore`] (feature `postgres`): balances in a table next to the claims
//! table (`{claims table}_accounts`), credited by an upsert in the completion's transaction.

use super::{Ledger, Payment};
use sqs_claim::Error;
use sqs_claim::store::StoreAdmin;
use sqs_claim::store::postgres::{PgEffect, PostgresStore, check_error};

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

/// The library's hint for a missing table, and the app's (which creates the accounts table too).
const SQS_CLAIM_INIT: &str = "sqs-claim init";
const PAYMENTS_INIT: &str = "payments init";

/// An error on the accounts table: only a missing table (SQLSTATE 42P01) says to run
/// `payments init`; anything else names its cause (see `check_error`).
fn db_err(store: &PostgresStore, what: &str, e: tokio_postgres::Error) -> Error {
    let table = accounts_table(store);
    let inner = crate::with_app_hint(check_error(&table, e), SQS_CLAIM_INIT, PAYMENTS_INIT);
    Error::new(inner.kind(), format!("{what}: {inner:#}"))
}

/// A [`PostgresStore`] plus its accounts table ([`accounts_table`]). Cheap to clone (clones
/// share the pool).
#[derive(Debug, Clone)]
pub struct PostgresLedger {
    store: PostgresStore,
}

impl PostgresLedger {
    /// The ledger on `store`; [`Ledger::init`] creates its tables.
    pub fn new(store: PostgresStore) -> Self {
        PostgresLedger { store }
    }

    /// The store, by value.
    pub fn into_inner(self) -> PostgresStore {
        self.store
    }
}

impl Ledger for PostgresLedger {
    type Store = PostgresStore;

    fn store(&self) -> &PostgresStore {
        &self.store
    }

    /// An upsert that must touch exactly one row: a new account only if the amount is itself a
    /// valid balance, an existing one only if the sum stays within
    /// `0..=`[`Payment::MAX_BALANCE_CENTS`] (summed as `numeric`, so no sum can overflow);
    /// otherwise it touches none and the completion is refused
    /// ([`ErrorKind::EffectRejected`](sqs_claim::ErrorKind::EffectRejected)). The table's `CHECK` repeats the rule.
    fn credit(&self, account: &str, amount_cents: i64) -> PgEffect {
        let table = quoted(&accounts_table(&self.store));
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

    /// Each round trip bounded on its own ([`PostgresStore::bounded`]), as the store's calls
    /// are: a server that answers each late still answers.
    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        read_balances(&self.store).await
    }

    /// Creates the claims table ([`StoreAdmin::init`]) and the accounts table.
    async fn init(&self) -> Result<(), Error> {
        self.store.init().await?;
        create_accounts(&self.store).await
    }

    /// Checks that both tables exist and answer, at once; creates nothing.
    async fn prepare(&self) -> Result<(), Error> {
        let claims = self.store.check_ready();
        let (claims, accounts) = futures::future::join(claims, self.balances()).await;
        claims.map_err(|e| crate::with_app_hint(e, SQS_CLAIM_INIT, PAYMENTS_INIT))?;
        accounts.map(|_| ())
    }

    async fn prune_expired(
        &self,
        now: std::time::SystemTime,
        limit: u32,
    ) -> Result<Option<u64>, Error> {
        self.store.prune_expired(now, limit).await
    }
}

/// Three round trips (a pooled connection, the prepare, the query), each bounded on its own.
async fn read_balances(store: &PostgresStore) -> Result<Vec<(String, i64)>, Error> {
    const OP: &str = "reading the balances";
    let client = store.bounded(OP, store.client()).await?;
    let sql = format!(
        "SELECT account, balance FROM {} ORDER BY account",
        quoted(&accounts_table(store))
    );
    let err = |e| db_err(store, "cannot read the balances", e);
    let stmt = store
        .bounded(OP, async { client.prepare_cached(&sql).await.map_err(err) })
        .await?;
    let rows = store
        .bounded(OP, async { client.query(&stmt, &[]).await.map_err(err) })
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get(0)
                    .map_err(|e| db_err(store, "unexpected accounts row", e))?,
                row.try_get(1)
                    .map_err(|e| db_err(store, "unexpected accounts row", e))?,
            ))
        })
        .collect()
}

/// Two round trips (a pooled connection, one simple query), each bounded on its own.
async fn create_accounts(store: &PostgresStore) -> Result<(), Error> {
    const OP: &str = "creating the accounts table";
    let client = store.bounded(OP, store.client()).await?;
    // Under the advisory lock the store's `init` takes (one simple query is one implicit
    // transaction, which the `xact` lock lasts for): two `CREATE TABLE IF NOT EXISTS` at once
    // can both miss the table, and one then fails on the catalog's unique index (two
    // `sqs-claim init` started together).
    let sql = format!(
        "SELECT pg_advisory_xact_lock(7262871090); \
         CREATE TABLE IF NOT EXISTS {} (\
           account TEXT PRIMARY KEY, \
           balance BIGINT NOT NULL CHECK (balance BETWEEN 0 AND {}))",
        quoted(&accounts_table(store)),
        Payment::MAX_BALANCE_CENTS
    );
    store
        .bounded(OP, async {
            client
                .batch_execute(&sql)
                .await
                .map_err(|e| db_err(store, "cannot create the accounts table", e))
        })
        .await
}
