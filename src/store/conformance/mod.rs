//! The shared conformance suite: the store contract, as executable checks.
//!
//! Available with the `conformance` feature: the store contract's test suite, for your own
//! [`ClaimStore`]. Enable it in your `[dev-dependencies]`
//! (`sqs-claim = { version = "…", features = ["conformance"] }`) and call [`run_all`] from a test
//! against your backend.
//!
//! Every store's integration test calls [`run_all`] (and [`atomic_effects`] where the store
//! supports effects, and [`admin_operations`] and [`init_is_idempotent`] for its
//! [`StoreAdmin`]) against the real server. The checks panic with a message naming the broken
//! rule, so they read as test failures. Keys are prefixed with a fresh UUID, so the suite can run
//! against a shared server and in parallel with itself.
//!
//! Time is passed explicitly (the contract's `now`), so lease lapse and expiry are exercised
//! without sleeping, on every backend.
//!
//! ```no_run
//! # async fn demo() {
//! let store = sqs_claim::MemoryStore::new();
//! sqs_claim::store::conformance::run_all(&store).await;
//! # }
//! ```

use std::future::Future;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use futures::stream::{self, StreamExt};

use super::{
    Claim, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects, OneShotWrite, Status,
    StoreAdmin, StoredResponse,
};
use crate::ErrorKind;

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);

/// A unique key prefix for one run of a check.
fn prefix(check: &str) -> String {
    format!("conformance#{}#{check}", uuid::Uuid::new_v4())
}

/// A time in whole seconds, so second-granularity stores (DynamoDB's TTL) compare exactly.
fn base_time() -> SystemTime {
    let now = super::epoch_seconds(SystemTime::now());
    super::from_epoch_seconds(now)
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

/// Runs every check of the contract except atomic effects (see [`atomic_effects`]).
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
}

/// The operator's methods for one key ([`StoreAdmin::inspect`], [`StoreAdmin::force_release`],
/// [`StoreAdmin::forget`]): each reads or deletes exactly what the contract says, never a
/// record of the other status, a force release racing the owner's completion leaves one
/// consistent outcome, and a record that replaced an expired completion shows no response.
/// Not part of [`run_all`]: administration is a trait of its own.
pub async fn admin_operations<S: ClaimStore + StoreAdmin>(store: &S) {
    let p = prefix("admin");
    let now = base_time();

    // Absent: nothing to read, nothing deleted.
    let key = format!("{p}#absent");
    assert_eq!(inspect(store, &key).await, None, "inspect of an absent key");
    assert!(
        !force_release(store, &key).await,
        "force_release of an absent key"
    );
    assert!(!forget(store, &key).await, "forget of an absent key");

    // In progress: read back as written; forget leaves it; force_release frees it.
    let key = format!("{p}#stuck");
    let mut req = request(&key, now);
    req.fingerprint = Some("fp-1");
    let first = must_acquire(store, req, "claim to inspect").await;
    let seen = inspect(store, &key)
        .await
        .expect("inspect must find an in-progress record");
    assert_eq!(seen.record.status, Status::InProgress, "inspected status");
    assert_eq!(
        seen.record.lease_until,
        Some(now + LEASE),
        "inspected lease"
    );
    assert_eq!(seen.record.expires_at, now + TTL, "inspected expiry");
    assert_eq!(
        seen.record.fingerprint.as_deref(),
        Some("fp-1"),
        "inspected fingerprint"
    );
    assert_eq!(seen.token.as_ref(), Some(&first), "inspected token");
    assert!(
        !forget(store, &key).await,
        "forget must not delete an in-progress record"
    );
    assert_eq!(
        inspect(store, &key).await.map(|i| i.token),
        Some(Some(first.clone())),
        "forget of an in-progress record must change nothing"
    );
    assert!(
        force_release(store, &key).await,
        "force_release must delete an in-progress record"
    );
    assert_eq!(inspect(store, &key).await, None, "after force_release");
    let second = must_acquire(store, request(&key, now), "claim after force_release").await;
    let err = store
        .complete_with(&key, &first, Completion::new(now + TTL))
        .await
        .expect_err("the released claimant must not complete the next claim");
    assert_eq!(err.kind(), ErrorKind::LostClaim, "stale complete: {err}");

    // Completed: force_release leaves it; forget deletes it, and the key runs again.
    store
        .complete_with(&key, &second, Completion::new(now + TTL * 2))
        .await
        .expect("the new owner completes");
    let seen = inspect(store, &key)
        .await
        .expect("inspect must find a completed record");
    assert_eq!(seen.record.status, Status::Completed, "inspected status");
    assert_eq!(
        seen.record.lease_until, None,
        "a completed record has no lease"
    );
    assert_eq!(seen.record.expires_at, now + TTL * 2, "inspected expiry");
    assert_eq!(seen.token.as_ref(), Some(&second), "inspected token");
    assert!(
        !force_release(store, &key).await,
        "force_release must not delete a completed record"
    );
    match store.claim(request(&key, now)).await {
        Ok(Claim::Completed(_)) => {}
        other => panic!("force_release of a completed record must change nothing, got {other:?}"),
    }
    assert!(
        forget(store, &key).await,
        "forget must delete a completed record"
    );
    assert_eq!(inspect(store, &key).await, None, "after forget");
    assert!(!forget(store, &key).await, "forget of a forgotten key");
    must_acquire(store, request(&key, now), "claim after forget").await;

    // Long and odd keys are found under the same stored id the claim used.
    for key in [
        format!("{p}#ünïcødé 🚀 with spaces:and/slashes"),
        format!("{p}#{}", "a".repeat(5000)),
    ] {
        let token = must_acquire(store, request(&key, now), "odd key").await;
        let seen = inspect(store, &key).await.expect("inspect of an odd key");
        assert_eq!(seen.token.as_ref(), Some(&token), "odd key's token");
        assert!(
            force_release(store, &key).await,
            "force_release of an odd key"
        );
        let token = must_acquire(store, request(&key, now), "odd key again").await;
        store
            .complete_with(&key, &token, Completion::new(now + TTL))
            .await
            .expect("complete odd key");
        assert!(forget(store, &key).await, "forget of an odd key");
        assert_eq!(inspect(store, &key).await, None, "odd key after forget");
    }

    // A force release racing the owner's completion: one of the two wins, and the record says
    // which. Never both (a completed record deleted), never neither.
    let outcomes = join_all((0..20).map(|k| {
        let key = format!("{p}#race#{k}");
        async move {
            let token = must_acquire(store, request(&key, now), "race claim").await;
            let (completed, released) = futures::join!(
                store.complete_with(&key, &token, Completion::new(now + TTL)),
                store.force_release(&key)
            );
            let released = released.expect("force_release during a completion");
            let after = inspect(store, &key).await.map(|i| i.record.status);
            match (&completed, released, after) {
                (Ok(()), false, Some(Status::Completed)) => "completed",
                (Err(e), true, None) if e.kind() == ErrorKind::LostClaim => "released",
                _ => panic!(
                    "force_release vs completion of {key:?}: completion {completed:?}, \
                     released {released}, record now {after:?}"
                ),
            }
        }
    }))
    .await;
    assert_eq!(outcomes.len(), 20);

    // A claim that replaced an expired completion with a response: its in-progress record
    // carries no response (a stale one replayed for it would answer a duplicate with another
    // message's result).
    let key = format!("{p}#replaced");
    let expired = now + Duration::from_secs(10);
    let later = expired + Duration::from_secs(1);
    let token = must_acquire(store, request(&key, now), "claim to expire").await;
    store
        .complete_with(
            &key,
            &token,
            Completion::new(expired).with_response(StoredResponse::new("\"old\"")),
        )
        .await
        .expect("complete with a response");
    must_acquire(store, request(&key, later), "claim after the expiry").await;
    let seen = inspect(store, &key)
        .await
        .expect("inspect must find the new claim");
    assert_eq!(
        seen.record.status,
        Status::InProgress,
        "the new claim's status"
    );
    assert_eq!(
        seen.record.response, None,
        "an in-progress record carries no response"
    );
}

