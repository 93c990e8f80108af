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
//! every store call (claim, complete, release, migrate, prune) is bounded on the client
//! ([`PostgresSettings::call_timeout`], default 5 s, also for a pool passed to
//! [`PostgresStore::new`]) and fails with [`ErrorKind::StoreUnavailable`] "no answer from
//! PostgreSQL within ...": the statement may or may not have run, which the claim protocol
//! makes safe (a claim that landed is held until its lease lapses; a repeated completion is a
//! no-op). [`PostgresStore::connect_with`] also sets, on each connection:
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
    Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects,
    Inspected, OneShotWrite, Status, StoreAdmin, StoredResponse, epoch_millis, from_epoch_millis,
};
use crate::{Error, ErrorKind};

/// The default table name.
pub const DEFAULT_TABLE: &str = "sqs_claim_processed_events";

/// Keys longer than this (in bytes) are stored as their SHA-256 (see "Long keys").
const MAX_VERBATIM_KEY: usize = 512;

/// The bounds [`PostgresStore::connect_with`] puts on connections and calls. See "Timeouts" in
/// the module docs for why each exists; the defaults fit a Lambda invocation (a store call
/// normally takes a millisecond or two, so seconds mean the server or the network is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresSettings {
    /// The client-side bound on each store call, pool wait and connect included. Default 5 s.
    pub call_timeout: Duration,
    /// The server-side `statement_timeout` set on each connection (`None`: leave the server's
    /// or the URL's). Default 3 s.
    pub statement_timeout: Option<Duration>,
    /// How long opening a socket may take. Default 2 s.
    pub connect_timeout: Duration,
    /// Idle time before the first TCP keepalive probe. Default 5 s.
    pub keepalives_idle: Duration,
    /// Time between probes. Default 2 s.
    pub keepalives_interval: Duration,
    /// Probes before the connection is given up. Default 3.
    pub keepalives_retries: u32,
    /// How long sent data may stay unacknowledged before the kernel drops the connection
    /// (`TCP_USER_TIMEOUT`, Linux). Default 5 s.
    pub tcp_user_timeout: Duration,
    /// Connections in the pool. Default 16.
    pub pool_size: usize,
}

impl Default for PostgresSettings {
    fn default() -> Self {
        PostgresSettings {
            call_timeout: Duration::from_secs(5),
            statement_timeout: Some(Duration::from_secs(3)),
            connect_timeout: Duration::from_secs(2),
            keepalives_idle: Duration::from_secs(5),
            keepalives_interval: Duration::from_secs(2),
            keepalives_retries: 3,
            tcp_user_timeout: Duration::from_secs(5),
            pool_size: 16,
        }
    }
}

impl PostgresSettings {
    /// Sets the client-side bound on each store call.
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets (or, with `None`, leaves alone) the server-side `statement_timeout`.
    pub fn with_statement_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the keepalive idle time, probe interval and probe count.
    pub fn with_keepalives(mut self, idle: Duration, interval: Duration, retries: u32) -> Self {
        self.keepalives_idle = idle;
        self.keepalives_interval = interval;
        self.keepalives_retries = retries;
        self
    }

    /// Sets the TCP user timeout.
    pub fn with_tcp_user_timeout(mut self, timeout: Duration) -> Self {
        self.tcp_user_timeout = timeout;
        self
    }

    /// Sets the pool size (at least 1).
    pub fn with_pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    fn apply(&self, config: &mut tokio_postgres::Config) {
        config
            .connect_timeout(self.connect_timeout)
            .keepalives(true)
            .keepalives_idle(self.keepalives_idle)
            .keepalives_interval(self.keepalives_interval)
            .keepalives_retries(self.keepalives_retries)
            .tcp_user_timeout(self.tcp_user_timeout);
        if let Some(timeout) = self.statement_timeout {
            let options = config.get_options().unwrap_or_default().to_owned();
            // A timeout the URL sets on purpose wins.
            if !options.contains("statement_timeout") {
                let ms = timeout.as_millis().max(1);
                let options = format!("{options} -c statement_timeout={ms}");
                config.options(options.trim_start());
            }
        }
    }
}

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

    /// The SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
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

