use std::any::{Any, type_name};
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;

use super::{
    Capabilities, Claim, ClaimRequest, ClaimStore, ClaimToken, Completion, Effects, Extension,
    Inspected, OneShotWrite, Packed, StoreAdmin,
};
use crate::{Error, ErrorKind};

/// An effect of any type, for a [`BoxStore`] (its [`Effect`](ClaimStore::Effect) type): the
/// effect behind an [`Arc`], and the name of its type.
///
/// Cloning it clones the `Arc`, not the effect. `Debug` prints the type's name only: an effect
/// carries business data (an amount, an account), which never goes to logs.
#[derive(Clone)]
pub struct AnyEffect {
    value: Arc<dyn Any + Send + Sync>,
    type_name: &'static str,
}

impl AnyEffect {
    /// Wraps `effect`, an effect of the boxed store's own [`Effect`](ClaimStore::Effect) type.
    /// An `AnyEffect` given here is returned as it is, not wrapped twice.
    pub fn new<E: Send + Sync + 'static>(effect: E) -> Self {
        if let Some(already) = (&effect as &dyn Any).downcast_ref::<AnyEffect>() {
            return already.clone();
        }
        AnyEffect {
            value: Arc::new(effect),
            type_name: type_name::<E>(),
        }
    }

    /// The name of the wrapped effect's type (for diagnostics: it is not a stable identifier).
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The effect, if it is an `E`.
    pub fn downcast_ref<E: 'static>(&self) -> Option<&E> {
        // A boxed store over a store whose effects are already `AnyEffect` (a `CachedStore`
        // over a `BoxStore`, boxed again) takes them as they are.
        if let Some(same) = (self as &dyn Any).downcast_ref::<E>() {
            return Some(same);
        }
        self.value.downcast_ref::<E>()
    }

    /// The effect by value if it is an `E` (without a clone when this is its only handle), or
    /// the name of its type if not.
    fn into_inner<E: Clone + Send + Sync + 'static>(self) -> Result<E, &'static str> {
        if let Some(same) = (&self as &dyn Any).downcast_ref::<E>() {
            return Ok(same.clone());
        }
        match self.value.downcast::<E>() {
            Ok(effect) => Ok(Arc::try_unwrap(effect).unwrap_or_else(|shared| (*shared).clone())),
            Err(_) => Err(self.type_name),
        }
    }
}

impl fmt::Debug for AnyEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyEffect({})", self.type_name)
    }
}

/// The object-safe form of `ClaimStore + StoreAdmin`: the same methods, with boxed futures
/// and erased effects. Crate-private: users see only [`BoxStore`], which is built from any
/// store by the blanket impl below, so no other implementation can exist.
trait DynStore: Send + Sync + 'static {
    fn claim<'a>(&'a self, request: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, Error>>;
    fn complete_with<'a>(
        &'a self,
        key: &'a str,
        token: &'a ClaimToken,
        completion: Completion<AnyEffect>,
    ) -> BoxFuture<'a, Result<(), Error>>;
    fn release<'a>(
        &'a self,
        key: &'a str,
        token: &'a ClaimToken,
    ) -> BoxFuture<'a, Result<(), Error>>;
    fn extend<'a>(&'a self, extension: Extension<'a>) -> BoxFuture<'a, Result<(), Error>>;
    fn capabilities(&self) -> Capabilities;
    fn effect_item(&self, effect: &AnyEffect) -> Option<u64>;
    fn claim_completed<'a>(
        &'a self,
        request: ClaimRequest<'a>,
        effects: Effects<AnyEffect>,
    ) -> BoxFuture<'a, Result<OneShotWrite, Error>>;
    fn claim_completed_packed<'a>(
        &'a self,
        writes: Vec<(ClaimRequest<'a>, Vec<&'a AnyEffect>)>,
    ) -> BoxFuture<'a, Vec<Packed>>;

    fn init(&self) -> BoxFuture<'_, Result<(), Error>>;
    fn check_ready(&self) -> BoxFuture<'_, Result<(), Error>>;
    fn prune_expired(
        &self,
        now: SystemTime,
        limit: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, Error>>;
    fn inspect<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Inspected>, Error>>;
    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, Error>>;
    fn forget<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, Error>>;

    /// The inner store's type name, for `Debug`.
    fn store_type(&self) -> &'static str;

    /// The inner store, for [`BoxStore::downcast_ref`].
    fn as_any(&self) -> &dyn Any;
}

