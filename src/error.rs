//! One opaque error type for the whole crate.
//!
//! Backend errors (AWS SDK, SQLite, Redis, PostgreSQL) never appear in the public API: they are
//! kept as the [`source`](std::error::Error::source) of an [`Error`], and callers branch on
//! [`Error::kind`]. This keeps SDK upgrades from being breaking changes for users and gives the
//! processor one place to decide what is transient.

use std::fmt;

/// A boxed error, as handlers and backends produce them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong, coarse enough to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The store could not be reached or did not answer in time (network, throttling, a server
    /// error). Transient: retrying later may succeed. On claim, this is what "fail closed" and
    /// "fail open" decide about.
    StoreUnavailable,
    /// The store answered but refused the request for a reason retrying will not fix: a missing
    /// table, a wrong schema, invalid credentials, a request too large.
    StoreRejected,
    /// The record no longer carries this claimant's token: the lease lapsed and another worker
    /// took the claim over (or the record expired and was removed). Nothing was changed.
    LostClaim,
    /// The store refused one of the handler's atomic effects (for example a condition on the
    /// business write failed). The transaction was cancelled: neither the effects nor the
    /// completion were written.
    EffectRejected,
    /// A message body could not be decoded as the type the handler asked for.
    BadBody,
    /// The message does not carry the idempotency key the processor is configured to use.
    MissingKey,
    /// The SQS event itself cannot be processed safely (for example a record without a
    /// `messageId`, which could not be reported as a failure).
    InvalidEvent,
    /// A configuration value is out of range or inconsistent.
    Config,
    /// Publishing a message to SQS failed.
    Publish,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// A short stable name, as used in logs and reports (`store_unavailable`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::StoreUnavailable => "store_unavailable",
            ErrorKind::StoreRejected => "store_rejected",
            ErrorKind::LostClaim => "lost_claim",
            ErrorKind::EffectRejected => "effect_rejected",
            ErrorKind::BadBody => "bad_body",
            ErrorKind::MissingKey => "missing_key",
            ErrorKind::InvalidEvent => "invalid_event",
            ErrorKind::Config => "config",
            ErrorKind::Publish => "publish",
            ErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The crate's error: a [`kind`](Error::kind), a message, and optionally the underlying cause.
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<BoxError>,
}

impl Error {
    /// A new error of `kind` with a human-readable message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A new error of `kind` caused by `source`.
    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Error {
            kind,
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the chain of causes.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying the same call later may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::StoreUnavailable
    }

    pub(crate) fn lost_claim(key: &str) -> Self {
        Error::new(
            ErrorKind::LostClaim,
            format!("claim on key {key:?} is no longer held by this token"),
        )
    }
}

impl fmt::Debug for Error {
    // Readable rather than structural: `lambda_runtime` logs a handler's error with `{:?}`, and
    // that line is what an on-call engineer reads first.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {self}", self.kind)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        // Show the chain inline: a one-line log at 3 a.m. should name the root cause.
        let mut source = self
            .source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static));
        let mut last = String::new();
        while let Some(s) = source {
            // Many errors already print their cause in their own message (`redis`,
            // `tokio-postgres`): print each text once, not "refused: refused".
            let text = s.to_string();
            if !last.contains(&text) {
                write!(f, ": {text}")?;
            }
            last = text;
            source = s.source();
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapper(std::io::Error);

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "client error: {}", self.0)
        }
    }

    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn display_names_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e = Error::with_source(ErrorKind::StoreUnavailable, "store down", Wrapper(io));
        assert_eq!(
            e.to_string(),
            "store down: client error: Connection refused"
        );
        assert_eq!(
            format!("{e:?}"),
            "[store_unavailable] store down: client error: Connection refused"
        );
    }
}
