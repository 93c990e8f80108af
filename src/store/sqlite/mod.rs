//! [`SqliteStore`]: the contract in one SQLite file, for running locally with nothing installed
//! (feature `sqlite`).
//!
//! This is a real, durable store, not a mock: the CLI's default store, and a fair choice for a
//! single host. One file, WAL mode, `synchronous = FULL` (a completed claim survives a power
//! cut), and a busy timeout so several processes can share the file.
//!
//! # The table
//!
//! One table, `claims`, created (and, for a file made by an older version, completed with the
//! `response` column) when the store opens:
//!
//! | column           | meaning |
//! |------------------|---------|
//! | `id`             | the idempotency key (primary key) |
//! | `status`         | `INPROGRESS` or `COMPLETED` |
//! | `token`          | owner token of the claim that wrote the row |
//! | `lease_until_ms` | lease end, epoch ms; `NULL` once completed |
//! | `expires_at_ms`  | epoch ms; the row counts as absent from then on |
//! | `fingerprint`    | payload fingerprint, if any |
//! | `response`       | the stored response, as given (`TEXT`); `NULL` for none, `''` for an empty one |
//!
//! # How the contract maps onto SQL
//!
//! * **claim** is one upsert, inside `BEGIN IMMEDIATE` (which takes the database's write lock
//!   up front, so the upsert and the read that explains a refusal see the same row, across
//!   connections and processes):
//!   `INSERT ... ON CONFLICT(id) DO UPDATE SET ... WHERE <expired> OR <lease lapsed>`.
//!   One changed row means the claim was won; no change means the existing row says why not.
//! * **complete** checks the row still carries the token, runs the handler's [`SqlEffect`]s and
//!   marks the row completed with its response, in one transaction: all or nothing. A response
//!   over [`Capabilities::max_response_bytes`] (the default 6 MiB: SQLite's `TEXT` holds up to
//!   1 GB) is refused before anything is sent to the connection thread. A row already completed by
//!   the same token is a no-op success (effects are not run again).
//! * **release** is one `DELETE ... WHERE id = ? AND token = ? AND status = 'INPROGRESS'`.
//! * the operator's **force_release** and **forget** are one `DELETE ... WHERE id = ? AND
//!   status = ?` each; **inspect** one `SELECT`.
//!
//! # Threads and group commit
//!
//! SQLite calls block. Each store owns one connection on a dedicated thread and the async
//! methods send it jobs, so the runtime's workers never wait on disk or on another process's
//! lock. Clones share the thread; it stops when the last clone is dropped. A second
//! `SqliteStore` on the same file (in this process or another) has its own connection, and
//! SQLite's file locks serialize the writers.
//!
//! The thread runs the jobs waiting in its queue together, in one `BEGIN IMMEDIATE`
//! transaction, each job inside its own savepoint (so a refused completion rolls back only its
//! own writes), and answers every caller only after the `COMMIT`: one fsync covers a whole group
//! instead of one per call, and nothing is acknowledged before it is on disk. With the
//! processor's concurrency of 10 this made a batch about ten times faster on a disk where an
//! fsync costs milliseconds; the default is now 256 ([`Capabilities::max_in_flight`]). If the commit fails, every job of the group fails with it.
//! Queries and schema statements ([`SqliteStore::query`], [`SqliteStore::execute_batch`]) run on
//! their own instead: a read needs no write lock, and in WAL mode never waits for a writer.
//!
//! SQLite's lock is not fair: a process that writes back to back can keep another one waiting,
//! and a claim that waits longer than the busy timeout fails with
//! [`ErrorKind::StoreUnavailable`] (the processor then fails the message closed, and SQS
//! retries it). Several processes work; one file per busy consumer is better.
//!
//! Every call is bounded: a statement waits for a lock at most the busy timeout (5 s,
//! [`SqliteStore::set_busy_timeout`]), and a caller waits for the connection thread's answer
//! at most twice that plus 2 s (its job may queue behind a group that is itself waiting). Past
//! that the disk or another process's lock is stuck: the call fails with `StoreUnavailable`,
//! and the job may still run later, which the claim protocol makes safe.
//!
//! # Expired records
//!
//! SQLite has no TTL: expired rows stay until [`StoreAdmin::prune_expired`] deletes them. They
//! are harmless meanwhile (every claim compares `expires_at_ms` itself), they only take space.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};

