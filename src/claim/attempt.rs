//! The steps of one attempt at a key, as both front doors take them: build the claim request,
//! claim and judge what the store found, call the handler under its guards, complete with
//! retries, release. Every store step and the handler race the invocation's time budget.
//!
//! Each step answers what happened in the claim's own terms ([`Claimed`], [`Recorded`],
//! [`HandlerEnd`]); the SQS processor turns them into outcomes, the idempotency layer into
//! responses and errors.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;
use tracing::{debug, warn};

use super::lease::MIN_EXTENDED;
use super::liveness::{Liveness, StoreAnswer};
use super::locks::{Held, ItemLocks, claim_item};
use super::{Lease, PayloadCheck, PayloadVerdict};
use crate::RetryPolicy;
use crate::deadline::{self, Budget, OutOfTime};
use crate::metrics::{BatchStats, StoreCall};
use crate::store::{
    Claim, ClaimRecord, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects, Extension,
    OneShotWrite, StoredResponse, epoch_millis, from_epoch_millis,
};
use crate::{BoxError, Error, ErrorKind};

/// The settings of a claim that both front doors share, with the same defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    /// How long a completed key is remembered.
    pub(crate) ttl: Duration,
    /// How long a claim is held.
    pub(crate) lease: Lease,
    /// How a completion that failed with a transient error is retried.
    pub(crate) completion_retry: RetryPolicy,
    /// How a write cancelled on contention ([`ErrorKind::Contention`]: nothing written) is
    /// sent again: every store write of an attempt, whether or not the client retries by
    /// itself (the AWS SDK does not retry a transaction conflict).
    pub(crate) contention_retry: RetryPolicy,
    /// What a key done before with another payload means.
    pub(crate) payload_check: PayloadCheck,
}

impl Default for Terms {
    fn default() -> Self {
        Terms {
            ttl: Duration::from_secs(24 * 3600),
            lease: Lease::default(),
            completion_retry: RetryPolicy::default(),
            contention_retry: CONTENTION_RETRY,
            payload_check: PayloadCheck::Fail,
        }
    }
}

/// The default contention retries: up to 50, from 10 ms, at most 500 ms apart (about 22 s of
/// backoff in all: the invocation's time budget, not the count, is what ends them inside
/// Lambda; the count bounds a run without a deadline). A conflict is answered at once and wrote
/// nothing, so a retry costs one request; the jitter spreads invocations that collided.
pub(crate) const CONTENTION_RETRY: RetryPolicy =
    RetryPolicy::new(50, Duration::from_millis(10)).with_cap(Duration::from_millis(500));

/// One attempt at one key: the store, the terms, the budget, and what is claimed.
pub(crate) struct Attempt<'a, S: ClaimStore> {
    store: &'a S,
    terms: &'a Terms,
    budget: &'a Budget,
    key: &'a str,
    fingerprint: Option<&'a str>,
    /// The SQS message id, for log lines, when the attempt is one message's.
    message_id: Option<&'a str>,
    /// The process's item locks, when writes on one item must take turns.
    locks: Option<&'a ItemLocks>,
    /// The batch's packer, when one-shot writes with effects go several per request.
    packer: Option<&'a dyn OneShotSink<S::Effect>>,
    /// The batch's counters, when the front door keeps them (the SQS processor does).
    stats: Option<&'a BatchStats>,
    /// Writes of this attempt cancelled on contention so far.
    conflicts: AtomicU32,
    /// Whether this attempt's completion committed.
    committed: AtomicBool,
    /// The batch's view of whether the store still answers, when the front door keeps one
    /// (the SQS processor does): every store call says how it ended.
    liveness: Option<&'a Liveness>,
    /// The lease policy on this store ([`Lease::on_store`]: an extended lease only where the
    /// store extends leases).
    lease: Lease,
    /// The lease of the last claim request sent, in epoch milliseconds: the won claim's, which
    /// its owner extends ([`Self::holding_then`]).
    leased: AtomicI64,
    /// Whether a claim held elsewhere whose lease lapses inside the budget is waited out and
    /// taken over ([`Self::waiting_out_leases`]).
    wait_out_leases: bool,
}

