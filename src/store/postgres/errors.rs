//! How a PostgreSQL error becomes the crate's [`Error`]: transient or refused, and what to
//! do about it.

use super::*;

pub(super) fn is_transient_state(code: &SqlState) -> bool {
    let c = code.code();
    c.starts_with("08") // connection exception
        || c.starts_with("53") // insufficient resources
        || c.starts_with("57P") // admin/crash shutdown, cannot connect now
        || c == "57014" // query cancelled (statement_timeout)
        || c == "55P03" // lock not available
        || *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
}

pub(super) fn map_pg_err(op: &str, key: &str, table: &str, e: tokio_postgres::Error) -> Error {
    // `op` alone when there is no key (migrate, prune, the start-up check).
    let op = if key.is_empty() {
        op.to_owned()
    } else {
        format!("{op} {:?}", short(key))
    };
    match e.code() {
        // Two transactions on one row: the one PostgreSQL chose to abort wrote nothing, and
        // the claim core sends it again (a hot row, written from several invocations).
        Some(code)
            if *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED =>
        {
            Error::with_source(
                ErrorKind::Contention,
                format!(
                    "PostgreSQL aborted {op} (table {table:?}) on contention with another \
                     transaction; nothing was written"
                ),
                e,
            )
        }
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
/// Public with feature `admin`, for the start-up checks of tables of your own beside the
/// claims table (the example app's accounts table).
#[cfg_attr(not(feature = "admin"), allow(unreachable_pub))]
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

pub(super) fn effect_err(i: usize, e: tokio_postgres::Error, key: &str, table: &str) -> Error {
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

pub(super) fn short(key: &str) -> &str {
    match key.char_indices().nth(120) {
        Some((i, _)) => &key[..i],
        None => key,
    }
}

pub(super) fn bad_row(key: &str, table: &str, e: tokio_postgres::Error) -> Error {
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