/// The claim statement, writing the record with `status`: `INPROGRESS` for a claim,
/// `COMPLETED` for a one-shot write. It takes the row only if it is absent, expired, or in
/// progress under a lapsed lease, and answers whether it won with the row as it stands. A row
/// it takes starts with no response (a one-shot write stores none).
fn claim_sql(quoted: &str, status: &str) -> String {
    let claimable = "(r.expires_at <= $6 OR (r.status = 'INPROGRESS' AND r.lease_until <= $6))";
    format!(
        "INSERT INTO {quoted} AS r (id, status, token, lease_until, expires_at, fingerprint) \
         VALUES ($1, '{status}', $2, $3, $4, $5) \
         ON CONFLICT (id) DO UPDATE SET \
           status = CASE WHEN {claimable} THEN '{status}' ELSE r.status END, \
           token = CASE WHEN {claimable} THEN EXCLUDED.token ELSE r.token END, \
           lease_until = CASE WHEN {claimable} THEN EXCLUDED.lease_until ELSE r.lease_until END, \
           expires_at = CASE WHEN {claimable} THEN EXCLUDED.expires_at ELSE r.expires_at END, \
           fingerprint = CASE WHEN {claimable} THEN EXCLUDED.fingerprint ELSE r.fingerprint END, \
           response = CASE WHEN {claimable} THEN NULL ELSE r.response END \
         RETURNING token = $2 AS won, status, lease_until, expires_at, fingerprint, response"
    )
}

/// The SQL of one table, built once.
#[derive(Debug)]
struct Statements {
    table: String,
    claim: String,
    claim_completed: String,
    complete: String,
    completed_by: String,
    lock: String,
    release: String,
    inspect: String,
    delete_if: String,
    prune: String,
    migrate: String,
}

impl Statements {
    fn new(table: &str) -> Self {
        let quoted = quote_table(table);
        let index = format!(
            "\"{}_expires_at_idx\"",
            table.rsplit('.').next().unwrap_or(table)
        );
        Statements {
            table: table.to_owned(),
            claim: claim_sql(&quoted, "INPROGRESS"),
            // The one-shot write: the claim's condition, the record written completed.
            claim_completed: claim_sql(&quoted, "COMPLETED"),
            complete: format!(
                "UPDATE {quoted} SET status = 'COMPLETED', lease_until = NULL, expires_at = $3, \
                 response = $4 WHERE id = $1 AND token = $2 AND status = 'INPROGRESS'"
            ),
            completed_by: format!("SELECT status FROM {quoted} WHERE id = $1 AND token = $2"),
            lock: format!("SELECT status FROM {quoted} WHERE id = $1 AND token = $2 FOR UPDATE"),
            release: format!(
                "DELETE FROM {quoted} WHERE id = $1 AND token = $2 AND status = 'INPROGRESS'"
            ),
            inspect: format!(
                "SELECT status, token, lease_until, expires_at, fingerprint, response \
                 FROM {quoted} WHERE id = $1"
            ),
            // The operator's force_release and forget: the status is checked by the delete.
            delete_if: format!("DELETE FROM {quoted} WHERE id = $1 AND status = $2"),
            // The outer `expires_at <= $1` is re-checked on the row's latest version if a claim
            // took the row over meanwhile, so a live claim is never deleted.
            prune: format!(
                "DELETE FROM {quoted} WHERE id IN (\
                   SELECT id FROM {quoted} WHERE expires_at <= $1 \
                   ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) \
                 AND expires_at <= $1"
            ),
            // The advisory lock serialises concurrent migrations: two `CREATE TABLE IF NOT
            // EXISTS` racing can otherwise fail on the catalog's unique index (and two
            // upgrades could both find the column missing). The column of the stored response
            // is added to a table of an older version only if it is missing: `ALTER TABLE`
            // takes an exclusive lock even when `IF NOT EXISTS` finds nothing to do, which
            // would queue every claim behind each start-up's migration.
            migrate: format!(
                "SELECT pg_advisory_xact_lock(7262871090); \
                 CREATE TABLE IF NOT EXISTS {quoted} (\
                   id TEXT PRIMARY KEY, \
                   status TEXT NOT NULL CHECK (status IN ('INPROGRESS', 'COMPLETED')), \
                   token TEXT NOT NULL, \
                   lease_until BIGINT, \
                   expires_at BIGINT NOT NULL, \
                   fingerprint TEXT, \
                   response TEXT); \
                 DO $migrate$ BEGIN \
                   IF NOT EXISTS (SELECT 1 FROM pg_attribute \
                       WHERE attrelid = '{quoted}'::regclass AND attname = 'response' \
                       AND NOT attisdropped) THEN \
                     ALTER TABLE {quoted} ADD COLUMN IF NOT EXISTS response TEXT; \
                   END IF; \
                 END $migrate$; \
                 CREATE INDEX IF NOT EXISTS {index} ON {quoted} (expires_at);"
            ),
        }
    }
}

