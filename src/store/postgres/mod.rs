//! [`PostgresStore`]: the contract as one `INSERT ... ON CONFLICT` per claim, with atomic
//! [`PgEffect`]s committed in the completion's transaction (feature `postgres`).
//!
//! # Schema
//!
//! [`StoreAdmin::init`] creates (idempotently) one table, by default
//! `sqs_claim_processed_events`:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS sqs_claim_processed_events (
//!     id          TEXT PRIMARY KEY,  -- the idempotency key (see "Long keys")
//!     status      TEXT NOT NULL CHECK (status IN ('INPROGRESS', 'COMPLETED')),
//!     token       TEXT NOT NULL,     -- owner token of the claim that wrote the row
//!     lease_until BIGINT,            -- epoch ms; NULL once completed
//!     expires_at  BIGINT NOT NULL,   -- epoch ms; the row counts as absent from then on
//!     fingerprint TEXT,
//!     response    TEXT               -- the stored response, as given; NULL for none
//! );
//! CREATE INDEX IF NOT EXISTS sqs_claim_processed_events_expires_at_idx
//!     ON sqs_claim_processed_events (expires_at);
//! ```
//!
//! A table created before the stored response has no `response` column: `init` adds it
//! (`ALTER TABLE ... ADD COLUMN response TEXT`, only if it is missing, so a current table is
//! not locked for it), and the rows already there read as completed with no response. Until
//! `init` has run on such a table, every claim fails with [`ErrorKind::StoreRejected`]
//! saying so.
//!
//! Times are epoch milliseconds, the caller's clock, compared as plain integers: the contract
//! forbids deciding on the server's clock (`now()`), and integers avoid any time-zone or
//! precision conversion. `to_timestamp(expires_at / 1000.0)` shows them as timestamps.
//!
//! # Claim: one statement, one round trip
//!
//! ```sql
//! INSERT INTO t AS r (...) VALUES ($key, 'INPROGRESS', $token, ...)
//! ON CONFLICT (id) DO UPDATE SET status = CASE WHEN <claimable> THEN 'INPROGRESS' ELSE r.status END, ...
//! RETURNING token = $token AS won, status, lease_until, expires_at, fingerprint
//! ```
//!
//! where `<claimable>` is "expired, or in progress with a lapsed lease" against the caller's
//! `now`. The conflict path always updates the row (to itself when it is not claimable), which
//! takes the row lock: concurrent claimers queue on it, each sees the latest committed version,
//! and the `RETURNING` clause classifies the outcome (`Acquired` if the stored token is ours,
//! else `Completed` or `HeldElsewhere` from the row) with no second read. The price is a
//! (HOT, index-free) row version per duplicate claim, which autovacuum reclaims.
//!
//! The usual alternative, `DO UPDATE ... WHERE <claimable>` plus a CTE that reads the row when
//! nothing was returned, does not work under concurrency: the CTE reads the statement's
//! snapshot, which cannot see a row inserted by a transaction that committed while this one
//! waited on it, so a race loser would find no row at all.
//!
//! # Completion: fenced, and atomic with the effects
//!
//! Without effects, completion is one `UPDATE ... WHERE id = $1 AND token = $2 AND status =
//! 'INPROGRESS'`, which also writes the response. With effects, it is one transaction: lock the
//! row (`SELECT ... FOR UPDATE`, checking token and status), run each [`PgEffect`], mark the
//! row completed with its response, commit. A response over
//! [`Capabilities::max_response_bytes`] (the default 6 MiB; a `TEXT` value holds up to 1 GB) is
//! refused before a connection is taken. The
//! business writes and the completion are committed together or not at all: the
//! transactional-idempotency-table pattern. A repeated completion by the same token finds the
//! row completed and commits nothing.
//!
//! # Long keys
//!
//! A B-tree index entry is limited to about 2.7 kB, so keys longer than 512 bytes (and keys that
//! contain a NUL byte, which `TEXT` cannot hold, or that start with `sha256:`) are stored as
//! `sha256:` followed by the hex SHA-256 of the key. Shorter keys are stored verbatim, so an
//! operator can look them up.
//!
//! # Pruning and very large tables
//!
//! Expired rows count as absent but stay until deleted. Run
//! [`StoreAdmin::prune_expired`] on a schedule (for example every minute with a limit of
//! 10,000): each call is one bounded `DELETE` on the `expires_at` index that skips rows
//! locked by a running claim, so it never blocks the consumers for long.
//!
//! For very large tables, note that the obvious layout, range-partitioning on `expires_at` and
//! dropping old partitions, **breaks the claim**: PostgreSQL requires the partition key in every
//! unique constraint, so the key would become `(id, expires_at)`, and a redelivery (with a new
//! `expires_at`) would insert a second row instead of conflicting with the first. What works:
//!
//! * hash-partition on `id` (`PARTITION BY HASH (id)`, say 16 partitions): uniqueness on `id`
//!   holds, each partition's index and vacuum stay small, and `prune_expired` keeps working;
//! * tune autovacuum for the churn (`autovacuum_vacuum_scale_factor = 0.01` on the table);
//! * or rotate whole tables yourself: write to table B while A drains, only if your dedup window
//!   is shorter than the rotation period and you check both tables while both are live.
//!
//! # Connections and TLS
//!
//! [`PostgresStore::connect`] builds a `deadpool-postgres` pool without TLS, for a database on
//! a private network or localhost. For TLS, build a pool with your connector (for example
//! `tokio-postgres-rustls`) and pass it to [`PostgresStore::new`].
//!
//! # Timeouts: a silent server is detected
//!
//! `tokio-postgres` has no query timeout: a server behind a network partition (or a security
//! group change) neither answers nor resets the connection, and a query waits forever. So
//! every store call (claim, complete, release, migrate, prune) is bounded on the client, per
//! answer: each round trip of the call (a pooled connection, `BEGIN`, a prepare, a statement,
//! `COMMIT`) must be answered within [`PostgresSettings::call_timeout`] (default 5 s, also for
//! a pool passed to [`PostgresStore::new`]), or the call fails with
//! [`ErrorKind::StoreUnavailable`] "no answer from PostgreSQL within ...": the statement may or
//! may not have run, which the claim protocol makes safe (a claim that landed is held until its
//! lease lapses; a repeated completion is a no-op). Per answer, not per call, is what tells a
//! dark server from a slow one: a one-shot transaction is four round trips or more, and a server
//! that answers each of them seconds late (a saturated instance, a congested link) still
//! answers, so its calls go on; one that stopped answering fails the call one bound after the
//! round trip it left unanswered. [`PostgresStore::connect_with`] also sets, on each connection:
//!
//! * a server-side `statement_timeout` (default 3 s, shorter than the client bound, so a
//!   statement stuck on a lock is cancelled by the server and reported as such), unless the
//!   URL's `options` already set one;
//! * a connect timeout (default 2 s) and TCP keepalives (idle 5 s, then every 2 s, 3 probes)
//!   with a TCP user timeout (5 s), so a dead peer is noticed on an idle pooled connection too.
//!
//! # Errors
//!
//! Pool timeouts, connection failures, shutdowns, serialization failures and deadlocks are
//! [`ErrorKind::StoreUnavailable`]; other SQL errors (a missing table, a permission) are
//! [`ErrorKind::StoreRejected`]. In an effect, an integrity violation (unique, check, foreign
//! key, not null) or a row count other than the expected one is
//! [`ErrorKind::EffectRejected`].

