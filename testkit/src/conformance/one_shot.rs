//! The checks of the one-shot write ([`ClaimStore::claim_completed`]).

use super::*;

/// The one-shot write ([`ClaimStore::claim_completed`]) keeps the claim's rules: a fresh key is
/// committed (completed at once, fingerprint kept), a completed key is a duplicate, a live
/// lease is held elsewhere and left as it is, a lapsed lease or an expired record is taken
/// over, and the in-progress holder of a taken-over key has lost it.
pub(super) async fn one_shot_claims_completed<S: ClaimStore>(store: &S) {
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
        Ok(Claim::Completed { record: r, .. }) => {
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
        Ok(OneShotWrite::Completed { record: r, .. }) => {
            assert_eq!(r.fingerprint.as_deref(), Some("fp-1"))
        }
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
