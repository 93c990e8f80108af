//! How an SQLite error becomes the crate's [`Error`].

use super::*;

/// Maps an SQLite error to the crate's kinds: contention and I/O are transient, the rest is a
/// refusal that retrying will not fix.
pub(super) fn classify(e: rusqlite::Error, context: impl Into<String>) -> Error {
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
pub(super) fn classify_effect(e: rusqlite::Error, index: usize) -> Error {
    if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) {
        return Error::with_source(
            ErrorKind::EffectRejected,
            format!("effect #{index} rejected by a constraint"),
            e,
        );
    }
    classify(e, format!("effect #{index} failed"))
}
