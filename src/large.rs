//! Large messages through S3, read and written as the Amazon SQS Extended Client does.
//!
//! *Feature `s3`.*
//!
//! SQS takes at most 1 MiB per message since 2025-08-04 (as a queue's `MaximumMessageSize`
//! allows; SNS topics stay at 256 KiB unless raised). The extended clients (Java's
//! `amazon-sqs-java-extended-client-lib`, Python's `amazon-sqs-extended-client`, and the SNS
//! extended clients publishing through SNS) put a larger payload in S3 and send a pointer to
//! it instead: the body
//!
//! ```text
//! ["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"B","s3Key":"K"}]
//! ```
//!
//! with the message attribute `ExtendedPayloadSize` giving the payload's size in bytes (older
//! clients, and the current ones in their legacy mode: `SQSLargePayloadSize`, and the class
//! `com.amazon.sqs.javamessaging.MessageS3Pointer`; both are read). With [`LargeMessages`] set on the processor
//! ([`ProcessorBuilder::large_messages`](crate::ProcessorBuilder::large_messages)):
//!
//! * **Read.** A record that carries the attribute (on the SQS message, or, under
//!   [`Envelope::Sns`], in the SNS notification's `MessageAttributes`, where the SNS extended
//!   client puts it, with the pointer in `Message`) has its object fetched from S3 before the
//!   batch is planned, inside the invocation's time budget, several at once. The object is the
//!   payload: the key ([`KeySource::JsonPointer`](crate::KeySource::JsonPointer),
//!   [`KeySource::BodySha256`](crate::KeySource::BodySha256)), the payload check and the
//!   handler ([`Message::payload`](crate::Message::payload), [`Message::json`](crate::Message::json))
//!   all read it, as they read an envelope's payload; [`Message::body`](crate::Message::body)
//!   stays the pointer.
//! * **Buckets.** The sender names the bucket. With [`LargeMessages::allowed_buckets`], a
//!   pointer to any other bucket is not fetched: its message fails for good, the reason naming
//!   the bucket.
//! * **Failures.** An object that does not exist (`NoSuchKey`, `NoSuchBucket`), one larger than
//!   [`LargeMessages::max_bytes`] (by its attribute or by S3's answer), a payload that is not
//!   UTF-8, a pointer to a bucket not allowed, or a body with the attribute that is not a
//!   pointer fails that message alone, as a
//!   permanent [`FailureKind::LargePayload`] failure (with
//!   the failure destination's at-once policy, it goes to the failure queue at once, with its
//!   reason). S3 not answering, throttling or failing on its side (after the S3 client's own
//!   retries) fails it as a transient `large_payload`: it is reported for retry and comes back,
//!   as with a store outage. A fetch still running at the hard stop is cut off. Reasons name
//!   the bucket and the object's key, never the payload.
//! * **Delete** ([`LargeMessages::delete_after_completion`], off by default). The object is
//!   deleted after the batch, once its message's completion was committed, or once its
//!   message was skipped as a duplicate of a key already done (a producer's resend through an
//!   extended client uploads an object of its own, which nothing else would delete); never
//!   for a failed message, and once per object. A redelivery of a message already done whose
//!   object went with the first copy has nothing to fetch: it is skipped without it (see
//!   below). A delete that fails is logged; the message stays done. Under Lambda nothing else
//!   deletes the object (the event source mapping deletes the message, not the object):
//!   without this, or an S3 lifecycle rule on the bucket, the objects stay.
//!
//! With deletion on, key the messages on something the record carries (`message-id`, an
//! attribute, `envelope-id`): a redelivery of a message already done then finds its key
//! completed and is skipped as a duplicate without its object. A key read from the payload
//! cannot be read once the object is gone: such a redelivery fails as `large_payload` (object
//! missing), permanently.
//!
//! The publisher offloads the same way ([`Publisher::offload_to`](crate::Publisher::offload_to),
//! features `sqs` and `s3`), so the extended clients read what it sends.

use std::fmt;
use std::sync::Arc;

