//! Poison messages keep their reason: a message that fails on its last allowed receive is sent
//! to a failure queue with why it failed, instead of reaching the DLQ with nothing but its body.
//!
//! *Feature `sqs`.*
//!
//! The step runs after the batch ran, on the messages whose outcome is
//! [`Outcome::Failed`] and whose `ApproximateReceiveCount` is at least
//! [`FailureDestination::after_receives`]: SQS would move them to the queue's DLQ after this
//! receive anyway, reason lost. Each is sent (one `SendMessageBatch` call for the batch's
//! poison messages, through a [`Publisher`]) as it came: its body as the body and its own
//! message attributes (a large message's `ExtendedPayloadSize`, the attribute it is keyed by),
//! so that moved back to its source queue it is the message it was. Its failure rides in one
//! more `String` attribute, `sqs-claim.failure`, a JSON object:
//!
//! | member | value |
//! |--------|-------|
//! | `kind` | [`FailureKind::as_str`](crate::FailureKind::as_str): `handler_error`, `payload_mismatch`, ... |
//! | `error_kind` | the handler's own [`ErrorKind`](crate::ErrorKind) (`bad_body`), or `null` |
//! | `reason` | the failure's message, cut to fit the queue's size limit (never the body) |
//! | `receive_count` | the receive count, a number |
//! | `key` | the idempotency key, or `null` |
//! | `message_id` | the original message id |
//!
//! ```text
//! sqs-claim.failure = {"kind":"handler_error","error_kind":null,"reason":"declined: amount 0",
//!                      "receive_count":5,"key":"payments#o-1","message_id":"059f36b4-..."}
//! ```
//!
//! One attribute, because SQS allows 10 per message and the message's own come first: if it
//! already has 10 (or 9 with the publisher's id attribute), the copy keeps them and goes
//! without `sqs-claim.failure` (its reason is logged at `warn` instead, with the message id):
//! its key and its S3 pointer matter more than the reason, which the log keeps. A message
//! moved back and failing again has its old `sqs-claim.failure` replaced.
//!
//! A message sent is then reported handled, [`Outcome::DeadLettered`], so Lambda deletes it
//! from the source queue. A message whose send fails (the queue down or missing, throttling,
//! the time budget spent, a body too large with its attributes) keeps its `Failed` outcome and
//! is reported for retry exactly as without a destination: never dropped. On the next receive
//! it is tried again, and the queue's own redrive policy stays the backstop.
//!
//! **At once** ([`FailureDestination::at_once`]): a failure known to be permanent (a body that
//! does not parse, a payload mismatch, an error the handler marks with
//! [`Retry::permanent`](crate::Retry::permanent): see [`Permanent`]) is sent on any
//! receive, its first included, instead of being retried until its last: retrying cannot fix
//! it. Its outcome is then [`Outcome::DeadLettered`] with [`Failure::permanent`] set; a failed
//! send leaves it reported for retry, as above. Off by default.
//!
//! FIFO destination: each message keeps its `MessageGroupId` (a message without one, from a
//! standard queue, gets its message id as group), and its `MessageDeduplicationId` derives
//! from the original message id, so a retried send within 5 minutes is dropped as a copy.

use std::fmt;

use futures::future::BoxFuture;
use tracing::{error, warn};

use super::after::{AfterBatch, Finished, Received};
use crate::ErrorKind;
use crate::outcome::{Failure, FailureKind, ItemReport, Outcome};
use crate::publish::{
    AttributeData, AttributeValue, FailedOutput, MAX_ATTRIBUTES, Outgoing, OutputLabel,
    PublishFailure, Publisher,
};

/// The attribute the failure rides in, as JSON (SQS allows `A-Z a-z 0-9 _ - .` in names, not
/// starting with `AWS.` or `Amazon.`).
pub const FAILURE_ATTRIBUTE: &str = "sqs-claim.failure";

