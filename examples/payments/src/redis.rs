//! [`RedisLedger`]: the example on [`RedisStore`] (feature `redis`): balances in one hash,
//! credited by an `HINCRBY` inside the completion's Lua script, so a credit commits with its
//! completion or not at all. And [`TieredLedger`]: another ledger's store behind a
//! [`TieredStore`], the balances kept wherever that durable ledger keeps them.
//!
//! Redis's durability applies to the balances as much as to the claims: without persistence a
//! restart loses both (see [`sqs_claim::RedisStore`]).

use super::{Ledger, Payment, read_balance};
use sqs_claim::TieredStore;
use sqs_claim::store::ClaimStore;
use sqs_claim::{Error, ErrorKind};
use sqs_claim::{RedisEffect, RedisStore};

/// The hash of balances, under the store's prefix (`sqs-claim:reference:balances` by default).
/// Claim records are `{prefix}{namespace}#{key}`, so this name cannot collide with one.
pub fn balances_key(store: &RedisStore) -> String {
    format!("{}reference:balances", store.prefix())
}

/// A [`RedisStore`] plus the hash of balances ([`balances_key`]). Cheap to clone (clones share
/// the connection).
#[derive(Debug, Clone)]
pub struct RedisLedger {
    store: RedisStore,
}

impl RedisLedger {
    /// The ledger on `store`.
    pub fn new(store: RedisStore) -> Self {
        RedisLedger { store }
    }

    /// The store, by value.
    pub fn into_inner(self) -> RedisStore {
        self.store
    }
}

impl Ledger for RedisLedger {
    type Store = RedisStore;

    fn store(&self) -> &RedisStore {
        &self.store
    }

    fn credit(&self, account: &str, amount_cents: i64) -> RedisEffect {
        // Checked inside the completion script: the balance stays within 0..=MAX_BALANCE_CENTS.
        RedisEffect::hincr_by_within(
            balances_key(&self.store),
            account,
            amount_cents,
            0..=Payment::MAX_BALANCE_CENTS,
        )
    }

    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        let mut conn = self.store.connection().clone();
        let key = balances_key(&self.store);
        let raw: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| {
                let kind = if e.is_io_error() || e.is_timeout() || e.is_connection_refusal() {
                    ErrorKind::StoreUnavailable
                } else {
                    ErrorKind::StoreRejected
                };
                Error::with_source(kind, format!("cannot read the balances hash {key:?}"), e)
            })?;
        let mut balances = raw
            .into_iter()
            .map(|(account, balance)| {
                let b = read_balance(&format!("hash {key:?}"), &account, &balance)?;
                Ok((account, b))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        balances.sort();
        Ok(balances)
    }

    /// Nothing to create: Redis makes the hash on the first credit.
    async fn init(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// A durable ledger `D` whose claims go through a [`TieredStore`]: a Redis cache of completed
/// keys in front of `D`'s store. The balances are `D`'s, credited in `D`'s completion.
#[derive(Debug, Clone)]
pub struct TieredLedger<D: Ledger> {
    store: TieredStore<D::Store>,
    durable: D,
}

impl<D: Ledger> TieredLedger<D> {
    /// `durable`'s ledger, its claims behind a cache in `cache`.
    pub fn new(cache: RedisStore, durable: D) -> Self {
        TieredLedger {
            store: TieredStore::new(cache, durable.store().clone()),
            durable,
        }
    }

    /// The durable ledger.
    pub fn durable(&self) -> &D {
        &self.durable
    }
}

impl<D: Ledger> Ledger for TieredLedger<D> {
    type Store = TieredStore<D::Store>;

    fn store(&self) -> &TieredStore<D::Store> {
        &self.store
    }

    fn credit(&self, account: &str, amount_cents: i64) -> <D::Store as ClaimStore>::Effect {
        self.durable.credit(account, amount_cents)
    }

    fn balances(&self) -> impl Future<Output = Result<Vec<(String, i64)>, Error>> + Send {
        self.durable.balances()
    }

    fn init(&self) -> impl Future<Output = Result<(), Error>> + Send {
        self.durable.init()
    }

    fn prepare(&self) -> impl Future<Output = Result<(), Error>> + Send {
        self.durable.prepare()
    }

    /// Prunes the durable tier; Redis expires its markers by itself.
    fn prune_expired(
        &self,
        now: std::time::SystemTime,
        limit: u32,
    ) -> impl Future<Output = Result<Option<u64>, Error>> + Send {
        self.durable.prune_expired(now, limit)
    }
}
