//! How a request the layer refuses to run is answered: in progress elsewhere, same key with
//! another request, no key.

use std::time::Duration;

use serde_json::json;

use super::IdempotentResponse;
use crate::{Error, ErrorKind};

/// Why the layer did not run the handler for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// Another invocation holds the key's claim and is still running (its lease is live).
    InProgress,
    /// The key was completed by a request with another payload (the fingerprints differ).
    PayloadMismatch,
    /// The request does not carry the key (and [`MissingKey::Fail`](crate::MissingKey::Fail)).
    MissingKey,
}

impl RefusalKind {
    /// The [`ErrorKind`] of the error [`ErrorAnswers`] answers with.
    pub fn error_kind(self) -> ErrorKind {
        match self {
            RefusalKind::InProgress => ErrorKind::InProgress,
            RefusalKind::PayloadMismatch => ErrorKind::PayloadMismatch,
            RefusalKind::MissingKey => ErrorKind::MissingKey,
        }
    }
}

/// A refused request, as an [`Answers`] sees it. Its message names no key and no payload.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// Why.
    pub kind: RefusalKind,
    /// A sentence for the caller ("a request with this idempotency key is in progress").
    pub message: String,
    /// For [`RefusalKind::InProgress`]: how long until the other claim's lease lapses, if the
    /// store said.
    pub retry_after: Option<Duration>,
}

impl Refusal {
    pub(crate) fn new(kind: RefusalKind, message: impl Into<String>) -> Self {
        Refusal {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }
}

/// How refused requests are answered: a response (an HTTP 409 for API Gateway), or an error.
///
/// Closures `Fn(&Refusal) -> Result<IdempotentResponse, Error>` are answers too:
///
/// ```
/// use sqs_claim::idempotency::{IdempotentResponse, Refusal, RefusalKind};
///
/// let answers = |refusal: &Refusal| {
///     IdempotentResponse::new(&serde_json::json!({
///         "ok": false,
///         "retry": refusal.kind == RefusalKind::InProgress,
///     }))
/// };
/// # fn takes(_: impl sqs_claim::idempotency::Answers) {}
/// # takes(answers);
/// ```
pub trait Answers: Send + Sync + 'static {
    /// The answer to `refusal`: the invocation's response, or its error.
    fn answer(&self, refusal: &Refusal) -> Result<IdempotentResponse, Error>;
}

impl<F> Answers for F
where
    F: Fn(&Refusal) -> Result<IdempotentResponse, Error> + Send + Sync + 'static,
{
    fn answer(&self, refusal: &Refusal) -> Result<IdempotentResponse, Error> {
        self(refusal)
    }
}

/// Answers every refusal with an error of the refusal's kind
/// ([`RefusalKind::error_kind`]: `InProgress`, `PayloadMismatch`, `MissingKey`) and its
/// message. The default for events other than HTTP ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorAnswers;

impl Answers for ErrorAnswers {
    fn answer(&self, refusal: &Refusal) -> Result<IdempotentResponse, Error> {
        Err(Error::new(
            refusal.kind.error_kind(),
            refusal.message.clone(),
        ))
    }
}

/// Answers every refusal with an HTTP response in the Lambda proxy shape that API Gateway (REST
/// and HTTP API v2), function URLs and ALB all read: `statusCode`, `headers`, a JSON `body`
/// `{"message": ...}`. The default for the API Gateway events (feature `apigw`).
///
/// | refusal | status | headers |
/// |---------|--------|---------|
/// | in progress elsewhere | 409 Conflict | `Retry-After` (seconds, rounded up) when the lease end is known |
/// | same key, other request | 422 Unprocessable Content | |
/// | no key | 400 Bad Request | |
///
/// ```
/// use sqs_claim::idempotency::{HttpAnswers, RefusalKind};
///
/// // Answer a missing Idempotency-Key with 428 Precondition Required instead.
/// let answers = HttpAnswers::new().with_status(RefusalKind::MissingKey, 428);
/// # let _ = answers;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpAnswers {
    in_progress: u16,
    payload_mismatch: u16,
    missing_key: u16,
}

impl HttpAnswers {
    /// 409, 422, 400.
    pub const fn new() -> Self {
        HttpAnswers {
            in_progress: 409,
            payload_mismatch: 422,
            missing_key: 400,
        }
    }

    /// Answers refusals of `kind` with `status`.
    pub fn with_status(mut self, kind: RefusalKind, status: u16) -> Self {
        match kind {
            RefusalKind::InProgress => self.in_progress = status,
            RefusalKind::PayloadMismatch => self.payload_mismatch = status,
            RefusalKind::MissingKey => self.missing_key = status,
        }
        self
    }

    /// The status refusals of `kind` get.
    pub(crate) fn status(&self, kind: RefusalKind) -> u16 {
        match kind {
            RefusalKind::InProgress => self.in_progress,
            RefusalKind::PayloadMismatch => self.payload_mismatch,
            RefusalKind::MissingKey => self.missing_key,
        }
    }
}

impl Default for HttpAnswers {
    fn default() -> Self {
        HttpAnswers::new()
    }
}

impl Answers for HttpAnswers {
    fn answer(&self, refusal: &Refusal) -> Result<IdempotentResponse, Error> {
        let mut headers = serde_json::Map::new();
        headers.insert("content-type".into(), json!("application/json"));
        if let Some(after) = refusal.retry_after {
            // Whole seconds (RFC 9110), rounded up and at least 1: "retry now" would only be
            // answered 409 again.
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            headers.insert("retry-after".into(), json!(secs.max(1).to_string()));
        }
        let body = json!({ "message": refusal.message }).to_string();
        IdempotentResponse::new(&json!({
            "statusCode": self.status(refusal.kind),
            "headers": headers,
            "body": body,
            "isBase64Encoded": false,
        }))
    }
}
