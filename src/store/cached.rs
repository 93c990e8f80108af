use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use super::remember::{Pending, response_fits};
use super::{
    AnsweredBy, Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion,
    Effects, Extension, Inspected, OneShotWrite, Packed, Status, StoreAdmin,
};
use crate::Error;

/// How many entries a cache holds by default.
pub(crate) const DEFAULT_CAPACITY: usize = 10_000;

/// How many bytes of keys, fingerprints and responses a cache holds by default.
pub(crate) const DEFAULT_MAX_BYTES: usize = 16 * 1024 * 1024;

/// How long an entry is kept by default, at most (less if its record expires sooner).
pub(crate) const DEFAULT_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// A store with a bounded in-process cache of completed keys in front (more below).
/// Cloning it shares the cache.
///
/// A warm Lambda environment sees the same keys again: SQS redelivers a batch whose invocation
/// timed out, a producer re-sends, the idempotency layer gets a client's retry. Each of those is
/// a claim round trip that answers "completed". `CachedStore` remembers, inside the process,
/// the keys it saw completed, and answers their next claim itself:
///
/// * **only completed records** are cached: written after this store's completion succeeded
///   (with the claim's fingerprint and the completion's response), or copied from a claim or a
///   one-shot write the inner store answered `Completed`. A claim that is acquired, held
///   elsewhere or in progress always goes to the inner store, which alone decides claims,
///   leases and fencing. The cache can only answer `Completed` where the inner store would,
///   with the same record;
/// * **entries expire no later than the record** (the record's `expires_at`, compared with the
///   caller's `now` as the store contract does), and no later than
///   [`with_max_age`](CachedStore::with_max_age) after they were cached (15 minutes by
///   default);
/// * **bounded**: at most [`with_capacity`](CachedStore::with_capacity) entries (10,000 by
///   default) and [`with_max_bytes`](CachedStore::with_max_bytes) of keys, fingerprints and
///   responses (16 MiB by default), the oldest entry evicted first; a response over 64 KiB is
///   not cached (its key's duplicates ask the inner store).
///
/// # What `forget` means with a cache
///
/// `sqs-claim forget KEY` (or [`StoreAdmin::forget`] on another process's store) deletes the
/// record in the table, so the next delivery runs again; **but a warm process that cached the
/// key keeps answering "duplicate" for it** until its entry expires (its `max_age`, 15 minutes
/// by default, or the record's own expiry if sooner) or the process ends. `forget` through this
/// store drops this process's own entry, no other's. After a `forget`, wait `max_age` before
/// redriving the message, or set a shorter `max_age` where operators forget keys often.
/// `force_release` is unaffected: an in-progress record is never cached.
///
/// ```
/// use std::time::Duration;
/// use sqs_claim::store::CachedStore;
/// use sqs_claim::{MemoryStore, Message, Processor};
///
/// let store = CachedStore::new(MemoryStore::new()).with_max_age(Duration::from_secs(300));
/// let handler = tower::service_fn(|_msg: Message| async { Ok::<(), sqs_claim::Error>(()) });
/// let processor = Processor::builder(store, handler).namespace("payments").build();
/// # let _ = processor;
/// ```
#[derive(Clone)]
pub struct CachedStore<S> {
    inner: S,
    limits: Limits,
    state: Arc<State>,
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    capacity: usize,
    max_bytes: usize,
    max_age: Duration,
}

#[derive(Default)]
struct State {
    cache: Mutex<Cache>,
    /// Claims acquired through this store, until completed or released: an entry's `max_age`
    /// counts from its claim's `now`.
    pending: Pending,
    hits: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<String, Entry>,
    /// Keys in insertion order, with the generation of the entry each insertion made (an
    /// older generation is a stale slot, skipped at eviction).
    order: VecDeque<(String, u64)>,
    bytes: usize,
    generation: u64,
}

struct Entry {
    record: ClaimRecord,
    /// When the entry stops answering: the record's expiry, or `max_age` after it was cached.
    until: SystemTime,
    generation: u64,
    bytes: usize,
}

impl Cache {
    fn get(&mut self, key: &str, now: SystemTime) -> Option<ClaimRecord> {
        let entry = self.entries.get(key)?;
        // Inclusive, as the contract's expiry: at `until` the entry no longer counts.
        if entry.until > now {
            return Some(entry.record.clone());
        }
        self.remove(key);
        None
    }

