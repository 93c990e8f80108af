//! The bound every message handler meets, named once (as hyper names its `HttpService`).

use tower::Service;

use crate::store::Effects;
use crate::{BoxError, Message};

/// A message handler for a store whose effects are `E`: a [`tower::Service`] of [`Message`]
/// that is cloned for each message and shared across threads, whose future is `Send`, whose
/// response becomes the store's [`Effects`] (`()` for none) and whose error is any error.
///
/// Every service that meets the bound is a `Handler`: write a `tower::Service<Message>` (or a
/// `tower::service_fn`) and pass it to [`Processor::new`](super::Processor::new); name
/// `Handler` in your own generic code instead of the five bounds it stands for:
///
/// ```
/// use sqs_claim::processor::Handler;
/// use sqs_claim::store::ClaimStore;
/// use sqs_claim::Processor;
///
/// fn with_my_defaults<S: ClaimStore, H: Handler<S::Effect>>(store: S, handler: H) -> Processor<S, H> {
///     Processor::builder(store, handler).concurrency(16).build()
/// }
/// # let _ = with_my_defaults(
/// #     sqs_claim::MemoryStore::new(),
/// #     tower::service_fn(|_m: sqs_claim::Message| async { Ok::<(), sqs_claim::BoxError>(()) }),
/// # );
/// ```
pub trait Handler<E>:
    Service<Message, Future: Send + 'static, Response: Into<Effects<E>>, Error: Into<BoxError>>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<E, H> Handler<E> for H where
    H: Service<Message, Future: Send + 'static, Response: Into<Effects<E>>, Error: Into<BoxError>>
        + Clone
        + Send
        + Sync
        + 'static
{
}
