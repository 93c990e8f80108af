//! Deduplication ids: derived from the input's key and the output's label, so a retried
//! handler sends the same ids.

use std::fmt;

use sha2::{Digest, Sha256};

use super::Outgoing;

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
/// `key` is the input's idempotency key as the handler sees it
/// ([`Message::key`](crate::Message::key), namespace included). Deterministic: a retried
/// handler derives the same ids. Use it if you send with your own code; the formula is stable,
/// and the same in any language.
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

/// Labels in push order: unnamed outputs count positions, named ones carry their name.
pub(super) fn labels(outputs: &[Outgoing]) -> Vec<OutputLabel> {
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