/// [`StoreAdmin::init`] on a store whose table is new: it creates what the store needs, a
/// second run and runs at once change nothing and fail nothing, [`StoreAdmin::check_ready`]
/// then passes, and the store claims and completes. Not part of [`run_all`]: pass a store on a
/// table nobody made yet (a fresh table name, file or schema).
pub async fn init_is_idempotent<S: ClaimStore + StoreAdmin>(store: &S) {
    store
        .init()
        .await
        .unwrap_or_else(|e| panic!("init of a new table failed: {e:#}"));
    store
        .init()
        .await
        .unwrap_or_else(|e| panic!("a second init must change nothing: {e:#}"));
    for result in join_all((0..3).map(|_| store.init())).await {
        result.unwrap_or_else(|e| panic!("inits run at once must all succeed: {e:#}"));
    }
    store
        .check_ready()
        .await
        .unwrap_or_else(|e| panic!("check_ready after init failed: {e:#}"));
    let key = format!("{}#after-init", prefix("init"));
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "claim after init").await;
    store
        .complete_with(&key, &token, Completion::new(now + TTL))
        .await
        .expect("complete after init");
    completed_record(
        store.claim(request(&key, now)).await,
        "claim after init's completion",
    );
}

async fn inspect<S: StoreAdmin>(store: &S, key: &str) -> Option<super::Inspected> {
    store
        .inspect(key)
        .await
        .unwrap_or_else(|e| panic!("inspect of {key:?} failed: {e:#}"))
}

async fn force_release<S: StoreAdmin>(store: &S, key: &str) -> bool {
    store
        .force_release(key)
        .await
        .unwrap_or_else(|e| panic!("force_release of {key:?} failed: {e:#}"))
}

async fn forget<S: StoreAdmin>(store: &S, key: &str) -> bool {
    store
        .forget(key)
        .await
        .unwrap_or_else(|e| panic!("forget of {key:?} failed: {e:#}"))
}

/// A key never seen is acquired, and tokens are unique per claim.
pub async fn fresh_claim_is_acquired<S: ClaimStore>(store: &S) {
    let p = prefix("fresh");
    let now = base_time();
    let a = must_acquire(store, request(&format!("{p}#a"), now), "fresh key").await;
    let b = must_acquire(store, request(&format!("{p}#b"), now), "another fresh key").await;
    assert_ne!(a, b, "two claims must get different owner tokens");
}

