//! The connections the `connect*` constructors make: timeouts, retries, the URL.

use super::*;

/// Timeouts and retries for the connections the `connect*` constructors make: short enough that
/// a dead server surfaces as `StoreUnavailable` well within a Lambda invocation (4 s without an
/// answer), long enough that a slow one, answering seconds late, is still used. An ambiguous
/// timeout is safe: a claim that did land is seen as held until its lease lapses, and a
/// repeated completion is a no-op. One retry of a failed connect (a dark server at start-up
/// costs about two connection timeouts, inside the start-up bound).
pub(super) fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(4)))
        .set_response_timeout(Some(Duration::from_secs(4)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500))
}

pub(super) fn open_client(url: &str) -> Result<redis::Client, Error> {
    redis::Client::open(url).map_err(|e| {
        Error::with_source(
            ErrorKind::Config,
            "invalid Redis URL (expected redis://[user:password@]host[:port][/db] or rediss://... \
             for TLS)",
            e,
        )
    })
}

/// The host part of a URL, for error messages (a URL may carry a password).
pub(super) fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}
