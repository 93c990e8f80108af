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

// One file per step of a send: `dedup_id.rs` derives the ids, `validate.rs` checks every output
// before any call, `send.rs` cuts the batch into calls, retries what can be retried and
// classifies what failed. This file holds the types a handler uses.
mod dedup_id;
mod send;
mod validate;

use std::fmt;
use std::sync::Arc;

use crate::message::Message;
use crate::retry::RetryPolicy;
use crate::{Error, ErrorKind};

pub use dedup_id::{OutputLabel, deduplication_id};
pub use validate::is_valid_group_id;

/// The most entries SQS takes in one `SendMessageBatch` call.
pub(crate) const MAX_BATCH_ENTRIES: usize = 10;
/// The default size limit of one message (body plus attributes), and of one batch: 256 KiB.
pub(crate) const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// The largest message size a queue can be configured for: 1 MiB.
pub(crate) const MAX_MESSAGE_BYTES_LIMIT: usize = 1024 * 1024;
/// The smallest `MaximumMessageSize` a queue can have: 1 KiB.
const MIN_MESSAGE_BYTES: usize = 1024;

/// The most message attributes SQS takes on one message (the id attribute and
/// `ExtendedPayloadSize` included).
pub(crate) const MAX_ATTRIBUTES: usize = 10;

/// One message to publish: a body, and optionally a group id, a name and message attributes
/// (at most [10](https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html),
/// each name once).
#[derive(Clone, PartialEq, Eq)]
pub struct Outgoing {
    body: String,
    group_id: Option<String>,
    name: Option<String>,
    attributes: Vec<(String, AttributeValue)>,
    /// The payload's size when its body went to S3 and `body` is the pointer: sent as the
    /// `Number` attribute `ExtendedPayloadSize` (features `sqs` + `s3`).
    offloaded: Option<usize>,
}

// By hand: a body (and attribute values) never goes into `Debug` output, only its length.
impl fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attributes: Vec<&str> = self.attributes.iter().map(|(n, _)| n.as_str()).collect();
        // Names only: values may carry data of the message.
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
            offloaded: None,
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

    /// Adds a `String` message attribute. SQS takes at most 10 attributes per message, each
    /// name once (the publisher's id attribute and an offloaded body's `ExtendedPayloadSize`
    /// count): a message with more, or with a name twice, is refused before any call
    /// (`TooManyAttributes`, `DuplicateAttribute`).
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes
            .push((name.into(), AttributeValue::text("String", value.into())));
        self
    }

    /// Adds an attribute of any data type (`Number`, `Binary`, `String.custom`, ...), as a
    /// message received carries it (the failure destination copies them).
    pub(crate) fn typed_attribute(
        mut self,
        name: impl Into<String>,
        value: AttributeValue,
    ) -> Self {
        self.attributes.push((name.into(), value));
        self
    }

    /// How many message attributes it has (the id attribute and `ExtendedPayloadSize` not
    /// counted: the publisher adds them).
    pub(crate) fn attribute_count(&self) -> usize {
        self.attributes.len()
    }

    /// The body.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The size SQS counts against its limit: the body plus, for each attribute, its name,
    /// its data type (`String`) and its value, in UTF-8 bytes.
    pub(crate) fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(n, v)| n.len() + v.size())
                .sum::<usize>()
            + self.offloaded.map_or(0, |n| {
                OFFLOAD_ATTRIBUTE.len() + "Number".len() + n.to_string().len()
            })
    }
}

/// The attribute the extended clients read an offloaded payload's size from.
const OFFLOAD_ATTRIBUTE: &str = "ExtendedPayloadSize";

/// A message attribute's value: its data type (`String`, `Number`, `Binary`, or one of them
/// with a custom suffix, `Number.int`) and its text or bytes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AttributeValue {
    pub(crate) data_type: String,
    pub(crate) data: AttributeData,
}

/// A message attribute's data: text for `String` and `Number` types, bytes for `Binary`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum AttributeData {
    Text(String),
    Binary(Vec<u8>),
}

impl AttributeValue {
    pub(crate) fn text(data_type: impl Into<String>, text: String) -> Self {
        AttributeValue {
            data_type: data_type.into(),
            data: AttributeData::Text(text),
        }
    }

    /// What SQS counts of it against the size limit, its name aside: the data type and the
    /// value, in bytes.
    pub(crate) fn size(&self) -> usize {
        self.data_type.len()
            + match &self.data {
                AttributeData::Text(t) => t.len(),
                AttributeData::Binary(b) => b.len(),
            }
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
    #[cfg(feature = "s3")]
    offload: Option<Offload>,
}

/// Where and from what size bodies go to S3 ([`Publisher::offload_to`]).
#[cfg(feature = "s3")]
#[derive(Clone)]
struct Offload {
    client: aws_sdk_s3::Client,
    bucket: String,
    over_bytes: usize,
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
                policy: send::default_policy(),
                id_attribute: None,
                #[cfg(feature = "s3")]
                offload: None,
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

