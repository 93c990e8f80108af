//! The packer: one-shot writes of one batch sent together, several per request, where the
//! store packs them ([`Capabilities::max_pack_actions`](crate::store::Capabilities::max_pack_actions):
//! DynamoDB's `TransactWriteItems`, 100 actions).
//!
//! Each message of a one-shot batch computes its effects, takes its item locks (so no two
//! writes in the queue share an item), and hands its write to the packer instead of sending
//! it; the packer sends whatever is waiting, up to the store's action limit per request, as
//! soon as it is polled, so a wave of messages becomes a few requests and a lone message is not
//! held back. Each write gets its own answer ([`ClaimStore::claim_completed_packed`]); a write
//! the store did not send because another write of its pack was refused goes again at once,
//! in the next pack. Contention comes back to the message as its own answer, and the claim
//! core retries it with backoff as it would a single write.
//!
//! The packer lives for one batch: [`Packer::run`] runs beside the batch's messages and is
//! dropped with them. A message cut off by the time budget while its write waits takes the
//! write out of the queue with it (a waiting write whose message is gone is never sent).
//!
//! Only the processor packs (the idempotency layer answers one event at a time), so the packer
//! is the processor's; the claim's attempt sends its write through it as a [`OneShotSink`],
//! the one thing the claim knows of it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::{Notify, oneshot};

use crate::claim::OneShotSink;
use crate::store::{ClaimRequest, ClaimStore, Effects, OneShotWrite, Packed};
use crate::{Error, ErrorKind};

/// A claim request that owns its key and fingerprint, so it can wait in the queue.
#[derive(Debug)]
struct Request {
    key: String,
    now: SystemTime,
    lease_until: SystemTime,
    expires_at: SystemTime,
    fingerprint: Option<String>,
}

impl Request {
    fn borrowed(&self) -> ClaimRequest<'_> {
        ClaimRequest {
            key: &self.key,
            now: self.now,
            lease_until: self.lease_until,
            expires_at: self.expires_at,
            fingerprint: self.fingerprint.as_deref(),
        }
    }
}

/// The attempt's side: a write goes into the queue, its answer comes back from its pack.
impl<S: ClaimStore> OneShotSink<S::Effect> for Packer<'_, S> {
    fn write<'f>(
        &'f self,
        request: ClaimRequest<'f>,
        effects: Arc<Effects<S::Effect>>,
    ) -> BoxFuture<'f, Result<OneShotWrite, Error>> {
        Box::pin(self.queued(request, effects))
    }
}

/// A write waiting for its pack. Its effects are the attempt's own (shared, not copied): the
/// store borrows them for each pack they go in.
struct Waiting<E> {
    request: Request,
    effects: Arc<Effects<E>>,
    /// The write's answer, as its pack gave it: a duplicate says who answered it (the store
    /// or a cache in front of it), and the write's attempt, which watches whether the store
    /// still answers, reads it there.
    answer: oneshot::Sender<Result<OneShotWrite, Error>>,
}

/// The one-shot writes of one batch, packed. See the [module documentation](self).
pub(crate) struct Packer<'s, S: ClaimStore> {
    store: &'s S,
    max_actions: usize,
    queue: Mutex<VecDeque<Waiting<S::Effect>>>,
    arrived: Notify,
}

impl<S: ClaimStore> std::fmt::Debug for Packer<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packer")
            .field("max_actions", &self.max_actions)
            .finish_non_exhaustive()
    }
}

