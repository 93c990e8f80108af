//! Per-message outcomes, and how they become the batch response.
//!
//! This is where a failure becomes an `itemIdentifier`: [`BatchReport::response`] lists the
//! message id of every message whose outcome is not a success, once, in batch order. Successes
//! (processed and duplicate) are left out, which tells Lambda to delete them.

use std::collections::HashSet;
use std::time::SystemTime;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse};
use serde::Serialize;
use serde::ser::SerializeStruct;

use crate::ErrorKind;

/// What happened to one message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler ran and the completion was recorded (or, without effects, the handler ran
    /// and its side effect stands even if recording it failed; see `docs/semantics.md`).
    Processed,
    /// The key was already completed: the handler was skipped. Counts as a success.
    Duplicate,
    /// Another worker holds a live claim on the key. Reported as a failure, so SQS redelivers
    /// it after the visibility timeout, when the other worker has finished or its lease lapsed.
    HeldElsewhere {
        /// When the other worker's lease lapses, if known.
        lease_until: Option<SystemTime>,
    },
    /// The message failed and is reported for redelivery.
    Failed(Failure),
    /// The message was not started (deadline, or an earlier failure in its FIFO group or
    /// batch) and is reported for redelivery.
    NotStarted(NotStarted),
    /// The invocation's time budget ran out while this message was at `step`; it is reported
    /// for redelivery. What that means for its claim depends on the step (see [`Step`]).
    CutOff(Step),
    /// The message failed on its last allowed receive and was sent, with this failure as its
    /// reason, to the processor's failure destination (feature `sqs`,
    /// `ProcessorBuilder::failure_destination`). Reported handled: Lambda deletes it from the
    /// source queue, and the failure queue holds it.
    DeadLettered(Failure),
}

/// Where a message was when the invocation's time budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Step {
    /// Claiming: the claim may or may not have been written. If it was, it is held until its
    /// lease lapses (never after the invocation's deadline); nothing ran.
    Claim,
    /// The handler was running and was cancelled. It may have reached an external service (a
    /// payment provider), so the claim is **kept** until its lease lapses: releasing it at
    /// once would let a redelivery race a call still in flight.
    Handler,
    /// Completing: the completion may or may not have committed (with the handler's effects).
    /// The redelivery finds out: skipped as a duplicate if it did, run again if it did not.
    Completion,
}

impl Step {
    /// A short stable name: `claim`, `handler`, `completion`.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Claim => "claim",
            Step::Handler => "handler",
            Step::Completion => "completion",
        }
    }

    fn explain(self) -> &'static str {
        match self {
            Step::Claim => {
                "time budget ran out while claiming; nothing ran (a claim that landed lapses with \
                 its lease)"
            }
            Step::Handler => {
                "time budget ran out during the handler call; the claim is kept until its lease \
                 lapses, so a redelivery cannot race a call still in flight"
            }
            Step::Completion => {
                "time budget ran out while completing: the completion may or may not have \
                 committed (the redelivery finds out: skipped as a duplicate if it did, run again \
                 if it did not)"
            }
        }
    }
}

impl Outcome {
    /// Whether Lambda should delete the message: processed, duplicate, or sent to the failure
    /// destination.
    pub fn is_success(&self) -> bool {
        matches!(
            self,
            Outcome::Processed | Outcome::Duplicate | Outcome::DeadLettered(_)
        )
    }

