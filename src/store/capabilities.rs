//! [`Capabilities`]: what a store tells the processor and the idempotency layer about itself,
//! so they plan around it (how many calls at once, how long a response, whose retries).

use super::DEFAULT_MAX_RESPONSE_BYTES;

/// What a store can carry and does by itself, as [`ClaimStore::capabilities`](super::ClaimStore::capabilities)
/// answers it. Hints, not the contract: a store that answers the defaults
/// ([`Capabilities::new`]) is served correctly, only perhaps less well.
///
/// Built from the defaults ([`Capabilities::new`]) by setting fields, so that a field added
/// later keeps every store compiling:
///
/// ```
/// use sqs_claim::store::Capabilities;
///
/// const MINE: Capabilities = {
///     let mut caps = Capabilities::new();
///     caps.max_in_flight = 64;
///     caps.atomic_one_shot = true;
///     caps
/// };
/// assert_eq!(MINE.max_in_flight, 64);
/// assert!(!MINE.retries_internally);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Capabilities {
    /// How many calls the store serves at once without queueing inside its client: the
    /// processor's default concurrency for a standard-queue batch (FIFO keeps its lanes).
    ///
    /// Latency, not CPU, bounds a batch: with `c` messages in flight, a batch of `n` takes
    /// about `ceil(n / c)` times the round trips of one message. So the bound should be as
    /// high as the store's client can carry: its connection pool for a pooled client, a few
    /// hundred for HTTP or multiplexed clients. Default: 10, for stores that say nothing.
    pub max_in_flight: usize,
    /// The longest response, in bytes, [`complete_with`](super::ClaimStore::complete_with)
    /// stores for any key the store accepts; a longer one is refused with
    /// [`ErrorKind::ResponseTooLarge`](crate::ErrorKind::ResponseTooLarge) before anything is
    /// written. Default: 6 MiB (Lambda's own response limit).
    pub max_response_bytes: usize,
    /// Whether the store's client already retries transient errors by itself (the AWS SDK
    /// does, with its `RetryConfig`). The processor and the idempotency layer then add no
    /// retries of their own on top: stacked retry loops multiply. Default: `false`.
    pub retries_internally: bool,
    /// Whether [`claim_completed`](super::ClaimStore::claim_completed) is one atomic step (and,
    /// for a networked store, one round trip) rather than the default's claim, then complete.
    /// Default: `false`.
    pub atomic_one_shot: bool,
    /// How many actions one atomic request of several one-shot writes may carry
    /// ([`claim_completed_packed`](super::ClaimStore::claim_completed_packed): DynamoDB's
    /// `TransactWriteItems` takes 100). A one-shot write with effects is already a transaction;
    /// packing several into one request costs no more write units and saves a request each.
    /// `0` (the default): the store does not pack, and each write goes alone.
    pub max_pack_actions: usize,
    /// Whether the store extends a held claim's lease
    /// ([`extend`](super::ClaimStore::extend)). Only then are claims leased short and
    /// extended while their handler runs (the default [`Lease`](crate::claim::Lease)), so a
    /// retry after a crash takes the key over soon; otherwise a claim is held until the
    /// invocation's deadline. Default: `false`.
    ///
    /// Say `true` only with an [`extend`](super::ClaimStore::extend) of the store's own: a
    /// wrapper that spreads its inner store's capabilities (`..inner.capabilities()`) must
    /// also pass `extend` on, or set this `false`, or every handler that runs past half its
    /// lease is stopped when its extension is refused.
    pub extends_leases: bool,
}

impl Capabilities {
    /// The defaults: 10 calls in flight, responses up to 6 MiB, no
    /// retries inside the client, a one-shot write in two steps, no lease extension.
    pub const fn new() -> Self {
        Capabilities {
            max_in_flight: 10,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            retries_internally: false,
            atomic_one_shot: false,
            max_pack_actions: 0,
            extends_leases: false,
        }
    }
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities::new()
    }
}
