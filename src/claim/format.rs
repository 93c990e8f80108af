//! The key format: how a key becomes the key a store keeps, and a payload its fingerprint
//! ([`KeyFormat`], [`NativeFormat`]).

use std::borrow::Cow;
use std::fmt;

use aws_lambda_events::sqs::SqsMessage;
use serde_json::Value;

use crate::Error;
use crate::key::{KeySource, sha256_hex};

/// How a key becomes the key a store keeps, and a payload its fingerprint: for the idempotency
/// layer (a key's datum, a request) and for the SQS processor (a record) alike.
///
/// [`NativeFormat`] is the default. A format that writes another library's keys lets two
/// implementations share one table (Powertools for AWS Lambda writes
/// `<function>.<handler>#<md5 of the datum>`, `PowertoolsFormat`, feature `powertools`): both
/// then see each other's records. Set it with
/// [`IdempotencyBuilder::key_format`](crate::idempotency::IdempotencyBuilder::key_format) or
/// [`ProcessorBuilder::key_format`](crate::ProcessorBuilder::key_format).
///
/// Only [`stored_key`](Self::stored_key) and [`fingerprint`](Self::fingerprint) must be
/// written; the record methods default to the same key and fingerprint of the record's raw key
/// and payload.
///
/// The record methods are given the record's **payload**: its body, or, with an
/// [`Envelope`](crate::Envelope) on the processor, what the envelope wraps (the SNS
/// `Message`, the EventBridge `detail`), opened once by the processor. A format reads keys and
/// fingerprints from it as it would from a body, so every format keys the same payload the same
/// way whether it came wrapped or not.
pub trait KeyFormat: fmt::Debug + Send + Sync + 'static {
    /// The stored key for `datum` under `namespace`.
    fn stored_key(&self, namespace: &str, datum: &Value) -> String;
    /// The fingerprint of `request`, stored with the claim to tell "same key, other request".
    fn fingerprint(&self, request: &Value) -> String;

    /// The fingerprint of `request` sent to `route` ([`Payload::route`](crate::idempotency::Payload::route)), the one the layer
    /// stores. Default: [`fingerprint`](Self::fingerprint) of `{"route": route, "request":
    /// request}` when there is a route, of `request` alone when there is none. A format that
    /// must match another tool's hashes (Powertools hashes the body alone) overrides it.
    fn route_fingerprint(&self, route: Option<&Value>, request: &Value) -> String {
        match route {
            Some(route) => self.fingerprint(&serde_json::json!({
                "route": route,
                "request": request,
            })),
            None => self.fingerprint(request),
        }
    }

    /// The stored key of an SQS record whose key comes from `source` under `namespace`, `None`
    /// when the record carries none; a key read from the body (a JSON pointer, the body's hash)
    /// is read from `payload` (see the trait's documentation). Default:
    /// [`stored_key`](Self::stored_key) of the raw key [`KeySource::extract`] would read from
    /// a body that is `payload`, as a JSON string. An `Err` must not quote the payload.
    fn record_key(
        &self,
        namespace: &str,
        source: &KeySource,
        record: &SqsMessage,
        payload: &str,
    ) -> Result<Option<String>, Error> {
        Ok(source
            .extract_opened(record, payload, None)?
            .map(|raw| self.stored_key(namespace, &Value::String(raw))))
    }

    /// The fingerprint of an SQS record whose payload is `payload`, `None` for none. Default:
    /// [`fingerprint`](Self::fingerprint) of the payload, as a JSON string.
    fn record_fingerprint(&self, record: &SqsMessage, payload: &str) -> Option<String> {
        let _ = record;
        Some(self.fingerprint(&Value::String(payload.to_owned())))
    }
}

/// The keys and fingerprints of this crate: the key is `namespace#<datum>`, a string datum as
/// is and any other as its JSON text (object members sorted), as the SQS processor writes its
/// keys; the fingerprint is the SHA-256 (lowercase hex) of the request, a string as is (an HTTP
/// body that is not JSON: its bytes) and any other as its JSON text.
///
/// ```
/// use serde_json::json;
/// use sqs_claim::claim::{KeyFormat, NativeFormat};
///
/// assert_eq!(NativeFormat.stored_key("payments", &json!("k-1")), "payments#k-1");
/// assert_eq!(NativeFormat.stored_key("payments", &json!(42)), "payments#42");
/// assert_eq!(
///     NativeFormat.fingerprint(&json!({"b": 1, "a": 2})),
///     NativeFormat.fingerprint(&json!({"a": 2, "b": 1})),
/// );
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NativeFormat;

