//! [`AnyStore`]: whichever claims store a [`StoreUrl`] names, opened. The one place that maps a
//! URL to a store type; every command is written once, over [`StoreAdmin`], and reached
//! through [`with_store!`](crate::with_store).

use std::time::{Duration, SystemTime};

use sqs_claim::store::postgres::PostgresStore;
use sqs_claim::store::redis::RedisStore;
use sqs_claim::store::sqlite::SqliteStore;
use sqs_claim::store::tiered::TieredStore;
use sqs_claim::store::{DynamoDbStore, Inspected, MemoryStore, StoreAdmin};
use sqs_claim::{Error, ErrorKind};

#[cfg(doc)]
use crate::Settings;
use crate::StoreUrl;

/// The claims store a store URL opened: one variant per store (and per durable store behind a
/// `tiered:` cache). Cheap to clone; clones share connections.
///
/// Each operation is a `match` whose every arm calls one generic function on the concrete
/// store ([`with_store!`](crate::with_store)), so a store's code is monomorphic and a new
/// store is one variant plus its arm in [`AnyStore::open`].
#[derive(Debug, Clone)]
#[allow(missing_docs)] // each variant is the store its name says
pub enum AnyStore {
    /// `memory:`.
    Memory(MemoryStore),
    /// `sqlite:PATH`.
    Sqlite(SqliteStore),
    /// `dynamodb:TABLE`.
    DynamoDb(DynamoDbStore),
    /// `redis://...`.
    Redis(RedisStore),
    /// `postgres://...`.
    Postgres(PostgresStore),
    /// `tiered:REDIS_URL|memory:`.
    TieredMemory(TieredStore<MemoryStore>),
    /// `tiered:REDIS_URL|sqlite:PATH`.
    TieredSqlite(TieredStore<SqliteStore>),
    /// `tiered:REDIS_URL|dynamodb:TABLE`.
    TieredDynamoDb(TieredStore<DynamoDbStore>),
    /// `tiered:REDIS_URL|redis://...`.
    TieredRedis(TieredStore<RedisStore>),
    /// `tiered:REDIS_URL|postgres://...`.
    TieredPostgres(TieredStore<PostgresStore>),
}

/// Runs `$body` with `$store` bound to the concrete store inside an [`AnyStore`] (by value for
/// an owned enum, by reference for `&AnyStore`): one arm per variant, each the same generic
/// code.
///
/// ```no_run
/// # async fn f(store: &sqs_claim_cli::AnyStore) -> Result<(), sqs_claim::Error> {
/// use sqs_claim::store::StoreAdmin;
/// let found = sqs_claim_cli::with_store!(store, s => s.inspect("payments#ord-1").await)?;
/// # let _ = found; Ok(()) }
/// ```
#[macro_export]
macro_rules! with_store {
    ($any:expr, $store:ident => $body:expr) => {
        match $any {
            $crate::AnyStore::Memory($store) => $body,
            $crate::AnyStore::Sqlite($store) => $body,
            $crate::AnyStore::DynamoDb($store) => $body,
            $crate::AnyStore::Redis($store) => $body,
            $crate::AnyStore::Postgres($store) => $body,
            $crate::AnyStore::TieredMemory($store) => $body,
            $crate::AnyStore::TieredSqlite($store) => $body,
            $crate::AnyStore::TieredDynamoDb($store) => $body,
            $crate::AnyStore::TieredRedis($store) => $body,
            $crate::AnyStore::TieredPostgres($store) => $body,
        }
    };
}

impl AnyStore {
    /// Opens the store `url` names. Embedded stores open their file (SQLite creates it, and its
    /// directory, if missing); DynamoDB builds its client from the standard AWS environment;
    /// Redis connects at once (and fails if it does not answer); PostgreSQL and a `tiered:`
    /// cache connect lazily, on first use. Nothing is created or checked: see
    /// [`StoreAdmin::check_ready`] and [`StoreAdmin::init`].
    pub async fn open(url: &StoreUrl) -> Result<AnyStore, Error> {
        match url {
            StoreUrl::Tiered { cache, durable } => {
                let cache = redis_cache(cache.expose())?;
                Ok(match open_durable(durable).await? {
                    AnyStore::Memory(s) => AnyStore::TieredMemory(TieredStore::new(cache, s)),
                    AnyStore::Sqlite(s) => AnyStore::TieredSqlite(TieredStore::new(cache, s)),
                    AnyStore::DynamoDb(s) => AnyStore::TieredDynamoDb(TieredStore::new(cache, s)),
                    AnyStore::Redis(s) => AnyStore::TieredRedis(TieredStore::new(cache, s)),
                    AnyStore::Postgres(s) => AnyStore::TieredPostgres(TieredStore::new(cache, s)),
                    _ => return Err(not_nested()),
                })
            }
            other => open_durable(other).await,
        }
    }

    /// [`open`](Self::open), then [`check_ready`](StoreAdmin::check_ready), the two together
    /// bounded by `startup` (the binaries use [`Settings::startup_timeout`]). A store that does
    /// not answer in time (a partition, a port that accepts connections and never replies)
    /// fails with [`ErrorKind::StoreUnavailable`] naming the bound, instead of hanging.
    pub async fn open_checked(url: &StoreUrl, startup: Duration) -> Result<AnyStore, Error> {
        let ready = async {
            let store = AnyStore::open(url).await?;
            store.check_ready().await?;
            Ok(store)
        };
        bounded_startup(startup, ready).await
    }

