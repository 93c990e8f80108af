use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use redis::AsyncCommands;

use super::redis::RedisStore;
use super::remember::{Pending, response_fits};
use super::{
    AnsweredBy, Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion,
    Extension, Inspected, Status, StoreAdmin, StoredResponse, epoch_millis, from_epoch_millis,
};
use crate::Error;

/// How long the cache is skipped after a Redis error, by default.
pub(crate) const DEFAULT_COOLDOWN: Duration = Duration::from_secs(1);

/// How long a marker read or write may wait for Redis before it counts as a cache failure: a
/// cache slower than this saves nothing, and a dark cache must not add its whole response
/// timeout to a claim that the durable store then has to decide anyway (with both tiers dark,
/// the claim fails one durable timeout plus this after it started).
const CACHE_ANSWER: Duration = Duration::from_millis(500);

/// The start of a marker in the current format ([`encode_marker`]). An older marker
/// (`{expires_at_ms}` or `{expires_at_ms}:{fingerprint}`) cannot start with it, and the older
/// version's decoder cannot read a current one: each version sees the other's markers as
/// absent, which only costs a durable read.
const MARKER_V2: &str = "v2:";

/// A durable claim store with a Redis cache of completed keys in front (more below).
/// Cloning it shares the cache state (cool-down, in-flight
/// fingerprints) and clones the durable store handle.
///
/// Redis in front as a cache of completed keys, a durable store behind it as
/// the only authority (feature `redis`).
///
/// Most claims in a healthy system are for new keys, but a redelivery storm (a consumer that
/// crashed mid-batch, a producer that re-sent a day of events) is all duplicates. The tiered
/// store answers those from Redis, one `GET` each, without a write to the durable store:
///
/// * **claim**: `GET` the completion marker in Redis. If there is one and it has not expired
///   (by the caller's `now`), answer [`Claim::Completed`] without touching the durable store
///   (answered by [`AnsweredBy::Cache`]). Otherwise claim on the durable store, and if that
///   says `Completed`, write the marker back (backfill) so the next duplicate is cheap.
/// * **complete**: complete on the durable store (with the effects and the response,
///   atomically there); on success, write the marker with the same expiry and the same
///   response.
/// * **release**: the durable store only (a marker is only ever written for a completed key,
///   and a completed key cannot be released).
///
/// # Why this is safe
///
/// Redis only ever says "completed", and only after the durable store said so, with the
/// durable record's expiry and response: a marker can make the tiered store answer `Completed`
/// where the durable store would too, with the same record, never `Acquired`. Claims, leases
/// and fencing are decided by the durable store alone, so losing Redis (a restart, a failover,
/// an eviction) loses only speed, never correctness.
///
/// An operator who deletes a durable record by hand, to have a message processed again, must
/// delete its marker too ([`TieredStore::marker_key`]); [`StoreAdmin::forget`] does both (the
/// durable record first, so a claim in between cannot backfill a marker for a record already
/// gone), and fails if Redis does not answer, because a marker left behind would keep the
/// message "completed".
/// `inspect` and `force_release` are the durable store's (a marker is never written for an
/// in-progress record).
///
/// # The stored response
///
/// The response lives in the durable store; the marker carries a copy, so that a duplicate
/// answered from Redis replays the same response, byte for byte, without a durable read. A
/// marker says whether the completion had a response (none and empty are told apart). Three
/// cases are left to the durable store instead, which answers and backfills as for a missing
/// marker:
///
/// * a response over 64 KiB is not copied into Redis (no marker is written for its key): Redis
///   is sized for small markers, and values of megabytes would crowd them out and stall its
///   single thread while they are copied;
/// * a marker written by an older version (which knew nothing of responses) counts as absent,
///   and is rewritten from the durable record at the next duplicate;
/// * after a completion that failed ambiguously (a transient error), no marker is written even
///   if a retry succeeds: the retry is a no-op on the durable store, which keeps the first
///   attempt's response and expiry, and only the durable record says which those are.
///
/// # When Redis is down, or silent
///
/// Each tier is bounded on its own: a marker read or write by 500 ms (a cache slower than that
/// saves nothing; the `forget` of a marker by the connection's response timeout, 4 s, see
/// [`RedisStore`]), the durable store by its own bounds (the DynamoDB client's timeouts,
/// PostgreSQL's call timeout, SQLite's busy timeout).
///
/// Every Redis error is logged at `warn` and ignored: the durable store decides alone. After an
/// error the cache is skipped for a cool-down (1 s by default, [`TieredStore::with_cooldown`]),
/// so an outage does not add a connection timeout to every message. Build the cache with
/// [`RedisStore::connect_lazy`] so a consumer starts even while Redis is down.
///
/// ```no_run
/// # async fn demo() -> Result<(), sqs_claim::Error> {
/// use sqs_claim::{PostgresStore, RedisStore, TieredStore};
/// let durable = PostgresStore::connect("postgres://app@db.internal/app")?;
/// let cache = RedisStore::connect_lazy("redis://cache.internal:6379/")?.with_prefix("payments:");
/// let store = TieredStore::new(cache, durable);
/// # let _ = store;
/// # Ok(()) }
/// ```
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
    /// Claims acquired through this store, until completed or released: `complete` is not
    /// told the fingerprint, and a marker must carry it to answer exactly what the durable
    /// store would.
    pending: Pending,
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

    fn cache_usable(&self) -> bool {
        let guard = self
            .state
            .skip_until
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        guard.is_none_or(|until| Instant::now() >= until)
    }

    fn cache_failed(&self, op: &str, e: &dyn std::fmt::Display) {
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
        let get = conn.get::<_, Option<String>>(self.marker_key(key));
        let value = match tokio::time::timeout(CACHE_ANSWER, get).await {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                self.cache_failed("get", &e);
                return None;
            }
            Err(_) => {
                self.cache_failed("get", &cache_silent());
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
        // A response over 64 KiB gets no marker (see "The stored response" in the module
        // docs): its duplicates read the durable store.
        if expires_ms <= 0 || !response_fits(record) {
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
        match tokio::time::timeout(CACHE_ANSWER, cmd.query_async::<()>(&mut conn)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.cache_failed("set", &e),
            Err(_) => self.cache_failed("set", &cache_silent()),
        }
    }
}

/// What a cache call that ran out of [`CACHE_ANSWER`] logs.
fn cache_silent() -> String {
    format!(
        "no answer within {} ms (the cache is skipped for its cool-down)",
        CACHE_ANSWER.as_millis()
    )
}

/// `v2:{expires_at_ms}:{fingerprint length}:{response length}:{fingerprint}{response}`, each
/// length in bytes, or `-` for none (so any text, `:` included, round-trips, and an empty
/// value is not a missing one).
fn encode_marker(record: &ClaimRecord) -> String {
    let len = |v: Option<&str>| v.map_or_else(|| "-".to_owned(), |v| v.len().to_string());
    let fingerprint = record.fingerprint.as_deref();
    let response = record.response.as_ref().map(StoredResponse::as_str);
    format!(
        "{MARKER_V2}{}:{}:{}:{}{}",
        epoch_millis(record.expires_at),
        len(fingerprint),
        len(response),
        fingerprint.unwrap_or_default(),
        response.unwrap_or_default()
    )
}

/// The record a marker stands for; `None` for anything else, an older marker included (see
/// [`MARKER_V2`]): the caller then asks the durable store.
fn decode_marker(value: &str) -> Option<ClaimRecord> {
    fn len(field: &str) -> Option<Option<usize>> {
        if field == "-" {
            Some(None)
        } else {
            field.parse().ok().map(Some)
        }
    }
    fn take(rest: &str, len: Option<usize>) -> Option<(Option<String>, &str)> {
        match len {
            None => Some((None, rest)),
            Some(n) => Some((Some(rest.get(..n)?.to_owned()), rest.get(n..)?)),
        }
    }
    let mut fields = value.strip_prefix(MARKER_V2)?.splitn(4, ':');
    let expires: i64 = fields.next()?.parse().ok()?;
    let fingerprint_len = len(fields.next()?)?;
    let response_len = len(fields.next()?)?;
    let (fingerprint, rest) = take(fields.next()?, fingerprint_len)?;
    let (response, rest) = take(rest, response_len)?;
    if !rest.is_empty() {
        return None;
    }
    Some(ClaimRecord {
        status: Status::Completed,
        expires_at: from_epoch_millis(expires),
        lease_until: None,
        fingerprint,
        response: response.map(StoredResponse::new),
    })
}

impl<D: ClaimStore> ClaimStore for TieredStore<D> {
    type Effect = D::Effect;

    /// The durable store's: it decides every claim, completion and release (Redis errors are
    /// swallowed), so its client's retries are the ones that count; every call that misses the
    /// cache reaches it; it keeps the response (the marker's copy is optional); and a one-shot
    /// write is the default's claim, then complete, through the cache.
    fn capabilities(&self) -> Capabilities {
        let durable = self.durable.capabilities();
        Capabilities {
            max_in_flight: durable.max_in_flight,
            max_response_bytes: durable.max_response_bytes,
            retries_internally: durable.retries_internally,
            extends_leases: durable.extends_leases,
            ..Capabilities::new()
        }
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        if let Some(record) = self.cached(req.key, req.now).await {
            return Ok(Claim::Completed {
                record,
                answered_by: AnsweredBy::Cache,
            });
        }
        let claim = self.durable.claim(req).await?;
        if let Some(record) = self.state.pending.claimed(&req, &claim) {
            // The durable record is the authority on the expiry: overwrite.
            self.remember(req.key, record, false).await;
        }
        Ok(claim)
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<D::Effect>,
    ) -> Result<(), Error> {
        // The marker carries the completion's response (a completion with none caches
        // "none"), and nothing after a failure, even one a retry follows (see the module docs).
        let committed = self
            .state
            .pending
            .complete(token, completion, |completion| {
                self.durable.complete_with(key, token, completion)
            })
            .await?;
        // Only claims acquired through this instance have a known fingerprint; for others the
        // next duplicate's claim backfills the marker from the durable record.
        if let Some(committed) = committed {
            // `NX`: a marker already there came from the durable record; keep its expiry.
            self.remember(key, &committed.record, true).await;
        }
        Ok(())
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        self.state
            .pending
            .release(token, self.durable.release(key, token))
            .await
    }

    /// The durable store's own: Redis keeps markers of completed keys only.
    fn extend(&self, extension: Extension<'_>) -> impl Future<Output = Result<(), Error>> + Send {
        self.durable.extend(extension)
    }
}

/// The durable store's table: Redis keeps only markers, which it expires by itself.
impl<D: ClaimStore + StoreAdmin> StoreAdmin for TieredStore<D> {
    /// The durable store's (Redis needs nothing created).
    fn init(&self) -> impl Future<Output = Result<(), Error>> + Send {
        self.durable.init()
    }

    /// The durable store's: it decides every claim, while the cache may be down (its errors
    /// only cost speed).
    fn check_ready(&self) -> impl Future<Output = Result<(), Error>> + Send {
        self.durable.check_ready()
    }

    /// Prunes the durable tier; Redis expires its markers by itself.
    fn prune_expired(
        &self,
        now: SystemTime,
        limit: u32,
    ) -> impl Future<Output = Result<Option<u64>, Error>> + Send {
        self.durable.prune_expired(now, limit)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(fingerprint: Option<&str>, response: Option<&str>) -> ClaimRecord {
        ClaimRecord {
            status: Status::Completed,
            expires_at: from_epoch_millis(1_700_000_000_123),
            lease_until: None,
            fingerprint: fingerprint.map(str::to_owned),
            response: response.map(StoredResponse::new),
        }
    }

    #[test]
    fn markers_round_trip_any_fingerprint_and_response() {
        let odd = "a:b:-:3:\u{1f4b3}\n{\"x\": 1}";
        for fingerprint in [None, Some(""), Some("fp"), Some(odd)] {
            for response in [None, Some(""), Some("\"ok\""), Some(odd)] {
                let record = record(fingerprint, response);
                assert_eq!(
                    decode_marker(&encode_marker(&record)),
                    Some(record),
                    "{fingerprint:?} / {response:?}"
                );
            }
        }
    }

    #[test]
    fn older_and_damaged_markers_read_as_absent() {
        for value in [
            "1700000000123",
            "1700000000123:fp",
            "v2:1700000000123:2:-:f",
            "v2:1700000000123:-:-:extra",
            "v2:x:-:-:",
            "v2:1700000000123:1:-:\u{e9}",
        ] {
            assert_eq!(decode_marker(value), None, "{value:?}");
        }
    }
}