/// After completion, a claim of the same key returns `Completed` with the record.
pub async fn completed_key_is_a_duplicate<S: ClaimStore>(store: &S) {
    let key = prefix("duplicate");
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "first claim").await;
    store
        .complete_with(&key, &token, Completion::new(now + TTL))
        .await
        .expect("complete with the owner token must succeed");
    // Even long after the lease would have lapsed, a completed record is a duplicate.
    match store.claim(request(&key, now + LEASE * 10)).await {
        Ok(Claim::Completed(rec)) => assert_eq!(rec.status, Status::Completed),
        other => panic!("claim of a completed key must return Completed, got {other:?}"),
    }
}

/// While a lease is live, other claimers are told the key is held, and when it lapses.
pub async fn live_lease_is_held_elsewhere<S: ClaimStore>(store: &S) {
    let key = prefix("held");
    let now = base_time();
    must_acquire(store, request(&key, now), "first claim").await;
    match store.claim(request(&key, now + LEASE / 2)).await {
        Ok(Claim::HeldElsewhere { lease_until }) => {
            if let Some(l) = lease_until {
                let diff = l
                    .duration_since(now + LEASE)
                    .unwrap_or_else(|e| e.duration());
                assert!(
                    diff < Duration::from_secs(1),
                    "HeldElsewhere must report the holder's lease ({l:?} vs {:?})",
                    now + LEASE
                );
            }
        }
        other => panic!("claim under a live lease must return HeldElsewhere, got {other:?}"),
    }
}

/// Once an in-progress lease has lapsed, a new claimer takes the key over.
pub async fn lapsed_lease_is_taken_over<S: ClaimStore>(store: &S) {
    let key = prefix("takeover");
    let now = base_time();
    let old = must_acquire(store, request(&key, now), "first claim").await;
    let later = now + LEASE + Duration::from_secs(1);
    let new = must_acquire(store, request(&key, later), "claim after the lease lapsed").await;
    assert_ne!(old, new, "a takeover must issue a new token");
}

/// An expired record counts as absent, even if the backend has not deleted it yet.
pub async fn expired_record_counts_as_absent<S: ClaimStore>(store: &S) {
    let key = prefix("expired");
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "first claim").await;
    store
        .complete_with(&key, &token, Completion::new(now + Duration::from_secs(60)))
        .await
        .expect("complete must succeed");
    let after = now + Duration::from_secs(62);
    must_acquire(
        store,
        request(&key, after),
        "claim after the record expired",
    )
    .await;
}

/// An in-progress record never expires before its lease, even when the caller asks for a TTL
/// shorter than the lease: the store keeps the record at least until `lease_until`
/// ([`ClaimRequest::record_expires_at`]). Claimed with `expires_at = now + 1 s` and
/// `lease_until = now + 60 s`, the key is held elsewhere at `now + 30 s` and one millisecond
/// before the lease lapses, the holder can still complete, and the completed record is then a
/// duplicate. The lease still lapses on time: a second key claimed the same way is taken over
/// at `lease_until`.
pub async fn short_ttl_never_ends_a_live_lease<S: ClaimStore>(store: &S) {
    let p = prefix("short-ttl");
    let now = base_time();
    let short = |key| ClaimRequest {
        key,
        now,
        lease_until: now + Duration::from_secs(60),
        expires_at: now + Duration::from_secs(1),
        fingerprint: None,
    };
    let key = format!("{p}#held");
    let token = must_acquire(
        store,
        short(&key),
        "claim with a TTL shorter than the lease",
    )
    .await;
    for at in [
        now + Duration::from_secs(30),
        now + Duration::from_secs(60) - Duration::from_millis(1),
    ] {
        match store.claim(request(&key, at)).await {
            Ok(Claim::HeldElsewhere { .. }) => {}
            other => panic!(
                "an in-progress record must live until its lease even if its TTL is shorter \
                 (claimed with expires_at = now + 1 s, lease_until = now + 60 s; second claim at \
                 now + {:?}): expected HeldElsewhere, got {other:?}",
                at.duration_since(now).unwrap_or_default()
            ),
        }
    }
    store
        .complete_with(&key, &token, Completion::new(now + TTL))
        .await
        .expect("the holder of a short-TTL claim must still complete within its lease");
    match store
        .claim(request(&key, now + Duration::from_secs(30)))
        .await
    {
        Ok(Claim::Completed(_)) => {}
        other => panic!("a completed short-TTL claim must be a duplicate, got {other:?}"),
    }

    let key = format!("{p}#lapses");
    let old = must_acquire(
        store,
        short(&key),
        "claim with a TTL shorter than the lease",
    )
    .await;
    let new = must_acquire(
        store,
        request(&key, now + Duration::from_secs(60)),
        "takeover at lease_until of a short-TTL claim",
    )
    .await;
    assert_ne!(old, new, "a takeover must issue a new token");
}

/// The expiry boundary, "`expires_at` not after `now`", is inclusive: a completed record is a
/// duplicate at `expires_at - 1 ms` and counts as absent at `expires_at`. The expiry is a whole
/// second here because the contract lets a store keep expiries in whole seconds (rounded up, as
/// DynamoDB's TTL attribute does); at a whole second both sides are exact in every store.
pub async fn expiry_boundary_is_inclusive<S: ClaimStore>(store: &S) {
    let key = prefix("expiry-boundary");
    let now = base_time();
    let expires_at = now + Duration::from_secs(60);
    let token = must_acquire(store, request(&key, now), "first claim").await;
    store
        .complete_with(&key, &token, Completion::new(expires_at))
        .await
        .expect("complete must succeed");
    match store
        .claim(request(&key, expires_at - Duration::from_millis(1)))
        .await
    {
        Ok(Claim::Completed(_)) => {}
        other => panic!(
            "one millisecond before expires_at a completed record must still be a duplicate, \
             got {other:?}"
        ),
    }
    must_acquire(
        store,
        request(&key, expires_at),
        "claim at exactly expires_at (a record whose expires_at is not after now counts as absent)",
    )
    .await;
}

