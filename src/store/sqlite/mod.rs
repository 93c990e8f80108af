use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

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
mod worker;

// The children's own items, for one another (each child reads the parent's scope).
use errors::*;
use schema::*;
use worker::*;

/// How long a statement waits for another connection's write lock before giving up with
/// [`ErrorKind::StoreUnavailable`]. Transactions here last microseconds to milliseconds; five
/// seconds only runs out if another process holds the file locked for real.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// An SQL value, owned, as [`SqlEffect`] parameters and [`SqliteStore::query`] results carry
/// them. SQLite's five storage classes.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// `NULL`.
    Null,
    /// A 64-bit signed integer.
    Integer(i64),
    /// A 64-bit float.
    Real(f64),
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl SqlValue {
    /// The integer, if this is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            SqlValue::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The text, if this is text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            SqlValue::Text(s) => Some(s),
            _ => None,
        }
    }

    fn into_sqlite(self) -> Value {
        match self {
            SqlValue::Null => Value::Null,
            SqlValue::Integer(i) => Value::Integer(i),
            SqlValue::Real(f) => Value::Real(f),
            SqlValue::Text(s) => Value::Text(s),
            SqlValue::Blob(b) => Value::Blob(b),
        }
    }

    fn from_sqlite(v: Value) -> Self {
        match v {
            Value::Null => SqlValue::Null,
            Value::Integer(i) => SqlValue::Integer(i),
            Value::Real(f) => SqlValue::Real(f),
            Value::Text(s) => SqlValue::Text(s),
            Value::Blob(b) => SqlValue::Blob(b),
        }
    }
}

impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Integer(v)
    }
}

impl From<i32> for SqlValue {
    fn from(v: i32) -> Self {
        SqlValue::Integer(v.into())
    }
}

impl From<bool> for SqlValue {
    fn from(v: bool) -> Self {
        SqlValue::Integer(v.into())
    }
}

impl From<f64> for SqlValue {
    fn from(v: f64) -> Self {
        SqlValue::Real(v)
    }
}

impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_owned())
    }
}

impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}

impl From<Vec<u8>> for SqlValue {
    fn from(v: Vec<u8>) -> Self {
        SqlValue::Blob(v)
    }
}

impl<T: Into<SqlValue>> From<Option<T>> for SqlValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SqlValue::Null, Into::into)
    }
}

/// An effect for [`SqliteStore`]: one SQL statement, run in the completion's transaction.
///
/// A business condition can refuse the completion in two ways, and either cancels the whole
/// transaction with [`ErrorKind::EffectRejected`] (no effect, no completion; the claim stays in
/// progress for the processor to release):
/// * a constraint fails (`CHECK`, `UNIQUE`, `NOT NULL`, a foreign key), or
/// * [`expect_rows`](SqlEffect::expect_rows) was set and the statement changed another number
///   of rows (say, `UPDATE accounts SET balance = balance - ?1 WHERE id = ?2 AND balance >= ?1`
///   with `expect_rows(1)`).
///
/// ```
/// use sqs_claim::SqlEffect;
///
/// let debit = SqlEffect::new(
///     "UPDATE accounts SET balance = balance - ?1 WHERE account = ?2 AND balance >= ?1",
///     vec![500.into(), "alice".into()],
/// )
/// .expect_rows(1);
/// # let _ = debit;
/// ```
#[derive(Clone, PartialEq)]
pub struct SqlEffect {
    sql: String,
    params: Vec<SqlValue>,
    expect_rows: Option<usize>,
}

impl SqlEffect {
    /// One statement (`?1`, `?2`, ... are `params`, in order).
    pub fn new(sql: impl Into<String>, params: Vec<SqlValue>) -> Self {
        SqlEffect {
            sql: sql.into(),
            params,
            expect_rows: None,
        }
    }

    /// Refuses the completion unless the statement changes exactly `n` rows.
    pub fn expect_rows(mut self, n: usize) -> Self {
        self.expect_rows = Some(n);
        self
    }
}

// By hand: parameter values are business data (amounts, account ids) and `?effect` lands in
// logs; the statement text is the code's own, so it stays.
impl std::fmt::Debug for SqlEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEffect")
            .field("sql", &self.sql)
            .field("params", &self.params.len())
            .field("expect_rows", &self.expect_rows)
            .finish()
    }
}

struct Inner {
    jobs: mpsc::Sender<Box<dyn Job>>,
    location: String,
    /// The busy timeout in milliseconds (see [`reply_bound`]).
    busy_ms: std::sync::atomic::AtomicU64,
}

