//! The tiered store: Redis (127.0.0.1:6379) in front of PostgreSQL (127.0.0.1:5432, db `test`).
//! The conformance suite with Redis up and with Redis down, duplicates answered from Redis
//! without touching the durable store, and backfill.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use redis::AsyncCommands;
use sqs_claim::store::StoreAdmin;
use sqs_claim::store::{AnsweredBy, Claim, ClaimRequest, ClaimStore, Completion, StoredResponse};
use sqs_claim::{
    Error, MemoryStore, Message, PgEffect, PostgresStore, Processor, RedisStore, TieredStore,
};
use sqs_claim_testkit::conformance::{self, EffectProbe};
use sqs_claim_testkit::store::{Action, Method, Spy};

use crate::support;

use servers::{cleanup, redis_store as cache, sql};
use support::servers;

async fn postgres() -> PostgresStore {
    servers::pg_store("tiered").await
}

/// A cache pointed at a closed port: every call fails as an outage would.
fn dead_cache() -> RedisStore {
    RedisStore::connect_lazy("redis://127.0.0.1:1/").expect("lazy connect never fails")
}

fn request(key: &str, now: SystemTime) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        now,
        lease_until: now + Duration::from_secs(30),
        expires_at: now + Duration::from_secs(3600),
        fingerprint: Some("fp"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_redis_and_postgres() {
    let pg = postgres().await;
    let store = TieredStore::new(cache().await, pg.clone());
    let started = Instant::now();
    conformance::run_all(&store).await;
    eprintln!(
        "tiered(redis+postgres): conformance::run_all took {:?}",
        started.elapsed()
    );
    servers::drop_pg_store(&pg).await;
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

/// The durable tier's table: `check_ready` fails before `init` creates it, then passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_creates_the_durable_table() {
    let table = format!("tiered_init_{}", uuid::Uuid::new_v4().simple());
    let pg = PostgresStore::connect(&servers::pg_url())
        .and_then(|s| s.with_table(&table))
        .expect("store config");
    let store = TieredStore::new(cache().await, pg.clone());
    store.check_ready().await.expect_err("no durable table yet");
    conformance::run_admin(&store).await;
    servers::drop_pg_store(&pg).await;
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_admin_operations() {
    let pg = postgres().await;
    let store = TieredStore::new(cache().await, pg.clone());
    conformance::run_admin(&store).await;
    servers::drop_pg_store(&pg).await;
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

/// `forget` deletes both tiers: a marker left in Redis would keep answering "completed" for a
/// key whose durable record is gone, and the message would never run again.
#[tokio::test]
async fn forget_deletes_the_marker_too() {
    let cache = cache().await;
    let store = TieredStore::new(cache.clone(), MemoryStore::new());
    let now = SystemTime::now();
    let Ok(Claim::Acquired(token)) = store.claim(request("k", now)).await else {
        panic!("fresh key");
    };
    store
        .complete_with("k", &token, Completion::new(now + Duration::from_secs(600)))
        .await
        .unwrap();
    let mut conn = cache.connection().clone();
    let marker: bool = conn.exists(store.marker_key("k")).await.unwrap();
    assert!(marker, "a completion writes the marker");
    assert!(store.forget("k").await.unwrap(), "forget deletes");
    let marker: bool = conn.exists(store.marker_key("k")).await.unwrap();
    assert!(!marker, "forget must delete the marker");
    assert!(store.get_ref().is_empty(), "and the durable record");
    assert!(matches!(
        store.claim(request("k", now)).await,
        Ok(Claim::Acquired(_))
    ));

    // A marker without a durable record (left by an earlier forget whose Redis call failed)
    // is deleted by forgetting again.
    let _: () = conn
        .set(store.marker_key("orphan"), "99999999999999")
        .await
        .unwrap();
    assert!(
        store.forget("orphan").await.unwrap(),
        "the orphan marker counts"
    );
    assert!(matches!(
        store.claim(request("orphan", now)).await,
        Ok(Claim::Acquired(_))
    ));

    // Redis down: the durable record is deleted, and the error says the marker may remain.
    let down = TieredStore::new(dead_cache(), MemoryStore::new());
    let Ok(Claim::Acquired(token)) = down.claim(request("k", now)).await else {
        panic!("fresh key");
    };
    down.complete_with("k", &token, Completion::new(now + Duration::from_secs(600)))
        .await
        .unwrap();
    let err = down
        .forget("k")
        .await
        .expect_err("the marker could not be deleted");
    assert_eq!(err.kind(), sqs_claim::ErrorKind::StoreUnavailable);
    assert!(err.to_string().contains("run forget again"), "{err}");
    assert!(
        down.get_ref().is_empty(),
        "the durable record is gone all the same"
    );
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_timings() {
    let pg = postgres().await;
    let store = TieredStore::new(cache().await, pg.clone());
    let started = Instant::now();
    conformance::race(&store, 200, 32).await;
    let race = started.elapsed();
    let started = Instant::now();
    conformance::takeover_race(&store, 50, 32).await;
    eprintln!(
        "tiered(redis+postgres): race(200 keys x 32 claimers) {race:?}, takeover_race(50 x 32) {:?}",
        started.elapsed()
    );
    servers::drop_pg_store(&pg).await;
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_with_redis_down() {
    let pg = postgres().await;
    let store = TieredStore::new(dead_cache(), pg.clone());
    let started = Instant::now();
    conformance::run_all(&store).await;
    eprintln!(
        "tiered(redis down+postgres): conformance::run_all took {:?}",
        started.elapsed()
    );
    servers::drop_pg_store(&pg).await;
}

/// With no cool-down, every single call meets the dead cache and must still be decided by the
/// durable store.
#[tokio::test]
async fn every_call_survives_a_dead_cache() {
    let durable = MemoryStore::new();
    let store = TieredStore::new(dead_cache(), durable.clone()).with_cooldown(Duration::ZERO);
    let now = SystemTime::now();
    let Ok(Claim::Acquired(token)) = store.claim(request("k", now)).await else {
        panic!("fresh key must be acquired with Redis down");
    };
    store
        .complete_with("k", &token, Completion::new(now + Duration::from_secs(60)))
        .await
        .expect("complete with Redis down");
    match store.claim(request("k", now)).await {
        Ok(Claim::Completed { record: rec, .. }) => {
            assert_eq!(rec.fingerprint.as_deref(), Some("fp"))
        }
        other => panic!("the durable store must answer Completed, got {other:?}"),
    }
}

/// Effects go to the durable store, atomically with its completion.
#[tokio::test]
async fn conformance_atomic_effects_through_the_tier() {
    let pg = postgres().await;
    sql(
        &pg,
        &format!(
            "CREATE TABLE {t}_effects (marker TEXT PRIMARY KEY); INSERT INTO {t}_effects VALUES ('taken')",
            t = pg.table()
        ),
    )
    .await;
    let store = TieredStore::new(cache().await, pg.clone());
    conformance::run_effects(&store, &Probe(pg.clone())).await;
    servers::drop_pg_store(&pg).await;
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

struct Probe(PostgresStore);

impl EffectProbe<TieredStore<PostgresStore>> for Probe {
    fn write(&self, marker: &str) -> PgEffect {
        PgEffect::new(format!(
            "INSERT INTO {}_effects VALUES ($1)",
            self.0.table()
        ))
        .bind(marker.to_owned())
    }

    fn rejected(&self, _marker: &str) -> PgEffect {
        PgEffect::new(format!(
            "INSERT INTO {}_effects VALUES ('taken')",
            self.0.table()
        ))
    }

    async fn applied(&self, marker: &str) -> bool {
        let client = self.0.pool().get().await.expect("pool");
        let sql = format!(
            "SELECT count(*) FROM {}_effects WHERE marker = $1",
            self.0.table()
        );
        let row = client.query_one(&sql, &[&marker]).await.expect("count");
        row.get::<_, i64>(0) == 1
    }
}

/// A durable store that counts the claims it is asked (the spy), and can lose the answer of its
/// next completion (commit it, then report a transient error). It says what the trait's
/// default says of a store.
#[derive(Clone)]
struct Counting {
    spy: Spy<MemoryStore>,
    lose_next_answer: Arc<std::sync::atomic::AtomicBool>,
}

impl Default for Counting {
    fn default() -> Self {
        let lose_next_answer = Arc::<std::sync::atomic::AtomicBool>::default();
        let lose = Arc::clone(&lose_next_answer);
        let spy = Spy::new(MemoryStore::new())
            .on_call(move |call| match call.method() {
                Method::Complete if lose.swap(false, Ordering::SeqCst) => {
                    Action::FailAfter(Error::new(
                        sqs_claim::ErrorKind::StoreUnavailable,
                        "the answer was lost (committed)",
                    ))
                }
                _ => Action::Forward,
            })
            .map_capabilities(|_| sqs_claim::store::Capabilities::new());
        Counting {
            spy,
            lose_next_answer,
        }
    }
}

impl Counting {
    fn claims(&self) -> usize {
        self.spy.count(Method::Claim)
    }
}

#[tokio::test]
async fn a_completed_key_is_answered_from_redis_without_the_durable_store() {
    let durable = Counting::default();
    let store = TieredStore::new(cache().await, durable.spy.clone());
    let now = SystemTime::now();
    let Ok(Claim::Acquired(token)) = store.claim(request("k", now)).await else {
        panic!("fresh key must be acquired");
    };
    assert_eq!(durable.claims(), 1);
    let expires = now + Duration::from_secs(600);
    store
        .complete_with("k", &token, Completion::new(expires))
        .await
        .unwrap();
    for _ in 0..3 {
        match store
            .claim(request("k", now + Duration::from_secs(60)))
            .await
        {
            Ok(Claim::Completed {
                record: rec,
                answered_by,
            }) => {
                assert_eq!(answered_by, AnsweredBy::Cache, "a marker hit says so");
                assert_eq!(
                    rec.fingerprint.as_deref(),
                    Some("fp"),
                    "fingerprint from the marker"
                );
                assert_eq!(
                    sqs_claim::store::epoch_millis(rec.expires_at),
                    sqs_claim::store::epoch_millis(expires)
                );
            }
            other => panic!("expected Completed from the cache, got {other:?}"),
        }
    }
    assert_eq!(
        durable.claims(),
        1,
        "duplicates must not reach the durable store"
    );

    // Past the marker's expiry the durable store decides again (and the key is claimable).
    let later = now + Duration::from_secs(601);
    assert!(matches!(
        store.claim(request("k", later)).await,
        Ok(Claim::Acquired(_))
    ));
    assert_eq!(durable.claims(), 2);
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

#[tokio::test]
async fn a_durable_completion_is_backfilled_into_redis() {
    let durable = Counting::default();
    let cache = cache().await;
    let store = TieredStore::new(cache.clone(), durable.spy.clone());
    let now = SystemTime::now();
    // Completed elsewhere: straight on the durable store, so the cache knows nothing.
    let Ok(Claim::Acquired(token)) = durable.spy.get_ref().claim(request("k", now)).await else {
        panic!("fresh key");
    };
    durable
        .spy
        .get_ref()
        .complete_with("k", &token, Completion::new(now + Duration::from_secs(600)))
        .await
        .unwrap();
    let mut conn = cache.connection().clone();
    let before: bool = conn.exists(store.marker_key("k")).await.unwrap();
    assert!(!before);

    assert!(matches!(
        store.claim(request("k", now)).await,
        Ok(Claim::Completed {
            answered_by: AnsweredBy::Store,
            ..
        })
    ));
    assert_eq!(
        durable.claims(),
        1,
        "the first duplicate asks the durable store"
    );
    let after: bool = conn.exists(store.marker_key("k")).await.unwrap();
    assert!(after, "and backfills the marker");
    assert!(matches!(
        store.claim(request("k", now)).await,
        Ok(Claim::Completed {
            answered_by: AnsweredBy::Cache,
            ..
        })
    ));
    assert_eq!(
        durable.claims(),
        1,
        "the next duplicate is answered by Redis"
    );
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

/// A marker only ever follows a durable completion: in-progress and released keys are never
/// cached.
#[tokio::test]
async fn in_progress_and_released_keys_are_not_cached() {
    let durable = Counting::default();
    let cache = cache().await;
    let store = TieredStore::new(cache.clone(), durable.spy.clone());
    let now = SystemTime::now();
    let Ok(Claim::Acquired(token)) = store.claim(request("k", now)).await else {
        panic!("fresh key");
    };
    assert!(matches!(
        store.claim(request("k", now)).await,
        Ok(Claim::HeldElsewhere { .. })
    ));
    store.release("k", &token).await.unwrap();
    let mut conn = cache.connection().clone();
    let cached: bool = conn.exists(store.marker_key("k")).await.unwrap();
    assert!(!cached);
    assert!(matches!(
        store.claim(request("k", now)).await,
        Ok(Claim::Acquired(_))
    ));
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

/// A duplicate answered from Redis replays the stored response, byte for byte, and tells none
/// from empty, without asking the durable store; a response too large to cache is answered
/// by the durable store, every time.
#[tokio::test]
async fn a_duplicate_answered_from_redis_replays_the_stored_response() {
    let durable = Counting::default();
    let store = TieredStore::new(cache().await, durable.spy.clone());
    let now = SystemTime::now();
    let awkward = "{\"b\": \"caf\u{e9} \u{1f4b3}\",\n  \"a\":1.50}:-:3:";
    let large = "x".repeat(64 * 1024 + 1);
    let cases = [
        ("awkward", Some(awkward)),
        ("empty", Some("")),
        ("none", None),
        ("large", Some(large.as_str())),
    ];
    for (key, response) in cases {
        let Ok(Claim::Acquired(token)) = store.claim(request(key, now)).await else {
            panic!("{key}: fresh key must be acquired");
        };
        let mut completion = Completion::new(now + Duration::from_secs(600));
        if let Some(r) = response {
            completion = completion.with_response(StoredResponse::new(r));
        }
        store.complete_with(key, &token, completion).await.unwrap();
    }
    let before = durable.claims();
    for (key, response) in cases {
        for _ in 0..2 {
            match store.claim(request(key, now)).await {
                Ok(Claim::Completed { record: rec, .. }) => assert_eq!(
                    rec.response.as_ref().map(StoredResponse::as_str),
                    response,
                    "{key}"
                ),
                other => panic!("{key}: expected Completed, got {other:?}"),
            }
        }
    }
    assert_eq!(
        durable.claims() - before,
        2,
        "only the duplicates of the uncached large response reach the durable store"
    );
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

/// A marker of the version before the stored response (`{expires_at_ms}:{fingerprint}`) knows
/// nothing of the response: the durable store answers, with it, and the marker is rewritten so
/// that the next duplicate is answered from Redis, response included.
#[tokio::test]
async fn an_older_marker_defers_to_the_durable_response() {
    let durable = Counting::default();
    let cache = cache().await;
    let store = TieredStore::new(cache.clone(), durable.spy.clone());
    let now = SystemTime::now();
    let expires = now + Duration::from_secs(600);
    let Ok(Claim::Acquired(token)) = durable.spy.get_ref().claim(request("k", now)).await else {
        panic!("fresh key");
    };
    durable
        .spy
        .get_ref()
        .complete_with(
            "k",
            &token,
            Completion::new(expires).with_response(StoredResponse::new("\"paid\"")),
        )
        .await
        .unwrap();
    let mut conn = cache.connection().clone();
    let old_marker = format!("{}:fp", sqs_claim::store::epoch_millis(expires));
    let () = conn.set(store.marker_key("k"), &old_marker).await.unwrap();
    let before = durable.claims();
    for _ in 0..2 {
        match store.claim(request("k", now)).await {
            Ok(Claim::Completed { record: rec, .. }) => assert_eq!(
                rec.response.as_ref().map(StoredResponse::as_str),
                Some("\"paid\"")
            ),
            other => panic!("expected Completed, got {other:?}"),
        }
    }
    assert_eq!(
        durable.claims() - before,
        1,
        "the old marker is read past once, then rewritten"
    );
    let marker: String = conn.get(store.marker_key("k")).await.unwrap();
    assert_ne!(marker, old_marker);
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

/// A completion whose answer was lost, retried with another response: the durable store kept
/// the first, and so must every duplicate; no marker is written from the retry (which could
/// carry the second), the durable record is backfilled instead.
#[tokio::test]
async fn a_retried_completion_caches_the_durable_response_not_the_retrys() {
    let durable = Counting::default();
    let store = TieredStore::new(cache().await, durable.spy.clone());
    let now = SystemTime::now();
    let Ok(Claim::Acquired(token)) = store.claim(request("k", now)).await else {
        panic!("fresh key");
    };
    let completion = |r: &str| {
        Completion::new(now + Duration::from_secs(600)).with_response(StoredResponse::new(r))
    };
    durable.lose_next_answer.store(true, Ordering::SeqCst);
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
        match store.claim(request("k", now)).await {
            Ok(Claim::Completed { record: rec, .. }) => assert_eq!(
                rec.response.as_ref().map(StoredResponse::as_str),
                Some("\"first\""),
                "the durable record's response, from either tier"
            ),
            other => panic!("expected Completed, got {other:?}"),
        }
    }
    cleanup(store.cache().connection(), store.cache().prefix()).await;
}

/// A duplicate answered from a Redis marker is no answer from the durable store behind it
/// (as `test_cached_store`'s `cached_duplicates_do_not_hide_a_dark_store`, here with Redis for
/// real and the durable tier gone dark: each claim it gets answered by its client's timeout,
/// 300 ms). One new message, then four duplicates with markers, then nine new ones, four at a
/// time: the duplicates' places go to the next three new messages, the four claims in flight
/// are the only ones to reach the dark durable store, and the rest are reported at once as
/// "store dark" when the first times out. On the real clock the four time out together, so
/// these figures alone do not tell a marker hit taken for the store's answer (the last
/// timeout then finds the store dark); that a marker hit says `AnsweredBy::Cache` is asserted
/// in `a_durable_completion_is_backfilled_into_redis` and
/// `a_completed_key_is_answered_from_redis_without_the_durable_store`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marker_hits_do_not_hide_a_dark_durable_store() {
    let (durable, dark) = support::dark::darkening(Duration::from_millis(300));
    let store = TieredStore::new(cache().await, durable.clone());
    let namespace = format!("dark-{}", uuid::Uuid::new_v4().simple());
    let handler = tower::service_fn(|_msg: Message| async { Ok::<(), Error>(()) });
    let p = Processor::builder(store.clone(), handler)
        .namespace(&namespace)
        .concurrency(4)
        .build();
    let (figures, _, report) =
        support::dark::behind_duplicates(async |e| p.process(e).await, (&durable, &dark)).await;
    cleanup(store.cache().connection(), store.cache().prefix()).await;
    assert_eq!(figures, (4, 4, 6), "{}: {report}", support::dark::FIGURES);
}