    fn insert(&mut self, key: &str, record: ClaimRecord, until: SystemTime, limits: &Limits) {
        let bytes = key.len()
            + record.fingerprint.as_ref().map_or(0, String::len)
            + record
                .response
                .as_ref()
                .map_or(0, super::StoredResponse::len);
        if limits.capacity == 0 || bytes > limits.max_bytes {
            return;
        }
        self.remove(key);
        self.generation += 1;
        let generation = self.generation;
        self.entries.insert(
            key.to_owned(),
            Entry {
                record,
                until,
                generation,
                bytes,
            },
        );
        self.order.push_back((key.to_owned(), generation));
        self.bytes += bytes;
        while self.entries.len() > limits.capacity || self.bytes > limits.max_bytes {
            let Some((oldest, generation)) = self.order.pop_front() else {
                break;
            };
            if self
                .entries
                .get(&oldest)
                .is_some_and(|e| e.generation == generation)
            {
                self.remove(&oldest);
            }
        }
        // Stale slots (keys replaced or removed) are dropped as they reach the front; bound
        // them too, so a key cached and forgotten in a loop cannot grow the queue.
        if self.order.len() > 2 * limits.capacity.max(16) {
            let entries = &self.entries;
            self.order
                .retain(|(k, g)| entries.get(k).is_some_and(|e| e.generation == *g));
        }
    }

    fn remove(&mut self, key: &str) -> bool {
        match self.entries.remove(key) {
            Some(entry) => {
                self.bytes -= entry.bytes;
                true
            }
            None => false,
        }
    }
}

impl<S> std::fmt::Debug for CachedStore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedStore")
            .field("capacity", &self.limits.capacity)
            .field("max_bytes", &self.limits.max_bytes)
            .field("max_age", &self.limits.max_age)
            .field("entries", &self.len())
            .finish_non_exhaustive()
    }
}

impl<S> CachedStore<S> {
    /// `inner` with a cache of completed keys in front, with the default bounds.
    pub fn new(inner: S) -> Self {
        CachedStore {
            inner,
            limits: Limits {
                capacity: DEFAULT_CAPACITY,
                max_bytes: DEFAULT_MAX_BYTES,
                max_age: DEFAULT_MAX_AGE,
            },
            state: Arc::default(),
        }
    }

    /// At most `entries` keys are cached (default `DEFAULT_CAPACITY`); 0 turns the cache off.
    pub fn with_capacity(mut self, entries: usize) -> Self {
        self.limits.capacity = entries;
        self
    }

    /// At most `bytes` of keys, fingerprints and responses are cached (default
    /// `DEFAULT_MAX_BYTES`).
    pub fn with_max_bytes(mut self, bytes: usize) -> Self {
        self.limits.max_bytes = bytes;
        self
    }

    /// An entry answers for at most `age` after it was cached, by the claims' clock (default
    /// `DEFAULT_MAX_AGE`), and never past its record's expiry: how long a warm process may
    /// still skip a key an operator forgot.
    pub fn with_max_age(mut self, age: Duration) -> Self {
        self.limits.max_age = age;
        self
    }

    /// The inner store.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner store, by value (the cache is dropped).
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// How many keys are cached (expired entries not yet looked up included).
    pub fn len(&self) -> usize {
        self.cache().entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many claims the cache has answered (each a round trip saved).
    pub fn hits(&self) -> u64 {
        self.state.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        // Every change under this lock leaves the map and its byte count consistent before any
        // call that could panic: a poisoned lock is still consistent.
        self.state.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cached(&self, key: &str, now: SystemTime) -> Option<ClaimRecord> {
        let record = self.cache().get(key, now)?;
        self.state
            .hits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(record)
    }

    /// Caches `record` (completed, with a response small enough) for at most `max_age` after
    /// `now`.
    fn remember(&self, key: &str, record: &ClaimRecord, now: SystemTime) {
        if record.status != Status::Completed || !response_fits(record) {
            return;
        }
        let until = now
            .checked_add(self.limits.max_age)
            .map_or(record.expires_at, |aged| aged.min(record.expires_at));
        if until <= now {
            return;
        }
        self.cache()
            .insert(key, record.clone(), until, &self.limits);
    }
}

impl<S: ClaimStore> ClaimStore for CachedStore<S> {
    type Effect = S::Effect;

    /// The inner store's: it decides every claim and completion.
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        if let Some(record) = self.cached(req.key, req.now) {
            return Ok(Claim::Completed {
                record,
                answered_by: AnsweredBy::Cache,
            });
        }
        let claim = self.inner.claim(req).await?;
        if let Some(record) = self.state.pending.claimed(&req, &claim) {
            self.remember(req.key, record, req.now);
        }
        Ok(claim)
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<S::Effect>,
    ) -> Result<(), Error> {
        let committed = self
            .state
            .pending
            .complete(token, completion, |completion| {
                self.inner.complete_with(key, token, completion)
            })
            .await?;
        if let Some(committed) = committed {
            self.remember(key, &committed.record, committed.claimed_at);
        }
        Ok(())
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        self.state
            .pending
            .release(token, self.inner.release(key, token))
            .await
    }

    /// The store's own: an in-progress claim is never cached.
    fn extend(&self, extension: Extension<'_>) -> impl Future<Output = Result<(), Error>> + Send {
        self.inner.extend(extension)
    }

    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<S::Effect>,
    ) -> Result<OneShotWrite, Error> {
        if let Some(record) = self.cached(req.key, req.now) {
            return Ok(OneShotWrite::Completed {
                record,
                answered_by: AnsweredBy::Cache,
            });
        }
        let write = self.inner.claim_completed(req, effects).await?;
        self.remember_write(&req, &write);
        Ok(write)
    }

