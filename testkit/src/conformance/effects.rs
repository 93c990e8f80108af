//! The checks of effects committed with a completion, through a store's [`EffectProbe`].

use super::*;

/// How the suite makes and observes a store's effects (see [`run_effects`](super::run_effects)).
pub trait EffectProbe<S: ClaimStore>: Sync {
    /// An effect that, once committed, makes `applied(marker)` true.
    fn write(&self, marker: &str) -> S::Effect;
    /// An effect the store will refuse (a business condition that fails).
    fn rejected(&self, marker: &str) -> S::Effect;
    /// Whether the effect `write(marker)` was committed.
    fn applied(&self, marker: &str) -> impl Future<Output = bool> + Send;
}

/// Effects commit with the completion, or not at all.
pub(super) async fn atomic_effects<S: ClaimStore, P: EffectProbe<S>>(store: &S, probe: &P) {
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
        Ok(Claim::Completed { .. }) => {}
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
pub(super) async fn one_shot_effects<S: ClaimStore, P: EffectProbe<S>>(store: &S, probe: &P) {
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
        Ok(OneShotWrite::Completed { .. }) => {}
        other => panic!("one-shot on a completed key: expected Completed, got {other:?}"),
    }
    assert!(
        !probe.applied(&m_dup).await,
        "a duplicate's one-shot effects must not be applied"
    );
    packed_one_shot(store, probe).await;
}

/// Several one-shot writes in one pack ([`ClaimStore::claim_completed_packed`]): each gets its
/// own answer, as [`ClaimStore::claim_completed`] would have given it, however the others
/// fare: a fresh key committed with its effect, a duplicate answered `Completed` with nothing
/// applied, a write with a refused effect `EffectRejected` with nothing applied and its key
/// left free. A write answered [`Packed::Unsent`] is sent again, as the packer does.
pub(super) async fn packed_one_shot<S: ClaimStore, P: EffectProbe<S>>(store: &S, probe: &P) {
    let key = prefix("packed");
    let keys: Vec<String> = ["fresh", "dup", "refused", "fresh2"]
        .iter()
        .map(|k| format!("{key}-{k}"))
        .collect();
    let marker = |k: &str| format!("{k}#effect");
    let now = base_time();
    match store
        .claim_completed(
            request(&keys[1], now),
            vec![probe.write(&format!("{key}-first"))].into(),
        )
        .await
    {
        Ok(OneShotWrite::Committed) => {}
        other => panic!("packed: the duplicate's first write: expected Committed, got {other:?}"),
    }
    // The caller keeps the effects (as the packer does): each pack borrows them.
    let effects: Vec<Vec<S::Effect>> = (0..4)
        .map(|i| match i {
            2 => vec![
                probe.write(&marker(&keys[2])),
                probe.rejected(&format!("{key}-refused")),
            ],
            _ => vec![probe.write(&marker(&keys[i]))],
        })
        .collect();
    let mut answers: Vec<Option<Result<OneShotWrite, sqs_claim::Error>>> =
        vec![None, None, None, None];
    for round in 0.. {
        let pending: Vec<usize> = (0..4).filter(|i| answers[*i].is_none()).collect();
        if pending.is_empty() {
            break;
        }
        assert!(round < 5, "packed: writes still unsent after 5 rounds");
        let writes = pending
            .iter()
            .map(|&i| (request(&keys[i], now), effects[i].iter().collect()))
            .collect();
        let got = store.claim_completed_packed(writes).await;
        assert_eq!(got.len(), pending.len(), "packed: one answer per write");
        for (i, answer) in pending.into_iter().zip(got) {
            if let Packed::Answered(a) = answer {
                answers[i] = Some(a);
            }
        }
    }
    let answer = |i: usize| answers[i].as_ref().expect("answered");
    assert!(
        matches!(answer(0), Ok(OneShotWrite::Committed)),
        "packed fresh: {:?}",
        answer(0)
    );
    assert!(
        matches!(answer(1), Ok(OneShotWrite::Completed { .. })),
        "packed duplicate: {:?}",
        answer(1)
    );
    assert!(
        matches!(answer(2), Err(e) if e.kind() == ErrorKind::EffectRejected),
        "packed refused effect: {:?}",
        answer(2)
    );
    assert!(
        matches!(answer(3), Ok(OneShotWrite::Committed)),
        "packed second fresh: {:?}",
        answer(3)
    );
    assert!(
        probe.applied(&marker(&keys[0])).await,
        "packed fresh: applied"
    );
    assert!(
        probe.applied(&marker(&keys[3])).await,
        "packed second fresh: applied"
    );
    assert!(
        !probe.applied(&marker(&keys[1])).await,
        "packed duplicate: nothing applied"
    );
    assert!(
        !probe.applied(&marker(&keys[2])).await,
        "packed refused: nothing applied"
    );
    let token = must_acquire(
        store,
        request(&keys[2], now),
        "a packed write with a refused effect leaves its key free",
    )
    .await;
    store.release(&keys[2], &token).await.expect("release");
}
