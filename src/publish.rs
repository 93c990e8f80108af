//! Publishing to SQS from a handler, with deduplication ids derived from the input's key.
//!
//! *Feature `sqs`.*
//!
//! A handler that emits messages has the same problem as any other side effect: if it fails
//! after publishing (or its completion is lost) the input is redelivered and the handler
//! publishes again. [`Publisher`] makes those copies harmless on FIFO queues: every output gets
//! a `MessageDeduplicationId` derived from the input's idempotency key ([`Message::key`]) and
//! the output's position in the batch (or a name the caller gives it), so a retried handler
//! sends the *same* ids and SQS drops the copies.
//!
//! ```no_run
//! use sqs_claim::publish::{Outgoing, Publisher};
//! use sqs_claim::{Message, MemoryStore, Processor};
//! use tower::service_fn;
//!
//! # async fn run() -> Result<(), lambda_runtime::Error> {
//! let config = aws_config::load_from_env().await;
//! let publisher = Publisher::new(
//!     aws_sdk_sqs::Client::new(&config),
//!     "https://sqs.eu-west-1.amazonaws.com/123456789012/ledger.fifo", // FIFO: ends in .fifo
//! );
//! let handler = service_fn(move |msg: Message| {
//!     let publisher = publisher.clone();
//!     async move {
//!         let mut out = publisher.batch_for(&msg)?; // the deduplication ids derive from msg.key()
//!         out.push(Outgoing::new(r#"{"debit":10}"#).group_id("acct-42")); // position 0
//!         out.push(Outgoing::new(r#"{"credit":10}"#).group_id("acct-43")); // position 1
//!         out.push(Outgoing::new(r#"{"to":"a@b"}"#).group_id("acct-42").name("receipt"));
//!         out.send().await?; // SendMessageBatch, 10 at a time, before the claim is completed
//!         Ok::<(), sqs_claim::Error>(())
//!     }
//! });
//! let processor = Processor::builder(MemoryStore::new(), handler).namespace("ledger").build();
//! lambda_runtime::run(processor).await
//! # }
//! ```
//!
//! # Guarantees, and their limits
//!
//! * **Before the claim completes.** The handler publishes, then returns; the processor
//!   records the completion only after the handler returned. If publishing fails, the handler
//!   returns the [`ErrorKind::Publish`] error, the message fails, its claim is released, and
//!   SQS redelivers it. Outputs are therefore never lost behind a completed claim.
//! * **Copies dropped within 5 minutes (FIFO).** SQS remembers a deduplication id for 5
//!   minutes, even after the first copy was received and deleted. A retry later than that (a
//!   long visibility timeout, a redrive from a DLQ) publishes again. The claim covers the
//!   longer windows for the *input* (a completed key is skipped for the claim's TTL), so a
//!   duplicate publication needs a handler that published, then failed, then ran again more
//!   than 5 minutes later.
//! * **Standard queues have no deduplication.** The ids are not sent (SQS refuses them on a
//!   standard queue); a retried handler publishes again, and consumers must deduplicate,
//!   for example with sqs-claim and [`Publisher::id_attribute`] +
//!   [`KeySource::MessageAttribute`](crate::KeySource::MessageAttribute).
//! * **High-throughput FIFO** (`DeduplicationScope=messageGroup`): SQS compares ids within a
//!   message group only. The derived ids stay correct as long as an output keeps its group on a
//!   retry, which it does when the group is computed from the input.
//! * **Order.** Outputs are sent in push order, chunk after chunk, so the order within a group
//!   is the push order. An entry that still fails after retries stops the later outputs of
//!   its group (on a FIFO queue) from being sent at all. What cannot be helped: later entries of
//!   its group *in the same* `SendMessageBatch` call were already accepted, and a retried entry
//!   lands after them.
//!
//! # Retries
//!
//! Two layers, never stacked. A whole call that fails transiently (a timeout, a connection
//! error, HTTP 5xx, throttling) is retried by the SDK, as the client's `RetryConfig` says (the
//! reference consumer sets it explicitly: standard mode, 3 attempts); the publisher does not
//! retry it again, or three attempts of ours over three of the SDK's would be nine calls. What
//! the SDK cannot see is an entry that failed inside a `200` answer with `SenderFault = false`
//! (a server-side problem with that entry alone): those entries, and only those, are sent again
//! under the publisher's [`RetryPolicy`] ([`Publisher::retry_policy`]; default 2 retries from
//! 100 ms, with jitter and a cap). [`OutgoingBatch::send_by`] stops retrying when the
//! invocation's time budget would be spent. On a FIFO queue a retried call is safe (same ids);
//! on a standard queue, a call that timed out but did reach SQS is published twice.
//! Entries with `SenderFault = true` are not retried: the request is wrong and will stay wrong.
//! What still fails comes back as one [`Error`] of kind [`ErrorKind::Publish`], whose source is
//! a [`PublishFailure`] naming every failed output with SQS's code and message.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use crate::message::Message;
use crate::retry::RetryPolicy;
use crate::{Error, ErrorKind};

