//! The store contract: how a message is claimed, completed and released.
//!
//! Every store (memory, DynamoDB, SQLite, Redis, PostgreSQL) implements [`ClaimStore`], and the
//! semantics below are the whole of what the processor relies on. They are proven for each store
//! by the shared conformance suite (`sqs_claim_testkit::conformance`, the kit's feature `store`),
//! run against the real server.
//!
//! # The record
//!
//! A store keeps at most one record per key:
//!
//! | field         | meaning                                                                |
//! |---------------|------------------------------------------------------------------------|
//! | `status`      | [`Status::InProgress`] while a worker runs the handler, then [`Status::Completed`] |
//! | `token`       | the owner token of the claim that wrote it (fencing)                   |
//! | `lease_until` | while in progress: when the claimant's lease lapses (extended while it runs) |
//! | `expires_at`  | when the record stops counting at all (the TTL)                        |
//! | `fingerprint` | optional hash of the payload, to tell "same key, other body"           |
//! | `response`    | optional: the handler's response, stored by the completion and returned to every later claim (replayed for a duplicate) |
//!
//! # The contract
//!
//! * **claim** succeeds, atomically and in one round trip, if and only if
//!   1. no record exists for the key, or
//!   2. the record's `expires_at` is not after `now` (an expired record counts as absent even
//!      if the backend has not deleted it yet: DynamoDB's TTL deletion is lazy), or
//!   3. the record is in progress and its `lease_until` is not after `now` (the claimant died or
//!      overran its deadline; the new claimant takes over).
//!
//!   "Not after `now`" is inclusive: a record whose `expires_at` equals `now` counts as absent,
//!   and a lease whose `lease_until` equals `now` has lapsed. Leases are compared to the
//!   millisecond. An expiry may be kept in whole seconds (DynamoDB's TTL attribute), rounded
//!   up: a record may then count for up to a second past `expires_at`, never less.
//!
//!   An in-progress record never expires before its lease: a claim stores
//!   `max(expires_at, lease_until)` as the record's expiry (`ClaimRequest::record_expires_at`),
//!   backend TTLs included, so a caller passing a TTL shorter than the lease still never lets a
//!   second claimer in while the lease is live.
//!
//!   On success the store writes a fresh record with a new unique token and returns
//!   [`Claim::Acquired`]. Otherwise it changes nothing and returns [`Claim::Completed`] with the
//!   stored record (answered by [`AnsweredBy::Store`]; a cache in front of a store says
//!   [`AnsweredBy::Cache`] when it answers from what it remembers), or [`Claim::HeldElsewhere`]
//!   with the time the other lease lapses. Of any number of concurrent claimers of one key,
//!   exactly one acquires it.
//! * **complete** ([`ClaimStore::complete_with`]) marks the record completed with a new
//!   `expires_at` and, if given, the handler's response ([`Completion::response`]), and commits
//!   the handler's effects in the same atomic step, only if the record still carries `token` and
//!   is in progress. The response is returned exactly as given (byte for byte) in the
//!   [`ClaimRecord`] of every later claim, one-shot write and `inspect` that finds the record
//!   completed. A response longer than [`Capabilities::max_response_bytes`] is refused before
//!   anything is written: the completion fails with
//!   [`ErrorKind::ResponseTooLarge`](crate::ErrorKind::ResponseTooLarge), no effect is
//!   committed and the claim stays in progress, to be released. Completing again with the same token after a success is a no-op success (so a
//!   retry after an ambiguous network error is safe and never applies effects twice). Otherwise
//!   it fails with [`ErrorKind::LostClaim`](crate::ErrorKind::LostClaim) and changes nothing.
//!   If an effect is refused the whole step is cancelled and it fails with
//!   [`ErrorKind::EffectRejected`](crate::ErrorKind::EffectRejected).
//! * **extend** ([`ClaimStore::extend`]) moves the lease (and expiry) of an in-progress record
//!   that still carries `token`, lapsed or not; otherwise it fails with `LostClaim` and
//!   changes nothing. It is how a live owner keeps a short lease: see
//!   [`Lease`](crate::claim::Lease).
//! * **release** deletes the record only if it still carries `token` and is in progress;
//!   otherwise it fails with `LostClaim` and changes nothing. After a release the key can be
//!   claimed again at once.
//! * **claim_completed** (one-shot) does what a claim, then a completion with `effects`, would
//!   do, as one atomic step: under the claim's condition it writes the record as completed
//!   (expiring at the request's `expires_at`, no lease) and commits the effects, and answers
//!   [`OneShotWrite::Committed`]; if the key is completed or held it writes nothing and answers
//!   [`OneShotWrite::Completed`] or [`OneShotWrite::HeldElsewhere`] as a claim would; if an effect is
//!   refused it writes nothing at all and fails with `EffectRejected`. A retry after an
//!   ambiguous error that finds its own commit answers `Committed`, never a duplicate of
//!   itself. Stores that can do this in one round trip (DynamoDB: one `TransactWriteItems`;
//!   SQLite and PostgreSQL: one SQL transaction; memory) say so with
//!   [`Capabilities::atomic_one_shot`]; the others run claim and complete in turn, and release
//!   the claim if the completion is refused.
//! * Times are passed in by the caller (`now` in [`ClaimRequest`]); a store compares them and
//!   never reads its own clock for the contract's decisions. This keeps every store
//!   deterministic under test and makes the processor's clock the only clock.
//!
//! # Administration
//!
//! Creating the table, checking that it is ready, pruning expired records and an operator's
//! look at one key (inspect, force-release, forget) are a second role, never on the message
//! path: the [`StoreAdmin`] trait, which every store of this crate implements.
//!
//! # A store chosen at run time
//!
//! Both traits return `impl Future`, so neither is a trait object. [`BoxStore`]
//! is their boxed form, as tower's `BoxService` is for services: any store as one type, with
//! its effects erased to [`AnyEffect`], that every front door accepts.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Error;

