//! [`AnyLedger`]: whichever ledger a [`StoreUrl`] names, opened. The one place that maps a URL
//! to a store type; everything else (the Lambda binary, the CLI) is written once, generic over
//! [`Ledger`], and reached through [`with_ledger!`](crate::with_ledger).

use std::time::{Duration, SystemTime};

use sqs_claim::store::sqlite::SqliteStore;
use sqs_claim::{Error, ErrorKind};

#[cfg(feature = "postgres")]
use crate::PostgresLedger;
#[cfg(doc)]
use crate::config::Settings;
use crate::config::StoreUrl;
use crate::{DynamoDbLedger, Ledger, MemoryLedger, SqliteLedger};
#[cfg(feature = "redis")]
use crate::{RedisLedger, TieredLedger};

/// The ledger a store URL opened: one variant per store (and per durable store behind a
/// `tiered:` cache). Cheap to clone; clones share connections.
///
/// Each operation is a `match` whose every arm calls one generic function on the concrete
/// ledger ([`with_ledger!`](crate::with_ledger)), so a store's code is monomorphic and a new
/// store is one variant plus its arm in [`AnyLedger::open`].
///
/// Not `#[non_exhaustive]`: [`with_ledger!`](crate::with_ledger) matches every variant, so a
/// new store that lacks its arm does not compile.
#[derive(Debug, Clone)]
pub enum AnyLedger {
    /// `memory:`.
    Memory(MemoryLedger),
    /// `sqlite:PATH`.
    Sqlite(SqliteLedger),
    /// `dynamodb:TABLE`.
    DynamoDb(DynamoDbLedger),
    /// `redis://...` (feature `redis`).
    #[cfg(feature = "redis")]
    Redis(RedisLedger),
    /// `postgres://...` (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(PostgresLedger),
    /// `tiered:REDIS_URL|memory:` (feature `redis`).
    #[cfg(feature = "redis")]
    TieredMemory(TieredLedger<MemoryLedger>),
    /// `tiered:REDIS_URL|sqlite:PATH` (feature `redis`).
    #[cfg(feature = "redis")]
    TieredSqlite(TieredLedger<SqliteLedger>),
    /// `tiered:REDIS_URL|dynamodb:TABLE` (feature `redis`).
    #[cfg(feature = "redis")]
    TieredDynamoDb(TieredLedger<DynamoDbLedger>),
    /// `tiered:REDIS_URL|redis://...` (feature `redis`).
    #[cfg(feature = "redis")]
    TieredRedis(TieredLedger<RedisLedger>),
    /// `tiered:REDIS_URL|postgres://...` (features `redis` and `postgres`).
    #[cfg(all(feature = "redis", feature = "postgres"))]
    TieredPostgres(TieredLedger<PostgresLedger>),
}

/// Runs `$body` with `$ledger` bound to the concrete ledger inside an [`AnyLedger`] (by value
/// for an owned enum, by reference for `&AnyLedger`): one arm per variant, each the same
/// generic code.
///
/// ```ignore
/// let balances = payments::with_ledger!(&ledger, l => l.balances().await)?;
/// ```
///
/// For this package's own targets (its binaries and tests): the arms' `cfg(feature = ...)` are
/// evaluated where the macro is expanded, so another crate would see other features.
#[macro_export]
macro_rules! with_ledger {
    ($any:expr, $ledger:ident => $body:expr) => {
        match $any {
            $crate::AnyLedger::Memory($ledger) => $body,
            $crate::AnyLedger::Sqlite($ledger) => $body,
            $crate::AnyLedger::DynamoDb($ledger) => $body,
            #[cfg(feature = "redis")]
            $crate::AnyLedger::Redis($ledger) => $body,
            #[cfg(feature = "postgres")]
            $crate::AnyLedger::Postgres($ledger) => $body,
            #[cfg(feature = "redis")]
            $crate::AnyLedger::TieredMemory($ledger) => $body,
            #[cfg(feature = "redis")]
            $crate::AnyLedger::TieredSqlite($ledger) => $body,
            #[cfg(feature = "redis")]
            $crate::AnyLedger::TieredDynamoDb($ledger) => $body,
            #[cfg(feature = "redis")]
            $crate::AnyLedger::TieredRedis($ledger) => $body,
            #[cfg(all(feature = "redis", feature = "postgres"))]
            $crate::AnyLedger::TieredPostgres($ledger) => $body,
        }
    };
}

