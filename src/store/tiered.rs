//! [`TieredStore`]: Redis in front as a cache of completed keys, a durable store behind it as
//! the only authority (feature `redis`).
//!
//! Most claims in a healthy system are for new keys, but a redelivery storm (a consumer that
//! crashed mid-batch, a producer that re-sent a day of events) is all duplicates. The tiered
//! store answers those from Redis, one `GET` each, without a write to the durable store:
//!
//! * **claim**: `GET` the completion marker in Redis. If there is one and it has not expired
//!   (by the caller's `now`), answer [`Claim::Completed`] without touching the durable store.
//!   Otherwise claim on the durable store, and if that says `Completed`, write the marker back
//!   (backfill) so the next duplicate is cheap.
//! * **complete**: complete on the durable store (with the effects, atomically there); on
//!   success, write the marker with the same expiry.
//! * **release**: the durable store only (a marker is only ever written for a completed key,
//!   and a completed key cannot be released).
//!
//! # Why this is safe
//!
//! Redis only ever says "completed", and only after the durable store said so, with the
//! durable record's expiry: a marker can make the tiered store answer `Completed` where the
//! durable store would too, never `Acquired`. Claims, leases and fencing are decided by the
//! durable store alone, so losing Redis (a restart, a failover, an eviction) loses only
//! speed, never correctness.
//!
//! One edge: a completion retried after an ambiguous error succeeds as a no-op on the durable
//! store, which keeps the first attempt's expiry, while the marker gets the retry's. The marker
//! can then outlive the durable record by the time between the two attempts (normally
//! milliseconds), extending the dedup window by as much for that key. And an operator who
//! deletes a durable record by hand, to have a message processed again, must delete its marker
//! too ([`TieredStore::marker_key`]); [`ClaimStore::forget`] does both (the durable record
//! first, so a claim in between cannot backfill a marker for a record already gone), and fails
//! if Redis does not answer, because a marker left behind would keep the message "completed".
//! `inspect` and `force_release` are the durable store's (a marker is never written for an
//! in-progress record).
//!
//! # When Redis is down, or silent
//!
//! Each tier is bounded on its own: a Redis call by the connection's response timeout (2 s,
//! see [`RedisStore`]), the durable store by its own bounds (the DynamoDB client's timeouts,
//! PostgreSQL's call timeout, SQLite's busy timeout).
//!
//! Every Redis error is logged at `warn` and ignored: the durable store decides alone. After an
//! error the cache is skipped for a cool-down (1 s by default, [`TieredStore::with_cooldown`]),
//! so an outage does not add a connection timeout to every message. Build the cache with
//! [`RedisStore::connect_lazy`] so a consumer starts even while Redis is down.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sqs_claim::Error> {
//! use sqs_claim::{PostgresStore, RedisStore, TieredStore};
//! let durable = PostgresStore::connect("postgres://app@db.internal/app")?;
//! let cache = RedisStore::connect_lazy("redis://cache.internal:6379/")?.with_prefix("payments:");
//! let store = TieredStore::new(cache, durable);
//! # let _ = store;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use redis::AsyncCommands;

use super::redis::RedisStore;
use super::{
    Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion, Inspected, Status,
    epoch_millis, from_epoch_millis,
};
use crate::Error;

/// How long the cache is skipped after a Redis error, by default.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(1);

/// At most this many claims in flight remember their fingerprint for the marker (see
/// [`TieredStore`]); beyond it, completions skip the marker and the next duplicate backfills it.
const MAX_PENDING: usize = 100_000;

/// A durable claim store with a Redis cache of completed keys in front. See the
/// [module documentation](self). Cloning it shares the cache state (cool-down, in-flight
/// fingerprints) and clones the durable store handle.
#[derive(Debug, Clone)]
pub struct TieredStore<D> {
    cache: RedisStore,
    durable: D,
    cooldown: Duration,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    /// While set and in the future, the cache is skipped (see `with_cooldown`).
    skip_until: Mutex<Option<Instant>>,
    /// Fingerprints of claims acquired through this store, by owner token, until they are
    /// completed or released: `complete` is not told the fingerprint, and a marker must carry
    /// it to answer exactly what the durable store would.
    pending: Mutex<HashMap<ClaimToken, Option<String>>>,
}

impl<D: ClaimStore> TieredStore<D> {
    /// `durable` behind a cache in `cache` (only its connection and prefix are used; markers
    /// are kept at `{prefix}done:{key}`).
    pub fn new(cache: RedisStore, durable: D) -> Self {
        TieredStore {
            cache,
            durable,
            cooldown: DEFAULT_COOLDOWN,
            state: Arc::default(),
        }
    }

    /// Sets how long the cache is skipped after a Redis error (default 1 s; zero retries Redis
    /// on every call).
    pub fn with_cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// The durable store.
    pub fn get_ref(&self) -> &D {
        &self.durable
    }

    /// The cache.
    pub fn cache(&self) -> &RedisStore {
        &self.cache
    }

    /// The durable store, by value.
    pub fn into_inner(self) -> D {
        self.durable
    }

