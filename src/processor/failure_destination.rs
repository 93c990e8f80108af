//! Poison messages keep their reason: a message that fails on its last allowed receive is sent
//! to a failure queue with why it failed, instead of reaching the DLQ with nothing but its body.
//!
//! *Feature `sqs`.*
//!
//! The step runs after the batch ran, on the messages whose outcome is
//! [`Outcome::Failed`] and whose `ApproximateReceiveCount` is at least
//! [`FailureDestination::after_receives`]: SQS would move them to the queue's DLQ after this
//! receive anyway, reason lost. Each is sent (one `SendMessageBatch` call for the batch's
//! poison messages, through a [`Publisher`]) with its body as the body and these `String`
//! message attributes:
//!
//! | attribute | value |
//! |-----------|-------|
//! | `sqs-claim.failure-kind` | [`FailureKind::as_str`](crate::FailureKind::as_str): `handler_error`, `payload_mismatch`, ... |
//! | `sqs-claim.error-kind` | the handler's own [`ErrorKind`](crate::ErrorKind), when it has one (`bad_body`) |
//! | `sqs-claim.reason` | the failure's message, cut to fit the queue's size limit (never the body) |
//! | `sqs-claim.receive-count` | the receive count |
//! | `sqs-claim.key` | the idempotency key, when the message has one |
//! | `sqs-claim.message-id` | the original message id |
//!
//! A message sent is then reported handled, [`Outcome::DeadLettered`], so Lambda deletes it
//! from the source queue. A message whose send fails (the queue down or missing, throttling,
//! the time budget spent, a body too large with the attributes) keeps its `Failed` outcome and
//! is reported for retry exactly as without a destination: never dropped. On the next receive
//! it is tried again, and the queue's own redrive policy stays the backstop.
//!
//! FIFO destination: each message keeps its `MessageGroupId` (a message without one, from a
//! standard queue, gets its message id as group), and its `MessageDeduplicationId` derives
//! from the original message id, so a retried send within 5 minutes is dropped as a copy.

use std::fmt;

use aws_lambda_events::sqs::SqsMessage;
use tracing::{error, warn};

use crate::deadline::Budget;
use crate::outcome::{ItemReport, Outcome};
use crate::publish::{FailedOutput, Outgoing, OutputLabel, PublishFailure, Publisher};

/// Attribute names (SQS allows `A-Z a-z 0-9 _ - .`, not starting with `AWS.` or `Amazon.`).
const KIND: &str = "sqs-claim.failure-kind";
const ERROR_KIND: &str = "sqs-claim.error-kind";
const REASON: &str = "sqs-claim.reason";
const RECEIVE_COUNT: &str = "sqs-claim.receive-count";
const KEY: &str = "sqs-claim.key";
const MESSAGE_ID: &str = "sqs-claim.message-id";

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
}

