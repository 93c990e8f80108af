//! The checks of one key's claim: who acquires it, when a lease lapses and a record
//! expires (boundaries included), fencing by token, odd keys.

use super::*;

/// A key never seen is acquired, and tokens are unique per claim.
pub(super) async fn fresh_claim_is_acquired<S: ClaimStore>(store: &S) {
    let p = prefix("fresh");
    let now = base_time();
    let a = must_acquire(store, request(&format!("{p}#a"), now), "fresh key").await;
    let b = must_acquire(store, request(&format!("{p}#b"), now), "another fresh key").await;
    assert_ne!(a, b, "two claims must get different owner tokens");
}

/// After completion, a claim of the same key returns `Completed` with the record.
pub(super) async fn completed_key_is_a_duplicate<S: ClaimStore>(store: &S) {
    let key = prefix("duplicate");
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "first claim").await;
    store
        .complete_with(&key, &token, Completion::new(now + TTL))
        .await
        .expect("complete with the owner token must succeed");
    // Even long after the lease would have lapsed, a completed record is a duplicate.
    match store.claim(request(&key, now + LEASE * 10)).await {
        Ok(Claim::Completed { record: rec, .. }) => assert_eq!(rec.status, Status::Completed),
        other => panic!("claim of a completed key must return Completed, got {other:?}"),
    }
}

/// While a lease is live, other claimers are told the key is held, and when it lapses.
pub(super) async fn live_lease_is_held_elsewhere<S: ClaimStore>(store: &S) {
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
pub(super) async fn lapsed_lease_is_taken_over<S: ClaimStore>(store: &S) {
    let key = prefix("takeover");
    let now = base_time();
    let old = must_acquire(store, request(&key, now), "first claim").await;
    let later = now + LEASE + Duration::from_secs(1);
    let new = must_acquire(store, request(&key, later), "claim after the lease lapsed").await;
    assert_ne!(old, new, "a takeover must issue a new token");
}

/// An expired record counts as absent, even if the backend has not deleted it yet.
pub(super) async fn expired_record_counts_as_absent<S: ClaimStore>(store: &S) {
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
/// (`ClaimRequest::record_expires_at`). Claimed with `expires_at = now + 1 s` and
/// `lease_until = now + 60 s`, the key is held elsewhere at `now + 30 s` and one millisecond
/// before the lease lapses, the holder can still complete, and the completed record is then a
/// duplicate. The lease still lapses on time: a second key claimed the same way is taken over
/// at `lease_until`.
pub(super) async fn short_ttl_never_ends_a_live_lease<S: ClaimStore>(store: &S) {
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
        Ok(Claim::Completed { .. }) => {}
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
pub(super) async fn expiry_boundary_is_inclusive<S: ClaimStore>(store: &S) {
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
        Ok(Claim::Completed { .. }) => {}
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
pub(super) async fn lease_boundary_is_inclusive<S: ClaimStore>(store: &S) {
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
pub(super) async fn stale_token_cannot_complete<S: ClaimStore>(store: &S) {
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
pub(super) async fn stale_token_cannot_release<S: ClaimStore>(store: &S) {
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
        Ok(Claim::Completed { .. }) => {}
        other => panic!("release of a completed record must change nothing, got {other:?}"),
    }
}

/// After a release by the owner, the key can be claimed again at once.
pub(super) async fn release_allows_reclaim<S: ClaimStore>(store: &S) {
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
pub(super) async fn completion_is_idempotent_per_token<S: ClaimStore>(store: &S) {
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
pub(super) async fn fingerprint_is_returned<S: ClaimStore>(store: &S) {
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
        Ok(Claim::Completed { record: rec, .. }) => {
            assert_eq!(rec.fingerprint.as_deref(), Some("abc123"), "fingerprint")
        }
        other => panic!("expected Completed, got {other:?}"),
    }
}

/// Keys with unicode, separators and lengths past DynamoDB's 2048-byte limit work.
pub(super) async fn long_and_odd_keys<S: ClaimStore>(store: &S) {
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
            Ok(Claim::Completed { .. }) => {}
            other => panic!("odd key must dedupe, got {other:?}"),
        }
    }
}
