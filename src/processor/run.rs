//! Running a plan: the standard and the FIFO scheduler side by side, and every step of one
//! message (claim, handler, complete or release) raced against the invocation's time budget.
//!
//! * **Standard queues**: each key's first copy (the leader) runs, at most `concurrency` at once;
//!   the outcomes of its later copies in the batch follow from the leader's as soon as it has
//!   one. Nothing waits on anything else.
//! * **FIFO**: each item becomes one future, built in batch order and shared
//!   ([`futures::future::Shared`]), so whatever depends on an item awaits the item itself: an
//!   item first awaits the one before it in its lane, and does not start if that one stopped the
//!   lane; a later copy of a key awaits its leader (lower index, so it already exists). A copy in
//!   another group can drive its leader without running it out of order: the leader still waits
//!   for its own lane. A FIFO batch (at most 10 messages) polls all of them at once; a stream's
//!   batch (`crate::stream`, up to 10,000 records) runs the same way, each item told by the one
//!   before it whether its lane goes on (a channel, so polling never descends the lane).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared, join_all};
use futures::stream::{self, StreamExt};
use tokio::sync::oneshot;
use tower::ServiceExt;
use tracing::{Instrument, error, warn};

use super::config::{FifoMode, StoreUnavailable};
use super::limit::Limit;
use super::pack::Packer;
use super::plan::{Action, Meta, Plan, Work};
use super::{Handler, Inner};
use crate::claim::{
    Attempt, Claimed, HandlerEnd, Liveness, PayloadCheck, PayloadVerdict, Recorded, guarded,
};
use crate::deadline::Budget;
use crate::error::Chain;
use crate::message::Message;
use crate::metrics::BatchStats;
use crate::outcome::{Failure, FailureKind, ItemReport, NotStarted, Outcome, Step};
use crate::store::{ClaimStore, ClaimToken, Effects};
use crate::{Error, ErrorKind};

/// A FIFO item's result, as the later copies of its key see it (the next item of its lane
/// is told whether the lane goes on by a channel).
#[derive(Debug, Clone)]
struct Done {
    outcome: Outcome,
    /// Whether its completion committed.
    committed: bool,
}

/// What one message's run tells beside its outcome: the writes cancelled on contention (for
/// the adaptive limit) and whether its completion committed.
#[derive(Default)]
struct ItemTally {
    conflicts: AtomicU32,
    committed: AtomicBool,
}

/// One message's outcome, and whether its completion committed (what the S3 cleanup after
/// the batch waits for: a message reported done need not have its completion recorded).
#[derive(Debug)]
pub(super) struct Ran {
    pub(super) report: ItemReport,
    /// Read by the S3 cleanup only (feature `s3`).
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    pub(super) committed: bool,
}

type Item<'a> = Shared<BoxFuture<'a, Done>>;

/// How a handler call ended, for a message.
enum HandlerCall<E> {
    /// It returned: its effects, or why it failed (an error or a panic).
    Returned(Result<Effects<E>, Failure>),
    /// It ran longer than `handler_timeout` and was cancelled.
    TimedOut(Duration),
    /// The time budget ran out while it ran; it was cancelled.
    OutOfTime,
}

