//! [`Message`]: the per-message view a handler sees.

use aws_lambda_events::sqs::SqsMessage;
use serde::de::DeserializeOwned;

#[cfg(feature = "streams")]
use crate::record::Position;
use crate::{Error, ErrorKind};

/// One SQS message, as handed to the handler, with its idempotency key.
///
/// The body is decoded only when the handler asks ([`Message::json`]), so one undecodable body
/// fails that message alone. With an [`Envelope`](crate::Envelope) set on the
/// processor, [`Message::payload`] and [`Message::json`] read what the envelope wraps (SNS's
/// `Message`, EventBridge's `detail`, S3's record) and [`Message::body`] the raw body.
#[derive(Clone)]
pub struct Message {
    id: String,
    key: Option<String>,
    fifo: bool,
    stop_at: Option<tokio::time::Instant>,
    payload: Payload,
    group: Option<String>,
    #[cfg(feature = "streams")]
    position: Option<Position>,
    inner: SqsMessage,
}

/// What the processor's envelope found in a message's body.
#[derive(Clone, Debug)]
pub(crate) enum Payload {
    /// No envelope: the body is the payload.
    Body,
    /// The envelope opened: its payload's text and its id.
    Opened { text: String, id: Option<String> },
    /// The body is not the envelope: why (never quoting the body).
    Unopened(String),
    /// The body is an S3 pointer whose payload could not be fetched (feature `s3`): why.
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    Unfetched(crate::outcome::Failure),
}