/// `effects`, each turned back into the store `S`'s own effect type; the first of another
/// type refuses them all.
fn downcast_effects<S: ClaimStore>(
    effects: Effects<AnyEffect>,
) -> Result<Effects<S::Effect>, Error> {
    effects
        .into_vec()
        .into_iter()
        .map(|effect| effect.into_inner::<S::Effect>().map_err(mismatch::<S>))
        .collect()
}

/// `effects`, each seen as the store `S`'s own effect type, borrowed (a pack's: nothing is
/// copied here); the first of another type refuses them all.
fn downcast_refs<'a, S: ClaimStore>(
    effects: &[&'a AnyEffect],
) -> Result<Vec<&'a S::Effect>, Error> {
    effects
        .iter()
        .map(|effect| {
            effect
                .downcast_ref::<S::Effect>()
                .ok_or_else(|| mismatch::<S>(effect.type_name()))
        })
        .collect()
}

/// The error for an effect of type `given` given to a boxed `S`.
fn mismatch<S: ClaimStore>(given: &'static str) -> Error {
    Error::new(
        ErrorKind::EffectRejected,
        format!(
            "an effect of type {given} was given to a BoxStore over {store}, whose effects are \
             of type {expected}: nothing was written (the handler was written for another \
             store)",
            store = type_name::<S>(),
            expected = type_name::<S::Effect>(),
        ),
    )
}

impl<S: ClaimStore + StoreAdmin> DynStore for S {
    fn claim<'a>(&'a self, request: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, Error>> {
        Box::pin(ClaimStore::claim(self, request))
    }

    fn complete_with<'a>(
        &'a self,
        key: &'a str,
        token: &'a ClaimToken,
        completion: Completion<AnyEffect>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let Completion {
            expires_at,
            response,
            effects,
        } = completion;
        match downcast_effects::<S>(effects) {
            Ok(effects) => Box::pin(ClaimStore::complete_with(
                self,
                key,
                token,
                Completion {
                    expires_at,
                    response,
                    effects,
                },
            )),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        token: &'a ClaimToken,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(ClaimStore::release(self, key, token))
    }

    fn extend<'a>(&'a self, extension: Extension<'a>) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(ClaimStore::extend(self, extension))
    }

    fn capabilities(&self) -> Capabilities {
        ClaimStore::capabilities(self)
    }

    fn effect_item(&self, effect: &AnyEffect) -> Option<u64> {
        ClaimStore::effect_item(self, effect.downcast_ref::<S::Effect>()?)
    }

    fn claim_completed<'a>(
        &'a self,
        request: ClaimRequest<'a>,
        effects: Effects<AnyEffect>,
    ) -> BoxFuture<'a, Result<OneShotWrite, Error>> {
        match downcast_effects::<S>(effects) {
            Ok(effects) => Box::pin(ClaimStore::claim_completed(self, request, effects)),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn claim_completed_packed<'a>(
        &'a self,
        writes: Vec<(ClaimRequest<'a>, Vec<&'a AnyEffect>)>,
    ) -> BoxFuture<'a, Vec<Packed>> {
        // A write whose effects are of another type is answered here and not sent; the others
        // go to the inner store as one pack, and their answers are put back in order. The
        // effects stay the caller's: the inner store borrows them as its own type.
        let mut refused: Vec<Option<Error>> = Vec::with_capacity(writes.len());
        let mut sent = Vec::with_capacity(writes.len());
        for (request, effects) in writes {
            match downcast_refs::<S>(&effects) {
                Ok(effects) => {
                    refused.push(None);
                    sent.push((request, effects));
                }
                Err(e) => refused.push(Some(e)),
            }
        }
        let answers = ClaimStore::claim_completed_packed(self, sent);
        if refused.iter().all(Option::is_none) {
            return Box::pin(answers);
        }
        Box::pin(async move {
            let mut answers = answers.await.into_iter();
            refused
                .into_iter()
                .map(|refused| match refused {
                    Some(e) => Packed::Answered(Err(e)),
                    // A store that answered fewer writes than it was sent broke the contract;
                    // the write is sent again rather than taken as written.
                    None => answers.next().unwrap_or(Packed::Unsent),
                })
                .collect()
        })
    }

    fn init(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(StoreAdmin::init(self))
    }

    fn check_ready(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(StoreAdmin::check_ready(self))
    }

    fn prune_expired(
        &self,
        now: SystemTime,
        limit: u32,
    ) -> BoxFuture<'_, Result<Option<u64>, Error>> {
        Box::pin(StoreAdmin::prune_expired(self, now, limit))
    }

    fn inspect<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Inspected>, Error>> {
        Box::pin(StoreAdmin::inspect(self, key))
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(StoreAdmin::force_release(self, key))
    }

    fn forget<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(StoreAdmin::forget(self, key))
    }

    fn store_type(&self) -> &'static str {
        type_name::<S>()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Any store ([`ClaimStore`] and [`StoreAdmin`]) as one type, with [`AnyEffect`] as its