impl<S, H> Inner<S, H>
where
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    /// Runs every item of `plan` and reports them in batch order, counting the store calls
    /// in `stats`.
    pub(super) async fn run(&self, plan: Plan, budget: &Budget, stats: &BatchStats) -> Vec<Ran> {
        let Plan {
            metas,
            actions,
            lanes,
        } = plan;
        // Whether the store still answers, as this batch sees it (`claim/liveness.rs`).
        let liveness = Liveness::default();
        let outcomes = match lanes {
            None => {
                self.run_standard(&metas, actions, budget, stats, &liveness)
                    .await
            }
            Some(lanes) => {
                self.run_fifo(&metas, actions, &lanes, budget, stats, &liveness)
                    .await
            }
        };
        metas
            .into_iter()
            .zip(outcomes)
            .map(|(meta, (outcome, committed))| {
                log_outcome(&meta, &outcome);
                Ran {
                    report: ItemReport {
                        message_id: meta.id,
                        key: meta.key,
                        outcome,
                    },
                    committed,
                }
            })
            .collect()
    }

    /// Standard queue: each key's first copy runs, at most `concurrency` at once, and the
    /// outcomes of its later copies follow from its own as soon as it has one. Nothing waits
    /// for anything else, so nothing is shared.
    async fn run_standard(
        &self,
        metas: &[Meta],
        actions: Vec<Action>,
        budget: &Budget,
        stats: &BatchStats,
        liveness: &Liveness,
    ) -> Vec<(Outcome, bool)> {
        struct Copy {
            index: usize,
            leader_name: String,
            payload_differs: bool,
        }
        struct Group {
            index: usize,
            work: Work,
            copies: Vec<Copy>,
        }
        let n = actions.len();
        let mut groups: Vec<Group> = Vec::with_capacity(n);
        // The group of every item seen so far; a copy's leader always comes before it.
        let mut group_of: Vec<usize> = Vec::with_capacity(n);
        for (index, action) in actions.into_iter().enumerate() {
            match action {
                Action::Do(work) => {
                    group_of.push(groups.len());
                    groups.push(Group {
                        index,
                        work,
                        copies: Vec::new(),
                    });
                }
                Action::Follow {
                    leader,
                    leader_name,
                    payload_differs,
                } => {
                    let g = group_of[leader];
                    group_of.push(g);
                    groups[g].copies.push(Copy {
                        index,
                        leader_name,
                        payload_differs,
                    });
                }
            }
        }
        let check = self.config.terms.payload_check;
        // One-shot writes with effects go several per request where the store packs them.
        let packer = if self.config.one_shot {
            Packer::for_store(&self.store)
        } else {
            None
        };
        let packer = packer.as_ref();
        // (leader index, its outcome and whether it committed, its copies' indexes and
        // outcomes: a copy writes nothing)
        type Led = (usize, (Outcome, bool), Vec<(usize, (Outcome, bool))>);
        let batch = stream::iter(groups)
            .map(|group| async move {
                // A place under the adaptive limit; `buffer_unordered` below only bounds how
                // many messages' futures exist at once. A message for the store does not wait for
                // one behind calls to a store gone dark: it is reported at once (`execute`).
                let permit = match group.work {
                    Work::Claim { .. } => liveness.unless_dark(self.limit().acquire()).await,
                    _ => Some(self.limit().acquire().await),
                };
                let tally = ItemTally::default();
                let outcome = self
                    .execute(
                        group.work,
                        &metas[group.index].id,
                        Ctx {
                            budget,
                            stats,
                            liveness,
                        },
                        &tally,
                        packer,
                    )
                    .await;
                if let Some(permit) = permit {
                    let conflicts = tally.conflicts.load(Ordering::Relaxed);
                    permit.finish(met_pressure(&outcome, conflicts));
                }
                // Empty (no allocation) for the usual key without copies.
                let copies = group
                    .copies
                    .into_iter()
                    .map(|copy| {
                        let id = &metas[copy.index].id;
                        let followed = follow(
                            outcome.clone(),
                            &copy.leader_name,
                            copy.payload_differs,
                            check,
                            id,
                        );
                        (copy.index, (followed, false))
                    })
                    .collect();
                let committed = tally.committed.load(Ordering::Relaxed);
                (group.index, (outcome, committed), copies)
            })
            // Unordered: a slow message holds its own place in the window, not the places of
            // those behind it (`buffered` starts nothing new while the oldest runs, however
            // many after it finished). The outcomes are put back in batch order below.
            .buffer_unordered(self.concurrency())
            .collect::<Vec<Led>>();
        let ran = beside_packer(packer, batch).await;
        let mut indexed: Vec<(usize, (Outcome, bool))> = Vec::with_capacity(n);
        for (index, outcome, copies) in ran {
            indexed.push((index, outcome));
            indexed.extend(copies);
        }
        // Leaders come out in the order they finished, copies beside their leader: back in
        // batch order.
        indexed.sort_unstable_by_key(|(index, _)| *index);
        indexed.into_iter().map(|(_, outcome)| outcome).collect()
    }

    /// FIFO: every item is a shared future that first awaits the item before it in its lane
    /// (and does not start if that one stopped the lane); a copy of a key awaits its leader,
    /// which still waits for its own lane. All polled at once (an SQS FIFO batch holds at most
    /// 10 messages; a stream's, one lane per shard, up to 10,000).
    ///
    /// One-shot writes go through the packer here too: within a lane an item starts only
    /// once the one before it has its answer, so at most one write per lane waits at a time,
    /// and the heads of different lanes (groups, shards, partitions) share a pack. A lane's
    /// order is untouched: its next item learns whether to start from its own write's answer.
    async fn run_fifo(
        &self,
        metas: &[Meta],
        actions: Vec<Action>,
        lanes: &[Vec<usize>],
        budget: &Budget,
        stats: &BatchStats,
        liveness: &Liveness,
    ) -> Vec<(Outcome, bool)> {
        // Each item tells the next one in its lane whether the lane goes on, by a channel,
        // not by the next one awaiting it: awaiting each other, a lane of thousands of
        // records (a stream's batch) polled itself as deep as it was long (a stack overflow
        // at 2,000) and in quadratic time.
        let mut tell_next: Vec<Option<oneshot::Sender<Option<NotStarted>>>> =
            (0..actions.len()).map(|_| None).collect();
        let mut wait_previous: Vec<Option<oneshot::Receiver<Option<NotStarted>>>> =
            (0..actions.len()).map(|_| None).collect();
        for lane in lanes {
            for pair in lane.windows(2) {
                let (tx, rx) = oneshot::channel();
                tell_next[pair[0]] = Some(tx);
                wait_previous[pair[1]] = Some(rx);
            }
        }
        let skip_reason = match self.config.fifo {
            FifoMode::WholeBatch => NotStarted::EarlierFailureInBatch,
            FifoMode::PerGroup => NotStarted::EarlierFailureInGroup,
        };
        let packer = if self.config.one_shot {
            Packer::for_store(&self.store)
        } else {
            None
        };
        let packer = packer.as_ref();

        let mut items: Vec<Item<'_>> = Vec::with_capacity(actions.len());
        for (i, action) in actions.into_iter().enumerate() {
            let before = wait_previous[i].take();
            let next = tell_next[i].take();
            let id = metas[i].id.as_str();
            let outcome: BoxFuture<'_, (Outcome, bool)> = match action {
                // FIFO batches are small (at most 10) and run in lanes: no adaptive limit.
                Action::Do(work) => async move {
                    let ctx = Ctx {
                        budget,
                        stats,
                        liveness,
                    };
                    let tally = ItemTally::default();
                    let outcome = self.execute(work, id, ctx, &tally, packer).await;
                    (outcome, tally.committed.load(Ordering::Relaxed))
                }
                .boxed(),
                Action::Follow {
                    leader,
                    leader_name,
                    payload_differs,
                } => {
                    let leader = items[leader].clone();
                    let check = self.config.terms.payload_check;
                    async move {
                        let followed = follow(
                            leader.await.outcome,
                            &leader_name,
                            payload_differs,
                            check,
                            id,
                        );
                        (followed, false)
                    }
                    .boxed()
                }
            };
            let item = async move {
                // A sender dropped unsent cannot happen (every item sends before it ends);
                // were it to, the lane stops rather than run out of order.
                if let Some(before) = before
                    && let Some(reason) = before.await.unwrap_or(Some(skip_reason))
                {
                    if let Some(next) = next {
                        let _ = next.send(Some(reason));
                    }
                    return Done {
                        outcome: Outcome::NotStarted(reason),
                        committed: false,
                    };
                }
                let (outcome, committed) = outcome.await;
                let stops_lane = (!outcome.is_success()).then_some(match outcome {
                    // Past the hard stop or the cut-off the rest of the lane would not start
                    // either: say so, rather than blame an "earlier failure".
                    Outcome::NotStarted(NotStarted::Deadline) | Outcome::CutOff(_) => {
                        NotStarted::Deadline
                    }
                    _ => skip_reason,
                });
                if let Some(next) = next {
                    let _ = next.send(stops_lane);
                }
                Done { outcome, committed }
            };
            items.push(item.boxed().shared());
        }
        let batch = join_all(items);
        let done = beside_packer(packer, batch).await;
        done.into_iter()
            .map(|done| (done.outcome, done.committed))
            .collect()
    }

    /// The adaptive in-flight limit (see `limit.rs`).
    fn limit(&self) -> &Limit {
        self.limit.get_or_init(|| Limit::new(self.concurrency()))
    }

    /// The adaptive in-flight limit now.
    pub(super) fn in_flight_limit(&self) -> usize {
        self.limit().current()
    }

    /// See [`Processor::concurrency`](super::Processor::concurrency).
    pub(super) fn concurrency(&self) -> usize {
        self.config
            .concurrency
            .unwrap_or_else(|| self.store.capabilities().max_in_flight)
            .max(1)
    }

    /// One item's own work, inside the message's span: the handler's own `tracing` events and
    /// the store steps' log lines carry the message's id, key, group and receive count.
    ///
    /// A plain function returning the instrumented future, not an `async fn`: that would keep a
    /// second copy of `work` beside the future that owns it, in every message's future.
    ///
    /// `tally` counts the message's writes cancelled on contention, for the limit, and says
    /// whether its completion committed.
    fn execute<'a>(
        &'a self,
        work: Work,
        id: &'a str,
        ctx: Ctx<'a>,
        tally: &'a ItemTally,
        packer: Option<&'a Packer<'a, S>>,
    ) -> tracing::instrument::Instrumented<impl Future<Output = Outcome> + Send + 'a> {
        let span = match &work {
            Work::Claim { message, .. } | Work::Unclaimed { message } => message_span(message),
            Work::Fail(_) => tracing::Span::none(),
        };
        self.execute_work(work, id, ctx, tally, packer)
            .instrument(span)
    }

    async fn execute_work(
        &self,
        work: Work,
        id: &str,
        ctx: Ctx<'_>,
        tally: &ItemTally,
        packer: Option<&Packer<'_, S>>,
    ) -> Outcome {
        let Ctx {
            budget,
            stats,
            liveness,
        } = ctx;
        match work {
            Work::Fail(failure) => Outcome::Failed(failure),
            Work::Unclaimed { message } => {
                if !budget.may_start() {
                    return Outcome::NotStarted(NotStarted::Deadline);
                }
                self.run_unclaimed(
                    message,
                    budget,
                    FailureKind::MissingKey,
                    "the message has no idempotency key and ran without deduplication \
                     (MissingKey::ProcessWithoutDedup)",
                )
                .await
            }
            Work::Claim {
                message,
                key,
                fingerprint,
            } => {
                if let Some(why) = liveness.dark() {
                    return self.store_dark(message, budget, why).await;
                }
                let attempt = Attempt::new(
                    &self.store,
                    &self.config.terms,
                    budget,
                    &key,
                    fingerprint.as_deref(),
                )
                .for_message(id)
                .with_stats(stats)
                .with_liveness(liveness)
                .with_locks(&self.locks)
                .with_packer(packer)
                .waiting_out_leases();
                let outcome = self.run_claimed(message, id, &attempt, budget).await;
                tally
                    .conflicts
                    .store(attempt.conflicts(), Ordering::Relaxed);
                tally
                    .committed
                    .store(attempt.committed(), Ordering::Relaxed);
                outcome
            }
        }
    }

    /// A message for a store the batch has seen go dark (`claim/liveness.rs`): reported for
    /// retry at once, `store_unavailable` with `why` (which names the store), nothing sent to
    /// the store and nothing run, instead of waiting out its timeout. Under
    /// [`StoreUnavailable::FailOpen`] it runs unclaimed at once, as a claim that failed would.
    async fn store_dark(&self, message: Box<Message>, budget: &Budget, why: String) -> Outcome {
        if !budget.may_start() {
            return Outcome::NotStarted(NotStarted::Deadline);
        }
        if self.config.on_store_unavailable == StoreUnavailable::FailOpen {
            return Box::pin(self.run_unclaimed(
                message,
                budget,
                FailureKind::StoreUnavailable,
                "the store has gone dark and the message ran without a claim \
                 (StoreUnavailable::FailOpen)",
            ))
            .await;
        }
        Outcome::Failed(Failure::new(FailureKind::StoreUnavailable, why))
    }

    /// claim → handler → complete or release, each step under the budget.
    async fn run_claimed(
        &self,
        message: Box<Message>,
        id: &str,
        attempt: &Attempt<'_, S>,
        budget: &Budget,
    ) -> Outcome {
        if !budget.may_start() {
            return Outcome::NotStarted(NotStarted::Deadline);
        }
        let config = &self.config;
        let key = attempt.key();
        if config.one_shot {
            return self.run_one_shot(message, id, attempt, budget).await;
        }
        let token = match attempt.claim().await {
            Claimed::Won(token) => token,
            Claimed::CutOff => return Outcome::CutOff(Step::Claim),
            Claimed::Completed { payload, .. } => {
                return payload_outcome(payload, id, "a completed record");
            }
            Claimed::HeldElsewhere { lease_until } => {
                return Outcome::HeldElsewhere { lease_until };
            }
            Claimed::Failed(e)
                if e.kind() == ErrorKind::StoreUnavailable
                    && config.on_store_unavailable == StoreUnavailable::FailOpen =>
            {
                warn!(message_id = %id, key, error = %format_args!("{e:#}"), "store unavailable: fail-open, running without a claim");
                return Box::pin(self.run_unclaimed(
                    message,
                    budget,
                    FailureKind::from(e.kind()),
                    "the store was unavailable and the message ran without a claim \
                     (StoreUnavailable::FailOpen)",
                ))
                .await;
            }
            Claimed::Failed(e) => return Outcome::Failed(claim_failed(&e)),
        };

        if let Some(failure) = message.unfetched() {
            // Its payload offloaded to S3 could not be fetched, and it is not a duplicate: it
            // fails with why, and its claim goes.
            let failure = failure.clone();
            Box::pin(attempt.release(&token)).await;
            return Outcome::Failed(failure);
        }
        // The claim is kept while the handler runs (its lease extended); a claim that could
        // not be kept stops the handler, and nothing of it is committed. It is still kept
        // while the completion is sent (contention and retries can outlast what is left of the
        // lease), which is never stopped: it is fenced by the token.
        let token = &token;
        let kept = attempt
            .holding_then(
                token,
                self.call_handler(message, budget),
                |call| async move {
                    match call {
                        HandlerCall::Returned(Ok(effects)) => {
                            Box::pin(self.complete(id, key, attempt, token, effects)).await
                        }
                        HandlerCall::Returned(Err(failure)) => {
                            Box::pin(attempt.release(token)).await;
                            Outcome::Failed(failure)
                        }
                        // The call may have reached an external service: the claim is kept
                        // (not released) until its lease lapses, so a redelivery cannot race
                        // a call still in flight.
                        HandlerCall::TimedOut(after) => {
                            Outcome::Failed(handler_timed_out(after, true))
                        }
                        HandlerCall::OutOfTime => Outcome::CutOff(Step::Handler),
                    }
                },
            )
            .await;
        kept.unwrap_or_else(|lost| {
            warn!(message_id = %id, key, error = %format_args!("{lost:#}"), "claim lost while the handler ran: handler stopped, its result discarded");
            Outcome::Failed(claim_not_kept(&lost))
        })
    }

    /// One-shot: the handler computes the effects (it cannot await: see
    /// [`OneShot`](super::OneShot)), then one atomic write claims the key as completed and
    /// commits them. Nothing is ever held: a failure writes nothing, so there is nothing to
    /// release, and a store outage cannot fail open (effects never commit without a record).
    /// The one exception is a message whose S3 payload could not be fetched: its key is claimed
    /// alone, to tell a duplicate, and released at once ([`unfetched_one_shot`]).
    async fn run_one_shot(
        &self,
        message: Box<Message>,
        id: &str,
        attempt: &Attempt<'_, S>,
        budget: &Budget,
    ) -> Outcome {
        if let Some(failure) = message.unfetched() {
            // The effects function would read the pointer: it never runs. The key comes from
            // the record (a key read from the payload failed the message at plan), so this may
            // be a redelivery of a message done before, whose object was deleted after its
            // completion: a claim finds out (a one-shot write cannot: it needs effects).
            let failure = failure.clone();
            drop(message);
            return Box::pin(unfetched_one_shot(failure, id, attempt)).await;
        }
        let effects = match self.call_handler(message, budget).await {
            HandlerCall::Returned(Ok(effects)) => effects,
            HandlerCall::Returned(Err(failure)) => return Outcome::Failed(failure),
            HandlerCall::TimedOut(after) => {
                return Outcome::Failed(handler_timed_out(after, false));
            }
            HandlerCall::OutOfTime => return Outcome::CutOff(Step::Handler),
        };
        match attempt.claim_completed(effects).await {
            Claimed::Won(()) => {
                attempt.note_committed();
                Outcome::Processed
            }
            Claimed::CutOff => Outcome::CutOff(Step::Completion),
            Claimed::Completed { payload, .. } => {
                payload_outcome(payload, id, "a completed record")
            }
            Claimed::HeldElsewhere { lease_until } => Outcome::HeldElsewhere { lease_until },
            Claimed::Failed(e) => {
                // A transient error may hide a commit (an answer lost after the write), or may
                // say nothing was sent: the store's own message tells which. Either way the
                // redelivery settles it.
                let what = if e.kind() == ErrorKind::Contention {
                    "one-shot write not committed"
                } else if e.is_transient() {
                    "one-shot write failed; the redelivery retries it (if it did commit, the \
                     redelivery finds the key completed and skips it)"
                } else {
                    "one-shot write failed, nothing was committed"
                };
                Outcome::Failed(Failure::new(
                    FailureKind::from(e.kind()),
                    format!("{what}: {e:#}"),
                ))
            }
        }
    }

    /// Runs the handler without a claim (missing key with `ProcessWithoutDedup`, or fail-open).
    /// `kind` and `why` say which: a handler that returns effects fails, and the failure must
    /// point at the real cause (a missing key is not a store outage).
    async fn run_unclaimed(
        &self,
        message: Box<Message>,
        budget: &Budget,
        kind: FailureKind,
        why: &str,
    ) -> Outcome {
        if let Some(failure) = message.unfetched() {
            return Outcome::Failed(failure.clone());
        }
        match self.call_handler(message, budget).await {
            HandlerCall::Returned(Ok(effects)) if effects.is_empty() => Outcome::Processed,
            HandlerCall::Returned(Ok(_)) => Outcome::Failed(Failure::new(
                kind,
                format!(
                    "{why}, but the handler returned effects, which commit only with a claim's \
                     completion: nothing was committed"
                ),
            )),
            HandlerCall::Returned(Err(failure)) => Outcome::Failed(failure),
            HandlerCall::TimedOut(after) => Outcome::Failed(handler_timed_out(after, false)),
            HandlerCall::OutOfTime => Outcome::CutOff(Step::Handler),
        }
    }

    /// Calls the handler under its guards (panic, handler timeout, budget: [`guarded`]),
    /// turning an error or a panic into a [`Failure`].
    async fn call_handler(&self, message: Box<Message>, budget: &Budget) -> HandlerCall<S::Effect> {
        let mut handler = self.handler.clone();
        let call = async move {
            let ready = handler.ready().await.map_err(Into::into)?;
            ready.call(*message).await.map_err(Into::into)
        };
        match guarded(call, self.config.handler_timeout, budget).await {
            HandlerEnd::Returned(response) => HandlerCall::Returned(Ok(response.into())),
            HandlerEnd::Failed(e) => {
                let e: &(dyn std::error::Error + 'static) = &*e;
                // The whole chain: the handler's own message may not name the root cause.
                let mut failure = Failure::new(FailureKind::Handler, Chain(e).to_string())
                    .with_error_kind(Error::kind_in_chain(e));
                if let Some(hint) = crate::Retry::in_chain(e) {
                    failure.retry_after = hint.delay();
                    failure.permanent = hint.is_permanent();
                }
                HandlerCall::Returned(Err(failure))
            }
            HandlerEnd::Panicked(what) => HandlerCall::Returned(Err(Failure::new(
                FailureKind::Panicked,
                format!("handler panicked: {what}"),
            ))),
            HandlerEnd::TimedOut(limit) => HandlerCall::TimedOut(limit),
            HandlerEnd::OutOfTime => HandlerCall::OutOfTime,
        }
    }

    /// Records the completion with the handler's effects ([`Attempt::complete`]: retried under
    /// the one retry policy, under the budget, released when nothing stands), and says what it
    /// means for the message.
    async fn complete(
        &self,
        id: &str,
        key: &str,
        attempt: &Attempt<'_, S>,
        token: &ClaimToken,
        effects: Effects<S::Effect>,
    ) -> Outcome {
        match attempt.complete(token, None, effects).await {
            Recorded::Committed => {
                attempt.note_committed();
                Outcome::Processed
            }
            Recorded::CutOff { had_effects: true } => Outcome::CutOff(Step::Completion),
            Recorded::CutOff { had_effects: false } => {
                // As for a completion that failed (below): the side effect already happened.
                error!(
                    message_id = %id, key,
                    "handler succeeded but its completion was cut off by the time budget; \
                     reporting success, a later redelivery of this key could run the handler \
                     again"
                );
                Outcome::Processed
            }
            Recorded::Unrecorded(e) => {
                // The handler's side effect already happened: reporting a failure would run it
                // again on redelivery. Report success and shout; the claim stays in progress
                // until its lease lapses.
                error!(
                    message_id = %id, key, error = %format_args!("{e:#}"),
                    "handler succeeded but its completion could not be recorded; reporting \
                     success, a later redelivery of this key could run the handler again"
                );
                Outcome::Processed
            }
            Recorded::Failed(e) => {
                // A transient error (a timeout, a dropped connection) can hide a commit: do not
                // tell the on-call engineer that nothing was written, or they may apply the
                // effects by hand.
                let what = if e.kind() == ErrorKind::Contention {
                    "completion with effects not committed, the claim released"
                } else if e.is_transient() {
                    "completion with effects could not be confirmed, it may or may not have \
                     committed (the redelivery finds out: skipped as a duplicate if it did, \
                     applied with the completion if it did not)"
                } else {
                    "completion with effects failed, nothing was committed"
                };
                Outcome::Failed(Failure::new(
                    FailureKind::from(e.kind()),
                    format!("{what}: {e:#}"),
                ))
            }
        }
    }
}

