//! The checks of effects committed with a completion, through a store's [`EffectProbe`].

use super::*;

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