impl KeyFormat for NativeFormat {
    fn stored_key(&self, namespace: &str, datum: &Value) -> String {
        namespaced(namespace, &text(datum))
    }

    fn fingerprint(&self, request: &Value) -> String {
        sha256_hex(text(request).as_bytes())
    }

    // The same as the defaults, without turning every message's key and body into a `Value`
    // first (this runs for every message of every batch).
    fn record_key(
        &self,
        namespace: &str,
        source: &KeySource,
        record: &SqsMessage,
        payload: &str,
    ) -> Result<Option<String>, Error> {
        Ok(source
            .extract_opened(record, payload, None)?
            .map(|raw| namespaced(namespace, &raw)))
    }

    fn record_fingerprint(&self, _record: &SqsMessage, payload: &str) -> Option<String> {
        Some(sha256_hex(payload.as_bytes()))
    }
}

/// The full key: `namespace#raw`.
fn namespaced(namespace: &str, raw: &str) -> String {
    format!("{namespace}#{raw}")
}

/// A string as is, anything else as its canonical JSON text.
pub(crate) fn text(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(s) => Cow::Borrowed(s),
        other => Cow::Owned(canonical_json(other)),
    }
}

/// Compact JSON text with every object's members sorted by name: the same for the same value
/// whatever order its members arrived in, even if `serde_json`'s `preserve_order` feature is on
/// somewhere in the dependency graph (then `Value`'s own text follows insertion order, and a
/// payload with a `HashMap` would fingerprint differently on every invocation).
fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                members.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (name, member)) in members.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(name.clone()).to_string());
                    out.push(':');
                    write(member, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_members_and_matches_value_text() {
        let v = json!({"b": [1, {"z": null, "a": "x\"y"}], "a": 1.5});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":1.5,"b":[1,{"a":"x\"y","z":null}]}"#
        );
        // Without preserve_order (this crate's own build), Value's text is already sorted.
        assert_eq!(canonical_json(&v), v.to_string());
    }

    #[test]
    fn native_keys_are_the_processors() {
        assert_eq!(NativeFormat.stored_key("ns", &json!("a#b")), "ns#a#b");
        assert_eq!(
            NativeFormat.stored_key("ns", &json!({"y": 1, "x": 2})),
            r#"ns#{"x":2,"y":1}"#
        );
        assert_eq!(
            NativeFormat.fingerprint(&json!("raw body")),
            sha256_hex(b"raw body")
        );
    }

    #[test]
    fn native_record_keys_are_the_defaults() {
        /// The defaults, for comparison.
        #[derive(Debug)]
        struct Defaults;
        impl KeyFormat for Defaults {
            fn stored_key(&self, namespace: &str, datum: &Value) -> String {
                NativeFormat.stored_key(namespace, datum)
            }
            fn fingerprint(&self, request: &Value) -> String {
                NativeFormat.fingerprint(request)
            }
        }
        let mut record = SqsMessage::default();
        record.message_id = Some("m-1".into());
        let body = r#"{"order_id":"o-1"}"#;
        record.body = Some(body.into());
        for source in [
            KeySource::MessageId,
            KeySource::BodySha256,
            KeySource::JsonPointer("/order_id".into()),
        ] {
            let native = NativeFormat
                .record_key("ns", &source, &record, body)
                .unwrap();
            assert_eq!(
                native,
                Defaults.record_key("ns", &source, &record, body).unwrap()
            );
            // The key of a record as it is: what `KeySource::extract` reads from its body.
            assert_eq!(
                native,
                source
                    .extract(&record, crate::Envelope::None)
                    .unwrap()
                    .map(|raw| format!("ns#{raw}"))
            );
        }
        assert_eq!(
            NativeFormat
                .record_key("ns", &KeySource::MessageId, &record, body)
                .unwrap()
                .as_deref(),
            Some("ns#m-1")
        );
        assert_eq!(
            NativeFormat.record_fingerprint(&record, body),
            Defaults.record_fingerprint(&record, body)
        );
        assert_eq!(
            NativeFormat.record_fingerprint(&record, body),
            Some(sha256_hex(body.as_bytes()))
        );
    }
}