    /// The inner store's: which item an effect writes.
    fn effect_item(&self, effect: &S::Effect) -> Option<u64> {
        self.inner.effect_item(effect)
    }

    /// The cached keys answered here, the others packed to the inner store as one request,
    /// their answers cached as [`claim_completed`](Self::claim_completed)'s are.
    async fn claim_completed_packed(
        &self,
        writes: Vec<(ClaimRequest<'_>, Vec<&S::Effect>)>,
    ) -> Vec<Packed> {
        let mut answers: Vec<Option<Packed>> = Vec::with_capacity(writes.len());
        let mut sent = Vec::new();
        for (req, effects) in writes {
            match self.cached(req.key, req.now) {
                Some(record) => answers.push(Some(Packed::Answered(Ok(OneShotWrite::Completed {
                    record,
                    answered_by: AnsweredBy::Cache,
                })))),
                None => {
                    answers.push(None);
                    sent.push((req, effects));
                }
            }
        }
        let requests: Vec<ClaimRequest<'_>> = sent.iter().map(|(req, _)| *req).collect();
        // The inner store's answers are forwarded as they came, a cache behind this one's
        // included.
        let mut packed = if sent.is_empty() {
            Vec::new()
        } else {
            self.inner.claim_completed_packed(sent).await
        }
        .into_iter();
        let mut requests = requests.into_iter();
        answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| {
                    // One answer per write sent, in order; a missing one (a store's bug) is
                    // "not sent", which the caller sends again.
                    let answer = packed.next().unwrap_or(Packed::Unsent);
                    if let (Some(req), Packed::Answered(Ok(write))) = (requests.next(), &answer) {
                        self.remember_write(&req, write);
                    }
                    answer
                })
            })
            .collect()
    }
}

impl<S> CachedStore<S> {
    /// Caches what a one-shot write answered: the record it wrote, or the one it found.
    fn remember_write(&self, req: &ClaimRequest<'_>, write: &OneShotWrite) {
        match write {
            OneShotWrite::Committed => {
                let record = ClaimRecord {
                    status: Status::Completed,
                    expires_at: req.expires_at,
                    lease_until: None,
                    fingerprint: req.fingerprint.map(str::to_owned),
                    response: None,
                };
                self.remember(req.key, &record, req.now);
            }
            OneShotWrite::Completed { record, .. } => self.remember(req.key, record, req.now),
            OneShotWrite::HeldElsewhere { .. } => {}
        }
    }
}

/// The inner store's administration; `forget` also drops this process's entry (see "What
/// `forget` means with a cache" in [`CachedStore`]'s documentation).
impl<S: StoreAdmin> StoreAdmin for CachedStore<S> {
    fn init(&self) -> impl Future<Output = Result<(), Error>> + Send {
        self.inner.init()
    }

    fn check_ready(&self) -> impl Future<Output = Result<(), Error>> + Send {
        self.inner.check_ready()
    }

    fn prune_expired(
        &self,
        now: SystemTime,
        limit: u32,
    ) -> impl Future<Output = Result<Option<u64>, Error>> + Send {
        self.inner.prune_expired(now, limit)
    }

    fn inspect(&self, key: &str) -> impl Future<Output = Result<Option<Inspected>, Error>> + Send {
        self.inner.inspect(key)
    }