/// A claim that failed, as the message's failure: the store's failure, whatever kind its
/// error carries ([`FailureKind::of_claim`], beside the rest of the relation).
fn claim_failed(e: &Error) -> Failure {
    let kind = FailureKind::of_claim(e.kind());
    let what = match kind {
        FailureKind::StoreUnavailable => "claim failed, nothing ran",
        FailureKind::Contention => "claim not written, nothing ran",
        _ => "claim refused by the store, nothing ran",
    };
    Failure::new(kind, format!("{what}: {e:#}"))
}

/// A claim its owner could not keep while the handler ran (`Attempt::holding_then`), as the
/// message's failure: the handler was stopped and nothing of it committed; the message is
/// retried (by then the key is the other worker's, or free).
fn claim_not_kept(e: &Error) -> Failure {
    Failure::new(
        FailureKind::from(e.kind()),
        format!("the handler was stopped and its result discarded, nothing was committed: {e:#}"),
    )
}

/// One-shot mode, a message whose payload offloaded to S3 could not be fetched (`failure`
/// says why) and whose key the record carries: a duplicate of a key completed before is
/// skipped as one; otherwise the claim taken to find out is released at once and the message
/// fails with `failure`. Nothing runs and nothing is committed. A store that does not answer
/// fails it for retry (as a claim would in held mode): without knowing whether it was done,
/// sending it to the failure queue for good could send one that was.
async fn unfetched_one_shot<S: ClaimStore>(
    failure: Failure,
    id: &str,
    attempt: &Attempt<'_, S>,
) -> Outcome {
    match attempt.claim().await {
        Claimed::Won(token) => {
            Box::pin(attempt.release(&token)).await;
            Outcome::Failed(failure)
        }
        Claimed::Completed { payload, .. } => payload_outcome(payload, id, "a completed record"),
        Claimed::HeldElsewhere { lease_until } => Outcome::HeldElsewhere { lease_until },
        Claimed::CutOff => Outcome::CutOff(Step::Claim),
        Claimed::Failed(e) => Outcome::Failed(claim_failed(&e)),
    }
}

