//! The checks of a held claim's extension ([`ClaimStore::extend`]): it moves the lease for its
//! owner only, lapsed or not, keeps every other claimer out until the new lease lapses, never
//! lets a record expire under it, and is fenced by the token against a takeover, even one sent
//! at the same instant.

use sqs_claim::store::Extension;

use super::*;

fn extension<'a>(
    key: &'a str,
    token: &'a ClaimToken,
    now: SystemTime,
    lease_until: SystemTime,
) -> Extension<'a> {
    Extension::new(key, token, now, lease_until, now + TTL)
}

/// An extension moves the lease: others are held off until the new lease lapses, then take
/// the key over.
pub(super) async fn extension_moves_the_lease<S: ClaimStore>(store: &S) {
    let key = prefix("extend");
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "first claim").await;
    let at = now + LEASE / 2;
    store
        .extend(extension(&key, &token, at, at + LEASE))
        .await
        .expect("the owner extends its live lease");
    match store.claim(request(&key, now + LEASE + LEASE / 4)).await {
        Ok(Claim::HeldElsewhere { lease_until }) => {
            if let Some(l) = lease_until {
                assert!(
                    l >= at + LEASE - Duration::from_secs(1),
                    "HeldElsewhere must report the extended lease ({l:?} vs {:?})",
                    at + LEASE
                );
            }
        }
        other => panic!("a claim under an extended lease must be HeldElsewhere, got {other:?}"),
    }
    let taker = must_acquire(
        store,
        request(&key, at + LEASE + Duration::from_secs(1)),
        "claim after the extended lease lapsed",
    )
    .await;
    assert_ne!(taker, token);
}

/// A lease that lapsed with nobody taking the key over is still its owner's to extend.
pub(super) async fn lapsed_untaken_lease_is_extended<S: ClaimStore>(store: &S) {
    let key = prefix("extend-lapsed");
    let now = base_time();
    let token = must_acquire(store, request(&key, now), "first claim").await;
    let at = now + LEASE + Duration::from_secs(5);
    store
        .extend(extension(&key, &token, at, at + LEASE))
        .await
        .expect("a lapsed lease nobody took over is still the owner's");
    match store
        .claim(request(&key, at + Duration::from_secs(1)))
        .await
    {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!("the extension must hold others off again, got {other:?}"),
    }
    store
        .complete_with(&key, &token, Completion::new(at + TTL))
        .await
        .expect("the owner still completes");
}

/// A worker taken over cannot extend (the fence): the new owner's lease is untouched.
pub(super) async fn stale_token_cannot_extend<S: ClaimStore>(store: &S) {
    let key = prefix("fence-extend");
    let now = base_time();
    let stale = must_acquire(store, request(&key, now), "first claim").await;
    let later = now + LEASE + Duration::from_secs(1);
    let fresh = must_acquire(store, request(&key, later), "takeover").await;
    let err = store
        .extend(extension(&key, &stale, later, later + LEASE * 10))
        .await
        .expect_err("a stale token must not extend");
    assert_eq!(err.kind(), ErrorKind::LostClaim, "stale extend: {err}");
    // The new owner's lease is as it took it: it lapses at `later + LEASE`, not ten leases on.
    let after_fresh = later + LEASE + Duration::from_secs(1);
    let third = must_acquire(
        store,
        request(&key, after_fresh),
        "claim after the new owner's own lease lapsed (a stale extension must not move it)",
    )
    .await;
    assert_ne!(third, fresh);
    let err = store
        .complete_with(&key, &stale, Completion::new(after_fresh + TTL))
        .await
        .expect_err("a stale token must not complete after a refused extension");
    assert_eq!(err.kind(), ErrorKind::LostClaim);
}

/// A completed, released or absent record is not extended.
pub(super) async fn only_a_claim_in_progress_is_extended<S: ClaimStore>(store: &S) {
    let p = prefix("extend-done");
    let now = base_time();
    let done = format!("{p}#done");
    let token = must_acquire(store, request(&done, now), "claim").await;
    store
        .complete_with(&done, &token, Completion::new(now + TTL))
        .await
        .expect("complete");
    let err = store
        .extend(extension(&done, &token, now, now + LEASE))
        .await
        .expect_err("a completed record must not be extended");
    assert_eq!(err.kind(), ErrorKind::LostClaim, "extend completed: {err}");
    match store.claim(request(&done, now)).await {
        Ok(Claim::Completed { record, .. }) => assert_eq!(record.status, Status::Completed),
        other => panic!("an extension must not touch a completed record, got {other:?}"),
    }
    let released = format!("{p}#released");
    let token = must_acquire(store, request(&released, now), "claim").await;
    store.release(&released, &token).await.expect("release");
    let err = store
        .extend(extension(&released, &token, now, now + LEASE))
        .await
        .expect_err("a released record must not be extended");
    assert_eq!(err.kind(), ErrorKind::LostClaim);
    must_acquire(
        store,
        request(&released, now),
        "a refused extension of a released key leaves it free",
    )
    .await;
    let absent = format!("{p}#absent");
    let err = store
        .extend(extension(&absent, &token, now, now + LEASE))
        .await
        .expect_err("an absent record must not be extended");
    assert_eq!(err.kind(), ErrorKind::LostClaim);
}

/// An extension past a short TTL keeps the record (and any backend TTL) alive under the lease.
pub(super) async fn extension_outlives_a_short_ttl<S: ClaimStore>(store: &S) {
    let key = prefix("extend-ttl");
    let now = base_time();
    let req = ClaimRequest {
        expires_at: now + Duration::from_secs(5),
        ..request(&key, now)
    };
    let token = must_acquire(store, req, "claim with a 5 s TTL").await;
    let at = now + Duration::from_secs(20);
    store
        .extend(Extension::new(
            &key,
            &token,
            at,
            at + Duration::from_secs(100),
            at + Duration::from_secs(1),
        ))
        .await
        .expect("extend past the TTL");
    match store
        .claim(request(&key, at + Duration::from_secs(90)))
        .await
    {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!(
            "a record must not expire under its extended lease (its expiry never before the \
             lease), got {other:?}"
        ),
    }
}

/// An extension and a takeover sent at once, at the instant the lease lapses: exactly one
/// wins, on every key. Never both (the fence), never neither.
pub async fn extension_takeover_race<S: ClaimStore>(store: &S, keys: usize) {
    let p = prefix("extend-race");
    let now = base_time();
    let mut owners = Vec::with_capacity(keys);
    for i in 0..keys {
        let key = format!("{p}#{i}");
        let token = must_acquire(store, request(&key, now), "claim").await;
        owners.push((key, token));
    }
    let lapsed = now + LEASE;
    let outcomes = join_all(owners.iter().map(|(key, token)| async move {
        let extended = store.extend(extension(key, token, lapsed, lapsed + LEASE));
        let taken = store.claim(request(key, lapsed));
        futures::join!(extended, taken)
    }))
    .await;
    for ((key, _), (extended, taken)) in owners.iter().zip(outcomes) {
        match (&extended, &taken) {
            (Ok(()), Ok(Claim::HeldElsewhere { .. })) => {}
            (Err(e), Ok(Claim::Acquired(_))) if e.kind() == ErrorKind::LostClaim => {}
            other => panic!(
                "key {key:?}: an extension and a takeover at once must have exactly one winner, \
                 got {other:?}"
            ),
        }
    }
}
