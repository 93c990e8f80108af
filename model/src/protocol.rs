//! The whole protocol as a transition system: SQS, workers with drifting clocks and a
//! deadline, a network that delays, drops and duplicates, and the store (plain or tiered).
//!
//! A store write may be cancelled on contention (DynamoDB's `TransactionConflict`: nothing
//! written), from a bounded budget; the worker sends it again, a claim or a one-shot write as a
//! new request at its clock's time, a completion or a release as it was (same token), as the
//! library's contention retries do, until the retries run out (a nondeterministic choice): then
//! a claim or a one-shot write fails its message, a completion releases the claim. In
//! [`Mode::Packed`] a batch of two messages sends one packed one-shot request; a write the
//! store left unsent goes again with the next request, alone or with the other write's
//! contention retry (the library may have both in flight at once; here a worker has one
//! request on the wire). In [`Mode::TwoStepOneShot`] a one-shot is the default
//! `claim_completed` of a store without an atomic one-shot: a claim, then its completion; a
//! completion cancelled on contention releases the claim and the whole one-shot goes again, a
//! new claim.
//!
//! A claim is leased until the invocation's deadline, or ([`Config::lease`]) a short lease
//! past the worker's clock that its owner extends while the handler runs, a bounded number of
//! times ([`Config::extensions`]); an extension refused or not answered stops the worker, its
//! handler's result discarded and nothing committed, and a handler may end with an extension
//! still on the wire. A worker paused past its lease (it takes no step while time passes) is
//! taken over by another worker's claim, which may first wait the held lease out
//! ([`Config::wait_out_leases`]); when it resumes, its extension and completion are refused.
//!
//! Time moves in ticks of 500 ms and is kept relative: `now` is 0 or 500 ms into the current
//! second, and every stored time is shifted back a second when a second passes, clamped at
//! [`Protocol::floor`] (past for every live request). That keeps the state space finite while
//! time runs for ever, and keeps the phase within the second, which whole-second expiries
//! depend on.

use crate::Mutant;
use crate::checker::{Model, Property};
use crate::store::{
    ClaimAnswer, ExpiryUnit, Fenced, Millis, NEVER, Observed, OneShotAnswer, PackedAnswer, Request,
    Status, Store, Token,
};

/// One tick of the clock.
pub const TICK: Millis = 500;
/// An invocation's time budget: its deadline (and so its lease) is this long after it starts,
/// and at the deadline it is stopped hard.
pub const DEADLINE: Millis = 1500;
/// The queue's visibility timeout.
pub const VISIBILITY: Millis = 2000;

/// How the workers write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// claim, handler, complete (fenced, retried once with the same token) or release.
    Claimed,
    /// One-shot: claim_completed, the effects in the same write.
    OneShot,
    /// Claimed, on the tiered store: a Redis marker of completed keys before the durable
    /// store.
    Tiered,
    /// One-shot, packed: a worker may receive a batch of two messages and send their writes
    /// in one packed request (all or nothing); a write the store left unsent goes again, in
    /// a smaller pack or alone. A batch of one is a plain one-shot write.
    Packed,
    /// One-shot on a store without an atomic one-shot (Redis, the tiered store's default
    /// `claim_completed`): a claim, then at once (no handler between) a completion with the
    /// effects, expiring when the claim asked its record to; no completion retry. A completion
    /// cancelled on contention releases the claim (the answer ignored, a lost one too), then the
    /// one-shot is sent again as a new claim at the clock's time, or fails its message if the
    /// contention retries ran out; any other failure of the completion (refused, timed out)
    /// fails the message and leaves the claim to lapse.
    TwoStepOneShot,
    /// [`Mode::TwoStepOneShot`] on the tiered store (which has no atomic one-shot either): its
    /// claim answers from a Redis marker first, its completion writes the marker.
    TieredTwoStepOneShot,
}

impl Mode {
    /// A one-shot as a claim then a completion.
    pub fn two_step(self) -> bool {
        matches!(self, Mode::TwoStepOneShot | Mode::TieredTwoStepOneShot)
    }

    /// On the tiered store.
    pub fn tiered(self) -> bool {
        matches!(self, Mode::Tiered | Mode::TieredTwoStepOneShot)
    }
}

/// The bounds of one check.
#[derive(Debug, Clone)]
pub struct Config {
    /// How the workers write.
    pub mode: Mode,
    /// Each worker's clock error (ms, ahead if positive); one worker per entry.
    pub drifts: Vec<Millis>,
    /// Messages, one key each.
    pub messages: u8,
    /// Network faults: a request or answer dropped, a request applied twice, a client timing
    /// out while its request is still on its way.
    pub faults: u8,
    /// Worker crashes (the invocation dies; its requests on the wire may still land).
    pub crashes: u8,
    /// SQS deliveries of a message already in flight (at-least-once).
    pub duplicates: u8,
    /// Store writes cancelled on contention (DynamoDB's `TransactionConflict`: nothing
    /// written, the answer says so at once).
    pub contention: u8,
    /// Clock jumps: a worker's clock error changing by a tick, up or down, during the run.
    pub clock_jumps: u8,
    /// Early redeliveries: a message reported failed made visible again before its visibility
    /// timeout (the library's redelivery backoff, or "after the other lease").
    pub early_redeliveries: u8,
    /// The redrive policy's maxReceiveCount (`None`: no failure destination).
    pub max_receives: Option<u8>,
    /// A claim's lease: `None`, until the invocation's deadline (a store that does not extend
    /// leases); `Some(span)`, `span` past the worker's clock, never past the deadline, and
    /// extended while the handler runs ([`Config::extensions`]).
    pub lease: Option<Millis>,
    /// How many extensions a claim's owner may send while its handler runs (with
    /// [`Config::lease`] `Some`).
    pub extensions: u8,
    /// Whether a claim that finds the key held elsewhere may wait out the other lease (once per
    /// attempt) and claim again, to take the key over once that lease lapsed.
    pub wait_out_leases: bool,
    /// The TTL of a claim (NEVER: beyond the horizon, as 24 hours is).
    pub claim_ttl: Millis,
    /// The TTL of a completion.
    pub done_ttl: Millis,
    /// How the durable store keeps expiries.
    pub unit: ExpiryUnit,
    /// The bug planted, if any.
    pub mutant: Mutant,
}

/// A message in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Msg {
    /// Can be received.
    Visible {
        /// Receives so far.
        receives: u8,
    },
    /// Received, invisible until `visible_at`.
    InFlight {
        /// When it shows again.
        visible_at: Millis,
        /// Receives so far.
        receives: u8,
        /// Reported failed by its invocation, which set its redelivery: it may show again
        /// at any time before `visible_at` (kept only while early redeliveries are left).
        failed: bool,
    },
    /// Deleted: reported processed.
    Deleted,
    /// In the failure destination.
    Dlq,
}

