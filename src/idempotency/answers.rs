//! How a request the layer refuses to run is answered: in progress elsewhere, same key with
//! another request, no key.

use std::time::Duration;

use serde_json::json;

use super::IdempotentResponse;
use crate::{Error, ErrorKind};

/// A refused request, as an [`Answers`] sees it. Its message names no key and no payload.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// Why: [`ErrorKind::InProgress`] (another invocation holds the key's claim and is still
    /// running), [`ErrorKind::PayloadMismatch`] (the key was completed by a request with another
    /// payload) or [`ErrorKind::MissingKey`] (the request does not carry the key, and
    /// [`MissingKey::Fail`](crate::MissingKey::Fail)). The layer refuses for no other kind.
    pub kind: ErrorKind,
    /// A sentence for the caller ("a request with this idempotency key is in progress").
    pub message: String,
    /// For [`ErrorKind::InProgress`]: how long until the other claim's lease lapses, if the
    /// store said.
    pub retry_after: Option<Duration>,
}

impl Refusal {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
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
/// use sqs_claim::ErrorKind;
/// use sqs_claim::idempotency::{IdempotentResponse, Refusal};
///
/// let answers = |refusal: &Refusal| {
///     IdempotentResponse::new(&serde_json::json!({
///         "ok": false,
///         "retry": refusal.kind == ErrorKind::InProgress,
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
/// ([`Refusal::kind`]: `InProgress`, `PayloadMismatch`, `MissingKey`) and its message. The default for events other than HTTP ones.
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorAnswers;

impl Answers for ErrorAnswers {
    fn answer(&self, refusal: &Refusal) -> Result<IdempotentResponse, Error> {
        Err(Error::new(refusal.kind, refusal.message.clone()))
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
/// use sqs_claim::ErrorKind;
/// use sqs_claim::idempotency::HttpAnswers;
///
/// // Answer a missing Idempotency-Key with 428 Precondition Required instead.
/// let answers = HttpAnswers::new().with_status(ErrorKind::MissingKey, 428);
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

    /// Answers refusals of `kind` with `status`. The layer refuses with three kinds
    /// ([`Refusal::kind`]); for any other `kind` this changes nothing.
    pub fn with_status(mut self, kind: ErrorKind, status: u16) -> Self {
        match kind {
            ErrorKind::InProgress => self.in_progress = status,
            ErrorKind::PayloadMismatch => self.payload_mismatch = status,
            ErrorKind::MissingKey => self.missing_key = status,
            _ => {}
        }
        self
    }

    /// The status refusals of `kind` get.
    pub(crate) fn status(&self, kind: ErrorKind) -> u16 {
        match kind {
            ErrorKind::InProgress => self.in_progress,
            ErrorKind::PayloadMismatch => self.payload_mismatch,
            ErrorKind::MissingKey => self.missing_key,
            // Not a refusal the layer makes (`Refusal::new` is the crate's): a server error.
            _ => 500,
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