/// The key the deduplication ids derive from: each output is named by its original message id,
/// so its id is the same on every retry of the send.
const DEDUP_KEY: &str = "sqs-claim/failure-destination";

/// Where messages that failed on their last allowed receive go, with their reason (see the
/// module docs). Set it with
/// [`ProcessorBuilder::failure_destination`](crate::ProcessorBuilder::failure_destination).
///
/// *Feature `sqs`.*
///
/// ```no_run
/// # async fn demo() {
/// use sqs_claim::{FailureDestination, MemoryStore, Message, Processor};
/// let config = aws_config::load_from_env().await;
/// let failures = FailureDestination::sqs(
///     aws_sdk_sqs::Client::new(&config),
///     "https://sqs.eu-west-1.amazonaws.com/123456789012/payments-failures",
/// )
/// .after_receives(5); // the source queue's maxReceiveCount
/// let handler = tower::service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
/// let processor = Processor::builder(MemoryStore::new(), handler)
///     .failure_destination(failures)
///     .build();
/// # let _ = processor;
/// # }
/// ```
#[derive(Clone)]
pub struct FailureDestination {
    publisher: Publisher,
    max_receives: u32,
    at_once: Permanent,
}

/// Which failures are permanent, for [`FailureDestination::at_once`]: a message failing so goes
/// to the failure destination on this receive, whatever its receive count.
///
/// *Feature `sqs`.*
///
/// ```
/// use sqs_claim::processor::Permanent;
/// use sqs_claim::{ErrorKind, FailureKind};
///
/// // bad_body, missing_key, payload_mismatch, and what the handler marks
/// let p = Permanent::default();
/// assert!(!p.is_none());
/// let mine = Permanent::none().failure_kind(FailureKind::PayloadMismatch).marked(true);
/// assert_ne!(mine, p);
/// assert_eq!(
///     "bad_body,permanent".parse::<Permanent>().unwrap(),
///     Permanent::none().error_kind(ErrorKind::BadBody).marked(true)
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permanent {
    failure_kinds: Vec<FailureKind>,
    error_kinds: Vec<ErrorKind>,
    marked: bool,
}

/// The list `SQS_CLAIM_DEAD_LETTER_AT_ONCE` takes: `default`, `off`, or kinds separated by commas.
impl std::str::FromStr for Permanent {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Permanent::parse(s)
    }
}

impl Default for Permanent {
    /// A body that does not parse: in the handler ([`ErrorKind::BadBody`] from
    /// [`Message::json`](crate::Message::json)), or before it, when the key is read from the
    /// body ([`FailureKind::MissingKey`]: a message without its key never gets one on a
    /// retry); a payload mismatch ([`FailureKind::PayloadMismatch`]); and any error the handler
    /// marks ([`Retry::permanent`](crate::Retry::permanent)).
    fn default() -> Self {
        Permanent::none()
            .error_kind(ErrorKind::BadBody)
            .failure_kind(FailureKind::MissingKey)
            .failure_kind(FailureKind::PayloadMismatch)
            .marked(true)
    }
}

impl Permanent {
    /// Nothing is permanent: every failure is retried until its last allowed receive (the
    /// destination's default).
    pub fn none() -> Self {
        Permanent {
            failure_kinds: Vec::new(),
            error_kinds: Vec::new(),
            marked: false,
        }
    }

    /// Failures of this kind are permanent.
    pub fn failure_kind(mut self, kind: FailureKind) -> Self {
        if !self.failure_kinds.contains(&kind) {
            self.failure_kinds.push(kind);
        }
        self
    }

    /// Handler failures whose error is (or was caused by) a [`crate::Error`] of this kind are
    /// permanent ([`Failure::error_kind`]).
    pub fn error_kind(mut self, kind: ErrorKind) -> Self {
        if !self.error_kinds.contains(&kind) {
            self.error_kinds.push(kind);
        }
        self
    }

    /// Whether a failure the handler marks with
    /// [`Retry::permanent`](crate::Retry::permanent) is permanent.
    pub fn marked(mut self, on: bool) -> Self {
        self.marked = on;
        self
    }