/// The lease boundary, "`lease_until` not after `now`", is inclusive and exact to the
/// millisecond (the contract's lease resolution): an in-progress record is held elsewhere at
/// `lease_until - 1 ms` and taken over at `lease_until`, after which the old token is fenced
/// out. The lease ends 250 ms past a whole second, so a store that kept leases in seconds fails.
pub async fn lease_boundary_is_inclusive<S: ClaimStore>(store: &S) {
    let key = prefix("lease-boundary");
    let now = base_time();
    let lease_until = now + Duration::from_millis(30_250);
    let first = ClaimRequest {
        key: &key,
        now,
        lease_until,
        expires_at: now + TTL,
        fingerprint: None,
    };
    let old = must_acquire(store, first, "first claim").await;
    match store
        .claim(request(&key, lease_until - Duration::from_millis(1)))
        .await
    {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!(
            "one millisecond before lease_until the lease is live: expected HeldElsewhere, \
             got {other:?}"
        ),
    }
    let new = must_acquire(
        store,
        request(&key, lease_until),
        "claim at exactly lease_until (a lease whose lease_until is not after now has lapsed)",
    )
    .await;
    assert_ne!(old, new, "a takeover must issue a new token");
    let err = store
        .complete_with(&key, &old, Completion::new(lease_until + TTL))
        .await
        .expect_err("the token whose lease lapsed at the boundary must not complete");
    assert_eq!(err.kind(), ErrorKind::LostClaim, "stale complete: {err}");
}

/// A worker whose lease lapsed and was taken over cannot complete: fencing.
pub async fn stale_token_cannot_complete<S: ClaimStore>(store: &S) {
    let key = prefix("fence-complete");
    let now = base_time();
    let stale = must_acquire(store, request(&key, now), "first claim").await;
    let later = now + LEASE + Duration::from_secs(1);
    let fresh = must_acquire(store, request(&key, later), "takeover").await;
    let err = store
        .complete_with(&key, &stale, Completion::new(later + TTL))
        .await
        .expect_err("a stale token must not complete");
    assert_eq!(err.kind(), ErrorKind::LostClaim, "stale complete: {err}");
    // The new owner's claim is untouched: still in progress, and completable by its owner.
    match store.claim(request(&key, later)).await {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!("a stale complete must change nothing, got {other:?}"),
    }
    store
        .complete_with(&key, &fresh, Completion::new(later + TTL))
        .await
        .expect("the new owner must still complete");
}

/// A worker whose lease lapsed and was taken over cannot release: fencing.
pub async fn stale_token_cannot_release<S: ClaimStore>(store: &S) {
    let key = prefix("fence-release");
    let now = base_time();
    let stale = must_acquire(store, request(&key, now), "first claim").await;
    let later = now + LEASE + Duration::from_secs(1);
    let fresh = must_acquire(store, request(&key, later), "takeover").await;
    let err = store
        .release(&key, &stale)
        .await
        .expect_err("a stale token must not release");
    assert_eq!(err.kind(), ErrorKind::LostClaim, "stale release: {err}");
    match store.claim(request(&key, later)).await {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!("a stale release must change nothing, got {other:?}"),
    }
    // Nor can anyone release a completed record.
    store
        .complete_with(&key, &fresh, Completion::new(later + TTL))
        .await
        .expect("owner completes");
    let err = store
        .release(&key, &fresh)
        .await
        .expect_err("a completed record must not be released");
    assert_eq!(err.kind(), ErrorKind::LostClaim);
    match store.claim(request(&key, later)).await {
        Ok(Claim::Completed(_)) => {}
        other => panic!("release of a completed record must change nothing, got {other:?}"),
    }
}

/// After a release by the owner, the key can be claimed again at once.
pub async fn release_allows_reclaim<S: ClaimStore>(store: &S) {
    let key = prefix("release");
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "first claim").await;
    store.release(&key, &token).await.expect("owner releases");
    must_acquire(store, request(&key, now), "claim after release").await;
    let err = store
        .release(&key, &token)
        .await
        .expect_err("a released token must not release the next claim");
    assert_eq!(err.kind(), ErrorKind::LostClaim);
}

/// Completing twice with the same token succeeds (a retry after an ambiguous error).
pub async fn completion_is_idempotent_per_token<S: ClaimStore>(store: &S) {
    let key = prefix("complete-twice");
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "first claim").await;
    store
        .complete_with(&key, &token, Completion::new(now + TTL))
        .await
        .expect("first complete");
    store
        .complete_with(&key, &token, Completion::new(now + TTL))
        .await
        .expect("a repeated complete with the same token must succeed");
}

/// The fingerprint stored at claim time comes back with a completed record.
pub async fn fingerprint_is_returned<S: ClaimStore>(store: &S) {
    let key = prefix("fingerprint");
    let now = base_time();
    let mut req = request(&key, now);
    req.fingerprint = Some("abc123");
    let token = must_acquire(store, req, "first claim").await;
    store
        .complete_with(&key, &token, Completion::new(now + TTL))
        .await
        .expect("complete");
    match store.claim(request(&key, now)).await {
        Ok(Claim::Completed(rec)) => {
            assert_eq!(rec.fingerprint.as_deref(), Some("abc123"), "fingerprint")
        }
        other => panic!("expected Completed, got {other:?}"),
    }
}

