//! How a Redis error becomes the crate's [`Error`]: transient or refused.

use super::*;

/// Classifies a Redis error: transient (`StoreUnavailable`) or refused (`StoreRejected`).
pub(super) fn map_err(op: &str, key: &str, e: RedisError) -> Error {
    let transient = e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            redis::ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
        || e.code() == Some("BUSY");
    let key = short(key);
    if transient {
        let silent = e.is_timeout();
        let message = if silent {
            format!(
                "no answer from Redis within the client's timeout during {op} {key:?}: the \
                 server or the network is down or partitioned"
            )
        } else {
            format!("Redis unavailable during {op} {key:?}; check the server and the network")
        };
        let e = Error::with_source(ErrorKind::StoreUnavailable, message, e);
        // No reply within the connection's response timeout: the server is silent.
        if silent { e.no_answer() } else { e }
    } else {
        Error::with_source(
            ErrorKind::StoreRejected,
            format!(
                "Redis refused {op} {key:?}; check that nothing else writes keys under this \
                 store's prefix and that the user may run EVALSHA/SCRIPT LOAD"
            ),
            e,
        )
    }
}

/// Keys can be many kilobytes; error messages need only their start.
pub(super) fn short(key: &str) -> &str {
    match key.char_indices().nth(120) {
        Some((i, _)) => &key[..i],
        None => key,
    }
}

/// The reply is described, not printed: a record's fields include the stored response, which
/// never goes into error text.
pub(super) fn bad_reply(op: &str, key: &str, reply: &[Option<String>]) -> Error {
    let first = reply.first().cloned().flatten();
    Error::new(
        ErrorKind::StoreRejected,
        format!(
            "unexpected Redis reply to {op} {:?} (first field {:?}, {} fields); the record \
             under this key is not one this store wrote (check the prefix)",
            short(key),
            first.as_deref().map(short),
            reply.len()
        ),
    )
}
