//! Checks made before any call: group ids, sizes, characters, attribute names, unique
//! names. One refused output and nothing is sent.

use std::collections::HashSet;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};

use super::dedup_id::labels;
use super::send::publish_error;
use super::{
    AttributeData, AttributeValue, FailedOutput, MAX_ATTRIBUTES, OutgoingBatch, OutputLabel,
    PublishFailure, deduplication_id,
};
use crate::Error;

/// `MessageGroupId` and `MessageDeduplicationId` are at most 128 characters.
const MAX_ID_CHARS: usize = 128;

/// One output, ready to send.
pub(super) struct Prepared {
    pub(super) label: OutputLabel,
    pub(super) dedup_id: String,
    pub(super) group: Option<String>,
    pub(super) size: usize,
    pub(super) entry: SendMessageBatchRequestEntry,
}

impl OutgoingBatch {
    /// Checks every output and builds the request entries. Nothing is sent if a check fails.
    pub(super) fn prepare(&self) -> Result<Vec<Prepared>, Error> {
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
                attributes.push((
                    name.clone(),
                    AttributeValue::text("String", dedup_id.clone()),
                ));
            }
            if let Some(n) = output.offloaded {
                attributes.push((
                    super::OFFLOAD_ATTRIBUTE.to_owned(),
                    AttributeValue::text("Number", n.to_string()),
                ));
            }
            if attributes.len() > MAX_ATTRIBUTES {
                reject(
                    "TooManyAttributes",
                    format!(
                        "the message has {} message attributes (the id attribute and \
                         ExtendedPayloadSize counted); SQS takes at most {MAX_ATTRIBUTES}",
                        attributes.len()
                    ),
                );
            }
            let mut seen = HashSet::new();
            for (name, _) in &attributes {
                if !seen.insert(name.as_str()) {
                    reject(
                        "DuplicateAttribute",
                        format!(
                            "the message has the attribute {name:?} twice (the id attribute and \
                             ExtendedPayloadSize counted); SQS takes each name once"
                        ),
                    );
                }
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
                let refused = match &value.data {
                    AttributeData::Text(t) => t.is_empty() || t.chars().any(|c| !sqs_char(c)),
                    AttributeData::Binary(b) => b.is_empty(),
                };
                if refused {
                    reject(
                        "InvalidCharacters",
                        format!("attribute {name:?} is empty or has a character SQS refuses"),
                    );
                }
                if !valid_data_type(&value.data_type) {
                    reject(
                        "InvalidAttribute",
                        format!(
                            "attribute {name:?} has the data type {:?}; SQS takes String, \
                             Number or Binary, each with an optional .suffix",
                            value.data_type
                        ),
                    );
                }
            }
            // `output.size()` counts the offloaded attribute already.
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
                let builder = MessageAttributeValue::builder().data_type(value.data_type);
                let value = match value.data {
                    AttributeData::Text(t) => builder.string_value(t),
                    AttributeData::Binary(b) => builder.binary_value(Blob::new(b)),
                }
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

/// Whether SQS takes `t` as an attribute's data type: `String`, `Number` or `Binary`, alone or
/// with a custom `.suffix` (at most 256 characters in all).
fn valid_data_type(t: &str) -> bool {
    let base = t.split_once('.').map_or(t, |(b, _)| b);
    t.len() <= 256 && !t.ends_with('.') && matches!(base, "String" | "Number" | "Binary")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_characters() {
        assert!(sqs_char('a') && sqs_char('\n') && sqs_char('é') && sqs_char('😀'));
        assert!(!sqs_char('\u{0}') && !sqs_char('\u{8}') && !sqs_char('\u{FFFE}'));
        assert!(valid_attribute_name("trace-id.v1") && !valid_attribute_name("AWS.x"));
        assert!(!valid_attribute_name("a..b") && !valid_attribute_name(""));
        assert!(valid_data_type("Number") && valid_data_type("Binary.gzip"));
        assert!(!valid_data_type("Text") && !valid_data_type("String."));
    }
}
