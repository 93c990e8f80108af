//! How an SDK error becomes the crate's [`Error`]: its kind, and how far the request got.

use super::*;

pub(super) fn build_error(e: aws_sdk_dynamodb::error::BuildError) -> Error {
    Error::with_source(ErrorKind::StoreRejected, "invalid DynamoDB request", e)
}

/// Maps an SDK error to the crate's kinds: a `TransactionConflictException` (a single-item write
/// on an item a transaction holds) is [`ErrorKind::Contention`]; throttling, server errors,
/// timeouts and network failures are transient (`StoreUnavailable`); the rest (missing table, validation, access
/// denied) will not fix themselves (`StoreRejected`).
///
/// The message says how far the request got, because that is what an operator acts on:
/// * could not connect: nothing was sent (network, DNS, security group, endpoint);
/// * could not be sent (credentials, request signing): nothing was sent;
/// * sent, but no answer (timed out, or the connection dropped after sending): the request may
///   or may not have been applied;
/// * an answer that could not be read: it may or may not have been applied.
///
/// Public so that the DynamoDB calls of your own (a business table beside the claims) fail
/// with the same kinds and wording as the store's.
pub(crate) fn classify<E, R>(op: &str, e: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let transient_codes = [
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ThrottlingException",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionInProgressException",
        "LimitExceededException",
    ];
    let code = e.code().map(str::to_owned);
    let (kind, what) = match &e {
        SdkError::ServiceError(_) => {
            let c = code.as_deref().unwrap_or("unknown");
            // A single-item write on an item a transaction holds: refused at once, nothing
            // written; the SDK does not retry it, the claim core does.
            let kind = if c == "TransactionConflictException" {
                ErrorKind::Contention
            } else if transient_codes.contains(&c) {
                ErrorKind::StoreUnavailable
            } else {
                ErrorKind::StoreRejected
            };
            (kind, format!("DynamoDB {op} failed: {c}"))
        }
        SdkError::ConstructionFailure(_) => (
            ErrorKind::StoreRejected,
            format!("DynamoDB {op}: request could not be built"),
        ),
        SdkError::TimeoutError(_) => (
            ErrorKind::StoreUnavailable,
            format!(
                "DynamoDB {op}: no answer within the client's timeout (the endpoint is silent: \
                 a partition, or replies dropped); the request may or may not have been applied"
            ),
        ),
        SdkError::DispatchFailure(d) => (
            ErrorKind::StoreUnavailable,
            match dispatch_stage(d.is_io() || d.is_timeout() || d.as_other().is_some(), &e) {
                Dispatch::Connect => format!(
                    "DynamoDB {op}: could not reach the endpoint (network, DNS, firewall or \
                     endpoint URL); nothing was sent"
                ),
                Dispatch::NotSent => format!(
                    "DynamoDB {op}: the request could not be sent (credentials, signing or client \
                     configuration); nothing was sent"
                ),
                Dispatch::Sent => format!(
                    "DynamoDB {op}: sent, but no answer (the connection failed after the request \
                     went out; it may or may not have been applied)"
                ),
            },
        ),
        SdkError::ResponseError(_) => (
            ErrorKind::StoreUnavailable,
            format!(
                "DynamoDB {op}: sent, but the answer could not be read (truncated or malformed; \
                 it may or may not have been applied)"
            ),
        ),
        _ => (
            ErrorKind::StoreUnavailable,
            format!("DynamoDB {op}: unexpected response"),
        ),
    };
    // One readable cause, not the SDK's whole context dump: the service's own message, or the
    // innermost transport error ("Connection refused", "dns error", ...).
    let detail = match &e {
        SdkError::ServiceError(_) => e.message().unwrap_or_default().to_owned(),
        _ => {
            let mut cause: &dyn std::error::Error = &e;
            while let Some(next) = cause.source() {
                cause = next;
            }
            cause.to_string()
        }
    };
    // No reply within the client's timeouts (the operation's, or an attempt's or the connect's
    // surfacing as a dispatch failure): the endpoint is silent, not answering with an error.
    let silent = match &e {
        SdkError::TimeoutError(_) => true,
        SdkError::DispatchFailure(d) => d.is_timeout(),
        _ => false,
    };
    let error = if detail.is_empty() {
        Error::new(kind, what)
    } else {
        Error::with_source(kind, what, detail)
    };
    if silent { error.no_answer() } else { error }
}

/// How far a request that failed in dispatch got.
#[derive(Debug, PartialEq, Eq)]
enum Dispatch {
    /// The connection could not be opened (refused, DNS, connect timeout).
    Connect,
    /// The request failed before it was sent (credentials, signing).
    NotSent,
    /// The connection was open and the request (maybe partly) written: lost after sending.
    Sent,
}

/// `io_or_timeout`: the SDK's own classification of the dispatch failure (I/O, timeout, or a
/// transient "other" such as a connection closed before the answer was complete).
fn dispatch_stage(io_or_timeout: bool, e: &(dyn std::error::Error + 'static)) -> Dispatch {
    // The HTTP client marks a failed connect in its error chain: hyper-util's
    // "client error (Connect)", and the SDK's own "HTTP connect timeout". Anything else of the
    // I/O or timeout kind happened on an open connection, after the request went out.
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if text.contains("(Connect)") || text.contains("connect timeout") {
            return Dispatch::Connect;
        }
        cause = c.source();
    }
    if io_or_timeout {
        Dispatch::Sent
    } else {
        Dispatch::NotSent
    }
}