    /// Reads a comma-separated list, as `SQS_CLAIM_DEAD_LETTER_AT_ONCE` takes it: failure
    /// kinds ([`FailureKind::as_str`]: `payload_mismatch`, ...), error kinds
    /// ([`ErrorKind::as_str`]: `bad_body`, ...), `permanent` (what the handler marks),
    /// `default` (those of [`Permanent::default`]), or `off` alone for none.
    pub(crate) fn parse(list: &str) -> Result<Permanent, crate::Error> {
        let mut p = Permanent::none();
        for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            p = match word {
                "off" | "none" => p,
                "default" => {
                    let d = Permanent::default();
                    Permanent {
                        failure_kinds: merge(p.failure_kinds, d.failure_kinds),
                        error_kinds: merge(p.error_kinds, d.error_kinds),
                        marked: true,
                    }
                }
                "permanent" => p.marked(true),
                w => match (
                    FailureKind::ALL.iter().find(|k| k.as_str() == w),
                    ERROR_KINDS.iter().find(|k| k.as_str() == w),
                ) {
                    (Some(k), _) => p.failure_kind(*k),
                    (None, Some(k)) => p.error_kind(*k),
                    (None, None) => {
                        return Err(crate::Error::new(
                            ErrorKind::Config,
                            format!(
                                "{w:?} is not a failure kind, an error kind, `permanent`, `default` \
                                 or `off`"
                            ),
                        ));
                    }
                },
            };
        }
        Ok(p)
    }

    /// Whether nothing is permanent.
    pub fn is_none(&self) -> bool {
        self.failure_kinds.is_empty() && self.error_kinds.is_empty() && !self.marked
    }

    /// Whether `failure` is permanent under this policy.
    pub(crate) fn covers(&self, failure: &Failure) -> bool {
        (self.marked && failure.permanent)
            || self.failure_kinds.contains(&failure.kind)
            || (failure.kind == FailureKind::Handler
                && failure
                    .error_kind
                    .is_some_and(|k| self.error_kinds.contains(&k)))
    }
}

fn merge<T: PartialEq>(mut a: Vec<T>, b: Vec<T>) -> Vec<T> {
    for x in b {
        if !a.contains(&x) {
            a.push(x);
        }
    }
    a
}

/// Error kinds a handler's error can carry (the store's own are failure kinds above).
const ERROR_KINDS: &[ErrorKind] = &[
    ErrorKind::BadBody,
    ErrorKind::MissingKey,
    ErrorKind::InvalidEvent,
    ErrorKind::Config,
    ErrorKind::Publish,
    ErrorKind::EffectRejected,
    ErrorKind::StoreRejected,
    ErrorKind::StoreUnavailable,
    ErrorKind::OutOfTime,
    ErrorKind::Other,
];

impl fmt::Debug for FailureDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureDestination")
            .field("queue_url", &self.publisher.queue_url())
            .field("max_receives", &self.max_receives)
            .field("at_once", &self.at_once)
            .finish()
    }
}

/// The first step after the batch ([`AfterBatch`]): the records that may need sending (on
/// their last allowed receive, or all while [`at_once`](FailureDestination::at_once) covers
/// anything) keep their bodies through the run.
impl AfterBatch for FailureDestination {
    fn keeps_body(&self, receive_count: Option<u32>) -> bool {
        self.is_candidate(receive_count)
    }

    fn after<'a>(&'a self, batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let at_once = self.divert(batch).await;
            batch.counts.dead_lettered_at_once += at_once;
        })
    }
}

impl FailureDestination {
    /// The SQS queue at `queue_url` (FIFO if it ends in `.fifo`), with the publisher's
    /// defaults. Default maximum: 5 receives.
    pub fn sqs(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self::publisher(Publisher::new(client, queue_url))
    }

