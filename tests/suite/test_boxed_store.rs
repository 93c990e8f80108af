//! `BoxStore` is the store it boxes: the shared conformance suite through the box (memory, and
//! SQLite with feature `sqlite`), every method with a default forwarded (capabilities,
//! `effect_item`, the one-shot write and the pack), effects of another type refused with
//! nothing written, and the box as the store of the processor, the idempotency layer and a
//! `CachedStore`.

use crate::support;

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sqs_claim::store::MemoryEffect;
use sqs_claim::store::{
    AnyEffect, BoxStore, CachedStore, Capabilities, ClaimStore, Completion, Effects, OneShotWrite,
    Packed, Status, StoreAdmin,
};
use sqs_claim::{BoxError, Error, ErrorKind, MemoryStore, Message, Processor};
use sqs_claim_testkit::conformance::{self, EffectProbe, request};
use sqs_claim_testkit::store::{Method, Spy};
use support::batch::*;
use tower::service_fn;

/// Memory effects, boxed: `write` inserts its marker in a shared set, `rejected` refuses.
#[derive(Clone, Default)]
struct Probe {
    applied: Arc<Mutex<HashSet<String>>>,
}

impl Probe {
    fn memory(&self, marker: &str) -> MemoryEffect {
        let applied = Arc::clone(&self.applied);
        let marker = marker.to_owned();
        MemoryEffect::new(move || {
            applied.lock().unwrap().insert(marker.clone());
        })
    }
}

impl EffectProbe<BoxStore> for Probe {
    fn write(&self, marker: &str) -> AnyEffect {
        AnyEffect::new(self.memory(marker))
    }

    fn rejected(&self, marker: &str) -> AnyEffect {
        let applied = Arc::clone(&self.applied);
        let marker = marker.to_owned();
        AnyEffect::new(MemoryEffect::conditional(
            || Err("condition failed".to_owned()),
            move || {
                applied.lock().unwrap().insert(marker.clone());
            },
        ))
    }

    fn applied(&self, marker: &str) -> impl Future<Output = bool> + Send {
        let applied = self.applied.lock().unwrap().contains(marker);
        async move { applied }
    }
}

