//! The connections the `connect*` constructors make: timeouts, retries, the URL.

use super::*;

/// Timeouts and retries for the connections the `connect*` constructors make: short enough that
/// a dead server surfaces as `StoreUnavailable` well within a Lambda invocation, long enough
/// that a busy one is not abandoned. An ambiguous timeout is safe: a claim that did land is seen
/// as held until its lease lapses, and a repeated completion is a no-op.
pub(super) fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(2)
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