/// A request on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Req {
    /// claim
    Claim(u8, Millis, Millis, Millis),
    /// complete(key, token, expires_at, judged_at): `judged_at` is a ghost, the `now` of the
    /// claim the token came from (by which the claimant judged any earlier completion expired)
    Complete(u8, Token, Millis, Millis),
    /// release(key, token)
    Release(u8, Token),
    /// extend(key, token, now, lease_until, expires_at)
    Extend(u8, Token, Millis, Millis, Millis),
    /// claim_completed(key, now, expires_at)
    OneShot(u8, Millis, Millis),
    /// claim_completed_packed of two writes, on distinct keys
    Pack(Write, Write),
}

/// One write of a packed one-shot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Write {
    /// The key.
    pub key: u8,
    /// The caller's clock when the write was made.
    pub now: Millis,
    /// When the completed record stops counting.
    pub expires_at: Millis,
}

/// One write's answer in a packed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    /// Committed, or completed already.
    Done,
    /// Held elsewhere.
    Held,
    /// Not written because another write of the pack was refused: to send again.
    Unsent,
    /// Cancelled on contention: to send again, with backoff.
    Contention,
}

/// An answer on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ans {
    /// Acquired with a token.
    Acquired(Token),
    /// Completed already (or committed, for a one-shot).
    Done,
    /// Held elsewhere.
    Held,
    /// Fenced write accepted.
    Ok,
    /// Fenced write refused.
    Lost,
    /// Cancelled on contention: nothing written.
    Contention,
    /// A packed request's answers, one per write.
    Pack(Part, Part),
}

/// A request, who sent it, and its answer once the store applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Packet {
    /// The sender.
    pub worker: u8,
    /// The sender stopped waiting (timed out, crashed, stopped): the answer is dropped.
    pub orphan: bool,
    /// The request.
    pub req: Req,
    /// The answer, once applied.
    pub answer: Option<Ans>,
}

/// What a worker does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Job {
    /// Nothing: ready for an invocation.
    Idle,
    /// Waiting for the answer to its request about message `msg`.
    Waiting {
        /// The message.
        msg: u8,
        /// The invocation's deadline.
        deadline: Millis,
        /// The request (resent as is on a completion retry).
        req: Req,
        /// A completion already retried once.
        retried: bool,
    },
    /// Running the handler under a claim.
    Running {
        /// The message.
        msg: u8,
        /// The invocation's deadline.
        deadline: Millis,
        /// The claim's token.
        token: Token,
        /// The claim's `now` (ghost): what its completion is judged by.
        judged_at: Millis,
        /// Extensions sent so far.
        extended: u8,
    },
    /// Running the handler under a claim, an extension of its lease on the wire: the handler
    /// may still end (the extension left to land or not), and the worker stops when the
    /// extension is refused or not answered.
    Extending {
        /// The message.
        msg: u8,
        /// The invocation's deadline.
        deadline: Millis,
        /// The claim's token.
        token: Token,
        /// The claim's `now` (ghost).
        judged_at: Millis,
        /// Extensions sent so far, this one included.
        extended: u8,
        /// The extension on the wire.
        req: Req,
    },
    /// Its claim found the key held elsewhere: waiting for the other lease to lapse, to claim
    /// again ([`Config::wait_out_leases`]).
    Held {
        /// The message.
        msg: u8,
        /// The invocation's deadline.
        deadline: Millis,
    },
    /// A batch of two messages, their one-shot writes packed ([`Mode::Packed`]).
    Batch {
        /// The invocation's deadline.
        deadline: Millis,
        /// The batch's messages (in order) and where each stands.
        msgs: [(u8, Slot); 2],
        /// The request on the wire: the writes of the messages still [`Slot::Sent`], a pack
        /// of two or a one-shot write.
        req: Req,
    },
}

/// Where one message of a batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// Its write is in the request on the wire.
    Sent,
    /// Processed: deleted when the invocation ends.
    Processed,
    /// Failed: left for redelivery.
    Failed,
}

/// What the environment may still do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Network faults left.
    pub faults: u8,
    /// Worker crashes left.
    pub crashes: u8,
    /// SQS duplicate deliveries left.
    pub duplicates: u8,
    /// Writes cancelled on contention left.
    pub contention: u8,
    /// Clock jumps left.
    pub clock_jumps: u8,
    /// Early redeliveries left.
    pub early_redeliveries: u8,
}

/// Properties broken so far (sticky).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Broken {
    /// An effect committed while an earlier completion of its key still counted.
    pub effect_twice: bool,
    /// A message deleted with no effect of its key ever committed.
    pub lost: bool,
    /// A stale token's completion or release accepted.
    pub stale: bool,
    /// A completed record written over before it expired.
    pub overwritten: bool,
    /// A claim acquired (the handler run) for a key completed and live.
    pub duplicate_ran: bool,
    /// Effects committed by an owner that lost its claim.
    pub lost_owner_committed: bool,
}

/// A state of the whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// 0 or 500: the time within the current second.
    pub now: Millis,
    /// The durable store.
    pub store: Store,
    /// The tiered store's Redis markers: a completed key's expiry.
    pub markers: Vec<Option<Millis>>,
    /// The queue, message `i` with key `i`.
    pub queue: Vec<Msg>,
    /// The workers.
    pub workers: Vec<Job>,
    /// Each worker's clock error now (ms, ahead if positive).
    pub drifts: Vec<Millis>,
    /// The wire (sorted).
    pub net: Vec<Packet>,
    /// What the environment may still do.
    pub budget: Budget,
    /// Per key: the asked expiry of its latest committed completion (ghost).
    pub live_effect: Vec<Option<Millis>>,
    /// Per key: whether an effect was ever committed (ghost).
    pub ever_applied: Vec<bool>,
    /// Properties broken.
    pub broken: Broken,
}

/// The model: a [`Config`].
#[derive(Debug, Clone)]
pub struct Protocol(pub Config);

/// The names of the properties.
pub mod property {
    /// No effect applied twice (within the TTL, by the caller's clock).
    pub const NO_EFFECT_TWICE: &str = "no effect applied twice";
    /// No message deleted unprocessed.
    pub const NO_MESSAGE_LOST: &str = "no message lost";
    /// A stale claimant never completes, extends or releases.
    pub const STALE_NEVER_WRITES: &str = "a stale claimant never completes, extends or releases";
    /// An owner that lost its claim (taken over, or its record gone) never commits effects.
    pub const LOST_OWNER_NEVER_COMMITS: &str =
        "no effect committed by an owner that lost its claim";
    /// A completed record is never overwritten before it expires.
    pub const NOT_OVERWRITTEN: &str = "a completed record is never overwritten before it expires";
    /// A duplicate never runs the handler.
    pub const DUPLICATE_NEVER_RUNS: &str = "a duplicate never runs the handler";
    /// Liveness: every message is eventually processed or in the failure destination.
    pub const EVENTUALLY_DONE: &str = "every message eventually processed or in the failure destination (a dead worker's key taken over)";
}