impl fmt::Debug for FailureDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureDestination")
            .field("queue_url", &self.publisher.queue_url())
            .field("max_receives", &self.max_receives)
            .finish()
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
        }
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

    /// The destination queue's URL.
    pub fn queue_url(&self) -> &str {
        self.publisher.queue_url()
    }

    /// The receive count from which a failed message is sent.
    pub fn max_receives(&self) -> u32 {
        self.max_receives
    }

    /// Before the batch runs (the records then move into the plan): the records on their last
    /// allowed receive, with what their send needs. Empty, and nothing copied, in a batch
    /// without such records, which is nearly every batch.
    pub(super) fn candidates(&self, records: &[SqsMessage]) -> Vec<Candidate> {
        records
            .iter()
            .enumerate()
            .filter_map(|(index, r)| {
                let receive_count: u32 =
                    r.attributes.get("ApproximateReceiveCount")?.parse().ok()?;
                (receive_count >= self.max_receives).then(|| Candidate {
                    index,
                    receive_count,
                    body: r.body.clone().unwrap_or_default(),
                    group_id: r.attributes.get("MessageGroupId").cloned(),
                })
            })
            .collect()
    }

    /// After the batch ran: sends the candidates that failed and reports those sent as
    /// [`Outcome::DeadLettered`]; every other item is returned as it was. Also returns how many
    /// were sent before their last receive (none yet).
    pub(super) async fn divert(
        &self,
        mut items: Vec<ItemReport>,
        candidates: Vec<Candidate>,
        budget: &Budget,
    ) -> (Vec<ItemReport>, usize) {
        let mut batch = self.publisher.batch(DEDUP_KEY);
        let mut pushed = Vec::new();
        for c in candidates {
            let Some(item) = items.get(c.index) else {
                continue;
            };
            let Outcome::Failed(failure) = &item.outcome else {
                continue;
            };
            match self.outgoing(item, failure, &c) {
                Some(out) => {
                    batch.push(out);
                    pushed.push(c.index);
                }
                None => warn!(
                    message_id = %item.message_id,
                    queue_url = %self.publisher.queue_url(),
                    "failed on its last allowed receive, but its body is empty or too large to \
                     send with its reason; reported for retry (the source queue's DLQ takes it)"
                ),
            }
        }
        if pushed.is_empty() {
            return (items, 0);
        }
        let sent = match budget.hard_stop() {
            Some(stop) => budget.bounded(batch.send_by(stop)).await,
            None => Ok(batch.send().await),
        };
        let sent_ids: Vec<String> = match sent {
            Ok(Ok(sent)) => sent.iter().filter_map(|s| named(&s.output)).collect(),
            Ok(Err(e)) => {
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
            Err(_) => {
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
        for index in pushed {
            let item = &mut items[index];
            if !sent_ids.contains(&item.message_id) {
                continue;
            }
            if let Outcome::Failed(failure) = &item.outcome {
                warn!(
                    message_id = %item.message_id,
                    key = item.key.as_deref().unwrap_or(""),
                    kind = failure.kind.as_str(),
                    queue_url = %self.publisher.queue_url(),
                    "failed on its last allowed receive: sent to the failure destination with \
                     its reason, reported handled"
                );
                item.outcome = Outcome::DeadLettered(failure.clone());
            }
        }
        (items, 0)
    }

    /// The message to send, or `None` if it cannot fit (an empty body, or a body that leaves
    /// no room for the attributes).
    fn outgoing(
        &self,
        item: &ItemReport,
        failure: &crate::outcome::Failure,
        c: &Candidate,
    ) -> Option<Outgoing> {
        if c.body.is_empty() {
            return None;
        }
        let group = match (&c.group_id, self.publisher.is_fifo()) {
            (Some(g), _) => Some(g.clone()),
            // A FIFO destination requires a group: each message from a standard queue its own.
            (None, true) => Some(item.message_id.clone()),
            (None, false) => None,
        };
        let mut out = Outgoing::new(c.body.clone()).name(item.message_id.clone());
        if let Some(g) = group {
            out = out.group_id(g);
        }
        out = out
            .attribute(KIND, failure.kind.as_str())
            .attribute(RECEIVE_COUNT, c.receive_count.to_string())
            .attribute(MESSAGE_ID, item.message_id.clone());
        if let Some(kind) = failure.error_kind {
            out = out.attribute(ERROR_KIND, kind.as_str());
        }
        if let Some(key) = item.key.as_deref().filter(|k| !k.is_empty()) {
            out = out.attribute(KEY, key);
        }
        // The reason takes what room is left under the queue's size limit (the body, the
        // other attributes and the publisher's id attribute first): SQS counts them together.
        let room = self
            .publisher
            .message_bytes_limit()
            .checked_sub(out.size() + REASON.len() + "String".len() + ID_ATTRIBUTE_ROOM)?;
        let reason = fit(&failure.message, room.min(MAX_REASON_BYTES));
        if reason.is_empty() {
            return None;
        }
        Some(out.attribute(REASON, reason))
    }
}

/// A reason longer than this is cut: a log-sized explanation, not a payload.
const MAX_REASON_BYTES: usize = 4096;

/// Room kept for the publisher's id attribute (its name, `String` and a 64-character id).
const ID_ATTRIBUTE_ROOM: usize = 256 + 6 + 64;

/// A record on its last allowed receive, kept from before the batch ran.
#[derive(Clone)]
pub(super) struct Candidate {
    index: usize,
    receive_count: u32,
    body: String,
    group_id: Option<String>,
}

// By hand: the body never goes into `Debug` output.
impl fmt::Debug for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Candidate")
            .field("index", &self.index)
            .field("receive_count", &self.receive_count)
            .field("body_len", &self.body.len())
            .field("group_id", &self.group_id)
            .finish()
    }
}

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
