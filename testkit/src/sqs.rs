//! SQS events as Lambda delivers them, built record by record.
//!
//! A [`Record`] is one message in the wire shape of Lambda's SQS event source (the JSON your
//! function receives, field for field); a slice of them becomes an event with [`event_json`]
//! (the JSON), [`sqs_event`] (`aws_lambda_events`' [`SqsEvent`], parsed from that JSON, so your
//! test goes through the same deserialisation as Lambda's payload) or [`lambda_event`] (the
//! `LambdaEvent` a `tower::Service` handler is called with).
//!
//! | queue | build with | what marks it |
//! |-------|-----------|---------------|
//! | standard | [`record`] | `eventSourceARN` of [`STANDARD_ARN`] |
//! | FIFO | [`fifo`] | `eventSourceARN` ending in `.fifo` ([`FIFO_ARN`]), `MessageGroupId`, `MessageDeduplicationId`, a `SequenceNumber` per record |
//! | fair | [`fair`] | a standard ARN **with** `MessageGroupId` (and no `SequenceNumber`): since 2025 a group id alone does not make a queue FIFO |
//!
//! A redelivery is the same record with a higher [`Record::receive_count`]
//! (`ApproximateReceiveCount`); a duplicate delivery is the same message id twice in a batch, or
//! in two batches.
//!
//! ```
//! use sqs_claim_testkit::sqs::{self, fair, fifo, record};
//!
//! let batch = [
//!     record("m-1", r#"{"order_id":"o-1"}"#),
//!     // The same message again (SQS delivers at least once), now on its second receive.
//!     record("m-1", r#"{"order_id":"o-1"}"#).receive_count(2),
//!     fair("m-2", "tenant-a", "{}").attr("trace", "abc"),
//! ];
//! let event = sqs::sqs_event(&batch);
//! assert_eq!(event.records[1].attributes["ApproximateReceiveCount"], "2");
//! assert_eq!(event.records[2].attributes["MessageGroupId"], "tenant-a");
//! assert!(!event.records[2].attributes.contains_key("SequenceNumber"));
//!
//! let fifo_batch = sqs::event_json(&[fifo("f-1", "g", "a"), fifo("f-2", "g", "b")]);
//! let first = &fifo_batch["Records"][0]["attributes"];
//! assert_eq!(first["MessageDeduplicationId"], "f-1");
//! assert!(first["SequenceNumber"].is_string());
//! ```
//!
//! # Reading the answer
//!
//! [`failed_ids`] lists the `itemIdentifier`s of a partial batch response (`SqsBatchResponse`),
//! checking on the way that none is empty: an empty one makes Lambda fail, and redeliver, the
//! whole batch.

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{Context, LambdaEvent};
use md5::{Digest, Md5};
use serde_json::{Map, Value, json};

/// The ARN of the standard queue records are built with.
pub const STANDARD_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:q";
/// The ARN of the FIFO queue [`fifo`] records come from.
pub const FIFO_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:q.fifo";

/// The first `SequenceNumber` of a built FIFO batch: SQS's are 20-digit decimal strings, larger
/// than `u64::MAX`, which is exactly what a consumer parsing them as `u64` must survive.
const FIRST_SEQUENCE: u128 = 18_000_000_000_000_000_000;

/// One SQS record in the wire shape of Lambda's SQS event source. Build it with [`record`],
/// [`fifo`] or [`fair`], adjust it with the methods, and turn a slice of records into an event
/// with [`event_json`], [`sqs_event`] or [`lambda_event`].
///
/// Fields it fills in as Lambda does: `receiptHandle` (per position), `md5OfBody` (the body's
/// MD5, hex), `attributes` (`ApproximateReceiveCount`, `SentTimestamp`, `SenderId`,
/// `ApproximateFirstReceiveTimestamp`, and the FIFO ones when set), `messageAttributes`,
/// `eventSource`, `eventSourceARN`, `awsRegion`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    id: Option<String>,
    body: String,
    arn: String,
    group: Option<String>,
    dedup: Option<String>,
    sequence: Option<String>,
    receive_count: u32,
    trace_header: Option<String>,
    msg_attrs: Map<String, Value>,
}