/// effects: what a store chosen at run time is. More below.
///
/// Cloning it clones an [`Arc`]. `Debug` names the inner store's type, nothing of its
/// configuration (a URL may carry a password).
///
/// Any store as one type, for a store chosen at run time.
///
/// [`ClaimStore`] and [`StoreAdmin`] return `impl Future`, so that the processor calls a store
/// without boxing, and so neither can be a trait object: `Box<dyn ClaimStore>` does not
/// compile. A store picked from a URL or a setting at run time still has to be one type that
/// every front door accepts ([`Processor::builder`](crate::Processor::builder), the
/// [idempotency layer](crate::idempotency), [`CachedStore`](super::CachedStore), the operator's
/// tool). tower solves the same problem for services with `BoxService` / `BoxCloneService`:
/// the trait stays generic for speed, and one boxed form stands in for any implementation.
/// [`BoxStore`] is that form for stores:
///
/// ```
/// use sqs_claim::store::{BoxStore, ClaimStore, MemoryStore};
///
/// fn pick(url: &str) -> BoxStore {
///     match url {
///         // "sqlite://..." => BoxStore::new(SqliteStore::open(...)?), and so on
///         _ => BoxStore::new(MemoryStore::new()),
///     }
/// }
///
/// let store = pick("memory://");
/// assert!(store.capabilities().atomic_one_shot, "the memory store's, forwarded");
/// ```
///
/// # How it works
///
/// A crate-private companion trait, object-safe because its methods return boxed futures
/// ([`BoxFuture`]), is implemented for every `S: ClaimStore + StoreAdmin`. [`BoxStore`] holds
/// one behind an [`Arc`] (so cloning it is cheap, as cloning a store's client is) and implements
/// [`ClaimStore`] and [`StoreAdmin`] by forwarding **every** method, the ones with defaults
/// included: [`capabilities`](ClaimStore::capabilities),
/// [`effect_item`](ClaimStore::effect_item), [`claim_completed`](ClaimStore::claim_completed)
/// and [`claim_completed_packed`](ClaimStore::claim_completed_packed). So a boxed store is the
/// store it boxes, not the trait's defaults: DynamoDB still packs one-shot writes into one
/// `TransactWriteItems`, a one-shot write stays one atomic step where the store makes it one,
/// and the processor still sizes its concurrency from the store's own capabilities. The cost
/// is one allocation and one indirect call per store call (measured against the unboxed store
/// by `cargo bench --bench processor`).
///
/// A store must implement [`StoreAdmin`] to be boxed: the boxed store is what a URL picks for
/// the operator's tool as well as for a consumer, and the tool administers it.
///
/// # Effects
///
/// Stores commit different effects (a DynamoDB `TransactWriteItem`, an SQL statement, a
/// closure for the memory store), and a handler's effects must be of its store's
/// [`Effect`](ClaimStore::Effect) type. A boxed store's effect type is [`AnyEffect`]: an effect
/// of any type, erased, which the boxed store turns back into the inner store's type before it
/// forwards a completion or a one-shot write. A handler over a boxed store wraps each of its
/// effects with [`AnyEffect::new`]:
///
/// ```
/// use sqs_claim::store::MemoryEffect;
/// use sqs_claim::store::{AnyEffect, Effects};
///
/// let effects: Effects<AnyEffect> = [MemoryEffect::new(|| {}), MemoryEffect::new(|| {})]
///     .into_iter()
///     .map(AnyEffect::new)
///     .collect();
/// assert_eq!(effects.as_slice().len(), 2);
/// ```
///
/// An effect of another type than the inner store's (a DynamoDB write given to a boxed SQLite
/// store, say) is a handler written for another store. It is refused, never a panic: the
/// completion or one-shot write it came with fails with
/// [`ErrorKind::EffectRejected`], as a refused effect does,
/// and **writes nothing**: the check runs before the inner store is called, so the processor
/// releases the claim and the message fails, to be redelivered or sent to the failure
/// destination, as for any refused effect. `EffectRejected` rather than `Config` because that
/// is the kind the contract and every caller already treat as "the effects were not
/// committed, and neither was the completion". The error names the two types, never the
/// effect's value. [`effect_item`](ClaimStore::effect_item) answers `None` for such an effect.
#[derive(Clone)]
pub struct BoxStore {
    inner: Arc<dyn DynStore>,
}

