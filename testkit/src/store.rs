//! A claim store that lets a test see and change each call: [`Spy`] wraps any
//! [`ClaimStore`], counts its calls by [`Method`], and asks one hook, [`Spy::on_call`], what to
//! do with each [`Call`]: pass it on, delay it, hang, fail it, or pass it on and then lose the
//! answer ([`Action`]). [`Spy::map_capabilities`] changes what the store says it can do.
//!
//! This is what a test of a consumer (or of the library itself) otherwise writes by hand: a
//! store that forwards every method to an inner one and changes two of them. Written once, the
//! forwarding cannot drift from the trait (a new default method is forwarded here or nowhere),
//! and a test states only what it changes:
//!
//! ```
//! use std::time::Duration;
//! use sqs_claim::MemoryStore;
//! use sqs_claim_testkit::store::{Action, Method, Spy};
//!
//! // Claims take 5 ms and every completion fails, on a store that is otherwise the memory store.
//! let store = Spy::new(MemoryStore::new()).on_call(|call| match call.method() {
//!     Method::Claim => Action::Delay(Duration::from_millis(5)),
//!     Method::Complete => Action::Fail(sqs_claim::Error::new(
//!         sqs_claim::ErrorKind::StoreUnavailable,
//!         "scripted",
//!     )),
//!     _ => Action::Forward,
//! });
//! assert_eq!(store.count(Method::Claim), 0);
//! ```
//!
//! A hook that switches at run time reads the test's own flags (an `Arc<AtomicBool>` it
//! captured); the spy keeps no script of its own. Clones share the hook and the counts, so a
//! test keeps one clone to read and hands another to the processor.
//!
//! Available with the kit's `store` feature, which makes the kit depend on `sqs-claim` (without
//! its default features: the spy adds no store to your build).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sqs_claim::Error;
use sqs_claim::store::{
    Capabilities, Claim, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects, Extension,
    Inspected, OneShotWrite, Packed, StoreAdmin,
};

/// Which [`ClaimStore`] method a call is, for [`Call::method`] and the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// [`ClaimStore::claim`].
    Claim,
    /// [`ClaimStore::complete_with`].
    Complete,
    /// [`ClaimStore::release`].
    Release,
    /// [`ClaimStore::claim_completed`] (a one-shot write), also each write of a pack.
    ClaimCompleted,
    /// [`ClaimStore::extend`]: a held claim's lease extended while its handler runs.
    Extend,
}

impl Method {
    const ALL: [Method; 5] = [
        Method::Claim,
        Method::Complete,
        Method::Release,
        Method::ClaimCompleted,
        Method::Extend,
    ];

    fn index(self) -> usize {
        match self {
            Method::Claim => 0,
            Method::Complete => 1,
            Method::Release => 2,
            Method::ClaimCompleted => 3,
            Method::Extend => 4,
        }
    }
}

/// One call the spy was asked to make, with its arguments, as the hook sees it.
#[non_exhaustive]
pub enum Call<'a, E> {
    /// A claim.
    Claim(ClaimRequest<'a>),
    /// A completion of `key`.
    Complete {
        /// The key.
        key: &'a str,
        /// The claim's token.
        token: &'a ClaimToken,
        /// What the completion writes.
        completion: &'a Completion<E>,
    },
    /// A release of `key`.
    Release {
        /// The key.
        key: &'a str,
        /// The claim's token.
        token: &'a ClaimToken,
    },
    /// A one-shot write: claim as completed, with `effects`.
    ClaimCompleted {
        /// The claim.
        request: ClaimRequest<'a>,
        /// The effects committed with it.
        effects: &'a Effects<E>,
    },
    /// An extension of a held claim's lease.
    Extend(Extension<'a>),
}

impl<E> Call<'_, E> {
    /// Which method this is.
    pub fn method(&self) -> Method {
        match self {
            Call::Claim(_) => Method::Claim,
            Call::Complete { .. } => Method::Complete,
            Call::Release { .. } => Method::Release,
            Call::ClaimCompleted { .. } => Method::ClaimCompleted,
            Call::Extend(_) => Method::Extend,
        }
    }

    /// The key the call is about.
    pub fn key(&self) -> &str {
        match self {
            Call::Claim(request) | Call::ClaimCompleted { request, .. } => request.key,
            Call::Complete { key, .. } | Call::Release { key, .. } => key,
            Call::Extend(extension) => extension.key,
        }
    }
}

