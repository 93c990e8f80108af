//! [`Message`]: the per-message view a handler sees.

use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};
use serde::de::DeserializeOwned;

use crate::{Error, ErrorKind};

/// One SQS message, as handed to the handler, with its idempotency key.
///
/// The body is decoded only when the handler asks ([`Message::json`]), so one undecodable body
/// fails that message alone.
#[derive(Debug, Clone)]
pub struct Message {
    id: String,
    key: Option<String>,
    fifo: bool,
    inner: SqsMessage,
}

impl Message {
    /// Wraps a raw SQS record. `key` is the namespaced idempotency key (`None` when the
    /// message runs without deduplication). Mostly for tests and benchmarks: the processor
    /// builds messages itself.
    pub fn new(inner: SqsMessage, key: Option<String>) -> Self {
        let fifo = inner
            .event_source_arn
            .as_deref()
            .is_some_and(|arn| arn.ends_with(".fifo"));
        Message {
            id: inner.message_id.clone().unwrap_or_default(),
            key,
            fifo,
            inner,
        }
    }

    /// The SQS message id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The idempotency key (namespace included). Forward it to downstream APIs that accept an
    /// idempotency key (a payment provider's `Idempotency-Key` header, say), so that a retry
    /// after a crash between their side effect and our completion is deduplicated there too.
    /// `None` only when the message runs without deduplication.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The raw body (empty if the record had none).
    pub fn body(&self) -> &str {
        self.inner.body.as_deref().unwrap_or("")
    }

    /// Decodes the body as JSON into `T`.
    ///
    /// The error is of kind [`ErrorKind::BadBody`] and names the position of the problem, not
    /// the body's content (bodies stay out of logs).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_str(self.body()).map_err(|e| {
            let what = match e.classify() {
                serde_json::error::Category::Io => "I/O",
                serde_json::error::Category::Syntax => "not valid JSON",
                serde_json::error::Category::Data => "JSON of the wrong shape",
                serde_json::error::Category::Eof => "truncated JSON",
            };
            Error::new(
                ErrorKind::BadBody,
                format!(
                    "body of message {} is {what} for {} (line {}, column {})",
                    self.id,
                    std::any::type_name::<T>(),
                    e.line(),
                    e.column()
                ),
            )
        })
    }

    /// A system attribute (`SentTimestamp`, `MessageGroupId`, `SequenceNumber`, ...).
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.inner.attributes.get(name).map(String::as_str)
    }

    /// A message attribute set by the producer.
    pub fn message_attribute(&self, name: &str) -> Option<&SqsMessageAttribute> {
        self.inner.message_attributes.get(name)
    }

    /// The string value of a message attribute.
    pub fn message_attribute_str(&self, name: &str) -> Option<&str> {
        self.message_attribute(name)
            .and_then(|a| a.string_value.as_deref())
    }

    /// How many times SQS has delivered this message (`ApproximateReceiveCount`), 1 on the
    /// first delivery.
    pub fn receive_count(&self) -> Option<u32> {
        self.attribute("ApproximateReceiveCount")?.parse().ok()
    }

    /// The `MessageGroupId` (FIFO queues, and standard queues with fair-queue groups).
    pub fn group_id(&self) -> Option<&str> {
        self.attribute("MessageGroupId")
    }

    /// The FIFO `MessageDeduplicationId`.
    pub fn deduplication_id(&self) -> Option<&str> {
        self.attribute("MessageDeduplicationId")
    }

    /// The FIFO `SequenceNumber`.
    pub fn sequence_number(&self) -> Option<&str> {
        self.attribute("SequenceNumber")
    }

    /// When the message was sent (`SentTimestamp`, epoch milliseconds).
    pub fn sent_timestamp_ms(&self) -> Option<u64> {
        self.attribute("SentTimestamp")?.parse().ok()
    }

    /// The ARN of the queue the message came from.
    pub fn event_source_arn(&self) -> Option<&str> {
        self.inner.event_source_arn.as_deref()
    }

    /// Whether the message came from a FIFO queue (its source ARN ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.fifo
    }

    /// The raw record.
    pub fn sqs(&self) -> &SqsMessage {
        &self.inner
    }

    /// The raw record, by value.
    pub fn into_sqs(self) -> SqsMessage {
        self.inner
    }
}