/// A standard-queue record with this message id and body (first receive).
pub fn record(id: &str, body: &str) -> Record {
    Record {
        id: Some(id.to_owned()),
        body: body.to_owned(),
        arn: STANDARD_ARN.to_owned(),
        group: None,
        dedup: None,
        sequence: None,
        receive_count: 1,
        trace_header: None,
        msg_attrs: Map::new(),
    }
}

/// A FIFO record: the FIFO source ARN, this `MessageGroupId`, the message id as
/// `MessageDeduplicationId`, and a `SequenceNumber` that grows with the record's position in
/// the batch (set one with [`Record::sequence_number`]).
pub fn fifo(id: &str, group: &str, body: &str) -> Record {
    record(id, body).arn(FIFO_ARN).group(group).dedup(id)
}

/// A fair-queue record: a standard queue's ARN with a `MessageGroupId` (the tenant), and no
/// FIFO attributes. Such a batch is processed as a standard one: the group id only spreads
/// load.
pub fn fair(id: &str, group: &str, body: &str) -> Record {
    record(id, body).group(group)
}

impl Record {
    /// Without a `messageId` field at all (a malformed record).
    pub fn no_id(mut self) -> Self {
        self.id = None;
        self
    }

    /// A different source ARN (`eventSourceARN`). One ending in `.fifo` gets a
    /// `SequenceNumber`.
    pub fn arn(mut self, arn: &str) -> Self {
        self.arn = arn.to_owned();
        self
    }

    /// A `MessageGroupId` attribute.
    pub fn group(mut self, group: &str) -> Self {
        self.group = Some(group.to_owned());
        self
    }

    /// A `MessageDeduplicationId` attribute.
    pub fn dedup(mut self, dedup: &str) -> Self {
        self.dedup = Some(dedup.to_owned());
        self
    }

    /// This `SequenceNumber` instead of the one derived from the record's position (FIFO
    /// records only get one by default; this sets it on any record).
    pub fn sequence_number(mut self, sequence: &str) -> Self {
        self.sequence = Some(sequence.to_owned());
        self
    }

    /// `ApproximateReceiveCount`: 1 for a first delivery (the default), more for a message
    /// redelivered after a failure or a visibility timeout.
    pub fn receive_count(mut self, count: u32) -> Self {
        self.receive_count = count;
        self
    }

    /// The `AWSTraceHeader` system attribute: the producer's X-Ray trace, as SQS passes it on
    /// (`Root=1-...;Parent=...;Sampled=1`).
    pub fn trace_header(mut self, header: &str) -> Self {
        self.trace_header = Some(header.to_owned());
        self
    }

    /// A string message attribute (`messageAttributes.NAME`, `dataType` `String`).
    pub fn attr(mut self, name: &str, value: &str) -> Self {
        self.msg_attrs.insert(
            name.to_owned(),
            json!({
                "stringValue": value,
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": "String"
            }),
        );
        self
    }

    /// A message attribute of another data type, `Number` (`ExtendedPayloadSize`) or a custom
    /// one (`String.w3c`), its value as text (`stringValue`).
    pub fn typed_attr(mut self, name: &str, data_type: &str, value: &str) -> Self {
        self.msg_attrs.insert(
            name.to_owned(),
            json!({
                "stringValue": value,
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": data_type
            }),
        );
        self
    }