pub(crate) mod admin;
pub(crate) mod boxed;
pub(crate) mod cached;
mod capabilities;
mod memory;

#[cfg(feature = "dynamodb")]
pub mod dynamodb;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
mod remember;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
#[cfg(feature = "redis")]
pub(crate) mod tiered;

pub use admin::StoreAdmin;
pub use boxed::{AnyEffect, BoxStore};
pub use cached::CachedStore;
pub use capabilities::Capabilities;
pub use memory::{MemoryEffect, MemoryStore};

/// The state of a stored claim record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// A worker holds the claim and is running the handler.
    InProgress,
    /// The handler succeeded and the completion was written.
    Completed,
}

impl Status {
    /// The stored spelling, compatible with Powertools idempotency tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "INPROGRESS",
            Status::Completed => "COMPLETED",
        }
    }

    /// Parses the stored spelling.
    #[cfg_attr(
        not(any(
            feature = "dynamodb",
            feature = "redis",
            feature = "postgres",
            feature = "sqlite"
        )),
        allow(dead_code)
    )] // read by the stores that keep the status as text
    pub(crate) fn parse(s: &str) -> Option<Status> {
        match s {
            "INPROGRESS" => Some(Status::InProgress),
            "COMPLETED" => Some(Status::Completed),
            _ => None,
        }
    }
}

/// An owner token: unique to one successful claim, and required to complete or release it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimToken(String);

impl ClaimToken {
    /// A new random token (UUID v4).
    ///
    /// Tokens must be unique, not secret (they are stored beside the key): 122 random bits
    /// from a per-thread generator seeded once from the operating system, instead of a system
    /// call per token (which cost about a fifth of the processor's time per message).
    pub(crate) fn generate() -> Self {
        thread_local! {
            static RNG: std::cell::RefCell<fastrand::Rng> = std::cell::RefCell::new({
                let seed = uuid::Uuid::new_v4().as_u64_pair();
                fastrand::Rng::with_seed(seed.0 ^ seed.1.rotate_left(32))
            });
        }
        let bits = RNG.with(|rng| rng.borrow_mut().u128(..));
        let uuid = uuid::Builder::from_random_bytes(bits.to_le_bytes()).into_uuid();
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        ClaimToken(uuid.hyphenated().encode_lower(&mut buf).to_owned())
    }

    /// Wraps a token read back from a store.
    pub fn from_string(token: String) -> Self {
        ClaimToken(token)
    }

    /// The token as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a claim asks for. Built by the processor; stores read it.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The full idempotency key (namespace included).
    pub key: &'a str,
    /// The caller's current time: every expiry and lease comparison uses it.
    pub now: SystemTime,
    /// When this claim's lease lapses if it is neither completed nor released.
    pub lease_until: SystemTime,
    /// When the record stops counting at all (the TTL).
    pub expires_at: SystemTime,
    /// Optional payload fingerprint, stored with the record.
    pub fingerprint: Option<&'a str>,
}