/// A step of the system, for traces.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    /// Worker receives a message (a duplicate delivery if it is in flight).
    Receive(u8, u8),
    /// Worker receives a batch of two messages ([`Mode::Packed`]).
    ReceiveBatch(u8, u8, u8),
    /// The failure destination takes a message received too often.
    Redrive(u8),
    /// The store applies packet `i`.
    Apply(Packet),
    /// The store applies packet `i` again (duplicated on the wire).
    Duplicate(Packet),
    /// Packet dropped.
    Drop(Packet),
    /// The store cancels the packet's write on contention: nothing applied.
    Contend(Packet),
    /// Answer delivered to its worker.
    Deliver(Packet),
    /// A contention answer delivered, and the worker's contention retries run out.
    GiveUp(Packet),
    /// Worker's client times out.
    Timeout(u8),
    /// Handler done: complete.
    HandlerDone(u8),
    /// The handler returned an error: release, the message failed.
    HandlerFailed(u8),
    /// The handler still runs: its owner sends an extension of its lease.
    Extend(u8),
    /// A claim answered held elsewhere delivered, and its worker waits the other lease out.
    WaitOut(Packet),
    /// A worker that waited out a lease claims again.
    ClaimAgain(u8),
    /// Worker crashes.
    Crash(u8),
    /// Worker's clock jumps by some ms.
    ClockJump(u8, Millis),
    /// A message reported failed shows again before its visibility timeout.
    EarlyRedelivery(u8),
    /// 500 ms pass.
    Tick,
}

impl Protocol {
    /// Every time further back than this is as good as this one (a time is clamped to it when
    /// a second passes): at or before the `now` of any request whose sender still waits for it
    /// (sent less than a deadline ago, by a clock at most as far behind as the bounds allow:
    /// the furthest clock error below zero, less a tick per clock jump), so no live request's
    /// time is clamped (asserted when time moves). A request that outlived its sender may land
    /// with its times clamped, later than they were: an over-approximation (it may find more
    /// expired, never less).
    pub fn floor(&self) -> Millis {
        let c = &self.0;
        let behind = c
            .drifts
            .iter()
            .map(|&d| Millis::from(c.clock_jumps) * TICK - d)
            .max()
            .unwrap_or(0)
            .max(0);
        -(DEADLINE - TICK + behind)
    }

    fn clock(&self, s: &State, w: usize) -> Millis {
        s.now + s.drifts[w]
    }

    /// A claim's lease, taken (or extended) at the worker's `now` in an invocation ending at
    /// `deadline`.
    fn lease_until(&self, now: Millis, deadline: Millis) -> Millis {
        match self.0.lease {
            None => deadline,
            Some(span) => deadline.min(now + span),
        }
    }

    fn ttl(now: Millis, ttl: Millis) -> Millis {
        if ttl == NEVER { NEVER } else { now + ttl }
    }

    /// Records what a step did. `judged_at`: the `now` by which the write that applies effects
    /// judged any earlier completion expired (a one-shot write's own `now`, a completion's
    /// claim's `now`): an earlier completion asked to count past it is an effect twice.
    fn note(&self, s: &mut State, key: u8, judged_at: Millis, obs: Observed) {
        let k = usize::from(key);
        if obs.effects_applied {
            if s.live_effect[k].is_some_and(|e| e > judged_at) {
                s.broken.effect_twice = true;
            }
            s.live_effect[k] = obs.completion_expires_at;
            s.ever_applied[k] = true;
        }
        s.broken.stale |= obs.stale_accepted;
        s.broken.overwritten |= obs.overwrote_live_completion;
        s.broken.duplicate_ran |= obs.acquired_over_completion;
        s.broken.lost_owner_committed |= obs.lost_owner_committed;
    }

    /// The store applies `req`: the answer.
    fn apply(&self, s: &mut State, req: Req) -> Ans {
        let mutant = self.0.mutant;
        let tiered = self.0.mode.tiered();
        match req {
            Req::Claim(key, now, lease_until, expires_at) => {
                let k = usize::from(key);
                if tiered && s.markers[k].is_some_and(|e| e > now) {
                    return Ans::Done;
                }
                let request = Request {
                    key,
                    now,
                    lease_until,
                    expires_at,
                };
                let before = s.store.records[k];
                let (answer, obs) = s.store.claim(request, mutant);
                self.note(s, key, now, obs);
                // A claim that took over a completed record judged it expired by its own clock:
                // that completion counts no more (a later write judges what it finds).
                if let (ClaimAnswer::Acquired(_), Some(old)) = (answer, before)
                    && old.status == Status::Completed
                    && old.asked_expires_at <= now
                {
                    s.live_effect[k] = None;
                }
                match answer {
                    ClaimAnswer::Acquired(t) => Ans::Acquired(t),
                    ClaimAnswer::Completed { expires_at } => {
                        if tiered {
                            s.markers[k] = Some(expires_at);
                        }
                        Ans::Done
                    }
                    ClaimAnswer::HeldElsewhere { .. } => Ans::Held,
                }
            }
            Req::Complete(key, token, expires_at, judged_at) => {
                let (answer, obs) = s.store.complete(key, token, expires_at, mutant);
                let fresh = obs.effects_applied;
                self.note(s, key, judged_at, obs);
                let k = usize::from(key);
                if tiered
                    && (fresh
                        || (answer == Fenced::LostClaim
                            && mutant == Mutant::TieredMarkerOnLostClaim))
                {
                    s.markers[k] = Some(expires_at);
                }
                match answer {
                    Fenced::Ok => Ans::Ok,
                    Fenced::LostClaim => Ans::Lost,
                }
            }
            Req::Extend(key, token, now, lease_until, expires_at) => {
                let (answer, obs) =
                    s.store
                        .extend(key, token, now, lease_until, expires_at, mutant);
                // An extension commits no effects.
                self.note(s, key, Millis::MIN, obs);
                match answer {
                    Fenced::Ok => Ans::Ok,
                    Fenced::LostClaim => Ans::Lost,
                }
            }
            Req::Release(key, token) => {
                let (answer, obs) = s.store.release(key, token, mutant);
                // A release commits no effects: nothing is judged by its time.
                self.note(s, key, Millis::MIN, obs);
                match answer {
                    Fenced::Ok => Ans::Ok,
                    Fenced::LostClaim => Ans::Lost,
                }
            }
            Req::OneShot(key, now, expires_at) => {
                let request = Request {
                    key,
                    now,
                    lease_until: now,
                    expires_at,
                };
                let (answer, obs) = s.store.claim_completed(request, mutant);
                self.note(s, key, now, obs);
                match answer {
                    OneShotAnswer::Committed | OneShotAnswer::Completed { .. } => Ans::Done,
                    OneShotAnswer::HeldElsewhere { .. } => Ans::Held,
                }
            }
            Req::Pack(a, b) => {
                let request = |w: Write| Request {
                    key: w.key,
                    now: w.now,
                    lease_until: w.now,
                    expires_at: w.expires_at,
                };
                let (answers, obs) = s
                    .store
                    .claim_completed_packed(&[request(a), request(b)], mutant);
                self.note(s, a.key, a.now, obs[0]);
                self.note(s, b.key, b.now, obs[1]);
                let part = |p: PackedAnswer| match p {
                    PackedAnswer::Answered(
                        OneShotAnswer::Committed | OneShotAnswer::Completed { .. },
                    ) => Part::Done,
                    PackedAnswer::Answered(OneShotAnswer::HeldElsewhere { .. }) => Part::Held,
                    PackedAnswer::Unsent => Part::Unsent,
                };
                Ans::Pack(part(answers[0]), part(answers[1]))
            }
        }
    }