/// What every message of a batch runs with: the time budget, the batch's counters, and its view
/// of whether the store still answers.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    budget: &'a Budget,
    stats: &'a BatchStats,
    liveness: &'a Liveness,
}

/// Whether a message met pressure from the store, for the adaptive limit: a write cancelled
/// on contention (even one retried successfully), a store that did not answer in time, or a
/// store step cut off by the time budget.
fn met_pressure(outcome: &Outcome, conflicts: u32) -> bool {
    conflicts > 0
        || matches!(
            outcome,
            Outcome::Failed(Failure {
                kind: FailureKind::StoreUnavailable | FailureKind::Contention,
                ..
            }) | Outcome::CutOff(Step::Claim | Step::Completion)
        )
}

/// The outcome of a message whose key was done before (by a stored record, or by an earlier
/// copy in this batch, as `against` names it): a duplicate, unless the payload check refuses
/// its payload.
fn payload_outcome(verdict: PayloadVerdict, message_id: &str, against: &str) -> Outcome {
    match verdict {
        PayloadVerdict::Same => Outcome::Duplicate,
        PayloadVerdict::Refused => Outcome::Failed(Failure::new(
            FailureKind::PayloadMismatch,
            format!("same key as {against}, with a different payload"),
        )),
        PayloadVerdict::Tolerated => {
            warn!(
                message_id,
                "same key as {against}, with a different payload; skipped as a duplicate"
            );
            Outcome::Duplicate
        }
    }
}