/// A response awkward to store byte for byte: unicode (4-byte too), escapes, control
/// characters, insignificant whitespace and key order a JSON re-encoder would change.
const AWKWARD_RESPONSE: &str = "{\"statusCode\": 201,\n  \"body\":\"{\\\"id\\\":\\\"p-1\\\"}\",  \
     \"a\":1.50, \"z\": \"caf\u{e9} \u{1f4b3} \\u00e9 \\t tab\", \"headers\": {\"B\": \"2\", \"A\": \"1\"}}\t";

fn completed_record(found: Result<Claim, crate::Error>, why: &str) -> super::ClaimRecord {
    match found {
        Ok(Claim::Completed(record)) => record,
        other => panic!("{why}: expected Completed, got {other:?}"),
    }
}

/// The response a completion stores comes back, byte for byte, to every later claim and
/// one-shot write of the key; a completion without one stores none; a repeated completion
/// with the same token keeps the first; the one that took a lapsed lease over stores its own
/// and the stale claimant's is refused.
pub async fn stored_response<S: ClaimStore>(store: &S) {
    let p = prefix("response");
    let now = base_time();

    let key = format!("{p}#awkward");
    let token = must_acquire(store, request(&key, now), "claim to store a response").await;
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL).with_response(StoredResponse::new(AWKWARD_RESPONSE)),
        )
        .await
        .expect("complete with a response");
    let record = completed_record(store.claim(request(&key, now)).await, "claim after");
    assert_eq!(
        record.response.as_ref().map(StoredResponse::as_str),
        Some(AWKWARD_RESPONSE),
        "the stored response must come back byte for byte"
    );
    match store
        .claim_completed(request(&key, now), Effects::none())
        .await
    {
        Ok(OneShotWrite::Completed(record)) => assert_eq!(
            record.response.as_ref().map(StoredResponse::as_str),
            Some(AWKWARD_RESPONSE),
            "a one-shot write finding the key completed returns its response"
        ),
        other => panic!("one-shot on a completed key: expected Completed, got {other:?}"),
    }
    // The same token completing again (a retry after a lost answer) keeps the first response.
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL).with_response(StoredResponse::new("\"second\"")),
        )
        .await
        .expect("a repeated completion with the same token succeeds");
    let record = completed_record(store.claim(request(&key, now)).await, "after retry");
    assert_eq!(
        record.response.as_ref().map(StoredResponse::as_str),
        Some(AWKWARD_RESPONSE),
        "a repeated completion must not replace the stored response"
    );

    // No response, and an empty one, are told apart.
    let key = format!("{p}#none");
    let token = must_acquire(store, request(&key, now), "claim without response").await;
    store
        .complete_with(&key, &token, Completion::new(now + TTL))
        .await
        .expect("complete without a response");
    let record = completed_record(store.claim(request(&key, now)).await, "no response");
    assert_eq!(
        record.response, None,
        "a completion without a response stores none"
    );
    let key = format!("{p}#empty");
    let token = must_acquire(store, request(&key, now), "claim for an empty response").await;
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL).with_response(StoredResponse::new("")),
        )
        .await
        .expect("complete with an empty response");
    let record = completed_record(store.claim(request(&key, now)).await, "empty");
    assert_eq!(
        record.response.as_ref().map(StoredResponse::as_str),
        Some(""),
        "an empty response is stored as empty, not as none"
    );

    // A takeover stores its own response; the stale claimant cannot overwrite it.
    let key = format!("{p}#takeover");
    let stale = must_acquire(store, request(&key, now), "first claimant").await;
    let later = now + LEASE + Duration::from_secs(1);
    let fresh = must_acquire(store, request(&key, later), "takeover after the lease").await;
    store
        .complete_with(
            &key,
            &fresh,
            Completion::new(later + TTL).with_response(StoredResponse::new("\"fresh\"")),
        )
        .await
        .expect("the new claimant completes");
    let err = store
        .complete_with(
            &key,
            &stale,
            Completion::new(later + TTL).with_response(StoredResponse::new("\"stale\"")),
        )
        .await
        .expect_err("the stale claimant must not complete");
    assert_eq!(err.kind(), ErrorKind::LostClaim, "stale completion: {err}");
    let record = completed_record(store.claim(request(&key, later)).await, "takeover");
    assert_eq!(
        record.response.as_ref().map(StoredResponse::as_str),
        Some("\"fresh\""),
        "the response is the one of the claimant that completed"
    );
}