    /// The answers of `req` cancelled on contention. For a pack, DynamoDB gives a reason per
    /// write: one write or both met contention, and the other is answered as the store would
    /// answer it (refused: its own answer; else unsent), or unsent whatever it would find
    /// (DynamoDB's reason `None` for an item whose condition it never evaluated, which the
    /// library reads as `Unsent`).
    fn contended(&self, s: &State, req: Req) -> Vec<Ans> {
        let Req::Pack(a, b) = req else {
            return vec![Ans::Contention];
        };
        // What each write would find (the store left as it was).
        let found = |w: Write| {
            let request = Request {
                key: w.key,
                now: w.now,
                lease_until: w.now,
                expires_at: w.expires_at,
            };
            match s.store.clone().claim_completed(request, self.0.mutant).0 {
                OneShotAnswer::Committed => Part::Unsent,
                OneShotAnswer::Completed { .. } => Part::Done,
                OneShotAnswer::HeldElsewhere { .. } => Part::Held,
            }
        };
        let mut answers = vec![
            Ans::Pack(Part::Contention, found(b)),
            Ans::Pack(found(a), Part::Contention),
            Ans::Pack(Part::Contention, Part::Contention),
            Ans::Pack(Part::Contention, Part::Unsent),
            Ans::Pack(Part::Unsent, Part::Contention),
        ];
        answers.sort();
        answers.dedup();
        answers
    }

    /// `req` made again for a contention retry: a claim or a one-shot write is a new request
    /// at the worker's clock now (a claim's lease reckoned from it); a completion, an extension
    /// or a release is sent as it was (same token).
    fn again(&self, s: &State, w: usize, req: Req, deadline: Millis) -> Req {
        let now = self.clock(s, w);
        match req {
            Req::Claim(key, ..) => self.claim_req(key, now, deadline),
            Req::OneShot(key, ..) => Req::OneShot(key, now, Self::ttl(now, self.0.done_ttl)),
            Req::Pack(..) | Req::Complete(..) | Req::Release(..) | Req::Extend(..) => req,
        }
    }

    /// A claim of `key` at the worker's `now`, in an invocation ending at `deadline`: its
    /// record asked to expire with the claim TTL (the completion's TTL in a two-step
    /// one-shot).
    fn claim_req(&self, key: u8, now: Millis, deadline: Millis) -> Req {
        let ttl = if self.0.mode.two_step() {
            self.0.done_ttl
        } else {
            self.0.claim_ttl
        };
        Req::Claim(
            key,
            now,
            self.lease_until(now, deadline),
            Self::ttl(now, ttl),
        )
    }

    fn send(s: &mut State, w: usize, req: Req) {
        s.net.push(Packet {
            worker: w as u8,
            orphan: false,
            req,
            answer: None,
        });
    }

    fn orphan(s: &mut State, w: usize) {
        // An answer nobody waits for is dropped; a request on its way may still land.
        s.net
            .retain(|p| !(usize::from(p.worker) == w && p.answer.is_some()));
        for p in &mut s.net {
            if usize::from(p.worker) == w {
                p.orphan = true;
            }
        }
    }

    /// The invocation ends: the message reported processed (deleted) or failed (left in
    /// flight until its visibility timeout).
    fn finish(s: &mut State, w: usize, msg: u8, processed: bool) {
        s.workers[w] = Job::Idle;
        if processed {
            Self::delete(s, msg);
        } else {
            Self::failed(s, msg);
        }
    }

    /// The message reported failed: its redelivery set by the library, possibly early.
    fn failed(s: &mut State, msg: u8) {
        if s.budget.early_redeliveries == 0 {
            return;
        }
        if let Msg::InFlight { failed, .. } = &mut s.queue[usize::from(msg)] {
            *failed = true;
        }
    }

    /// The message reported processed: deleted.
    fn delete(s: &mut State, msg: u8) {
        let m = usize::from(msg);
        if !matches!(s.queue[m], Msg::Deleted | Msg::Dlq) {
            s.queue[m] = Msg::Deleted;
        }
        if !s.ever_applied[m] {
            s.broken.lost = true;
        }
    }

    /// The worker reads an answer (`None`: its client timed out). `give_up`: a write
    /// cancelled on contention is not sent again (the contention retries ran out).
    fn handle(&self, s: &mut State, w: usize, answer: Option<Ans>, give_up: bool) {
        match s.workers[w] {
            Job::Batch { .. } => return self.handle_batch(s, w, answer, give_up),
            Job::Extending { .. } => return self.handle_extension(s, w, answer, give_up),
            _ => {}
        }
        let Job::Waiting {
            msg,
            deadline,
            req,
            retried,
        } = s.workers[w]
        else {
            return;
        };
        if self.0.mode.two_step() {
            return self.handle_two_step(s, w, answer, give_up);
        }
        match (req, answer) {
            (Req::OneShot(..), Some(Ans::Contention))
                if self.0.mutant == Mutant::ContentionAcked =>
            {
                Self::finish(s, w, msg, true)
            }
            (_, Some(Ans::Contention)) if !give_up => {
                let req = self.again(s, w, req, deadline);
                Self::send(s, w, req);
                s.workers[w] = Job::Waiting {
                    msg,
                    deadline,
                    req,
                    retried,
                };
            }
            (Req::Complete(key, token, ..), Some(Ans::Contention)) => {
                // The completion failed with effects: the claim is released (the library's
                // `Recorded::Failed`), and the message fails.
                let req = Req::Release(key, token);
                Self::send(s, w, req);
                s.workers[w] = Job::Waiting {
                    msg,
                    deadline,
                    req,
                    retried: true,
                };
            }
            (Req::Claim(_, judged_at, ..), Some(Ans::Acquired(token))) => {
                s.workers[w] = Job::Running {
                    msg,
                    deadline,
                    token,
                    judged_at,
                    extended: 0,
                };
            }
            (Req::Claim(..) | Req::OneShot(..), Some(Ans::Done)) => Self::finish(s, w, msg, true),
            (Req::Claim(..) | Req::OneShot(..), Some(Ans::Held)) => {
                Self::finish(s, w, msg, self.0.mutant == Mutant::HeldAcked)
            }
            (Req::Complete(..), Some(Ans::Ok)) => Self::finish(s, w, msg, true),
            (Req::Complete(..), None) if !retried => {
                // An ambiguous failure: the same completion again, same token.
                Self::send(s, w, req);
                s.workers[w] = Job::Waiting {
                    msg,
                    deadline,
                    req,
                    retried: true,
                };
            }
            (Req::Complete(key, token, ..), None) => {
                // Failed again, the retries spent: with effects, the claim is released (the
                // library's completion failing with anything but `LostClaim`), the message
                // fails.
                let req = Req::Release(key, token);
                Self::send(s, w, req);
                s.workers[w] = Job::Waiting {
                    msg,
                    deadline,
                    req,
                    retried: true,
                };
            }
            _ => Self::finish(s, w, msg, false),
        }
    }

