//! Stores on the real Redis and PostgreSQL servers (whose URLs the test kit reads from the
//! environment), shared by the store tests and, through `#[path]` in
//! `examples/payments/tests/support/mod.rs`, by the example app's ledger and fault tests.
//!
//! A file both crates' tests compile, not a crate: a crate that builds these stores must turn
//! on `sqs-claim`'s `redis` and `postgres` features, and as a dev-dependency of the library it
//! would turn them on for the library's own test build (the dev-dependency cycle unifies
//! them), so `cargo test` with the default features would build and run the server tests.
//! Compiled in each test crate, the `cfg(feature = ...)`s below are that crate's own features.

pub(crate) use sqs_claim_testkit::local::{pg_url, redis_url};

/// A Redis store with a prefix of its own, so parallel tests and runs never share keys.
#[cfg(feature = "redis")]
pub(crate) async fn redis_store() -> sqs_claim::RedisStore {
    let url = redis_url();
    match sqs_claim::RedisStore::connect(&url).await {
        Ok(s) => s.with_prefix(format!("test:{}:", uuid::Uuid::new_v4())),
        Err(e) => panic!(
            "Redis is not reachable at {url}: {e}\nrun `make test`, or `scripts/services.sh check`"
        ),
    }
}

/// Deletes every key under `prefix` (records expire by themselves; effect keys would not).
#[cfg(feature = "redis")]
pub(crate) async fn cleanup(conn: &redis::aio::ConnectionManager, prefix: &str) {
    use redis::AsyncCommands;
    let mut conn = conn.clone();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("SCAN");
        if !keys.is_empty() {
            let () = conn.del(keys).await.expect("DEL");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

/// A migrated PostgreSQL store on a fresh table named `{prefix}_<uuid>`.
#[cfg(feature = "postgres")]
pub(crate) async fn pg_store(prefix: &str) -> sqs_claim::PostgresStore {
    let url = pg_url();
    let table = sqs_claim_testkit::local::unique_identifier(prefix);
    let store = sqs_claim::PostgresStore::connect(&url)
        .and_then(|s| s.with_table(&table))
        .expect("store config");
    if let Err(e) = sqs_claim::store::StoreAdmin::init(&store).await {
        panic!(
            "PostgreSQL is not usable at {url}: {e}\nrun `make test`, or `scripts/services.sh check`"
        );
    }
    store
}

/// Drops a store's table and its effects table (what `pg_store` created).
#[cfg(feature = "postgres")]
pub(crate) async fn drop_pg_store(store: &sqs_claim::PostgresStore) {
    let t = store.table();
    sql(store, &format!("DROP TABLE IF EXISTS {t}, {t}_effects")).await;
}

/// Runs SQL statements on the store's pool.
#[cfg(feature = "postgres")]
pub(crate) async fn sql(store: &sqs_claim::PostgresStore, statement: &str) {
    let client = store.pool().get().await.expect("pool");
    client.batch_execute(statement).await.expect(statement);
}