    /// The message id, if it has one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The body.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The record as Lambda sends it, at `position` in its batch (which sets the receipt handle
    /// and a FIFO record's default `SequenceNumber`).
    pub fn to_json(&self, position: usize) -> Value {
        let mut attributes = Map::new();
        attributes.insert(
            "ApproximateReceiveCount".into(),
            json!(self.receive_count.to_string()),
        );
        attributes.insert("SentTimestamp".into(), json!("1732000000000"));
        attributes.insert("SenderId".into(), json!("AIDAEXAMPLE"));
        attributes.insert(
            "ApproximateFirstReceiveTimestamp".into(),
            json!("1732000000001"),
        );
        if let Some(g) = &self.group {
            attributes.insert("MessageGroupId".into(), json!(g));
        }
        if let Some(d) = &self.dedup {
            attributes.insert("MessageDeduplicationId".into(), json!(d));
        }
        if let Some(t) = &self.trace_header {
            attributes.insert("AWSTraceHeader".into(), json!(t));
        }
        let sequence = self.sequence.clone().or_else(|| {
            self.arn
                .ends_with(".fifo")
                .then(|| (FIRST_SEQUENCE + position as u128).to_string())
        });
        if let Some(s) = sequence {
            attributes.insert("SequenceNumber".into(), json!(s));
        }
        let md5: String = Md5::digest(self.body.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut record = json!({
            "receiptHandle": format!("AQEB-receipt-{position}"),
            "body": self.body,
            "attributes": attributes,
            "messageAttributes": self.msg_attrs,
            "md5OfBody": md5,
            "eventSource": "aws:sqs",
            "eventSourceARN": self.arn,
            "awsRegion": "us-east-1"
        });
        if let Some(id) = &self.id {
            record["messageId"] = json!(id);
        }
        record
    }
}

/// The event JSON for these records, `{"Records": [...]}`, as Lambda posts it to the function.
pub fn event_json(records: &[Record]) -> Value {
    let records: Vec<Value> = records
        .iter()
        .enumerate()
        .map(|(i, r)| r.to_json(i))
        .collect();
    json!({ "Records": records })
}

/// The event, parsed from its wire JSON.
///
/// # Panics
///
/// Never for records built here: every field is a string of the type `SqsEvent` expects.
pub fn sqs_event(records: &[Record]) -> SqsEvent {
    match serde_json::from_value(event_json(records)) {
        Ok(event) => event,
        Err(e) => panic!("a built SQS event must parse as SqsEvent: {e}"),
    }
}

/// The event with a default `Context` (no deadline: `Context::deadline` is 0), as a
/// `tower::Service<LambdaEvent<SqsEvent>>` handler is called.
pub fn lambda_event(records: &[Record]) -> LambdaEvent<SqsEvent> {
    lambda_event_with_deadline(records, 0)
}

/// The event with `Context::deadline` set to `deadline_ms` (epoch milliseconds, as Lambda's
/// `Lambda-Runtime-Deadline-Ms`; 0 means none).
pub fn lambda_event_with_deadline(records: &[Record], deadline_ms: u64) -> LambdaEvent<SqsEvent> {
    let mut context = Context::default();
    context.deadline = deadline_ms;
    LambdaEvent::new(sqs_event(records), context)
}

/// The `itemIdentifier`s of a partial batch response, in order.
///
/// # Panics
///
/// If one is empty: Lambda answers an empty (or unknown) `itemIdentifier` by failing the whole
/// batch, so a consumer that returns one has a bug the test should report.
///
/// ```
/// use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse};
///
/// let mut failure = BatchItemFailure::default();
/// failure.item_identifier = "m-2".into();
/// let mut response = SqsBatchResponse::default();
/// response.batch_item_failures.push(failure);
/// assert_eq!(sqs_claim_testkit::sqs::failed_ids(&response), ["m-2"]);
/// ```
pub fn failed_ids(response: &SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| {
            assert!(
                !f.item_identifier.is_empty(),
                "empty itemIdentifier in {response:?}"
            );
            f.item_identifier.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_of_body_is_the_bodys_md5() {
        // SQS's md5OfBody for an empty body.
        assert_eq!(
            record("m", "").to_json(0)["md5OfBody"],
            "d41d8cd98f00b204e9800998ecf8427e"
        );
    }

    #[test]
    fn only_fifo_records_get_sequence_numbers() {
        let event = event_json(&[record("a", ""), fair("b", "g", ""), fifo("c", "g", "")]);
        let attrs = |i: usize| event["Records"][i]["attributes"].clone();
        assert!(attrs(0).get("SequenceNumber").is_none());
        assert!(attrs(1).get("SequenceNumber").is_none());
        assert_eq!(attrs(1)["MessageGroupId"], "g");
        assert_eq!(attrs(2)["SequenceNumber"], "18000000000000000002");
        assert_eq!(event["Records"][2]["eventSourceARN"], FIFO_ARN);
    }

    #[test]
    fn a_record_without_id_has_no_message_id_field() {
        let json = record("m", "").no_id().to_json(0);
        assert!(json.get("messageId").is_none());
    }
}