fn quote_table(table: &str) -> String {
    table
        .split('.')
        .map(|part| format!("\"{part}\""))
        .collect::<Vec<_>>()
        .join(".")
}

/// A table name is spliced into SQL, so only plain identifiers (optionally `schema.table`)
/// are accepted.
fn validate_table(table: &str) -> Result<(), Error> {
    let parts: Vec<&str> = table.split('.').collect();
    let ok = (1..=2).contains(&parts.len())
        && parts.iter().all(|p| {
            let mut chars = p.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && p.len() <= 63
        });
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Config,
            format!(
                "invalid PostgreSQL table name {table:?}: use letters, digits and underscores \
                 (at most 63), optionally as schema.table"
            ),
        ))
    }
}

/// The `id` a key is stored under (see "Long keys" in the module docs).
fn stored_id(key: &str) -> Cow<'_, str> {
    if key.len() <= MAX_VERBATIM_KEY && !key.contains('\0') && !key.starts_with("sha256:") {
        Cow::Borrowed(key)
    } else {
        Cow::Owned(format!("sha256:{}", crate::key::sha256_hex(key.as_bytes())))
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

    /// Sets the client-side bound on each store call (see "Timeouts" in the module docs).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The client-side bound on each store call.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// Runs `call` within the call timeout; past it, `StoreUnavailable` naming the bound. The
    /// statement may have run on the server: the caller's protocol must make that safe (every
    /// store call here does).
    ///
    /// Public for statements of your own beside the store's (a business table read at start-up,
    /// say), so that they are bounded and worded like the store's.
    pub async fn bounded<T>(
        &self,
        op: &str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.call_timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "no answer from PostgreSQL within {} ms during {op} (table {:?}): the server \
                     or the network is down or partitioned; the statement may or may not have \
                     run",
                    self.call_timeout.as_millis(),
                    self.sql.table
                ),
            )),
        }
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

    async fn migrate_unbounded(&self) -> Result<(), Error> {
        let mut client = self.client().await?;
        let txn = client
            .transaction()
            .await
            .map_err(|e| self.pg_err("migrate", "", e))?;
        txn.batch_execute(&self.sql.migrate)
            .await
            .map_err(|e| self.pg_err("migrate", "", e))?;
        txn.commit()
            .await
            .map_err(|e| self.pg_err("migrate", "", e))
    }

    async fn prune_unbounded(&self, now: SystemTime, limit: u32) -> Result<u64, Error> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&self.sql.prune)
            .await
            .map_err(|e| self.pg_err("prune", "", e))?;
        client
            .execute(&stmt, &[&epoch_millis(now), &i64::from(limit)])
            .await
            .map_err(|e| self.pg_err("prune", "", e))
    }

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
            ),
            other => Error::with_source(
                ErrorKind::StoreUnavailable,
                format!(
                    "no PostgreSQL connection available for table {:?}; check that the database \
                     is up and reachable, and the pool size against max_connections",
                    self.sql.table
                ),
                other,
            ),
        })
    }

    fn pg_err(&self, op: &str, key: &str, e: tokio_postgres::Error) -> Error {
        map_pg_err(op, key, &self.sql.table, e)
    }

    /// Runs the effects in `txn`, in order; the first refused one fails the whole
    /// transaction (the caller drops it, which rolls it back).
    async fn run_effects(
        &self,
        txn: &deadpool_postgres::Transaction<'_>,
        key: &str,
        effects: &[PgEffect],
    ) -> Result<(), Error> {
        for (i, effect) in effects.iter().enumerate() {
            let stmt = txn
                .prepare_cached(&effect.sql)
                .await
                .map_err(|e| effect_err(i, e, key, &self.sql.table))?;
            let params: Vec<&(dyn ToSql + Sync)> = effect
                .params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let rows = txn
                .execute(&stmt, &params)
                .await
                .map_err(|e| effect_err(i, e, key, &self.sql.table))?;
            if let Some(expected) = effect.expect_rows
                && rows != expected
            {
                // Dropping the transaction rolls it back.
                return Err(Error::new(
                    ErrorKind::EffectRejected,
                    format!(
                        "effect #{i} affected {rows} rows, expected {expected}; the completion \
                             and every effect were rolled back and the claim is still held"
                    ),
                ));
            }
        }
        Ok(())
    }

    async fn complete_with_effects(
        &self,
        id: &str,
        key: &str,
        token: &ClaimToken,
        expires_at: SystemTime,
        response: Option<&str>,
        effects: Vec<PgEffect>,
    ) -> Result<(), Error> {
        let mut client = self.client().await?;
        let err = |e| map_pg_err("completion of", key, &self.sql.table, e);
        let txn = client.transaction().await.map_err(err)?;
        let lock = txn.prepare_cached(&self.sql.lock).await.map_err(err)?;
        let row = txn
            .query_opt(&lock, &[&id, &token.as_str()])
            .await
            .map_err(err)?;
        let status: Option<String> = match row {
            Some(row) => row.try_get(0).map_err(err)?,
            None => None,
        };
        match status.as_deref() {
            Some("INPROGRESS") => {}
            // Our token, already completed: an earlier attempt committed. Apply nothing again.
            Some("COMPLETED") => return Ok(()),
            _ => return Err(Error::lost_claim(key)),
        }
        self.run_effects(&txn, key, &effects).await?;
        let complete = txn.prepare_cached(&self.sql.complete).await.map_err(err)?;
        let updated = txn
            .execute(
                &complete,
                &[&id, &token.as_str(), &epoch_millis(expires_at), &response],
            )
            .await
            .map_err(err)?;
        if updated != 1 {
            // Cannot happen while we hold the row lock; refuse rather than commit effects alone.
            return Err(Error::lost_claim(key));
        }
        txn.commit().await.map_err(err)
    }
}