    /// The stable name used in reports: `processed`, `duplicate`, `held_elsewhere`, `failed`,
    /// `not_started`, `cut_off`, `dead_lettered`.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Duplicate => "duplicate",
            Outcome::HeldElsewhere { .. } => "held_elsewhere",
            Outcome::Failed(_) => "failed",
            Outcome::NotStarted(_) => "not_started",
            Outcome::CutOff(_) => "cut_off",
            Outcome::DeadLettered(_) => "dead_lettered",
        }
    }

    /// A one-line explanation for failures and skipped messages: the `detail` of the
    /// message's item in [`BatchReport::to_json`].
    pub(crate) fn detail(&self) -> Option<String> {
        match self {
            Outcome::Processed | Outcome::Duplicate => None,
            Outcome::HeldElsewhere { .. } => Some("another worker holds a live claim".into()),
            Outcome::Failed(f) => Some(match f.error_kind {
                // After the category, so scripts reading the `kind:` prefix see no change.
                Some(error_kind) => format!("{}: [{error_kind}] {}", f.kind.as_str(), f.message),
                None => format!("{}: {}", f.kind.as_str(), f.message),
            }),
            Outcome::NotStarted(r) => Some(r.as_str().into()),
            Outcome::CutOff(step) => Some(format!("{}: {}", step.as_str(), step.explain())),
            Outcome::DeadLettered(f) => Some(format!(
                "sent to the failure destination {}; {}",
                if f.permanent {
                    "at once (a permanent failure)"
                } else {
                    "after its last allowed receive"
                },
                Outcome::Failed(f.clone()).detail().unwrap_or_default()
            )),
        }
    }
}

/// Why a message failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// The category.
    pub kind: FailureKind,
    /// A human-readable explanation (never the body).
    pub message: String,
    /// For a [`FailureKind::Handler`] failure, the handler's own [`ErrorKind`] when its error
    /// is (or was caused by) a [`crate::Error`]: a [`ErrorKind::BadBody`] from
    /// [`Message::json`](crate::Message::json) tells a poison message from a downstream outage.
    /// The report's `detail` shows it in brackets: `handler_error: [bad_body] ...`.
    pub error_kind: Option<ErrorKind>,
    /// The delay the handler asked for before the message comes back
    /// ([`Retry::after`](crate::Retry::after)), used by `Redelivery` (feature `sqs`)
    /// instead of its backoff.
    pub retry_after: Option<std::time::Duration>,
    /// Whether the failure is known to be permanent: marked by the handler
    /// ([`Retry::permanent`](crate::Retry::permanent)), or, once the message went to the
    /// failure destination at once, counted permanent by its `Permanent` policy.
    pub permanent: bool,
    /// Whether this message's claim is kept until its lease lapses (a handler cancelled by
    /// `handler_timeout` under a claim): `Redelivery` brings it back just after that.
    pub(crate) claim_kept: bool,
}

impl Failure {
    pub(crate) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            error_kind: None,
            retry_after: None,
            permanent: false,
            claim_kept: false,
        }
    }

    /// The same failure with the handler's retry hints (for a later copy of a key, which
    /// follows its leader's failure).
    pub(crate) fn with_hints_of(mut self, other: &Failure) -> Self {
        self.error_kind = other.error_kind;
        self.retry_after = other.retry_after;
        self.permanent = other.permanent;
        self
    }

    pub(crate) fn with_error_kind(mut self, error_kind: Option<ErrorKind>) -> Self {
        self.error_kind = error_kind;
        self
    }
}

/// The category of a [`Failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The handler returned an error. The claim was released. The handler's own
    /// [`ErrorKind`], if it returned a [`crate::Error`], is in [`Failure::error_kind`].
    Handler,
    /// The handler panicked. The panic was caught, the claim released. (The idempotency layer
    /// answers [`ErrorKind::Panicked`] for the same.)
    Panicked,
    /// The message lacks the configured idempotency key.
    MissingKey,
    /// The key was completed before with a different payload fingerprint.
    PayloadMismatch,
    /// The store could not be reached (fail-closed: nothing ran).
    StoreUnavailable,
    /// The store refused the request (misconfiguration: a missing table, say).
    StoreRejected,
    /// Every write of the message met contention (another write on one of its items in
    /// flight: a hot item, written from several invocations at once) until the contention
    /// retries or the time budget ran out. Nothing was written; the redelivery tries again.
    Contention,
    /// The store refused one of the handler's atomic effects; nothing was committed.
    EffectRejected,
    /// The claim was taken over by another worker before the completion, and the handler's
    /// effects were therefore not committed.
    LostClaim,
    /// The handler ran longer than the processor's `handler_timeout` and was cancelled. Like a
    /// handler cut off by the deadline, its claim is kept until its lease lapses.
    HandlerTimeout,
    /// The payload an extended client offloaded to S3 could not be read (feature `s3`,
    /// [`large`](crate::large)): its object does not exist or is over the size limit, or the
    /// body carries the size attribute but is no pointer ([`Failure::permanent`]); or S3 did
    /// not answer (transient, retried on redelivery). Nothing ran.
    LargePayload,
}

