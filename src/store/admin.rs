use std::future::Future;
use std::time::SystemTime;

use super::Inspected;
use crate::Error;

/// Administration of a claim store: create or migrate its table, check that it is ready,
/// prune expired records, and inspect, force-release or forget one key. The sections below say
/// what each method promises.
///
/// The methods return `impl Future + Send`, as [`ClaimStore`](super::ClaimStore)'s do.
///
/// ```no_run
/// # async fn demo() -> Result<(), sqs_claim::Error> {
/// use sqs_claim::store::StoreAdmin;
///
/// let store = sqs_claim::DynamoDbStore::from_env("claims").await;
/// store.init().await?; // the table, its key schema and TTL; a no-op when they exist
/// store.check_ready().await?;
/// # Ok(()) }
/// ```
///
/// What an operator does to a store, beside the claim protocol.
///
/// [`ClaimStore`](super::ClaimStore) is what the processor and the idempotency layer call on
/// every message. The methods here are never called on that path: they serve the operator's
/// tools (`sqs-claim init`, `doctor`, `prune`, `inspect`, `release`, `forget`) and a consumer's
/// start-up check, on every store of this crate and on any store of your own that implements
/// the trait.
///
/// # The table
///
/// * **init** creates what the store keeps its claims in (a table, a schema, an index, a TTL
///   setting) if it is missing, and brings one made by an older version up to date.
///   Idempotent: safe to run on every deployment and from several processes at once. Stores
///   with nothing to create (Redis, memory) answer `Ok(())`.
/// * **check_ready** checks that the claims table exists, is ready for writes and has the
///   layout the store is configured for, and creates nothing on a networked store (a run never
///   creates cloud resources behind anyone's back); an embedded store (SQLite) creates its
///   table as it opens, so there it does what `init` does. The error says what to run
///   (`sqs-claim init ...`) when the table is missing or of an older version, and what is
///   wrong otherwise (a table that is not active yet, a key schema of another layout, an
///   unreachable server).
/// * **prune_expired** deletes at most `limit` records that expired at `now`, for stores that
///   keep expired records until deleted (SQLite, PostgreSQL, and a tiered store over one of
///   them), and answers how many it deleted. Expired records already count as absent, so this
///   is housekeeping, bounded so that a scheduled run never holds a lock for long. `Ok(None)`
///   means the backend expires records by itself (DynamoDB's TTL, Redis key expiry, memory):
///   there is nothing to prune.
///
/// # One key
///
/// Three methods serve an operator looking at one key (`sqs-claim inspect`, `release`,
/// `forget`).
///
/// * **inspect** reads the record as stored, expired or not, with its token
///   ([`Inspected`]), or `None` if there is none. It decides nothing.
/// * **force_release** deletes the record only if it is in progress, whoever holds it and
///   whether or not its lease is live, and says whether it did. A completed record is never
///   deleted by it, even if it is completed between the operator's read and the delete: the
///   status check is part of the delete (one conditional request). A holder still running
///   then fails to complete with `LostClaim`, as after a lapsed lease.
/// * **forget** deletes the record only if it is completed, under the same rule: an
///   in-progress record is never deleted by it. The key can then be claimed, and the message
///   processed, again.
///
/// # Errors
///
/// Unreachable backends fail with [`ErrorKind::StoreUnavailable`](crate::ErrorKind::StoreUnavailable);
/// requests the backend refuses for good fail with
/// [`ErrorKind::StoreRejected`](crate::ErrorKind::StoreRejected).
///
/// # All or nothing
///
/// Every method is required: a store either administers itself fully or does not implement
/// the trait, and code that needs administration (the operator's tool, a start-up check,
/// [`BoxStore`](super::BoxStore)) says so with a `StoreAdmin` bound the compiler checks,
/// instead of meeting a "not supported" error at run time. One trait rather than one per
/// role (schema, pruning, one key): every store of this crate does all six, the operator's
/// tool calls all six on whatever store a URL names, and a store that can claim a key can also
/// read and delete it. What varies between backends is expressed in the answers, not in the
/// trait's shape: [`prune_expired`](StoreAdmin::prune_expired) answers `Ok(None)` for a backend
/// that expires records by itself, and [`init`](StoreAdmin::init) answers `Ok(())` for one
/// with nothing to create.
///
/// The shared conformance suite (`sqs_claim_testkit::conformance::run_admin`, the kit's feature
/// `store`) proves the one-key methods for each store.
pub trait StoreAdmin: Send + Sync + 'static {
    /// Creates the claims table (and what it needs: an index, TTL) if it is missing, and
    /// migrates one made by an older version. Idempotent; `Ok(())` for a store with nothing
    /// to create.
    fn init(&self) -> impl Future<Output = Result<(), Error>> + Send;

    /// Checks that the claims table exists, is ready and has the configured layout; creates
    /// nothing on a networked store.
    fn check_ready(&self) -> impl Future<Output = Result<(), Error>> + Send;

    /// Deletes at most `limit` records that expired at `now`, oldest first, and answers how
    /// many; `None` if the backend expires records by itself.
    fn prune_expired(
        &self,
        now: SystemTime,
        limit: u32,
    ) -> impl Future<Output = Result<Option<u64>, Error>> + Send;

    /// The record for `key` as stored, expired or not, or `None` if there is none. For
    /// operators (see [`StoreAdmin`]); the processor never calls it.
    fn inspect(&self, key: &str) -> impl Future<Output = Result<Option<Inspected>, Error>> + Send;

    /// Deletes the record for `key` if, and only if, it is in progress (in the same request
    /// as the check), and says whether it did. For an operator freeing a stuck claim.
    fn force_release(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send;

    /// Deletes the record for `key` if, and only if, it is completed (in the same request as
    /// the check), and says whether it did: the message will then run again if redelivered.
    fn forget(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send;
}
