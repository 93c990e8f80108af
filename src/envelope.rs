//! Envelopes: what AWS wraps around a payload before it reaches the queue.
//!
//! Most queues are not fed by hand-written JSON. An SNS topic delivering to SQS (raw message
//! delivery off, the default) puts its own JSON envelope in the body and the published payload,
//! as a JSON *string*, in its `Message`; an EventBridge rule puts the whole event in the body and
//! the payload in `detail`; S3 puts an event notification in the body, with the object's record
//! in `Records[0]`. An [`Envelope`] set on the processor
//! ([`ProcessorBuilder::envelope`](crate::ProcessorBuilder::envelope)) opens each body once,
//! before anything else reads it:
//!
//! * the key ([`KeySource::JsonPointer`](crate::KeySource::JsonPointer),
//!   [`KeySource::BodySha256`](crate::KeySource::BodySha256)) and the payload fingerprint are
//!   read from the payload, so a producer that publishes one order twice (two SNS notifications,
//!   two envelopes with their own ids, timestamps and signatures) is caught by the order's key
//!   and its payload compares equal;
//! * [`KeySource::EnvelopeId`](crate::KeySource::EnvelopeId) keys on the envelope's own id (SNS
//!   `MessageId`, EventBridge `id`), which catches the envelope's own redeliveries (SNS resends
//!   a notification under the same `MessageId`) whatever the payload;
//! * the handler reads the payload with [`Message::payload`](crate::Message::payload) and
//!   [`Message::json`](crate::Message::json); [`Message::body`](crate::Message::body) stays the
//!   raw body.
//!
//! A body that is not the envelope configured (not JSON, an SNS `SubscriptionConfirmation`, an
//! `s3:TestEvent`) fails that message alone: as a message without a key when the key comes
//! from the payload or the envelope ([`MissingKey`](crate::MissingKey) decides), else as a
//! handler error when the handler asks for the payload. docs/events.md shows each shape.
//!
//! Without an envelope, the pointer token `~json` reads through a string holding JSON in any
//! body: `json:/Message/~json/order_id` is the SNS payload's `order_id`.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::{Error, ErrorKind};

/// The envelope around each message's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Envelope {
    /// The body is the payload (the default).
    #[default]
    None,
    /// SNS → SQS without raw message delivery: the body is SNS's notification (`Type`
    /// `Notification`), the payload the text of its `Message` string, the envelope id its
    /// `MessageId`. Any other `Type` (a `SubscriptionConfirmation`) does not open.
    Sns,
    /// EventBridge → SQS: the body is the event, the payload the JSON text of its `detail`
    /// (as EventBridge wrote it), the envelope id its `id`.
    EventBridge,
    /// S3 event notification → SQS: the body is `{"Records": [...]}`, the payload the JSON
    /// text of its one record (S3 sends one record per message; a body with none, such as the
    /// `s3:TestEvent` S3 sends when notifications are set up, or with several, does not open,
    /// so no record is silently skipped). It has no envelope id: key S3 records with a pointer
    /// into the record (`json:/s3/object/key` with `/s3/object/sequencer` telling versions
    /// apart) or `body-sha256` (the record's hash: a notification S3 sends twice is one key).
    S3,
}

impl Envelope {
    /// Every envelope (a slice: more may come).
    pub(crate) const ALL: &'static [Envelope] = &[
        Envelope::None,
        Envelope::Sns,
        Envelope::EventBridge,
        Envelope::S3,
    ];

    /// The textual name (`none`, `sns`, `eventbridge`, `s3`), as `Envelope::parse` reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Envelope::None => "none",
            Envelope::Sns => "sns",
            Envelope::EventBridge => "eventbridge",
            Envelope::S3 => "s3",
        }
    }

    /// Parses the textual form of `SQS_CLAIM_ENVELOPE`: `none`, `sns`, `eventbridge`, `s3`.
    pub(crate) fn parse(s: &str) -> Result<Envelope, Error> {
        let s = s.trim();
        Envelope::ALL
            .iter()
            .copied()
            .find(|e| e.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Config,
                    format!("unknown envelope {s:?}: expected none, sns, eventbridge or s3"),
                )
            })
    }

    /// Whether the envelope carries an id of its own ([`KeySource::EnvelopeId`](crate::KeySource::EnvelopeId)).
    #[cfg_attr(not(feature = "settings"), allow(dead_code))] // read by the settings
    pub(crate) fn has_id(self) -> bool {
        matches!(self, Envelope::Sns | Envelope::EventBridge)
    }

    /// Opens `body`: the payload and the envelope's id. The error (kind
    /// [`ErrorKind::BadBody`]) says what is wrong with the body's shape and where, never what
    /// the body holds.
    pub(crate) fn open<'b>(self, body: &'b str) -> Result<Opened<'b>, Error> {
        match self {
            Envelope::None => Ok(Opened {
                payload: Cow::Borrowed(body),
                id: None,
            }),
            Envelope::Sns => {
                let env: SnsEnvelope<'b> = serde_json::from_str(body).map_err(|e| self.not(&e))?;
                let kind = self.string(env.kind, "Type")?;
                match kind.as_deref() {
                    Some("Notification") => {}
                    Some(other) => {
                        return Err(self.refused(format!(
                            "an SNS {} (Type), not a Notification",
                            printable(other)
                        )));
                    }
                    None => return Err(self.refused("it has no Type".into())),
                }
                let payload = self
                    .string(env.message, "Message")?
                    .ok_or_else(|| self.refused("it has no Message".into()))?;
                let id = self.string(env.message_id, "MessageId")?;
                Ok(Opened {
                    payload,
                    id: id.filter(|id| !id.is_empty()),
                })
            }
            Envelope::EventBridge => {
                let env: EventBridgeEvent<'b> =
                    serde_json::from_str(body).map_err(|e| self.not(&e))?;
                if self.string(env.detail_type, "detail-type")?.is_none() {
                    return Err(self.refused("it has no detail-type".into()));
                }
                let detail = env
                    .detail
                    .filter(|d| d.get() != "null")
                    .ok_or_else(|| self.refused("it has no detail".into()))?;
                let id = self.string(env.id, "id")?;
                Ok(Opened {
                    payload: Cow::Borrowed(detail.get()),
                    id: id.filter(|id| !id.is_empty()),
                })
            }
            Envelope::S3 => {
                let env: S3Notification<'b> =
                    serde_json::from_str(body).map_err(|e| self.not(&e))?;
                let event = self.string(env.event, "Event")?;
                match (env.records.as_deref(), event.as_deref()) {
                    (Some([record]), _) => Ok(Opened {
                        payload: Cow::Borrowed(record.get()),
                        id: None,
                    }),
                    (Some(records), _) => Err(self.refused(format!(
                        "it has {} records, and S3 sends one per message",
                        records.len()
                    ))),
                    (None, Some("s3:TestEvent")) => Err(self.refused(
                        "it is the s3:TestEvent S3 sends when notifications are set up, with no \
                         record"
                            .into(),
                    )),
                    (None, _) => Err(self.refused("it has no Records".into())),
                }
            }
        }
    }

    /// The text of the string field `name` (`None` if absent or `null`), borrowed unless it
    /// has escapes.
    fn string<'b>(
        self,
        raw: Option<&'b RawValue>,
        name: &str,
    ) -> Result<Option<Cow<'b, str>>, Error> {
        match raw {
            None => Ok(None),
            Some(raw) => crate::pointer::string_contents(raw.get())
                .map_err(|_| self.refused(format!("its {name} is not a string"))),
        }
    }

    fn not(self, e: &serde_json::Error) -> Error {
        let what = match e.classify() {
            serde_json::error::Category::Data => "of another shape",
            _ => "not JSON",
        };
        Error::new(
            ErrorKind::BadBody,
            format!(
                "body is not an {} envelope: {what} (line {}, column {})",
                self.as_str(),
                e.line(),
                e.column()
            ),
        )
    }

    fn refused(self, why: String) -> Error {
        Error::new(
            ErrorKind::BadBody,
            format!("body is not an {} envelope: {why}", self.as_str()),
        )
    }
}