use std::borrow::Cow;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::{
    AnsweredBy, Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion,
    Effects, Extension, Inspected, OneShotWrite, Status, StoreAdmin, StoredResponse, epoch_millis,
    from_epoch_millis,
};
use crate::{Error, ErrorKind};

mod admin;
mod claim;
mod errors;
mod schema;
mod settings;

#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub use errors::check_error;
#[cfg(not(feature = "admin"))]
pub(crate) use errors::check_error;
pub use settings::PostgresSettings;

// The children's own items, for one another (each child reads the parent's scope).
use errors::*;
use schema::*;

/// The default table name.
pub(crate) const DEFAULT_TABLE: &str = "sqs_claim_processed_events";

/// Keys longer than this (in bytes) are stored as their SHA-256 (see "Long keys").
const MAX_VERBATIM_KEY: usize = 512;

/// A SQL statement committed in the same transaction as a [`PostgresStore`] completion.
///
/// Parameters are owned (the processor may retry a completion after a transient error, so
/// effects are cloned). With [`expect_rows`](Self::expect_rows), any other affected-row count
/// cancels the transaction with [`ErrorKind::EffectRejected`]: the way to say "debit only if
/// the balance suffices" (`UPDATE ... WHERE balance >= $1`, expect 1 row). An integrity
/// violation (unique, check, foreign key, not null) also cancels with `EffectRejected`.
///
/// ```
/// use sqs_claim::store::postgres::PgEffect;
/// let effect = PgEffect::new("UPDATE accounts SET balance = balance + $1 WHERE id = $2")
///     .bind(1_500_i64)
///     .bind("acct-42".to_string())
///     .expect_rows(1);
/// # let _ = effect;
/// ```
#[derive(Clone)]
pub struct PgEffect {
    sql: Arc<str>,
    params: Vec<Arc<dyn ToSql + Send + Sync>>,
    expect_rows: Option<u64>,
}