/// How many times an attempt waits out a claim held elsewhere before it reports it held: once.
/// A claim still held after its lease lapsed was extended (or taken over) meanwhile: its owner
/// is alive, and waiting longer would only hold the batch up.
const LEASE_WAITS: u32 = 1;

/// Where an attempt sends its one-shot write with effects instead of the store's own
/// [`claim_completed`](ClaimStore::claim_completed): the processor's packer
/// (`processor/pack.rs`), which sends it with other writes of the batch in one request and
/// answers each on its own. A trait, so the claim does not depend on the front door that packs.
pub(crate) trait OneShotSink<E>: Send + Sync {
    /// Sends one write and waits for its answer, as
    /// [`ClaimStore::claim_completed`] would give it. Boxed to be object-safe: one allocation
    /// beside the queued write's own, on a path that waits for a round trip. The effects are
    /// shared with the attempt, which sends them again after contention: one copy of them
    /// lives while the write waits for its pack, not one per holder.
    fn write<'f>(
        &'f self,
        request: ClaimRequest<'f>,
        effects: Arc<Effects<E>>,
    ) -> BoxFuture<'f, Result<OneShotWrite, Error>>;
}

/// What a claim (or a one-shot write) found.
#[derive(Debug)]
pub(crate) enum Claimed<W> {
    /// This attempt won the key: the claim's token, or, for a one-shot write, `()` (committed).
    Won(W),
    /// The key was completed before; `payload` is the [`PayloadCheck`]'s verdict on this
    /// attempt's payload against the one that completed it.
    Completed {
        // The idempotency layer replays its response; the processor needs only the verdict.
        #[cfg_attr(not(feature = "idempotency"), allow(dead_code))]
        record: ClaimRecord,
        payload: PayloadVerdict,
    },
    /// Another worker holds a live claim on the key.
    HeldElsewhere { lease_until: Option<SystemTime> },
    /// The store failed; this attempt holds nothing.
    Failed(Error),
    /// The budget ran out first: the claim may have been written, and is then held until its
    /// lease lapses.
    CutOff,
}

/// How a completion ended.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// Committed, with the effects and the response.
    Committed,
    /// The budget ran out first: it may or may not have committed. The claim is kept.
    CutOff { had_effects: bool },
    /// It failed, and the handler returned no effects: its side effect stands unrecorded, so
    /// the front door reports success. The claim stays in progress until its lease lapses.
    Unrecorded(Error),
    /// It failed (or could not be confirmed, when the error is transient) with effects, or the
    /// store refused the response as too large: the claim was released, unless it was lost.
    Failed(Error),
}

/// How a guarded handler call ended.
#[derive(Debug)]
pub(crate) enum HandlerEnd<R> {
    /// It returned a response.
    Returned(R),
    /// It returned an error.
    Failed(BoxError),
    /// It panicked; the panic's message, read once.
    Panicked(String),
    /// It ran longer than its timeout and was cancelled.
    TimedOut(Duration),
    /// The budget ran out while it ran; it was cancelled.
    OutOfTime,
}

impl<'a, S: ClaimStore> Attempt<'a, S> {
    /// An attempt at `key`, whose payload's fingerprint is `fingerprint`.
    pub(crate) fn new(
        store: &'a S,
        terms: &'a Terms,
        budget: &'a Budget,
        key: &'a str,
        fingerprint: Option<&'a str>,
    ) -> Self {
        Attempt {
            store,
            terms,
            budget,
            key,
            fingerprint,
            message_id: None,
            locks: None,
            packer: None,
            stats: None,
            conflicts: AtomicU32::new(0),
            committed: AtomicBool::new(false),
            liveness: None,
            lease: terms.lease.on_store(store.capabilities().extends_leases),
            leased: AtomicI64::new(0),
            wait_out_leases: false,
        }
    }

