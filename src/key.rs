use aws_lambda_events::sqs::SqsMessage;
use sha2::{Digest, Sha256};

use crate::Envelope;
use crate::{Error, ErrorKind};

/// Where the idempotency key of a message comes from.
///
/// The key decides what counts as "the same message". The default, the SQS message id, catches
/// redeliveries of one message (a crash, a lost acknowledgement, a timeout). A key from the body
/// (say `/order_id`) also catches a producer that sent the same business event twice under two
/// message ids. Every key is prefixed with a namespace (`namespace#key`), so two consumers that
/// share one table never see each other's records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KeySource {
    /// The SQS `messageId` (the default). Catches redeliveries; a producer that sends the same
    /// event twice produces two message ids and is not caught.
    #[default]
    MessageId,
    /// A JSON pointer (RFC 6901, e.g. `/order_id` or `/payment/id`) into the JSON body. A string
    /// is used as is; a number or boolean as its JSON text; an object or array as its JSON text.
    /// A missing or `null` value, or a body that is not JSON, means the key is missing.
    JsonPointer(String),
    /// The string value of a message attribute (`messageAttributes.NAME.stringValue`).
    MessageAttribute(String),
    /// The SHA-256 of the raw body: identical bodies are the same message.
    BodySha256,
    /// The FIFO `MessageDeduplicationId` attribute (explicit or content-based).
    DeduplicationId,
    /// The envelope's own id ([`Envelope`]): SNS's `MessageId`, EventBridge's `id`. Catches
    /// the envelope's redeliveries (SNS resends a notification under its first `MessageId`,
    /// and each resend is a new SQS message id), not a producer that publishes twice. Needs an
    /// envelope that has an id (`Envelope::has_id`); without one every message lacks its key.
    EnvelopeId,
}

/// A key source from its textual form (`"json:/order_id".parse::<KeySource>()`).
impl std::str::FromStr for KeySource {
    type Err = Error;

    /// Parses the textual form used by the CLI and the reference consumer's environment:
    /// `message-id`, `json:/pointer`, `attribute:NAME`, `body-sha256`, `dedup-id`,
    /// `envelope-id`. A pointer may descend into a string holding JSON with the token `~json`
    /// (`json:/Message/~json/order_id`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(ptr) = s.strip_prefix("json:") {
            if ptr.is_empty() {
                // RFC 6901's "" is the whole document: the body itself would become the key,
                // and keys are logged and stored, bodies never are.
                return Err(Error::new(
                    ErrorKind::Config,
                    "json: needs a pointer (e.g. json:/order_id); to key on the whole body, use \
                     body-sha256 (the body itself would be logged and stored as the key)",
                ));
            }
            if !ptr.starts_with('/') {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("JSON pointer {ptr:?} must start with '/' (e.g. json:/order_id)"),
                ));
            }
            return Ok(KeySource::JsonPointer(ptr.to_owned()));
        }
        if let Some(name) = s.strip_prefix("attribute:") {
            if name.is_empty() {
                return Err(Error::new(ErrorKind::Config, "attribute: needs a name"));
            }
            return Ok(KeySource::MessageAttribute(name.to_owned()));
        }
        match s {
            "message-id" | "message_id" => Ok(KeySource::MessageId),
            "body-sha256" | "body_sha256" => Ok(KeySource::BodySha256),
            "dedup-id" | "deduplication-id" => Ok(KeySource::DeduplicationId),
            "envelope-id" => Ok(KeySource::EnvelopeId),
            other => Err(Error::new(
                ErrorKind::Config,
                format!(
                    "unknown key source {other:?}: expected message-id, json:/pointer, \
                     attribute:NAME, body-sha256, dedup-id or envelope-id"
                ),
            )),
        }
    }
}

impl KeySource {
    /// Extracts the raw (un-namespaced) key of `msg` whose body is wrapped in `envelope`
    /// ([`Envelope::None`] for a bare body), as the processor does before claiming: a pointer
    /// and the body's hash read the payload, [`KeySource::EnvelopeId`] the envelope's id.
    /// `Ok(None)` means the message does not carry it; `Err` explains why it could not be
    /// derived, naming the key source and where a body failed to parse, never the body. A body
    /// that is not that envelope is an `Err` (kind [`ErrorKind::MissingKey`]) for the sources
    /// that read it. The same message always gives the same answer.
    pub fn extract(&self, msg: &SqsMessage, envelope: Envelope) -> Result<Option<String>, Error> {
        if !self.reads_body() {
            return self.extract_opened(msg, "", None);
        }
        let opened = envelope
            .open(msg.body.as_deref().unwrap_or(""))
            .map_err(|e| self.unopened(&e))?;
        self.extract_opened(msg, opened.payload(), opened.id())
    }

    /// Whether the key is read from the body (the payload, or the envelope around it).
    pub(crate) fn reads_body(&self) -> bool {
        matches!(
            self,
            KeySource::JsonPointer(_) | KeySource::BodySha256 | KeySource::EnvelopeId
        )
    }