use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use futures::stream::{self, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::deadline::Budget;
use crate::envelope::Envelope;
use crate::outcome::{Failure, FailureKind};

/// The first element of a pointer body.
pub(crate) const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";
/// The first element of a pointer body as older clients write it (with `SQSLargePayloadSize`).
const LEGACY_POINTER_CLASS: &str = "com.amazon.sqs.javamessaging.MessageS3Pointer";
/// The attribute the extended clients set on an offloaded message: the payload's size.
pub(crate) const SIZE_ATTRIBUTE: &str = "ExtendedPayloadSize";
/// The same attribute, as older clients name it.
pub(crate) const LEGACY_SIZE_ATTRIBUTE: &str = "SQSLargePayloadSize";
/// [`LargeMessages::max_bytes`]' default: 32 MiB.
const DEFAULT_MAX_BYTES: u64 = 32 * 1024 * 1024;
/// How many objects of a batch are fetched (or deleted) at once.
pub(crate) const FETCH_CONCURRENCY: usize = 16;

/// Reads the payloads the SQS (and SNS) extended clients offload to S3, and optionally deletes
/// them once their message is done: see the [module docs](self). Set it on the processor with
/// [`ProcessorBuilder::large_messages`](crate::ProcessorBuilder::large_messages). Cheap to
/// clone.
///
/// *Feature `s3`.*
///
/// ```no_run
/// use sqs_claim::large::LargeMessages;
/// use sqs_claim::{KeySource, MemoryStore, Message, Processor};
///
/// # async fn run() {
/// let config = sqs_claim::aws::load_config().await;
/// let handler = tower::service_fn(|msg: Message| async move {
///     let order: serde_json::Value = msg.json()?; // the object's JSON, not the pointer
///     # let _ = order;
///     Ok::<(), sqs_claim::Error>(())
/// });
/// let processor = Processor::builder(MemoryStore::new(), handler)
///     .key(KeySource::MessageId)
///     .large_messages(
///         LargeMessages::new(sqs_claim::aws::s3_client(&config))
///             .max_bytes(8 * 1024 * 1024)
///             .delete_after_completion(true),
///     )
///     .build();
/// # let _ = processor;
/// # }
/// ```
#[derive(Clone)]
pub struct LargeMessages {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    client: aws_sdk_s3::Client,
    max_bytes: u64,
    delete: bool,
    /// The buckets a pointer may name; empty for any.
    buckets: Vec<String>,
}

impl fmt::Debug for LargeMessages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LargeMessages")
            .field("max_bytes", &self.inner.max_bytes)
            .field("delete_after_completion", &self.inner.delete)
            .field("allowed_buckets", &self.inner.buckets)
            .finish_non_exhaustive()
    }
}

impl LargeMessages {
    /// Reads pointers with `client` (give it path-style addressing for a local endpoint:
    /// [`aws::s3_client`](crate::aws::s3_client) does). Defaults: at most 32 MiB per payload,
    /// objects kept.
    pub fn new(client: aws_sdk_s3::Client) -> Self {
        LargeMessages {
            inner: Arc::new(Inner {
                client,
                max_bytes: DEFAULT_MAX_BYTES,
                delete: false,
                buckets: Vec::new(),
            }),
        }
    }

