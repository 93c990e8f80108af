//! The one-shot handler kind: effects computed first, then one write.
//!
//! A handler whose only effects are store writes (a DynamoDB `TransactWriteItem`, an SQL
//! statement) does not need a claim held while it runs: it can compute its effects first, and
//! the store can then write the claim already completed together with the effects, in one
//! atomic step ([`ClaimStore::claim_completed`](crate::ClaimStore::claim_completed)): one
//! request and one round trip per fresh message instead of two, and one per duplicate.
//!
//! That is safe only if computing the effects changes nothing outside the store, because it
//! runs before the key is claimed, and runs again for a duplicate's redelivery. So the handler
//! is a plain function from the message to its effects: it cannot `.await`, so it cannot call
//! a payment provider, send a message or write anywhere itself. (It could still block on I/O;
//! don't.)

use std::convert::Infallible;
use std::fmt;
use std::future::{Ready, ready};
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use crate::BoxError;
use crate::message::Message;
use crate::store::Effects;

/// A one-shot handler: a function from the message to the effects its completion commits.
/// Build a processor on it with [`Processor::one_shot`](crate::Processor::one_shot).
pub struct OneShot<F, E> {
    // Shared: the processor clones its handler for every message.
    f: Arc<F>,
    _effect: PhantomData<fn() -> E>,
}

impl<F, E> Clone for OneShot<F, E> {
    fn clone(&self) -> Self {
        OneShot {
            f: Arc::clone(&self.f),
            _effect: PhantomData,
        }
    }
}

impl<F, E> fmt::Debug for OneShot<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OneShot").finish_non_exhaustive()
    }
}

impl<F, E> OneShot<F, E>
where
    F: Fn(&Message) -> Result<Effects<E>, BoxError>,
{
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        OneShot {
            f: Arc::new(f),
            _effect: PhantomData,
        }
    }
}

/// The processor calls it like any handler (so panics, the handler timeout and the budget
/// apply), but before the claim: the call only computes.
impl<F, E> Service<Message> for OneShot<F, E>
where
    F: Fn(&Message) -> Result<Effects<E>, BoxError>,
{
    type Response = Effects<E>;
    type Error = BoxError;
    type Future = Ready<Result<Effects<E>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok::<(), Infallible>(()).map_err(|never| match never {}))
    }

    fn call(&mut self, msg: Message) -> Self::Future {
        ready((self.f)(&msg))
    }
}