    /// The same attempt, waiting out a claim held elsewhere whose lease lapses before the
    /// budget's cut-off (the deadline less the margin), and then taking the key over, instead of
    /// answering "held elsewhere" at once: a stream's retry comes at once after a crash, and
    /// meets the crashed invocation's claims. At most [`LEASE_WAITS`] wait, until the lease the
    /// store answered lapses; a lease that lapses after the cut-off is answered as before. A
    /// one-shot write does not wait (it holds its items' locks, and leaves no claim of its own
    /// behind a crash to wait for).
    pub(crate) fn waiting_out_leases(mut self) -> Self {
        self.wait_out_leases = true;
        self
    }

    /// How long to wait before claiming again a key held until `lease_until`: `None` when
    /// this attempt does not wait, has waited enough, or the lease outlasts the cut-off.
    fn lease_wait(&self, lease_until: Option<SystemTime>, waits: u32) -> Option<Duration> {
        if !self.wait_out_leases || waits >= LEASE_WAITS {
            return None;
        }
        let (until, cutoff) = (lease_until?, self.budget.cutoff()?);
        if until >= cutoff {
            return None;
        }
        // Just past it: a lease that ends at `now` has lapsed ("not after now").
        let wait = until
            .duration_since(self.budget.now())
            .unwrap_or(Duration::ZERO);
        Some(wait + Duration::from_millis(1))
    }

    /// The same attempt, telling `liveness` how each of its store calls ended, and sparing a
    /// store that has gone dark the calls that would only wait out its timeout (a completion's
    /// retries, a release).
    pub(crate) fn with_liveness(mut self, liveness: &'a Liveness) -> Self {
        self.liveness = Some(liveness);
        self
    }

    /// Whether the batch has seen the store go dark (see `liveness.rs`).
    fn store_dark(&self) -> bool {
        self.liveness.is_some_and(|l| l.dark().is_some())
    }

    /// The same attempt, counting its conflicts, retries and (when measuring) store latencies
    /// in the batch's `stats`.
    pub(crate) fn with_stats(mut self, stats: &'a BatchStats) -> Self {
        self.stats = Some(stats);
        self
    }

