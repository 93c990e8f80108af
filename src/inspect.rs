//! The keys of a captured batch, for an operator's tool (`sqs-claim inspect --event`):
//! [`ProcessorBuilder::record_keys`]. Above both the processor and the stream consumers, as it
//! reads a batch of either.

use aws_lambda_events::sqs::SqsMessage;
use serde_json::Value;

use crate::processor::ProcessorBuilder;
use crate::{Error, ErrorKind};

impl<S, H> ProcessorBuilder<S, H> {
    /// The stored key of each record of a captured `event`, in batch order, as the processor
    /// (or stream consumer) this builder makes would claim it: its key source, envelope,
    /// namespace and key format. For an operator's tool (`sqs-claim inspect --event`): nothing
    /// is claimed or run.
    ///
    /// `event` is an SQS event, or (feature `streams`) a Kinesis, DynamoDB Streams or Kafka one,
    /// told apart by its `eventSource` and read as the `stream` consumers read them. Each
    /// record's answer is `Ok(Some(key))`, `Ok(None)` when it has no key (see
    /// [`MissingKey`](crate::MissingKey)), or `Err` why its key cannot be read (a body that is
    /// not JSON, a stream record that does not decode; never quoting the payload). A payload
    /// offloaded to S3 is not fetched: a key read from the payload is then read from the
    /// pointer.
    ///
    /// Fails as a whole for an event that is not a batch of one of those sources, or with a
    /// record the consumer itself would fail the invocation for (no message id, no sequence
    /// number).
    pub fn record_keys(&self, event: &Value) -> Result<Vec<Result<Option<String>, Error>>, Error> {
        Ok(self.keys_of(&records(event)?))
    }
}

/// The records of a captured SQS, Kinesis, DynamoDB Streams or Kafka event, as the processor
/// takes them.
fn records(event: &Value) -> Result<Vec<SqsMessage>, Error> {
    let invalid = |why: String| Error::new(ErrorKind::InvalidEvent, why);
    #[cfg(feature = "streams")]
    if let Some(records) = crate::stream::as_sqs_records(event) {
        return records;
    }
    let Some(records) = event.get("Records").and_then(Value::as_array) else {
        return Err(invalid(
            "the event has no Records list (an SQS, Kinesis or DynamoDB Streams batch) and is \
             not a Kafka batch"
                .into(),
        ));
    };
    let source = records
        .first()
        .and_then(|r| r.get("eventSource"))
        .and_then(Value::as_str)
        .unwrap_or("aws:sqs");
    if source != "aws:sqs" {
        let streams = if cfg!(feature = "streams") {
            ""
        } else {
            " (Kinesis, DynamoDB Streams and Kafka need feature `streams`)"
        };
        return Err(invalid(format!(
            "records of eventSource {source:?}: expected aws:sqs, aws:kinesis, aws:dynamodb \
             or a Kafka batch{streams}"
        )));
    }
    let records: Vec<SqsMessage> = serde_json::from_value(Value::Array(records.clone()))
        .map_err(|e| invalid(format!("the event is not an SQS batch: {e}")))?;
    if let Some(i) = records
        .iter()
        .position(|r| r.message_id.as_deref().is_none_or(str::is_empty))
    {
        return Err(invalid(format!(
            "record #{i} of the batch has no messageId"
        )));
    }
    Ok(records)
}