impl FailureKind {
    /// The error kind of the same meaning, for the kinds both taxonomies have (see
    /// `FailureKind::SHARED`); `None` for a failure only a message can have (the handler's
    /// error or timeout).
    ///
    /// ```
    /// use sqs_claim::{ErrorKind, FailureKind};
    /// assert_eq!(FailureKind::Contention.error_kind(), Some(ErrorKind::Contention));
    /// assert_eq!(FailureKind::Panicked.error_kind(), Some(ErrorKind::Panicked));
    /// assert_eq!(FailureKind::HandlerTimeout.error_kind(), None);
    /// ```
    pub fn error_kind(self) -> Option<ErrorKind> {
        FailureKind::SHARED
            .iter()
            .find(|(f, _)| *f == self)
            .map(|(_, e)| *e)
    }

    /// The failure of a message whose *claim* failed with an error of `kind`: the store's
    /// failure, whatever kind the error carries (a store of yours that answers a claim with
    /// `missing_key` must not send the message to the failure queue as if its body were at
    /// fault). The transient kinds of [`From<ErrorKind>`](#impl-From%3CErrorKind%3E-for-FailureKind)
    /// are kept (`store_unavailable`, `contention`); any other is `store_rejected`.
    pub(crate) fn of_claim(kind: ErrorKind) -> FailureKind {
        match FailureKind::from(kind) {
            k @ (FailureKind::StoreUnavailable | FailureKind::Contention) => k,
            _ => FailureKind::StoreRejected,
        }
    }

    /// The relation between the two taxonomies, written once: each failure kind that is also
    /// an [`ErrorKind`], beside it. A message's store step that fails with one of these error
    /// kinds fails the message with the failure kind beside it; with any other, the store
    /// refused the request ([`FailureKind::StoreRejected`]): see
    /// [`From<ErrorKind>`](#impl-From%3CErrorKind%3E-for-FailureKind). The names users see stay
    /// each taxonomy's own ([`FailureKind::as_str`], [`ErrorKind::as_str`]): they are the same
    /// but for [`FailureKind::Panicked`], `handler_panic`, which is `panicked` as an error.
    pub(crate) const SHARED: &'static [(FailureKind, ErrorKind)] = &[
        (FailureKind::Panicked, ErrorKind::Panicked),
        (FailureKind::MissingKey, ErrorKind::MissingKey),
        (FailureKind::PayloadMismatch, ErrorKind::PayloadMismatch),
        (FailureKind::StoreUnavailable, ErrorKind::StoreUnavailable),
        (FailureKind::StoreRejected, ErrorKind::StoreRejected),
        (FailureKind::Contention, ErrorKind::Contention),
        (FailureKind::EffectRejected, ErrorKind::EffectRejected),
        (FailureKind::LostClaim, ErrorKind::LostClaim),
    ];

    /// Every kind, in the order they are declared.
    pub(crate) const ALL: &'static [FailureKind] = &[
        FailureKind::Handler,
        FailureKind::Panicked,
        FailureKind::MissingKey,
        FailureKind::PayloadMismatch,
        FailureKind::StoreUnavailable,
        FailureKind::StoreRejected,
        FailureKind::Contention,
        FailureKind::EffectRejected,
        FailureKind::LostClaim,
        FailureKind::HandlerTimeout,
        FailureKind::LargePayload,
    ];

    /// A short stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Handler => "handler_error",
            FailureKind::Panicked => "handler_panic",
            FailureKind::MissingKey => "missing_key",
            FailureKind::PayloadMismatch => "payload_mismatch",
            FailureKind::StoreUnavailable => "store_unavailable",
            FailureKind::StoreRejected => "store_rejected",
            FailureKind::Contention => "contention",
            FailureKind::EffectRejected => "effect_rejected",
            FailureKind::LostClaim => "lost_claim",
            FailureKind::HandlerTimeout => "handler_timeout",
            FailureKind::LargePayload => "large_payload",
        }
    }
}

