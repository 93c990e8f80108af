//! The checks of [`StoreAdmin`]: the operator's methods for one key, and `init`.

use super::*;

/// The operator's methods for one key ([`StoreAdmin::inspect`], [`StoreAdmin::force_release`],
/// [`StoreAdmin::forget`]): each reads or deletes exactly what the contract says, never a
/// record of the other status, a force release racing the owner's completion leaves one
/// consistent outcome, and a record that replaced an expired completion shows no response.
/// Not part of [`run_all`](super::run_all): administration is a trait of its own.
pub(super) async fn admin_operations<S: ClaimStore + StoreAdmin>(store: &S) {
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
        Ok(Claim::Completed { .. }) => {}
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
/// then passes, and the store claims and completes. Not part of [`run_all`](super::run_all): pass a store on a
/// table nobody made yet (a fresh table name, file or schema).
pub(super) async fn init_is_idempotent<S: ClaimStore + StoreAdmin>(store: &S) {
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

pub(super) async fn inspect<S: StoreAdmin>(
    store: &S,
    key: &str,
) -> Option<sqs_claim::store::Inspected> {
    store
        .inspect(key)
        .await
        .unwrap_or_else(|e| panic!("inspect of {key:?} failed: {e:#}"))
}

pub(super) async fn force_release<S: StoreAdmin>(store: &S, key: &str) -> bool {
    store
        .force_release(key)
        .await
        .unwrap_or_else(|e| panic!("force_release of {key:?} failed: {e:#}"))
}

pub(super) async fn forget<S: StoreAdmin>(store: &S, key: &str) -> bool {
    store
        .forget(key)
        .await
        .unwrap_or_else(|e| panic!("forget of {key:?} failed: {e:#}"))
}
