//! `store::Spy`: it counts every call, passes it on unless its hook says otherwise, and each
//! `Action` does what it says.
#![cfg(feature = "store")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use sqs_claim::store::{
    Capabilities, Claim, ClaimRequest, ClaimStore, Completion, Effects, OneShotWrite, Status,
};
use sqs_claim::{Error, ErrorKind, MemoryStore};
use sqs_claim_testkit::store::{Action, Method, Spy};

fn request(key: &str, now: SystemTime) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        now,
        lease_until: now + Duration::from_secs(60),
        expires_at: now + Duration::from_secs(3600),
        fingerprint: None,
    }
}

fn unavailable() -> Error {
    Error::new(ErrorKind::StoreUnavailable, "scripted")
}

#[tokio::test]
async fn passes_every_call_on_and_counts_it() {
    let spy = Spy::new(MemoryStore::new());
    let now = SystemTime::now();
    let Ok(Claim::Acquired(token)) = spy.claim(request("a", now)).await else {
        panic!("fresh key");
    };
    spy.complete_with("a", &token, Completion::new(now + Duration::from_secs(60)))
        .await
        .unwrap();
    let Ok(Claim::Acquired(token)) = spy.claim(request("b", now)).await else {
        panic!("fresh key");
    };
    spy.release("b", &token).await.unwrap();
    assert_eq!(
        spy.claim_completed(request("c", now), Effects::none())
            .await
            .unwrap(),
        OneShotWrite::Committed
    );
    let counts = [
        Method::Claim,
        Method::Complete,
        Method::Release,
        Method::ClaimCompleted,
    ]
    .map(|m| spy.count(m));
    assert_eq!(counts, [2, 1, 1, 1]);
    assert_eq!(spy.calls(), 5);
    assert_eq!(spy.get_ref().status("a"), Some(Status::Completed));
    assert_eq!(spy.get_ref().status("b"), None);
    assert_eq!(
        spy.capabilities(),
        MemoryStore::new().capabilities(),
        "what the inner store says of itself"
    );
}

#[tokio::test]
async fn clones_share_the_counts_and_the_hook() {
    let refuse = Arc::new(AtomicBool::new(false));
    let r = Arc::clone(&refuse);
    let spy = Spy::new(MemoryStore::new()).on_call(move |_| {
        if r.load(Ordering::SeqCst) {
            Action::Fail(unavailable())
        } else {
            Action::Forward
        }
    });
    let clone = spy.clone();
    let now = SystemTime::now();
    clone.claim(request("a", now)).await.unwrap();
    refuse.store(true, Ordering::SeqCst);
    let err = clone.claim(request("b", now)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    assert_eq!(spy.count(Method::Claim), 2, "a refused call is counted too");
    assert_eq!(
        spy.get_ref().status("b"),
        None,
        "a failed call writes nothing"
    );
}

#[tokio::test]
async fn delay_waits_and_hang_never_answers() {
    let spy = Spy::new(MemoryStore::new()).on_call(|call| match call.key() {
        "slow" => Action::Delay(Duration::from_millis(7)),
        "dark" => Action::Hang,
        _ => Action::Forward,
    });
    let now = SystemTime::now();
    let started = tokio::time::Instant::now();
    spy.claim(request("slow", now)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(7));
    let hung = tokio::time::timeout(Duration::from_millis(200), spy.claim(request("dark", now)));
    assert!(hung.await.is_err(), "a hung call never answers");
    assert_eq!(spy.get_ref().status("dark"), None);
}

#[tokio::test]
async fn fail_after_writes_and_loses_the_answer() {
    let spy = Spy::new(MemoryStore::new()).on_call(|call| match call.method() {
        Method::Complete => Action::FailAfter(unavailable()),
        _ => Action::Forward,
    });
    let now = SystemTime::now();
    let Ok(Claim::Acquired(token)) = spy.claim(request("k", now)).await else {
        panic!("fresh key");
    };
    let err = spy
        .complete_with("k", &token, Completion::new(now + Duration::from_secs(60)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable);
    assert_eq!(
        spy.get_ref().status("k"),
        Some(Status::Completed),
        "the write landed"
    );
}

#[tokio::test]
async fn capabilities_are_mapped_and_packs_are_sent_write_by_write() {
    let spy = Spy::new(MemoryStore::new())
        .map_capabilities(|inner| {
            let mut caps = Capabilities::new();
            caps.max_in_flight = inner.max_in_flight / 2;
            caps
        })
        .on_call(|call| match call.key() {
            "refused" => Action::Fail(unavailable()),
            _ => Action::Forward,
        });
    assert_eq!(
        spy.capabilities().max_in_flight,
        MemoryStore::new().capabilities().max_in_flight / 2
    );
    let now = SystemTime::now();
    let answers = spy
        .claim_completed_packed(vec![
            (request("ok", now), vec![]),
            (request("refused", now), vec![]),
        ])
        .await;
    assert_eq!(spy.count(Method::ClaimCompleted), 2, "one call per write");
    assert!(
        matches!(
            answers.as_slice(),
            [
                sqs_claim::store::Packed::Answered(Ok(OneShotWrite::Committed)),
                sqs_claim::store::Packed::Answered(Err(_))
            ]
        ),
        "{answers:?}"
    );
}
