//! The engine's record: what every source's adapter hands the processor, whatever the source.
//!
//! The processor plans, claims, runs and reports [`Record`]s. Each source has an adapter that
//! reads its event into records and names a failed record in its own partial batch response:
//! SQS ([`Record::sqs`], and `lambda`'s `SqsBatchResponse`), and, with feature `streams`,
//! Kinesis, DynamoDB Streams and Kafka (`stream::Adapter`). Nothing a source needs to tell the
//! processor rides in a record's attributes: its group (shard, topic-partition), its position
//! and why its payload could not be read are fields of their own.

use aws_lambda_events::sqs::SqsMessage;

/// One record of a batch, as an adapter read it. (`pub` in this private module only so that
/// the stream adapters' sealed trait may name it; its fields are the crate's own.) Its `Debug`
/// never prints the payload, only its length.
#[derive(Clone)]
#[allow(unreachable_pub)] // reachable only through the sealed trait, with feature `streams`
pub struct Record {
    /// The record's identifier (`message_id`, never empty once the plan accepts it), its
    /// payload (`body`, the decoded text; `None` when there is none or it could not be read),
    /// its attributes (`attributes`, `message_attributes`: an SQS message's own, a stream
    /// record's metadata and Kafka's headers) and its source (`event_source`,
    /// `event_source_arn`), in the shape the public `Message::sqs`,
    /// [`KeyFormat`](crate::claim::KeyFormat) and [`KeySource`](crate::KeySource) read.
    pub(crate) message: SqsMessage,
    /// What orders it: an SQS message's `MessageGroupId`, a stream record's shard, a Kafka
    /// record's topic-partition. `None` for a standard queue's message without a group.
    pub(crate) group: Option<String>,
    /// Where a stream record sits in its shard: what its source's response names it by.
    /// `None` for an SQS message.
    #[cfg(feature = "streams")]
    pub(crate) position: Option<Position>,
    /// Why the adapter could not read the record's payload (never quoting it): the record
    /// fails alone, without a claim, with this reason.
    pub(crate) unreadable: Option<String>,
}

// By hand: the payload never goes into `Debug` output, only its length.
impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Record");
        d.field("id", &self.id())
            .field("group", &self.group)
            .field("body_len", &self.message.body.as_deref().map(str::len))
            .field("unreadable", &self.unreadable);
        #[cfg(feature = "streams")]
        d.field("position", &self.position);
        d.finish_non_exhaustive()
    }
}

impl Record {
    /// An SQS message: its group is its `MessageGroupId` (FIFO queues, fair queues).
    pub(crate) fn sqs(message: SqsMessage) -> Record {
        Record {
            group: message.attributes.get("MessageGroupId").cloned(),
            message,
            #[cfg(feature = "streams")]
            position: None,
            unreadable: None,
        }
    }

    /// The record's identifier; empty when the event has none (the plan refuses such a batch).
    pub(crate) fn id(&self) -> &str {
        self.message.message_id.as_deref().unwrap_or("")
    }
}

/// Where a stream record sits in its shard (`Message::position`): what the partial batch
/// response names it by, and what the mapping checkpoints at.
#[cfg(feature = "streams")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Position {
    /// Kinesis and DynamoDB Streams: the record's sequence number, as sent (decimal digits;
    /// numbers of one shard increase, but are not all of one length: compare them as numbers).
    SequenceNumber(String),
    /// Kafka: the record's topic-partition (`TOPIC-PARTITION`, as the response names it:
    /// `orders-eu-3`) and offset.
    Offset {
        /// `TOPIC-PARTITION`.
        partition: String,
        /// The offset in that partition.
        offset: i64,
    },
}

/// The sequence number as is; Kafka's `TOPIC-PARTITION@OFFSET`, as `Message::id` is.
#[cfg(feature = "streams")]
impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::SequenceNumber(n) => f.write_str(n),
            Position::Offset { partition, offset } => write!(f, "{partition}@{offset}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_payload() {
        let mut m = SqsMessage::default();
        m.message_id = Some("m-1".into());
        m.body = Some(r#"{"card":"4242 secret"}"#.into());
        let text = format!("{:?}", Record::sqs(m));
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("m-1") && text.contains("body_len"), "{text}");
    }
}