impl ClaimRequest<'_> {
    /// The expiry a store writes for the record this claim creates: `expires_at`, but never
    /// before `lease_until`, so an in-progress record (and any backend TTL sized from it)
    /// outlives its lease whatever TTL the caller asked for.
    pub(crate) fn record_expires_at(&self) -> SystemTime {
        self.expires_at.max(self.lease_until)
    }
}

/// What an extension of a held claim asks for ([`ClaimStore::extend`]): the owner's token and
/// the lease and expiry it moves the record to. Built by the claim's owner while its handler
/// runs; stores read it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Extension<'a> {
    /// The full idempotency key (namespace included).
    pub key: &'a str,
    /// The owner token of the claim being extended.
    pub token: &'a ClaimToken,
    /// The caller's current time.
    pub now: SystemTime,
    /// The claim's new lease.
    pub lease_until: SystemTime,
    /// The record's new expiry, never before `lease_until` (an in-progress record outlives its
    /// lease, as for a claim).
    pub expires_at: SystemTime,
}

impl<'a> Extension<'a> {
    /// An extension of `token`'s claim on `key` to `lease_until`, asked at `now`; the record
    /// expires at `expires_at`, or at `lease_until` if that is later.
    pub fn new(
        key: &'a str,
        token: &'a ClaimToken,
        now: SystemTime,
        lease_until: SystemTime,
        expires_at: SystemTime,
    ) -> Self {
        Extension {
            key,
            token,
            now,
            lease_until,
            expires_at: expires_at.max(lease_until),
        }
    }
}

/// A handler's response as a store keeps it: the text the handler's response serialised to
/// (JSON, for the idempotency layer), returned byte for byte.
///
/// `Debug` prints its length only: a response may carry personal or payment data, and never
/// goes to logs.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct StoredResponse(String);

impl StoredResponse {
    /// Wraps a response's text.
    pub fn new(text: impl Into<String>) -> Self {
        StoredResponse(text.into())
    }

    /// The response as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its length in bytes (what [`Capabilities::max_response_bytes`] bounds).
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The response's text, by value.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Debug for StoredResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoredResponse({} bytes)", self.0.len())
    }
}

/// What a completion writes ([`ClaimStore::complete_with`]): the record's new expiry, the
/// handler's response to store with it (if any), and the effects to commit in the same step.
#[derive(Debug)]
#[non_exhaustive]
pub struct Completion<E> {
    /// When the completed record stops counting (the TTL).
    pub expires_at: SystemTime,
    /// The handler's response, kept with the record and replayed for a duplicate.
    pub response: Option<StoredResponse>,
    /// The handler's effects, committed atomically with the completion.
    pub effects: Effects<E>,
}

impl<E> Completion<E> {
    /// A completion expiring at `expires_at`, with no response and no effects.
    pub fn new(expires_at: SystemTime) -> Self {
        Completion {
            expires_at,
            response: None,
            effects: Effects::none(),
        }
    }

    /// Stores `response` with the record.
    pub fn with_response(mut self, response: StoredResponse) -> Self {
        self.response = Some(response);
        self
    }

    /// Commits `effects` with the completion.
    pub fn with_effects(mut self, effects: Effects<E>) -> Self {
        self.effects = effects;
        self
    }

    /// Refuses a response longer than `limit` (the store's
    /// [`max_response_bytes`](Capabilities::max_response_bytes)) with the error
    /// [`too_large`](Self::too_large) gives; a store calls it before it writes anything.
    pub(crate) fn check_response_size(&self, key: &str, limit: usize) -> Result<(), Error> {
        match &self.response {
            Some(r) if r.len() > limit => Err(Self::too_large(key, r.len(), limit)),
            _ => Ok(()),
        }
    }

    /// The error a store answers for a response longer than its `limit`.
    pub fn too_large(key: &str, len: usize, limit: usize) -> Error {
        Error::new(
            crate::ErrorKind::ResponseTooLarge,
            format!(
                "the response for key {key:?} is {len} bytes, over this store's limit of {limit} \
                 bytes: nothing was committed (store a reference to the result instead)"
            ),
        )
    }
}

/// The longest response a store keeps unless it says otherwise
/// ([`Capabilities::max_response_bytes`]): 6 MiB, Lambda's limit for a synchronous response.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: usize = 6 * 1024 * 1024;