    /// The largest payload fetched, in bytes: a message whose `ExtendedPayloadSize`, or whose
    /// object, is larger fails as a permanent `large_payload` without being read (the whole
    /// payload is held in memory, beside the batch's others). Default: 32 MiB.
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        Arc::make_mut(&mut self.inner).max_bytes = bytes;
        self
    }

    /// Whether each object is deleted once its message's completion is committed (see the
    /// [module docs](self)). Default: off. Needs `s3:DeleteObject` on the bucket.
    pub fn delete_after_completion(mut self, on: bool) -> Self {
        Arc::make_mut(&mut self.inner).delete = on;
        self
    }

    /// The only buckets a pointer may name. The sender chooses the bucket a pointer names: a
    /// pointer to any other fails its message for good (a permanent `large_payload` naming
    /// the bucket) without a call to S3, so a sender cannot make the consumer read, or
    /// delete, objects of a bucket its role reaches for other reasons. Default: empty, any
    /// bucket (the role's `s3:GetObject` grant is then the only limit).
    ///
    /// ```no_run
    /// # fn demo(client: aws_sdk_s3::Client) {
    /// use sqs_claim::large::LargeMessages;
    /// let large = LargeMessages::new(client).allowed_buckets(["payments-large-payloads"]);
    /// # let _ = large;
    /// # }
    /// ```
    pub fn allowed_buckets<I, B>(mut self, buckets: I) -> Self
    where
        I: IntoIterator<Item = B>,
        B: Into<String>,
    {
        Arc::make_mut(&mut self.inner).buckets = buckets.into_iter().map(Into::into).collect();
        self
    }

    /// Whether a pointer may name `bucket` ([`allowed_buckets`](Self::allowed_buckets)).
    fn allows(&self, bucket: &str) -> bool {
        self.inner.buckets.is_empty() || self.inner.buckets.iter().any(|b| b == bucket)
    }

    /// Whether objects are deleted after completion.
    pub(crate) fn deletes(&self) -> bool {
        self.inner.delete
    }

    /// The step after the batch that deletes the objects of the messages done.
    /// The S3 client, for the step that deletes the objects (`processor/cleanup.rs`).
    pub(crate) fn client(&self) -> &aws_sdk_s3::Client {
        &self.inner.client
    }

    /// Fetches the payload of every record of `records` that is a pointer (see the module
    /// docs), several at once, each inside `budget`: one entry per record, `None` for a record
    /// that is not a pointer. An empty list when no record is.
    pub(crate) async fn fetch_batch(
        &self,
        records: &[crate::record::Record],
        envelope: Envelope,
        budget: &Budget,
    ) -> Vec<Option<Fetched>> {
        let pointers: Vec<Option<Result<Pointer, Failure>>> = records
            .iter()
            .map(|r| find_pointer(&r.message, envelope))
            .collect();
        if pointers.iter().all(Option::is_none) {
            return Vec::new();
        }
        // Unordered, then put back in place: one slow object must not hold back the fetches
        // behind it (`buffered` keeps a finished fetch's place in the window until every one
        // before it finished).
        let n = pointers.len();
        let mut fetched: Vec<Option<Fetched>> = (0..n).map(|_| None).collect();
        let mut done = stream::iter(pointers.into_iter().enumerate())
            .map(|(index, p)| async move {
                let out = match p? {
                    Err(failure) => Fetched::Failed(failure),
                    Ok(pointer) => self.fetch(pointer, budget).await,
                };
                Some((index, out))
            })
            .buffer_unordered(FETCH_CONCURRENCY);
        while let Some(next) = done.next().await {
            if let Some((index, out)) = next {
                fetched[index] = Some(out);
            }
        }
        fetched
    }

    /// Fetches one object, inside `budget` and under the size limit.
    async fn fetch(&self, pointer: Pointer, budget: &Budget) -> Fetched {
        let Pointer { object, declared } = pointer;
        if !self.allows(&object.bucket) {
            return Fetched::Failed(permanent(format!(
                "the S3 pointer names the bucket {:?}, which is not one of the allowed buckets \
                 ({}); not fetched",
                object.bucket,
                self.inner.buckets.join(", ")
            )));
        }
        let max = self.inner.max_bytes;
        if let Some(size) = declared
            && size > max
        {
            return Fetched::Failed(permanent(format!(
                "the payload offloaded to S3 ({object}) is {size} bytes by its \
                 {SIZE_ATTRIBUTE} attribute, over the limit of {max} bytes; not fetched"
            )));
        }
        if !budget.may_start() {
            return Fetched::Failed(transient(format!(
                "the payload offloaded to S3 ({object}) was not fetched: the invocation's time \
                 budget was spent"
            )));
        }
        match budget.bounded(self.get(&object)).await {
            Ok(Ok(text)) => Fetched::Payload { text, object },
            Ok(Err(failure)) => Fetched::Failed(failure),
            Err(_) => Fetched::Failed(transient(format!(
                "fetching the payload offloaded to S3 ({object}) was cut off by the \
                 invocation's time budget"
            ))),
        }
    }

    async fn get(&self, object: &ObjectRef) -> Result<String, Failure> {
        let max = self.inner.max_bytes;
        let answer = self
            .inner
            .client
            .get_object()
            .bucket(&object.bucket)
            .key(&object.key)
            .send()
            .await;
        let output = match answer {
            Ok(output) => output,
            Err(e) => return Err(get_failed(object, &e)),
        };
        if let Some(len) = output.content_length()
            && u64::try_from(len).is_ok_and(|len| len > max)
        {
            return Err(permanent(format!(
                "the payload offloaded to S3 ({object}) is {len} bytes, over the limit of {max} \
                 bytes; not read"
            )));
        }
        let mut body = output.body;
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            match body.try_next().await {
                Ok(Some(chunk)) => {
                    if (bytes.len() + chunk.len()) as u64 > max {
                        return Err(permanent(format!(
                            "the payload offloaded to S3 ({object}) is over the limit of {max} \
                             bytes; not read"
                        )));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(transient(format!(
                        "reading the payload offloaded to S3 ({object}) failed: {e}"
                    )));
                }
            }
        }
        String::from_utf8(bytes).map_err(|e| {
            permanent(format!(
                "the payload offloaded to S3 ({object}) is not UTF-8 text (invalid byte at \
                 offset {})",
                e.utf8_error().valid_up_to()
            ))
        })
    }
}