/// The most entries SQS takes in one `SendMessageBatch` call.
pub const MAX_BATCH_ENTRIES: usize = 10;
/// The default size limit of one message (body plus attributes), and of one batch: 256 KiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// The largest message size a queue can be configured for: 1 MiB.
pub const MAX_MESSAGE_BYTES_LIMIT: usize = 1024 * 1024;
/// The smallest `MaximumMessageSize` a queue can have: 1 KiB.
const MIN_MESSAGE_BYTES: usize = 1024;
/// `MessageGroupId` and `MessageDeduplicationId` are at most 128 characters.
const MAX_ID_CHARS: usize = 128;

/// Which output of a batch: its position among the unnamed outputs, or the caller's name.
///
/// Positions count only the outputs without a [`name`](Outgoing::name), in push order, so
/// naming one output does not shift the ids of the others.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutputLabel {
    /// The n-th unnamed output (0-based).
    Position(usize),
    /// A caller-chosen name, unique within the batch.
    Named(String),
}

impl fmt::Display for OutputLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputLabel::Position(p) => write!(f, "#{p}"),
            OutputLabel::Named(n) => write!(f, "{n:?}"),
        }
    }
}

/// The `MessageDeduplicationId` of an output: lowercase hex SHA-256 (64 characters, inside the
/// 128 SQS allows, and only characters SQS accepts) of the UTF-8 bytes of
///
/// * `key + "\0" + "pos:" + position` (position in decimal) for [`OutputLabel::Position`],
/// * `key + "\0" + "name:" + name` for [`OutputLabel::Named`].
///
/// `key` is the input's idempotency key as the handler sees it ([`Message::key`], namespace
/// included). Deterministic: a retried handler derives the same ids. Use it if you send with
/// your own code; the formula is stable, and the same in any language.
///
/// ```
/// use sqs_claim::publish::{deduplication_id, OutputLabel};
/// let a = deduplication_id("payments#o-1", &OutputLabel::Position(0));
/// assert_eq!(a, deduplication_id("payments#o-1", &OutputLabel::Position(0)));
/// assert_ne!(a, deduplication_id("payments#o-1", &OutputLabel::Position(1)));
/// assert_eq!(a.len(), 64);
/// ```
pub fn deduplication_id(key: &str, output: &OutputLabel) -> String {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0u8]);
    match output {
        OutputLabel::Position(p) => {
            h.update(b"pos:");
            h.update(p.to_string().as_bytes());
        }
        OutputLabel::Named(n) => {
            h.update(b"name:");
            h.update(n.as_bytes());
        }
    }
    hex::encode(h.finalize())
}

/// One message to publish: a body, and optionally a group id, a name and string attributes.
#[derive(Clone, PartialEq, Eq)]
pub struct Outgoing {
    body: String,
    group_id: Option<String>,
    name: Option<String>,
    attributes: Vec<(String, String)>,
}

// By hand: a body (and attribute values) never goes into `Debug` output, only its length.
impl fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attributes: Vec<&str> = self.attributes.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Outgoing")
            .field("body_len", &self.body.len())
            .field("group_id", &self.group_id)
            .field("name", &self.name)
            .field("attributes", &attributes)
            .finish()
    }
}

impl Outgoing {
    /// A message with this body (which must not be empty).
    pub fn new(body: impl Into<String>) -> Self {
        Outgoing {
            body: body.into(),
            group_id: None,
            name: None,
            attributes: Vec::new(),
        }
    }

    /// The `MessageGroupId`: required on a FIFO queue; on a standard queue it is sent only if
    /// set (fair queues). 1 to 128 characters, ASCII letters, digits and punctuation.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }

    /// Names this output: its deduplication id derives from the name instead of its position.
    /// Name the outputs whose presence depends on data (a retry might emit a different set),
    /// so a retry maps each output to the same id. Names must be unique within a batch.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a `String` message attribute.
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.push((name.into(), value.into()));
        self
    }

    /// The body.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The size SQS counts against its limit: the body plus, for each attribute, its name,
    /// its data type (`String`) and its value, in UTF-8 bytes.
    pub fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(n, v)| n.len() + "String".len() + v.len())
                .sum::<usize>()
    }
}

/// A publisher's settings, shared by its clones.
#[derive(Clone)]
struct Inner {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    fifo: bool,
    max_message_bytes: usize,
    policy: RetryPolicy,
    id_attribute: Option<String>,
}

/// Publishes to one queue. Cheap to clone (an `Arc` inside): clone it into your handler.
///
/// *Feature `sqs`.* See the [module docs](self) for what is guaranteed.
#[derive(Clone)]
pub struct Publisher {
    inner: Arc<Inner>,
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("queue_url", &self.inner.queue_url)
            .field("fifo", &self.inner.fifo)
            .field("max_message_bytes", &self.inner.max_message_bytes)
            .field("retry_policy", &self.inner.policy)
            .finish()
    }
}

impl Publisher {
    /// A publisher to `queue_url`. The queue is FIFO if and only if the URL ends in `.fifo`.
    /// Defaults: 256 KiB size limit, entries failed server-side retried twice from 100 ms
    /// backoff ([`RetryPolicy`]), no id attribute.
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        let queue_url = queue_url.into();
        let fifo = queue_url.trim_end_matches('/').ends_with(".fifo");
        Publisher {
            inner: Arc::new(Inner {
                client,
                queue_url,
                fifo,
                max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
                policy: default_policy(),
                id_attribute: None,
            }),
        }
    }

    fn update(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        // Configured after a clone, this copies the settings first, so the clones keep theirs.
        f(Arc::make_mut(&mut self.inner));
        self
    }

    /// The queue's `MaximumMessageSize`, in bytes: a message (body plus attributes) over it is
    /// refused before any call, and batches are cut so their total stays under it (SQS limits
    /// a batch to the same total). Clamped to 1 KiB ..= 1 MiB. Default: 256 KiB.
    pub fn max_message_bytes(self, bytes: usize) -> Self {
        self.update(|i| {
            i.max_message_bytes = bytes.clamp(MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES_LIMIT)
        })
    }

    /// Attempts per entry failed server-side inside a `200` answer (1 = no retry) and the
    /// first backoff, doubled each time (with jitter, capped at 2 s): a shorthand for
    /// [`retry_policy`](Self::retry_policy)`(RetryPolicy::new(attempts - 1, first_backoff))`.
    /// Default: 3 attempts from 100 ms. Values below 1 are treated as 1. Whole calls are
    /// retried by the SDK client, not here (see "Retries" in the module docs).
    pub fn retries(self, attempts: u32, first_backoff: Duration) -> Self {
        self.retry_policy(RetryPolicy::new(attempts.max(1) - 1, first_backoff))
    }

    /// How entries failed server-side inside a `200` answer are retried. Default: 2 retries
    /// from 100 ms, capped at 2 s.
    pub fn retry_policy(self, policy: RetryPolicy) -> Self {
        self.update(|i| i.policy = policy)
    }

    /// Also sends each output's derived id as the `String` message attribute `name`, on every
    /// queue type. A consumer of a standard queue can then deduplicate with
    /// `KeySource::MessageAttribute(name)`. Default: off.
    pub fn id_attribute(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.update(|i| i.id_attribute = Some(name))
    }

    /// The queue URL.
    pub fn queue_url(&self) -> &str {
        &self.inner.queue_url
    }

    /// Whether the queue is FIFO (its URL ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.inner.fifo
    }

    /// The SQS client.
    pub fn client(&self) -> &aws_sdk_sqs::Client {
        &self.inner.client
    }

    /// A batch of outputs of `msg`, whose ids derive from [`Message::key`].
    ///
    /// Fails with [`ErrorKind::MissingKey`] if the message has no key (it runs without
    /// deduplication, `MissingKey::ProcessWithoutDedup`): there is nothing stable to derive ids
    /// from. Use [`Publisher::batch`] with a key of your choice in that case.
    pub fn batch_for(&self, msg: &Message) -> Result<OutgoingBatch, Error> {
        match msg.key() {
            Some(key) if !key.is_empty() => Ok(self.batch(key)),
            _ => Err(Error::new(
                ErrorKind::MissingKey,
                format!(
                    "message {} has no idempotency key, so its outputs cannot get deterministic \
                     deduplication ids; configure a key source the message carries, or call \
                     Publisher::batch with a key of your own",
                    msg.id()
                ),
            )),
        }
    }

    /// A batch of outputs whose ids derive from `key` (for code outside a processor handler).
    pub fn batch(&self, key: impl Into<String>) -> OutgoingBatch {
        OutgoingBatch {
            publisher: self.clone(),
            key: key.into(),
            outputs: Vec::new(),
        }
    }
}