    /// [`Budget::bounded`] for a store call: a call that returns in time has its duration
    /// recorded as `call` when the batch's stats measure. Not an `async fn`, which would hold
    /// a second copy of `step` in the future: the timing is a `map` on the bounded future.
    fn timed<F: Future + 'a>(
        &self,
        call: StoreCall,
        step: F,
    ) -> impl Future<Output = Result<F::Output, OutOfTime>> + 'a {
        // Started where the call is made, which is where it is awaited.
        let started = self
            .stats
            .and_then(BatchStats::latencies)
            .map(|latencies| (latencies, tokio::time::Instant::now()));
        let budget: &'a Budget = self.budget;
        budget.bounded(step).map(move |out| {
            if let (Some((latencies, started)), Ok(_)) = (started, &out) {
                latencies.push(call, started.elapsed());
            }
            out
        })
    }

    /// The same attempt, its one-shot write with effects sent through `packer` (with others
    /// of the batch, in one request) when there is one.
    pub(crate) fn with_packer(mut self, packer: Option<&'a impl OneShotSink<S::Effect>>) -> Self {
        self.packer = packer.map(|p| p as &'a dyn OneShotSink<S::Effect>);
        self
    }

    /// The same attempt, its writes with effects taking turns with the process's other writes
    /// on the same items ([`ItemLocks`]).
    pub(crate) fn with_locks(mut self, locks: &'a ItemLocks) -> Self {
        self.locks = Some(locks);
        self
    }

    /// How many of this attempt's writes were cancelled on contention (retried or not).
    pub(crate) fn conflicts(&self) -> u32 {
        self.conflicts.load(Ordering::Relaxed)
    }

    /// Sends a store write made by `send`, and sends it again, under the contention retry
    /// policy and never past the budget's hard stop, while it is cancelled on contention
    /// ([`ErrorKind::Contention`]: nothing was written). Counts conflicts and retries.
    async fn contended<T: StoreAnswer, F, Fut>(&self, mut send: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let result = self
            .terms
            .contention_retry
            .retry(
                self.budget.hard_stop(),
                |_| {
                    let sent_at = tokio::time::Instant::now();
                    let sent = send();
                    async move {
                        let answer = sent.await;
                        // A duplicate a cache answered says so (`AnsweredBy::Cache`): liveness
                        // does not take it for an answer of the store behind.
                        if let Some(liveness) = self.liveness {
                            liveness.observe(sent_at, &answer);
                        }
                        if answer
                            .as_ref()
                            .is_err_and(|e| e.kind() == ErrorKind::Contention)
                        {
                            self.conflicts.fetch_add(1, Ordering::Relaxed);
                            if let Some(stats) = self.stats {
                                stats.note_conflict();
                            }
                        }
                        answer
                    }
                },
                |e: &Error| e.kind() == ErrorKind::Contention,
                |retry, e| {
                    if let Some(stats) = self.stats {
                        stats.note_retry();
                    }
                    debug!(
                        message_id = self.message_id,
                        key = self.key,
                        retry,
                        error = %format_args!("{e:#}"),
                        "write cancelled on contention; sending it again"
                    );
                },
            )
            .await;
        match result {
            Err(e) if e.kind() == ErrorKind::Contention => Err(Error::with_source(
                ErrorKind::Contention,
                format!(
                    "every write met contention ({} cancelled: another write on one of its \
                     items was in flight, a hot item written from several places at once) \
                     until the contention retries or the time budget ran out; nothing was \
                     written",
                    self.conflicts()
                ),
                e,
            )),
            other => other,
        }
    }

    /// Takes the item locks of a write on this key with `effects`, under the budget. `None`
    /// without locks.
    async fn take_turn(&self, effects: &Effects<S::Effect>) -> Result<Option<Held<'a>>, OutOfTime> {
        let Some(locks) = self.locks else {
            return Ok(None);
        };
        let mut items = Vec::with_capacity(effects.len() + 1);
        items.push(claim_item(self.key));
        items.extend(
            effects
                .as_slice()
                .iter()
                .filter_map(|e| self.store.effect_item(e)),
        );
        self.budget.bounded(locks.lock(items)).await.map(Some)
    }

    /// The stored key.
    pub(crate) fn key(&self) -> &'a str {
        self.key
    }

    /// The same attempt, naming SQS message `id` in its log lines.
    pub(crate) fn for_message(mut self, id: &'a str) -> Self {
        self.message_id = Some(id);
        self
    }

    /// The claim request, taken now: leased under the lease policy, and kept at least as long
    /// as the lease (an expired record counts as absent, and a second worker would run the
    /// handler alongside the first).
    fn request(&self) -> ClaimRequest<'a> {
        let now = self.budget.now();
        let lease_until = self.lease.lease_until(now, self.budget.deadline());
        self.leased
            .store(epoch_millis(lease_until), Ordering::Relaxed);
        ClaimRequest {
            key: self.key,
            now,
            lease_until,
            expires_at: deadline::after(now, self.terms.ttl).max(lease_until),
            fingerprint: self.fingerprint,
        }
    }

    /// Claims the key (waiting out a lease that lapses soon, when the attempt does:
    /// [`Self::waiting_out_leases`]).
    pub(crate) async fn claim(&self) -> Claimed<ClaimToken> {
        let mut waits = 0;
        loop {
            // Store futures are boxed where they are awaited: an SDK call's future runs to
            // kilobytes, and inline it would grow every message's future.
            let claimed = self
                .timed(
                    StoreCall::Claim,
                    Box::pin(self.contended(|| self.store.claim(self.request()))),
                )
                .await;
            return match claimed {
                Err(OutOfTime) => Claimed::CutOff,
                Ok(Err(e)) => Claimed::Failed(e),
                Ok(Ok(Claim::Acquired(token))) => Claimed::Won(token),
                Ok(Ok(Claim::Completed { record, .. })) => self.completed(record),
                Ok(Ok(Claim::HeldElsewhere { lease_until })) => {
                    if self.wait_lease(lease_until, waits).await {
                        waits += 1;
                        continue;
                    }
                    Claimed::HeldElsewhere { lease_until }
                }
            };
        }
    }

    /// Waits out a claim held elsewhere until `lease_until` when this attempt does
    /// ([`Self::lease_wait`]); whether it waited (and should claim again).
    async fn wait_lease(&self, lease_until: Option<SystemTime>, waits: u32) -> bool {
        let Some(wait) = self.lease_wait(lease_until, waits) else {
            return false;
        };
        debug!(
            message_id = self.message_id,
            key = self.key,
            wait_ms = wait.as_millis() as u64,
            "the key is held by a claim whose lease lapses before the cut-off: waiting it out"
        );
        self.budget
            .bounded(Box::pin(tokio::time::sleep(wait)))
            .await
            .is_ok()
            && self.budget.may_start()
    }

    /// Runs `work` (the handler) while keeping this attempt's claim, `token`'s, then `then` on
    /// its output (the completion, or the release) to its end. Under an extended lease
    /// ([`Lease::extended`]) the lease is extended each time half of it is left
    /// ([`ClaimStore::extend`]), so a live owner is never taken over; a handler that ends inside
    /// its first half lease costs no request. One keeper serves both steps: one timer per
    /// message.
    ///
    /// When the claim cannot be kept while `work` runs (the store refused the extension:
    /// another worker took the key over; or no extension was answered before the lease
    /// lapsed) `work` is stopped where it stands, `then` never runs, and the `Err` says why:
    /// nothing of it may be committed. `then` itself is never stopped: a completion is fenced
    /// by the token, and one that can no longer be kept is refused by the store (`LostClaim`);
    /// the lease is kept while it runs so that a completion slowed by contention or retries is
    /// not taken over meanwhile.
    pub(crate) async fn holding_then<T, U, C>(
        &self,
        token: &ClaimToken,
        work: impl Future<Output = T>,
        then: impl FnOnce(T) -> C,
    ) -> Result<U, Error>
    where
        C: Future<Output = U>,
    {
        if !self.lease.is_extended() {
            return Ok(then(work.await).await);
        }
        let mut keep = Box::pin(self.keep(token));
        let out = match futures::future::select(std::pin::pin!(work), keep.as_mut()).await {
            futures::future::Either::Left((out, _)) => out,
            futures::future::Either::Right((lost, _)) => return Err(lost),
        };
        let mut next = std::pin::pin!(then(out));
        match futures::future::select(next.as_mut(), keep).await {
            futures::future::Either::Left((done, _)) => Ok(done),
            futures::future::Either::Right((_, _)) => Ok(next.await),
        }
    }

    /// Extends `token`'s lease each time half of what is left of it is left, for as long as
    /// it is awaited; returns only when the claim cannot be kept, with why.
    async fn keep(&self, token: &ClaimToken) -> Error {
        let mut from = self.budget.now();
        let mut until = from_epoch_millis(self.leased.load(Ordering::Relaxed));
        loop {
            if self.budget.deadline().is_some_and(|d| until >= d) {
                // The lease reaches the deadline: nothing is left to extend it for.
                return std::future::pending().await;
            }
            let half = until.duration_since(from).unwrap_or(Duration::ZERO) / 2;
            self.sleep_until(from + half).await;
            // Sent again after an error until an answer comes or the lease lapses.
            let mut tries = 0u32;
            loop {
                let now = self.budget.now();
                let lease_until = self.lease.lease_until(now, self.budget.deadline());
                let expires_at = deadline::after(now, self.terms.ttl);
                let left = until.duration_since(now).unwrap_or(Duration::ZERO);
                let sent_at = tokio::time::Instant::now();
                let sent = self.contended(|| {
                    self.store.extend(Extension::new(
                        self.key,
                        token,
                        now,
                        lease_until,
                        expires_at,
                    ))
                });
                // An extension sent late (the claim's own round trip was slow, or an error
                // was sent again) still gets time to be answered: a lapsed lease nobody took
                // over is still this owner's, and the store says which.
                let answer = tokio::time::timeout(left.max(MIN_EXTENDED / 2), Box::pin(sent)).await;
                match answer {
                    Ok(Ok(())) => {
                        debug!(
                            message_id = self.message_id,
                            key = self.key,
                            "the handler still runs: its claim's lease is extended"
                        );
                        (from, until) = (now, lease_until);
                        self.leased
                            .store(epoch_millis(lease_until), Ordering::Relaxed);
                        break;
                    }
                    Ok(Err(e)) if e.kind() == ErrorKind::LostClaim => {
                        return Error::with_source(
                            ErrorKind::LostClaim,
                            "the claim's lease could not be extended: another worker took the \
                             key over (this worker was paused or slow past its lease)",
                            e,
                        );
                    }
                    Ok(Err(e)) if self.budget.now() < until && !self.store_dark() => {
                        tries += 1;
                        warn!(
                            message_id = self.message_id,
                            key = self.key,
                            tries,
                            error = %format_args!("{e:#}"),
                            "could not extend the claim's lease; trying again before it lapses"
                        );
                        let pause = RetryPolicy::new(u32::MAX, Duration::from_millis(50))
                            .with_cap(Duration::from_millis(500))
                            .delay(tries);
                        let at = self.budget.now() + pause;
                        self.sleep_until(at.min(until)).await;
                    }
                    Ok(Err(e)) => {
                        return Error::with_source(
                            e.kind(),
                            "the claim's lease could not be extended before it lapsed",
                            e,
                        );
                    }
                    Err(_) => {
                        let silent = || {
                            Error::new(
                                ErrorKind::StoreUnavailable,
                                "the claim's lease could not be extended before it lapsed: \
                                 the store did not answer in time",
                            )
                            .no_answer()
                        };
                        // The batch hears of it: a store silent while a lease ran out is
                        // dark unless something answered meanwhile, and no more messages
                        // start on it (`liveness.rs`).
                        if let Some(liveness) = self.liveness {
                            liveness.observe::<()>(sent_at, &Err(silent()));
                        }
                        return silent();
                    }
                }
            }
        }
    }

    /// Sleeps until `at` on the budget's clock.
    async fn sleep_until(&self, at: SystemTime) {
        let wait = at
            .duration_since(self.budget.now())
            .unwrap_or(Duration::ZERO);
        Box::pin(tokio::time::sleep(wait)).await;
    }

    /// Notes that this message's completion committed (what the S3 cleanup after the batch
    /// waits for: [`Attempt::committed`]).
    pub(crate) fn note_committed(&self) {
        self.committed.store(true, Ordering::Relaxed);
    }

    /// Whether [`Attempt::note_committed`] was called: the completion committed.
    pub(crate) fn committed(&self) -> bool {
        self.committed.load(Ordering::Relaxed)
    }

    /// Claims the key completed with `effects` in one write
    /// ([`ClaimStore::claim_completed`]). A completed record expires with the TTL alone: no
    /// lease holds it.
    pub(crate) async fn claim_completed(&self, effects: Effects<S::Effect>) -> Claimed<()> {
        let Ok(_turn) = self.take_turn(&effects).await else {
            return Claimed::CutOff;
        };
        // Each send is a new request at its own `now` with the same effects: a write cancelled
        // on contention is sent again as it was. The packer shares them (it only lends them to
        // the store); the store's own one-shot write takes a copy.
        let packer = self.packer.filter(|_| !effects.is_empty());
        let effects = Arc::new(effects);
        let send = || {
            let request = ClaimRequest {
                expires_at: deadline::after(self.budget.now(), self.terms.ttl),
                ..self.request()
            };
            match packer {
                Some(packer) => {
                    futures::future::Either::Left(packer.write(request, Arc::clone(&effects)))
                }
                None => futures::future::Either::Right(
                    self.store
                        .claim_completed(request, Effects::from(effects.as_slice().to_vec())),
                ),
            }
        };
        let written = self
            .timed(StoreCall::Completion, Box::pin(self.contended(send)))
            .await;
        match written {
            Err(OutOfTime) => Claimed::CutOff,
            Ok(Err(e)) => Claimed::Failed(e),
            Ok(Ok(OneShotWrite::Committed)) => Claimed::Won(()),
            Ok(Ok(OneShotWrite::Completed { record, .. })) => self.completed(record),
            Ok(Ok(OneShotWrite::HeldElsewhere { lease_until })) => {
                Claimed::HeldElsewhere { lease_until }
            }
        }
    }

    /// A stored record judged: a duplicate, unless the payload check says the payload is
    /// another one.
    fn completed<W>(&self, record: ClaimRecord) -> Claimed<W> {
        let payload = self
            .terms
            .payload_check
            .judge(self.fingerprint, record.fingerprint.as_deref());
        Claimed::Completed { record, payload }
    }

    /// Records the completion with `response` (the idempotency layer's) and `effects`,
    /// retrying transient errors under the one retry policy, all of it under the budget; on a
    /// failure, releases the claim when nothing of the handler's work is left standing.
    pub(crate) async fn complete(
        &self,
        token: &ClaimToken,
        response: Option<StoredResponse>,
        effects: Effects<S::Effect>,
    ) -> Recorded {
        let had_effects = !effects.is_empty();
        let sent_response = response.is_some();
        let expires_at = deadline::after(self.budget.now(), self.terms.ttl);
        let turn = match self.take_turn(&effects).await {
            Ok(turn) => turn,
            Err(OutOfTime) => return Recorded::CutOff { had_effects },
        };
        // A client that retries by itself (the AWS SDK) gets no second loop on top.
        let policy = if self.store.capabilities().retries_internally {
            RetryPolicy::none()
        } else {
            self.terms.completion_retry
        };
        // A retry resends the same completion. A transient error can leave it unknown whether
        // the attempt committed; the contract makes that safe: if it did, the retry finds the
        // record completed by this token and succeeds without applying anything again; if it
        // did not, the retry commits effects and completion together. A cancellation on
        // contention wrote nothing, and is sent again inside each attempt ([`Self::contended`]).
        let send = || {
            let mut completion = Completion::new(expires_at)
                .with_effects(Effects::from(effects.as_slice().to_vec()));
            if let Some(response) = &response {
                completion = completion.with_response(response.clone());
            }
            self.store.complete_with(self.key, token, completion)
        };
        let retried = policy.retry(
            self.budget.hard_stop(),
            |_| self.contended(&send),
            // Not on a store gone dark: each retry would only wait out its timeout again.
            |e: &Error| e.kind() == ErrorKind::StoreUnavailable && !self.store_dark(),
            |retry, e| {
                if let Some(stats) = self.stats {
                    stats.note_retry();
                }
                warn!(
                    message_id = self.message_id,
                    key = self.key,
                    retry,
                    error = %format_args!("{e:#}"),
                    "completion failed; retrying"
                );
            },
        );
        let timed = self.timed(StoreCall::Completion, Box::pin(retried)).await;
        // The items are free again before a release goes out.
        drop(turn);
        let e = match timed {
            Ok(Ok(())) => return Recorded::Committed,
            Err(OutOfTime) => return Recorded::CutOff { had_effects },
            Ok(Err(e)) => e,
        };
        if sent_response && e.kind() == ErrorKind::ResponseTooLarge {
            // The store's own limit: refused before anything was written, the key free again.
            self.release(token).await;
            return Recorded::Failed(e);
        }
        if !had_effects {
            return Recorded::Unrecorded(e);
        }
        // With effects, nothing of the handler's work is done unless the completion committed.
        // A lost claim has nothing of ours left to release.
        if e.kind() != ErrorKind::LostClaim {
            self.release(token).await;
        }
        Recorded::Failed(e)
    }

    /// Releases the claim. Not fatal either way: an unreleased claim lapses with its lease,
    /// after which a redelivery or a retry takes it over.
    pub(crate) async fn release(&self, token: &ClaimToken) {
        if self.store_dark() {
            // It would only wait out the store's timeout.
            warn!(
                message_id = self.message_id,
                key = self.key,
                "the store has gone dark: the claim is not released; it will lapse with its lease"
            );
            return;
        }
        let released = self
            .budget
            .bounded(Box::pin(
                self.contended(|| self.store.release(self.key, token)),
            ))
            .await;
        match released {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(
                message_id = self.message_id,
                key = self.key,
                error = %format_args!("{e:#}"),
                "could not release the claim; it will lapse with its lease"
            ),
            Err(OutOfTime) => warn!(
                message_id = self.message_id,
                key = self.key,
                "release cut off by the time budget; the claim will lapse with its lease"
            ),
        }
    }
}