    /// [`Mode::TwoStepOneShot`]: the worker reads the answer to one of the one-shot's steps
    /// (the library's default `ClaimStore::claim_completed` under the claim core's contention
    /// retries).
    fn handle_two_step(&self, s: &mut State, w: usize, answer: Option<Ans>, give_up: bool) {
        let Job::Waiting {
            msg,
            deadline,
            req,
            retried,
        } = s.workers[w]
        else {
            return;
        };
        let mutant = self.0.mutant;
        let wait = |s: &mut State, req: Req, retried: bool| {
            Self::send(s, w, req);
            s.workers[w] = Job::Waiting {
                msg,
                deadline,
                req,
                retried,
            };
        };
        match (req, answer) {
            // Cancelled on contention, the claim or the completion: counted as committed.
            (Req::Claim(..) | Req::Complete(..), Some(Ans::Contention))
                if mutant == Mutant::ContentionAcked =>
            {
                Self::finish(s, w, msg, true)
            }
            // The claim cancelled (nothing written): sent again as a new claim, or the
            // message fails.
            (Req::Claim(..), Some(Ans::Contention)) if !give_up => {
                wait(s, self.again(s, w, req, deadline), false)
            }
            (Req::Claim(key, judged_at, _, expires_at), Some(Ans::Acquired(token))) => {
                // No handler between: the completion with the effects, expiring when the claim
                // asked its record to.
                wait(s, Req::Complete(key, token, expires_at, judged_at), false)
            }
            (Req::Claim(..), Some(Ans::Done)) => Self::finish(s, w, msg, true),
            (Req::Claim(..), Some(Ans::Held)) => {
                Self::finish(s, w, msg, mutant == Mutant::HeldAcked)
            }
            (Req::Complete(..), Some(Ans::Ok)) => Self::finish(s, w, msg, true),
            // The completion cancelled on contention: the claim released, then (`retried`
            // false) the one-shot sent again, or (`retried` true: the retries ran out) the
            // message failed.
            (Req::Complete(key, token, ..), Some(Ans::Contention)) => {
                wait(s, Req::Release(key, token), give_up)
            }
            // The release's answer is ignored, whatever it is.
            (Req::Release(key, _), _) if !retried => {
                let now = self.clock(s, w);
                wait(s, self.claim_req(key, now, deadline), false)
            }
            // The claim failed (timed out, retries spent), the completion refused or timed out
            // (the claim left to lapse), or the release done after the last contention: the
            // message fails.
            _ => Self::finish(s, w, msg, false),
        }
    }

    /// A worker whose handler runs reads the answer to its extension (`None`: its client
    /// timed out). Extended: the handler runs on. Refused (another worker took the key over),
    /// not answered, or cancelled on contention with the retries spent: the handler is stopped,
    /// its result discarded, nothing committed or released (the library's `holding`), and the
    /// message fails.
    fn handle_extension(&self, s: &mut State, w: usize, answer: Option<Ans>, give_up: bool) {
        let Job::Extending {
            msg,
            deadline,
            token,
            judged_at,
            extended,
            req,
        } = s.workers[w]
        else {
            return;
        };
        match answer {
            Some(Ans::Ok) => {
                s.workers[w] = Job::Running {
                    msg,
                    deadline,
                    token,
                    judged_at,
                    extended,
                }
            }
            Some(Ans::Contention) if !give_up => Self::send(s, w, req),
            Some(Ans::Lost) if self.0.mutant == Mutant::LostExtensionAcked => {
                Self::finish(s, w, msg, true)
            }
            _ => Self::finish(s, w, msg, false),
        }
    }

    /// The handler of worker `w` (running, or extending its lease: the extension orphaned
    /// before) ends: returned, it sends the completion with the effects; failed (at any time:
    /// the library's `HandlerCall::Returned(Err(..))`), it releases the claim and the message
    /// fails. A handler cut off at the deadline keeps its claim until the lease lapses (the
    /// hard stop).
    fn handler_ends(&self, s: &State, w: usize) -> [(Action, State); 2] {
        let (Job::Running {
            msg,
            deadline,
            token,
            judged_at,
            ..
        }
        | Job::Extending {
            msg,
            deadline,
            token,
            judged_at,
            ..
        }) = s.workers[w]
        else {
            unreachable!("a handler runs");
        };
        let mut done = s.clone();
        let now = self.clock(s, w);
        let req = Req::Complete(msg, token, Self::ttl(now, self.0.done_ttl), judged_at);
        Self::send(&mut done, w, req);
        done.workers[w] = Job::Waiting {
            msg,
            deadline,
            req,
            retried: false,
        };
        let mut failed = s.clone();
        let req = Req::Release(msg, token);
        Self::send(&mut failed, w, req);
        failed.workers[w] = Job::Waiting {
            msg,
            deadline,
            req,
            retried: true,
        };
        [
            (Action::HandlerDone(w as u8), done),
            (Action::HandlerFailed(w as u8), failed),
        ]
    }