use super::{
    Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects,
    Inspected, OneShotWrite, Status, StoreAdmin, StoredResponse, epoch_millis, from_epoch_millis,
};
use crate::{Error, ErrorKind};

/// The most jobs one transaction commits together: enough to amortize the fsync, small enough
/// that the write lock is never held for long.
const MAX_GROUP: usize = 64;

/// How long a statement waits for another connection's write lock before giving up with
/// [`ErrorKind::StoreUnavailable`]. Transactions here last microseconds to milliseconds; five
/// seconds only runs out if another process holds the file locked for real.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS claims (
    id             TEXT PRIMARY KEY NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('INPROGRESS', 'COMPLETED')),
    token          TEXT NOT NULL,
    lease_until_ms INTEGER,
    expires_at_ms  INTEGER NOT NULL,
    fingerprint    TEXT,
    response       TEXT
);
";

/// The column tables created before the stored response lack; [`setup`] adds it.
const ADD_RESPONSE: &str = "ALTER TABLE claims ADD COLUMN response TEXT";

/// The claim, in one statement. `?6` is the caller's `now`; the `WHERE` is the contract's
/// "expired, or in progress with a lapsed lease". A takeover clears the response of the record
/// it replaces (an expired completion's).
const CLAIM_SQL: &str = "
INSERT INTO claims (id, status, token, lease_until_ms, expires_at_ms, fingerprint, response)
VALUES (?1, 'INPROGRESS', ?2, ?3, ?4, ?5, NULL)
ON CONFLICT (id) DO UPDATE SET
    status = 'INPROGRESS',
    token = excluded.token,
    lease_until_ms = excluded.lease_until_ms,
    expires_at_ms = excluded.expires_at_ms,
    fingerprint = excluded.fingerprint,
    response = NULL
WHERE claims.expires_at_ms <= ?6
   OR (claims.status = 'INPROGRESS' AND claims.lease_until_ms IS NOT NULL AND claims.lease_until_ms <= ?6)
";

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
/// use sqs_claim::store::sqlite::SqlEffect;
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

    /// The statement.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters.
    pub fn params(&self) -> &[SqlValue] {
        &self.params
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

/// Work for the connection thread: run inside the group's transaction, then answer the caller
/// once the transaction's fate is known.
trait Job: Send {
    /// Whether the job runs in the group's write transaction (claims, completions, releases),
    /// or on its own in autocommit mode (queries and schema statements, which must not queue
    /// behind another process's writes for the write lock they do not need).
    fn grouped(&self) -> bool;
    /// Runs the work; returns whether it succeeded (a failed job's writes are rolled back) and
    /// how to deliver its answer after the commit.
    fn run(self: Box<Self>, conn: &mut Connection) -> (bool, Deliver);
    /// Answers with `error` without running (the group's transaction could not start).
    fn fail(self: Box<Self>, error: Error);
}

/// Delivers a job's answer: `None` if the group committed, else why it did not.
type Deliver = Box<dyn FnOnce(Option<&GroupFailure>) + Send>;

/// Why a group's transaction did not commit; each caller gets an [`Error`] made from it.
struct GroupFailure {
    kind: ErrorKind,
    message: String,
}

impl GroupFailure {
    fn new(e: rusqlite::Error, what: &str) -> Self {
        let e = classify(e, what);
        GroupFailure {
            kind: e.kind(),
            message: format!("{e:#}"),
        }
    }

    fn error(&self) -> Error {
        Error::new(self.kind, self.message.clone())
    }
}

struct Task<F, T> {
    grouped: bool,
    work: F,
    reply: tokio::sync::oneshot::Sender<Result<T, Error>>,
}

impl<F, T> Job for Task<F, T>
where
    F: FnOnce(&mut Connection) -> Result<T, Error> + Send + 'static,
    T: Send + 'static,
{
    fn grouped(&self) -> bool {
        self.grouped
    }

    fn run(self: Box<Self>, conn: &mut Connection) -> (bool, Deliver) {
        let Task { work, reply, .. } = *self;
        let result = work(conn);
        let ok = result.is_ok();
        let deliver: Deliver = Box::new(move |failure: Option<&GroupFailure>| {
            // The receiver may be gone (the caller was cancelled): the work is done anyway,
            // and the contract makes an unobserved claim harmless (it lapses with its lease).
            let _ = reply.send(match failure {
                None => result,
                Some(f) => Err(f.error()),
            });
        });
        (ok, deliver)
    }

    fn fail(self: Box<Self>, error: Error) {
        let _ = self.reply.send(Err(error));
    }
}

struct Inner {
    jobs: mpsc::Sender<Box<dyn Job>>,
    location: String,
    /// The busy timeout in milliseconds (see [`reply_bound`]).
    busy_ms: std::sync::atomic::AtomicU64,
}

/// How long a caller waits for the connection thread's answer: the job may queue behind the
/// group being committed (one busy wait) and then wait for the lock itself (another), plus the
/// commit. Past that the disk or another process's lock is stuck, and the caller is told so
/// rather than left waiting; the job may still run later (a claim then holds until its lease
/// lapses, a repeated completion is a no-op).
fn reply_bound(busy: Duration) -> Duration {
    busy.saturating_mul(2) + Duration::from_secs(2)
}

/// A claim store in one SQLite database file. Cloning it shares the connection and its thread.
///
/// ```no_run
/// # fn demo() -> Result<(), sqs_claim::Error> {
/// let store = sqs_claim::store::sqlite::SqliteStore::open(".sqs-claim/claims.db")?;
/// # let _ = store; Ok(()) }
/// ```
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

fn configure(conn: &Connection, file: bool) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Two processes opening a new file at once race to switch it to WAL and create the
    // schema; SQLite answers some of those lock conflicts with SQLITE_BUSY at once, without
    // waiting (to avoid deadlocks), so wait here, up to the busy timeout.
    while_busy(|| setup(conn, file))
}