    /// The Redis key of `key`'s completion marker.
    pub fn marker_key(&self, key: &str) -> String {
        format!("{}done:{key}", self.cache.prefix())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<ClaimToken, Option<String>>> {
        // Every write under this lock is a single insert or remove: a poisoned lock is still
        // consistent.
        self.state.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cache_usable(&self) -> bool {
        let guard = self
            .state
            .skip_until
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        guard.is_none_or(|until| Instant::now() >= until)
    }

    fn cache_failed(&self, op: &str, e: &redis::RedisError) {
        tracing::warn!(
            error = %e,
            op,
            cooldown_ms = u64::try_from(self.cooldown.as_millis()).unwrap_or(u64::MAX),
            "Redis cache failed; the durable store decides alone (correct, just slower). \
             Check Redis if this repeats."
        );
        let mut guard = self
            .state
            .skip_until
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Capped at a year: a cool-down of `Duration::MAX` means "practically never", not a
        // panic from an `Instant` overflow.
        *guard = Some(Instant::now() + self.cooldown.min(Duration::from_secs(365 * 86_400)));
    }

    /// Reads the marker; `None` if there is none, it has expired by `now`, or Redis failed.
    async fn cached(&self, key: &str, now: SystemTime) -> Option<ClaimRecord> {
        if !self.cache_usable() {
            return None;
        }
        let mut conn = self.cache.connection().clone();
        let value: Option<String> = match conn.get(self.marker_key(key)).await {
            Ok(v) => v,
            Err(e) => {
                self.cache_failed("get", &e);
                return None;
            }
        };
        let record = decode_marker(&value?)?;
        (record.expires_at > now).then_some(record)
    }

    /// Writes the marker (best effort). `only_if_absent` keeps an existing marker's expiry,
    /// which came from the durable store.
    async fn remember(&self, key: &str, record: &ClaimRecord, only_if_absent: bool) {
        if !self.cache_usable() {
            return;
        }
        let expires_ms = epoch_millis(record.expires_at);
        if expires_ms <= 0 {
            return;
        }
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.marker_key(key))
            .arg(encode_marker(record))
            .arg("PXAT")
            .arg(expires_ms);
        if only_if_absent {
            cmd.arg("NX");
        }
        let mut conn = self.cache.connection().clone();
        if let Err(e) = cmd.query_async::<()>(&mut conn).await {
            self.cache_failed("set", &e);
        }
    }
}

/// `{expires_at_ms}` or `{expires_at_ms}:{fingerprint}`.
fn encode_marker(record: &ClaimRecord) -> String {
    let expires = epoch_millis(record.expires_at);
    match &record.fingerprint {
        Some(fp) => format!("{expires}:{fp}"),
        None => expires.to_string(),
    }
}

fn decode_marker(value: &str) -> Option<ClaimRecord> {
    let (expires, fingerprint) = match value.split_once(':') {
        Some((e, fp)) => (e, Some(fp.to_owned())),
        None => (value, None),
    };
    let expires: i64 = expires.parse().ok()?;
    Some(ClaimRecord {
        status: Status::Completed,
        expires_at: from_epoch_millis(expires),
        lease_until: None,
        fingerprint,
        response: None,
    })
}

impl<D: ClaimStore> ClaimStore for TieredStore<D> {
    type Effect = D::Effect;

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        if let Some(record) = self.cached(req.key, req.now).await {
            return Ok(Claim::Completed(record));
        }
        let claim = self.durable.claim(req).await?;
        match &claim {
            Claim::Completed(record) => {
                // The durable record is the authority on the expiry: overwrite.
                self.remember(req.key, record, false).await;
            }
            Claim::Acquired(token) => {
                let mut pending = self.pending();
                if pending.len() < MAX_PENDING {
                    pending.insert(token.clone(), req.fingerprint.map(str::to_owned));
                }
            }
            Claim::HeldElsewhere { .. } => {}
        }
        Ok(claim)
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<D::Effect>,
    ) -> Result<(), Error> {
        let Completion {
            expires_at,
            effects,
            ..
        } = completion;
        let result = self.durable.complete(key, token, expires_at, effects).await;
        // Keep the fingerprint while a retry is still possible (a transient error).
        let fingerprint = match &result {
            Err(e) if e.is_transient() => return result,
            _ => self.pending().remove(token),
        };
        result?;
        // Only claims acquired through this instance have a known fingerprint; for others the
        // next duplicate's claim backfills the marker from the durable record.
        if let Some(fingerprint) = fingerprint {
            let record = ClaimRecord {
                status: Status::Completed,
                expires_at,
                lease_until: None,
                fingerprint,
                response: None,
            };
            // `NX`: a marker already there came from the durable record; keep its expiry.
            self.remember(key, &record, true).await;
        }
        Ok(())
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let result = self.durable.release(key, token).await;
        if !result.as_ref().is_err_and(Error::is_transient) {
            self.pending().remove(token);
        }
        result
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        self.durable.inspect(key).await
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.durable.force_release(key).await
    }

    /// Both tiers: the durable record, then the marker, whatever the cool-down says (a marker
    /// left behind would answer "completed" for the forgotten key until it expires). Forgetting
    /// again after a Redis error retries the marker.
    async fn forget(&self, key: &str) -> Result<bool, Error> {
        let durable = self.durable.forget(key).await?;
        let mut conn = self.cache.connection().clone();
        match conn.del::<_, i64>(self.marker_key(key)).await {
            Ok(markers) => Ok(durable || markers > 0),
            Err(e) => Err(Error::with_source(
                crate::ErrorKind::StoreUnavailable,
                format!(
                    "the durable record of {key:?} was {}, but its Redis marker {:?} could not \
                     be deleted, so the key still reads as completed; run forget again once \
                     Redis answers (or delete the marker by hand)",
                    if durable { "deleted" } else { "already absent" },
                    self.marker_key(key)
                ),
                e,
            )),
        }
    }

    /// The durable store decides every claim, completion and release (Redis errors are
    /// swallowed): it is the durable store's client whose retries count.
    fn retries_internally(&self) -> bool {
        self.durable.retries_internally()
    }

    /// The durable store's: every call that misses the cache reaches it.
    fn max_in_flight(&self) -> usize {
        self.durable.max_in_flight()
    }
}