fn boxed_memory() -> BoxStore {
    BoxStore::new(MemoryStore::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_over_memory() {
    conformance::run_all(&boxed_memory()).await;
    conformance::run_admin(&boxed_memory()).await;
    let probe = Probe::default();
    conformance::run_effects(&boxed_memory(), &probe).await;
    assert!(
        !probe
            .applied
            .lock()
            .unwrap()
            .iter()
            .any(|m| m.ends_with("#bad")),
        "a refused effect was applied through the box"
    );
}

/// The same over a packing store (the spy says it packs), so that the suite's pack goes through
/// the box's own `claim_completed_packed`.
#[tokio::test]
async fn conformance_over_a_packing_store() {
    let spy = spy();
    let store = BoxStore::new(spy.clone());
    conformance::run_all(&store).await;
    conformance::run_effects(&store, &Probe::default()).await;
    assert!(!spy.packs().is_empty(), "the pack was forwarded");
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use sqs_claim::{SqlEffect, SqlValue, SqliteStore};

    /// Effects as rows of a `probe` table, boxed; refusal by a statement that changes no row
    /// while `expect_rows(1)` asks for one.
    struct RowCountProbe(SqliteStore);

    impl EffectProbe<BoxStore> for RowCountProbe {
        fn write(&self, marker: &str) -> AnyEffect {
            AnyEffect::new(SqlEffect::new(
                "INSERT INTO probe (marker, amount) VALUES (?1, 1)",
                vec![marker.into()],
            ))
        }

        fn rejected(&self, marker: &str) -> AnyEffect {
            AnyEffect::new(
                SqlEffect::new(
                    "UPDATE probe SET amount = amount + 1 WHERE marker = ?1",
                    vec![marker.into()],
                )
                .expect_rows(1),
            )
        }

        async fn applied(&self, marker: &str) -> bool {
            let rows = self
                .0
                .query(
                    "SELECT count(*) FROM probe WHERE marker = ?1",
                    vec![marker.into()],
                )
                .await
                .expect("query the probe table");
            rows[0][0] != SqlValue::Integer(0)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conformance_over_sqlite() {
        let sqlite = SqliteStore::open_in_memory().expect("open in memory");
        sqlite
            .execute_batch("CREATE TABLE probe (marker TEXT PRIMARY KEY, amount INTEGER NOT NULL);")
            .await
            .expect("create the probe table");
        let store = BoxStore::new(sqlite.clone());
        conformance::run_all(&store).await;
        conformance::run_admin(&store).await;
        let probe = RowCountProbe(sqlite.clone());
        conformance::run_effects(&store, &probe).await;
        assert_eq!(
            store.capabilities(),
            sqlite.capabilities(),
            "SQLite's capabilities (an atomic one-shot) survive boxing"
        );
    }

    /// A memory effect given to a boxed SQLite store is refused; the row it came with is not
    /// written.
    #[tokio::test]
    async fn a_memory_effect_is_refused_by_a_boxed_sqlite_store() {
        let store = BoxStore::new(SqliteStore::open_in_memory().expect("open in memory"));
        let now = SystemTime::now();
        let err = store
            .claim_completed(
                request("k", now),
                Effects::one(AnyEffect::new(MemoryEffect::new(|| {}))),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::EffectRejected);
        assert!(err.to_string().contains("SqlEffect"), "{err}");
        assert!(store.inspect("k").await.unwrap().is_none());
    }
}

/// A type the memory store does not take, with a value that must never show in an error.
#[derive(Clone)]
struct Transfer {
    #[allow(dead_code)]
    account: String,
}

fn wrong_effect() -> AnyEffect {
    AnyEffect::new(Transfer {
        account: "secret-account-4111".to_owned(),
    })
}

fn assert_mismatch(err: &Error) {
    assert_eq!(err.kind(), ErrorKind::EffectRejected, "{err}");
    let text = format!("{err:#} {err:?}");
    assert!(text.contains("Transfer"), "names the given type: {text}");
    assert!(
        text.contains("MemoryEffect"),
        "names the store's type: {text}"
    );
    assert!(!text.contains("secret"), "never the value: {text}");
}

#[tokio::test]
async fn an_effect_of_another_type_fails_the_completion_and_writes_nothing() {
    let memory = MemoryStore::new();
    let store = BoxStore::new(memory.clone());
    let probe = Probe::default();
    let now = SystemTime::now();
    let token = conformance::acquire(&store, request("k", now)).await;
    // One good effect and one of another type: neither is applied.
    let effects: Effects<AnyEffect> = vec![probe.write("k#good"), wrong_effect()].into();
    let err = store
        .complete_with("k", &token, Completion::new(now).with_effects(effects))
        .await
        .unwrap_err();
    assert_mismatch(&err);
    assert!(!probe.applied("k#good").await, "nothing of the completion");
    assert_eq!(
        memory.status("k"),
        Some(Status::InProgress),
        "the claim stays held"
    );
    // The claim is still this token's: it completes with the right effects.
    store
        .complete_with(
            "k",
            &token,
            Completion::new(now).with_effects(Effects::one(probe.write("k#good"))),
        )
        .await
        .unwrap();
    assert!(probe.applied("k#good").await);
    assert_eq!(memory.status("k"), Some(Status::Completed));
}

#[tokio::test]
async fn an_effect_of_another_type_fails_the_one_shot_and_writes_nothing() {
    let memory = MemoryStore::new();
    let store = BoxStore::new(memory.clone());
    let now = SystemTime::now();
    let err = store
        .claim_completed(request("k", now), Effects::one(wrong_effect()))
        .await
        .unwrap_err();
    assert_mismatch(&err);
    assert!(memory.is_empty(), "no record at all: the key is free");

    // In a pack: that write alone is refused, the others go, in order.
    let probe = Probe::default();
    let (a, b, c) = (probe.write("a"), wrong_effect(), probe.write("c"));
    let answers = store
        .claim_completed_packed(vec![
            (request("a", now), vec![&a]),
            (request("b", now), vec![&b]),
            (request("c", now), vec![&c]),
        ])
        .await;
    assert!(matches!(
        &answers[..],
        [
            Packed::Answered(Ok(OneShotWrite::Committed)),
            Packed::Answered(Err(_)),
            Packed::Answered(Ok(OneShotWrite::Committed)),
        ]
    ));
    if let Packed::Answered(Err(e)) = &answers[1] {
        assert_mismatch(e);
    }
    assert!(probe.applied("a").await && probe.applied("c").await);
    assert_eq!(memory.status("b"), None);
}

/// The kit's spy over a memory store, answering capabilities and item hashes of its own (it
/// says it packs, and records each pack before sending its writes one by one).
type TestSpy = Spy<MemoryStore>;

const SPY_CAPABILITIES: Capabilities = {
    let mut caps = Capabilities::new();
    caps.max_in_flight = 7;
    caps.retries_internally = true;
    caps.atomic_one_shot = true;
    caps.max_pack_actions = 5;
    caps
};

fn spy() -> TestSpy {
    Spy::new(MemoryStore::new())
        .map_capabilities(|_| SPY_CAPABILITIES)
        .map_effect_item(|_| Some(42))
}

#[tokio::test]
async fn every_method_with_a_default_is_forwarded() {
    let spy = spy();
    let store = BoxStore::new(spy.clone());
    assert_eq!(store.capabilities(), SPY_CAPABILITIES);

    let effect = AnyEffect::new(MemoryEffect::new(|| {}));
    assert_eq!(
        store.effect_item(&effect),
        Some(42),
        "the inner store's hash"
    );
    assert_eq!(
        store.effect_item(&wrong_effect()),
        None,
        "an effect of another type has no item"
    );

    let now = SystemTime::now();
    let written = store
        .claim_completed(request("one", now), Effects::one(effect.clone()))
        .await
        .unwrap();
    assert_eq!(written, OneShotWrite::Committed);
    assert_eq!(
        (spy.count(Method::ClaimCompleted), spy.count(Method::Claim)),
        (1, 0),
        "not claim-then-complete"
    );

    let answers = store
        .claim_completed_packed(vec![
            (request("p1", now), vec![&effect]),
            (request("p2", now), vec![]),
        ])
        .await;
    assert_eq!(answers.len(), 2);
    assert_eq!(spy.packs(), [2], "one pack, not two writes");
}

#[test]
fn debug_names_types_only() {
    let store = boxed_memory();
    let shown = format!("{store:?}");
    assert!(shown.starts_with("BoxStore("), "{shown}");
    assert!(shown.contains("MemoryStore"), "{shown}");
    // Boxing a box does not nest.
    assert_eq!(format!("{:?}", BoxStore::new(store.clone())), shown);

    let effect = wrong_effect();
    let shown = format!("{effect:?}");
    assert!(
        shown.contains("Transfer") && !shown.contains("secret"),
        "{shown}"
    );
    assert_eq!(
        AnyEffect::new(effect.clone()).type_name(),
        effect.type_name()
    );
    assert!(effect.downcast_ref::<Transfer>().is_some());
    assert!(effect.downcast_ref::<MemoryEffect>().is_none());
}

/// A processor over a boxed store: effects commit with the completion, a redelivery is a
/// duplicate, and a handler returning effects of another type fails its message and releases
/// the claim.
#[tokio::test]
async fn a_processor_over_a_boxed_store() {
    let memory = MemoryStore::new();
    let credited = Arc::new(AtomicUsize::new(0));
    let handler = {
        let credited = Arc::clone(&credited);
        service_fn(move |msg: Message| {
            let credited = Arc::clone(&credited);
            async move {
                if msg.body() == "wrong" {
                    return Ok::<_, BoxError>(Effects::one(wrong_effect()));
                }
                Ok(Effects::one(AnyEffect::new(MemoryEffect::new(move || {
                    credited.fetch_add(1, Ordering::SeqCst);
                }))))
            }
        })
    };
    let p = Processor::builder(BoxStore::new(memory.clone()), handler)
        .namespace("t")
        .build();
    let batch = || event(&[rec("m1", "a"), rec("m2", "b"), rec("m3", "wrong")]);

    let report = p.process(batch()).await.unwrap();
    let counts = report.counts();
    assert_eq!((counts.processed, counts.failed), (2, 1));
    assert_eq!(credited.load(Ordering::SeqCst), 2);
    assert_eq!(memory.status("t#m1"), Some(Status::Completed));
    assert_eq!(
        memory.status("t#m3"),
        None,
        "the refused message's claim is released"
    );
    let failure = failure_of(&report, "m3");
    assert!(failure.message.contains("Transfer"), "{}", failure.message);
    assert_eq!(failed_ids(&report.response()), ["m3"]);

    let again = p.process(batch()).await.unwrap();
    assert_eq!(again.counts().duplicate, 2);
    assert_eq!(credited.load(Ordering::SeqCst), 2, "effects once");
}

/// A one-shot processor over a boxed store, and a `CachedStore` over it, boxed again.
#[tokio::test]
async fn one_shot_and_a_cached_store_over_a_boxed_store() {
    let spy = spy();
    let cached = CachedStore::new(BoxStore::new(spy.clone()));
    // Boxing a store whose effects are already `AnyEffect` passes them through.
    let store = BoxStore::new(cached);
    let credited = Arc::new(AtomicUsize::new(0));
    let effects = {
        let credited = Arc::clone(&credited);
        move |_msg: &Message| -> Result<Effects<AnyEffect>, BoxError> {
            let credited = Arc::clone(&credited);
            Ok(Effects::one(AnyEffect::new(MemoryEffect::new(move || {
                credited.fetch_add(1, Ordering::SeqCst);
            }))))
        }
    };
    let p = Processor::one_shot(store, effects).namespace("t").build();
    let report = p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(report.counts().processed, 1);
    assert_eq!(credited.load(Ordering::SeqCst), 1);
    assert_eq!(spy.count(Method::ClaimCompleted), 1, "one one-shot write");
    let again = p.process(event(&[rec("m1", "a")])).await.unwrap();
    assert_eq!(again.counts().duplicate, 1);
    assert_eq!(credited.load(Ordering::SeqCst), 1);
}

/// The idempotency layer takes a boxed store: a second call replays the first response.
#[cfg(feature = "idempotency")]
#[tokio::test]
async fn the_idempotency_layer_over_a_boxed_store() {
    use lambda_runtime::{Context, LambdaEvent};
    use serde_json::{Value, json};
    use sqs_claim::idempotency::{Idempotency, key};

    let store = boxed_memory();
    let idempotency = Idempotency::builder(store.clone(), key::json_pointer("/order"))
        .namespace("orders")
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let handler = |_event: LambdaEvent<Value>| {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, BoxError>(json!({ "run": run })) }
    };
    let call = || {
        let mut context = Context::default();
        context.deadline = u64::try_from(sqs_claim::store::epoch_millis(
            SystemTime::now() + Duration::from_secs(30),
        ))
        .unwrap();
        LambdaEvent::new(json!({"order": "o-1"}), context)
    };
    let first = idempotency.call(call(), handler).await.unwrap();
    let second = idempotency.call(call(), handler).await.unwrap();
    assert!(second.is_replay());
    assert_eq!(first.json(), second.json());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(store.inspect("orders#o-1").await.unwrap().is_some());
}

/// A tiered store takes a boxed durable store, and is boxed in turn (the bounds allow it; the
/// tiered store's own tests run it against Redis).
#[cfg(feature = "redis")]
#[allow(dead_code)]
fn a_tiered_store_over_a_boxed_store(cache: sqs_claim::RedisStore, durable: BoxStore) -> BoxStore {
    BoxStore::new(sqs_claim::TieredStore::new(cache, durable))
}