/// Outputs of one input, sent together by [`OutgoingBatch::send`].
#[derive(Debug)]
pub struct OutgoingBatch {
    publisher: Publisher,
    key: String,
    outputs: Vec<Outgoing>,
}

/// One output that SQS accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sent {
    /// Which output.
    pub output: OutputLabel,
    /// The SQS message id (on a FIFO queue, a copy dropped as a duplicate reports the id of
    /// the first copy).
    pub message_id: String,
    /// The FIFO sequence number.
    pub sequence_number: Option<String>,
    /// The derived deduplication id (sent on FIFO queues only).
    pub deduplication_id: String,
}

/// One output that was not published, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedOutput {
    /// Which output.
    pub output: OutputLabel,
    /// SQS's error code (`InvalidParameterValue`, `AWS.SimpleQueueService.NonExistentQueue`,
    /// ...), or one of ours:
    /// * for a check made before any call: `MissingGroupId`, `InvalidGroupId`,
    ///   `MessageTooLong`, `EmptyBody`, `InvalidCharacters`, `InvalidAttributeName`,
    ///   `DuplicateName` (`InvalidAttribute`, `InvalidEntry` if the SDK's builder refuses);
    /// * for a call that got no answer: `Timeout`, `DispatchFailure`, `ResponseError`;
    /// * `NoResult` (SQS answered neither success nor failure for the entry);
    /// * `NotSentAfterEarlierFailure` (a FIFO output held back because an earlier output of its
    ///   group failed).
    pub code: String,
    /// SQS's message, or ours.
    pub message: String,
    /// Whether the request was at fault (retrying it unchanged will not help).
    pub sender_fault: bool,
}

/// Every output of a batch that was not published, and those that were. The
/// [`source`](std::error::Error::source) of an [`ErrorKind::Publish`] error from
/// [`OutgoingBatch::send`]; get it with [`PublishFailure::of`].
#[derive(Debug, Clone)]
pub struct PublishFailure {
    queue_url: String,
    before_any_call: bool,
    failed: Vec<FailedOutput>,
    sent: Vec<Sent>,
}

impl PublishFailure {
    /// The failure inside `err`, if `err` came from [`OutgoingBatch::send`].
    pub fn of(err: &Error) -> Option<&PublishFailure> {
        std::error::Error::source(err)?.downcast_ref::<PublishFailure>()
    }

    /// The outputs that were not published, in push order.
    pub fn failed(&self) -> &[FailedOutput] {
        &self.failed
    }

    /// The outputs that were published before the failure.
    pub fn sent(&self) -> &[Sent] {
        &self.sent
    }

    /// Whether the batch was refused by a check before any call to SQS (nothing was sent).
    pub fn before_any_call(&self) -> bool {
        self.before_any_call
    }
}