impl PgEffect {
    /// A statement with no parameters yet (`$1`, `$2`, ... are bound in order by
    /// [`bind`](Self::bind)).
    pub fn new(sql: impl Into<String>) -> Self {
        PgEffect {
            sql: Arc::from(sql.into()),
            params: Vec::new(),
            expect_rows: None,
        }
    }

    /// Binds the next parameter (any `tokio_postgres` [`ToSql`] value: `i64`, `String`,
    /// `Option<T>`, ...).
    pub fn bind<T: ToSql + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.params.push(Arc::new(value));
        self
    }

    /// Requires the statement to affect exactly `rows` rows, or the completion is refused.
    pub fn expect_rows(mut self, rows: u64) -> Self {
        self.expect_rows = Some(rows);
        self
    }
}

impl std::fmt::Debug for PgEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Parameter values may be business data: show only how many there are.
        f.debug_struct("PgEffect")
            .field("sql", &self.sql)
            .field("params", &self.params.len())
            .field("expect_rows", &self.expect_rows)
            .finish()
    }
}

/// A claim store in a PostgreSQL table. Cloning it is cheap and shares the pool.
///
/// ```no_run
/// # async fn demo() -> Result<(), sqs_claim::Error> {
/// use sqs_claim::PostgresStore;
/// use sqs_claim::store::StoreAdmin;
/// let store = PostgresStore::connect("postgres://app@db.internal/app")?;
/// store.init().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    sql: Arc<Statements>,
    call_timeout: Duration,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.sql.table)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// A store on an existing pool, using the default table `sqs_claim_processed_events`. Each
    /// call is bounded by the default [`PostgresSettings::call_timeout`] (5 s); the pool's
    /// connections keep the settings they were built with.
    pub fn new(pool: Pool) -> Self {
        PostgresStore {
            pool,
            sql: Arc::new(Statements::new(DEFAULT_TABLE)),
            call_timeout: PostgresSettings::default().call_timeout,
        }
    }

    /// Builds a pool (up to 16 connections, no TLS; see the module docs) for `url`
    /// (`postgres://user[:password]@host[:port]/db`), bounded by the default
    /// [`PostgresSettings`]. Connections are opened on first use, so this does not fail when
    /// the database is down.
    pub fn connect(url: &str) -> Result<Self, Error> {
        Self::connect_with(url, PostgresSettings::default())
    }

    /// [`connect`](Self::connect) with other timeouts, keepalives or pool size.
    pub fn connect_with(url: &str, settings: PostgresSettings) -> Result<Self, Error> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            Error::with_source(
                ErrorKind::Config,
                "invalid PostgreSQL URL (expected postgres://user[:password]@host[:port]/db)",
                e,
            )
        })?;
        settings.apply(&mut config);
        let manager = Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        // Bounded waits: a dead database must surface as `StoreUnavailable` within a Lambda
        // invocation, not hang until the deadline.
        let bound = Some(settings.call_timeout);
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(bound)
            .create_timeout(bound)
            .recycle_timeout(bound)
            .build()
            .map_err(|e| {
                Error::with_source(ErrorKind::Config, "cannot build the PostgreSQL pool", e)
            })?;
        Ok(PostgresStore::new(pool).with_call_timeout(settings.call_timeout))
    }

    /// Sets the client-side bound on each answer of a store call (see "Timeouts" in the module docs).
    pub(crate) fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The client-side bound on each answer of a store call (see "Timeouts" in the module docs).
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// Runs `call` within the call timeout; past it, `StoreUnavailable` naming the bound. The
    /// statement may have run on the server: the caller's protocol must make that safe (every
    /// store call here does).
    ///
    /// Public for statements of your own beside the store's (a business table read at start-up,
    /// say), so that they are bounded and worded like the store's. Bound each round trip on its
    /// own (the pooled connection, a prepare, the statement), as the store bounds its own calls
    /// (see "Timeouts" in the module docs): one bound around several round trips would give up
    /// on a server that answers each of them late, but answers.
    pub async fn bounded<T>(
        &self,
        op: &str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.call_timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(self.no_answer(op)),
        }
    }

    /// Waits for one answer of the server (a `BEGIN`, a prepare, a statement, a `COMMIT`) for
    /// at most the call timeout. A store call is a few of these in a row: each answer that
    /// comes late but within the bound keeps the call going (a slow server is used, slowly),
    /// and an answer that does not come within it ends the call as no answer (a dark server).
    pub(super) async fn answer<T, E>(
        &self,
        op: &str,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<Result<T, E>, Error> {
        tokio::time::timeout(self.call_timeout, request)
            .await
            .map_err(|_| self.no_answer(op))
    }

    fn no_answer(&self, op: &str) -> Error {
        Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "no answer from PostgreSQL within {} ms during {op} (table {:?}): the server \
                 or the network is down or partitioned; the statement may or may not have \
                 run",
                self.call_timeout.as_millis(),
                self.sql.table
            ),
        )
        .no_answer()
    }

    /// Uses `table` (a plain identifier, or `schema.table`) instead of the default.
    pub fn with_table(mut self, table: &str) -> Result<Self, Error> {
        validate_table(table)?;
        self.sql = Arc::new(Statements::new(table));
        Ok(self)
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.sql.table
    }

    /// The pool (to read what effects wrote, or run your own queries).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