fn is_transient_state(code: &SqlState) -> bool {
    let c = code.code();
    c.starts_with("08") // connection exception
        || c.starts_with("53") // insufficient resources
        || c.starts_with("57P") // admin/crash shutdown, cannot connect now
        || c == "57014" // query cancelled (statement_timeout)
        || c == "55P03" // lock not available
        || *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
}

fn map_pg_err(op: &str, key: &str, table: &str, e: tokio_postgres::Error) -> Error {
    // `op` alone when there is no key (migrate, prune, the start-up check).
    let op = if key.is_empty() {
        op.to_owned()
    } else {
        format!("{op} {:?}", short(key))
    };
    match e.code() {
        Some(code) if is_transient_state(code) => Error::with_source(
            ErrorKind::StoreUnavailable,
            format!("PostgreSQL unavailable during {op} (table {table:?}); retry later"),
            e,
        ),
        // A table of an older version, without the response column.
        Some(code) if *code == SqlState::UNDEFINED_COLUMN => Error::with_source(
            ErrorKind::StoreRejected,
            format!(
                "table {table:?} lacks a column this version needs (an older schema): migrate \
                 it with StoreAdmin::init() (`sqs-claim init`), then retry {op}"
            ),
            e,
        ),
        Some(code) if *code == SqlState::UNDEFINED_TABLE => Error::with_source(
            ErrorKind::StoreRejected,
            format!(
                "table {table:?} does not exist: run StoreAdmin::init() (or create it as \
                 documented in sqs_claim::store::postgres) before consuming"
            ),
            e,
        ),
        Some(_) => Error::with_source(
            ErrorKind::StoreRejected,
            format!(
                "PostgreSQL refused {op} (table {table:?}); check the table's schema and \
                 the user's privileges"
            ),
            e,
        ),
        // No SQL state: the client could not talk to the server (I/O, closed connection,
        // connect timeout), or could not encode a parameter.
        None => match connection_problem(&e) {
            Some(Connection::NotConnected) => Error::with_source(
                ErrorKind::StoreUnavailable,
                format!(
                    "could not connect to PostgreSQL for {op} (table {table:?}): check \
                     the host, the port, the network and that the server is up; nothing was sent"
                ),
                e,
            ),
            Some(Connection::Lost) => Error::with_source(
                ErrorKind::StoreUnavailable,
                format!(
                    "connection to PostgreSQL lost during {op} (table {table:?}): the \
                     statement may or may not have run; retry later"
                ),
                e,
            ),
            None => Error::with_source(
                ErrorKind::StoreRejected,
                format!("PostgreSQL client error during {op} (table {table:?})"),
                e,
            ),
        },
    }
}