/// A name from a body, for an error: short, and only if it looks like a name.
fn printable(s: &str) -> &str {
    if s.len() <= 40 && s.bytes().all(|b| b.is_ascii_alphanumeric()) {
        s
    } else {
        "unknown message type"
    }
}

impl fmt::Display for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Envelope {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Envelope::parse(s)
    }
}

/// An opened body: the payload and the envelope's id, borrowed from the body where they can
/// be (an SNS `Message` with escapes, which a JSON payload always has, is unescaped once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Opened<'b> {
    payload: Cow<'b, str>,
    id: Option<Cow<'b, str>>,
}

impl<'b> Opened<'b> {
    /// The payload's text: the body, SNS's `Message`, EventBridge's `detail`, S3's record.
    pub(crate) fn payload(&self) -> &str {
        &self.payload
    }

    /// The envelope's own id (SNS `MessageId`, EventBridge `id`), if it has one.
    pub(crate) fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The payload and the id, owned.
    pub(crate) fn into_owned(self) -> (String, Option<String>) {
        (self.payload.into_owned(), self.id.map(Cow::into_owned))
    }
}

// The envelopes' fields this module reads; every other field is skipped unread (still checked
// to be JSON).

#[derive(Deserialize)]
struct SnsEnvelope<'a> {
    #[serde(rename = "Type", borrow)]
    kind: Option<&'a RawValue>,
    #[serde(rename = "MessageId", borrow)]
    message_id: Option<&'a RawValue>,
    #[serde(rename = "Message", borrow)]
    message: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct EventBridgeEvent<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(rename = "detail-type", borrow)]
    detail_type: Option<&'a RawValue>,
    #[serde(borrow)]
    detail: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct S3Notification<'a> {
    #[serde(rename = "Records", borrow)]
    records: Option<Vec<&'a RawValue>>,
    #[serde(rename = "Event", borrow)]
    event: Option<&'a RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &e in Envelope::ALL {
            assert_eq!(Envelope::parse(e.as_str()).unwrap(), e);
            assert_eq!(e.to_string().parse::<Envelope>().unwrap(), e);
        }
        assert_eq!(Envelope::parse(" SNS ").unwrap(), Envelope::Sns);
        let err = Envelope::parse("kinesis").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
    }

    #[test]
    fn sns_payload_is_borrowed_when_it_has_no_escapes() {
        let body = r#"{"Type":"Notification","MessageId":"m-1","Message":"plain text"}"#;
        let opened = Envelope::Sns.open(body).unwrap();
        assert!(matches!(opened.payload, Cow::Borrowed("plain text")));
        assert_eq!(opened.id(), Some("m-1"));
    }

    #[test]
    fn errors_never_quote_the_body() {
        for (envelope, body) in [
            (Envelope::Sns, "secret not json"),
            (Envelope::Sns, r#"{"Type":"secret thing","Message":"x"}"#),
            (
                Envelope::Sns,
                r#"{"Type":"Notification","Message":{"secret":1}}"#,
            ),
            (
                Envelope::EventBridge,
                r#"{"id":"x","detail-type":"t","secret":1}"#,
            ),
            (Envelope::S3, r#"{"Records":"secret"}"#),
        ] {
            let err = envelope.open(body).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::BadBody);
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