impl PostgresStore {
    /// A pooled connection, its errors worded like the store's. Unbounded: run it inside
    /// [`bounded`](Self::bounded).
    pub async fn client(&self) -> Result<deadpool_postgres::Client, Error> {
        self.pool.get().await.map_err(|e| match e {
            PoolError::Backend(e) => self.pg_err("opening a connection", "", e),
            // The socket opened (or hangs in connect) but the start-up handshake never ends.
            PoolError::Timeout(deadpool_postgres::TimeoutType::Create) => Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "no answer from PostgreSQL within {} ms while opening a connection (table \
                     {:?}): the server or the network is down or partitioned",
                    self.call_timeout.as_millis(),
                    self.sql.table
                ),
            )
            .no_answer(),
            other => {
                // Every pooled connection busy past the bound: the calls on them have not
                // answered either.
                let waited = matches!(
                    other,
                    PoolError::Timeout(deadpool_postgres::TimeoutType::Wait)
                );
                let e = Error::with_source(
                    ErrorKind::StoreUnavailable,
                    format!(
                        "no PostgreSQL connection available for table {:?}; check that the \
                         database is up and reachable, and the pool size against \
                         max_connections",
                        self.sql.table
                    ),
                    other,
                );
                if waited { e.no_answer() } else { e }
            }
        })
    }

    fn pg_err(&self, op: &str, key: &str, e: tokio_postgres::Error) -> Error {
        map_pg_err(op, key, &self.sql.table, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_odd_and_lookalike_keys_are_hashed() {
        assert_eq!(stored_id("orders#42"), "orders#42");
        let long = "a".repeat(MAX_VERBATIM_KEY + 1);
        assert!(stored_id(&long).starts_with("sha256:"));
        assert_ne!(
            stored_id(&long),
            stored_id(&"a".repeat(MAX_VERBATIM_KEY + 2))
        );
        assert!(stored_id("nul\0byte").starts_with("sha256:"));
        let lookalike = format!("sha256:{}", crate::key::sha256_hex(long.as_bytes()));
        assert_ne!(
            stored_id(&lookalike),
            stored_id(&long),
            "a key cannot pose as a hash"
        );
    }

    #[test]
    fn table_names_are_plain_identifiers() {
        assert!(validate_table("sqs_claim_processed_events").is_ok());
        assert!(validate_table("claims.events_2").is_ok());
        for bad in ["", "a;drop table x", "a b", "1abc", "a.b.c", "\"x\""] {
            assert!(validate_table(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
