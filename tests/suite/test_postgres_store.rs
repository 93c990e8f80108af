//! The PostgreSQL store against the real server on 127.0.0.1:5432, database `test`
//! (`SQS_CLAIM_POSTGRES_URL`): the shared conformance suite, transactional effects, migration,
//! pruning, long keys and error mapping. Every test uses a table of its own.

use std::time::{Duration, Instant, SystemTime};

use sqs_claim::store::StoreAdmin;
use sqs_claim::store::{Claim, ClaimStore, Completion, Effects, StoredResponse};
use sqs_claim::{ErrorKind, PgEffect, PostgresStore};
use sqs_claim_testkit::conformance::{self, EffectProbe};
use sqs_claim_testkit::conformance::{acquire, request};

use crate::support;

use servers::{pg_url, sql};
use support::servers;

/// A migrated store on a fresh table; drop it with [`drop_table`] at the end of the test.
async fn store() -> PostgresStore {
    servers::pg_store("claims").await
}

async fn drop_table(store: &PostgresStore) {
    let t = store.table();
    sql(
        store,
        &format!("DROP TABLE IF EXISTS {t}, {t}_effects, {t}_accounts"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_run_all() {
    let store = store().await;
    let started = Instant::now();
    conformance::run_all(&store).await;
    eprintln!(
        "postgres: conformance::run_all took {:?}",
        started.elapsed()
    );
    drop_table(&store).await;
}

/// `check_ready` on a table nobody created says to run `sqs-claim init`; `init` is idempotent
/// and makes it pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_then_check_ready() {
    let table = format!("admin_init_{}", uuid::Uuid::new_v4().simple());
    let store = PostgresStore::connect(&pg_url())
        .and_then(|s| s.with_table(&table))
        .expect("store config");
    let err = store.check_ready().await.expect_err("no table yet");
    assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
    assert!(err.to_string().contains("run `sqs-claim init`"), "{err}");
    conformance::run_admin(&store).await;
    drop_table(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_admin_operations() {
    let store = store().await;
    conformance::run_admin(&store).await;
    drop_table(&store).await;
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
        "postgres: race(200 keys x 32 claimers) {race:?}, takeover_race(50 x 32) {:?}",
        started.elapsed()
    );
    drop_table(&store).await;
}

/// Effects insert markers into a side table; inserting the pre-existing marker `taken` is the
/// refused effect (a unique violation).
struct Probe {
    store: PostgresStore,
    table: String,
}

impl Probe {
    async fn new(store: &PostgresStore) -> Probe {
        let table = format!("{}_effects", store.table());
        sql(
            store,
            &format!("CREATE TABLE {table} (marker TEXT PRIMARY KEY); INSERT INTO {table} VALUES ('taken')"),
        )
        .await;
        Probe {
            store: store.clone(),
            table,
        }
    }
}

impl EffectProbe<PostgresStore> for Probe {
    fn write(&self, marker: &str) -> PgEffect {
        PgEffect::new(format!("INSERT INTO {} (marker) VALUES ($1)", self.table))
            .bind(marker.to_owned())
    }

    fn rejected(&self, _marker: &str) -> PgEffect {
        PgEffect::new(format!("INSERT INTO {} (marker) VALUES ($1)", self.table))
            .bind("taken".to_owned())
    }

    async fn applied(&self, marker: &str) -> bool {
        let client = self.store.pool().get().await.expect("pool");
        let row = client
            .query_one(
                &format!("SELECT count(*) FROM {} WHERE marker = $1", self.table),
                &[&marker],
            )
            .await
            .expect("count");
        row.get::<_, i64>(0) == 1
    }
}

#[tokio::test]
async fn conformance_atomic_effects() {
    let store = store().await;
    let probe = Probe::new(&store).await;
    conformance::run_effects(&store, &probe).await;
    drop_table(&store).await;
}

#[tokio::test]
async fn unexpected_row_count_rolls_everything_back() {
    let store = store().await;
    let accounts = format!("{}_accounts", store.table());
    sql(
        &store,
        &format!(
            "CREATE TABLE {accounts} (id TEXT PRIMARY KEY, balance BIGINT NOT NULL);\
             INSERT INTO {accounts} VALUES ('a', 100), ('b', 0)"
        ),
    )
    .await;
    let transfer = |from: &str, to: &str, amount: i64| {
        vec![
            PgEffect::new(format!(
                "UPDATE {accounts} SET balance = balance - $1 WHERE id = $2 AND balance >= $1"
            ))
            .bind(amount)
            .bind(from.to_owned())
            .expect_rows(1),
            PgEffect::new(format!(
                "UPDATE {accounts} SET balance = balance + $1 WHERE id = $2"
            ))
            .bind(amount)
            .bind(to.to_owned())
            .expect_rows(1),
        ]
    };
    let now = SystemTime::now();
    let ttl = now + Duration::from_secs(60);

    // The credit comes first in this list and succeeds; the debit then finds too little money.
    let token = acquire(&store, request("t1", now)).await;
    let mut effects = transfer("a", "b", 500);
    effects.reverse();
    let err = store
        .complete_with(
            "t1",
            &token,
            Completion::new(ttl).with_effects(effects.into()),
        )
        .await
        .expect_err("insufficient balance must refuse the completion");
    assert_eq!(err.kind(), ErrorKind::EffectRejected, "{err}");

    store
        .complete_with(
            "t1",
            &token,
            Completion::new(ttl).with_effects(transfer("a", "b", 40).into()),
        )
        .await
        .expect("a transfer that fits commits");
    let client = store.pool().get().await.unwrap();
    let rows = client
        .query(
            &format!("SELECT id, balance FROM {accounts} ORDER BY id"),
            &[],
        )
        .await
        .unwrap();
    let balances: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        balances,
        vec![("a".into(), 60), ("b".into(), 40)],
        "only the second transfer"
    );
    sql(&store, &format!("DROP TABLE {accounts}")).await;
    drop_table(&store).await;
}

/// Bad data in an effect (a NUL byte in text, an overflow) is the effect's fault, not the
/// store's: `EffectRejected`, nothing committed, the claim still held.
#[tokio::test]
async fn bad_effect_data_is_rejected_not_a_store_error() {
    let store = store().await;
    let accounts = format!("{}_accounts", store.table());
    sql(
        &store,
        &format!("CREATE TABLE {accounts} (id TEXT PRIMARY KEY, balance BIGINT NOT NULL)"),
    )
    .await;
    let now = SystemTime::now();
    let token = acquire(&store, request("bad-data", now)).await;
    for effect in [
        PgEffect::new(format!("INSERT INTO {accounts} VALUES ($1, 1)"))
            .bind("nul\0byte".to_owned()),
        PgEffect::new(format!(
            "INSERT INTO {accounts} VALUES ('big', 9223372036854775807 + $1::bigint)"
        ))
        .bind(1i64),
    ] {
        let err = store
            .complete_with(
                "bad-data",
                &token,
                Completion::new(now + Duration::from_secs(60)).with_effects(vec![effect].into()),
            )
            .await
            .expect_err("bad data must refuse the completion");
        assert_eq!(err.kind(), ErrorKind::EffectRejected, "{err}");
    }
    match store.claim(request("bad-data", now)).await {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!("the claim must still be held, got {other:?}"),
    }
    sql(&store, &format!("DROP TABLE {accounts}")).await;
    drop_table(&store).await;
}

#[tokio::test]
async fn migrate_is_idempotent_and_concurrent() {
    let store = store().await;
    let results = futures::future::join_all((0..4).map(|_| store.init())).await;
    for r in results {
        r.expect("concurrent migrate");
    }
    drop_table(&store).await;
}

/// A table created by the version before the stored response (no `response` column): claims
/// say to migrate rather than fail obscurely; `migrate` adds the column (concurrently too); the
/// old completed row then reads as completed with no response, from a claim and `inspect`, and
/// new completions store their responses, with effects or without.
#[tokio::test]
async fn a_table_without_the_response_column_is_upgraded_by_migrate() {
    let table = format!("claims_old_{}", uuid::Uuid::new_v4().simple());
    let store = PostgresStore::connect(&pg_url())
        .and_then(|s| s.with_table(&table))
        .expect("store config");
    let now = SystemTime::now();
    let expires = sqs_claim::store::epoch_millis(now + Duration::from_secs(3600));
    // The previous version's migration, verbatim, and a row as its completion left it.
    sql(
        &store,
        &format!(
            "CREATE TABLE IF NOT EXISTS \"{table}\" (\
               id TEXT PRIMARY KEY, \
               status TEXT NOT NULL CHECK (status IN ('INPROGRESS', 'COMPLETED')), \
               token TEXT NOT NULL, \
               lease_until BIGINT, \
               expires_at BIGINT NOT NULL, \
               fingerprint TEXT); \
             CREATE INDEX IF NOT EXISTS \"{table}_expires_at_idx\" ON \"{table}\" (expires_at); \
             INSERT INTO \"{table}\" VALUES ('old-key', 'COMPLETED', 'old-token', NULL, {expires}, 'fp-old');"
        ),
    )
    .await;
    let err = store
        .claim(request("old-key", now))
        .await
        .expect_err("a claim on the old table, before migrate");
    assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
    assert!(
        format!("{err}").contains("migrate"),
        "says what to do: {err}"
    );

    // The app's start-up check reads the newest column: check_error names the fix.
    let client = store.client().await.expect("client");
    let startup = client
        .batch_execute(&format!("SELECT response FROM \"{table}\" LIMIT 0"))
        .await
        .map_err(|e| sqs_claim::store::postgres::check_error(&table, e))
        .expect_err("the start-up check on an old table");
    assert_eq!(startup.kind(), ErrorKind::StoreRejected, "{startup}");
    assert!(
        format!("{startup}").contains("older version") && format!("{startup}").contains("init"),
        "{startup}"
    );
    drop(client);

    let results = futures::future::join_all((0..3).map(|_| store.init())).await;
    for r in results {
        r.expect("migrate upgrades the old table");
    }
    match store.claim(request("old-key", now)).await {
        Ok(Claim::Completed { record: rec, .. }) => {
            assert_eq!(rec.fingerprint.as_deref(), Some("fp-old"));
            assert_eq!(rec.response, None, "an old record has no response");
        }
        other => panic!("the old record must read as completed, got {other:?}"),
    }
    let inspected = store.inspect("old-key").await.unwrap().expect("old record");
    assert_eq!(inspected.record.response, None);

    let probe = Probe::new(&store).await;
    for (key, effects) in [
        ("new-plain", Effects::none()),
        ("new-effects", Effects::one(probe.write("m-new"))),
    ] {
        let token = acquire(&store, request(key, now)).await;
        store
            .complete_with(
                key,
                &token,
                Completion::new(now + Duration::from_secs(3600))
                    .with_response(StoredResponse::new("{\"ok\":  true}"))
                    .with_effects(effects),
            )
            .await
            .expect("complete with a response on the upgraded table");
        match store.claim(request(key, now)).await {
            Ok(Claim::Completed { record: rec, .. }) => assert_eq!(
                rec.response.as_ref().map(StoredResponse::as_str),
                Some("{\"ok\":  true}")
            ),
            other => panic!("{key}: expected Completed, got {other:?}"),
        }
    }
    assert!(probe.applied("m-new").await);
    store.init().await.expect("migrate again changes nothing");
    drop_table(&store).await;
}

#[tokio::test]
async fn prune_deletes_only_expired_records_in_bounded_batches() {
    let store = store().await;
    let now = SystemTime::now();
    for i in 0..5 {
        let key = format!("old-{i}");
        let token = acquire(&store, request(&key, now)).await;
        store
            .complete_with(&key, &token, Completion::new(now + Duration::from_secs(10)))
            .await
            .unwrap();
    }
    let live = acquire(&store, request("live", now)).await;
    let later = now + Duration::from_secs(11);
    assert_eq!(
        store.prune_expired(later, 3).await.unwrap(),
        Some(3),
        "bounded by the limit"
    );
    assert_eq!(
        store.prune_expired(later, 3).await.unwrap(),
        Some(2),
        "the rest"
    );
    assert_eq!(store.prune_expired(later, 3).await.unwrap(), Some(0));
    store
        .complete_with(
            "live",
            &live,
            Completion::new(now + Duration::from_secs(3600)),
        )
        .await
        .expect("a live record survives pruning");
    drop_table(&store).await;
}

/// Pruning never deletes an in-progress record under a live lease, even one claimed with a TTL
/// shorter than its lease (its expiry is kept at least until the lease).
#[tokio::test]
async fn prune_keeps_a_short_ttl_claim_under_its_lease() {
    let store = store().await;
    let now = SystemTime::now();
    let mut req = request("short-ttl", now);
    req.lease_until = now + Duration::from_secs(60);
    req.expires_at = now + Duration::from_secs(1);
    acquire(&store, req).await;
    let later = now + Duration::from_secs(30);
    assert_eq!(
        store.prune_expired(later, 10_000).await.unwrap(),
        Some(0),
        "a record under a live lease must not be pruned"
    );
    match store.claim(request("short-ttl", later)).await {
        Ok(Claim::HeldElsewhere { .. }) => {}
        other => panic!("the claim must still be held after pruning, got {other:?}"),
    }
    drop_table(&store).await;
}

/// Random (incompressible) keys far past the B-tree entry limit, and keys that look like the
/// hashed form, are kept apart.
#[tokio::test]
async fn long_random_keys() {
    let store = store().await;
    let now = SystemTime::now();
    let long: String = (0..80)
        .map(|_| uuid::Uuid::new_v4().simple().to_string())
        .collect();
    assert!(long.len() > 2048);
    let other = format!("{long}x");
    for key in [&long, &other] {
        let token = acquire(&store, request(key, now)).await;
        store
            .complete_with(key, &token, Completion::new(now + Duration::from_secs(60)))
            .await
            .expect("complete a long key");
    }
    match store.claim(request(&long, now)).await {
        Ok(Claim::Completed { .. }) => {}
        other => panic!("long key must dedupe, got {other:?}"),
    }
    drop_table(&store).await;
}

/// A duplicate claim leaves the stored record as it was.
#[tokio::test]
async fn duplicate_claims_change_nothing() {
    let store = store().await;
    let now = SystemTime::now();
    let mut req = request("dup", now);
    req.fingerprint = Some("fp-1");
    let token = acquire(&store, req).await;
    let read = || async {
        let client = store.pool().get().await.unwrap();
        let row = client
            .query_one(
                &format!(
                    "SELECT status, token, lease_until, expires_at, fingerprint FROM {} WHERE id = 'dup'",
                    store.table()
                ),
                &[],
            )
            .await
            .unwrap();
        (
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            row.get::<_, Option<i64>>(2),
            row.get::<_, i64>(3),
            row.get::<_, Option<String>>(4),
        )
    };
    let before = read().await;
    assert_eq!(before.1, token.as_str());
    let mut again = request("dup", now + Duration::from_secs(5));
    again.fingerprint = Some("fp-2");
    assert!(matches!(
        store.claim(again).await,
        Ok(Claim::HeldElsewhere { .. })
    ));
    assert_eq!(
        read().await,
        before,
        "a refused claim must not change the record"
    );
    drop_table(&store).await;
}

#[tokio::test]
async fn missing_table_is_rejected_with_a_hint() {
    let store = PostgresStore::connect(&pg_url())
        .and_then(|s| s.with_table("claims_never_migrated"))
        .unwrap();
    let err = store
        .claim(request("k", SystemTime::now()))
        .await
        .expect_err("no table");
    assert_eq!(err.kind(), ErrorKind::StoreRejected, "{err}");
    assert!(err.to_string().contains("migrate"), "{err}");
}

#[tokio::test]
async fn unreachable_server_is_store_unavailable() {
    let store = PostgresStore::connect("postgres://postgres@127.0.0.1:1/test").unwrap();
    let err = store
        .claim(request("k", SystemTime::now()))
        .await
        .expect_err("nothing listens on port 1");
    assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{err}");
}

#[test]
fn bad_configuration_is_a_config_error() {
    let err = PostgresStore::connect("not a url at all://").expect_err("bad URL");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    let store = PostgresStore::connect(&pg_url()).unwrap();
    let err = store.with_table("x; DROP TABLE y").expect_err("bad table");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
}

// ------------------------------------------------------------------ bounded calls (issue 8)

use sqs_claim_testkit::silent;

use sqs_claim::store::postgres::PostgresSettings;

fn fast() -> PostgresSettings {
    let mut settings = PostgresSettings::default();
    settings.call_timeout = Duration::from_secs(1);
    settings
}

/// tokio-postgres has no query timeout: a server that completed the connect and then went
/// silent (a partition) would keep a claim waiting forever. The store's own bound ends it with
/// `StoreUnavailable` naming the wait.
#[tokio::test]
async fn a_server_silent_after_connect_is_unavailable_within_the_call_timeout() {
    for (what, endpoint) in [
        (
            "silent after the handshake",
            silent::fake_pg(silent::Then::Silent).await,
        ),
        ("silent from the first byte", silent::silent().await),
    ] {
        let url = format!("postgres://postgres@{}/test", endpoint.addr());
        let store = PostgresStore::connect_with(&url, fast()).unwrap();
        let started = Instant::now();
        let result = tokio::time::timeout(
            Duration::from_secs(20),
            store.claim(request("k", SystemTime::now())),
        )
        .await
        .unwrap_or_else(|_| panic!("{what}: the claim must not hang"));
        let elapsed = started.elapsed();
        let err = result.expect_err("no answer, no claim");
        assert_eq!(err.kind(), ErrorKind::StoreUnavailable, "{what}: {err}");
        assert!(
            elapsed < Duration::from_secs(3),
            "{what}: bounded by the 1 s call timeout, took {elapsed:?}"
        );
        assert!(
            err.to_string()
                .contains("no answer from PostgreSQL within 1000 ms"),
            "{what}: {err}"
        );
    }
}

#[test]
fn call_timeout_and_pool_size_are_configurable() {
    let store = PostgresStore::connect(&pg_url()).unwrap();
    assert_eq!(store.call_timeout(), Duration::from_secs(5));
    let store = PostgresStore::connect_with(&pg_url(), {
        let mut settings = PostgresSettings::default();
        settings.pool_size = 1;
        settings
    })
    .unwrap();
    assert_eq!(store.pool().status().max_size, 1);
}

/// The server applies the statement timeout the store sets: a statement that sleeps past it
/// is cancelled by PostgreSQL (SQLSTATE 57014), well before the client-side bound.
#[tokio::test]
async fn the_server_cancels_a_statement_past_the_statement_timeout() {
    let store = PostgresStore::connect_with(&pg_url(), {
        let mut settings = PostgresSettings::default();
        settings.statement_timeout = Some(Duration::from_millis(200));
        settings
    })
    .unwrap();
    let client = store.pool().get().await.expect("a connection");
    let shown = client
        .query_one("SHOW statement_timeout", &[])
        .await
        .expect("SHOW");
    assert_eq!(shown.get::<_, String>(0), "200ms");
    let err = client
        .batch_execute("SELECT pg_sleep(2)")
        .await
        .expect_err("cancelled by the server");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED),
        "{err}"
    );
}
