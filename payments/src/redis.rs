//! The example on [`RedisStore`] (feature `redis`): balances in one hash, credited by an
//! `HINCRBY` inside the completion's Lua script, so a credit commits with its completion or
//! not at all. And [`TieredStore`], which keeps the balances wherever its durable store does.
//!
//! Redis's durability applies to the balances as much as to the claims: without persistence a
//! restart loses both (see [`sqs_claim::store::redis`]).

use super::config::{LedgerTask, StoreUrl};
use super::{Ledger, Payment, read_balance};
use sqs_claim::store::redis::{RedisEffect, RedisStore};
use sqs_claim::store::tiered::TieredStore;
use sqs_claim::{Error, ErrorKind};

/// The hash of balances, under the store's prefix (`sqs-claim:reference:balances` by default).
/// Claim records are `{prefix}{namespace}#{key}`, so this name cannot collide with one.
pub fn balances_key(store: &RedisStore) -> String {
    format!("{}reference:balances", store.prefix())
}

impl Ledger for RedisStore {
    fn credit(&self, account: &str, amount_cents: i64) -> RedisEffect {
        // Checked inside the completion script: the balance stays within 0..=MAX_BALANCE_CENTS.
        RedisEffect::hincr_by_within(
            balances_key(self),
            account,
            amount_cents,
            0..=Payment::MAX_BALANCE_CENTS,
        )
    }

    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        let mut conn = self.connection().clone();
        let key = balances_key(self);
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

impl<D: Ledger + Clone> Ledger for TieredStore<D> {
    fn credit(&self, account: &str, amount_cents: i64) -> D::Effect {
        self.get_ref().credit(account, amount_cents)
    }

    fn balances(&self) -> impl Future<Output = Result<Vec<(String, i64)>, Error>> + Send {
        self.get_ref().balances()
    }

    fn init(&self) -> impl Future<Output = Result<(), Error>> + Send {
        self.get_ref().init()
    }

    fn prepare(&self) -> impl Future<Output = Result<(), Error>> + Send {
        self.get_ref().prepare()
    }

    /// Prunes the durable tier; Redis expires its markers by itself.
    fn prune_expired(
        &self,
        now: std::time::SystemTime,
        limit: u32,
    ) -> impl Future<Output = Result<Option<u64>, Error>> + Send {
        self.get_ref().prune_expired(now, limit)
    }
}

/// Opens the store of a `redis://` or `rediss://` URL, failing at once if Redis does not answer.
/// A `prefix=P` query parameter sets the key prefix (default `sqs-claim:`), so several
/// consumers or environments can share one Redis database.
pub(super) async fn open(url: &str) -> Result<RedisStore, Error> {
    let (url, prefix) = split_prefix(url);
    let store = RedisStore::connect(&url).await?;
    Ok(match prefix {
        Some(p) => store.with_prefix(p),
        None => store,
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

/// Opens `tiered:CACHE|DURABLE`: the durable store's ledger behind a lazily connected Redis
/// cache (a consumer starts even while the cache is down).
pub(super) async fn open_tiered<T: LedgerTask>(
    cache: &str,
    durable: &StoreUrl,
    ready_by: Option<(tokio::time::Instant, std::time::Duration)>,
    task: T,
) -> Result<T::Output, Error> {
    let (cache, prefix) = split_prefix(cache);
    let mut cache = RedisStore::connect_lazy(&cache)?;
    if let Some(p) = prefix {
        cache = cache.with_prefix(p);
    }
    durable.open_durable(ready_by, Tiered { cache, task }).await
}

/// Wraps whichever ledger the durable URL opens in a [`TieredStore`] before handing it on.
struct Tiered<T> {
    cache: RedisStore,
    task: T,
}

impl<T: LedgerTask> LedgerTask for Tiered<T> {
    type Output = T::Output;

    async fn run<L: Ledger + Clone>(self, ledger: L) -> T::Output {
        self.task.run(TieredStore::new(self.cache, ledger)).await
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
