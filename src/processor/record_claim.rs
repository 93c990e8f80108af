//! [`RecordClaim`]: one record of a captured batch as the processor would claim it, for an
//! operator's tool (`crate::inspect` fills it in; `sqs-claim inspect --event` reads it).

use crate::PayloadCheck;
use crate::claim::PayloadVerdict;

/// One record of a captured batch as the processor (or stream consumer) would claim it
/// ([`ProcessorBuilder::record_claims`](super::ProcessorBuilder::record_claims)): its stored key, its payload fingerprint, and whether
/// it is a later copy of a key an earlier record of the batch carries.
///
/// [`judge`](Self::judge) says what the processor would do with it when its key is found done:
/// the verdict of the processor's own [`PayloadCheck`], on the fingerprint the processor itself
/// would store and compare (for a stream record, the payload its source names: a DynamoDB
/// Streams record's image, see docs/streams.md).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordClaim {
    /// The stored key (namespace included), as the processor claims it.
    pub key: String,
    /// The payload fingerprint the processor stores with the claim and compares with a stored
    /// one; `None` when the [`PayloadCheck`] is off or the key format fingerprints nothing.
    pub fingerprint: Option<String>,
    /// The index (in batch order) of the batch's first record with the same key, when this
    /// record is a later copy of it: it does not claim, it follows that record's outcome and is
    /// judged against its fingerprint.
    pub copy_of: Option<usize>,
    pub(crate) check: PayloadCheck,
}

impl RecordClaim {
    /// What the processor does with this record when its key is found done with the payload
    /// fingerprint `theirs` (a completed claim's
    /// [`ClaimRecord::fingerprint`](crate::store::ClaimRecord::fingerprint), or, for a later
    /// copy, the [`fingerprint`](Self::fingerprint) of the record it copies): skips it as a
    /// duplicate ([`PayloadVerdict::Same`], [`PayloadVerdict::Tolerated`]) or fails it
    /// ([`PayloadVerdict::Refused`]), under the builder's [`PayloadCheck`].
    pub fn judge(&self, theirs: Option<&str>) -> PayloadVerdict {
        self.check.judge(self.fingerprint.as_deref(), theirs)
    }
}
