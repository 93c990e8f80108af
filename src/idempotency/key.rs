//! Where a request's idempotency key comes from, what its fingerprint covers, and how both are
//! written into the store.
//!
//! Three pieces, each a small trait:
//!
//! * [`Payload`]: what the layer reads from an event type: the **request** (the JSON a key
//!   pointer reads and the fingerprint hashes: an API Gateway event's body, any other event's
//!   whole payload), its headers, and the answers that suit it. Implemented for the API Gateway
//!   events (feature `apigw`) and `serde_json::Value`; for your own event type it is one line.
//! * [`KeyExtractor`]: the key's datum from one event: [`header`], [`json_pointer`],
//!   [`payload_hash`], or your own ([`from_fn`]).
//! * [`KeyFormat`](crate::claim::KeyFormat) (the claim's, shared with the SQS processor): how
//!   the datum becomes the stored key and the request its fingerprint:
//!   [`NativeFormat`](crate::claim::NativeFormat) (the default), or another format for records
//!   shared with another library.

use serde_json::Value;

use super::{KeyExtractor, Payload};
use crate::claim::text;
use crate::key::sha256_hex;
use crate::{Error, ErrorKind};

/// The value of header `name`, compared case-insensitively (an HTTP event's
/// `Idempotency-Key`): see [`header`].
#[derive(Debug, Clone)]
pub struct Header {
    name: String,
}

/// The key is the value of header `name` (case-insensitive), trimmed; a missing or blank header
/// means the key is missing. For events whose [`Payload`] has headers: the API Gateway events
/// (feature `apigw`).
pub fn header(name: impl Into<String>) -> Header {
    Header { name: name.into() }
}

impl<T: Payload> KeyExtractor<T> for Header {
    fn key(&self, event: &T, _request: &Value) -> Result<Option<Value>, Error> {
        Ok(event
            .header(&self.name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| Value::String(v.to_owned())))
    }

    fn describe(&self) -> String {
        format!("the {} header", self.name)
    }
}

/// A JSON pointer into the request: see [`json_pointer`].
#[derive(Debug, Clone)]
pub struct JsonPointer {
    pointer: String,
}

/// The key is the value at JSON `pointer` (RFC 6901, e.g. `/id` or `/data/object/id`) in the
/// request: an API Gateway event's JSON body, any other event's payload. A missing or `null`
/// value or an empty string means the key is missing, as does a body that is not JSON.
///
/// The pointer must start with `/`: the empty pointer (the whole request) would store the
/// request itself as the key; key on [`payload_hash`] instead.
pub fn json_pointer(pointer: impl Into<String>) -> JsonPointer {
    JsonPointer {
        pointer: pointer.into(),
    }
}

impl<T: Payload> KeyExtractor<T> for JsonPointer {
    fn key(&self, _event: &T, request: &Value) -> Result<Option<Value>, Error> {
        if !self.pointer.starts_with('/') {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "JSON pointer {:?} must start with '/' (e.g. /id); to key on the whole \
                     request, use key::payload_hash()",
                    self.pointer
                ),
            ));
        }
        Ok(match request.pointer(&self.pointer) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(v) => Some(v.clone()),
        })
    }

    fn describe(&self) -> String {
        format!("JSON pointer {:?}", self.pointer)
    }
}

/// The SHA-256 of the request: see [`payload_hash`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PayloadHash;

/// The key is the SHA-256 (lowercase hex) of the request, as [`NativeFormat`](crate::claim::NativeFormat) fingerprints it:
/// identical requests are the same request. For events that carry no id of their own.
pub fn payload_hash() -> PayloadHash {
    PayloadHash
}

impl<T: Payload> KeyExtractor<T> for PayloadHash {
    fn key(&self, _event: &T, request: &Value) -> Result<Option<Value>, Error> {
        Ok(Some(Value::String(sha256_hex(text(request).as_bytes()))))
    }

    fn describe(&self) -> String {
        "the request's SHA-256".into()
    }
}

/// A key from a function of the event: see [`from_fn`].
pub struct FromFn<F> {
    f: F,
    what: String,
}

impl<F> std::fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FromFn").field("what", &self.what).finish()
    }
}

/// The key is what `f` returns for the event (`None`: missing); `what` says where it comes
/// from, for errors and answers.
///
/// ```
/// use sqs_claim::idempotency::key;
///
/// let by_user = key::from_fn("the user id", |event: &serde_json::Value| {
///     event.get("user").cloned()
/// });
/// # let _ = by_user;
/// ```
pub fn from_fn<T, F>(what: impl Into<String>, f: F) -> FromFn<F>
where
    F: Fn(&T) -> Option<Value> + Send + Sync + 'static,
{
    FromFn {
        f,
        what: what.into(),
    }
}

impl<T, F> KeyExtractor<T> for FromFn<F>
where
    T: Payload,
    F: Fn(&T) -> Option<Value> + Send + Sync + 'static,
{
    fn key(&self, event: &T, _request: &Value) -> Result<Option<Value>, Error> {
        Ok((self.f)(event).filter(|v| !v.is_null() && v.as_str() != Some("")))
    }

    fn describe(&self) -> String {
        self.what.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointer_misses_are_missing_keys() {
        let p = json_pointer("/id");
        let req = json!({"id": "", "other": 1});
        assert_eq!(KeyExtractor::<Value>::key(&p, &req, &req).unwrap(), None);
        let req = json!({"id": null});
        assert_eq!(KeyExtractor::<Value>::key(&p, &req, &req).unwrap(), None);
        let req = json!({"id": 7});
        assert_eq!(
            KeyExtractor::<Value>::key(&p, &req, &req).unwrap(),
            Some(json!(7))
        );
        let bad = json_pointer("id");
        let err = KeyExtractor::<Value>::key(&bad, &req, &req).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
    }
}