/// After a completion with a response has expired: a new claim's own completion without a
/// response and a one-shot write each carry no response (the in-progress record, as `inspect`
/// shows it, is checked by [`admin_operations`]); a stale response replayed for the new record would answer a duplicate with
/// another message's result.
pub async fn expired_response_is_not_inherited<S: ClaimStore>(store: &S) {
    let p = prefix("replaced");
    let now = base_time();
    let expired = now + Duration::from_secs(10);
    let later = expired + Duration::from_secs(1);
    for (i, one_shot) in [false, true].into_iter().enumerate() {
        let key = format!("{p}#{i}");
        let token = must_acquire(store, request(&key, now), "first claim").await;
        store
            .complete_with(
                &key,
                &token,
                Completion::new(expired).with_response(StoredResponse::new("\"old\"")),
            )
            .await
            .expect("complete with a response");
        if one_shot {
            match store
                .claim_completed(request(&key, later), Effects::none())
                .await
            {
                Ok(OneShotWrite::Committed) => {}
                other => panic!("one-shot after the expiry: expected Committed, got {other:?}"),
            }
        } else {
            let token = must_acquire(store, request(&key, later), "claim after the expiry").await;
            store
                .complete_with(
                    &key,
                    &token,
                    Completion::new(later + Duration::from_secs(60)),
                )
                .await
                .expect("complete without a response");
        }
        match store.claim(request(&key, later)).await {
            Ok(Claim::Completed(record)) => assert_eq!(
                record.response, None,
                "the record that replaced an expired one (one-shot: {one_shot}) has no response"
            ),
            other => panic!("expected Completed, got {other:?}"),
        }
    }
}

/// A response of exactly [`Capabilities::max_response_bytes`](super::Capabilities::max_response_bytes) is stored and replayed whole, even
/// under a key past DynamoDB's key limit; one byte more is refused with `ResponseTooLarge`,
/// writes nothing, and leaves the claim in progress with its owner, who can release it.
pub async fn response_size_limit<S: ClaimStore>(store: &S) {
    let p = prefix("response-limit");
    let now = base_time();
    let limit = store.capabilities().max_response_bytes;
    let at_limit = format!("\"{}\"", "r".repeat(limit.saturating_sub(2)));
    assert_eq!(at_limit.len(), limit);

    let key = format!("{p}#{}", "k".repeat(3000));
    let token = must_acquire(store, request(&key, now), "claim for the largest response").await;
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL).with_response(StoredResponse::new(at_limit.clone())),
        )
        .await
        .unwrap_or_else(|e| panic!("a response of max_response_bytes ({limit}) is stored: {e:#}"));
    let record = completed_record(store.claim(request(&key, now)).await, "largest");
    assert!(
        record.response.as_ref().map(StoredResponse::as_str) == Some(at_limit.as_str()),
        "the largest response must come back whole"
    );

    let key = format!("{p}#over");
    let token = must_acquire(store, request(&key, now), "claim for a too-large response").await;
    let over = format!("{at_limit} ");
    let err = store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL).with_response(StoredResponse::new(over)),
        )
        .await
        .expect_err("a response over max_response_bytes must be refused");
    assert_eq!(err.kind(), ErrorKind::ResponseTooLarge, "too large: {err}");
    assert!(
        matches!(
            store.claim(request(&key, now)).await,
            Ok(Claim::HeldElsewhere { .. })
        ),
        "a refused completion leaves the claim in progress"
    );
    store
        .release(&key, &token)
        .await
        .expect("the owner can still release its claim after the refusal");
    must_acquire(store, request(&key, now), "claim after the release").await;
}

/// Keys with unicode, separators and lengths past DynamoDB's 2048-byte limit work.
pub async fn long_and_odd_keys<S: ClaimStore>(store: &S) {
    let p = prefix("odd");
    let now = base_time();
    let long_a = format!("{p}#{}", "a".repeat(5000));
    let long_b = format!("{p}#{}b", "a".repeat(4999));
    for key in [
        format!("{p}#ünïcødé 🚀 with spaces:and/slashes"),
        long_a.clone(),
        long_b.clone(),
    ] {
        let token = must_acquire(store, request(&key, now), "odd key").await;
        store
            .complete_with(&key, &token, Completion::new(now + TTL))
            .await
            .expect("complete odd key");
        match store.claim(request(&key, now)).await {
            Ok(Claim::Completed(_)) => {}
            other => panic!("odd key must dedupe, got {other:?}"),
        }
    }
}