    /// The queue of `publisher`, with its size limit and retry policy. Its id attribute, if
    /// set, is sent too.
    pub fn publisher(publisher: Publisher) -> Self {
        FailureDestination {
            publisher,
            max_receives: 5,
            at_once: Permanent::none(),
        }
    }

    /// Sends a failure `permanent` covers on any receive, its first included, instead of
    /// waiting for its last allowed receive (see the module docs). Default:
    /// [`Permanent::none`]. While it covers anything, every record's body is kept (copied)
    /// until the batch is done, as the failures are only known then; a Lambda batch is at
    /// most 6 MB.
    ///
    /// ```no_run
    /// # async fn demo(client: aws_sdk_sqs::Client) {
    /// use sqs_claim::FailureDestination;
    /// use sqs_claim::processor::Permanent;
    /// let failures = FailureDestination::sqs(client, "https://sqs.eu-west-1.amazonaws.com/123456789012/payments-failures")
    ///     .after_receives(5)
    ///     .at_once(Permanent::default());
    /// # let _ = failures;
    /// # }
    /// ```
    pub fn at_once(mut self, permanent: Permanent) -> Self {
        self.at_once = permanent;
        self
    }

    /// A failed message is sent when its `ApproximateReceiveCount` is at least `n`: set it to
    /// the source queue's `maxReceiveCount`, so the destination takes exactly the messages
    /// the DLQ would. A lower value diverts messages that still had retries left; a higher
    /// one lets the DLQ take them first, without their reason. Values below 1 count as 1.
    /// Default: 5.
    pub fn after_receives(mut self, n: u32) -> Self {
        self.max_receives = n.max(1);
        self
    }

    /// Whether a record received `receive_count` times is a candidate: on its last allowed
    /// receive, or any record while [`at_once`](Self::at_once) covers anything.
    fn is_candidate(&self, receive_count: Option<u32>) -> bool {
        !self.at_once.is_none() || self.is_last(receive_count)
    }

    fn is_last(&self, receive_count: Option<u32>) -> bool {
        receive_count.is_some_and(|n| n >= self.max_receives)
    }

    /// After the batch ran: sends the candidates (the records whose body was kept) that failed
    /// on their last allowed receive, or with a failure [`at_once`](Self::at_once) covers, and
    /// reports those sent as [`Outcome::DeadLettered`]; every other item stays as it was.
    /// Returns how many were sent before their last receive (at once).
    async fn divert(&self, batch: &mut Finished<'_>) -> usize {
        let mut sending = self.publisher.batch(DEDUP_KEY);
        let mut pushed = Vec::new();
        for (index, (item, received)) in batch.items().iter().zip(batch.received()).enumerate() {
            let Some(body) = received.body() else {
                continue;
            };
            let Outcome::Failed(failure) = &item.outcome else {
                continue;
            };
            let last = self.is_last(received.receive_count());
            let at_once = !last && self.at_once.covers(failure);
            if !last && !at_once {
                continue;
            }
            match self.outgoing(item, failure, body, received) {
                Some(out) => {
                    sending.push(out);
                    pushed.push((index, at_once));
                }
                None => warn!(
                    message_id = %item.message_id,
                    queue_url = %self.publisher.queue_url(),
                    "failed on its last allowed receive, but its body is empty, or too large \
                     with its attributes for the failure destination; reported for retry (the \
                     source queue's DLQ takes it)"
                ),
            }
        }
        if pushed.is_empty() {
            return 0;
        }
        // The publisher stops its own retries at the hard stop; the race is the backstop.
        let sent = match batch.hard_stop() {
            Some(stop) => batch.bounded(sending.send_by(stop)).await,
            None => Some(sending.send().await),
        };
        let sent_ids: Vec<String> = match sent {
            Some(Ok(sent)) => sent.iter().filter_map(|s| named(&s.output)).collect(),
            Some(Err(e)) => {
                let (sent, failed): (Vec<String>, &[FailedOutput]) = match PublishFailure::of(&e) {
                    Some(f) => (
                        f.sent().iter().filter_map(|s| named(&s.output)).collect(),
                        f.failed(),
                    ),
                    None => (Vec::new(), &[]),
                };
                error!(
                    queue_url = %self.publisher.queue_url(),
                    not_sent = pushed.len().saturating_sub(sent.len()),
                    refused = failed.len(),
                    error = %format_args!("{e:#}"),
                    "could not send failed messages to the failure destination; they are \
                     reported for retry"
                );
                sent
            }
            None => {
                error!(
                    queue_url = %self.publisher.queue_url(),
                    messages = pushed.len(),
                    "the time budget ran out while sending failed messages to the failure \
                     destination; they are reported for retry (a copy that did land is dropped \
                     by a FIFO destination's deduplication, or arrives twice on a standard one)"
                );
                Vec::new()
            }
        };
        let items = batch.items_mut();
        let mut sent_at_once = 0;
        for (index, at_once) in pushed {
            let item = &mut items[index];
            if !sent_ids.contains(&item.message_id) {
                continue;
            }
            if let Outcome::Failed(failure) = &item.outcome {
                let mut failure = failure.clone();
                if at_once {
                    failure.permanent = true;
                    sent_at_once += 1;
                    warn!(
                        message_id = %item.message_id,
                        key = item.key.as_deref().unwrap_or(""),
                        kind = failure.kind.as_str(),
                        queue_url = %self.publisher.queue_url(),
                        "failed for good (a permanent failure): sent to the failure destination \
                         at once with its reason, reported handled"
                    );
                } else {
                    warn!(
                        message_id = %item.message_id,
                        key = item.key.as_deref().unwrap_or(""),
                        kind = failure.kind.as_str(),
                        queue_url = %self.publisher.queue_url(),
                        "failed on its last allowed receive: sent to the failure destination \
                         with its reason, reported handled"
                    );
                }
                item.outcome = Outcome::DeadLettered(failure);
            }
        }
        sent_at_once
    }

