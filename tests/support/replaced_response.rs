//! A check the conformance suite does not make yet (shared by the store tests, included with
//! `#[path]`): a record that replaces an expired completion does not inherit its response.
#![allow(dead_code)]

use std::time::{Duration, SystemTime};

use sqs_claim::store::conformance::{acquire, request};
use sqs_claim::store::{Claim, ClaimStore, Completion, Effects, OneShotWrite, StoredResponse};

/// After a completion with a response has expired: a new claim's in-progress record (as
/// `inspect` shows it), its own completion without a response, and a one-shot write each carry
/// no response; a stale response replayed for the new record would answer a duplicate with
/// another message's result.
pub(crate) async fn an_expired_completions_response_is_not_inherited<S: ClaimStore>(store: &S) {
    let p = format!("replaced#{}", uuid::Uuid::new_v4());
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let expired = now + Duration::from_secs(10);
    let later = expired + Duration::from_secs(1);
    for (i, one_shot) in [false, true].into_iter().enumerate() {
        let key = format!("{p}#{i}");
        let token = acquire(store, request(&key, now)).await;
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
            let token = acquire(store, request(&key, later)).await;
            if let Ok(Some(inspected)) = store.inspect(&key).await {
                assert_eq!(
                    inspected.record.response, None,
                    "an in-progress record carries no response"
                );
            }
            store
                .complete(
                    &key,
                    &token,
                    later + Duration::from_secs(60),
                    Effects::none(),
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