/// An S3 object named by a pointer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ObjectRef {
    pub(crate) bucket: String,
    pub(crate) key: String,
}

impl fmt::Display for ObjectRef {
    /// `s3://bucket/key`, for reasons and log lines (a pointer names no payload).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// What a record's pointer led to.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// The object's text, which is the message's payload.
    Payload { text: String, object: ObjectRef },
    /// Why there is no payload: permanent (missing, too large, not a pointer) or not.
    Failed(Failure),
}

/// A pointer found in a record.
struct Pointer {
    object: ObjectRef,
    /// The payload's size by the record's attribute, when it reads as a number.
    declared: Option<u64>,
}

/// The record's pointer, if it is an extended client's message: `None` when it is not (no
/// size attribute), an error when it carries the attribute but no pointer.
fn find_pointer(record: &SqsMessage, envelope: Envelope) -> Option<Result<Pointer, Failure>> {
    let body = record.body.as_deref().unwrap_or("");
    if let Some(declared) = sqs_size_attribute(record) {
        return Some(parse_pointer(body, declared, "body"));
    }
    if envelope == Envelope::Sns {
        // The SNS extended client: the notification's `MessageAttributes` carry the size, its
        // `Message` the pointer. A body that is not a notification is not a pointer.
        let sns: SnsNotification<'_> = serde_json::from_str(body).ok()?;
        let attributes = sns.attributes?;
        let declared = [SIZE_ATTRIBUTE, LEGACY_SIZE_ATTRIBUTE]
            .iter()
            .find_map(|name| attributes.get(*name))
            .map(|a| a.value.as_deref().and_then(|v| v.trim().parse().ok()))?;
        let message = sns
            .message
            .and_then(|m| crate::pointer::string_contents(m.get()).ok().flatten());
        return Some(match message {
            Some(message) => parse_pointer(&message, declared, "SNS Message"),
            None => Err(permanent(format!(
                "the SNS notification carries the {SIZE_ATTRIBUTE} attribute but no Message \
                 string"
            ))),
        });
    }
    None
}

/// The size attribute of an SQS record: `Some(size)` when it has one (`Some(None)` when it
/// does not read as a number).
fn sqs_size_attribute(record: &SqsMessage) -> Option<Option<u64>> {
    [SIZE_ATTRIBUTE, LEGACY_SIZE_ATTRIBUTE]
        .iter()
        .find_map(|name| record.message_attributes.get(*name))
        .map(|a| {
            a.string_value
                .as_deref()
                .and_then(|v| v.trim().parse().ok())
        })
}

fn parse_pointer(text: &str, declared: Option<u64>, what: &str) -> Result<Pointer, Failure> {
    #[derive(Deserialize)]
    struct Fields {
        #[serde(rename = "s3BucketName")]
        bucket: String,
        #[serde(rename = "s3Key")]
        key: String,
    }
    let parsed: Result<(String, Fields), _> = serde_json::from_str(text);
    match parsed {
        Ok((class, Fields { bucket, key }))
            if (class == POINTER_CLASS || class == LEGACY_POINTER_CLASS)
                && !bucket.is_empty()
                && !key.is_empty() =>
        {
            Ok(Pointer {
                object: ObjectRef { bucket, key },
                declared,
            })
        }
        _ => Err(permanent(format!(
            "the message carries the {SIZE_ATTRIBUTE} attribute of an extended client, but its \
             {what} is not an S3 pointer ([\"{POINTER_CLASS}\", {{\"s3BucketName\": ..., \
             \"s3Key\": ...}}])"
        ))),
    }
}