/// A stored record, as returned when a claim finds the key already completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    /// The record's status.
    pub status: Status,
    /// When the record expires.
    pub expires_at: SystemTime,
    /// The lease of an in-progress record (`None` once completed, or if the writer set none).
    pub lease_until: Option<SystemTime>,
    /// The fingerprint stored with the claim, if any.
    pub fingerprint: Option<String>,
    /// The response stored by the completion, if any (never for an in-progress record).
    pub response: Option<StoredResponse>,
}

/// A record as an operator sees it ([`StoreAdmin::inspect`]): the record and the owner token
/// that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspected {
    /// The record, as stored (it may have expired: compare `expires_at` with the time).
    pub record: ClaimRecord,
    /// The owner token of the claim that wrote it (`None` if the record carries none, as a
    /// record written by Powertools does).
    pub token: Option<ClaimToken>,
}

impl Inspected {
    /// A record and its token, for a store's [`StoreAdmin::inspect`].
    pub fn new(record: ClaimRecord, token: Option<ClaimToken>) -> Self {
        Inspected { record, token }
    }
}

/// Who answered that a key is completed: the store itself, or a cache in front of it.
///
/// A store of its own answers [`AnsweredBy::Store`]; a store that wraps another and answers a
/// duplicate from what it remembers ([`CachedStore`]'s map, `TieredStore`'s Redis markers)
/// answers [`AnsweredBy::Cache`], and forwards the inner store's answer, origin and all,
/// otherwise. It is part of the answer so that every wrapper must say it: the processor takes
/// an answer from the store as proof that the store still answers (a store gone dark is
/// noticed by its silence), and a cache's answer says nothing of the store behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredBy {
    /// The store that keeps the record answered (a round trip to it).
    Store,
    /// A cache in front of the store answered from what it remembers; the store behind was
    /// not asked.
    Cache,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This caller now holds the claim, with this owner token.
    Acquired(ClaimToken),
    /// The key was already processed; the record is returned (for fingerprint checks).
    Completed {
        /// The stored record.
        record: ClaimRecord,
        /// Whether the store or a cache in front of it answered.
        answered_by: AnsweredBy,
    },
    /// Another worker holds a live lease on the key until this time.
    HeldElsewhere {
        /// When the other claimant's lease lapses.
        lease_until: Option<SystemTime>,
    },
}

impl Claim {
    /// The token of an acquired claim, or, for a claim refused, the one-shot write's answer
    /// of the same meaning (a duplicate, with who answered; a live lease elsewhere): how every
    /// one-shot write built on a claim answers a key it did not get.
    pub(crate) fn acquired_or_refused(self) -> Result<ClaimToken, OneShotWrite> {
        match self {
            Claim::Acquired(token) => Ok(token),
            Claim::Completed {
                record,
                answered_by,
            } => Err(OneShotWrite::Completed {
                record,
                answered_by,
            }),
            Claim::HeldElsewhere { lease_until } => {
                Err(OneShotWrite::HeldElsewhere { lease_until })
            }
        }
    }
}

/// The answer to a one-shot commit ([`ClaimStore::claim_completed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OneShotWrite {
    /// The key was free: it is now completed, and the effects committed in the same step.
    Committed,
    /// The key was already completed (a duplicate): nothing was written.
    Completed {
        /// The stored record.
        record: ClaimRecord,
        /// Whether the store or a cache in front of it answered.
        answered_by: AnsweredBy,
    },
    /// Another worker holds a live lease on the key: nothing was written.
    HeldElsewhere {
        /// When the other claimant's lease lapses.
        lease_until: Option<SystemTime>,
    },
}

/// One write's answer in a pack ([`ClaimStore::claim_completed_packed`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Packed {
    /// The write's own answer, as [`ClaimStore::claim_completed`] would have given it: written,
    /// a duplicate, held elsewhere, or an error of its own (an effect refused, contention on
    /// one of its items).
    Answered(Result<OneShotWrite, Error>),
    /// The pack was cancelled because of **another** of its writes: this one wrote nothing
    /// and is sent again, in the next pack, at once.
    Unsent,
}

/// Handler effects to commit atomically with a completion.
///
/// A handler's response converts into `Effects` (`()` means none). Each store defines what an
/// effect is ([`ClaimStore::Effect`]): a DynamoDB `TransactWriteItem`, an SQL statement, ...
#[derive(Debug)]
pub struct Effects<E>(Vec<E>);

impl<E> Effects<E> {
    /// No effects.
    pub fn none() -> Self {
        Effects(Vec::new())
    }