// By hand: effects need not be `Debug`, and a test's log wants the method and the key.
impl<E> fmt::Debug for Call<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("method", &self.method())
            .field("key", &self.key())
            .finish_non_exhaustive()
    }
}

/// What the spy does with a call, as the hook answers.
#[derive(Debug)]
#[non_exhaustive]
pub enum Action {
    /// Pass the call on to the inner store.
    Forward,
    /// Wait this long (on tokio's clock, so a paused test clock makes it exact), then pass the
    /// call on: a store with a round trip.
    Delay(Duration),
    /// Never answer: a store that stalls or went dark. Only the caller's own deadline ends it.
    Hang,
    /// Wait this long (tokio's clock), then fail as a store client whose own timeout ran out:
    /// an [`ErrorKind::StoreUnavailable`](sqs_claim::ErrorKind::StoreUnavailable) error caused
    /// by an I/O `TimedOut`, which the processor reads as the store's silence (a store gone
    /// dark, if nothing else answered meanwhile). The inner store is not called.
    Silent(Duration),
    /// Answer this error without calling the inner store: nothing was written.
    Fail(Error),
    /// Pass the call on and, if it succeeded, answer this error instead: the write landed but
    /// its answer was lost, as after a timeout on the way back. An error from the inner store
    /// is answered as it is.
    FailAfter(Error),
}

