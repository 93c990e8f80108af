//! [`MemoryStore`]: the contract in a `Mutex<HashMap>`, for unit tests and single-process use.
//!
//! It never reads a clock of its own (times come from the caller), so tests drive leases and
//! expiry deterministically with `tokio::time::pause()` and `advance()` through the processor's
//! [`Clock`](crate::Clock). It can also pretend to be down, to test what the processor does
//! during an outage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use super::{
    AnsweredBy, Capabilities, Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion,
    Effects, Extension, Inspected, OneShotWrite, Status, StoreAdmin, StoredResponse,
};
use crate::{Error, ErrorKind};

/// An effect for [`MemoryStore`]: closures run under the store's lock during completion.
///
/// Completion first runs every effect's check; if any check fails, the completion is cancelled
/// (the claim stays in progress, nothing is applied) and fails with
/// [`ErrorKind::EffectRejected`]. Only then are the effects applied, in order. This gives the
/// same all-or-nothing shape as a DynamoDB transaction, within one process.
#[derive(Clone)]
pub struct MemoryEffect {
    check: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
    apply: Arc<dyn Fn() + Send + Sync>,
}

impl MemoryEffect {
    /// An effect that always applies.
    pub fn new(apply: impl Fn() + Send + Sync + 'static) -> Self {
        MemoryEffect {
            check: Arc::new(|| Ok(())),
            apply: Arc::new(apply),
        }
    }

    /// An effect that applies only if `check` returns `Ok` (like a DynamoDB condition).
    pub fn conditional(
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
        apply: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        MemoryEffect {
            check: Arc::new(check),
            apply: Arc::new(apply),
        }
    }
}

impl std::fmt::Debug for MemoryEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryEffect")
    }
}

#[derive(Debug, Clone)]
struct Entry {
    status: Status,
    token: ClaimToken,
    lease_until: Option<SystemTime>,
    expires_at: SystemTime,
    fingerprint: Option<String>,
    response: Option<StoredResponse>,
}

#[derive(Debug, Default)]
struct Shared {
    records: Mutex<HashMap<String, Entry>>,
    unavailable: AtomicBool,
    failing_completions: AtomicUsize,
    contended_writes: AtomicUsize,
}