impl<'s, S: ClaimStore> Packer<'s, S> {
    /// A packer for `store`, or `None` when the store does not pack.
    pub(crate) fn for_store(store: &'s S) -> Option<Self> {
        let max_actions = store.capabilities().max_pack_actions;
        (max_actions > 1).then(|| Packer {
            store,
            max_actions,
            queue: Mutex::new(VecDeque::new()),
            arrived: Notify::new(),
        })
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiting<S::Effect>>> {
        // Every critical section leaves the queue consistent: a poisoned lock is still usable.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands one write to the packer and waits for its answer, as
    /// [`ClaimStore::claim_completed`] would give it.
    async fn queued(
        &self,
        request: ClaimRequest<'_>,
        effects: Arc<Effects<S::Effect>>,
    ) -> Result<OneShotWrite, Error> {
        let (answer, answered) = oneshot::channel();
        self.queue().push_back(Waiting {
            request: Request {
                key: request.key.to_owned(),
                now: request.now,
                lease_until: request.lease_until,
                expires_at: request.expires_at,
                fingerprint: request.fingerprint.map(str::to_owned),
            },
            effects,
            answer,
        });
        self.arrived.notify_one();
        answered.await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::StoreUnavailable,
                "the batch ended before this one-shot write was sent; nothing was written",
            ))
        })
    }

    /// The next pack: writes from the front of the queue whose messages still wait, up to the
    /// action limit (a write larger than the limit goes alone: the store refuses it itself).
    fn take(&self) -> Vec<Waiting<S::Effect>> {
        let mut queue = self.queue();
        let mut pack = Vec::new();
        let mut actions = 0;
        while let Some(next) = queue.front() {
            if next.answer.is_closed() {
                queue.pop_front();
                continue;
            }
            let needs = next.effects.len() + 1;
            if !pack.is_empty() && actions + needs > self.max_actions {
                break;
            }
            actions += needs;
            pack.extend(queue.pop_front());
        }
        pack
    }

    /// Sends packs while writes wait; never returns (it is dropped with its batch).
    pub(crate) async fn run(&self) {
        let mut in_flight = FuturesUnordered::new();
        loop {
            // Registered before the queue is read, so a write that arrives meanwhile wakes it.
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            loop {
                let pack = self.take();
                if pack.is_empty() {
                    break;
                }
                in_flight.push(self.send(pack));
            }
            if in_flight.is_empty() {
                arrived.await;
                continue;
            }
            tokio::select! {
                () = &mut arrived => {}
                Some(unsent) = in_flight.next() => {
                    let mut queue = self.queue();
                    for waiting in unsent.into_iter().rev() {
                        queue.push_front(waiting);
                    }
                }
            }
        }
    }

    /// Sends one pack, answers its writes, and gives back those to send again.
    async fn send(&self, pack: Vec<Waiting<S::Effect>>) -> Vec<Waiting<S::Effect>> {
        let writes = pack
            .iter()
            .map(|w| (w.request.borrowed(), w.effects.as_slice().iter().collect()))
            .collect();
        let answers = self.store.claim_completed_packed(writes).await;
        let mut unsent = Vec::new();
        let mut answers = answers.into_iter();
        for waiting in pack {
            match answers.next() {
                Some(Packed::Answered(answer)) => {
                    // A message gone meanwhile (cut off) has nobody to tell.
                    let _ = waiting.answer.send(answer);
                }
                Some(Packed::Unsent) => unsent.push(waiting),
                None => {
                    let _ = waiting.answer.send(Err(Error::new(
                        ErrorKind::StoreUnavailable,
                        "the store answered fewer writes than the pack held; this one's outcome \
                         is unknown",
                    )));
                }
            }
        }
        unsent
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::future::{Either, join, select};

    use super::*;
    use crate::store::{Capabilities, Claim, ClaimToken, Completion, MemoryStore};

    /// A memory store that says it packs, and counts its packs.
    struct Packing {
        inner: MemoryStore,
        packs: AtomicUsize,
    }

    impl ClaimStore for Packing {
        type Effect = <MemoryStore as ClaimStore>::Effect;

        fn capabilities(&self) -> Capabilities {
            Capabilities {
                max_pack_actions: 100,
                // It does not pass `extend` on.
                extends_leases: false,
                ..self.inner.capabilities()
            }
        }
        async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
            self.inner.claim(req).await
        }
        async fn complete_with(
            &self,
            key: &str,
            token: &ClaimToken,
            completion: Completion<Self::Effect>,
        ) -> Result<(), Error> {
            self.inner.complete_with(key, token, completion).await
        }
        async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
            self.inner.release(key, token).await
        }
        async fn claim_completed_packed(
            &self,
            writes: Vec<(ClaimRequest<'_>, Vec<&Self::Effect>)>,
        ) -> Vec<Packed> {
            self.packs.fetch_add(1, Ordering::SeqCst);
            self.inner.claim_completed_packed(writes).await
        }
    }

    /// What the claim's attempt sees of the packer: a sink whose writes wait, go in one pack,
    /// and are answered each on its own.
    #[tokio::test]
    async fn writes_through_the_sink_go_in_one_pack_and_are_answered_each() {
        let store = Packing {
            inner: MemoryStore::new(),
            packs: AtomicUsize::new(0),
        };
        let packer = Packer::for_store(&store).expect("the store packs");
        let sink: &dyn OneShotSink<_> = &packer;
        let now = SystemTime::now();
        let request = |key| ClaimRequest {
            key,
            now,
            lease_until: now + Duration::from_secs(60),
            expires_at: now + Duration::from_secs(3600),
            fingerprint: None,
        };
        let writes = join(
            sink.write(request("a"), Arc::new(Effects::none())),
            sink.write(request("b"), Arc::new(Effects::none())),
        );
        let run = packer.run();
        tokio::pin!(writes, run);
        let (a, b) = match select(writes, run).await {
            Either::Left((answers, _)) => answers,
            Either::Right(((), _)) => panic!("the packer never ends by itself"),
        };
        assert!(matches!(a, Ok(OneShotWrite::Committed)), "{a:?}");
        assert!(matches!(b, Ok(OneShotWrite::Committed)), "{b:?}");
        assert_eq!(store.packs.load(Ordering::SeqCst), 1);
        let again = sink.write(request("a"), Arc::new(Effects::none()));
        let run = packer.run();
        tokio::pin!(again, run);
        let Either::Left((again, _)) = select(again, run).await else {
            panic!("the packer never ends by itself");
        };
        assert!(
            matches!(again, Ok(OneShotWrite::Completed { .. })),
            "{again:?}"
        );
    }
}