/// How a client error without an SQL state came about.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Connection {
    /// The connection could not be opened (refused, DNS, connect timeout): nothing was sent.
    NotConnected,
    /// The connection broke (reset, closed, I/O error) after it was open.
    Lost,
}

/// `None` if `e` is not a connection problem (a parameter that could not be encoded, ...).
pub(crate) fn connection_problem(e: &tokio_postgres::Error) -> Option<Connection> {
    let text = e.to_string();
    if text.starts_with("error connecting") || text.starts_with("timeout") {
        return Some(Connection::NotConnected);
    }
    if e.is_closed() {
        return Some(Connection::Lost);
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return Some(Connection::Lost);
        }
        source = s.source();
    }
    None
}

/// The error of a start-up check (`SELECT ... LIMIT 0` on `table`): only a missing table
/// (SQLSTATE 42P01) says to run `sqs-claim init`; a lost connection, a timeout or a permission
/// says what it is, so nobody creates tables to fix a network problem.
///
/// Public for the start-up checks of tables of your own beside the claims table.
pub fn check_error(table: &str, e: tokio_postgres::Error) -> Error {
    if e.code() == Some(&SqlState::UNDEFINED_TABLE) {
        return Error::with_source(
            ErrorKind::StoreRejected,
            format!(
                "table {table:?} does not exist: run `sqs-claim init` (or StoreAdmin::init) \
                 first"
            ),
            e,
        );
    }
    if e.code() == Some(&SqlState::UNDEFINED_COLUMN) {
        return Error::with_source(
            ErrorKind::StoreRejected,
            format!(
                "table {table:?} has the layout of an older version (no response column): run \
                 `sqs-claim init` (or StoreAdmin::init) to add it; records \
                 already stored are kept"
            ),
            e,
        );
    }
    map_pg_err("the start-up check of", "", table, e)
}

fn effect_err(i: usize, e: tokio_postgres::Error, key: &str, table: &str) -> Error {
    match e.code() {
        // Class 23: integrity constraint violation (unique, check, foreign key, not null,
        // exclusion): the business condition the effect encodes was not met.
        Some(code) if code.code().starts_with("23") => Error::with_source(
            ErrorKind::EffectRejected,
            format!(
                "effect #{i} violated a constraint; the completion and every effect were rolled \
                 back and the claim is still held"
            ),
            e,
        ),
        // Class 22: data exception (numeric overflow, invalid text such as a NUL byte, a
        // division by zero): the effect's values are wrong, not the store. Retrying the same
        // message will not help; it belongs in the DLQ with this reason.
        Some(code) if code.code().starts_with("22") => Error::with_source(
            ErrorKind::EffectRejected,
            format!(
                "effect #{i} was refused for its data (SQLSTATE {}); the completion and every \
                 effect were rolled back and the claim is still held",
                code.code()
            ),
            e,
        ),
        _ => map_pg_err(&format!("effect #{i} of the completion of"), key, table, e),
    }
}

