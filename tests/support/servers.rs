//! Connections to the real Redis and PostgreSQL servers, shared by the store tests (included
//! with `#[path]`). Each helper fails, never skips, when its server does not answer.
#![allow(dead_code)]

/// `SQS_CLAIM_REDIS_URL`, default the machine's Redis.
pub(crate) fn redis_url() -> String {
    std::env::var("SQS_CLAIM_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// `SQS_CLAIM_POSTGRES_URL`, default the machine's PostgreSQL, database `test`.
pub(crate) fn pg_url() -> String {
    std::env::var("SQS_CLAIM_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

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
    let table = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
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

/// Runs SQL statements on the store's pool.
#[cfg(feature = "postgres")]
pub(crate) async fn sql(store: &sqs_claim::PostgresStore, statement: &str) {
    let client = store.pool().get().await.expect("pool");
    client.batch_execute(statement).await.expect(statement);
}
