//! [`AnyLedger`]: whichever ledger an [`AppStore`] names, opened. The claims store comes from
//! [`AnyStore::open`] (the one place that maps a URL to a store type); each ledger wraps its
//! store with the balances beside it. Everything else (the Lambda binary, the `payments`
//! binary) is written once, generic over [`Ledger`], and reached through
//! [`with_ledger!`](crate::with_ledger).

use std::time::{Duration, SystemTime};

use sqs_claim::{Error, ErrorKind};
use sqs_claim_cli::AnyStore;

#[cfg(feature = "postgres")]
use crate::PostgresLedger;
use crate::config::AppStore;
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
    /// Opens the store `store` names ([`AnyStore::open`]) and the balances beside it. Nothing
    /// is created or checked: see [`AnyLedger::prepare`] and [`AnyLedger::init`].
    pub async fn open(store: &AppStore) -> Result<AnyLedger, Error> {
        let missing = |feature: &str| {
            Error::new(
                ErrorKind::Config,
                format!(
                    "store URL {} needs the `{feature}` feature, which this build lacks",
                    store.claims
                ),
            )
        };
        let _ = &missing; // unused when every feature is enabled
        let dynamodb = |s: sqs_claim::DynamoDbStore| {
            let accounts = store.accounts_table_for(s.table());
            DynamoDbLedger::new(s, accounts)
        };
        Ok(match AnyStore::open(&store.claims).await? {
            AnyStore::Memory(_) => AnyLedger::Memory(MemoryLedger::new()),
            AnyStore::Sqlite(s) => AnyLedger::Sqlite(SqliteLedger::new(s)),
            AnyStore::DynamoDb(s) => AnyLedger::DynamoDb(dynamodb(s)),
            #[cfg(feature = "redis")]
            AnyStore::Redis(s) => AnyLedger::Redis(RedisLedger::new(s)),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(s) => AnyLedger::Postgres(PostgresLedger::new(s)),
            #[cfg(feature = "redis")]
            AnyStore::TieredMemory(s) => {
                AnyLedger::TieredMemory(TieredLedger::new(s.cache().clone(), MemoryLedger::new()))
            }
            #[cfg(feature = "redis")]
            AnyStore::TieredSqlite(s) => AnyLedger::TieredSqlite(TieredLedger::new(
                s.cache().clone(),
                SqliteLedger::new(s.get_ref().clone()),
            )),
            #[cfg(feature = "redis")]
            AnyStore::TieredDynamoDb(s) => AnyLedger::TieredDynamoDb(TieredLedger::new(
                s.cache().clone(),
                dynamodb(s.get_ref().clone()),
            )),
            #[cfg(feature = "redis")]
            AnyStore::TieredRedis(s) => AnyLedger::TieredRedis(TieredLedger::new(
                s.cache().clone(),
                RedisLedger::new(s.get_ref().clone()),
            )),
            #[cfg(all(feature = "redis", feature = "postgres"))]
            AnyStore::TieredPostgres(s) => AnyLedger::TieredPostgres(TieredLedger::new(
                s.cache().clone(),
                PostgresLedger::new(s.get_ref().clone()),
            )),
            #[cfg(not(feature = "redis"))]
            AnyStore::Redis(_)
            | AnyStore::TieredMemory(_)
            | AnyStore::TieredSqlite(_)
            | AnyStore::TieredDynamoDb(_)
            | AnyStore::TieredRedis(_)
            | AnyStore::TieredPostgres(_) => return Err(missing("redis")),
            #[cfg(not(feature = "postgres"))]
            AnyStore::Postgres(_) => return Err(missing("postgres")),
            #[cfg(all(feature = "redis", not(feature = "postgres")))]
            AnyStore::TieredPostgres(_) => return Err(missing("postgres")),
        })
    }

    /// [`open`](Self::open), then [`prepare`](Self::prepare), the two together bounded by
    /// `startup` (the binaries use [`sqs_claim::settings::Settings::startup_timeout`]). A store that
    /// does not answer in time (a partition, a port that accepts connections and never
    /// replies) fails with [`ErrorKind::StoreUnavailable`] naming the bound, instead of hanging
    /// the start.
    pub async fn open_prepared(store: &AppStore, startup: Duration) -> Result<AnyLedger, Error> {
        sqs_claim_cli::stores::bounded_startup(startup, async {
            let ledger = AnyLedger::open(store).await?;
            ledger.prepare().await?;
            Ok(ledger)
        })
        .await
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
