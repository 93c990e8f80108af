//! The checks of the stored response: kept byte for byte, never inherited by a record that
//! replaced an expired one, refused past the store's limit.

use super::*;

/// A response awkward to store byte for byte: unicode (4-byte too), escapes, control
/// characters, insignificant whitespace and key order a JSON re-encoder would change.
pub(super) const AWKWARD_RESPONSE: &str = "{\"statusCode\": 201,\n  \"body\":\"{\\\"id\\\":\\\"p-1\\\"}\",  \
     \"a\":1.50, \"z\": \"caf\u{e9} \u{1f4b3} \\u00e9 \\t tab\", \"headers\": {\"B\": \"2\", \"A\": \"1\"}}\t";

/// The response a completion stores comes back, byte for byte, to every later claim and
/// one-shot write of the key; a completion without one stores none; a repeated completion
/// with the same token keeps the first; the one that took a lapsed lease over stores its own
/// and the stale claimant's is refused.
pub(super) async fn stored_response<S: ClaimStore>(store: &S) {
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
        Ok(OneShotWrite::Completed { record, .. }) => assert_eq!(
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
/// shows it, is checked by [`run_admin`](super::run_admin)); a stale response replayed for the new record would answer a duplicate with
/// another message's result.
pub(super) async fn expired_response_is_not_inherited<S: ClaimStore>(store: &S) {
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
            Ok(Claim::Completed { record, .. }) => assert_eq!(
                record.response, None,
                "the record that replaced an expired one (one-shot: {one_shot}) has no response"
            ),
            other => panic!("expected Completed, got {other:?}"),
        }
    }
}

/// A response of exactly [`Capabilities::max_response_bytes`](sqs_claim::store::Capabilities::max_response_bytes) is stored and replayed whole, even
/// under a key past DynamoDB's key limit; one byte more is refused with `ResponseTooLarge`,
/// writes nothing, and leaves the claim in progress with its owner, who can release it.
pub(super) async fn response_size_limit<S: ClaimStore>(store: &S) {
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