impl fmt::Display for PublishFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} output(s) not published to {}:",
            self.failed.len(),
            self.queue_url
        )?;
        for (i, e) in self.failed.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            let fault = if e.sender_fault {
                "sender fault"
            } else {
                "server fault"
            };
            write!(
                f,
                "{sep}output {} {} ({fault}): {}",
                e.output, e.code, e.message
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for PublishFailure {}

/// One output, ready to send.
struct Prepared {
    label: OutputLabel,
    dedup_id: String,
    group: Option<String>,
    size: usize,
    entry: SendMessageBatchRequestEntry,
}

impl OutgoingBatch {
    /// Adds an output. Its position (if unnamed) is the number of unnamed outputs before it.
    pub fn push(&mut self, output: Outgoing) -> &mut Self {
        self.outputs.push(output);
        self
    }

    /// How many outputs were pushed.
    pub fn len(&self) -> usize {
        self.outputs.len()
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// The idempotency key the ids derive from.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The label and deduplication id every output will be sent with, in push order.
    pub fn deduplication_ids(&self) -> Vec<(OutputLabel, String)> {
        labels(&self.outputs)
            .into_iter()
            .map(|l| {
                let id = deduplication_id(&self.key, &l);
                (l, id)
            })
            .collect()
    }

    /// Sends every output with `SendMessageBatch`, at most 10 (and at most the size limit)
    /// per call, in push order; retries what can be retried; returns the accepted outputs.
    ///
    /// Every output is checked first (group id on FIFO queues, size, characters, names): if any
    /// check fails, nothing is sent. On failure the error is of kind [`ErrorKind::Publish`], its
    /// message names each failed output with SQS's code and message, and its source is a
    /// [`PublishFailure`]. Return it from the handler: the input fails, its claim is released,
    /// and the retry resends the same ids (dropped as copies by a FIFO queue).
    pub async fn send(self) -> Result<Vec<Sent>, Error> {
        self.send_until(None).await
    }

    /// [`send`](Self::send), retrying failed entries only while a retry's backoff ends before
    /// `stop_at` (the invocation's time budget: its deadline minus the time needed to answer).
    /// A call in flight is bounded by the SDK client's timeouts; race the whole send against
    /// the budget too if the client has none.
    pub async fn send_by(self, stop_at: tokio::time::Instant) -> Result<Vec<Sent>, Error> {
        self.send_until(Some(stop_at)).await
    }

    async fn send_until(self, stop_at: Option<tokio::time::Instant>) -> Result<Vec<Sent>, Error> {
        let prepared = self.prepare()?;
        let p = &self.publisher.inner;
        let mut sent: Vec<Sent> = Vec::with_capacity(prepared.len());
        let mut failed: Vec<FailedOutput> = Vec::new();
        // FIFO: a group whose output failed sends nothing more, or its order would break.
        let mut broken_groups: HashSet<String> = HashSet::new();
        for chunk in chunks(&prepared, p.max_message_bytes) {
            let mut todo: Vec<&Prepared> = Vec::with_capacity(chunk.len());
            for item in chunk {
                match &item.group {
                    Some(g) if p.fifo && broken_groups.contains(g) => failed.push(FailedOutput {
                        output: item.label.clone(),
                        code: "NotSentAfterEarlierFailure".into(),
                        message: format!(
                            "not sent: an earlier output of message group {g:?} failed, and \
                             sending this one would break the group's order"
                        ),
                        sender_fault: false,
                    }),
                    _ => todo.push(item),
                }
            }
            let (ok, bad) = self.send_chunk(todo, stop_at).await;
            sent.extend(ok);
            for (item, f) in bad {
                if let (true, Some(g)) = (p.fifo, &item.group) {
                    broken_groups.insert(g.clone());
                }
                failed.push(f);
            }
        }
        if failed.is_empty() {
            debug!(queue_url = %p.queue_url, outputs = sent.len(), "outputs published");
            return Ok(sent);
        }
        failed.sort_by_key(|f| position_of(&prepared, &f.output));
        warn!(
            queue_url = %p.queue_url,
            sent = sent.len(),
            failed = failed.len(),
            "outputs not published"
        );
        Err(publish_error(PublishFailure {
            queue_url: p.queue_url.clone(),
            before_any_call: false,
            failed,
            sent,
        }))
    }

    /// Checks every output and builds the request entries. Nothing is sent if a check fails.
    fn prepare(&self) -> Result<Vec<Prepared>, Error> {
        let p = &self.publisher.inner;
        let mut failed = Vec::new();
        let mut prepared = Vec::with_capacity(self.outputs.len());
        let mut names = HashSet::new();
        for (index, (output, label)) in self.outputs.iter().zip(labels(&self.outputs)).enumerate() {
            let dedup_id = deduplication_id(&self.key, &label);
            let mut reject = |code: &str, message: String| {
                failed.push(FailedOutput {
                    output: label.clone(),
                    code: code.into(),
                    message,
                    sender_fault: true,
                })
            };
            if let OutputLabel::Named(n) = &label
                && !names.insert(n.clone())
            {
                reject(
                    "DuplicateName",
                    "two outputs have this name; they would get one deduplication id and \
                         SQS would drop the second"
                        .into(),
                );
            }
            match &output.group_id {
                None if p.fifo => reject(
                    "MissingGroupId",
                    "a FIFO queue requires a MessageGroupId; set Outgoing::group_id".into(),
                ),
                Some(g) if !valid_id(g) => reject(
                    "InvalidGroupId",
                    format!(
                        "MessageGroupId must be 1 to {MAX_ID_CHARS} characters of ASCII letters, \
                         digits and punctuation (got {} characters)",
                        g.chars().count()
                    ),
                ),
                _ => {}
            }
            if output.body.is_empty() {
                reject("EmptyBody", "SQS refuses an empty message body".into());
            }
            if let Some(at) = output.body.chars().position(|c| !sqs_char(c)) {
                reject(
                    "InvalidCharacters",
                    format!(
                        "the body has a character SQS refuses at character {at} (allowed: tab, \
                         newline, carriage return, U+0020..U+D7FF, U+E000..U+FFFD, \
                         U+10000..U+10FFFF)"
                    ),
                );
            }
            let mut attributes = output.attributes.clone();
            if let Some(name) = &p.id_attribute {
                attributes.push((name.clone(), dedup_id.clone()));
            }
            for (name, value) in &attributes {
                if !valid_attribute_name(name) {
                    reject(
                        "InvalidAttributeName",
                        format!(
                            "attribute name {name:?} must be 1 to 256 of A-Z a-z 0-9 _ - . and \
                             not start with AWS. or Amazon."
                        ),
                    );
                }
                if value.is_empty() || value.chars().any(|c| !sqs_char(c)) {
                    reject(
                        "InvalidCharacters",
                        format!("attribute {name:?} is empty or has a character SQS refuses"),
                    );
                }
            }
            let size = output.size()
                + p.id_attribute
                    .as_ref()
                    .map_or(0, |n| n.len() + "String".len() + dedup_id.len());
            if size > p.max_message_bytes {
                reject(
                    "MessageTooLong",
                    format!(
                        "the message is {size} bytes (body plus attributes), over the limit of {} \
                         bytes; shrink it, store the payload elsewhere and send a reference, or \
                         raise Publisher::max_message_bytes if the queue allows more",
                        p.max_message_bytes
                    ),
                );
            }
            let mut entry = SendMessageBatchRequestEntry::builder()
                .id(format!("o{index}"))
                .message_body(output.body.clone());
            if p.fifo {
                entry = entry.message_deduplication_id(dedup_id.clone());
            }
            if let Some(g) = &output.group_id {
                entry = entry.message_group_id(g.clone());
            }
            for (name, value) in attributes {
                let value = MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(value)
                    .build();
                match value {
                    Ok(v) => entry = entry.message_attributes(name, v),
                    Err(e) => reject("InvalidAttribute", e.to_string()),
                }
            }
            match entry.build() {
                Ok(entry) => prepared.push(Prepared {
                    label,
                    dedup_id,
                    group: output.group_id.clone(),
                    size,
                    entry,
                }),
                // Only reachable if the builder's required fields change; reported, not unwrapped.
                Err(e) => reject("InvalidEntry", e.to_string()),
            }
        }
        if failed.is_empty() {
            Ok(prepared)
        } else {
            Err(publish_error(PublishFailure {
                queue_url: p.queue_url.clone(),
                before_any_call: true,
                failed,
                sent: Vec::new(),
            }))
        }
    }

    /// Sends one chunk (at most 10 entries within the size limit). Entries failed server-side
    /// inside a `200` answer are sent again under the publisher's [`RetryPolicy`]; a whole call
    /// that failed was already retried by the SDK, and is reported as it is.
    async fn send_chunk<'a>(
        &self,
        todo: Vec<&'a Prepared>,
        stop_at: Option<tokio::time::Instant>,
    ) -> (Vec<Sent>, Vec<(&'a Prepared, FailedOutput)>) {
        let p = &self.publisher.inner;
        let state = std::sync::Mutex::new(Chunk {
            todo,
            sent: Vec::new(),
            failed: Vec::new(),
            retryable: Vec::new(),
        });
        let outcome = p
            .policy
            .retry(
                stop_at,
                |_| {
                    let todo = lock(&state).todo.clone();
                    let state = &state;
                    async move {
                        let call = p
                            .client
                            .send_message_batch()
                            .queue_url(&p.queue_url)
                            .set_entries(Some(todo.iter().map(|t| t.entry.clone()).collect()))
                            .send()
                            .await;
                        let mut st = lock(state);
                        st.answer(&todo, call);
                        if st.retryable.is_empty() {
                            Ok(())
                        } else {
                            Err(st.retryable.len())
                        }
                    }
                },
                |_| true,
                |retry, failed: &usize| {
                    warn!(
                        queue_url = %p.queue_url,
                        retry,
                        entries = *failed,
                        "entries failed server-side; retrying them"
                    );
                },
            )
            .await;
        let mut st = state.into_inner().unwrap_or_else(|e| e.into_inner());
        if outcome.is_err() {
            // Out of retries (or of time): the last failure of each entry is its report.
            let last = std::mem::take(&mut st.retryable);
            st.failed.extend(last);
        }
        (st.sent, st.failed)
    }
}

/// The state of one chunk across its attempts.
struct Chunk<'a> {
    /// What the next attempt sends.
    todo: Vec<&'a Prepared>,
    sent: Vec<Sent>,
    /// Final failures.
    failed: Vec<(&'a Prepared, FailedOutput)>,
    /// Entries failed server-side in the last answer, with that failure: retried, or reported
    /// when the policy gives up.
    retryable: Vec<(&'a Prepared, FailedOutput)>,
}

/// Only `send_chunk`'s own code runs under the lock, and never across an `await`; a poisoned
/// lock still holds consistent lists.
fn lock<'m, 'a>(m: &'m std::sync::Mutex<Chunk<'a>>) -> std::sync::MutexGuard<'m, Chunk<'a>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'a> Chunk<'a> {
    /// Sorts the answer to a call that sent `todo`.
    fn answer(
        &mut self,
        todo: &[&'a Prepared],
        call: Result<
            aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput,
            SdkError<SendMessageBatchError, HttpResponse>,
        >,
    ) {
        self.retryable.clear();
        let failure =
            |item: &Prepared, code: String, message: String, sender_fault: bool| FailedOutput {
                output: item.label.clone(),
                code,
                message,
                sender_fault,
            };
        match call {
            Ok(out) => {
                for ok in out.successful() {
                    if let Some(item) = todo.iter().find(|t| t.entry.id() == ok.id()) {
                        self.sent.push(Sent {
                            output: item.label.clone(),
                            message_id: ok.message_id().to_owned(),
                            sequence_number: ok.sequence_number().map(str::to_owned),
                            deduplication_id: item.dedup_id.clone(),
                        });
                    }
                }
                for bad in out.failed() {
                    let Some(item) = todo.iter().find(|t| t.entry.id() == bad.id()) else {
                        continue;
                    };
                    let f = failure(
                        item,
                        bad.code().to_owned(),
                        bad.message().unwrap_or("(no message)").to_owned(),
                        bad.sender_fault(),
                    );
                    if bad.sender_fault() {
                        self.failed.push((*item, f));
                    } else {
                        self.retryable.push((*item, f));
                    }
                }
                // An entry in neither list would be a protocol violation: we cannot know
                // whether it was sent, so it is reported failed (a retry of the handler
                // resends it, deduplicated on FIFO queues).
                for item in todo {
                    let id = item.entry.id();
                    let answered = out.successful().iter().any(|s| s.id() == id)
                        || out.failed().iter().any(|f| f.id() == id);
                    if !answered {
                        self.failed.push((
                            *item,
                            failure(
                                item,
                                "NoResult".into(),
                                "SQS answered neither success nor failure for this entry".into(),
                                false,
                            ),
                        ));
                    }
                }
            }
            Err(e) => {
                // The SDK already retried this call as its RetryConfig allows.
                let (code, message, transient) = classify(&e);
                for item in todo {
                    self.failed.push((
                        *item,
                        failure(item, code.clone(), message.clone(), !transient),
                    ));
                }
            }
        }
        self.todo = self.retryable.iter().map(|(item, _)| *item).collect();
    }
}

/// The publisher's default policy for entries failed server-side: 2 retries from 100 ms.
fn default_policy() -> RetryPolicy {
    RetryPolicy::new(2, Duration::from_millis(100))
}

/// Labels in push order: unnamed outputs count positions, named ones carry their name.
fn labels(outputs: &[Outgoing]) -> Vec<OutputLabel> {
    let mut next = 0;
    outputs
        .iter()
        .map(|o| match &o.name {
            Some(n) => OutputLabel::Named(n.clone()),
            None => {
                next += 1;
                OutputLabel::Position(next - 1)
            }
        })
        .collect()
}

fn position_of(prepared: &[Prepared], label: &OutputLabel) -> usize {
    prepared
        .iter()
        .position(|p| &p.label == label)
        .unwrap_or(usize::MAX)
}

/// Cuts the outputs, in order, into chunks of at most 10 entries and at most `max_bytes`
/// in total (SQS caps a batch's total payload like a single message's).
fn chunks(prepared: &[Prepared], max_bytes: usize) -> Vec<&[Prepared]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, item) in prepared.iter().enumerate() {
        if i > start && (i - start == MAX_BATCH_ENTRIES || bytes + item.size > max_bytes) {
            out.push(&prepared[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += item.size;
    }
    if start < prepared.len() {
        out.push(&prepared[start..]);
    }
    out
}

/// Code, message and transience of a failed call.
fn classify(e: &SdkError<SendMessageBatchError, HttpResponse>) -> (String, String, bool) {
    match e {
        SdkError::TimeoutError(_) => ("Timeout".into(), "the call timed out".into(), true),
        SdkError::DispatchFailure(d) => {
            let what = if d.is_io() {
                "connection error"
            } else if d.is_timeout() {
                "timeout"
            } else {
                "request could not be sent"
            };
            (
                "DispatchFailure".into(),
                format!("{what}: {}", error_chain(e)),
                true,
            )
        }
        SdkError::ResponseError(_) => (
            "ResponseError".into(),
            format!("unreadable response: {}", error_chain(e)),
            true,
        ),
        SdkError::ServiceError(se) => {
            let err = se.err();
            let code = err.code().unwrap_or("Unknown").to_owned();
            let message = err.message().unwrap_or("(no message)").to_owned();
            let server_side = se.raw().status().is_server_error();
            let throttled = err.is_request_throttled()
                || err.is_kms_throttled()
                || matches!(
                    code.as_str(),
                    "ThrottlingException"
                        | "ServiceUnavailable"
                        | "InternalError"
                        | "InternalFailure"
                );
            (code, message, throttled || server_side)
        }
        _ => ("Unknown".into(), error_chain(e), false),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

fn publish_error(failure: PublishFailure) -> Error {
    let what = if failure.before_any_call {
        "outputs refused before any call to SQS (nothing was sent); fix the handler's outputs"
    } else if failure.failed.iter().all(|f| !f.sender_fault) {
        "outputs not published (SQS or the network failed); the input is retried and the \
         published outputs are deduplicated on FIFO queues"
    } else {
        "outputs not published (SQS refused them); the input is retried and will fail the same \
         way until the outputs are fixed"
    };
    Error::with_source(ErrorKind::Publish, what, failure)
}

/// Characters SQS accepts in bodies and attribute values.
fn sqs_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// Whether SQS accepts `s` as a `MessageGroupId` (or `MessageDeduplicationId`): 1 to 128
/// printable ASCII characters. Derive one (a hash, say) from values that may not pass.
///
/// Public so a handler can check a group id it builds from message data before pushing the
/// output (the payments example does), instead of learning it from a refused batch.
pub fn is_valid_group_id(s: &str) -> bool {
    valid_id(s)
}

fn valid_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID_CHARS && s.bytes().all(|b| b.is_ascii_graphic())
}

fn valid_attribute_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.to_ascii_lowercase().starts_with("aws.")
        && !name.to_ascii_lowercase().starts_with("amazon.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(sizes: &[usize]) -> Vec<Prepared> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| Prepared {
                label: OutputLabel::Position(i),
                dedup_id: String::new(),
                group: None,
                size,
                entry: SendMessageBatchRequestEntry::builder()
                    .id(format!("o{i}"))
                    .message_body("x")
                    .build()
                    .unwrap(),
            })
            .collect()
    }

    #[test]
    fn chunks_by_count_and_size() {
        let p = prepared(&[1; 23]);
        let lens: Vec<usize> = chunks(&p, 1000).iter().map(|c| c.len()).collect();
        assert_eq!(lens, vec![10, 10, 3]);
        let p = prepared(&[400, 400, 400, 1000, 1]);
        let lens: Vec<usize> = chunks(&p, 1000).iter().map(|c| c.len()).collect();
        assert_eq!(lens, vec![2, 1, 1, 1]);
        assert!(chunks(&prepared(&[]), 1000).is_empty());
    }

    #[test]
    fn allowed_characters() {
        assert!(sqs_char('a') && sqs_char('\n') && sqs_char('é') && sqs_char('😀'));
        assert!(!sqs_char('\u{0}') && !sqs_char('\u{8}') && !sqs_char('\u{FFFE}'));
        assert!(valid_attribute_name("trace-id.v1") && !valid_attribute_name("AWS.x"));
        assert!(!valid_attribute_name("a..b") && !valid_attribute_name(""));
    }
}