    /// The message to send: the body and the message's own attributes, and its failure as
    /// [`FAILURE_ATTRIBUTE`] when there is room for one more attribute and its bytes. `None` if
    /// it cannot be sent (an empty body, or a body and attributes over the queue's limit).
    fn outgoing(
        &self,
        item: &ItemReport,
        failure: &Failure,
        body: &str,
        received: &Received,
    ) -> Option<Outgoing> {
        if body.is_empty() {
            return None;
        }
        let group = match (received.group_id(), self.publisher.is_fifo()) {
            (Some(g), _) => Some(g.to_owned()),
            // A FIFO destination requires a group: each message from a standard queue its own.
            (None, true) => Some(item.message_id.clone()),
            (None, false) => None,
        };
        let mut out = Outgoing::new(body.to_owned()).name(item.message_id.clone());
        if let Some(g) = group {
            out = out.group_id(g);
        }
        // The message's own attributes first: its key, its S3 pointer's size. An earlier
        // failure's attribute (a message moved back) is replaced by this one.
        for (name, attribute) in &received.attributes {
            if name == FAILURE_ATTRIBUTE {
                continue;
            }
            match copied(attribute) {
                Some(value) => out = out.typed_attribute(name.clone(), value),
                None => warn!(
                    message_id = %item.message_id,
                    attribute = %name,
                    "a message attribute without a value (a list type SQS does not send) is \
                     left off the failure destination's copy"
                ),
            }
        }
        let id_attribute = usize::from(self.publisher.has_id_attribute());
        let limit = self.publisher.message_bytes_limit();
        let reserve = if id_attribute == 1 {
            ID_ATTRIBUTE_ROOM
        } else {
            0
        };
        if out.attribute_count() + id_attribute > MAX_ATTRIBUTES || out.size() + reserve > limit {
            return None;
        }
        let left_off = |why: &str| {
            warn!(
                message_id = %item.message_id,
                key = item.key.as_deref().unwrap_or(""),
                kind = failure.kind.as_str(),
                error_kind = failure.error_kind.map(|k| k.as_str()),
                reason = %failure.message,
                queue_url = %self.publisher.queue_url(),
                "the failure destination's copy goes without its {FAILURE_ATTRIBUTE} \
                 attribute: {why}; its own attributes are kept, its failure is this line"
            );
        };
        if out.attribute_count() + id_attribute >= MAX_ATTRIBUTES {
            left_off("the message already has the 10 attributes SQS allows");
            return Some(out);
        }
        // The failure takes what room is left under the queue's size limit (the body, its
        // attributes and the publisher's id attribute first): SQS counts them together.
        let Some(room) =
            limit.checked_sub(out.size() + FAILURE_ATTRIBUTE.len() + "String".len() + reserve)
        else {
            left_off("no room is left under the queue's size limit");
            return Some(out);
        };
        let json = |reason: &str| {
            serde_json::json!({
                "kind": failure.kind.as_str(),
                "error_kind": failure.error_kind.map(|k| k.as_str()),
                "reason": reason,
                "receive_count": received.receive_count().unwrap_or(1),
                "key": item.key.as_deref().filter(|k| !k.is_empty()),
                "message_id": item.message_id,
            })
            .to_string()
        };
        if json("").len() > room {
            left_off("no room is left under the queue's size limit");
            return Some(out);
        }
        // Escaping may lengthen the reason: cut it until the whole object fits.
        let mut max = room.min(MAX_REASON_BYTES);
        let value = loop {
            let reason = fit(&failure.message, max);
            let value = json(&reason);
            if value.len() <= room || reason.is_empty() {
                break value;
            }
            max = max.saturating_sub((value.len() - room).max(1));
        };
        Some(out.typed_attribute(FAILURE_ATTRIBUTE, AttributeValue::text("String", value)))
    }
}

