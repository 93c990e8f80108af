//! The checks of concurrent claimers and one-shot writers: exactly one wins each key.

use super::*;

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

/// Of many one-shot writers of one key, exactly one commits; the others see a duplicate (or,
/// racing a claimer, a holder).
pub(super) async fn one_shot_race<S: ClaimStore>(store: &S, keys: usize, writers: usize) {
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
                Ok(OneShotWrite::Completed { .. } | OneShotWrite::HeldElsewhere { .. }) => false,
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