/// A claim store in one SQLite database file. Cloning it shares the connection and its thread.
///
/// ```no_run
/// # fn demo() -> Result<(), sqs_claim::Error> {
/// let store = sqs_claim::SqliteStore::open(".sqs-claim/claims.db")?;
/// # let _ = store; Ok(()) }
/// ```
///
/// The contract in one SQLite file, for running locally with nothing installed
/// (feature `sqlite`).
///
/// This is a real, durable store, not a mock: the CLI's default store, and a fair choice for a
/// single host. One file, WAL mode, `synchronous = FULL` (a completed claim survives a power
/// cut), and a busy timeout so several processes can share the file.
///
/// # The table
///
/// One table, `claims`, created (and, for a file made by an older version, completed with the
/// `response` column) when the store opens:
///
/// | column           | meaning |
/// |------------------|---------|
/// | `id`             | the idempotency key (primary key) |
/// | `status`         | `INPROGRESS` or `COMPLETED` |
/// | `token`          | owner token of the claim that wrote the row |
/// | `lease_until_ms` | lease end, epoch ms; `NULL` once completed |
/// | `expires_at_ms`  | epoch ms; the row counts as absent from then on |
/// | `fingerprint`    | payload fingerprint, if any |
/// | `response`       | the stored response, as given (`TEXT`); `NULL` for none, `''` for an empty one |
///
/// # How the contract maps onto SQL
///
/// * **claim** is one upsert, inside `BEGIN IMMEDIATE` (which takes the database's write lock
///   up front, so the upsert and the read that explains a refusal see the same row, across
///   connections and processes):
///   `INSERT ... ON CONFLICT(id) DO UPDATE SET ... WHERE <expired> OR <lease lapsed>`.
///   One changed row means the claim was won; no change means the existing row says why not.
/// * **complete** checks the row still carries the token, runs the handler's [`SqlEffect`]s and
///   marks the row completed with its response, in one transaction: all or nothing. A response
///   over [`Capabilities::max_response_bytes`] (the default 6 MiB: SQLite's `TEXT` holds up to
///   1 GB) is refused before anything is sent to the connection thread. A row already completed by
///   the same token is a no-op success (effects are not run again).
/// * **release** is one `DELETE ... WHERE id = ? AND token = ? AND status = 'INPROGRESS'`.
/// * the operator's **force_release** and **forget** are one `DELETE ... WHERE id = ? AND
///   status = ?` each; **inspect** one `SELECT`.
///
/// # Threads and group commit
///
/// SQLite calls block. Each store owns one connection on a dedicated thread and the async
/// methods send it jobs, so the runtime's workers never wait on disk or on another process's
/// lock. Clones share the thread; it stops when the last clone is dropped. A second
/// `SqliteStore` on the same file (in this process or another) has its own connection, and
/// SQLite's file locks serialize the writers.
///
/// The thread runs the jobs waiting in its queue together, in one `BEGIN IMMEDIATE`
/// transaction, each job inside its own savepoint (so a refused completion rolls back only its
/// own writes), and answers every caller only after the `COMMIT`: one fsync covers a whole group
/// instead of one per call, and nothing is acknowledged before it is on disk. With the
/// processor's concurrency of 10 this made a batch about ten times faster on a disk where an
/// fsync costs milliseconds; the default is now 256 ([`Capabilities::max_in_flight`]). If the commit fails, every job of the group fails with it.
/// Queries and schema statements ([`SqliteStore::query`], [`SqliteStore::execute_batch`]) run on
/// their own instead: a read needs no write lock, and in WAL mode never waits for a writer.
///
/// SQLite's lock is not fair: a process that writes back to back can keep another one waiting,
/// and a claim that waits longer than the busy timeout fails with
/// [`ErrorKind::StoreUnavailable`] (the processor then fails the message closed, and SQS
/// retries it). Several processes work; one file per busy consumer is better.
///
/// Every call is bounded: a statement waits for a lock at most the busy timeout (5 s,
/// [`SqliteStore::set_busy_timeout`]), and a caller waits for the connection thread's answer
/// at most twice that plus 2 s (its job may queue behind a group that is itself waiting). Past
/// that the disk or another process's lock is stuck: the call fails with `StoreUnavailable`,
/// and the job may still run later, which the claim protocol makes safe.
///
/// # Expired records
///
/// SQLite has no TTL: expired rows stay until [`StoreAdmin::prune_expired`] deletes them. They
/// are harmless meanwhile (every claim compares `expires_at_ms` itself), they only take space.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.inner.location)
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and its `claims` table. The directory
    /// must exist (the reference consumer's `sqlite:PATH` URLs create it).
    ///
    /// This blocks while SQLite opens the file (and waits, up to the busy timeout, if another
    /// process holds it locked): call it at startup, not on a hot async path.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let location = path.display().to_string();
        let conn = Connection::open(path)
            .map_err(|e| classify(e, format!("cannot open SQLite database {location}")))?;
        Self::start(conn, location, true)
    }

    /// A private in-memory database: nothing survives the store, and no other connection can
    /// see it. For tests and demos.
    pub fn open_in_memory() -> Result<Self, Error> {
        let conn = Connection::open_in_memory()
            .map_err(|e| classify(e, "cannot open an in-memory SQLite database"))?;
        Self::start(conn, ":memory:".to_owned(), false)
    }

    fn start(conn: Connection, location: String, file: bool) -> Result<Self, Error> {
        let what = format!("cannot prepare SQLite database {location}");
        configure(&conn, file).map_err(|e| classify(e, what.clone()))?;
        let (jobs, rx) = mpsc::channel::<Box<dyn Job>>();
        std::thread::Builder::new()
            .name("sqs-claim-sqlite".to_owned())
            .spawn(move || worker(conn, rx))
            .map_err(|e| Error::with_source(ErrorKind::StoreUnavailable, what, e))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                jobs,
                location,
                busy_ms: std::sync::atomic::AtomicU64::new(millis(BUSY_TIMEOUT)),
            }),
        })
    }

    /// Where the database lives (its path, or `:memory:`).
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    /// Runs `f` on the store's connection thread, inside the next group's write transaction,
    /// and waits for its answer (after the commit) without blocking the runtime.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        self.send(true, f).await
    }

    /// Like [`run`](Self::run), but `f` runs on its own, in autocommit mode.
    async fn run_direct<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        self.send(false, f).await
    }

    async fn send<T: Send + 'static>(
        &self,
        grouped: bool,
        f: impl FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Box<dyn Job> = Box::new(Task {
            grouped,
            work: f,
            reply,
        });
        let stopped = || {
            Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "the SQLite connection thread for {} did not answer (stopped, or the call panicked)",
                    self.inner.location
                ),
            )
        };
        self.inner.jobs.send(job).map_err(|_| stopped())?;
        let busy = Duration::from_millis(
            self.inner
                .busy_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let bound = reply_bound(busy);
        match tokio::time::timeout(bound, answer).await {
            Ok(reply) => reply.map_err(|_| stopped())?,
            Err(_) => Err(Error::new(
                ErrorKind::StoreUnavailable,
                format!(
                    "the SQLite database {} did not answer within {} ms (the disk, or another \
                     process holding its lock, is stuck); the call may still complete later",
                    self.inner.location,
                    bound.as_millis()
                ),
            )),
        }
    }

    /// Changes how long a statement waits for another connection's lock before failing with
    /// [`ErrorKind::StoreUnavailable`] (default: 5 seconds).
    /// Callers then wait at most twice this plus 2 s for the connection thread's answer.
    pub async fn set_busy_timeout(&self, timeout: Duration) -> Result<(), Error> {
        self.run_direct(move |conn| {
            conn.busy_timeout(timeout)
                .map_err(|e| classify(e, "cannot set the SQLite busy timeout"))
        })
        .await?;
        self.inner
            .busy_ms
            .store(millis(timeout), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Runs SQL without parameters, possibly several `;`-separated statements (for creating
    /// tables next to `claims`, as the reference consumer does for its accounts), in autocommit
    /// mode like `sqlite3_exec`: each statement commits on its own unless `sql` has its own
    /// `BEGIN ... COMMIT`.
    pub async fn execute_batch(&self, sql: impl Into<String>) -> Result<(), Error> {
        let sql = sql.into();
        self.run_direct(move |conn| {
            conn.execute_batch(&sql)
                .map_err(|e| classify(e, "SQL batch failed"))
        })
        .await
    }

    /// Runs one statement on its own (outside any claim) and returns how many rows it changed.
    /// [`SqlEffect::expect_rows`] is not checked here.
    pub async fn execute(&self, statement: SqlEffect) -> Result<usize, Error> {
        self.run_direct(move |conn| {
            let params = statement.params.into_iter().map(SqlValue::into_sqlite);
            conn.execute(&statement.sql, rusqlite::params_from_iter(params))
                .map_err(|e| classify(e, "SQL statement failed"))
        })
        .await
    }

    /// Runs a query and returns every row, each as its column values in order.
    pub async fn query(
        &self,
        sql: impl Into<String>,
        params: Vec<SqlValue>,
    ) -> Result<Vec<Vec<SqlValue>>, Error> {
        let sql = sql.into();
        // A read needs no write lock: in WAL mode it never waits for a writer.
        self.run_direct(move |conn| {
            let fail = |e| classify(e, "SQL query failed");
            let mut stmt = conn.prepare(&sql).map_err(fail)?;
            let columns = stmt.column_count();
            let params = params.into_iter().map(SqlValue::into_sqlite);
            let rows = stmt
                .query_map(rusqlite::params_from_iter(params), |row| {
                    (0..columns)
                        .map(|i| row.get::<_, Value>(i).map(SqlValue::from_sqlite))
                        .collect::<Result<Vec<_>, _>>()
                })
                .map_err(fail)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(fail)
        })
        .await
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
