//! What the idempotency layer reads from an event type ([`Payload`]) and where a key's datum
//! comes from ([`KeyExtractor`]): the two traits, named at `idempotency::` (the extractors are
//! in [`key`](super::key)).

use serde::Serialize;
use serde_json::Value;

use super::answers::{Answers, ErrorAnswers};
use crate::{Error, ErrorKind};

/// What the idempotency layer reads from an event type.
///
/// Every method has a default that suits an event carried whole (an EventBridge detail, a
/// direct invocation's JSON): the request is the whole payload, there are no headers, and a
/// refused request is answered with an error. So for your own event type:
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Transfer {
///     transfer_id: String,
///     amount_cents: i64,
/// }
///
/// impl sqs_claim::idempotency::Payload for Transfer {}
/// ```
///
/// The API Gateway events (feature `apigw`) read the request from the body, the headers from
/// the event's headers, and answer with HTTP responses (409, 422, 400).
pub trait Payload: Serialize {
    /// The request: what [`json_pointer`](super::key::json_pointer) reads and the fingerprint covers. Default: the whole
    /// payload, as JSON.
    fn request(&self) -> Result<Value, Error> {
        serde_json::to_value(self).map_err(|e| {
            Error::with_source(
                ErrorKind::BadBody,
                "the event payload cannot be turned into JSON",
                e,
            )
        })
    }

    /// Where the request was sent, for events that name it: for HTTP events the method, the
    /// path and the query. Under [`NativeFormat`](crate::claim::NativeFormat) it is part of the fingerprint, so a key
    /// reused on another route (`POST /accounts/A/withdraw`, then `/accounts/B/withdraw`, same
    /// body) is "another request" (422), not a duplicate answered with the first route's
    /// response. Default: none (the request is the whole payload).
    fn route(&self) -> Option<Value> {
        None
    }

    /// The value of header `name` (compared case-insensitively), for events that have headers.
    /// Default: none.
    fn header(&self, name: &str) -> Option<&str> {
        let _ = name;
        None
    }

    /// How a request refused by the layer is answered unless the builder says otherwise
    /// ([`IdempotencyBuilder::answers`](super::IdempotencyBuilder::answers)). Default: [`ErrorAnswers`], an
    /// error with the refusal's kind.
    fn default_answers() -> &'static dyn Answers {
        &ErrorAnswers
    }
}

impl Payload for Value {
    fn request(&self) -> Result<Value, Error> {
        Ok(self.clone())
    }
}

/// Where the idempotency key of an event comes from.
///
/// `key` returns the key's datum (`Ok(None)`: the event does not carry it); the
/// [`KeyFormat`](crate::claim::KeyFormat) turns it into the stored key. `request` is the JSON the layer computed once
/// for the event ([`Payload::request`]), so an extractor that reads the body does not parse it
/// again.
///
/// ```
/// use serde_json::{Value, json};
/// use sqs_claim::Error;
/// use sqs_claim::idempotency::{KeyExtractor, Payload};
///
/// /// The customer and their order number together.
/// struct CustomerOrder;
///
/// impl<T: Payload> KeyExtractor<T> for CustomerOrder {
///     fn key(&self, _event: &T, request: &Value) -> Result<Option<Value>, Error> {
///         Ok(match (request.get("customer"), request.get("order")) {
///             (Some(c), Some(o)) => Some(json!([c, o])),
///             _ => None,
///         })
///     }
///
///     fn describe(&self) -> String {
///         "the customer and order number".into()
///     }
/// }
/// ```
pub trait KeyExtractor<T: Payload>: Send + Sync + 'static {
    /// The key's datum for `event`, whose request is `request`; `Ok(None)` if it carries none
    /// (a missing or `null` value, an empty string). An `Err` must not quote the payload.
    fn key(&self, event: &T, request: &Value) -> Result<Option<Value>, Error>;

    /// Where the key comes from, for errors and answers ("the Idempotency-Key header").
    fn describe(&self) -> String;
}