/// Runs a handler `call` under its guards: a panic is caught (the whole call, the synchronous
/// part of the handler's `call` included, runs inside `catch_unwind`, so a panicking handler
/// fails its message or request, not the invocation), `timeout` cancels it (none: only the
/// budget does), and the budget's hard stop cuts it off.
pub(crate) async fn guarded<R, Fut>(
    call: Fut,
    timeout: Option<Duration>,
    budget: &Budget,
) -> HandlerEnd<R>
where
    Fut: Future<Output = Result<R, BoxError>>,
{
    // Boxed: every layer around it (the timeout, the budget, the claim's steps) would otherwise
    // hold a copy of the handler's future and its input, and the per-message future grew to
    // kilobytes that every scheduling step moved; one small allocation is cheaper.
    let run = Box::pin(AssertUnwindSafe(call).catch_unwind());
    let timed = async {
        match timeout {
            None => Ok(run.await),
            // The timer is boxed: it exists only when a timeout is set, and inline it would
            // enlarge every message's future whether or not one is.
            Some(limit) => {
                let timer = Box::pin(tokio::time::sleep(limit));
                match futures::future::select(run, timer).await {
                    futures::future::Either::Left((returned, _)) => Ok(returned),
                    futures::future::Either::Right(((), _)) => Err(limit),
                }
            }
        }
    };
    match budget.bounded(timed).await {
        Err(OutOfTime) => HandlerEnd::OutOfTime,
        Ok(Err(limit)) => HandlerEnd::TimedOut(limit),
        Ok(Ok(Ok(Ok(response)))) => HandlerEnd::Returned(response),
        Ok(Ok(Ok(Err(e)))) => HandlerEnd::Failed(e),
        Ok(Ok(Err(panic))) => HandlerEnd::Panicked(panic_message(&*panic)),
    }
}