/// Runs `f` again while SQLite answers it busy or locked at once, up to the busy timeout.
fn while_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match f() {
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn setup(conn: &Connection, file: bool) -> rusqlite::Result<()> {
    if file {
        // WAL: readers do not block the writer and a commit is one append. FULL: each commit
        // is fsynced, so a completion that was acknowledged survives a power cut (NORMAL
        // could lose the last commits, and a lost completion is a duplicate).
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            // A filesystem without shared memory support: SQLite keeps its rollback journal,
            // which is slower but still correct.
            tracing::warn!(journal_mode = %mode, "SQLite refused WAL mode; using {mode}");
        }
        conn.pragma_update(None, "synchronous", "FULL")?;
    }
    create_schema(conn)
}

/// Creates the `claims` table if it is missing, and adds the `response` column to one made by
/// an older version.
fn create_schema(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(SCHEMA)?;
    // A table created before the stored response lacks its column. Checked first without a
    // lock (the usual case, a current table, writes nothing), then again under the write lock:
    // two processes upgrading one file at once must not both add it (the second would fail
    // with "duplicate column name").
    if !has_response_column(conn)? {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let added = match has_response_column(conn) {
            Ok(true) => Ok(()),
            Ok(false) => conn.execute_batch(ADD_RESPONSE),
            Err(e) => Err(e),
        };
        let done = added.and_then(|()| conn.execute_batch("COMMIT"));
        if done.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        done?;
    }
    Ok(())
}

/// Whether the `claims` table has the `response` column.
fn has_response_column(conn: &Connection) -> rusqlite::Result<bool> {
    let mut stmt =
        conn.prepare("SELECT 1 FROM pragma_table_info('claims') WHERE name = 'response'")?;
    stmt.exists([])
}

fn worker(mut conn: Connection, jobs: mpsc::Receiver<Box<dyn Job>>) {
    // Ends when every store clone (and so every sender) is gone.
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let (grouped, direct): (Vec<_>, Vec<_>) = group.into_iter().partition(|j| j.grouped());
        for job in direct {
            if let Ok((_, deliver)) =
                std::panic::catch_unwind(AssertUnwindSafe(|| job.run(&mut conn)))
            {
                deliver(None);
            }
        }
        if !grouped.is_empty() {
            run_group(&mut conn, grouped);
        }
    }
}