/// A later copy's outcome, from its leader's.
fn follow(
    leader: Outcome,
    leader_name: &str,
    payload_differs: bool,
    check: PayloadCheck,
    id: &str,
) -> Outcome {
    match leader {
        Outcome::Processed | Outcome::Duplicate => payload_outcome(
            check.judge_differs(payload_differs),
            id,
            &format!("message {leader_name} of this batch"),
        ),
        Outcome::Failed(f) => Outcome::Failed(
            Failure::new(
                f.kind,
                format!(
                    "same key as message {leader_name} of this batch, which failed: {}",
                    f.message
                ),
            )
            .with_hints_of(&f),
        ),
        // The copy never started: the leader ran out of time.
        Outcome::CutOff(_) => Outcome::NotStarted(NotStarted::Deadline),
        other => other,
    }
}

fn handler_timed_out(after: Duration, claimed: bool) -> Failure {
    let claim = if claimed {
        "; the claim is kept until its lease lapses, as the call may have reached an external \
         service"
    } else {
        ""
    };
    let mut failure = Failure::new(
        FailureKind::HandlerTimeout,
        format!(
            "handler ran longer than its timeout ({} ms) and was cancelled{claim}",
            after.as_millis()
        ),
    );
    failure.claim_kept = claimed;
    failure
}