    /// One effect.
    pub fn one(effect: E) -> Self {
        Effects(vec![effect])
    }

    /// Whether there are no effects.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many effects.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The effects, in order.
    pub fn as_slice(&self) -> &[E] {
        &self.0
    }

    /// The effects, in order, by value.
    pub(crate) fn into_vec(self) -> Vec<E> {
        self.0
    }
}

impl<E> Default for Effects<E> {
    fn default() -> Self {
        Effects::none()
    }
}

impl<E> From<()> for Effects<E> {
    fn from((): ()) -> Self {
        Effects::none()
    }
}

impl<E> From<Vec<E>> for Effects<E> {
    fn from(v: Vec<E>) -> Self {
        Effects(v)
    }
}

impl<E> FromIterator<E> for Effects<E> {
    fn from_iter<I: IntoIterator<Item = E>>(iter: I) -> Self {
        Effects(iter.into_iter().collect())
    }
}

/// Owned copies of borrowed effects (a pack's write sent alone: [`ClaimStore::claim_completed`]
/// takes its effects by value).
pub(crate) fn owned<E: Clone>(effects: &[&E]) -> Effects<E> {
    effects.iter().map(|e| (*e).clone()).collect()
}

/// A store of claims. See the [module documentation](self) for the contract every
/// implementation keeps.
///
/// The methods return `impl Future + Send` so the processor calls them without boxing.
pub trait ClaimStore: Send + Sync + 'static {
    /// What a handler may return to be committed atomically with the completion. A store that
    /// cannot commit effects atomically uses [`NoEffects`].
    /// Effects are cloned to retry a completion after a transient error.
    type Effect: Clone + Send + Sync + 'static;

    /// Tries to claim `request.key`. See the contract above.
    fn claim(&self, request: ClaimRequest<'_>)
    -> impl Future<Output = Result<Claim, Error>> + Send;

    /// Marks the claim completed until `completion.expires_at`, storing `completion.response`
    /// with it and committing `completion.effects` in the same atomic step, if `token` still
    /// holds it. See the contract above.
    fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<Self::Effect>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Deletes the claim if `token` still holds it, so the key can be claimed again at once.
    fn release(
        &self,
        key: &str,
        token: &ClaimToken,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// Moves the lease of `extension.token`'s claim to `extension.lease_until` (and the
    /// record's expiry to `extension.expires_at`), in one conditional write: only if the record
    /// still carries the token and is in progress, whether or not its lease has lapsed (a
    /// lapsed lease nobody took over is still the owner's). Otherwise it changes nothing and
    /// fails with [`LostClaim`](crate::ErrorKind::LostClaim): the owner has been taken over,
    /// or its claim completed or released, and must not commit anything.
    ///
    /// The claim's owner calls it while its handler still runs, so that a short lease (what
    /// lets a retry take over soon after its owner died) never lapses under a live owner. A
    /// store that implements it says so with [`Capabilities::extends_leases`]; the default
    /// refuses, and claims on such a store are leased until the invocation's deadline, as
    /// before leases were extended.
    fn extend(&self, extension: Extension<'_>) -> impl Future<Output = Result<(), Error>> + Send {
        let key = extension.key.to_owned();
        async move {
            Err(Error::new(
                crate::ErrorKind::StoreRejected,
                format!(
                    "this store does not extend leases (Capabilities::extends_leases): the \
                     claim on key {key:?} is held until its first lease lapses"
                ),
            ))
        }
    }

    /// What the store can carry and does by itself ([`Capabilities`]): how many calls at once,
    /// the longest response, whether its client retries, whether a one-shot write is atomic.
    /// Default: [`Capabilities::new`].
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
    }

    /// The item `effect` writes, as a hash of its identity (table and key), so that the
    /// processor never has two writes on one item in flight at once from one process: on
    /// DynamoDB a transaction that meets another in flight on one of its items is cancelled
    /// (`TransactionConflict`), so writes to a hot item sent together cancel each other. Two
    /// effects on one item must give the same hash; a collision only serializes two writes
    /// that could have run together.
    ///
    /// Default: `None` (not known): such effects are never held back, and a write they
    /// conflict on is retried as [`Contention`](crate::ErrorKind::Contention) if the store
    /// reports it so. A store whose writes to one item queue rather than fail (row locks)
    /// needs nothing here.
    fn effect_item(&self, effect: &Self::Effect) -> Option<u64> {
        let _ = effect;
        None
    }

    /// Several one-shot writes in one atomic request where the store can
    /// ([`Capabilities::max_pack_actions`]): one answer per write, in order. Every write is on
    /// other items than the others (the caller makes sure: its item locks), and the writes
    /// carry at most `max_pack_actions` actions in all (a claim and its effects each count
    /// one).
    ///
    /// All or nothing, as a transaction is: when the request is refused because of some of
    /// its writes, those get their own answer (a duplicate, an effect refused, contention) and
    /// the rest [`Packed::Unsent`], to go again in the next pack.
    ///
    /// The effects are borrowed: the caller keeps them (to send a write again after
    /// [`Packed::Unsent`] or contention), and a store copies only what its request needs, for
    /// as long as the request is being built. So one copy of a batch's effects lives while
    /// its packs are in flight, not one more per pack.
    ///
    /// The default sends each write alone, all at once, each with its own copy of its effects.
    fn claim_completed_packed(
        &self,
        writes: Vec<(ClaimRequest<'_>, Vec<&Self::Effect>)>,
    ) -> impl Future<Output = Vec<Packed>> + Send {
        let sent: Vec<_> = writes
            .into_iter()
            .map(|(req, effects)| self.claim_completed(req, owned(&effects)))
            .collect();
        async move {
            futures::future::join_all(sent)
                .await
                .into_iter()
                .map(Packed::Answered)
                .collect()
        }
    }

    /// Claims `req.key` and completes it with `effects` in one step (the one-shot mode: see the
    /// [module documentation](self)). The completed record expires at `req.expires_at`.
    ///
    /// The default runs [`claim`](Self::claim), then [`complete_with`](Self::complete_with):
    /// two round trips, and if the completion is refused
    /// ([`EffectRejected`](crate::ErrorKind::EffectRejected)) or cancelled on
    /// [`Contention`](crate::ErrorKind::Contention) it releases the claim, so that nothing
    /// stays written. A store that can do it in one atomic step overrides it and says
    /// so in its [`Capabilities::atomic_one_shot`].
    fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<Self::Effect>,
    ) -> impl Future<Output = Result<OneShotWrite, Error>> + Send {
        async move {
            let token = match self.claim(req).await?.acquired_or_refused() {
                Ok(token) => token,
                Err(refused) => return Ok(refused),
            };
            let completion = Completion::new(req.expires_at).with_effects(effects);
            match self.complete_with(req.key, &token, completion).await {
                Ok(()) => Ok(OneShotWrite::Committed),
                Err(e)
                    if matches!(
                        e.kind(),
                        crate::ErrorKind::EffectRejected | crate::ErrorKind::Contention
                    ) =>
                {
                    // Nothing of the effects was written; free the key as if the claim had
                    // never been made (a write cancelled on contention is sent again, and must
                    // find the key free). If the release fails too, the claim lapses with its
                    // lease.
                    let _ = self.release(req.key, &token).await;
                    Err(e)
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// The effect type of stores that cannot commit effects atomically: it has no values, so a
/// handler for such a store can only return `()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoEffects {}

/// Milliseconds since the Unix epoch (0 for times before it): the unit of every store's leases
/// and expiries, and of a Lambda invocation's deadline (`Context::deadline`). The one public
/// conversion, for code that reads what a store wrote or builds a deadline (tests, tools).
pub fn epoch_millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Conversions the store adapters share: a build with none of them (`--no-default-features`)
/// has no caller.
#[cfg_attr(
    not(any(
        feature = "dynamodb",
        feature = "sqlite",
        feature = "redis",
        feature = "postgres"
    )),
    allow(dead_code)
)]
mod epoch {
    use super::*;

    /// Seconds since the Unix epoch, rounded down (the DynamoDB TTL unit).
    pub(crate) fn epoch_seconds(t: SystemTime) -> i64 {
        epoch_millis(t).div_euclid(1000)
    }

    /// The time `millis` after the Unix epoch (negative values clamp to the epoch).
    pub(crate) fn from_epoch_millis(millis: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(u64::try_from(millis).unwrap_or(0))
    }

    /// The time `secs` after the Unix epoch (negative values clamp to the epoch).
    pub(crate) fn from_epoch_seconds(secs: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
    }
}
// Unused without a store adapter, as the module above says.
#[allow(unused_imports)]
pub(crate) use epoch::{epoch_seconds, from_epoch_millis, from_epoch_seconds};
