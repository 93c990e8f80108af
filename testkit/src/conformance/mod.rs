//! The shared conformance suite: the store contract, as executable checks.
//!
//! The store contract's test suite, for your own [`ClaimStore`] (feature `store` of the kit).
//! Add the kit to your `[dev-dependencies]`
//! (`sqs-claim-testkit = { version = "…", features = ["store"] }`) and call [`run_all`] from a
//! test against your backend.
//!
//! Every store's integration test calls [`run_all`] (and [`run_effects`] where the store
//! supports effects, and [`run_admin`] for its [`StoreAdmin`]) against the real server. A
//! store's own tests can use [`request`] and [`acquire`] to set up a claim. The checks panic with a message naming the broken
//! rule, so they read as test failures. Keys are prefixed with a fresh UUID, so the suite can run
//! against a shared server and in parallel with itself.
//!
//! Time is passed explicitly (the contract's `now`), so lease lapse and expiry are exercised
//! without sleeping, on every backend.
//!
//! ```no_run
//! # async fn demo() {
//! let store = sqs_claim::MemoryStore::new();
//! sqs_claim_testkit::conformance::run_all(&store).await;
//! # }
//! ```

use std::future::Future;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use futures::stream::{self, StreamExt};

use sqs_claim::ErrorKind;
use sqs_claim::store::{
    Claim, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects, OneShotWrite, Packed, Status,
    StoreAdmin, StoredResponse,
};

mod admin;
mod claim;
mod effects;
mod extend;
mod one_shot;
mod race;
mod response;

use admin::{admin_operations, init_is_idempotent};
use claim::{
    completed_key_is_a_duplicate, completion_is_idempotent_per_token,
    expired_record_counts_as_absent, expiry_boundary_is_inclusive, fingerprint_is_returned,
    fresh_claim_is_acquired, lapsed_lease_is_taken_over, lease_boundary_is_inclusive,
    live_lease_is_held_elsewhere, long_and_odd_keys, release_allows_reclaim,
    short_ttl_never_ends_a_live_lease, stale_token_cannot_complete, stale_token_cannot_release,
};
pub use effects::EffectProbe;
use effects::{atomic_effects, one_shot_effects, packed_one_shot};
pub use extend::extension_takeover_race;
use extend::{
    extension_moves_the_lease, extension_outlives_a_short_ttl, lapsed_untaken_lease_is_extended,
    only_a_claim_in_progress_is_extended, stale_token_cannot_extend,
};
use one_shot::one_shot_claims_completed;
use race::one_shot_race;
pub use race::{race, takeover_race};
use response::{expired_response_is_not_inherited, response_size_limit, stored_response};

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);

/// A unique key prefix for one run of a check.
fn prefix(check: &str) -> String {
    format!("conformance#{}#{check}", uuid::Uuid::new_v4())
}

/// A time in whole seconds, so second-granularity stores (DynamoDB's TTL) compare exactly.
fn base_time() -> SystemTime {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// A claim request for `key` at `now` with the suite's lease (30 s) and TTL (1 h), and no
/// fingerprint: the shape a store's own tests need most.
pub fn request(key: &str, now: SystemTime) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        now,
        lease_until: now + LEASE,
        expires_at: now + TTL,
        fingerprint: None,
    }
}

/// Claims `req.key` and returns the token; panics (naming the key) unless the claim is won.
pub async fn acquire<S: ClaimStore>(store: &S, req: ClaimRequest<'_>) -> ClaimToken {
    must_acquire(store, req, "acquire").await
}

async fn must_acquire<S: ClaimStore>(store: &S, req: ClaimRequest<'_>, why: &str) -> ClaimToken {
    match store.claim(req).await {
        Ok(Claim::Acquired(token)) => token,
        other => panic!(
            "{why}: expected Acquired for key {:?}, got {other:?}",
            req.key
        ),
    }
}

/// Runs every check of the claim contract: claims, leases, expiry, fencing, stored responses,
/// odd keys, races and one-shot writes, and the extension of a held claim where the store
/// says it extends leases ([`Capabilities::extends_leases`](sqs_claim::store::Capabilities)). Effects ([`run_effects`]) and administration
/// ([`run_admin`]) are checked apart, since not every store has them.
pub async fn run_all<S: ClaimStore>(store: &S) {
    fresh_claim_is_acquired(store).await;
    completed_key_is_a_duplicate(store).await;
    live_lease_is_held_elsewhere(store).await;
    lapsed_lease_is_taken_over(store).await;
    expired_record_counts_as_absent(store).await;
    short_ttl_never_ends_a_live_lease(store).await;
    expiry_boundary_is_inclusive(store).await;
    lease_boundary_is_inclusive(store).await;
    stale_token_cannot_complete(store).await;
    stale_token_cannot_release(store).await;
    release_allows_reclaim(store).await;
    completion_is_idempotent_per_token(store).await;
    fingerprint_is_returned(store).await;
    stored_response(store).await;
    response_size_limit(store).await;
    expired_response_is_not_inherited(store).await;
    long_and_odd_keys(store).await;
    race(store, 200, 32).await;
    takeover_race(store, 50, 32).await;
    one_shot_claims_completed(store).await;
    one_shot_race(store, 50, 16).await;
    if store.capabilities().extends_leases {
        extension_moves_the_lease(store).await;
        lapsed_untaken_lease_is_extended(store).await;
        stale_token_cannot_extend(store).await;
        only_a_claim_in_progress_is_extended(store).await;
        extension_outlives_a_short_ttl(store).await;
        extension_takeover_race(store, 50).await;
    }
}

fn completed_record(
    found: Result<Claim, sqs_claim::Error>,
    why: &str,
) -> sqs_claim::store::ClaimRecord {
    match found {
        Ok(Claim::Completed { record, .. }) => record,
        other => panic!("{why}: expected Completed, got {other:?}"),
    }
}

/// Runs the checks of effects committed with a completion, through `probe`: they commit with
/// the completion or not at all, with a one-shot write or not at all, and each write of a pack
/// ([`ClaimStore::claim_completed_packed`]) gets its own answer.
pub async fn run_effects<S: ClaimStore, P: EffectProbe<S>>(store: &S, probe: &P) {
    atomic_effects(store, probe).await;
    one_shot_effects(store, probe).await;
    packed_one_shot(store, probe).await;
}

/// Runs the checks of [`StoreAdmin`]: `init` is idempotent and leaves a store that claims and
/// completes (pass a store on a table nobody made yet to check that it creates what the store
/// needs; one already made works too), then the operator's methods for one key
/// (`inspect`, `force_release`, `forget`) read or delete exactly what the contract says.
pub async fn run_admin<S: ClaimStore + StoreAdmin>(store: &S) {
    init_is_idempotent(store).await;
    admin_operations(store).await;
}