/// Runs `group` in one `BEGIN IMMEDIATE` transaction and answers every job after the commit.
fn run_group(conn: &mut Connection, group: Vec<Box<dyn Job>>) {
    // IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so no job can
    // hit SQLITE_BUSY halfway, and a claim's upsert and the read that explains it see one state.
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let failure = GroupFailure::new(e, "cannot start an SQLite transaction");
        for job in group {
            job.fail(failure.error());
        }
        return;
    }
    let mut delivers = Vec::with_capacity(group.len());
    let mut aborted = None;
    for job in group {
        if aborted.is_some() || conn.is_autocommit() {
            // A severe error (I/O, disk full) rolled the whole transaction back: do not run
            // the rest outside a transaction.
            let failure = aborted.get_or_insert_with(|| GroupFailure {
                kind: ErrorKind::StoreUnavailable,
                message: "SQLite rolled the transaction back after an error".into(),
            });
            job.fail(failure.error());
            continue;
        }
        // Each job in its own savepoint: a job that fails (a refused effect, a bad statement)
        // leaves no partial writes behind, and the others of the group still commit.
        if let Err(e) = conn.execute_batch("SAVEPOINT job") {
            job.fail(classify(e, "cannot start an SQLite savepoint"));
            continue;
        }
        // A panic inside a job must not take the connection down: its writes are rolled back
        // below, and its caller sees its channel closed.
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| job.run(conn)));
        let ok = matches!(ran, Ok((true, _)));
        let end = if ok {
            "RELEASE job"
        } else {
            "ROLLBACK TO job; RELEASE job"
        };
        // If this fails the transaction is gone; the next iteration or the commit notices.
        let _ = conn.execute_batch(end);
        if let Ok((_, deliver)) = ran {
            delivers.push(deliver);
        }
    }
    let failure = match aborted {
        Some(f) => Some(f),
        None if conn.is_autocommit() => Some(GroupFailure {
            kind: ErrorKind::StoreUnavailable,
            message: "SQLite rolled the transaction back after an error".into(),
        }),
        None => conn.execute_batch("COMMIT").err().map(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            GroupFailure::new(e, "SQLite commit failed; nothing of this call was written")
        }),
    };
    for deliver in delivers {
        deliver(failure.as_ref());
    }
}

/// Maps an SQLite error to the crate's kinds: contention and I/O are transient, the rest is a
/// refusal that retrying will not fix.
fn classify(e: rusqlite::Error, context: impl Into<String>) -> Error {
    let kind = match e.sqlite_error_code() {
        Some(
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::SystemIoFailure
            | ErrorCode::CannotOpen
            | ErrorCode::DiskFull
            | ErrorCode::OutOfMemory
            | ErrorCode::FileLockingProtocolFailed,
        ) => ErrorKind::StoreUnavailable,
        _ => ErrorKind::StoreRejected,
    };
    Error::with_source(kind, context, e)
}

/// Like [`classify`], for the statement of a handler's effect: a failed constraint is the
/// business rule refusing, which cancels the completion as `EffectRejected`.
fn classify_effect(e: rusqlite::Error, index: usize) -> Error {
    if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) {
        return Error::with_source(
            ErrorKind::EffectRejected,
            format!("effect #{index} rejected by a constraint"),
            e,
        );
    }
    classify(e, format!("effect #{index} failed"))
}

fn claim_blocking(
    conn: &mut Connection,
    key: &str,
    now_ms: i64,
    lease_until_ms: i64,
    expires_at_ms: i64,
    fingerprint: Option<&str>,
) -> Result<Claim, Error> {
    let fail = |e| classify(e, format!("claim of key {key:?} failed"));
    // Runs inside the group's transaction and this job's savepoint (see `run_group`).
    let token = ClaimToken::generate();
    let changed = conn
        .execute(
            CLAIM_SQL,
            params![
                key,
                token.as_str(),
                lease_until_ms,
                expires_at_ms,
                fingerprint,
                now_ms
            ],
        )
        .map_err(fail)?;
    let claim = if changed == 1 {
        Claim::Acquired(token)
    } else {
        let row = conn
            .query_row(
                "SELECT status, lease_until_ms, expires_at_ms, fingerprint, response \
                 FROM claims WHERE id = ?1",
                [key],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<i64>>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                    ))
                },
            )
            .optional()
            .map_err(fail)?;
        let Some((status, lease, expires, fingerprint, response)) = row else {
            // The upsert changed nothing, so the row existed, and the write lock kept anyone
            // from deleting it since. Not reachable unless the schema was altered.
            return Err(Error::new(
                ErrorKind::StoreRejected,
                format!("claim of key {key:?} changed nothing, yet no record exists"),
            ));
        };
        let lease_until = lease.map(from_epoch_millis);
        match Status::parse(&status) {
            Some(Status::Completed) => Claim::Completed(ClaimRecord {
                status: Status::Completed,
                expires_at: from_epoch_millis(expires),
                lease_until,
                fingerprint,
                response: response.map(StoredResponse::new),
            }),
            Some(Status::InProgress) => Claim::HeldElsewhere { lease_until },
            None => {
                return Err(Error::new(
                    ErrorKind::StoreRejected,
                    format!("record for key {key:?} has an unknown status {status:?}"),
                ));
            }
        }
    };
    Ok(claim)
}