/// An in-process claim store. Cloning it shares the same records.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every call fail with [`ErrorKind::StoreUnavailable`] while `down` is true, as a
    /// store outage would.
    pub fn set_unavailable(&self, down: bool) {
        self.shared.unavailable.store(down, Ordering::SeqCst);
    }

    /// Makes the next `n` completions fail with [`ErrorKind::StoreUnavailable`] without
    /// writing anything (a transient error on the completion write).
    pub fn fail_next_completions(&self, n: usize) {
        self.shared.failing_completions.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` writes (claims, completions, one-shot writes, releases) fail with
    /// [`ErrorKind::Contention`] without writing anything, as DynamoDB cancels a transaction
    /// that meets another in flight on one of its items.
    pub fn contend_next_writes(&self, n: usize) {
        self.shared.contended_writes.store(n, Ordering::SeqCst);
    }

    /// The next of the cancellations [`contend_next_writes`](Self::contend_next_writes) asked
    /// for, if any are left.
    fn injected_contention(&self) -> Result<(), Error> {
        if self
            .shared
            .contended_writes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Error::new(
                ErrorKind::Contention,
                "injected contention: another write on the item in flight",
            ));
        }
        Ok(())
    }

    /// The status of the record for `key`, if one exists (expired or not).
    pub fn status(&self, key: &str) -> Option<Status> {
        self.records().get(key).map(|e| e.status)
    }

    /// How many records the store holds (expired ones included).
    pub fn len(&self) -> usize {
        self.records().len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn records(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding this lock cannot leave a half-written entry (every write is a
        // single insert or remove), so a poisoned lock is still consistent.
        self.shared
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next of the failures [`fail_next_completions`](Self::fail_next_completions) asked
    /// for, if any are left.
    fn injected_completion_failure(&self) -> Result<(), Error> {
        if self
            .shared
            .failing_completions
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Error::new(
                ErrorKind::StoreUnavailable,
                "injected completion failure",
            ));
        }
        Ok(())
    }

    fn check_up(&self) -> Result<(), Error> {
        if self.shared.unavailable.load(Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::StoreUnavailable,
                "memory store is marked unavailable",
            ));
        }
        Ok(())
    }
}

impl ClaimStore for MemoryStore {
    type Effect = MemoryEffect;

    /// No network: a whole batch (Lambda sends at most 10,000) at once; the one-shot write is
    /// one step under the lock.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_in_flight: 10_000,
            atomic_one_shot: true,
            extends_leases: true,
            ..Capabilities::new()
        }
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        self.check_up()?;
        self.injected_contention()?;
        let mut records = self.records();
        if let Some(refused) = refusal(&records, &req) {
            return Ok(refused);
        }
        let token = ClaimToken::generate();
        records.insert(
            req.key.to_owned(),
            Entry {
                status: Status::InProgress,
                token: token.clone(),
                lease_until: Some(req.lease_until),
                expires_at: req.record_expires_at(),
                fingerprint: req.fingerprint.map(str::to_owned),
                response: None,
            },
        );
        Ok(Claim::Acquired(token))
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<MemoryEffect>,
    ) -> Result<(), Error> {
        completion.check_response_size(key, self.capabilities().max_response_bytes)?;
        let Completion {
            expires_at,
            response,
            effects,
            ..
        } = completion;
        self.check_up()?;
        self.injected_contention()?;
        self.injected_completion_failure()?;
        let mut records = self.records();
        let Some(entry) = records.get_mut(key).filter(|e| &e.token == token) else {
            return Err(Error::lost_claim(key));
        };
        if entry.status == Status::Completed {
            // A retry of a completion that already landed: nothing to do, effects included.
            return Ok(());
        }
        let applies = checked(effects)?;
        for apply in applies {
            apply();
        }
        entry.response = response;
        entry.status = Status::Completed;
        entry.lease_until = None;
        entry.expires_at = expires_at;
        Ok(())
    }

    /// One step under the lock: the claim's condition, the effects' checks, then the writes.
    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<MemoryEffect>,
    ) -> Result<OneShotWrite, Error> {
        self.check_up()?;
        self.injected_contention()?;
        self.injected_completion_failure()?;
        let mut records = self.records();
        if let Some(Err(refused)) = refusal(&records, &req).map(Claim::acquired_or_refused) {
            return Ok(refused);
        }
        let applies = checked(effects)?;
        for apply in applies {
            apply();
        }
        records.insert(
            req.key.to_owned(),
            Entry {
                status: Status::Completed,
                token: ClaimToken::generate(),
                lease_until: None,
                expires_at: req.expires_at,
                fingerprint: req.fingerprint.map(str::to_owned),
                response: None,
            },
        );
        Ok(OneShotWrite::Committed)
    }

    async fn extend(&self, ext: Extension<'_>) -> Result<(), Error> {
        self.check_up()?;
        self.injected_contention()?;
        let mut records = self.records();
        match records.get_mut(ext.key) {
            Some(e) if &e.token == ext.token && e.status == Status::InProgress => {
                e.lease_until = Some(ext.lease_until);
                e.expires_at = ext.expires_at;
                Ok(())
            }
            _ => Err(Error::lost_claim(ext.key)),
        }
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        self.check_up()?;
        self.injected_contention()?;
        let mut records = self.records();
        match records.get(key) {
            Some(e) if &e.token == token && e.status == Status::InProgress => {
                records.remove(key);
                Ok(())
            }
            _ => Err(Error::lost_claim(key)),
        }
    }
}

/// Nothing to create or prune: records live in the process and expired ones count as absent
/// (they go with the store). [`check_ready`](StoreAdmin::check_ready) fails while the store
/// pretends to be down ([`MemoryStore::set_unavailable`]).
impl StoreAdmin for MemoryStore {
    async fn init(&self) -> Result<(), Error> {
        Ok(())
    }

    async fn check_ready(&self) -> Result<(), Error> {
        self.check_up()
    }

    async fn prune_expired(&self, _now: SystemTime, _limit: u32) -> Result<Option<u64>, Error> {
        Ok(None)
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        self.check_up()?;
        Ok(self.records().get(key).map(|e| {
            Inspected::new(
                ClaimRecord {
                    status: e.status,
                    expires_at: e.expires_at,
                    lease_until: e.lease_until,
                    fingerprint: e.fingerprint.clone(),
                    response: e.response.clone(),
                },
                Some(e.token.clone()),
            )
        }))
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.check_up()?;
        Ok(self.remove_if(key, Status::InProgress))
    }

    async fn forget(&self, key: &str) -> Result<bool, Error> {
        self.check_up()?;
        Ok(self.remove_if(key, Status::Completed))
    }
}

impl MemoryStore {
    /// Removes `key`'s record if it has `status`, under the one lock: the check and the delete
    /// cannot be split by another call.
    fn remove_if(&self, key: &str, status: Status) -> bool {
        let mut records = self.records();
        if records.get(key).is_some_and(|e| e.status == status) {
            records.remove(key);
            true
        } else {
            false
        }
    }
}

/// What a claim of `req` finds, if it is refused: the key completed, or held under a live lease.
fn refusal(records: &HashMap<String, Entry>, req: &ClaimRequest<'_>) -> Option<Claim> {
    let old = records.get(req.key)?;
    let expired = old.expires_at <= req.now;
    let lapsed = old.status == Status::InProgress && old.lease_until.is_some_and(|l| l <= req.now);
    if expired || lapsed {
        return None;
    }
    Some(match old.status {
        Status::Completed => Claim::Completed {
            record: ClaimRecord {
                status: old.status,
                expires_at: old.expires_at,
                lease_until: old.lease_until,
                fingerprint: old.fingerprint.clone(),
                response: old.response.clone(),
            },
            answered_by: AnsweredBy::Store,
        },
        Status::InProgress => Claim::HeldElsewhere {
            lease_until: old.lease_until,
        },
    })
}

/// Runs every effect's check before any is applied: a refusal writes nothing.
fn checked(effects: Effects<MemoryEffect>) -> Result<Vec<Arc<dyn Fn() + Send + Sync>>, Error> {
    let mut applies = Vec::with_capacity(effects.len());
    for (i, effect) in effects.into_vec().into_iter().enumerate() {
        (effect.check)().map_err(|reason| {
            Error::new(
                ErrorKind::EffectRejected,
                format!("effect #{i} rejected: {reason}"),
            )
        })?;
        applies.push(effect.apply);
    }
    Ok(applies)
}
