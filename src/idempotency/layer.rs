//! [`IdempotencyLayer`]: the `tower::Layer` that wraps a handler in [`IdempotencyService`].

use tower::Layer;

use super::{Idempotency, IdempotencyService};

/// Wraps a `tower::Service<LambdaEvent<T>>` in an [`IdempotencyService`] under one
/// [`Idempotency`] configuration ([`Idempotency::layer`]). Cheap to clone.
pub struct IdempotencyLayer<St, X> {
    idempotency: Idempotency<St, X>,
}

impl<St, X> IdempotencyLayer<St, X> {
    /// The layer of `idempotency`.
    pub(crate) fn new(idempotency: Idempotency<St, X>) -> Self {
        IdempotencyLayer { idempotency }
    }

    /// The configuration.
    pub fn get_ref(&self) -> &Idempotency<St, X> {
        &self.idempotency
    }
}

impl<St, X> Clone for IdempotencyLayer<St, X> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            idempotency: self.idempotency.clone(),
        }
    }
}

impl<St, X> std::fmt::Debug for IdempotencyLayer<St, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("idempotency", &self.idempotency)
            .finish()
    }
}

impl<Svc, St, X> Layer<Svc> for IdempotencyLayer<St, X> {
    type Service = IdempotencyService<Svc, St, X>;

    fn layer(&self, inner: Svc) -> Self::Service {
        IdempotencyService::new(self.idempotency.clone(), inner)
    }
}