fn short(key: &str) -> &str {
    match key.char_indices().nth(120) {
        Some((i, _)) => &key[..i],
        None => key,
    }
}

fn bad_row(key: &str, table: &str, e: tokio_postgres::Error) -> Error {
    Error::with_source(
        ErrorKind::StoreRejected,
        format!(
            "unexpected row for key {:?} in table {table:?}; does the table match the documented \
             schema?",
            short(key)
        ),
        e,
    )
}

impl ClaimStore for PostgresStore {
    type Effect = PgEffect;

    /// The pool's size in flight (more calls at once would only queue for a connection); the
    /// one-shot write is one SQL transaction.
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_max_in_flight(self.pool.status().max_size.max(1))
            .with_atomic_one_shot(true)
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        self.bounded("claim", self.claim_unbounded(req)).await
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<PgEffect>,
    ) -> Result<(), Error> {
        // Refused before a connection is taken: nothing is written, the claim stays in progress.
        completion.check_response_size(key, self.capabilities().max_response_bytes)?;
        let Completion {
            expires_at,
            response,
            effects,
            ..
        } = completion;
        let response = response.as_ref().map(StoredResponse::as_str);
        self.bounded(
            "completion",
            self.complete_unbounded(key, token, expires_at, response, effects),
        )
        .await
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        self.bounded("release", self.release_unbounded(key, token))
            .await
    }

    /// One SQL transaction on one connection: the claim written completed, the effects, the
    /// commit (see `claim_completed_unbounded`).
    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<PgEffect>,
    ) -> Result<OneShotWrite, Error> {
        self.bounded(
            "one-shot commit",
            self.claim_completed_unbounded(req, effects),
        )
        .await
    }
}

/// Every call bounded by the call timeout, as the claim's are.
impl StoreAdmin for PostgresStore {
    /// Creates the table and its `expires_at` index if they do not exist, and adds the
    /// `response` column to a table of an older version. Safe to run on every start and from
    /// several processes at once.
    async fn init(&self) -> Result<(), Error> {
        self.bounded("migrate", self.migrate_unbounded()).await
    }

    /// One `SELECT` of the newest column, `LIMIT 0`: a missing table, or one of an older
    /// version, fails with what to run; a lost connection, a timeout or a permission says what
    /// it is.
    async fn check_ready(&self) -> Result<(), Error> {
        self.bounded("the start-up check", self.check_unbounded())
            .await
    }

    /// Deletes up to `limit` records that expired at or before `now`, oldest first, and says
    /// how many it deleted. Rows locked by a running claim are skipped. Call it repeatedly
    /// until it returns less than `limit` to drain a backlog.
    async fn prune_expired(&self, now: SystemTime, limit: u32) -> Result<Option<u64>, Error> {
        self.bounded("prune", self.prune_unbounded(now, limit))
            .await
            .map(Some)
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        self.bounded("inspect", self.inspect_unbounded(key)).await
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.bounded("force release", self.delete_if(key, Status::InProgress))
            .await
    }

    async fn forget(&self, key: &str) -> Result<bool, Error> {
        self.bounded("forget", self.delete_if(key, Status::Completed))
            .await
    }
}

