//! The claim protocol of `sqs-claim`, model-checked.
//!
//! | file          | what it holds                                                          |
//! |---------------|------------------------------------------------------------------------|
//! | `store.rs`    | the store contract as a value: claim, extend, complete, release, one-shot, packed |
//! | `protocol.rs` | the system: SQS, workers with drifting clocks and deadlines, short leases extended while the handler runs (and taken over once lapsed), the network, contention, packed batches, the tiered store, the two-step one-shot |
//! | `checker.rs`  | the exhaustive breadth-first checker, invariants and liveness          |
//!
//! `tests/exhaustive.rs` checks the properties for the bounds in `docs/testing.md` and that
//! every [`Mutant`] is caught; the library's `tests/suite/test_model.rs` drives the same random
//! operations against [`store::Store`] and the real stores and compares their answers.

pub mod checker;
pub mod protocol;
pub mod store;

/// A bug planted in the model, to show the checker catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// The model as the contract says.
    None,
    /// A completion accepted for any token while the record is in progress.
    UnfencedComplete,
    /// A release accepted for any token.
    UnfencedRelease,
    /// A completion retried after its answer was lost commits the effects again (no
    /// same-token no-op rule).
    RetryReappliesEffects,
    /// A claim never takes over a lapsed lease (only an expired record is free).
    ClaimIgnoresLease,
    /// A completion keeps the claim's lease, and a claim takes over any record whose lease
    /// lapsed, completed ones included.
    ClaimIgnoresStatus,
    /// Expiries kept in whole seconds rounded down instead of up.
    ExpirySecondsRoundedDown,
    /// A worker reports a message held elsewhere as processed.
    HeldAcked,
    /// The tiered store writes its marker even when the durable completion was refused.
    TieredMarkerOnLostClaim,
    /// A write of a pack left unsent (another write of the pack was refused) counted as
    /// committed: its message reported processed.
    UnsentAcked,
    /// A one-shot write cancelled on contention (nothing written) counted as committed: its
    /// message reported processed.
    ContentionAcked,
    /// An extension accepted for any token while the record is in progress, and written for
    /// its token (a put of the caller's record with no token condition): an owner paused past
    /// its lease and taken over takes the key back, and its completion commits.
    UnfencedExtend,
    /// An extension accepted for the record's token whatever its status: an extension still
    /// on the wire when the handler ended lands after the completion and sets the completed
    /// record's expiry to the extension's, earlier than the completion asked, so a redelivery
    /// finds the completion expired early.
    ExtendIgnoresStatus,
    /// A worker whose extension was refused (another worker took the key over) reports its
    /// message processed, the handler's result kept though nothing was committed.
    LostExtensionAcked,
}