/// `claimers` concurrent claims on each of `keys` fresh keys: exactly one winner per key.
pub async fn race<S: ClaimStore>(store: &S, keys: usize, claimers: usize) {
    let p = prefix("race");
    let now = base_time();
    let winners: Vec<usize> = stream::iter(0..keys)
        .map(|k| {
            let key = format!("{p}#{k}");
            async move {
                let results =
                    join_all((0..claimers).map(|_| store.claim(request(&key, now)))).await;
                results
                    .into_iter()
                    .map(|r| match r {
                        Ok(Claim::Acquired(_)) => 1,
                        Ok(Claim::HeldElsewhere { .. }) => 0,
                        other => panic!("race on {key:?}: unexpected answer {other:?}"),
                    })
                    .sum::<usize>()
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for (k, w) in winners.iter().enumerate() {
        assert_eq!(
            *w, 1,
            "key #{k}: {w} of {claimers} concurrent claimers won, expected exactly 1"
        );
    }
}

/// `claimers` concurrent takeovers of each of `keys` lapsed leases: exactly one winner per key.
pub async fn takeover_race<S: ClaimStore>(store: &S, keys: usize, claimers: usize) {
    let p = prefix("takeover-race");
    let now = base_time();
    let later = now + LEASE + Duration::from_secs(1);
    for k in 0..keys {
        let key = format!("{p}#{k}");
        must_acquire(store, request(&key, now), "initial claim").await;
    }
    let winners: Vec<usize> = stream::iter(0..keys)
        .map(|k| {
            let key = format!("{p}#{k}");
            async move {
                join_all((0..claimers).map(|_| store.claim(request(&key, later))))
                    .await
                    .into_iter()
                    .map(|r| match r {
                        Ok(Claim::Acquired(_)) => 1,
                        Ok(Claim::HeldElsewhere { .. }) => 0,
                        other => panic!("takeover race on {key:?}: unexpected {other:?}"),
                    })
                    .sum::<usize>()
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for (k, w) in winners.iter().enumerate() {
        assert_eq!(
            *w, 1,
            "takeover of key #{k}: {w} winners, expected exactly 1"
        );
    }
}

/// How the suite makes and observes a store's effects (see [`atomic_effects`]).
pub trait EffectProbe<S: ClaimStore>: Sync {
    /// An effect that, once committed, makes `applied(marker)` true.
    fn write(&self, marker: &str) -> S::Effect;
    /// An effect the store will refuse (a business condition that fails).
    fn rejected(&self, marker: &str) -> S::Effect;
    /// Whether the effect `write(marker)` was committed.
    fn applied(&self, marker: &str) -> impl Future<Output = bool> + Send;
}

/// Effects commit with the completion, or not at all.
pub async fn atomic_effects<S: ClaimStore, P: EffectProbe<S>>(store: &S, probe: &P) {
    let key = prefix("effects");
    let (m_ok, m_bad, m_again) = (
        format!("{key}#ok"),
        format!("{key}#bad"),
        format!("{key}#again"),
    );
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "first claim").await;

    // A refused effect cancels everything: no effect, no completion.
    let err = store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL)
                .with_effects(vec![probe.write(&m_ok), probe.rejected(&m_bad)].into()),
        )
        .await
        .expect_err("a refused effect must fail the completion");
    assert_eq!(
        err.kind(),
        ErrorKind::EffectRejected,
        "refused effect: {err}"
    );
    assert!(
        !probe.applied(&m_ok).await,
        "a cancelled completion must not apply any effect"
    );
    match store.claim(request(&key, now)).await {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!("a cancelled completion must leave the claim in progress, got {other:?}"),
    }

    // A response over the store's limit cancels everything too, effects included.
    let too_large = "r".repeat(store.capabilities().max_response_bytes + 1);
    let err = store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL)
                .with_response(StoredResponse::new(too_large))
                .with_effects(vec![probe.write(&m_ok)].into()),
        )
        .await
        .expect_err("a response over the limit must fail the completion");
    assert_eq!(err.kind(), ErrorKind::ResponseTooLarge, "too large: {err}");
    assert!(
        !probe.applied(&m_ok).await,
        "a completion refused for its response's size must not apply any effect"
    );

    // The owner can release and retry; this time everything commits together.
    store
        .release(&key, &token)
        .await
        .expect("release after cancel");
    let token = must_acquire(store, request(&key, now), "claim after release").await;
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL).with_effects(vec![probe.write(&m_ok)].into()),
        )
        .await
        .expect("complete with a good effect");
    assert!(
        probe.applied(&m_ok).await,
        "a committed completion must apply its effect"
    );
    match store.claim(request(&key, now)).await {
        Ok(Claim::Completed(_)) => {}
        other => panic!("expected Completed after commit, got {other:?}"),
    }

    // A repeated completion is a no-op: its effects are not applied again.
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + TTL).with_effects(vec![probe.write(&m_again)].into()),
        )
        .await
        .expect("repeated complete succeeds");
    assert!(
        !probe.applied(&m_again).await,
        "a repeated completion must not apply effects"
    );

    // A stale token's effects are never applied.
    let key2 = format!("{key}#stale");
    let m_stale = format!("{key}#stale-effect");
    let stale = must_acquire(store, request(&key2, now), "claim").await;
    let later = now + LEASE + Duration::from_secs(1);
    must_acquire(store, request(&key2, later), "takeover").await;
    let err = store
        .complete_with(
            &key2,
            &stale,
            Completion::new(later + TTL).with_effects(vec![probe.write(&m_stale)].into()),
        )
        .await
        .expect_err("stale complete with effects must fail");
    assert_eq!(
        err.kind(),
        ErrorKind::LostClaim,
        "stale complete with effects: {err}"
    );
    assert!(
        !probe.applied(&m_stale).await,
        "a stale completion must not apply effects"
    );
}