impl PostgresStore {
    async fn check_unbounded(&self) -> Result<(), Error> {
        let client = self.client().await?;
        // Names the newest column, so a table of an older version is caught here, with the fix,
        // and not at the first claim.
        let sql = format!(
            "SELECT response FROM {} LIMIT 0",
            quote_table(&self.sql.table)
        );
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| check_error(&self.sql.table, e))
    }

    async fn inspect_unbounded(&self, key: &str) -> Result<Option<Inspected>, Error> {
        let id = stored_id(key);
        let client = self.client().await?;
        let err = |e| self.pg_err("inspect of", key, e);
        let stmt = client
            .prepare_cached(&self.sql.inspect)
            .await
            .map_err(err)?;
        let Some(row) = client
            .query_opt(&stmt, &[&id.as_ref()])
            .await
            .map_err(err)?
        else {
            return Ok(None);
        };
        let bad = |e| bad_row(key, &self.sql.table, e);
        let status: String = row.try_get(0).map_err(bad)?;
        let token: String = row.try_get(1).map_err(bad)?;
        let lease_until: Option<i64> = row.try_get(2).map_err(bad)?;
        let expires_at: i64 = row.try_get(3).map_err(bad)?;
        let fingerprint: Option<String> = row.try_get(4).map_err(bad)?;
        let response: Option<String> = row.try_get(5).map_err(bad)?;
        let Some(status) = Status::parse(&status) else {
            return Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "unknown status {status:?} for key {:?} in table {:?}",
                    short(key),
                    self.sql.table
                ),
            ));
        };
        Ok(Some(Inspected::new(
            ClaimRecord {
                status,
                expires_at: from_epoch_millis(expires_at),
                lease_until: lease_until.map(from_epoch_millis),
                fingerprint,
                response: response.map(StoredResponse::new),
            },
            Some(ClaimToken::from_string(token)),
        )))
    }

    /// Deletes `key`'s row only if its status is `status`, in one statement.
    async fn delete_if(&self, key: &str, status: Status) -> Result<bool, Error> {
        let id = stored_id(key);
        let client = self.client().await?;
        let err = |e| self.pg_err("delete of", key, e);
        let stmt = client
            .prepare_cached(&self.sql.delete_if)
            .await
            .map_err(err)?;
        let deleted = client
            .execute(&stmt, &[&id.as_ref(), &status.as_str()])
            .await
            .map_err(err)?;
        Ok(deleted == 1)
    }

    async fn claim_unbounded(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        let client = self.client().await?;
        self.claim_on(
            &client,
            req,
            &ClaimToken::generate(),
            req.record_expires_at(),
            Some(req.lease_until),
        )
        .await
    }

    /// The claim statement on `client` (a connection, or a transaction of one): in progress
    /// under `lease_until`, or, with `None`, already completed (the one-shot write).
    async fn claim_on<C: deadpool_postgres::GenericClient>(
        &self,
        client: &C,
        req: ClaimRequest<'_>,
        token: &ClaimToken,
        expires_at: SystemTime,
        lease_until: Option<SystemTime>,
    ) -> Result<Claim, Error> {
        let id = stored_id(req.key);
        let err = |e| self.pg_err("claim of", req.key, e);
        let sql = if lease_until.is_some() {
            &self.sql.claim
        } else {
            &self.sql.claim_completed
        };
        let stmt = client.prepare_cached(sql).await.map_err(err)?;
        let row = client
            .query_one(
                &stmt,
                &[
                    &id.as_ref(),
                    &token.as_str(),
                    &lease_until.map(epoch_millis),
                    &epoch_millis(expires_at),
                    &req.fingerprint,
                    &epoch_millis(req.now),
                ],
            )
            .await
            .map_err(err)?;
        let bad = |e| bad_row(req.key, &self.sql.table, e);
        let won: bool = row.try_get(0).map_err(bad)?;
        if won {
            return Ok(Claim::Acquired(token.clone()));
        }
        let status: String = row.try_get(1).map_err(bad)?;
        let lease_until: Option<i64> = row.try_get(2).map_err(bad)?;
        let expires_at: i64 = row.try_get(3).map_err(bad)?;
        let fingerprint: Option<String> = row.try_get(4).map_err(bad)?;
        let response: Option<String> = row.try_get(5).map_err(bad)?;
        match Status::parse(&status) {
            Some(Status::Completed) => Ok(Claim::Completed(ClaimRecord {
                status: Status::Completed,
                expires_at: from_epoch_millis(expires_at),
                lease_until: lease_until.map(from_epoch_millis),
                fingerprint,
                response: response.map(StoredResponse::new),
            })),
            Some(Status::InProgress) => Ok(Claim::HeldElsewhere {
                lease_until: lease_until.map(from_epoch_millis),
            }),
            None => Err(Error::new(
                ErrorKind::StoreRejected,
                format!(
                    "unknown status {status:?} for key {:?} in table {:?}",
                    short(req.key),
                    self.sql.table
                ),
            )),
        }
    }

    /// One transaction: the claim written as completed, then the effects; committed only if
    /// every effect passed. A claim that finds the key taken writes nothing, and the
    /// transaction is dropped (rolled back) with it.
    async fn claim_completed_unbounded(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<PgEffect>,
    ) -> Result<OneShotWrite, Error> {
        let mut client = self.client().await?;
        let err = |e| map_pg_err("one-shot commit of", req.key, &self.sql.table, e);
        let txn = client.transaction().await.map_err(err)?;
        let token = ClaimToken::generate();
        match self
            .claim_on(&txn, req, &token, req.expires_at, None)
            .await?
        {
            Claim::Acquired(_) => {}
            Claim::Completed(record) => return Ok(OneShotWrite::Completed(record)),
            Claim::HeldElsewhere { lease_until } => {
                return Ok(OneShotWrite::HeldElsewhere { lease_until });
            }
        }
        self.run_effects(&txn, req.key, effects.as_slice()).await?;
        txn.commit().await.map_err(err)?;
        Ok(OneShotWrite::Committed)
    }

    async fn complete_unbounded(
        &self,
        key: &str,
        token: &ClaimToken,
        expires_at: SystemTime,
        response: Option<&str>,
        effects: Effects<PgEffect>,
    ) -> Result<(), Error> {
        let id = stored_id(key);
        if !effects.is_empty() {
            return self
                .complete_with_effects(&id, key, token, expires_at, response, effects.into_vec())
                .await;
        }
        let client = self.client().await?;
        let err = |e| self.pg_err("completion of", key, e);
        let stmt = client
            .prepare_cached(&self.sql.complete)
            .await
            .map_err(err)?;
        let updated = client
            .execute(
                &stmt,
                &[
                    &id.as_ref(),
                    &token.as_str(),
                    &epoch_millis(expires_at),
                    &response,
                ],
            )
            .await
            .map_err(err)?;
        if updated == 1 {
            return Ok(());
        }
        // Nothing updated: either an earlier attempt of this completion already landed (a retry
        // after an ambiguous error), or the claim was lost. This second read is safe because
        // the token is unique to this claim and only its holder ever completes it: if a row
        // with our token is completed now, our earlier attempt did it, and no other writer can
        // turn a lost claim back into ours between the two statements.
        let stmt = client
            .prepare_cached(&self.sql.completed_by)
            .await
            .map_err(err)?;
        let row = client
            .query_opt(&stmt, &[&id.as_ref(), &token.as_str()])
            .await
            .map_err(err)?;
        let status: Option<String> = match row {
            Some(row) => row
                .try_get(0)
                .map_err(|e| bad_row(key, &self.sql.table, e))?,
            None => None,
        };
        match status.as_deref() {
            Some("COMPLETED") => Ok(()),
            _ => Err(Error::lost_claim(key)),
        }
    }

    async fn release_unbounded(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let id = stored_id(key);
        let client = self.client().await?;
        let err = |e| self.pg_err("release of", key, e);
        let stmt = client
            .prepare_cached(&self.sql.release)
            .await
            .map_err(err)?;
        let deleted = client
            .execute(&stmt, &[&id.as_ref(), &token.as_str()])
            .await
            .map_err(err)?;
        if deleted == 1 {
            Ok(())
        } else {
            Err(Error::lost_claim(key))
        }
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