    /// How entries failed server-side inside a `200` answer are retried: the one
    /// [`RetryPolicy`], counting retries after the first attempt, as everywhere in the crate.
    /// Default: 2 retries from 100 ms, capped at 2 s. Whole calls are retried by the SDK
    /// client, not here (see "Retries" in the module docs).
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

    /// Sends a message whose size (body plus attributes) is over `over_bytes` (at most the
    /// queue's [`max_message_bytes`](Self::max_message_bytes): a larger value is read as it)
    /// as the SQS Extended Client does: its body is put in `bucket` under a new UUID key, and
    /// the message carries the pointer
    /// `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":..,"s3Key":..}]`
    /// with the `Number` attribute `ExtendedPayloadSize` (the body's size in bytes), so the
    /// extended clients, and a processor with [`LargeMessages`](crate::large::LargeMessages),
    /// read the body. The uploads come first: if one fails, nothing is sent (an error of kind
    /// [`ErrorKind::Publish`], code `OffloadFailed`). A send retried after a failure uploads
    /// again, under new keys. Default: off (a message over the limit is refused).
    ///
    /// *Features `sqs` and `s3`.* Needs `s3:PutObject` on the bucket.
    #[cfg(feature = "s3")]
    pub fn offload_to(
        self,
        client: aws_sdk_s3::Client,
        bucket: impl Into<String>,
        over_bytes: usize,
    ) -> Self {
        let bucket = bucket.into();
        self.update(|i| {
            i.offload = Some(Offload {
                client,
                bucket,
                over_bytes,
            })
        })
    }

    /// The size limit of one message, body plus attributes (see
    /// [`max_message_bytes`](Self::max_message_bytes)).
    pub(crate) fn message_bytes_limit(&self) -> usize {
        self.inner.max_message_bytes
    }

    /// Whether each output also carries the id attribute ([`Self::id_attribute`]).
    pub(crate) fn has_id_attribute(&self) -> bool {
        self.inner.id_attribute.is_some()
    }

    /// The queue URL.
    pub(crate) fn queue_url(&self) -> &str {
        &self.inner.queue_url
    }

    /// Whether the queue is FIFO (its URL ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.inner.fifo
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
    ///   `TooManyAttributes` (more than 10, the id attribute and `ExtendedPayloadSize`
    ///   counted), `DuplicateAttribute` (a name twice), `DuplicateName`, `InvalidAttribute` (a
    ///   data type SQS refuses, or the SDK's builder refusing), `InvalidEntry` (the builder);
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

impl OutgoingBatch {
    /// Puts the body of every output over the offload size in S3 and makes it the pointer
    /// ([`Publisher::offload_to`]). Nothing is sent if an upload fails.
    #[cfg(feature = "s3")]
    async fn offload(&mut self) -> Result<(), Error> {
        let p = &self.publisher.inner;
        let Some(offload) = &p.offload else {
            return Ok(());
        };
        let over = offload.over_bytes.min(p.max_message_bytes);
        let labels = dedup_id::labels(&self.outputs);
        let mut failed = Vec::new();
        for (output, label) in self.outputs.iter_mut().zip(labels) {
            if output.offloaded.is_some() || output.size() <= over {
                continue;
            }
            let key = uuid::Uuid::new_v4().to_string();
            let size = output.body.len();
            let put = offload
                .client
                .put_object()
                .bucket(&offload.bucket)
                .key(&key)
                .body(aws_sdk_s3::primitives::ByteStream::from(
                    output.body.clone().into_bytes(),
                ))
                .send()
                .await;
            match put {
                Ok(_) => {
                    output.body = serde_json::json!([
                        crate::large::POINTER_CLASS,
                        {"s3BucketName": offload.bucket, "s3Key": key}
                    ])
                    .to_string();
                    output.offloaded = Some(size);
                }
                Err(e) => failed.push(FailedOutput {
                    output: label,
                    code: "OffloadFailed".into(),
                    message: format!(
                        "putting the body in S3 (s3://{}/{key}) failed: {}",
                        offload.bucket,
                        crate::error::Chain(&e)
                    ),
                    sender_fault: false,
                }),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(send::publish_error(PublishFailure {
                queue_url: p.queue_url.clone(),
                before_any_call: true,
                failed,
                sent: Vec::new(),
            }))
        }
    }

    /// Adds an output. Its position (if unnamed) is the number of unnamed outputs before it.
    pub fn push(&mut self, output: Outgoing) -> &mut Self {
        self.outputs.push(output);
        self
    }

    /// The idempotency key the ids derive from.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The label and deduplication id every output will be sent with, in push order.
    pub fn deduplication_ids(&self) -> Vec<(OutputLabel, String)> {
        dedup_id::labels(&self.outputs)
            .into_iter()
            .map(|l| {
                let id = deduplication_id(&self.key, &l);
                (l, id)
            })
            .collect()
    }
}
