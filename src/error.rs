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
    /// The store cancelled the write because another write on one of its items was in flight
    /// (DynamoDB's `TransactionConflict`, a PostgreSQL serialization failure or deadlock) or
    /// throttled it inside a transaction: **nothing was written**, and the same write can be
    /// sent again at once. The claim core retries it with backoff under the contention
    /// [`RetryPolicy`](crate::RetryPolicy) inside the time budget, so a caller sees it
    /// only when that ran out. Transient ([`Error::is_transient`]).
    Contention,
    /// The record no longer carries this claimant's token: the lease lapsed and another worker
    /// took the claim over (or the record expired and was removed). Nothing was changed.
    LostClaim,
    /// The store refused one of the handler's atomic effects (for example a condition on the
    /// business write failed). The transaction was cancelled: neither the effects nor the
    /// completion were written.
    EffectRejected,
    /// A handler's response is longer than the store keeps
    /// ([`Capabilities::max_response_bytes`](crate::store::Capabilities::max_response_bytes)): it was
    /// not stored and nothing was committed.
    ResponseTooLarge,
    /// The idempotency layer found the request's key claimed by another invocation still
    /// running (its lease is live): nothing ran. Retry later.
    InProgress,
    /// The idempotency layer found the request's key completed by a request with another
    /// payload (same key, other request): nothing ran, nothing was replayed.
    PayloadMismatch,
    /// The idempotency layer found the request's key completed, but the record holds no
    /// response to replay (it was written by the SQS processor or a one-shot write, which store
    /// none): nothing ran.
    NotReplayable,
    /// The invocation's time budget ran out before the step finished (the deadline minus the
    /// answer reserve): the step was cut off and the answer sent in time.
    OutOfTime,
    /// The handler panicked; the panic was caught and the claim released.
    Panicked,
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
            ErrorKind::Contention => "contention",
            ErrorKind::LostClaim => "lost_claim",
            ErrorKind::EffectRejected => "effect_rejected",
            ErrorKind::ResponseTooLarge => "response_too_large",
            ErrorKind::InProgress => "in_progress",
            ErrorKind::PayloadMismatch => "payload_mismatch",
            ErrorKind::NotReplayable => "not_replayable",
            ErrorKind::OutOfTime => "out_of_time",
            ErrorKind::Panicked => "panicked",
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
///
/// `Display` prints the error's own message only, and [`source`](std::error::Error::source)
/// gives the cause, so reporters that walk the chain (`anyhow`, `eyre`, `tracing-error`) name
/// each cause once. For the whole chain on one line, use the alternate form, `{:#}` (as with
/// `anyhow`): `"claim failed: dispatch failure: connection refused"`. `Debug` is that line with
/// the kind in front.
///
/// One pointer wide: the error travels in every `Result` of the crate's hot path.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    message: String,
    source: Option<BoxError>,
    /// The store did not answer within its bound (no reply at all, not an error reply): what
    /// tells a store gone dark from one that answers (`claim/liveness.rs`).
    no_answer: bool,
}