fn complete_blocking(
    conn: &mut Connection,
    key: &str,
    token: &str,
    expires_at_ms: i64,
    response: Option<&str>,
    effects: Vec<SqlEffect>,
) -> Result<(), Error> {
    let fail = |e| classify(e, format!("completion of key {key:?} failed"));
    // Runs inside the group's transaction and this job's savepoint (see `run_group`): an
    // early return with an error rolls back the effects already run.
    let row: Option<(String, String)> = conn
        .query_row(
            "SELECT status, token FROM claims WHERE id = ?1",
            [key],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(fail)?;
    match row {
        Some((_, stored)) if stored != token => return Err(Error::lost_claim(key)),
        None => return Err(Error::lost_claim(key)),
        // A retry of a completion that already committed: nothing to do, effects included.
        Some((status, _)) if status == Status::Completed.as_str() => return Ok(()),
        Some(_) => {}
    }
    for (i, effect) in effects.into_iter().enumerate() {
        let params = effect.params.into_iter().map(SqlValue::into_sqlite);
        let changed = conn
            .execute(&effect.sql, rusqlite::params_from_iter(params))
            .map_err(|e| classify_effect(e, i))?;
        if let Some(want) = effect.expect_rows
            && changed != want
        {
            return Err(Error::new(
                ErrorKind::EffectRejected,
                format!("effect #{i} changed {changed} rows, expected {want}"),
            ));
        }
    }
    let changed = conn
        .execute(
            "UPDATE claims SET status = 'COMPLETED', lease_until_ms = NULL, expires_at_ms = ?2, \
             response = ?4 WHERE id = ?1 AND token = ?3 AND status = 'INPROGRESS'",
            params![key, expires_at_ms, token, response],
        )
        .map_err(fail)?;
    if changed != 1 {
        // Unreachable under the write lock (the row was checked above), but never commit
        // effects without the completion that guards them.
        return Err(Error::lost_claim(key));
    }
    Ok(())
}

impl ClaimStore for SqliteStore {
    type Effect = SqlEffect;

    /// 256 calls in flight: they queue for the one connection thread, which commits whatever
    /// is waiting as one group (one fsync), so more in flight means fewer commits per batch.
    /// The one-shot write is one SQL transaction.
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_max_in_flight(256)
            .with_atomic_one_shot(true)
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        let key = req.key.to_owned();
        let fingerprint = req.fingerprint.map(str::to_owned);
        let (now, lease, expires) = (
            epoch_millis(req.now),
            epoch_millis(req.lease_until),
            epoch_millis(req.record_expires_at()),
        );
        self.run(move |conn| {
            claim_blocking(conn, &key, now, lease, expires, fingerprint.as_deref())
        })
        .await
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<SqlEffect>,
    ) -> Result<(), Error> {
        // Refused before the job is queued: nothing is written, the claim stays in progress.
        completion.check_response_size(key, self.capabilities().max_response_bytes)?;
        let Completion {
            expires_at,
            response,
            effects,
            ..
        } = completion;
        let key = key.to_owned();
        let token = token.as_str().to_owned();
        let expires = epoch_millis(expires_at);
        let effects = effects.into_vec();
        self.run(move |conn| {
            let response = response.as_ref().map(StoredResponse::as_str);
            complete_blocking(conn, &key, &token, expires, response, effects)
        })
        .await
    }

    /// One job, so one savepoint of one transaction: the claim's upsert, the effects and the
    /// completion; a refused effect rolls the claim back with it.
    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<SqlEffect>,
    ) -> Result<OneShotWrite, Error> {
        let key = req.key.to_owned();
        let fingerprint = req.fingerprint.map(str::to_owned);
        let (now, lease, expires) = (
            epoch_millis(req.now),
            epoch_millis(req.lease_until),
            epoch_millis(req.record_expires_at()),
        );
        let completed_expires = epoch_millis(req.expires_at);
        let effects = effects.into_vec();
        self.run(move |conn| {
            match claim_blocking(conn, &key, now, lease, expires, fingerprint.as_deref())? {
                Claim::Acquired(token) => {
                    // A one-shot write stores no response.
                    complete_blocking(
                        conn,
                        &key,
                        token.as_str(),
                        completed_expires,
                        None,
                        effects,
                    )?;
                    Ok(OneShotWrite::Committed)
                }
                Claim::Completed(record) => Ok(OneShotWrite::Completed(record)),
                Claim::HeldElsewhere { lease_until } => {
                    Ok(OneShotWrite::HeldElsewhere { lease_until })
                }
            }
        })
        .await
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let key = key.to_owned();
        let token = token.as_str().to_owned();
        self.run(move |conn| {
            let changed = conn
                .execute(
                    "DELETE FROM claims WHERE id = ?1 AND token = ?2 AND status = 'INPROGRESS'",
                    params![key, token],
                )
                .map_err(|e| classify(e, format!("release of key {key:?} failed")))?;
            if changed == 1 {
                Ok(())
            } else {
                Err(Error::lost_claim(&key))
            }
        })
        .await
    }
}