    /// A batch's worker reads the answer to its pack (or to the one write left of it).
    fn handle_batch(&self, s: &mut State, w: usize, answer: Option<Ans>, give_up: bool) {
        let Job::Batch {
            deadline,
            mut msgs,
            req,
        } = s.workers[w]
        else {
            return;
        };
        let writes: Vec<Write> = match req {
            Req::Pack(a, b) => vec![a, b],
            Req::OneShot(key, now, expires_at) => vec![Write {
                key,
                now,
                expires_at,
            }],
            _ => unreachable!("a batch sends one-shot writes only"),
        };
        let parts: Vec<Option<Part>> = match answer {
            Some(Ans::Pack(a, b)) => vec![Some(a), Some(b)],
            Some(Ans::Done) => vec![Some(Part::Done)],
            Some(Ans::Held) => vec![Some(Part::Held)],
            Some(Ans::Contention) => vec![Some(Part::Contention)],
            // Timed out: the outcome is unknown, the writes fail.
            _ => vec![None; writes.len()],
        };
        let mutant = self.0.mutant;
        let mut next = Vec::new();
        for (write, part) in writes.into_iter().zip(parts) {
            let slot = msgs
                .iter_mut()
                .find(|(m, _)| *m == write.key)
                .map(|(_, slot)| slot)
                .expect("a write of the batch");
            *slot = match part {
                Some(Part::Done) => Slot::Processed,
                Some(Part::Held) if mutant == Mutant::HeldAcked => Slot::Processed,
                Some(Part::Unsent) if mutant == Mutant::UnsentAcked => Slot::Processed,
                Some(Part::Unsent) => {
                    // Sent again as it was, in the next pack.
                    next.push(write);
                    Slot::Sent
                }
                Some(Part::Contention) if mutant == Mutant::ContentionAcked => Slot::Processed,
                Some(Part::Contention) if !give_up => {
                    // Sent again: a new request at the clock's time.
                    let now = self.clock(s, w);
                    next.push(Write {
                        key: write.key,
                        now,
                        expires_at: Self::ttl(now, self.0.done_ttl),
                    });
                    Slot::Sent
                }
                Some(Part::Held | Part::Contention) | None => Slot::Failed,
            };
        }
        next.sort();
        let req = match next[..] {
            [] => {
                // The invocation ends: the processed messages are deleted, the others failed.
                s.workers[w] = Job::Idle;
                for (msg, slot) in msgs {
                    if slot == Slot::Processed {
                        Self::delete(s, msg);
                    } else {
                        Self::failed(s, msg);
                    }
                }
                return;
            }
            [a] => Req::OneShot(a.key, a.now, a.expires_at),
            [a, b] => Req::Pack(a, b),
            _ => unreachable!("a batch holds two messages"),
        };
        Self::send(s, w, req);
        s.workers[w] = Job::Batch {
            deadline,
            msgs,
            req,
        };
    }

    fn tick(&self, s: &mut State) {
        s.now += TICK;
        for msg in s.queue.iter_mut() {
            if let Msg::InFlight {
                visible_at,
                receives,
                ..
            } = *msg
                && visible_at <= s.now
            {
                *msg = Msg::Visible { receives };
            }
        }
        // The deadline's hard stop.
        for w in 0..s.workers.len() {
            let deadline = match s.workers[w] {
                Job::Waiting { deadline, .. }
                | Job::Running { deadline, .. }
                | Job::Extending { deadline, .. }
                | Job::Held { deadline, .. }
                | Job::Batch { deadline, .. } => deadline,
                Job::Idle => continue,
            };
            if deadline <= s.now {
                // The invocation answers with what it has: the steps cut off fail, a batch's
                // messages processed before are reported (deleted). Not a worker whose clock
                // is behind: it computes its hard stop from its own clock (the library's
                // `Budget::new`), after the true deadline, where Lambda freezes it first: a
                // crash, no partial batch response.
                if s.drifts[w] >= 0 {
                    match s.workers[w] {
                        Job::Batch { msgs, .. } => {
                            for (msg, slot) in msgs {
                                if slot == Slot::Processed {
                                    Self::delete(s, msg);
                                } else {
                                    Self::failed(s, msg);
                                }
                            }
                        }
                        Job::Waiting { msg, .. }
                        | Job::Running { msg, .. }
                        | Job::Extending { msg, .. }
                        | Job::Held { msg, .. } => {
                            Self::failed(s, msg);
                        }
                        Job::Idle => {}
                    }
                }
                s.workers[w] = Job::Idle;
                Self::orphan(s, w);
            }
        }
        if s.now == 1000 {
            s.now = 0;
            let floor = self.floor();
            // No live request's time is clamped (the hard stop orphaned those of invocations
            // that end now).
            for p in s.net.iter().filter(|p| !p.orphan) {
                for now in req_nows(&p.req).into_iter().flatten() {
                    assert!(now - 1000 >= floor, "a live request's now clamped: {p:?}");
                }
            }
            let shift = |t: Millis| if t == NEVER { t } else { (t - 1000).max(floor) };
            s.store.shift(1000, floor);
            for m in s.markers.iter_mut() {
                *m = m.map(shift).filter(|&e| e > floor);
            }
            for e in s.live_effect.iter_mut() {
                *e = e.map(shift).filter(|&e| e > floor);
            }
            for msg in s.queue.iter_mut() {
                if let Msg::InFlight { visible_at, .. } = msg {
                    *visible_at = shift(*visible_at);
                }
            }
            for job in s.workers.iter_mut() {
                match job {
                    Job::Waiting { deadline, req, .. } => {
                        *deadline = shift(*deadline);
                        shift_req(req, shift);
                    }
                    Job::Running {
                        deadline,
                        judged_at,
                        ..
                    } => {
                        *deadline = shift(*deadline);
                        *judged_at = shift(*judged_at);
                    }
                    Job::Extending {
                        deadline,
                        judged_at,
                        req,
                        ..
                    } => {
                        *deadline = shift(*deadline);
                        *judged_at = shift(*judged_at);
                        shift_req(req, shift);
                    }
                    Job::Held { deadline, .. } => *deadline = shift(*deadline),
                    Job::Batch { deadline, req, .. } => {
                        *deadline = shift(*deadline);
                        shift_req(req, shift);
                    }
                    Job::Idle => {}
                }
            }
            for p in s.net.iter_mut() {
                shift_req(&mut p.req, shift);
            }
        }
    }

    /// Renames tokens in order of appearance and sorts the wire: one state, one spelling.
    fn canonical(&self, mut s: State) -> State {
        s.net.sort();
        let mut seen: Vec<Token> = Vec::new();
        let mut rename = |t: Token| -> Token {
            match seen.iter().position(|&x| x == t) {
                Some(i) => i as Token + 1,
                None => {
                    seen.push(t);
                    seen.len() as Token
                }
            }
        };
        s.store.rename_tokens(&mut rename);
        for job in s.workers.iter_mut() {
            match job {
                Job::Running { token, .. } => *token = rename(*token),
                Job::Extending { token, req, .. } => {
                    *token = rename(*token);
                    rename_req(req, &mut rename);
                }
                Job::Waiting { req, .. } | Job::Batch { req, .. } => rename_req(req, &mut rename),
                Job::Idle | Job::Held { .. } => {}
            }
        }
        for p in s.net.iter_mut() {
            rename_req(&mut p.req, &mut rename);
            if let Some(Ans::Acquired(t)) = &mut p.answer {
                *t = rename(*t);
            }
        }
        s.net.sort();
        s.store.next_token = seen.len() as Token + 1;
        s
    }
}

