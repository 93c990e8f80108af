//! [`BoxLedger`]: any [`Ledger`] as one type, and [`open`]: the ledger a store URL names.
//!
//! The claims store comes from [`StoreUrl::open`] (the library's one place that maps a URL to a
//! store, as one [`BoxStore`]); the ledger wraps that same store (got back with
//! [`BoxStore::downcast_ref`]) with the balances beside it. Everything else (the Lambda binary,
//! the `payments` binary) is written once, over [`BoxLedger`], as the library's front doors are
//! over [`BoxStore`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use sqs_claim::settings::{StoreUrl, bounded_startup};
use sqs_claim::store::{AnyEffect, BoxStore};
use sqs_claim::{Error, ErrorKind};

use crate::config::AppStore;
use crate::{DynamoDbLedger, Ledger, MemoryLedger, SqliteLedger};

/// The object-safe half of [`Ledger`]: its methods with boxed futures and an erased effect,
/// implemented for every ledger.
trait DynLedger: Send + Sync + 'static {
    fn credit(&self, account: &str, amount_cents: i64) -> AnyEffect;
    fn balances(&self) -> BoxFuture<'_, Result<Vec<(String, i64)>, Error>>;
    fn init(&self) -> BoxFuture<'_, Result<(), Error>>;
    fn prepare(&self) -> BoxFuture<'_, Result<(), Error>>;
    fn check_may_overlap_writes(&self) -> bool;
    fn prune_expired(
        &self,
        now: SystemTime,
        limit: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, Error>>;
    fn ledger_type(&self) -> &'static str;
}

impl<L: Ledger> DynLedger for L {
    fn credit(&self, account: &str, amount_cents: i64) -> AnyEffect {
        AnyEffect::new(Ledger::credit(self, account, amount_cents))
    }
    fn balances(&self) -> BoxFuture<'_, Result<Vec<(String, i64)>, Error>> {
        Box::pin(Ledger::balances(self))
    }
    fn init(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(Ledger::init(self))
    }
    fn prepare(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(Ledger::prepare(self))
    }
    fn check_may_overlap_writes(&self) -> bool {
        Ledger::check_may_overlap_writes(self)
    }
    fn prune_expired(
        &self,
        now: SystemTime,
        limit: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(Ledger::prune_expired(self, now, limit))
    }
    fn ledger_type(&self) -> &'static str {
        std::any::type_name::<L>()
    }
}

/// Any ledger as one type: its store boxed ([`BoxStore`]) and its credits erased
/// ([`AnyEffect`]), so that a ledger picked from a URL at run time is one value. Cheap to clone.
#[derive(Clone)]
pub struct BoxLedger {
    inner: Arc<dyn DynLedger>,
    store: BoxStore,
}

impl BoxLedger {
    /// Boxes `ledger`, and its store with it.
    pub fn new<L: Ledger>(ledger: L) -> Self {
        if let Some(boxed) = (&ledger as &dyn std::any::Any).downcast_ref::<BoxLedger>() {
            return boxed.clone();
        }
        BoxLedger {
            store: BoxStore::new(ledger.store().clone()),
            inner: Arc::new(ledger),
        }
    }
}

impl fmt::Debug for BoxLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BoxLedger")
            .field(&format_args!("{}", self.inner.ledger_type()))
            .finish()
    }
}

impl Ledger for BoxLedger {
    type Store = BoxStore;

    fn store(&self) -> &BoxStore {
        &self.store
    }

    fn credit(&self, account: &str, amount_cents: i64) -> AnyEffect {
        self.inner.credit(account, amount_cents)
    }

    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        self.inner.balances().await
    }

    async fn init(&self) -> Result<(), Error> {
        self.inner.init().await
    }

    async fn prepare(&self) -> Result<(), Error> {
        self.inner.prepare().await
    }

    fn check_may_overlap_writes(&self) -> bool {
        self.inner.check_may_overlap_writes()
    }

    async fn prune_expired(&self, now: SystemTime, limit: u32) -> Result<Option<u64>, Error> {
        self.inner.prune_expired(now, limit).await
    }
}

/// Opens the store `store` names ([`StoreUrl::open`]) and the balances beside it. Nothing is
/// created or checked: see [`Ledger::prepare`] and [`Ledger::init`], or [`open_prepared`].
pub async fn open(store: &AppStore) -> Result<BoxLedger, Error> {
    let claims = store.claims.open().await?;
    ledger_on(store, &store.claims, claims)
}

/// [`open`], then [`prepare`](Ledger::prepare), the two together bounded by `startup` (the
/// binaries use [`sqs_claim::settings::Settings::startup_timeout`]). A store that does not
/// answer in time (a partition, a port that accepts connections and never replies) fails with
/// [`ErrorKind::StoreUnavailable`] naming the bound, instead of hanging the start.
pub async fn open_prepared(store: &AppStore, startup: Duration) -> Result<BoxLedger, Error> {
    bounded_startup(startup, async {
        let ledger = open(store).await?;
        Ledger::prepare(&ledger).await?;
        Ok(ledger)
    })
    .await
}

/// The ledger of the store `url` opened as `claims`: the store it boxes, taken back out.
fn ledger_on(app: &AppStore, url: &StoreUrl, claims: BoxStore) -> Result<BoxLedger, Error> {
    let missing = |feature: &str| {
        Error::new(
            ErrorKind::Config,
            format!(
                "store URL {url} needs the `{feature}` feature of the example app, which this build lacks"
            ),
        )
    };
    let _ = &missing; // unused when every feature is enabled
    let not_the_store = || {
        Error::new(
            ErrorKind::Config,
            format!("store URL {url} opened {claims:?}, which the example has no ledger for"),
        )
    };
    Ok(match url {
        StoreUrl::Memory => BoxLedger::new(MemoryLedger::new()),
        StoreUrl::Sqlite(_) => {
            let store = claims.downcast_ref().ok_or_else(not_the_store)?;
            BoxLedger::new(SqliteLedger::new(Clone::clone(store)))
        }
        StoreUrl::DynamoDb { table, .. } => {
            let store: &sqs_claim::DynamoDbStore =
                claims.downcast_ref().ok_or_else(not_the_store)?;
            BoxLedger::new(DynamoDbLedger::new(
                store.clone(),
                app.accounts_table_for(table),
            ))
        }
        #[cfg(feature = "redis")]
        StoreUrl::Redis(_) => {
            let store = claims.downcast_ref().ok_or_else(not_the_store)?;
            BoxLedger::new(crate::RedisLedger::new(Clone::clone(store)))
        }
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(_) => {
            let store = claims.downcast_ref().ok_or_else(not_the_store)?;
            BoxLedger::new(crate::PostgresLedger::new(Clone::clone(store)))
        }
        #[cfg(feature = "redis")]
        StoreUrl::Tiered { durable, .. } => {
            use sqs_claim::TieredStore;
            let tiered: &TieredStore<BoxStore> = claims.downcast_ref().ok_or_else(not_the_store)?;
            let durable = ledger_on(app, durable, tiered.get_ref().clone())?;
            BoxLedger::new(crate::TieredLedger::new(tiered.cache().clone(), durable))
        }
        #[cfg(not(feature = "redis"))]
        StoreUrl::Redis(_) | StoreUrl::Tiered { .. } => return Err(missing("redis")),
        #[cfg(not(feature = "postgres"))]
        StoreUrl::Postgres(_) => return Err(missing("postgres")),
        _ => return Err(not_the_store()),
    })
}