/// The database is local: [`init`](StoreAdmin::init) and [`check_ready`](StoreAdmin::check_ready)
/// both create the `claims` table if it is missing (as [`SqliteStore::open`] does) and add the
/// `response` column to a table of an older version. SQLite has no TTL: expired rows stay until
/// [`prune_expired`](StoreAdmin::prune_expired) deletes them.
impl StoreAdmin for SqliteStore {
    async fn init(&self) -> Result<(), Error> {
        let location = self.inner.location.clone();
        self.run_direct(move |conn| {
            while_busy(|| create_schema(conn))
                .map_err(|e| classify(e, format!("cannot create the claims table in {location}")))
        })
        .await
    }

    async fn check_ready(&self) -> Result<(), Error> {
        self.init().await
    }

    /// Deletes at most `limit` records that expired at `now`, oldest first. Bounded, so a
    /// scheduled run (`sqs-claim prune`) never holds the write lock for long.
    async fn prune_expired(&self, now: SystemTime, limit: u32) -> Result<Option<u64>, Error> {
        let now_ms = epoch_millis(now);
        self.run(move |conn| {
            conn.execute(
                "DELETE FROM claims WHERE id IN (SELECT id FROM claims \
                 WHERE expires_at_ms <= ?1 ORDER BY expires_at_ms LIMIT ?2)",
                rusqlite::params![now_ms, i64::from(limit)],
            )
            .map(|n| Some(n as u64))
            .map_err(|e| classify(e, "pruning expired claims failed"))
        })
        .await
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        let key = key.to_owned();
        self.run_direct(move |conn| {
            let fail = |e| classify(e, format!("inspect of key {key:?} failed"));
            let row = conn
                .query_row(
                    "SELECT status, token, lease_until_ms, expires_at_ms, fingerprint, response \
                     FROM claims WHERE id = ?1",
                    [&key],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, Option<i64>>(2)?,
                            r.get::<_, i64>(3)?,
                            r.get::<_, Option<String>>(4)?,
                            r.get::<_, Option<String>>(5)?,
                        ))
                    },
                )
                .optional()
                .map_err(fail)?;
            let Some((status, token, lease, expires, fingerprint, response)) = row else {
                return Ok(None);
            };
            let Some(status) = Status::parse(&status) else {
                return Err(Error::new(
                    ErrorKind::StoreRejected,
                    format!("record for key {key:?} has an unknown status {status:?}"),
                ));
            };
            Ok(Some(Inspected::new(
                ClaimRecord {
                    status,
                    expires_at: from_epoch_millis(expires),
                    lease_until: lease.map(from_epoch_millis),
                    fingerprint,
                    response: response.map(StoredResponse::new),
                },
                Some(ClaimToken::from_string(token)),
            )))
        })
        .await
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::InProgress).await
    }

    async fn forget(&self, key: &str) -> Result<bool, Error> {
        self.delete_if(key, Status::Completed).await
    }
}

impl SqliteStore {
    /// Deletes `key`'s row only if its status is `status`, in one statement.
    async fn delete_if(&self, key: &str, status: Status) -> Result<bool, Error> {
        let key = key.to_owned();
        self.run(move |conn| {
            conn.execute(
                "DELETE FROM claims WHERE id = ?1 AND status = ?2",
                params![key, status.as_str()],
            )
            .map(|changed| changed == 1)
            .map_err(|e| classify(e, format!("delete of key {key:?} failed")))
        })
        .await
    }
}