impl Protocol {
    /// [`Mode::Packed`]: an idle worker receives two visible messages in one batch and sends
    /// their one-shot writes in one pack.
    fn receive_batches(&self, s: &State, push: &mut impl FnMut(Action, State)) {
        let c = &self.0;
        let receivable = |m: usize| match s.queue[m] {
            Msg::Visible { receives } => c.max_receives.is_none_or(|max| receives < max),
            _ => false,
        };
        for a in 0..s.queue.len() {
            for b in a + 1..s.queue.len() {
                if !receivable(a) || !receivable(b) {
                    continue;
                }
                for w in 0..s.workers.len() {
                    if s.workers[w] != Job::Idle || s.net.iter().any(|p| usize::from(p.worker) == w)
                    {
                        continue;
                    }
                    let mut n = s.clone();
                    for m in [a, b] {
                        let Msg::Visible { receives } = s.queue[m] else {
                            unreachable!("receivable")
                        };
                        n.queue[m] = Msg::InFlight {
                            visible_at: s.now + VISIBILITY,
                            receives: if c.max_receives.is_some() {
                                receives.saturating_add(1)
                            } else {
                                0
                            },
                            failed: false,
                        };
                    }
                    let now = self.clock(s, w);
                    let write = |key: usize| Write {
                        key: key as u8,
                        now,
                        expires_at: Self::ttl(now, c.done_ttl),
                    };
                    let req = Req::Pack(write(a), write(b));
                    Self::send(&mut n, w, req);
                    n.workers[w] = Job::Batch {
                        deadline: s.now + DEADLINE,
                        msgs: [(a as u8, Slot::Sent), (b as u8, Slot::Sent)],
                        req,
                    };
                    push(Action::ReceiveBatch(w as u8, a as u8, b as u8), n);
                }
            }
        }
    }
}

fn shift_req(req: &mut Req, shift: impl Fn(Millis) -> Millis) {
    match req {
        Req::Claim(_, now, lease, exp) => {
            *now = shift(*now);
            *lease = shift(*lease);
            *exp = shift(*exp);
        }
        Req::Complete(_, _, exp, judged_at) => {
            *exp = shift(*exp);
            *judged_at = shift(*judged_at);
        }
        Req::Release(..) => {}
        Req::Extend(_, _, now, lease, exp) => {
            *now = shift(*now);
            *lease = shift(*lease);
            *exp = shift(*exp);
        }
        Req::OneShot(_, now, exp) => {
            *now = shift(*now);
            *exp = shift(*exp);
        }
        Req::Pack(a, b) => {
            for w in [a, b] {
                w.now = shift(w.now);
                w.expires_at = shift(w.expires_at);
            }
        }
    }
}

/// The callers' times (`now`) in a request.
fn req_nows(req: &Req) -> [Option<Millis>; 2] {
    match *req {
        Req::Claim(_, now, ..) | Req::OneShot(_, now, _) | Req::Extend(_, _, now, ..) => {
            [Some(now), None]
        }
        Req::Pack(a, b) => [Some(a.now), Some(b.now)],
        Req::Complete(..) | Req::Release(..) => [None, None],
    }
}