    /// [`StoreAdmin::init`] of the store inside.
    pub async fn init(&self) -> Result<(), Error> {
        with_store!(self, s => s.init().await)
    }

    /// [`StoreAdmin::check_ready`] of the store inside.
    pub async fn check_ready(&self) -> Result<(), Error> {
        with_store!(self, s => s.check_ready().await)
    }

    /// [`StoreAdmin::prune_expired`] of the store inside.
    pub async fn prune_expired(&self, now: SystemTime, limit: u32) -> Result<Option<u64>, Error> {
        with_store!(self, s => s.prune_expired(now, limit).await)
    }

    /// [`StoreAdmin::inspect`] of the store inside.
    pub async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        with_store!(self, s => s.inspect(key).await)
    }

    /// [`StoreAdmin::force_release`] of the store inside.
    pub async fn force_release(&self, key: &str) -> Result<bool, Error> {
        with_store!(self, s => s.force_release(key).await)
    }

    /// [`StoreAdmin::forget`] of the store inside.
    pub async fn forget(&self, key: &str) -> Result<bool, Error> {
        with_store!(self, s => s.forget(key).await)
    }
}

/// Runs `ready` (opening a store and checking it) within `startup`, or fails with
/// [`ErrorKind::StoreUnavailable`] saying which bound ran out and what to check.
pub async fn bounded_startup<T>(
    startup: Duration,
    ready: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(startup, ready).await {
        Ok(result) => result,
        Err(_) => Err(Error::new(
            ErrorKind::StoreUnavailable,
            format!(
                "the store did not answer within {} ms at start-up \
                 (SQS_CLAIM_STARTUP_TIMEOUT_MS): check that it is up and reachable from \
                 here (network, firewall or security group, endpoint)",
                startup.as_millis()
            ),
        )),
    }
}

fn not_nested() -> Error {
    Error::new(ErrorKind::Config, "tiered store URLs do not nest")
}

/// [`AnyStore::open`] for every store but `tiered:` (which wraps one of these).
async fn open_durable(url: &StoreUrl) -> Result<AnyStore, Error> {
    Ok(match url {
        StoreUrl::Memory => AnyStore::Memory(MemoryStore::new()),
        StoreUrl::Sqlite(path) => {
            // Created on demand, so `sqlite:.sqs-claim/claims.db` works on a fresh clone.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    Error::with_source(
                        ErrorKind::StoreUnavailable,
                        format!(
                            "cannot create directory {} for the SQLite store",
                            dir.display()
                        ),
                        e,
                    )
                })?;
            }
            AnyStore::Sqlite(SqliteStore::open(path)?)
        }
        StoreUrl::DynamoDb { table, key_schema } => {
            let mut store = DynamoDbStore::from_env(table).await;
            if let Some(schema) = key_schema {
                store = store.with_key_schema(schema.clone())?;
            }
            AnyStore::DynamoDb(store)
        }
        StoreUrl::Redis(url) => AnyStore::Redis(redis(url.expose()).await?),
        StoreUrl::Postgres(url) => AnyStore::Postgres(PostgresStore::connect(url.expose())?),
        StoreUrl::Tiered { .. } => return Err(not_nested()),
        // `StoreUrl` is the library's, open to new stores: one it adds is refused here until
        // this tool opens it too.
        other => {
            return Err(Error::new(
                ErrorKind::Config,
                format!("store URL {other}: this sqs-claim cannot open that store"),
            ));
        }
    })
}

/// Opens the store of a `redis://` or `rediss://` URL, failing at once if Redis does not answer.
/// A `prefix=P` query parameter sets the key prefix (default `sqs-claim:`), so several
/// consumers or environments can share one Redis database.
async fn redis(url: &str) -> Result<RedisStore, Error> {
    let (url, prefix) = split_prefix(url);
    let store = RedisStore::connect(&url).await?;
    Ok(match prefix {
        Some(p) => store.with_prefix(p),
        None => store,
    })
}

/// The cache of a `tiered:CACHE|DURABLE` URL, connected lazily: a consumer starts even while
/// the cache is down (the durable store still decides every claim).
fn redis_cache(url: &str) -> Result<RedisStore, Error> {
    let (url, prefix) = split_prefix(url);
    let cache = RedisStore::connect_lazy(&url)?;
    Ok(match prefix {
        Some(p) => cache.with_prefix(p),
        None => cache,
    })
}

/// Takes the `prefix=` parameter out of a Redis URL's query (the `redis` crate does not know
/// it).
fn split_prefix(url: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut prefix = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("prefix=") {
            Some(p) => {
                prefix = Some(p.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    if rest.is_empty() {
        (base.to_owned(), prefix)
    } else {
        (format!("{base}?{}", rest.join("&")), prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::split_prefix;

    #[test]
    fn prefix_parameter() {
        assert_eq!(split_prefix("redis://h/"), ("redis://h/".into(), None));
        assert_eq!(
            split_prefix("redis://h/?prefix=app:"),
            ("redis://h/".into(), Some("app:".into()))
        );
        assert_eq!(
            split_prefix("rediss://h/0?protocol=resp3&prefix=a&x=1"),
            ("rediss://h/0?protocol=resp3&x=1".into(), Some("a".into()))
        );
    }
}