#[derive(Deserialize)]
struct SnsNotification<'a> {
    #[serde(rename = "Message", borrow)]
    message: Option<&'a RawValue>,
    #[serde(rename = "MessageAttributes")]
    attributes: Option<std::collections::HashMap<String, SnsAttribute>>,
}

#[derive(Deserialize)]
struct SnsAttribute {
    #[serde(rename = "Value")]
    value: Option<String>,
}

fn permanent(message: String) -> Failure {
    let mut failure = Failure::new(FailureKind::LargePayload, message);
    failure.permanent = true;
    failure
}

fn transient(message: String) -> Failure {
    Failure::new(FailureKind::LargePayload, message)
}

/// A failed `GetObject`: permanent when the object or its bucket does not exist, transient
/// otherwise (the client already retried what it retries).
fn get_failed(
    object: &ObjectRef,
    e: &SdkError<
        aws_sdk_s3::operation::get_object::GetObjectError,
        aws_sdk_s3::config::http::HttpResponse,
    >,
) -> Failure {
    let code = e.code().unwrap_or("");
    let status = e.raw_response().map(|r| r.status().as_u16());
    let missing = e.as_service_error().is_some_and(|s| s.is_no_such_key())
        || matches!(code, "NoSuchKey" | "NoSuchBucket")
        || (matches!(e, SdkError::ServiceError(_)) && status == Some(404));
    if missing {
        return permanent(format!(
            "the payload offloaded to S3 ({object}) does not exist ({}): deleted before the \
             message was read, or never written",
            if code.is_empty() { "404" } else { code }
        ));
    }
    transient(format!(
        "the payload offloaded to S3 ({object}) could not be fetched: {}",
        crate::error::Chain(e)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::sqs::SqsMessageAttribute;

    fn record(body: &str, attribute: Option<(&str, &str)>) -> SqsMessage {
        let mut r = SqsMessage::default();
        r.message_id = Some("m-1".into());
        r.body = Some(body.into());
        if let Some((name, value)) = attribute {
            let mut a = SqsMessageAttribute::default();
            a.string_value = Some(value.into());
            a.data_type = Some("Number".into());
            r.message_attributes.insert(name.into(), a);
        }
        r
    }

    const POINTER: &str = r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k-1"}]"#;

    #[test]
    fn pointers_are_recognised_by_either_attribute() {
        for name in [SIZE_ATTRIBUTE, LEGACY_SIZE_ATTRIBUTE] {
            let p = find_pointer(&record(POINTER, Some((name, "300000"))), Envelope::None)
                .unwrap()
                .ok()
                .unwrap();
            assert_eq!(p.object.bucket, "b");
            assert_eq!(p.object.key, "k-1");
            assert_eq!(p.declared, Some(300000));
        }
        // No attribute: the body is the payload, even if it looks like a pointer.
        assert!(find_pointer(&record(POINTER, None), Envelope::None).is_none());
    }

    #[test]
    fn sns_extended_pointer_in_the_notification() {
        let message = serde_json::to_string(POINTER).unwrap();
        let body = format!(
            r#"{{"Type":"Notification","MessageId":"sns-1","Message":{message},"MessageAttributes":{{"ExtendedPayloadSize":{{"Type":"Number","Value":"2000000"}}}}}}"#
        );
        let p = find_pointer(&record(&body, None), Envelope::Sns)
            .unwrap()
            .ok()
            .unwrap();
        assert_eq!(p.object.key, "k-1");
        assert_eq!(p.declared, Some(2_000_000));
        // The same notification without the attribute is an ordinary one.
        let plain = format!(r#"{{"Type":"Notification","MessageId":"sns-1","Message":{message}}}"#);
        assert!(find_pointer(&record(&plain, None), Envelope::Sns).is_none());
    }

    #[test]
    fn a_body_with_the_attribute_that_is_no_pointer_fails_for_good_without_quoting_it() {
        for body in [
            "secret text",
            r#"["another.Class",{"s3BucketName":"b","s3Key":"k"}]"#,
            r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"secret":1}]"#,
        ] {
            let failure = find_pointer(&record(body, Some((SIZE_ATTRIBUTE, "9"))), Envelope::None)
                .unwrap()
                .err()
                .unwrap();
            assert_eq!(failure.kind, FailureKind::LargePayload);
            assert!(failure.permanent);
            assert!(!failure.message.contains("secret"), "{}", failure.message);
        }
    }
}