impl Error {
    /// A new error of `kind` with a human-readable message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                source: None,
                no_answer: false,
            }),
        }
    }

    /// A new error of `kind` caused by `source`.
    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                source: Some(source.into()),
                no_answer: false,
            }),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The message, without the chain of causes.
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// Whether retrying the same call later may succeed: the store was unavailable, or the
    /// write met contention ([`ErrorKind::Contention`], which also says nothing was written).
    pub fn is_transient(&self) -> bool {
        matches!(
            self.inner.kind,
            ErrorKind::StoreUnavailable | ErrorKind::Contention
        )
    }

    /// The same error, marked as the store's silence: the call got no reply within the
    /// store's own bound (a client-side timeout), as opposed to a reply that was an error.
    #[cfg_attr(
        not(any(feature = "dynamodb", feature = "redis", feature = "postgres")),
        allow(dead_code)
    )]
    pub(crate) fn no_answer(mut self) -> Self {
        self.inner.no_answer = true;
        self
    }

    /// Whether the store gave no reply within its bound ([`Error::no_answer`]), or, for an
    /// error of a store of your own, whether its chain holds an I/O error of kind `TimedOut`
    /// or a `tokio::time` timeout: a silent store, not one that answered with an error.
    pub(crate) fn is_no_answer(&self) -> bool {
        if self.inner.no_answer {
            return true;
        }
        let mut next: Option<&(dyn std::error::Error + 'static)> =
            self.inner.source.as_deref().map(|e| e as _);
        while let Some(e) = next {
            if e.downcast_ref::<tokio::time::error::Elapsed>().is_some()
                || e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
                || e.downcast_ref::<Error>().is_some_and(Error::is_no_answer)
            {
                return true;
            }
            next = e.source();
        }
        false
    }

    /// The same error (its kind, whether the store was silent) with `context` in front and
    /// its whole chain of causes in its own message: `"{context}: {self:#}"`. For an error that
    /// ends a start-up, where `{}` is what gets printed (a `main` returning it, a
    /// `lambda_runtime` init error): PostgreSQL's `database "x" does not exist` belongs on the
    /// line, not only under `{:#}`. The causes are in the message, so none is kept as the
    /// `source` (a chain reporter would print each twice).
    #[cfg_attr(not(feature = "settings"), allow(dead_code))]
    pub(crate) fn at_start_up(self, context: impl fmt::Display) -> Self {
        let no_answer = self.is_no_answer();
        let context = context.to_string();
        let message = if context.is_empty() {
            format!("{self:#}")
        } else {
            format!("{context}: {self:#}")
        };
        Error {
            inner: Box::new(Inner {
                kind: self.inner.kind,
                message,
                source: None,
                no_answer,
            }),
        }
    }

    pub(crate) fn lost_claim(key: &str) -> Self {
        Error::new(
            ErrorKind::LostClaim,
            format!("claim on key {key:?} is no longer held by this token"),
        )
    }

    /// The kind of the first [`Error`] in `err`'s chain (`err` itself included), if any: a
    /// handler's error may be this crate's error, boxed, or wrapped by the handler's own type.
    pub(crate) fn kind_in_chain(err: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
        let mut next = Some(err);
        while let Some(e) = next {
            if let Some(ours) = e.downcast_ref::<Error>() {
                return Some(ours.kind());
            }
            next = e.source();
        }
        None
    }
}

/// Any error and its causes on one line (`outer: cause: root cause`), each text once.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut source = self.0.source();
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

impl fmt::Debug for Error {
    // Readable rather than structural: `lambda_runtime` logs a handler's error with `{:?}`, and
    // that line is what an on-call engineer reads first, so it names the root cause.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {self:#}", self.inner.kind)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            Chain(self).fmt(f)
        } else {
            f.write_str(&self.inner.message)
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
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

    fn io_refused() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused")
    }

    #[test]
    fn display_is_the_own_message_and_source_is_the_chain() {
        let e = Error::with_source(
            ErrorKind::StoreUnavailable,
            "store down",
            Wrapper(io_refused()),
        );
        assert_eq!(e.to_string(), "store down");
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "client error: Connection refused");
        let root = source.source().expect("the root cause");
        assert_eq!(root.to_string(), "Connection refused");
        assert!(root.source().is_none());
    }

    #[test]
    fn a_chain_reporter_prints_each_cause_once() {
        // What `anyhow`'s `{:#}` and `{:?}` reports do: each link's Display, joined. (`Wrapper`
        // would repeat its cause itself; ours must not.)
        let e = Error::with_source(ErrorKind::StoreUnavailable, "store down", io_refused());
        let mut links = Vec::new();
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(link) = next {
            links.push(link.to_string());
            next = link.source();
        }
        let report = links.join(": ");
        assert_eq!(report, "store down: Connection refused");
        assert_eq!(report.matches("Connection refused").count(), 1, "{report}");
    }

    #[test]
    fn alternate_and_debug_name_each_cause_once() {
        let e = Error::with_source(
            ErrorKind::StoreUnavailable,
            "store down",
            Wrapper(io_refused()),
        );
        assert_eq!(
            format!("{e:#}"),
            "store down: client error: Connection refused"
        );
        assert_eq!(
            format!("{e:?}"),
            "[store_unavailable] store down: client error: Connection refused"
        );
        // An error of ours caused by another of ours: each prints its own message once.
        let outer = Error::with_source(ErrorKind::Publish, "outer", e);
        assert_eq!(
            format!("{outer:#}"),
            "outer: store down: client error: Connection refused"
        );
    }

    #[test]
    fn is_one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
        assert_eq!(
            std::mem::size_of::<Result<(), Error>>(),
            std::mem::size_of::<usize>()
        );
    }

    #[test]
    fn kind_in_chain_finds_ours_behind_a_wrapper() {
        #[derive(Debug)]
        struct HandlerError(Error);
        impl fmt::Display for HandlerError {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("handler failed")
            }
        }
        impl std::error::Error for HandlerError {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let boxed: BoxError = Box::new(HandlerError(Error::new(ErrorKind::BadBody, "bad")));
        assert_eq!(Error::kind_in_chain(&*boxed), Some(ErrorKind::BadBody));
        let plain: BoxError = "just text".into();
        assert_eq!(Error::kind_in_chain(&*plain), None);
    }
}