fn rename_req(req: &mut Req, rename: &mut impl FnMut(Token) -> Token) {
    match req {
        Req::Complete(_, t, ..) | Req::Release(_, t) | Req::Extend(_, t, ..) => *t = rename(*t),
        Req::Claim(..) | Req::OneShot(..) | Req::Pack(..) => {}
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.0;

        let keys = usize::from(c.messages);
        vec![State {
            now: 0,
            store: Store::new(keys, c.unit),
            markers: vec![None; keys],
            queue: vec![Msg::Visible { receives: 0 }; keys],
            workers: vec![Job::Idle; c.drifts.len()],
            drifts: c.drifts.clone(),
            net: Vec::new(),
            budget: Budget {
                faults: c.faults,
                crashes: c.crashes,
                duplicates: c.duplicates,
                contention: c.contention,
                clock_jumps: c.clock_jumps,
                early_redeliveries: c.early_redeliveries,
            },
            live_effect: vec![None; keys],
            ever_applied: vec![false; keys],
            broken: Broken::default(),
        }]
    }

    fn next_states(&self, s: &State, out: &mut Vec<(Action, State)>) {
        let c = &self.0;
        let mut push = |a: Action, n: State| out.push((a, self.canonical(n)));
        // SQS: receive, duplicate delivery, redrive.
        for (m, msg) in s.queue.iter().enumerate() {
            let (receives, duplicate) = match *msg {
                Msg::Visible { receives } => (receives, false),
                Msg::InFlight { receives, .. } if s.budget.duplicates > 0 => (receives, true),
                _ => continue,
            };
            if !duplicate && c.max_receives.is_some_and(|max| receives >= max) {
                let mut n = s.clone();
                n.queue[m] = Msg::Dlq;
                push(Action::Redrive(m as u8), n);
                continue;
            }
            for w in 0..s.workers.len() {
                // A bound: a worker starts no new invocation while a request of its last one is
                // still on the wire (else requests pile up without end when no redrive policy
                // bounds the receives).
                if s.workers[w] != Job::Idle || s.net.iter().any(|p| usize::from(p.worker) == w) {
                    continue;
                }
                let mut n = s.clone();
                if duplicate {
                    n.budget.duplicates -= 1;
                }
                let receives = if c.max_receives.is_some() {
                    receives.saturating_add(1)
                } else {
                    0
                };
                n.queue[m] = Msg::InFlight {
                    visible_at: s.now + VISIBILITY,
                    receives,
                    failed: false,
                };
                let deadline = s.now + DEADLINE;
                let now = self.clock(s, w);
                let req = match c.mode {
                    Mode::OneShot | Mode::Packed => {
                        Req::OneShot(m as u8, now, Self::ttl(now, c.done_ttl))
                    }
                    Mode::Claimed
                    | Mode::Tiered
                    | Mode::TwoStepOneShot
                    | Mode::TieredTwoStepOneShot => self.claim_req(m as u8, now, deadline),
                };
                Self::send(&mut n, w, req);
                n.workers[w] = Job::Waiting {
                    msg: m as u8,
                    deadline,
                    req,
                    retried: false,
                };
                push(Action::Receive(w as u8, m as u8), n);
            }
        }
        if c.mode == Mode::Packed {
            self.receive_batches(s, &mut push);
        }
        // The wire.
        for (i, p) in s.net.iter().enumerate() {
            if i > 0 && s.net[i - 1] == *p {
                continue;
            }
            match p.answer {
                None => {
                    let mut n = s.clone();
                    let ans = self.apply(&mut n, p.req);
                    if p.orphan {
                        n.net.remove(i);
                    } else {
                        n.net[i].answer = Some(ans);
                    }
                    push(Action::Apply(*p), n);
                    if s.budget.contention > 0 {
                        for ans in self.contended(s, p.req) {
                            let mut n = s.clone();
                            n.budget.contention -= 1;
                            if p.orphan {
                                n.net.remove(i);
                            } else {
                                n.net[i].answer = Some(ans);
                            }
                            push(Action::Contend(*p), n);
                        }
                    }
                }
                Some(ans) => {
                    let w = usize::from(p.worker);
                    let mut n = s.clone();
                    n.net.remove(i);
                    self.handle(&mut n, w, Some(ans), false);
                    push(Action::Deliver(*p), n);
                    let contended = matches!(
                        ans,
                        Ans::Contention
                            | Ans::Pack(Part::Contention, _)
                            | Ans::Pack(_, Part::Contention)
                    );
                    if contended {
                        let mut n = s.clone();
                        n.net.remove(i);
                        self.handle(&mut n, w, Some(ans), true);
                        push(Action::GiveUp(*p), n);
                    }
                    // A claim held elsewhere, its lease waited out (once per attempt).
                    if let Job::Waiting {
                        msg,
                        deadline,
                        req: Req::Claim(..),
                        retried: false,
                    } = s.workers[w]
                        && ans == Ans::Held
                        && c.wait_out_leases
                    {
                        let mut n = s.clone();
                        n.net.remove(i);
                        n.workers[w] = Job::Held { msg, deadline };
                        push(Action::WaitOut(*p), n);
                    }
                    // A cancelled write wrote nothing: its duplicate on the wire is a second
                    // request, like any other.
                    if s.budget.faults > 0 {
                        let mut n = s.clone();
                        n.budget.faults -= 1;
                        self.apply(&mut n, p.req);
                        push(Action::Duplicate(*p), n);
                    }
                }
            }
            if s.budget.faults > 0 {
                let mut n = s.clone();
                n.budget.faults -= 1;
                n.net.remove(i);
                push(Action::Drop(*p), n);
            }
        }
        // The workers.
        for w in 0..s.workers.len() {
            match s.workers[w] {
                Job::Idle => {}
                Job::Waiting { .. } | Job::Batch { .. } | Job::Extending { .. } => {
                    let live = s
                        .net
                        .iter()
                        .any(|p| usize::from(p.worker) == w && !p.orphan);
                    if !live || s.budget.faults > 0 {
                        let mut n = s.clone();
                        if live {
                            n.budget.faults -= 1;
                        }
                        Self::orphan(&mut n, w);
                        self.handle(&mut n, w, None, false);
                        push(Action::Timeout(w as u8), n);
                    }
                }

                Job::Held { msg, deadline } => {
                    // The other lease waited out (or not: at any time, a claim like any other).
                    let mut n = s.clone();
                    let req = self.claim_req(msg, self.clock(s, w), deadline);
                    Self::send(&mut n, w, req);
                    n.workers[w] = Job::Waiting {
                        msg,
                        deadline,
                        req,
                        retried: true,
                    };
                    push(Action::ClaimAgain(w as u8), n);
                }
                Job::Running {
                    msg,
                    deadline,
                    token,
                    judged_at,
                    extended,
                } => {
                    // The handler still runs: its lease extended (a bounded number of times).
                    if c.lease.is_some() && extended < c.extensions {
                        let mut n = s.clone();
                        let now = self.clock(s, w);
                        let req = Req::Extend(
                            msg,
                            token,
                            now,
                            self.lease_until(now, deadline),
                            Self::ttl(now, c.claim_ttl),
                        );
                        Self::send(&mut n, w, req);
                        n.workers[w] = Job::Extending {
                            msg,
                            deadline,
                            token,
                            judged_at,
                            extended: extended + 1,
                            req,
                        };
                        push(Action::Extend(w as u8), n);
                    }
                    for (a, n) in self.handler_ends(s, w) {
                        push(a, n);
                    }
                }
            }
            // The handler ends while an extension is on the wire: the extension is left to
            // land or not, its answer unread (the library drops the extending future).
            if let Job::Extending { .. } = s.workers[w] {
                let mut n = s.clone();
                Self::orphan(&mut n, w);
                for (a, n) in self.handler_ends(&n, w) {
                    push(a, n);
                }
            }
            if s.workers[w] != Job::Idle && s.budget.crashes > 0 {
                let mut n = s.clone();
                n.budget.crashes -= 1;
                n.workers[w] = Job::Idle;
                Self::orphan(&mut n, w);
                push(Action::Crash(w as u8), n);
            }
            if s.budget.clock_jumps > 0 {
                for by in [-TICK, TICK] {
                    let mut n = s.clone();
                    n.budget.clock_jumps -= 1;
                    n.drifts[w] += by;
                    push(Action::ClockJump(w as u8, by), n);
                }
            }
        }
        // SQS: a message reported failed shows again early (the library's backoff).
        for (m, msg) in s.queue.iter().enumerate() {
            if let Msg::InFlight {
                receives,
                failed: true,
                ..
            } = *msg
                && s.budget.early_redeliveries > 0
            {
                let mut n = s.clone();
                n.queue[m] = Msg::Visible { receives };
                n.budget.early_redeliveries -= 1;
                if n.budget.early_redeliveries == 0 {
                    // No longer told apart: one state, one spelling.
                    for msg in n.queue.iter_mut() {
                        if let Msg::InFlight { failed, .. } = msg {
                            *failed = false;
                        }
                    }
                }
                push(Action::EarlyRedelivery(m as u8), n);
            }
        }
        let mut n = s.clone();
        self.tick(&mut n);
        push(Action::Tick, n);
    }

    fn invariants(&self) -> Vec<Property<State>> {
        vec![
            (property::NO_EFFECT_TWICE, |s| !s.broken.effect_twice),
            (property::NO_MESSAGE_LOST, |s| !s.broken.lost),
            (property::STALE_NEVER_WRITES, |s| !s.broken.stale),
            (property::NOT_OVERWRITTEN, |s| !s.broken.overwritten),
            (property::DUPLICATE_NEVER_RUNS, |s| !s.broken.duplicate_ran),
            (property::LOST_OWNER_NEVER_COMMITS, |s| {
                !s.broken.lost_owner_committed
            }),
        ]
    }

    fn goals(&self) -> Vec<Property<State>> {
        vec![(property::EVENTUALLY_DONE, |s| {
            s.queue.iter().all(|m| matches!(m, Msg::Deleted | Msg::Dlq))
        })]
    }
}
