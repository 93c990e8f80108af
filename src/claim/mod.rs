//! The claim both front doors hang from: its policies, and the steps of one attempt at a key.
//!
//! The SQS processor ([`Processor`](crate::Processor), one message of a batch) and the
//! idempotency layer ([`Idempotency`](crate::idempotency::Idempotency), one event of any kind)
//! are two front doors to one claim. Whatever they share is here, once; what each adds is its
//! own (the processor: planning a batch, scheduling, FIFO lanes, outcomes; the layer: key
//! extractors, stored responses, answers).
//!
//! ```text
//!                  ┌──────────────── claim ─────────────────┐
//! processor ─┐     │ key (KeyFormat, namespace) ─► claim ─┬─ won ─► handler (guarded) ─► complete (retried) or release
//!            ├───► │                                      ├─ completed ─► judged (PayloadCheck): duplicate / payload differs
//! layer ─────┘     │                                      └─ held elsewhere
//!                  └────────────────────────────────────────┘
//! the processor maps what happened to an Outcome, the layer to a response or an error
//! ```
//!
//! | file | what it holds |
//! |------|---------------|
//! | `lease.rs` | [`Lease`]: how long a claim is held |
//! | `policy.rs` | [`PayloadCheck`], [`MissingKey`], and the namespace rule (below) |
//! | `format.rs` | [`KeyFormat`], [`NativeFormat`]: how a key becomes the stored key, a payload its fingerprint (`PowertoolsFormat`, feature `powertools`, is another) |
//! | `attempt.rs` | the steps of one attempt: the claim request, the claim and the judgement of a stored record, the guarded handler call (panic, timeout, budget), the completion retried under the one [`RetryPolicy`](crate::RetryPolicy), the release; every write sent again while it is cancelled on contention |
//! | `locks.rs` | item locks: writes of one process on one item take turns, so a batch never cancels its own transactions on a hot item |
//! | `liveness.rs` | whether the store still answers, as a batch sees it: a store gone dark (a call unanswered past its timeout, nothing answered since it was sent) told from a slow one |
//!
//! # The namespace rule
//!
//! Every stored key is namespaced (`namespace#key` under [`NativeFormat`]) so two consumers of
//! one table never see each other's records. Both front doors take the namespace from:
//!
//! 1. the builder's `namespace(..)`
//!    ([`ProcessorBuilder::namespace`](crate::ProcessorBuilder::namespace),
//!    [`IdempotencyBuilder::namespace`](crate::idempotency::IdempotencyBuilder::namespace));
//! 2. else the function's name: the invocation context's, else the `AWS_LAMBDA_FUNCTION_NAME`
//!    environment variable (read when the processor or layer is built), so a local run with the
//!    variable set uses the deployed function's keys;
//! 3. else `sqs-claim`.
//!
//! Set it explicitly in production: renaming a function must not reset deduplication.

mod attempt;
mod format;
mod lease;
mod liveness;
mod locks;
mod policy;

pub use format::{KeyFormat, NativeFormat};
pub use lease::Lease;
#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub use policy::PayloadVerdict;
#[cfg(not(feature = "admin"))]
pub(crate) use policy::PayloadVerdict;
pub use policy::{MissingKey, PayloadCheck};

pub(crate) use attempt::{Attempt, Claimed, HandlerEnd, OneShotSink, Recorded, Terms, guarded};
#[cfg(feature = "idempotency")]
pub(crate) use format::text;
pub(crate) use liveness::Liveness;
pub(crate) use locks::ItemLocks;
pub(crate) use policy::{Namespace, differs};