impl BoxStore {
    /// Boxes `store`. A `BoxStore` given here is returned as it is, not boxed twice.
    pub fn new<S: ClaimStore + StoreAdmin>(store: S) -> Self {
        if let Some(boxed) = (&store as &dyn Any).downcast_ref::<BoxStore>() {
            return boxed.clone();
        }
        BoxStore {
            inner: Arc::new(store),
        }
    }

    /// The store inside, if it is an `S`: for code that chose the store and needs its own
    /// methods back (a ledger's queries on the same connection, a cache's hit count).
    ///
    /// A warm cache in front of a boxed store (`CachedStore<BoxStore>`, what
    /// [`Settings::open_store`](crate::settings::Settings::open_store) gives with
    /// `SQS_CLAIM_WARM_CACHE`) is seen through: asked for the store's type, this gives the
    /// store behind the cache (asked for `CachedStore<BoxStore>`, the cache). A tiered store is
    /// not: it is two stores, and `TieredStore::get_ref` (feature `redis`) gives
    /// its durable one.
    ///
    /// ```
    /// use sqs_claim::store::{BoxStore, CachedStore, MemoryStore};
    ///
    /// let store = BoxStore::new(MemoryStore::new());
    /// assert!(store.downcast_ref::<MemoryStore>().is_some());
    /// let cached = BoxStore::new(CachedStore::new(store));
    /// assert!(cached.downcast_ref::<MemoryStore>().is_some());
    /// assert!(cached.downcast_ref::<CachedStore<BoxStore>>().is_some());
    /// ```
    pub fn downcast_ref<S: 'static>(&self) -> Option<&S> {
        let inner = self.inner.as_any();
        if let Some(store) = inner.downcast_ref::<S>() {
            return Some(store);
        }
        inner
            .downcast_ref::<super::CachedStore<BoxStore>>()
            .and_then(|cached| cached.get_ref().downcast_ref::<S>())
    }
}

impl fmt::Debug for BoxStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("BoxStore")
            .field(&format_args!("{}", self.inner.store_type()))
            .finish()
    }
}

impl ClaimStore for BoxStore {
    type Effect = AnyEffect;

    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, Error> {
        self.inner.claim(request).await
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<AnyEffect>,
    ) -> Result<(), Error> {
        self.inner.complete_with(key, token, completion).await
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        self.inner.release(key, token).await
    }

    async fn extend(&self, extension: Extension<'_>) -> Result<(), Error> {
        self.inner.extend(extension).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn effect_item(&self, effect: &AnyEffect) -> Option<u64> {
        self.inner.effect_item(effect)
    }

    async fn claim_completed_packed(
        &self,
        writes: Vec<(ClaimRequest<'_>, Vec<&AnyEffect>)>,
    ) -> Vec<Packed> {
        self.inner.claim_completed_packed(writes).await
    }

    async fn claim_completed(
        &self,
        request: ClaimRequest<'_>,
        effects: Effects<AnyEffect>,
    ) -> Result<OneShotWrite, Error> {
        self.inner.claim_completed(request, effects).await
    }
}

impl StoreAdmin for BoxStore {
    async fn init(&self) -> Result<(), Error> {
        self.inner.init().await
    }

    async fn check_ready(&self) -> Result<(), Error> {
        self.inner.check_ready().await
    }

    async fn prune_expired(&self, now: SystemTime, limit: u32) -> Result<Option<u64>, Error> {
        self.inner.prune_expired(now, limit).await
    }

    async fn inspect(&self, key: &str) -> Result<Option<Inspected>, Error> {
        self.inner.inspect(key).await
    }

    async fn force_release(&self, key: &str) -> Result<bool, Error> {
        self.inner.force_release(key).await
    }

    async fn forget(&self, key: &str) -> Result<bool, Error> {
        self.inner.forget(key).await
    }
}
