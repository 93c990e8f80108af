//! `CachedStore`: a bounded in-process cache of completed keys in front of a store. It keeps
//! the store contract (the shared conformance suite, on the memory store), answers only
//! completed keys, never past their record's expiry or its own `max_age`, says what `forget`
//! means across processes, replays stored responses, and, on DynamoDB Local, answers a
//! duplicate batch without a request (the figures are printed, not asserted on time).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use sqs_claim::store::MemoryEffect;
use sqs_claim::store::{
    AnsweredBy, CachedStore, Claim, ClaimRequest, ClaimStore, Completion, Effects, OneShotWrite,
    StoreAdmin, StoredResponse,
};
use sqs_claim::{BoxError, Error, ErrorKind, MemoryStore, Message, Processor};
use sqs_claim_testkit::conformance::{self, request};
use support::batch::*;
use support::dark::FIGURES;
// The spy counts the requests that reach the store behind the cache.
use sqs_claim_testkit::store::{Action, Method, Spy};

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
}

/// A claim of `key` at `now` with a one-hour TTL and a lease of a minute.
fn claim_at<'a>(key: &'a str, now: SystemTime, fingerprint: Option<&'a str>) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        now,
        lease_until: now + Duration::from_secs(60),
        expires_at: now + Duration::from_secs(3600),
        fingerprint,
    }
}

async fn complete(store: &impl ClaimStore, key: &str, now: SystemTime, ttl: Duration) {
    let token = match store.claim(claim_at(key, now, Some("fp"))).await.unwrap() {
        Claim::Acquired(token) => token,
        other => panic!("{key}: expected Acquired, got {other:?}"),
    };
    store
        .complete_with(key, &token, Completion::new(now + ttl))
        .await
        .unwrap();
}

#[tokio::test]
async fn keeps_the_store_contract() {
    let store = CachedStore::new(MemoryStore::new());
    conformance::run_all(&store).await;
    conformance::run_admin(&store).await;
    assert!(
        store.hits() > 0,
        "the suite's duplicates were answered by the cache"
    );
}

/// Effects on a shared set of markers, for the effect checks of the suite.
#[derive(Clone, Default)]
struct Probe(Arc<std::sync::Mutex<std::collections::HashSet<String>>>);

impl conformance::EffectProbe<CachedStore<MemoryStore>> for Probe {
    fn write(&self, marker: &str) -> MemoryEffect {
        let (applied, marker) = (Arc::clone(&self.0), marker.to_owned());
        MemoryEffect::new(move || {
            applied.lock().unwrap().insert(marker.clone());
        })
    }
    fn rejected(&self, marker: &str) -> MemoryEffect {
        let (applied, marker) = (Arc::clone(&self.0), marker.to_owned());
        MemoryEffect::conditional(
            || Err("condition failed".to_owned()),
            move || {
                applied.lock().unwrap().insert(marker.clone());
            },
        )
    }
    fn applied(&self, marker: &str) -> impl std::future::Future<Output = bool> + Send {
        let applied = self.0.lock().unwrap().contains(marker);
        async move { applied }
    }
}

/// Effects commit with the completion or one-shot write through the cache, packs included
/// (`claim_completed_packed`), and a refused effect commits nothing.
#[tokio::test]
async fn keeps_the_effects_contract() {
    let probe = Probe::default();
    conformance::run_effects(&CachedStore::new(MemoryStore::new()), &probe).await;
}