/// What a panic says: its `&str` or `String` payload, the two `panic!` makes.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadline::Clock;
    use crate::store::MemoryStore;

    fn budget() -> Budget {
        Budget::new(Clock::tokio(), 0, Duration::ZERO, Duration::ZERO)
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_is_read_once_whatever_its_payload() {
        let b = budget();
        let end: HandlerEnd<()> = guarded(async { panic!("boom {}", 1) }, None, &b).await;
        assert!(
            matches!(end, HandlerEnd::Panicked(ref m) if m == "boom 1"),
            "{end:?}"
        );
        let end: HandlerEnd<()> = guarded(async { panic!("static") }, None, &b).await;
        assert!(
            matches!(end, HandlerEnd::Panicked(ref m) if m == "static"),
            "{end:?}"
        );
        let end: HandlerEnd<()> = guarded(async { std::panic::panic_any(7_u8) }, None, &b).await;
        assert!(
            matches!(end, HandlerEnd::Panicked(ref m) if m == "non-string panic payload"),
            "{end:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_past_its_timeout_is_cancelled() {
        let b = budget();
        let end: HandlerEnd<()> =
            guarded(std::future::pending(), Some(Duration::from_millis(30)), &b).await;
        assert!(matches!(end, HandlerEnd::TimedOut(d) if d == Duration::from_millis(30)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_completed_key_is_judged_against_its_fingerprint() {
        let store = MemoryStore::new();
        let terms = Terms::default();
        let b = budget();
        let first = Attempt::new(&store, &terms, &b, "ns#k", Some("a"));
        let Claimed::Won(token) = first.claim().await else {
            panic!("the first claim wins");
        };
        assert!(matches!(
            first.complete(&token, None, Effects::none()).await,
            Recorded::Committed
        ));
        let same = Attempt::new(&store, &terms, &b, "ns#k", Some("a"));
        assert!(matches!(
            same.claim().await,
            Claimed::Completed {
                payload: PayloadVerdict::Same,
                ..
            }
        ));
        let other = Attempt::new(&store, &terms, &b, "ns#k", Some("b"));
        assert!(matches!(
            other.claim().await,
            Claimed::Completed {
                payload: PayloadVerdict::Refused,
                ..
            }
        ));
    }
}