impl From<ErrorKind> for FailureKind {
    /// The failure of a message whose store step (claim, completion, one-shot write) failed
    /// with an error of `kind`: the failure kind beside it in `FailureKind::SHARED`, else
    /// [`FailureKind::StoreRejected`] (the store refused the request for a reason retrying
    /// will not fix). The processor maps every store error through this, and only this.
    ///
    /// ```
    /// use sqs_claim::{ErrorKind, FailureKind};
    /// assert_eq!(FailureKind::from(ErrorKind::LostClaim), FailureKind::LostClaim);
    /// assert_eq!(FailureKind::from(ErrorKind::ResponseTooLarge), FailureKind::StoreRejected);
    /// ```
    fn from(kind: ErrorKind) -> FailureKind {
        FailureKind::SHARED
            .iter()
            .find(|(_, e)| *e == kind)
            .map_or(FailureKind::StoreRejected, |(f, _)| *f)
    }
}

impl std::str::FromStr for FailureKind {
    type Err = crate::Error;

    /// A kind from its [`as_str`](FailureKind::as_str) name (`handler_error`, ...).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FailureKind::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                crate::Error::new(
                    ErrorKind::Config,
                    format!(
                        "{s:?} is not a failure kind ({})",
                        FailureKind::ALL
                            .iter()
                            .map(|k| k.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
    }
}

/// Why a message was not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotStarted {
    /// The invocation's deadline (minus the safety margin) was reached.
    Deadline,
    /// An earlier message of the same FIFO message group did not succeed.
    EarlierFailureInGroup,
    /// An earlier message of the FIFO batch did not succeed (whole-batch mode).
    EarlierFailureInBatch,
}

impl NotStarted {
    /// A short stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStarted::Deadline => "deadline",
            NotStarted::EarlierFailureInGroup => "earlier_failure_in_group",
            NotStarted::EarlierFailureInBatch => "earlier_failure_in_batch",
        }
    }
}

/// The outcome of one message of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemReport {
    /// The SQS message id.
    pub message_id: String,
    /// The idempotency key, if the message had one.
    pub key: Option<String>,
    /// What happened.
    pub outcome: Outcome,
}

impl Serialize for ItemReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let detail = self.outcome.detail();
        let mut st = s.serialize_struct("ItemReport", 4)?;
        st.serialize_field("message_id", &self.message_id)?;
        st.serialize_field("key", &self.key)?;
        st.serialize_field("outcome", self.outcome.name())?;
        if let Some(d) = detail {
            st.serialize_field("detail", &d)?;
        } else {
            st.skip_field("detail")?;
        }
        st.end()
    }
}

/// How many messages ended in each outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Handler ran, completion recorded.
    pub processed: usize,
    /// Skipped: already completed.
    pub duplicate: usize,
    /// Reported for retry: claimed by another worker.
    pub held_elsewhere: usize,
    /// Reported for retry: failed.
    pub failed: usize,
    /// Reported for retry: not started.
    pub not_started: usize,
    /// Reported for retry: cut off by the invocation's time budget. Serialized only when not
    /// zero, so reports of batches that finished in time keep the shape scripts already read.
    #[serde(skip_serializing_if = "is_zero")]
    pub cut_off: usize,
    /// Handled: failed on its last allowed receive and sent to the failure destination.
    /// Serialized only when not zero, like `cut_off`.
    #[serde(skip_serializing_if = "is_zero")]
    pub dead_lettered: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The outcome of every message of a batch, in batch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReport {
    items: Vec<ItemReport>,
}