type OnCall<E> = dyn Fn(&Call<'_, E>) -> Action + Send + Sync;
type MapCapabilities = dyn Fn(Capabilities) -> Capabilities + Send + Sync;
type EffectItem<E> = dyn Fn(&E) -> Option<u64> + Send + Sync;

/// A [`ClaimStore`] (and [`StoreAdmin`]) in front of `S` that counts each call and lets a hook
/// change it. See the [module documentation](self).
///
/// Every method is passed on to `S` unless the hook says otherwise; what `S` says of itself
/// ([`capabilities`](ClaimStore::capabilities), [`effect_item`](ClaimStore::effect_item)) too,
/// unless [`map_capabilities`](Spy::map_capabilities) or
/// [`map_effect_item`](Spy::map_effect_item) change it. One exception: a pack
/// ([`claim_completed_packed`](ClaimStore::claim_completed_packed)) is recorded
/// ([`packs`](Spy::packs)) and then sent as its one-shot writes, all at once (as the trait's
/// default does), so the hook sees and may change each write. A spy whose capabilities say it
/// packs (`atomic_one_shot`, `max_pack_actions`) therefore shows how a processor packs, over
/// a store that does not. Clones share the hook, the counts and the packs.
#[derive(Clone)]
pub struct Spy<S: ClaimStore> {
    inner: S,
    on_call: Option<Arc<OnCall<S::Effect>>>,
    capabilities: Option<Arc<MapCapabilities>>,
    effect_item: Option<Arc<EffectItem<S::Effect>>>,
    counts: Arc<[AtomicUsize; 5]>,
    packs: Arc<Mutex<Vec<usize>>>,
}

impl<S: ClaimStore> Spy<S> {
    /// A spy that passes every call on to `inner` and counts it.
    pub fn new(inner: S) -> Self {
        Spy {
            inner,
            on_call: None,
            capabilities: None,
            effect_item: None,
            counts: Arc::default(),
            packs: Arc::default(),
        }
    }

    /// Asks `hook` what to do with each call, before it reaches the inner store. The call is
    /// counted whatever the answer.
    pub fn on_call<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Call<'_, S::Effect>) -> Action + Send + Sync + 'static,
    {
        self.on_call = Some(Arc::new(hook));
        self
    }

    /// Answers [`capabilities`](ClaimStore::capabilities) with `map` applied to the inner
    /// store's. A hand-written wrapper that did not forward them answered the trait's default,
    /// [`Capabilities::new`]: `|_| Capabilities::new()` says the same.
    pub fn map_capabilities<F>(mut self, map: F) -> Self
    where
        F: Fn(Capabilities) -> Capabilities + Send + Sync + 'static,
    {
        self.capabilities = Some(Arc::new(map));
        self
    }

    /// Answers [`effect_item`](ClaimStore::effect_item) with `item` instead of the inner
    /// store's: a hot-item test's item hash over a store that has none.
    pub fn map_effect_item<F>(mut self, item: F) -> Self
    where
        F: Fn(&S::Effect) -> Option<u64> + Send + Sync + 'static,
    {
        self.effect_item = Some(Arc::new(item));
        self
    }

    /// The size (in writes) of each pack the spy was handed
    /// ([`claim_completed_packed`](ClaimStore::claim_completed_packed)), in order, by this spy
    /// and its clones. Each write of a pack is also a [`Method::ClaimCompleted`] call.
    pub fn packs(&self) -> Vec<usize> {
        self.packs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many calls of `method` were made, by this spy and its clones.
    pub fn count(&self, method: Method) -> usize {
        self.counts[method.index()].load(Ordering::SeqCst)
    }

    /// How many calls were made, of every method.
    pub fn calls(&self) -> usize {
        Method::ALL.iter().map(|m| self.count(*m)).sum()
    }

    /// The inner store.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner store, the spy dropped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Counts a call and asks the hook about it.
    fn decide(&self, call: &Call<'_, S::Effect>) -> Action {
        self.counts[call.method().index()].fetch_add(1, Ordering::SeqCst);
        match &self.on_call {
            Some(hook) => hook(call),
            None => Action::Forward,
        }
    }
}

/// Runs `forward` (the inner store's call) as `action` says.
async fn act<T, F>(action: Action, forward: F) -> Result<T, Error>
where
    F: Future<Output = Result<T, Error>>,
{
    match action {
        Action::Forward => forward.await,
        Action::Delay(wait) => {
            tokio::time::sleep(wait).await;
            forward.await
        }
        Action::Hang => std::future::pending().await,
        Action::Silent(wait) => {
            tokio::time::sleep(wait).await;
            Err(Error::with_source(
                sqs_claim::ErrorKind::StoreUnavailable,
                format!(
                    "no answer from the store within {} ms (the spy's silence)",
                    wait.as_millis()
                ),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            ))
        }
        Action::Fail(error) => Err(error),
        Action::FailAfter(error) => {
            forward.await?;
            Err(error)
        }
    }
}

impl<S: ClaimStore> ClaimStore for Spy<S> {
    type Effect = S::Effect;

    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, Error> {
        let action = self.decide(&Call::Claim(request));
        act(action, self.inner.claim(request)).await
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<S::Effect>,
    ) -> Result<(), Error> {
        let action = self.decide(&Call::Complete {
            key,
            token,
            completion: &completion,
        });
        act(action, self.inner.complete_with(key, token, completion)).await
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        let action = self.decide(&Call::Release { key, token });
        act(action, self.inner.release(key, token)).await
    }

    async fn extend(&self, extension: Extension<'_>) -> Result<(), Error> {
        let action = self.decide(&Call::Extend(extension));
        act(action, self.inner.extend(extension)).await
    }

    async fn claim_completed(
        &self,
        request: ClaimRequest<'_>,
        effects: Effects<S::Effect>,
    ) -> Result<OneShotWrite, Error> {
        let action = self.decide(&Call::ClaimCompleted {
            request,
            effects: &effects,
        });
        act(action, self.inner.claim_completed(request, effects)).await
    }

    fn capabilities(&self) -> Capabilities {
        let inner = self.inner.capabilities();
        match &self.capabilities {
            Some(map) => map(inner),
            None => inner,
        }
    }

    fn effect_item(&self, effect: &S::Effect) -> Option<u64> {
        match &self.effect_item {
            Some(item) => item(effect),
            None => self.inner.effect_item(effect),
        }
    }

    async fn claim_completed_packed(
        &self,
        writes: Vec<(ClaimRequest<'_>, Vec<&S::Effect>)>,
    ) -> Vec<Packed> {
        self.packs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(writes.len());
        let sent = writes.into_iter().map(|(request, effects)| {
            self.claim_completed(request, effects.into_iter().cloned().collect())
        });
        futures::future::join_all(sent)
            .await
            .into_iter()
            .map(Packed::Answered)
            .collect()
    }
}

/// Administration is passed on untouched and uncounted: the spy is about the data path.
impl<S: ClaimStore + StoreAdmin> StoreAdmin for Spy<S> {
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

    fn forget(&self, key: &str) -> impl Future<Output = Result<bool, Error>> + Send {
        self.inner.forget(key)
    }
}

// By hand: the inner store need not be `Debug`, and the hook is a closure.
impl<S: ClaimStore> fmt::Debug for Spy<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<_> = Method::ALL.iter().map(|m| (*m, self.count(*m))).collect();
        f.debug_struct("Spy")
            .field("counts", &counts)
            .field("on_call", &self.on_call.is_some())
            .field("packs", &self.packs().len())
            .finish_non_exhaustive()
    }
}