    /// The error of a key that cannot be read because the body did not open.
    pub(crate) fn unopened(&self, e: &Error) -> Error {
        Error::new(
            ErrorKind::MissingKey,
            format!("cannot read key {self}: {}", e.message()),
        )
    }

    /// The key of `msg`, whose body's payload is `payload` and whose envelope's id is
    /// `envelope_id`.
    pub(crate) fn extract_opened(
        &self,
        msg: &SqsMessage,
        payload: &str,
        envelope_id: Option<&str>,
    ) -> Result<Option<String>, Error> {
        Ok(match self {
            KeySource::MessageId => msg.message_id.clone().filter(|s| !s.is_empty()),
            KeySource::JsonPointer(ptr) => {
                match crate::pointer::find(payload, ptr).map_err(|e| {
                    Error::new(
                        ErrorKind::MissingKey,
                        format!(
                            "cannot read key {ptr:?}: body is not JSON (error at line {} column {})",
                            e.line(),
                            e.column()
                        ),
                    )
                })? {
                    crate::pointer::Found::Nothing => None,
                    crate::pointer::Found::Value(v) => Some(v),
                }
            }
            KeySource::MessageAttribute(name) => msg
                .message_attributes
                .get(name)
                .and_then(|a| a.string_value.clone())
                .filter(|s| !s.is_empty()),
            KeySource::BodySha256 => Some(sha256_hex(payload.as_bytes())),
            KeySource::DeduplicationId => msg
                .attributes
                .get("MessageDeduplicationId")
                .cloned()
                .filter(|s| !s.is_empty()),
            KeySource::EnvelopeId => envelope_id.map(str::to_owned),
        })
    }
}

/// A short description for errors and logs (`the message id`, `JSON pointer "/order_id"`, ...).
impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::MessageId => f.write_str("the message id"),
            KeySource::JsonPointer(p) => write!(f, "JSON pointer {p:?}"),
            KeySource::MessageAttribute(n) => write!(f, "message attribute {n:?}"),
            KeySource::BodySha256 => f.write_str("the body's SHA-256"),
            KeySource::DeduplicationId => f.write_str("the MessageDeduplicationId"),
            KeySource::EnvelopeId => f.write_str("the envelope's id"),
        }
    }
}

/// Lowercase hex SHA-256, as the processor computes [`KeySource::BodySha256`] keys and payload
/// fingerprints.
///
/// Public so an app can compute, outside the processor, the key or fingerprint the processor
/// will use (the payments example also hashes an account id into a message group id with it).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_lower(&Sha256::digest(bytes))
}

/// Lowercase hex, as `hex::encode` writes it, from a table: one push per digit, no
/// formatting machinery, one allocation of the right size (this runs for every message).
fn hex_lower(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(body: &str) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some("m-1".into());
        m.body = Some(body.into());
        m
    }

    #[test]
    fn hex_matches_the_hex_crate() {
        for input in [
            &b""[..],
            b"a",
            b"\x00\xff\x10\x0f",
            b"{\"order_id\":\"o-1\"}",
        ] {
            assert_eq!(hex_lower(input), hex::encode(input));
            assert_eq!(sha256_hex(input), hex::encode(Sha256::digest(input)));
        }
    }

    #[test]
    fn json_pointer_values() {
        let k = KeySource::JsonPointer("/order_id".into());
        assert_eq!(
            k.extract(&msg(r#"{"order_id":"o-1"}"#), Envelope::None)
                .unwrap()
                .as_deref(),
            Some("o-1")
        );
        assert_eq!(
            k.extract(&msg(r#"{"order_id":42}"#), Envelope::None)
                .unwrap()
                .as_deref(),
            Some("42")
        );
        assert_eq!(
            k.extract(&msg(r#"{"order_id":null}"#), Envelope::None)
                .unwrap(),
            None
        );
        assert_eq!(
            k.extract(&msg(r#"{"other":1}"#), Envelope::None).unwrap(),
            None
        );
        let err = k
            .extract(&msg("not json {secret}"), Envelope::None)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingKey);
        assert!(
            !err.to_string().contains("secret"),
            "body leaked into error: {err}"
        );
    }

    #[test]
    fn parse_forms() {
        assert_eq!(
            "message-id".parse::<KeySource>().unwrap(),
            KeySource::MessageId
        );
        assert_eq!(
            "json:/a/b".parse::<KeySource>().unwrap(),
            KeySource::JsonPointer("/a/b".into())
        );
        assert_eq!(
            "attribute:Idem".parse::<KeySource>().unwrap(),
            KeySource::MessageAttribute("Idem".into())
        );
        assert!("json:order_id".parse::<KeySource>().is_err());
        assert!("bogus".parse::<KeySource>().is_err());
    }
}
