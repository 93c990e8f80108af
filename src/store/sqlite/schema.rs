//! The `claims` table: created (and completed with the `response` column) when the store
//! opens and by `init`, with the connection's settings (WAL, `synchronous = FULL`).

use super::*;

pub(super) const SCHEMA: &str = "
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
pub(super) const ADD_RESPONSE: &str = "ALTER TABLE claims ADD COLUMN response TEXT";

pub(super) fn configure(conn: &Connection, file: bool) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Two processes opening a new file at once race to switch it to WAL and create the
    // schema; SQLite answers some of those lock conflicts with SQLITE_BUSY at once, without
    // waiting (to avoid deadlocks), so wait here, up to the busy timeout.
    while_busy(|| setup(conn, file))
}

/// Runs `f` again while SQLite answers it busy or locked at once, up to the busy timeout.
pub(super) fn while_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
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

pub(super) fn setup(conn: &Connection, file: bool) -> rusqlite::Result<()> {
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
pub(super) fn create_schema(conn: &Connection) -> rusqlite::Result<()> {
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
pub(super) fn has_response_column(conn: &Connection) -> rusqlite::Result<bool> {
    let mut stmt =
        conn.prepare("SELECT 1 FROM pragma_table_info('claims') WHERE name = 'response'")?;
    stmt.exists([])
}