impl AnyLedger {
    /// Opens the store `url` names. Embedded stores open their file (SQLite creates it, and its
    /// directory, if missing); DynamoDB builds its client from the standard AWS environment;
    /// Redis connects at once (and fails if it does not answer); PostgreSQL and a `tiered:`
    /// cache connect lazily, on first use. Nothing is created or checked: see
    /// [`AnyLedger::prepare`] and [`AnyLedger::init`].
    pub async fn open(url: &StoreUrl) -> Result<AnyLedger, Error> {
        match url {
            #[cfg(feature = "redis")]
            StoreUrl::Tiered { cache, durable } => {
                let cache = crate::redis::cache(cache.expose())?;
                Ok(match open_durable(durable).await? {
                    AnyLedger::Memory(l) => AnyLedger::TieredMemory(TieredLedger::new(cache, l)),
                    AnyLedger::Sqlite(l) => AnyLedger::TieredSqlite(TieredLedger::new(cache, l)),
                    AnyLedger::DynamoDb(l) => {
                        AnyLedger::TieredDynamoDb(TieredLedger::new(cache, l))
                    }
                    AnyLedger::Redis(l) => AnyLedger::TieredRedis(TieredLedger::new(cache, l)),
                    #[cfg(feature = "postgres")]
                    AnyLedger::Postgres(l) => {
                        AnyLedger::TieredPostgres(TieredLedger::new(cache, l))
                    }
                    _ => return Err(not_nested()),
                })
            }
            other => open_durable(other).await,
        }
    }

    /// [`open`](Self::open), then [`prepare`](Self::prepare), the two together bounded by
    /// `startup` (the binaries use [`Settings::startup_timeout`]). A store that does not answer
    /// in time (a partition, a port that accepts connections and never replies) fails with
    /// [`ErrorKind::StoreUnavailable`] naming the bound, instead of hanging the start.
    pub async fn open_prepared(url: &StoreUrl, startup: Duration) -> Result<AnyLedger, Error> {
        let ready = async {
            let ledger = AnyLedger::open(url).await?;
            ledger.prepare().await?;
            Ok(ledger)
        };
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

    /// [`Ledger::balances`] of the ledger inside.
    pub async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        with_ledger!(self, l => l.balances().await)
    }

    /// [`Ledger::init`] of the ledger inside.
    pub async fn init(&self) -> Result<(), Error> {
        with_ledger!(self, l => l.init().await)
    }

    /// [`Ledger::prepare`] of the ledger inside.
    pub async fn prepare(&self) -> Result<(), Error> {
        with_ledger!(self, l => l.prepare().await)
    }

    /// [`Ledger::prune_expired`] of the ledger inside.
    pub async fn prune_expired(&self, now: SystemTime, limit: u32) -> Result<Option<u64>, Error> {
        with_ledger!(self, l => l.prune_expired(now, limit).await)
    }
}

#[cfg(feature = "redis")]
fn not_nested() -> Error {
    Error::new(ErrorKind::Config, "tiered store URLs do not nest")
}

/// [`AnyLedger::open`] for every store but `tiered:` (which wraps one of these).
async fn open_durable(url: &StoreUrl) -> Result<AnyLedger, Error> {
    let missing = |feature: &str| {
        Error::new(
            ErrorKind::Config,
            format!("store URL {url} needs the `{feature}` feature, which this build lacks"),
        )
    };
    let _ = &missing; // unused when every feature is enabled
    Ok(match url {
        StoreUrl::Memory => AnyLedger::Memory(MemoryLedger::new()),
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
            AnyLedger::Sqlite(SqliteLedger::new(SqliteStore::open(path)?))
        }
        StoreUrl::DynamoDb {
            table,
            accounts_table,
            key_schema,
        } => {
            let mut store = sqs_claim::DynamoDbStore::from_env(table).await;
            if let Some(schema) = key_schema {
                store = store.with_key_schema(schema.clone())?;
            }
            AnyLedger::DynamoDb(DynamoDbLedger::new(store, accounts_table))
        }
        #[cfg(feature = "redis")]
        StoreUrl::Redis(url) => {
            AnyLedger::Redis(RedisLedger::new(crate::redis::open(url.expose()).await?))
        }
        #[cfg(not(feature = "redis"))]
        StoreUrl::Redis(_) | StoreUrl::Tiered { .. } => return Err(missing("redis")),
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(url) => AnyLedger::Postgres(PostgresLedger::new(
            sqs_claim::store::postgres::PostgresStore::connect(url.expose())?,
        )),
        #[cfg(not(feature = "postgres"))]
        StoreUrl::Postgres(_) => return Err(missing("postgres")),
        #[cfg(feature = "redis")]
        StoreUrl::Tiered { .. } => return Err(not_nested()),
    })
}