/// The span a message's work runs in. Its fields are the message's metadata, never its body
/// or attributes. With no subscriber interested in it, it is `Span::none()` and its fields are
/// not even evaluated.
fn message_span(message: &Message) -> tracing::Span {
    tracing::info_span!(
        "message",
        message_id = message.id(),
        key = message.key(),
        group = message.group_id(),
        receive_count = message.receive_count(),
        trace_header = message.trace_header(),
    )
}

fn log_outcome(meta: &Meta, outcome: &Outcome) {
    let id = meta.id.as_str();
    let key = meta.key.as_deref().unwrap_or("");
    // Outside the message's span: its producer's trace is named on the line itself.
    let trace_header = meta.trace_header.as_deref();
    match outcome {
        Outcome::Processed => {
            tracing::debug!(message_id = %id, key, trace_header, outcome = "processed")
        }
        Outcome::Duplicate => {
            tracing::info!(message_id = %id, key, trace_header, outcome = "duplicate", "duplicate skipped")
        }
        Outcome::HeldElsewhere { .. } => {
            tracing::info!(message_id = %id, key, trace_header, outcome = "held_elsewhere", "claimed by another worker; will be retried")
        }
        Outcome::Failed(f) => {
            warn!(message_id = %id, key, trace_header, outcome = "failed", kind = f.kind.as_str(), reason = %f.message, "message failed")
        }
        Outcome::NotStarted(r) => {
            tracing::info!(message_id = %id, key, trace_header, outcome = "not_started", reason = r.as_str(), "message not started")
        }
        // Only set after the run (the failure destination), which logs it itself.
        Outcome::DeadLettered(_) => {}
        Outcome::CutOff(step) => {
            warn!(message_id = %id, key, trace_header, outcome = "cut_off", step = step.as_str(), "message cut off by the time budget; reported for retry")
        }
    }
}

/// `batch`'s output, with `packer` (one-shot writes, where the store packs them) sending the
/// messages' writes while they wait. The packer never ends by itself: it is dropped with the
/// batch.
async fn beside_packer<S: ClaimStore, T>(
    packer: Option<&Packer<'_, S>>,
    batch: impl Future<Output = T>,
) -> T {
    let Some(packer) = packer else {
        return batch.await;
    };
    let run = packer.run();
    tokio::pin!(batch, run);
    match futures::future::select(batch, run).await {
        futures::future::Either::Left((out, _)) => out,
        futures::future::Either::Right(((), batch)) => batch.await,
    }
}