// By hand: the body never goes into `Debug` output (a `?msg` in a log line), only its length.
impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("id", &self.id)
            .field("key", &self.key)
            .field("fifo", &self.fifo)
            .field("body_len", &self.body().len())
            .field("payload_len", &self.payload().map(str::len).ok())
            .field("envelope_id", &self.envelope_id())
            .finish_non_exhaustive()
    }
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
            stop_at: None,
            payload: Payload::Body,
            group: inner.attributes.get("MessageGroupId").cloned(),
            #[cfg(feature = "streams")]
            position: None,
            inner,
        }
    }

    /// The message of one of the engine's records (any source): its group and position are
    /// the record's own.
    pub(crate) fn of_record(record: crate::record::Record, key: Option<String>) -> Self {
        let mut message = Message::new(record.message, key);
        message.group = record.group;
        #[cfg(feature = "streams")]
        {
            message.position = record.position;
        }
        message
    }

    /// Sets what the envelope found in the body.
    pub(crate) fn with_payload(mut self, payload: Payload) -> Self {
        self.payload = payload;
        self
    }

    /// Sets when the invocation's time budget ends (see [`Message::stop_at`]).
    pub(crate) fn with_stop_at(mut self, stop_at: Option<tokio::time::Instant>) -> Self {
        self.stop_at = stop_at;
        self
    }

    /// When the invocation's time budget ends (the deadline minus the answer reserve): the
    /// processor cancels the handler at that instant. Give calls that take a timeout of their
    /// own (a payment provider's client, [`OutgoingBatch::send_by`](crate::publish::OutgoingBatch::send_by))
    /// what is left, so they give up cleanly first. `None` when the invocation has no deadline.
    pub fn stop_at(&self) -> Option<tokio::time::Instant> {
        self.stop_at
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

    /// The payload: the body, or, with an envelope set on the processor, the text it wraps
    /// (SNS's `Message`, EventBridge's `detail`, S3's record).
    ///
    /// An error of kind [`ErrorKind::BadBody`] when the body is not that envelope (not JSON,
    /// an SNS `SubscriptionConfirmation`, an `s3:TestEvent`), saying why, never quoting it.
    pub fn payload(&self) -> Result<&str, Error> {
        match &self.payload {
            Payload::Body => Ok(self.body()),
            Payload::Opened { text, .. } => Ok(text),
            Payload::Unopened(why) => Err(Error::new(
                ErrorKind::BadBody,
                format!("message {}: {why}", self.id),
            )),
            Payload::Unfetched(failure) => Err(Error::new(
                ErrorKind::BadBody,
                format!("message {}: {}", self.id, failure.message),
            )),
        }
    }

    /// Why the payload offloaded to S3 could not be fetched, when it could not (feature `s3`):
    /// the message fails with it instead of running its handler.
    pub(crate) fn unfetched(&self) -> Option<&crate::outcome::Failure> {
        match &self.payload {
            Payload::Unfetched(failure) => Some(failure),
            _ => None,
        }
    }

    /// The envelope's own id (SNS's `MessageId`, EventBridge's `id`), with such an envelope
    /// set on the processor.
    pub fn envelope_id(&self) -> Option<&str> {
        match &self.payload {
            Payload::Opened { id, .. } => id.as_deref(),
            Payload::Body | Payload::Unopened(_) | Payload::Unfetched(_) => None,
        }
    }

    /// Decodes the [payload](Message::payload) (the body, without an envelope) as JSON into
    /// `T`.
    ///
    /// The error is of kind [`ErrorKind::BadBody`] and names the position of the problem, not
    /// the body's content (bodies stay out of logs).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let what = match self.payload {
            Payload::Body => "body",
            _ => "payload",
        };
        serde_json::from_str(self.payload()?).map_err(|e| {
            let kind = match e.classify() {
                serde_json::error::Category::Io => "I/O",
                serde_json::error::Category::Syntax => "not valid JSON",
                serde_json::error::Category::Data => "JSON of the wrong shape",
                serde_json::error::Category::Eof => "truncated JSON",
            };
            Error::new(
                ErrorKind::BadBody,
                format!(
                    "{what} of message {} is {kind} for {} (line {}, column {})",
                    self.id,
                    std::any::type_name::<T>(),
                    e.line(),
                    e.column()
                ),
            )
        })
    }

    /// A system attribute (`SentTimestamp`, `MessageGroupId`, `SequenceNumber`, ...).
    pub(crate) fn attribute(&self, name: &str) -> Option<&str> {
        self.inner.attributes.get(name).map(String::as_str)
    }

    /// How many times SQS has delivered this message (`ApproximateReceiveCount`), 1 on the
    /// first delivery.
    pub fn receive_count(&self) -> Option<u32> {
        self.attribute("ApproximateReceiveCount")?.parse().ok()
    }

    /// The producer's X-Ray trace header (the `AWSTraceHeader` system attribute, e.g.
    /// `Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`), when the
    /// producer was traced. The processor records it on the message's span (`trace_header`).
    pub(crate) fn trace_header(&self) -> Option<&str> {
        self.attribute("AWSTraceHeader")
    }

    /// What orders the message: the `MessageGroupId` (FIFO queues, and standard queues with
    /// fair-queue groups); a stream record's shard (Kinesis: from its `eventID`; DynamoDB
    /// Streams: the stream's ARN); a Kafka record's `TOPIC-PARTITION`.
    pub fn group_id(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// Where a stream record sits in its shard (feature `streams`): a Kinesis or DynamoDB
    /// Streams record's sequence number, a Kafka record's topic-partition and offset, as the
    /// partial batch response names the record and the mapping checkpoints. `None` for an SQS
    /// message (a FIFO message's `SequenceNumber` attribute orders its group, not a stream).
    ///
    /// ```
    /// use sqs_claim::Message;
    /// use sqs_claim::stream::Position;
    ///
    /// # fn record(msg: &Message) {
    /// match msg.position() {
    ///     Some(Position::SequenceNumber(n)) => println!("Kinesis or DynamoDB Streams: {n}"),
    ///     Some(Position::Offset { partition, offset }) => println!("Kafka: {partition} @ {offset}"),
    ///     Some(other) => println!("{other}"),
    ///     None => println!("an SQS message"),
    /// }
    /// # }
    /// ```
    #[cfg(feature = "streams")]
    #[cfg_attr(docsrs, doc(cfg(feature = "streams")))]
    pub fn position(&self) -> Option<Position> {
        self.position.clone()
    }

    /// Whether the message came from a FIFO queue (its source ARN ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.fifo
    }

    /// The raw record.
    pub fn sqs(&self) -> &SqsMessage {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_body() {
        let mut m = SqsMessage::default();
        m.message_id = Some("m-1".into());
        m.body = Some(r#"{"card":"4242 secret"}"#.into());
        let text = format!("{:?}", Message::new(m, Some("ns#k".into())));
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("m-1") && text.contains("body_len"), "{text}");
    }
}