/// The one-shot write ([`ClaimStore::claim_completed`]) keeps the claim's rules: a fresh key is
/// committed (completed at once, fingerprint kept), a completed key is a duplicate, a live
/// lease is held elsewhere and left as it is, a lapsed lease or an expired record is taken
/// over, and the in-progress holder of a taken-over key has lost it.
pub async fn one_shot_claims_completed<S: ClaimStore>(store: &S) {
    let p = prefix("one-shot");
    let now = base_time();
    let fresh = format!("{p}#fresh");
    let req = ClaimRequest {
        fingerprint: Some("fp-1"),
        ..request(&fresh, now)
    };
    match store.claim_completed(req, Effects::none()).await {
        Ok(OneShotWrite::Committed) => {}
        other => panic!("one-shot on a fresh key: expected Committed, got {other:?}"),
    }
    match store.claim(request(&fresh, now)).await {
        Ok(Claim::Completed(r)) => {
            assert_eq!(r.status, Status::Completed);
            assert_eq!(
                r.fingerprint.as_deref(),
                Some("fp-1"),
                "one-shot keeps the fingerprint"
            );
        }
        other => panic!("after a one-shot write the key is completed, got {other:?}"),
    }
    match store
        .claim_completed(request(&fresh, now), Effects::none())
        .await
    {
        Ok(OneShotWrite::Completed(r)) => assert_eq!(r.fingerprint.as_deref(), Some("fp-1")),
        other => panic!("one-shot on a completed key: expected Completed, got {other:?}"),
    }

    // A live lease: nothing written, the holder still completes.
    let held = format!("{p}#held");
    let token = must_acquire(store, request(&held, now), "holder").await;
    match store
        .claim_completed(
            request(&held, now + Duration::from_secs(1)),
            Effects::none(),
        )
        .await
    {
        Ok(OneShotWrite::HeldElsewhere { .. }) => {}
        other => panic!("one-shot on a live lease: expected HeldElsewhere, got {other:?}"),
    }
    store
        .complete_with(&held, &token, Completion::new(now + TTL))
        .await
        .expect("a refused one-shot write leaves the holder's claim alone");

    // A lapsed lease: taken over, and the old holder has lost it.
    let lapsed = format!("{p}#lapsed");
    let stale = must_acquire(store, request(&lapsed, now), "stale holder").await;
    let later = now + LEASE + Duration::from_secs(1);
    match store
        .claim_completed(request(&lapsed, later), Effects::none())
        .await
    {
        Ok(OneShotWrite::Committed) => {}
        other => panic!("one-shot on a lapsed lease: expected Committed, got {other:?}"),
    }
    let err = store
        .complete_with(&lapsed, &stale, Completion::new(later + TTL))
        .await
        .expect_err("the holder whose lease lapsed lost the key to the one-shot write");
    assert_eq!(err.kind(), ErrorKind::LostClaim, "{err}");

    // An expired completed record counts as absent.
    let expired = format!("{p}#expired");
    let short = ClaimRequest {
        expires_at: now + Duration::from_secs(60),
        ..request(&expired, now)
    };
    match store.claim_completed(short, Effects::none()).await {
        Ok(OneShotWrite::Committed) => {}
        other => panic!("one-shot on a fresh key: expected Committed, got {other:?}"),
    }
    let after = now + Duration::from_secs(61);
    match store
        .claim_completed(request(&expired, after), Effects::none())
        .await
    {
        Ok(OneShotWrite::Committed) => {}
        other => panic!("one-shot on an expired record: expected Committed, got {other:?}"),
    }
}

/// Of many one-shot writers of one key, exactly one commits; the others see a duplicate (or,
/// racing a claimer, a holder).
pub async fn one_shot_race<S: ClaimStore>(store: &S, keys: usize, writers: usize) {
    let p = prefix("one-shot-race");
    let now = base_time();
    let keys: Vec<String> = (0..keys).map(|i| format!("{p}#{i}")).collect();
    let attempts = keys.iter().flat_map(|k| (0..writers).map(move |_| k));
    let results: Vec<(String, bool)> = stream::iter(attempts)
        .map(|key| async move {
            let won = match store
                .claim_completed(request(key, now), Effects::none())
                .await
            {
                Ok(OneShotWrite::Committed) => true,
                Ok(OneShotWrite::Completed(_) | OneShotWrite::HeldElsewhere { .. }) => false,
                Err(e) => panic!("one-shot race on {key:?}: {e}"),
            };
            (key.clone(), won)
        })
        .buffer_unordered(writers)
        .collect()
        .await;
    for key in &keys {
        let wins = results.iter().filter(|(k, w)| k == key && *w).count();
        assert_eq!(
            wins, 1,
            "one-shot race on {key:?}: {wins} writers committed"
        );
    }
}

/// One-shot effects commit with the record, or not at all: a refused effect writes nothing
/// (the key stays free, no effect applied), a committed write applies its effects once, and a
/// duplicate applies none.
pub async fn one_shot_effects<S: ClaimStore, P: EffectProbe<S>>(store: &S, probe: &P) {
    let key = prefix("one-shot-effects");
    let (m_ok, m_bad, m_dup) = (
        format!("{key}#ok"),
        format!("{key}#bad"),
        format!("{key}#dup"),
    );
    let now = base_time();
    let err = store
        .claim_completed(
            request(&key, now),
            vec![probe.write(&m_ok), probe.rejected(&m_bad)].into(),
        )
        .await
        .expect_err("a refused effect must fail the one-shot write");
    assert_eq!(err.kind(), ErrorKind::EffectRejected, "{err}");
    assert!(
        !probe.applied(&m_ok).await,
        "a refused one-shot write must not apply any effect"
    );
    let token = must_acquire(
        store,
        request(&key, now),
        "a refused one-shot write leaves the key free",
    )
    .await;
    store.release(&key, &token).await.expect("release");

    match store
        .claim_completed(request(&key, now), vec![probe.write(&m_ok)].into())
        .await
    {
        Ok(OneShotWrite::Committed) => {}
        other => panic!("one-shot with a good effect: expected Committed, got {other:?}"),
    }
    assert!(
        probe.applied(&m_ok).await,
        "a committed one-shot write applies its effect"
    );
    match store
        .claim_completed(request(&key, now), vec![probe.write(&m_dup)].into())
        .await
    {
        Ok(OneShotWrite::Completed(_)) => {}
        other => panic!("one-shot on a completed key: expected Completed, got {other:?}"),
    }
    assert!(
        !probe.applied(&m_dup).await,
        "a duplicate's one-shot effects must not be applied"
    );
}
