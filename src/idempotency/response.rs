//! What the layer answers: the handler's response as JSON text, the same bytes for the first
//! caller and every duplicate; and how a handler hands effects to the completion.

use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::store::Effects;
use crate::{Error, ErrorKind};

/// The layer's answer: a JSON text, serialised exactly as it is (byte for byte).
///
/// The handler's response is serialised once, to the text the store keeps; the first caller
/// gets that text and every duplicate gets it back from the store, so both see the same bytes
/// (an object's member order, a float's digits, whitespace), whatever the response type's
/// `Serialize` does. Its `Serialize` writes the text as is (through `serde_json`, which is what
/// `lambda_runtime` answers with).
///
/// `Debug` prints the length and whether it is a replay, never the text: a response may carry
/// personal or payment data.
///
/// ```
/// use sqs_claim::idempotency::IdempotentResponse;
///
/// let response = IdempotentResponse::new(&serde_json::json!({"statusCode": 201})).unwrap();
/// assert_eq!(response.json(), r#"{"statusCode":201}"#);
/// assert!(!response.is_replay());
/// let value: serde_json::Value = response.parse().unwrap();
/// assert_eq!(value["statusCode"], 201);
/// ```
#[derive(Clone)]
pub struct IdempotentResponse {
    raw: Box<RawValue>,
    replay: bool,
}

impl IdempotentResponse {
    /// The JSON text `response` serialises to (not a replay). For answers of your own
    /// ([`Answers`](super::Answers)).
    pub fn new<R: Serialize + ?Sized>(response: &R) -> Result<Self, Error> {
        let text = serde_json::to_string(response).map_err(|e| {
            Error::with_source(
                ErrorKind::Other,
                "the response cannot be serialised as JSON",
                e,
            )
        })?;
        Self::from_text(text, false)
    }

    /// A response from JSON text, checked to be one JSON value; `replay` says whether it came
    /// from the store.
    pub(crate) fn from_text(text: String, replay: bool) -> Result<Self, Error> {
        let raw = RawValue::from_string(text).map_err(|e| {
            Error::with_source(
                if replay {
                    ErrorKind::NotReplayable
                } else {
                    ErrorKind::Other
                },
                format!(
                    "the {} response is not one JSON value (line {} column {})",
                    if replay { "stored" } else { "serialised" },
                    e.line(),
                    e.column()
                ),
                e,
            )
        })?;
        Ok(IdempotentResponse { raw, replay })
    }

    /// The response's JSON text, exactly as answered and stored.
    pub fn json(&self) -> &str {
        self.raw.get()
    }

    /// The response decoded as `R` (the handler's response type, say).
    pub fn parse<R: DeserializeOwned>(&self) -> Result<R, Error> {
        serde_json::from_str(self.raw.get()).map_err(|e| {
            Error::new(
                ErrorKind::BadBody,
                format!(
                    "the response does not decode as the type asked for (line {} column {})",
                    e.line(),
                    e.column()
                ),
            )
        })
    }

    /// Whether this is a stored response replayed for a duplicate (`false`: the handler ran
    /// for this call, or the layer answered by itself).
    pub fn is_replay(&self) -> bool {
        self.replay
    }
}

impl std::fmt::Debug for IdempotentResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IdempotentResponse({} bytes{})",
            self.raw.get().len(),
            if self.replay { ", replay" } else { "" }
        )
    }
}

impl Serialize for IdempotentResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

/// What a handler under the layer returns: a response to store and answer, and the effects to
/// commit atomically with the completion.
///
/// Any `Serialize` type is a response without effects; [`WithEffects`] adds effects.
pub trait HandlerResponse<E> {
    /// The part that is serialised, stored and answered.
    type Body: Serialize;
    /// The response and the effects.
    fn into_parts(self) -> (Self::Body, Effects<E>);
}

impl<R: Serialize, E> HandlerResponse<E> for R {
    type Body = R;

    fn into_parts(self) -> (R, Effects<E>) {
        (self, Effects::none())
    }
}

/// A response together with effects the store commits in the same atomic step as the
/// completion that stores the response (a DynamoDB `TransactWriteItem`, an SQL statement): the
/// effects are applied exactly once, with the record that makes every duplicate a replay.
///
/// ```
/// use sqs_claim::Effects;
/// use sqs_claim::idempotency::WithEffects;
/// use sqs_claim::store::MemoryEffect;
///
/// let answer = WithEffects::new(
///     serde_json::json!({"statusCode": 200}),
///     Effects::one(MemoryEffect::new(|| { /* credit the account */ })),
/// );
/// # let _ = answer;
/// ```
#[derive(Debug)]
pub struct WithEffects<R, E> {
    /// The response.
    pub response: R,
    /// The effects.
    pub effects: Effects<E>,
}

impl<R, E> WithEffects<R, E> {
    /// `response`, committed with `effects`.
    pub fn new(response: R, effects: impl Into<Effects<E>>) -> Self {
        WithEffects {
            response,
            effects: effects.into(),
        }
    }
}

impl<R: Serialize, E> HandlerResponse<E> for WithEffects<R, E> {
    type Body = R;

    fn into_parts(self) -> (R, Effects<E>) {
        (self.response, self.effects)
    }
}