impl BatchReport {
    pub(crate) fn new(items: Vec<ItemReport>) -> Self {
        BatchReport { items }
    }

    /// Every message's outcome, in batch order.
    pub fn items(&self) -> &[ItemReport] {
        &self.items
    }

    /// Counts per outcome.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for item in &self.items {
            match item.outcome {
                Outcome::Processed => c.processed += 1,
                Outcome::Duplicate => c.duplicate += 1,
                Outcome::HeldElsewhere { .. } => c.held_elsewhere += 1,
                Outcome::Failed(_) => c.failed += 1,
                Outcome::NotStarted(_) => c.not_started += 1,
                Outcome::CutOff(_) => c.cut_off += 1,
                Outcome::DeadLettered(_) => c.dead_lettered += 1,
            }
        }
        c
    }

    /// The partial batch response: every message that did not succeed, once, in batch order.
    /// Every identifier is a non-empty message id from the batch (the processor refuses a batch
    /// with a record it could not name).
    pub fn response(&self) -> SqsBatchResponse {
        let mut seen = HashSet::new();
        let mut response = SqsBatchResponse::default();
        for item in &self.items {
            if !item.outcome.is_success() && seen.insert(item.message_id.as_str()) {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = item.message_id.clone();
                response.batch_item_failures.push(failure);
            }
        }
        response
    }

    /// The report as one JSON value:
    /// `{"response": <batch response>, "outcomes": [{"message_id", "key", "outcome", "detail"?}], "counts": {...}}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "response": self.response(),
            "outcomes": self.items,
            "counts": self.counts(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed claim is the store's failure whatever kind its error carries: only the
    /// transient kinds stay (a claim answered `missing_key` must not look like a bad body).
    #[test]
    fn a_failed_claim_is_the_stores_failure() {
        for (error, failure) in [
            (ErrorKind::StoreUnavailable, FailureKind::StoreUnavailable),
            (ErrorKind::Contention, FailureKind::Contention),
            (ErrorKind::MissingKey, FailureKind::StoreRejected),
            (ErrorKind::PayloadMismatch, FailureKind::StoreRejected),
            (ErrorKind::LostClaim, FailureKind::StoreRejected),
            (ErrorKind::Other, FailureKind::StoreRejected),
        ] {
            assert_eq!(FailureKind::of_claim(error), failure, "{error:?}");
        }
    }

    /// The relation is one table: both directions read it, and the names users see (reports,
    /// metrics, `SQS_CLAIM_BACKOFF_FOR`, failure queue attributes) stay each taxonomy's own.
    #[test]
    fn the_shared_kinds_map_both_ways_and_keep_their_names() {
        for (failure, error) in FailureKind::SHARED {
            assert_eq!(FailureKind::from(*error), *failure);
            assert_eq!(failure.error_kind(), Some(*error));
            if *failure == FailureKind::Panicked {
                assert_eq!(
                    (failure.as_str(), error.as_str()),
                    ("handler_panic", "panicked")
                );
            } else {
                assert_eq!(failure.as_str(), error.as_str());
            }
        }
        for only in [FailureKind::Handler, FailureKind::HandlerTimeout] {
            assert_eq!(only.error_kind(), None);
        }
        for other in [
            ErrorKind::ResponseTooLarge,
            ErrorKind::Other,
            ErrorKind::OutOfTime,
        ] {
            assert_eq!(FailureKind::from(other), FailureKind::StoreRejected);
        }
    }
}