    fn force_release(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send {
        self.inner.force_release(key)
    }

    /// The inner store's record, then this process's entry (other processes keep theirs until
    /// it expires).
    async fn forget(&self, key: &str) -> Result<bool, Error> {
        let forgotten = self.inner.forget(key).await?;
        let dropped = self.cache().remove(key);
        Ok(forgotten || dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoredResponse;

    fn record(expires_in: u64, response: Option<&str>) -> ClaimRecord {
        ClaimRecord {
            status: Status::Completed,
            expires_at: SystemTime::UNIX_EPOCH + Duration::from_secs(expires_in),
            lease_until: None,
            fingerprint: Some("fp".into()),
            response: response.map(StoredResponse::new),
        }
    }

    fn limits(capacity: usize, max_bytes: usize) -> Limits {
        Limits {
            capacity,
            max_bytes,
            max_age: DEFAULT_MAX_AGE,
        }
    }

    #[test]
    fn oldest_entries_are_evicted_past_the_bounds() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let mut cache = Cache::default();
        let l = limits(3, 1024);
        for k in ["a", "b", "c", "d"] {
            cache.insert(k, record(100, None), at(100), &l);
        }
        assert_eq!(cache.entries.len(), 3);
        assert!(cache.get("a", at(1)).is_none());
        assert!(cache.get("d", at(1)).is_some());
        // Re-inserting a key moves it to the back: `b` is then the oldest.
        cache.insert("b", record(100, None), at(100), &l);
        cache.insert("e", record(100, None), at(100), &l);
        assert!(cache.get("c", at(1)).is_none());
        assert!(cache.get("b", at(1)).is_some());
        // Bytes: key + fingerprint + response.
        let mut cache = Cache::default();
        let l = limits(100, 20);
        cache.insert("k1", record(100, Some("0123456789")), at(100), &l); // 2 + 2 + 10
        cache.insert("k2", record(100, Some("0123456789")), at(100), &l);
        assert_eq!(cache.entries.len(), 1);
        assert!(cache.bytes <= 20);
        cache.insert("k3", record(100, Some(&"x".repeat(30))), at(100), &l);
        assert!(
            cache.get("k3", at(1)).is_none(),
            "larger than the whole cache"
        );
        // The queue of stale slots stays bounded when one key is re-cached over and over.
        for _ in 0..1000 {
            cache.insert("k2", record(100, None), at(100), &l);
        }
        assert!(cache.order.len() <= 2 * 100, "{}", cache.order.len());
    }

    /// In a pack, each write a cache answered says so in its own answer, a cache behind this
    /// one included (its answers are forwarded as they came); the others are the store's.
    #[tokio::test]
    async fn a_pack_says_which_writes_a_cache_answered() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let outer = CachedStore::new(CachedStore::new(crate::MemoryStore::new()));
        outer.remember("a", &record(100, None), at(1));
        outer.inner.remember("c", &record(100, None), at(1));
        let request = |key| ClaimRequest {
            key,
            now: at(1),
            lease_until: at(10),
            expires_at: at(100),
            fingerprint: Some("fp"),
        };
        // "d" is completed in the store itself: its duplicate is the store's answer.
        outer
            .inner
            .inner
            .claim_completed(request("d"), Effects::none())
            .await
            .expect("d committed");
        let writes = ["a", "b", "c", "d"]
            .map(|k| (request(k), Vec::new()))
            .to_vec();
        let answers = outer.claim_completed_packed(writes).await;
        let by: Vec<Option<AnsweredBy>> = answers
            .iter()
            .map(|a| match a {
                Packed::Answered(Ok(OneShotWrite::Completed { answered_by, .. })) => {
                    Some(*answered_by)
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            by,
            [
                Some(AnsweredBy::Cache),
                None,
                Some(AnsweredBy::Cache),
                Some(AnsweredBy::Store)
            ],
            "a by the outer cache, c by the inner one, d by the store; b written"
        );
        assert!(matches!(
            answers[1],
            Packed::Answered(Ok(OneShotWrite::Committed))
        ));
    }

    #[test]
    fn an_entry_expires_at_its_until_inclusive() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let mut cache = Cache::default();
        cache.insert("k", record(100, None), at(50), &limits(10, 1024));
        assert!(cache.get("k", at(49)).is_some());
        assert!(cache.get("k", at(50)).is_none());
        assert!(cache.entries.is_empty() && cache.bytes == 0);
    }
}
