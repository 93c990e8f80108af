//! The Redis store against the real server on 127.0.0.1:6379 (`SQS_CLAIM_REDIS_URL`): the
//! shared conformance suite, atomic effects, TTLs, clock independence and error mapping.

use std::time::{Duration, Instant, SystemTime};

use redis::AsyncCommands;
use sqs_claim::store::StoreAdmin;
use sqs_claim::store::{Claim, ClaimStore, Completion, Effects, StoredResponse, epoch_millis};
use sqs_claim::{ErrorKind, RedisEffect, RedisStore};
use sqs_claim_testkit::conformance::{self, EffectProbe};
use sqs_claim_testkit::conformance::{acquire, request};

use crate::support;

use servers::{cleanup, redis_store as store};
use support::servers;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_run_all() {
    let store = store().await;
    let started = Instant::now();
    conformance::run_all(&store).await;
    eprintln!("redis: conformance::run_all took {:?}", started.elapsed());
    cleanup(store.connection(), store.prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_admin_operations() {
    let store = store().await;
    conformance::run_admin(&store).await;
    cleanup(store.connection(), store.prefix()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_timings() {
    let store = store().await;
    let started = Instant::now();
    conformance::race(&store, 200, 32).await;
    let race = started.elapsed();
    let started = Instant::now();
    conformance::takeover_race(&store, 50, 32).await;
    eprintln!(
        "redis: race(200 keys x 32 claimers) {race:?}, takeover_race(50 x 32) {:?}",
        started.elapsed()
    );
    cleanup(store.connection(), store.prefix()).await;
}

/// Effects are plain keys; a `set_nx` on a key that exists is the refused effect.
struct Probe {
    conn: redis::aio::ConnectionManager,
    prefix: String,
    taken: String,
}

impl Probe {
    async fn new(store: &RedisStore) -> Probe {
        let prefix = format!("{}effect:", store.prefix());
        let taken = format!("{prefix}taken");
        let mut conn = store.connection().clone();
        let () = conn.set(&taken, "x").await.expect("set the taken key");
        Probe {
            conn,
            prefix,
            taken,
        }
    }
}

impl EffectProbe<RedisStore> for Probe {
    fn write(&self, marker: &str) -> RedisEffect {
        RedisEffect::set(format!("{}{marker}", self.prefix), "1")
    }

    fn rejected(&self, _marker: &str) -> RedisEffect {
        RedisEffect::set_nx(self.taken.clone(), "y")
    }

    async fn applied(&self, marker: &str) -> bool {
        let mut conn = self.conn.clone();
        conn.exists(format!("{}{marker}", self.prefix))
            .await
            .expect("EXISTS")
    }
}

#[tokio::test]
async fn conformance_atomic_effects() {
    let store = store().await;
    let probe = Probe::new(&store).await;
    conformance::run_effects(&store, &probe).await;
    cleanup(store.connection(), store.prefix()).await;
}

#[tokio::test]
async fn increments_apply_together_and_a_type_error_writes_nothing() {
    let store = store().await;
    let p = store.prefix().to_owned();
    let mut conn = store.connection().clone();
    let now = SystemTime::now();
    let (counter, balances, hash) = (format!("{p}n"), format!("{p}bal"), format!("{p}h"));
    let () = conn.hset(&hash, "f", "v").await.unwrap();

    // INCRBY on a hash would fail half-way in a plain script: the pre-check refuses it first.
    let token = acquire(&store, request("k1", now)).await;
    let err = store
        .complete_with(
            "k1",
            &token,
            Completion::new(now + Duration::from_secs(60)).with_effects(
                vec![
                    RedisEffect::incr_by(&counter, 5),
                    RedisEffect::hincr_by(&balances, "acct", 7),
                    RedisEffect::incr_by(&hash, 1),
                ]
                .into(),
            ),
        )
        .await
        .expect_err("incr_by on a hash must be refused");
    assert_eq!(err.kind(), ErrorKind::EffectRejected, "{err}");
    let exists: bool = conn.exists(&counter).await.unwrap();
    assert!(!exists, "nothing may be written when an effect is refused");

    store
        .complete_with(
            "k1",
            &token,
            Completion::new(now + Duration::from_secs(60)).with_effects(
                vec![
                    RedisEffect::incr_by(&counter, 5),
                    RedisEffect::incr_by(&counter, -2),
                    RedisEffect::hincr_by(&balances, "acct", 7),
                ]
                .into(),
            ),
        )
        .await
        .expect("good effects commit");
    let n: i64 = conn.get(&counter).await.unwrap();
    let bal: i64 = conn.hget(&balances, "acct").await.unwrap();
    assert_eq!((n, bal), (3, 7));

    // A value that is not an integer, and an overflow, are refused too.
    let text = format!("{p}text");
    let () = conn.set(&text, "12abc").await.unwrap();
    let big = format!("{p}big");
    let () = conn.set(&big, i64::MAX - 10).await.unwrap();
    for effect in [
        RedisEffect::incr_by(&text, 1),
        RedisEffect::incr_by(&big, 100),
    ] {
        let token = acquire(&store, request(&format!("k-{}", effect.key()), now)).await;
        let err = store
            .complete_with(
                &format!("k-{}", effect.key()),
                &token,
                Completion::new(now + Duration::from_secs(60))
                    .with_effects(Effects::one(effect.clone())),
            )
            .await
            .expect_err("must be refused");
        assert_eq!(err.kind(), ErrorKind::EffectRejected, "{effect:?}: {err}");
    }
    cleanup(store.connection(), store.prefix()).await;
}

#[tokio::test]
async fn effects_that_cannot_be_checked_apart_are_refused_before_sending() {
    let store = store().await;
    let now = SystemTime::now();
    let token = acquire(&store, request("k", now)).await;
    let key = format!("{}x", store.prefix());
    let err = store
        .complete_with(
            "k",
            &token,
            Completion::new(now + Duration::from_secs(60)).with_effects(
                vec![RedisEffect::set(&key, "a"), RedisEffect::incr_by(&key, 1)].into(),
            ),
        )
        .await
        .expect_err("set then incr_by on one key cannot be pre-checked");
    assert_eq!(err.kind(), ErrorKind::EffectRejected);
    match store.claim(request("k", now)).await {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!("the claim must still be held, got {other:?}"),
    }
    cleanup(store.connection(), store.prefix()).await;
}

/// Memory stays bounded: every record carries a TTL sized from the caller's times.
#[tokio::test]
async fn records_carry_a_ttl() {
    let store = store().await;
    let mut conn = store.connection().clone();
    let now = SystemTime::now();
    let token = acquire(&store, request("ttl", now)).await;
    let pttl: i64 = conn.pttl(record_key(&store, "ttl")).await.unwrap();
    // expires_at - now (1 h) + the 60 s slack, minus the time the test took.
    assert!(
        (3_600_000..=3_660_000).contains(&pttl),
        "in-progress TTL {pttl} ms"
    );
    store
        .complete_with(
            "ttl",
            &token,
            Completion::new(now + Duration::from_secs(120)),
        )
        .await
        .unwrap();
    let pttl: i64 = conn.pttl(record_key(&store, "ttl")).await.unwrap();
    assert!(
        (120_000..=180_000).contains(&pttl),
        "completed TTL {pttl} ms"
    );
    cleanup(store.connection(), store.prefix()).await;
}

/// A claim whose TTL is shorter than its lease: the key's server-side TTL covers the lease, so
/// Redis cannot delete the record (and let a second claimer in) while the lease is live. No
/// slack, so the TTL is the record's own lifetime.
#[tokio::test]
async fn a_short_ttl_key_outlives_its_lease() {
    let store = store().await.with_expiry_slack(Duration::ZERO);
    let mut conn = store.connection().clone();
    let now = SystemTime::now();
    let lease_until = now + Duration::from_secs(60);
    let mut req = request("short-ttl", now);
    req.lease_until = lease_until;
    req.expires_at = now + Duration::from_secs(1);
    acquire(&store, req).await;
    let key = record_key(&store, "short-ttl");
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    // lease_until - now (60 s), minus the time the test took: never the 1 s TTL asked for.
    assert!(
        (50_000..=60_000).contains(&pttl),
        "the key's TTL ({pttl} ms) must cover the lease (60 s), not the 1 s TTL asked for"
    );
    let stored: i64 = conn.hget(&key, "e").await.unwrap();
    assert_eq!(stored, epoch_millis(lease_until), "stored expiry");
    cleanup(store.connection(), store.prefix()).await;
}

/// Workers whose clock is far behind Redis's still get correct answers: the TTL is relative, so
/// the server does not delete a record the workers consider live.
#[tokio::test]
async fn caller_clock_behind_the_server_still_dedupes() {
    let store = store().await;
    let now = SystemTime::now() - Duration::from_secs(2 * 3600);
    let key = "skewed";
    let mut req = request(key, now);
    req.expires_at = now + Duration::from_secs(600); // already past by the server's clock
    let token = acquire(&store, req).await;
    store
        .complete_with(key, &token, Completion::new(now + Duration::from_secs(600)))
        .await
        .expect("complete");
    match store
        .claim(request(key, now + Duration::from_secs(1)))
        .await
    {
        Ok(Claim::Completed { record: rec, .. }) => {
            assert_eq!(epoch_millis(rec.expires_at), epoch_millis(now) + 600_000)
        }
        other => panic!("expected Completed, got {other:?}"),
    }
    cleanup(store.connection(), store.prefix()).await;
}

/// A record written before the stored response (a hash without the `r` field) reads as
/// completed with no response, from a claim and from `inspect`; a new completion keeps its
/// response in `r`, as given.
#[tokio::test]
async fn a_record_without_the_response_field_reads_as_no_response() {
    let store = store().await;
    let mut conn = store.connection().clone();
    let now = SystemTime::now();
    let expires = epoch_millis(now + Duration::from_secs(600));
    // The fields exactly as the previous version's claim and completion left them.
    let () = redis::cmd("HSET")
        .arg(record_key(&store, "old"))
        .arg(&["s", "COMPLETED", "t", "old-token", "n"][..])
        .arg(epoch_millis(now))
        .arg("e")
        .arg(expires)
        .arg(&["f", "fp-old"][..])
        .query_async(&mut conn)
        .await
        .unwrap();
    match store.claim(request("old", now)).await {
        Ok(Claim::Completed { record: rec, .. }) => {
            assert_eq!(rec.fingerprint.as_deref(), Some("fp-old"));
            assert_eq!(rec.response, None, "an old record has no response");
        }
        other => panic!("the old record must read as completed, got {other:?}"),
    }
    let inspected = store.inspect("old").await.unwrap().expect("the old record");
    assert_eq!(inspected.record.response, None);

    let token = acquire(&store, request("new", now)).await;
    store
        .complete_with(
            "new",
            &token,
            Completion::new(now + Duration::from_secs(600))
                .with_response(StoredResponse::new("{\"ok\":  true}")),
        )
        .await
        .unwrap();
    let stored: String = conn.hget(record_key(&store, "new"), "r").await.unwrap();
    assert_eq!(stored, "{\"ok\":  true}", "stored as given, not re-encoded");
    cleanup(store.connection(), store.prefix()).await;
}

/// A record the store cannot read is reported without its fields: the stored response (and
/// the fingerprint) never reach error text.
#[tokio::test]
async fn an_unreadable_record_is_reported_without_its_response() {
    let store = store().await;
    let mut conn = store.connection().clone();
    let () = redis::cmd("HSET")
        .arg(record_key(&store, "broken"))
        .arg(
            &[
                "s",
                "COMPLETED",
                "t",
                "x",
                "e",
                "not-a-time",
                "r",
                "card-4242-secret",
            ][..],
        )
        .query_async(&mut conn)
        .await
        .unwrap();
    let now = SystemTime::now();
    for err in [
        store
            .claim(request("broken", now))
            .await
            .expect_err("claim"),
        store.inspect("broken").await.expect_err("inspect"),
    ] {
        assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
        let text = format!("{err:#} {err:?}");
        assert!(!text.contains("card-4242"), "the response leaked: {text}");
    }
    cleanup(store.connection(), store.prefix()).await;
}

#[tokio::test]
async fn a_flushed_script_cache_is_reloaded() {
    let store = store().await;
    let mut conn = store.connection().clone();
    let now = SystemTime::now();
    acquire(&store, request("before", now)).await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let token = acquire(&store, request("after", now)).await;
    store
        .complete_with(
            "after",
            &token,
            Completion::new(now + Duration::from_secs(60)),
        )
        .await
        .expect("complete after SCRIPT FLUSH");
    store
        .release("after", &token)
        .await
        .expect_err("a completed claim cannot be released");
    cleanup(store.connection(), store.prefix()).await;
}

#[tokio::test]
async fn a_foreign_value_under_the_prefix_is_rejected() {
    let store = store().await;
    let mut conn = store.connection().clone();
    let () = conn
        .set(record_key(&store, "foreign"), "not a hash")
        .await
        .unwrap();
    let err = store
        .claim(request("foreign", SystemTime::now()))
        .await
        .expect_err("a string under the prefix must be refused");
    assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
    cleanup(store.connection(), store.prefix()).await;
}

#[tokio::test]
async fn unreachable_server_is_store_unavailable() {
    let err = RedisStore::connect("redis://127.0.0.1:1/")
        .await
        .expect_err("nothing listens on port 1");
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");

    let lazy = RedisStore::connect_lazy("redis://127.0.0.1:1/").expect("lazy never connects");
    let err = lazy
        .claim(request("k", SystemTime::now()))
        .await
        .expect_err("claim against a closed port");
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");

    let err = RedisStore::connect_lazy("http://nope").expect_err("not a Redis URL");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
}

/// `hincr_by_within`: the range holds for the sum of several increments of one field in one
/// completion, a refusal writes nothing (not even the other effects), and bounds beyond what
/// the script compares exactly are refused.
#[tokio::test]
async fn bounded_increments_are_checked_together() {
    let store = store().await;
    let hash = format!("{}bounded", store.prefix());
    let other = format!("{}other", store.prefix());
    let mut conn = store.connection().clone();
    let complete = |effects: Vec<RedisEffect>| {
        let store = store.clone();
        async move {
            let key = format!("k-{}", uuid::Uuid::new_v4().simple());
            let now = SystemTime::now();
            let token = acquire(&store, request(&key, now)).await;
            store
                .complete_with(
                    &key,
                    &token,
                    Completion::new(now + Duration::from_secs(60)).with_effects(effects.into()),
                )
                .await
        }
    };
    complete(vec![RedisEffect::hincr_by_within(&hash, "f", 8, 0..=10)])
        .await
        .expect("8 fits in 0..=10");
    // 8 + 1 + 2 = 11: each fits alone, together they do not.
    let err = complete(vec![
        RedisEffect::incr_by(&other, 1),
        RedisEffect::hincr_by_within(&hash, "f", 1, 0..=10),
        RedisEffect::hincr_by_within(&hash, "f", 2, 0..=10),
    ])
    .await
    .expect_err("8 + 1 + 2 leaves 0..=10");
    assert_eq!(err.kind(), ErrorKind::EffectRejected, "{err}");
    assert!(err.to_string().contains("range 0..=10"), "{err}");
    let f: i64 = conn.hget(&hash, "f").await.expect("HGET");
    assert_eq!(f, 8, "a refused completion wrote the field");
    let exists: bool = conn.exists(&other).await.expect("EXISTS");
    assert!(!exists, "a refused completion wrote another effect");
    // Below the range, and bounds the script cannot compare exactly.
    for effect in [
        RedisEffect::hincr_by_within(&hash, "f", -9, 0..=10),
        RedisEffect::hincr_by_within(&hash, "f", 1, 0..=(1 << 53)),
        RedisEffect::hincr_by_within(&hash, "g", 1 << 53, 0..=i64::MAX),
    ] {
        let err = complete(vec![effect]).await.expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::EffectRejected, "{err}");
    }
    complete(vec![
        RedisEffect::hincr_by_within(&hash, "f", 1, 0..=10),
        RedisEffect::hincr_by(&hash, "f", 1),
        RedisEffect::hincr_by_within(&hash, "f", -10, 0..=10),
    ])
    .await
    .expect("8 + 1 + 1 - 10 = 0 stays in range at every step");
    let f: i64 = conn.hget(&hash, "f").await.expect("HGET");
    assert_eq!(f, 0);
    cleanup(store.connection(), store.prefix()).await;
}

/// The Redis key under which `key`'s record is kept: the store's prefix, then the key.
fn record_key(store: &RedisStore, key: &str) -> String {
    format!("{}{key}", store.prefix())
}
