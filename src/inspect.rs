//! The keys of a captured batch, for an operator's tool (`sqs-claim inspect --event`):
//! [`ProcessorBuilder::record_keys`], and with each key the payload fingerprint and the verdict
//! a stored record would get: [`ProcessorBuilder::record_claims`], [`RecordClaim`]. Above both
//! the processor and the stream consumers, as it reads a batch of either.

use aws_lambda_events::sqs::SqsMessage;
use serde_json::Value;

use crate::processor::{ProcessorBuilder, RecordClaim};
use crate::record::Record;
use crate::{Error, ErrorKind};

impl<S, H> ProcessorBuilder<S, H> {
    /// The stored key of each record of a captured `event`, in batch order, as the processor
    /// (or stream consumer) this builder makes would claim it: its key source, envelope,
    /// namespace and key format. For an operator's tool (`sqs-claim inspect --event`): nothing
    /// is claimed or run. [`record_claims`](Self::record_claims) gives each key's payload
    /// fingerprint too.
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
        Ok(self
            .record_claims(event)?
            .into_iter()
            .map(|claim| claim.map(|c| c.map(|c| c.key)))
            .collect())
    }

    /// Each record of a captured `event` as the processor (or stream consumer) this builder
    /// makes would claim it: [`record_keys`](Self::record_keys)' keys, each with the payload
    /// fingerprint the processor would store and compare, and the earlier record of the batch
    /// it copies, if any. [`RecordClaim::judge`] then gives the processor's verdict on a
    /// stored record's fingerprint. Fails as [`record_keys`](Self::record_keys) does.
    pub fn record_claims(
        &self,
        event: &Value,
    ) -> Result<Vec<Result<Option<RecordClaim>, Error>>, Error> {
        #[cfg(feature = "streams")]
        if let Some(records) = crate::stream::read_captured(event) {
            let (source, records) = records?;
            return Ok(self.claims_of(&records, Some(source)));
        }
        let records = records(event)?;
        Ok(self.claims_of(
            &records,
            #[cfg(feature = "streams")]
            None,
        ))
    }
}

/// The records of a captured SQS event, as the processor takes them (a stream's are read by
/// `stream::read_captured` first).
fn records(event: &Value) -> Result<Vec<Record>, Error> {
    let invalid = |why: String| Error::new(ErrorKind::InvalidEvent, why);
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
    Ok(records.into_iter().map(Record::sqs).collect())
}