#[tokio::test]
async fn only_completed_keys_are_answered_from_the_cache() {
    let inner = Spy::new(MemoryStore::new());
    let store = CachedStore::new(inner.clone());

    // Held: every claim goes to the inner store.
    let token = match store.claim(claim_at("k", at(0), None)).await.unwrap() {
        Claim::Acquired(t) => t,
        other => panic!("{other:?}"),
    };
    for _ in 0..3 {
        let held = store.claim(claim_at("k", at(1), None)).await.unwrap();
        assert!(matches!(held, Claim::HeldElsewhere { .. }), "{held:?}");
    }
    assert_eq!((inner.calls(), store.len()), (4, 0));

    // Released: nothing cached, the key is free again.
    store.release("k", &token).await.unwrap();
    assert!(store.is_empty());
    assert!(matches!(
        store.claim(claim_at("k", at(2), None)).await.unwrap(),
        Claim::Acquired(_)
    ));

    // Completed: the next claims are answered here, with the record (fingerprint included).
    complete(&store, "done", at(3), Duration::from_secs(3600)).await;
    let before = inner.calls();
    for _ in 0..5 {
        match store
            .claim(claim_at("done", at(4), Some("other")))
            .await
            .unwrap()
        {
            Claim::Completed {
                record,
                answered_by,
            } => {
                assert_eq!(record.fingerprint.as_deref(), Some("fp"));
                assert_eq!(answered_by, AnsweredBy::Cache, "a cache hit says so");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(inner.calls(), before, "no request for a cached duplicate");
    assert_eq!(store.hits(), 5);
}

#[tokio::test]
async fn entries_expire_with_the_record_and_after_max_age() {
    let inner = Spy::new(MemoryStore::new());
    let store = CachedStore::new(inner.clone()).with_max_age(Duration::from_secs(600));

    // A record with a 30 s TTL: cached until 30 s, not a moment longer (then the key is new).
    complete(&store, "short", at(0), Duration::from_secs(30)).await;
    assert!(matches!(
        store.claim(claim_at("short", at(29), None)).await.unwrap(),
        Claim::Completed { .. }
    ));
    let before = inner.calls();
    assert!(matches!(
        store.claim(claim_at("short", at(30), None)).await.unwrap(),
        Claim::Acquired(_)
    ));
    assert_eq!(
        inner.calls(),
        before + 1,
        "at its expiry the record is asked for"
    );

    // A record with a day's TTL: the entry answers for max_age (600 s), then the inner store.
    complete(&store, "long", at(0), Duration::from_secs(86_400)).await;
    let before = inner.calls();
    store.claim(claim_at("long", at(599), None)).await.unwrap();
    assert_eq!(inner.calls(), before);
    let again = store.claim(claim_at("long", at(600), None)).await.unwrap();
    assert!(
        matches!(
            again,
            Claim::Completed {
                answered_by: AnsweredBy::Store,
                ..
            }
        ),
        "the inner store's answer, forwarded: {again:?}"
    );
    assert_eq!(
        inner.calls(),
        before + 1,
        "past max_age the inner store answers"
    );
}

/// `forget` by an operator (through another process's store) deletes the record; this warm
/// process still answers "completed" from its entry until max_age. `forget` through this store
/// drops its own entry too.
#[tokio::test]
async fn forget_elsewhere_leaves_a_warm_entry_until_it_expires() {
    let table = MemoryStore::new();
    let warm = CachedStore::new(table.clone()).with_max_age(Duration::from_secs(300));
    let operator = table.clone();

    complete(&warm, "k", at(0), Duration::from_secs(86_400)).await;
    assert!(operator.forget("k").await.unwrap());
    assert!(
        matches!(
            warm.claim(claim_at("k", at(10), None)).await.unwrap(),
            Claim::Completed { .. }
        ),
        "the warm process still skips the forgotten key"
    );
    assert!(
        matches!(
            warm.claim(claim_at("k", at(300), None)).await.unwrap(),
            Claim::Acquired(_)
        ),
        "after max_age it runs again"
    );

    let warm = CachedStore::new(table.clone());
    complete(&warm, "j", at(0), Duration::from_secs(86_400)).await;
    assert!(warm.forget("j").await.unwrap());
    assert!(warm.is_empty());
    assert!(matches!(
        warm.claim(claim_at("j", at(1), None)).await.unwrap(),
        Claim::Acquired(_)
    ));
}

/// The idempotency layer's stored response is cached with the key and replayed byte for byte;
/// one too large for the cache is left to the store.
#[tokio::test]
async fn stored_responses_are_replayed_from_the_cache() {
    let inner = Spy::new(MemoryStore::new());
    let store = CachedStore::new(inner.clone());
    for (key, response) in [
        ("small", "{\"charge\":\"ch_1\",\"é\":[1,2]}".to_owned()),
        ("large", "x".repeat(100 * 1024)),
    ] {
        let token = match store.claim(claim_at(key, at(0), None)).await.unwrap() {
            Claim::Acquired(t) => t,
            other => panic!("{other:?}"),
        };
        let completion = Completion::new(at(3600)).with_response(StoredResponse::new(&response));
        store.complete_with(key, &token, completion).await.unwrap();
        let before = inner.calls();
        match store.claim(claim_at(key, at(1), None)).await.unwrap() {
            Claim::Completed { record, .. } => assert_eq!(
                record.response.as_ref().map(StoredResponse::as_str),
                Some(response.as_str())
            ),
            other => panic!("{other:?}"),
        }
        let reached = inner.calls() - before;
        assert_eq!(reached, usize::from(key == "large"), "{key}");
    }
}

/// A one-shot processor: a committed key is cached, its duplicate needs no write.
#[tokio::test]
async fn one_shot_writes_are_cached() {
    let inner = Spy::new(MemoryStore::new());
    let store = CachedStore::new(inner.clone());
    let req = request("one", at(0));
    assert_eq!(
        store.claim_completed(req, Effects::none()).await.unwrap(),
        OneShotWrite::Committed
    );
    let before = inner.calls();
    let again = store
        .claim_completed(request("one", at(1)), Effects::none())
        .await
        .unwrap();
    assert!(
        matches!(
            again,
            OneShotWrite::Completed {
                answered_by: AnsweredBy::Cache,
                ..
            }
        ),
        "{again:?}"
    );
    assert_eq!(inner.calls(), before);
}

/// The figures of issue 20: a batch of duplicates (a redelivered batch) on a warm process, with
/// the cache and without, in requests to DynamoDB Local and wall time. Printed, not asserted on
/// time; the request counts are asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_batch_figures_on_dynamodb_local() {
    const N: usize = 100;
    let handler = tower::service_fn(|_msg: Message| async { Ok::<(), Error>(()) });
    let batch: Vec<_> = (0..N)
        .map(|i| rec(&format!("m-{i}"), &format!("{{\"order_id\":\"o-{i}\"}}")))
        .collect();
    let mut lines = Vec::new();
    for cached in [false, true] {
        let dynamodb = Spy::new(support::dynamodb::dynamodb_store("cached").await);
        let (report, first, duplicate, elapsed) = if cached {
            let p = Processor::builder(CachedStore::new(dynamodb.clone()), handler)
                .namespace("figures")
                .build();
            p.process(event(&batch)).await.unwrap();
            let first = dynamodb.calls();
            let started = Instant::now();
            let report = p.process(event(&batch)).await.unwrap();
            (report, first, dynamodb.calls() - first, started.elapsed())
        } else {
            let p = Processor::builder(dynamodb.clone(), handler)
                .namespace("figures")
                .build();
            p.process(event(&batch)).await.unwrap();
            let first = dynamodb.calls();
            let started = Instant::now();
            let report = p.process(event(&batch)).await.unwrap();
            (report, first, dynamodb.calls() - first, started.elapsed())
        };
        assert_eq!(report.counts().duplicate, N);
        assert_eq!(duplicate, if cached { 0 } else { N }, "cached {cached}");
        lines.push(format!(
            "{:<14} first batch {first} requests; duplicate batch of {N}: {duplicate} requests, {:?}",
            if cached { "CachedStore" } else { "DynamoDbStore" },
            elapsed
        ));
    }
    println!("figures (DynamoDB Local):\n  {}\n  {}", lines[0], lines[1]);
}

/// The idempotency layer over a cached store: a warm duplicate gets the first response, byte
/// for byte, without a request to the store.
#[cfg(feature = "idempotency")]
#[tokio::test]
async fn the_idempotency_layer_replays_from_the_cache() {
    use lambda_runtime::{Context, LambdaEvent};
    use sqs_claim::idempotency::{Idempotency, key};

    let inner = Spy::new(MemoryStore::new());
    let idempotency =
        Idempotency::builder(CachedStore::new(inner.clone()), key::json_pointer("/order"))
            .namespace("orders")
            .build();
    let event = || LambdaEvent::new(serde_json::json!({"order": "o-1"}), Context::default());
    let handler = |_event: LambdaEvent<serde_json::Value>| async {
        Ok::<_, sqs_claim::BoxError>(serde_json::json!({"charge": "ch_1", "amount": 0.1}))
    };
    let first = idempotency.call(event(), handler).await.unwrap();
    let requests = inner.calls();
    assert_eq!(requests, 2, "a claim and a completion");
    let again = idempotency.call(event(), handler).await.unwrap();
    assert!(again.is_replay());
    assert_eq!(again.json(), first.json());
    assert_eq!(inner.calls(), requests, "the duplicate made no request");
}

/// Packed one-shot writes: a cached key is answered here, the others go to the inner store in
/// one pack, each answer to its own write: a refused write is never cached as completed.
#[tokio::test]
async fn packed_one_shot_writes_answer_cached_keys_and_cache_the_rest() {
    use sqs_claim::store::Packed;

    let inner = Spy::new(MemoryStore::new());
    let store = CachedStore::new(inner.clone());
    assert_eq!(
        store
            .claim_completed(request("old", at(0)), Effects::none())
            .await
            .unwrap(),
        OneShotWrite::Committed
    );
    let before = inner.calls();
    let refused = MemoryEffect::conditional(|| Err("no".to_owned()), || {});
    let answers = store
        .claim_completed_packed(vec![
            (request("old", at(1)), vec![]),
            (request("refused", at(1)), vec![&refused]),
            (request("new", at(1)), vec![]),
        ])
        .await;
    assert!(
        matches!(
            answers.as_slice(),
            [
                Packed::Answered(Ok(OneShotWrite::Completed { .. })),
                Packed::Answered(Err(_)),
                Packed::Answered(Ok(OneShotWrite::Committed))
            ]
        ),
        "{answers:?}"
    );
    assert_eq!(inner.calls(), before + 2, "the cached key reached no store");
    let again = store
        .claim_completed(request("new", at(2)), Effects::none())
        .await
        .unwrap();
    assert!(matches!(again, OneShotWrite::Completed { .. }), "{again:?}");
    assert_eq!(inner.calls(), before + 2, "the new key is cached");
    let retried = store
        .claim_completed(request("refused", at(2)), Effects::none())
        .await
        .unwrap();
    assert_eq!(
        retried,
        OneShotWrite::Committed,
        "the refused key was not cached"
    );
}

/// A completion whose answer was lost, retried with another response: the inner store kept the
/// first, and so must every duplicate; nothing is cached from the retry (which could carry the
/// second), the inner record is cached at the next duplicate instead.
#[tokio::test]
async fn a_retried_completion_caches_the_stored_response_not_the_retrys() {
    let lose = Arc::new(AtomicBool::new(false));
    let inner = Spy::new(MemoryStore::new()).on_call({
        let lose = Arc::clone(&lose);
        move |call| match call.method() {
            Method::Complete if lose.swap(false, Ordering::SeqCst) => {
                Action::FailAfter(Error::new(
                    ErrorKind::StoreUnavailable,
                    "the answer was lost (committed)",
                ))
            }
            _ => Action::Forward,
        }
    });
    let store = CachedStore::new(inner.clone());
    let now = at(0);
    let Ok(Claim::Acquired(token)) = store.claim(claim_at("k", now, Some("fp"))).await else {
        panic!("fresh key");
    };
    let completion = |r: &str| {
        Completion::new(now + Duration::from_secs(600)).with_response(StoredResponse::new(r))
    };
    lose.store(true, Ordering::SeqCst);
    let err = store
        .complete_with("k", &token, completion("\"first\""))
        .await
        .expect_err("the lost answer");
    assert!(err.is_transient());
    store
        .complete_with("k", &token, completion("\"second\""))
        .await
        .expect("the retry is a no-op success");
    for _ in 0..2 {
        match store.claim(claim_at("k", now, Some("fp"))).await {
            Ok(Claim::Completed { record: rec, .. }) => assert_eq!(
                rec.response.as_ref().map(StoredResponse::as_str),
                Some("\"first\""),
                "the inner record's response, from the store or the cache"
            ),
            other => panic!("expected Completed, got {other:?}"),
        }
    }
    assert_eq!(store.hits(), 1, "the first duplicate asks the inner store");
}

/// A duplicate the warm cache answers is no answer from the store behind it. The store goes
/// dark (each claim it gets is answered by its client's timeout, 1 s) behind a batch of one new
/// message, four cached duplicates and nine more new ones, four at a time: the four duplicates
/// are answered at once while the first new message waits, and their places go to the next
/// three new messages (a slow message holds only its own place). When the first times out the
/// batch sees the store dark (nothing *from the store* answered since that call was sent), so
/// the four claims in flight are the only ones to reach the store, and the other six are
/// reported at once as "store dark" after one timeout. Were the cache's answers the store's,
/// the next window of new messages would wait out another timeout first (7 claims, 2 s).
#[tokio::test(start_paused = true)]
async fn cached_duplicates_do_not_hide_a_dark_store() {
    let (spy, dark) = support::dark::darkening(Duration::from_secs(1));
    let handler = tower::service_fn(|_msg: Message| async { Ok::<(), Error>(()) });
    let p = Processor::builder(CachedStore::new(spy.clone()), handler)
        .namespace("dark")
        .concurrency(4)
        .build();
    let (figures, took, report) =
        support::dark::behind_duplicates(async |e| p.process(e).await, (&spy, &dark)).await;
    assert_eq!(
        (figures, took),
        ((4, 4, 6), 1),
        "{FIGURES}, seconds: {report}"
    );
}

/// The same with one-shot writes packed (a store that packs, as DynamoDB does, behind the
/// cache): the duplicates the cache answers inside a pack are no answer from the store either.
#[tokio::test(start_paused = true)]
async fn cached_duplicates_in_a_pack_do_not_hide_a_dark_store() {
    let (spy, dark) = support::dark::darkening(Duration::from_secs(1));
    let packing = spy.clone().map_capabilities(|mut c| {
        c.max_pack_actions = 100;
        c
    });
    let effects = |_msg: &Message| -> Result<Effects<MemoryEffect>, BoxError> {
        Ok(Effects::one(MemoryEffect::new(|| {})))
    };
    let p = Processor::one_shot(CachedStore::new(packing), effects)
        .namespace("dark-packed")
        .concurrency(4)
        .build();
    let (figures, took, report) =
        support::dark::behind_duplicates(async |e| p.process(e).await, (&spy, &dark)).await;
    assert!(!spy.packs().is_empty(), "the writes went in packs");
    assert_eq!(
        (figures, took),
        ((1, 3, 10), 1),
        "{FIGURES}, seconds: {report}"
    );
}