/// A received attribute as the publisher sends it: its text, or its bytes for a binary type;
/// `None` when it has neither (list types, which SQS reserves and never sends).
fn copied(attribute: &aws_lambda_events::sqs::SqsMessageAttribute) -> Option<AttributeValue> {
    let data_type = attribute
        .data_type
        .clone()
        .unwrap_or_else(|| "String".into());
    let data = match (&attribute.string_value, &attribute.binary_value) {
        (Some(text), _) if !data_type.starts_with("Binary") => AttributeData::Text(text.clone()),
        (_, Some(bytes)) => AttributeData::Binary(bytes.0.clone()),
        (Some(text), None) => AttributeData::Text(text.clone()),
        (None, None) => return None,
    };
    Some(AttributeValue { data_type, data })
}

/// A reason longer than this is cut: a log-sized explanation, not a payload.
const MAX_REASON_BYTES: usize = 4096;

/// Room kept for the publisher's id attribute (its name, `String` and a 64-character id).
const ID_ATTRIBUTE_ROOM: usize = 256 + 6 + 64;

fn named(label: &OutputLabel) -> Option<String> {
    match label {
        OutputLabel::Named(n) => Some(n.clone()),
        _ => None,
    }
}

/// `reason` with characters SQS refuses replaced, cut at a character boundary to at most
/// `max` bytes (with `…` when cut).
fn fit(reason: &str, max: usize) -> String {
    let clean: String = reason
        .chars()
        .map(|c| {
            if matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..) {
                c
            } else {
                '\u{FFFD}'
            }
        })
        .collect();
    if clean.len() <= max {
        return clean;
    }
    let ellipsis = "…";
    let Some(keep) = max.checked_sub(ellipsis.len()) else {
        return String::new();
    };
    let mut end = keep;
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &clean[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_cut_at_a_character_boundary() {
        assert_eq!(fit("short", 100), "short");
        let cut = fit(&"é".repeat(100), 11);
        assert!(cut.len() <= 11 && cut.ends_with('…'), "{cut:?}");
        assert_eq!(fit("a\u{0}b", 10), "a\u{FFFD}b");
        assert_eq!(fit("abc", 2), "");
    }
}
