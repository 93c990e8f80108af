//! The store contract as a value: one record per key, and the contract's operations (claim,
//! extend, complete, release, one-shot, packed one-shot), each one atomic step.
//!
//! Times are milliseconds on the caller's clock (the contract's `now`). Keys and tokens are
//! small numbers: the protocol model renames tokens to keep its state space finite, and the
//! model-based test maps them to the real stores' keys and tokens.

use crate::Mutant;

/// A time in milliseconds (relative to whatever origin the caller uses).
pub type Millis = i32;

/// An owner token: distinct for every successful claim that coexists with another.
pub type Token = u8;

/// A time later than any the model reaches (a TTL beyond the horizon: 24 hours).
pub const NEVER: Millis = Millis::MAX;

/// How a store keeps a record's expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExpiryUnit {
    /// To the millisecond (memory, SQLite, PostgreSQL, Redis).
    Millis,
    /// In whole seconds, rounded up (DynamoDB's TTL attribute): a record may count for up to a
    /// second longer than asked, never less.
    Seconds,
}

/// The record's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Claimed: a worker runs the handler.
    InProgress,
    /// Completed: the effects are committed.
    Completed,
}

/// One stored record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record {
    /// In progress or completed.
    pub status: Status,
    /// The token of the claim that wrote it.
    pub token: Token,
    /// While in progress: when the lease lapses.
    pub lease_until: Option<Millis>,
    /// When the record stops counting, as stored (rounded up to a second by a store that keeps
    /// seconds).
    pub expires_at: Millis,
    /// When the writer asked it to stop counting (to the millisecond): what "before it
    /// expires" means in the properties. Not part of what a store answers.
    pub asked_expires_at: Millis,
}

/// What a claim asks (the contract's `ClaimRequest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// The key's number.
    pub key: u8,
    /// The caller's clock.
    pub now: Millis,
    /// When the claim's lease lapses.
    pub lease_until: Millis,
    /// When the record stops counting.
    pub expires_at: Millis,
}

/// The answer to a claim (the contract's `Claim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimAnswer {
    /// Acquired with this token.
    Acquired(Token),
    /// Already completed; the record's stored expiry.
    Completed {
        /// The stored expiry.
        expires_at: Millis,
    },
    /// Held by another claim until this time.
    HeldElsewhere {
        /// When the other lease lapses.
        lease_until: Option<Millis>,
    },
}

/// The answer to a one-shot write (the contract's `OneShotWrite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OneShotAnswer {
    /// Written completed, effects committed.
    Committed,
    /// A duplicate: nothing written.
    Completed {
        /// The stored expiry.
        expires_at: Millis,
    },
    /// Held elsewhere: nothing written.
    HeldElsewhere {
        /// When the other lease lapses.
        lease_until: Option<Millis>,
    },
}

/// The answer of a completion, an extension or a release: `Err(LostClaim)` is the contract's
/// only refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fenced {
    /// Done (or, for a completion, already done by this token: a no-op).
    Ok,
    /// The token no longer holds the key in progress: nothing changed.
    LostClaim,
}

/// One write's answer in a packed one-shot (the contract's `Packed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackedAnswer {
    /// This write's own answer.
    Answered(OneShotAnswer),
    /// Cancelled because of another write of the pack: nothing written, to be sent again.
    Unsent,
}

/// What a step did that the properties judge (ghost facts: no store reports them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Observed {
    /// The key's effects were committed.
    pub effects_applied: bool,
    /// The step wrote over a completed record whose asked expiry is after the caller's `now`.
    pub overwrote_live_completion: bool,
    /// A claim was acquired over a completed record that had not expired by the caller's
    /// clock: a duplicate would run the handler.
    pub acquired_over_completion: bool,
    /// A completion, extension or release was accepted for a token other than the key's
    /// latest claim.
    pub stale_accepted: bool,
    /// Effects were committed by a completion whose token is not the key's latest claim's: an
    /// owner that lost its claim (taken over, or its record gone) committed.
    pub lost_owner_committed: bool,
    /// The committed completion's asked expiry, when effects were applied.
    pub completion_expires_at: Option<Millis>,
}

/// The store: a record per key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Store {
    /// The records, by key number.
    pub records: Vec<Option<Record>>,
    /// The token of each key's latest successful claim (ghost: for the fencing property).
    pub latest: Vec<Option<Token>>,
    /// The next token to hand out.
    pub next_token: Token,
    /// How expiries are kept.
    pub unit: ExpiryUnit,
}

impl Store {
    /// An empty store of `keys` keys.
    pub fn new(keys: usize, unit: ExpiryUnit) -> Self {
        Store {
            records: vec![None; keys],
            latest: vec![None; keys],
            next_token: 1,
            unit,
        }
    }

    fn stored_expiry(&self, asked: Millis, mutant: Mutant) -> Millis {
        if asked == NEVER {
            return NEVER;
        }
        match self.unit {
            ExpiryUnit::Millis => asked,
            ExpiryUnit::Seconds if mutant == Mutant::ExpirySecondsRoundedDown => {
                asked.div_euclid(1000) * 1000
            }
            ExpiryUnit::Seconds => (asked + 999).div_euclid(1000) * 1000,
        }
    }

    /// What a claim of `req` finds if refused (`None`: the key is free).
    fn refusal(&self, req: &Request, mutant: Mutant) -> Option<ClaimAnswer> {
        let old = self.records[usize::from(req.key)]?;
        let expired = old.expires_at <= req.now;
        let lapsed_lease = old.lease_until.is_some_and(|l| l <= req.now);
        let lapsed = match mutant {
            Mutant::ClaimIgnoresLease => false,
            Mutant::ClaimIgnoresStatus => lapsed_lease,
            _ => old.status == Status::InProgress && lapsed_lease,
        };
        if expired || lapsed {
            return None;
        }
        Some(match old.status {
            Status::Completed => ClaimAnswer::Completed {
                expires_at: old.expires_at,
            },
            Status::InProgress => ClaimAnswer::HeldElsewhere {
                lease_until: old.lease_until,
            },
        })
    }

    fn fresh_token(&mut self) -> Token {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        token
    }

    fn overwrite_facts(&self, req: &Request, observed: &mut Observed) {
        if let Some(old) = self.records[usize::from(req.key)]
            && old.status == Status::Completed
            && old.asked_expires_at > req.now
        {
            observed.overwrote_live_completion = true;
        }
    }

    /// claim: acquires if the key is free, its record expired, or its lease lapsed.
    pub fn claim(&mut self, req: Request, mutant: Mutant) -> (ClaimAnswer, Observed) {
        let mut observed = Observed::default();
        if let Some(refused) = self.refusal(&req, mutant) {
            return (refused, observed);
        }
        self.overwrite_facts(&req, &mut observed);
        observed.acquired_over_completion = observed.overwrote_live_completion;
        // A claim's record never expires before its lease.
        let asked = req.expires_at.max(req.lease_until);
        let token = self.fresh_token();
        let k = usize::from(req.key);
        self.records[k] = Some(Record {
            status: Status::InProgress,
            token,
            lease_until: Some(req.lease_until),
            expires_at: self.stored_expiry(asked, mutant),
            asked_expires_at: asked,
        });
        self.latest[k] = Some(token);
        (ClaimAnswer::Acquired(token), observed)
    }

    /// complete: only the record's own token, in progress; the same token again after a
    /// success is a no-op success.
    pub fn complete(
        &mut self,
        key: u8,
        token: Token,
        expires_at: Millis,
        mutant: Mutant,
    ) -> (Fenced, Observed) {
        let mut observed = Observed::default();
        let k = usize::from(key);
        let Some(mut record) = self.records[k] else {
            return (Fenced::LostClaim, observed);
        };
        let owns = record.token == token || mutant == Mutant::UnfencedComplete;
        if !owns {
            return (Fenced::LostClaim, observed);
        }
        if record.status == Status::Completed {
            if mutant == Mutant::RetryReappliesEffects {
                observed.effects_applied = true;
                observed.completion_expires_at = Some(record.asked_expires_at);
            }
            return (Fenced::Ok, observed);
        }
        observed.stale_accepted = self.latest[k] != Some(token);
        observed.lost_owner_committed = observed.stale_accepted;
        observed.effects_applied = true;
        observed.completion_expires_at = Some(expires_at);
        record.status = Status::Completed;
        if mutant != Mutant::ClaimIgnoresStatus {
            record.lease_until = None;
        }
        record.expires_at = self.stored_expiry(expires_at, mutant);
        record.asked_expires_at = expires_at;
        self.records[k] = Some(record);
        (Fenced::Ok, observed)
    }

    /// extend: only for the record's own token, in progress (its lease lapsed or not: a lapsed
    /// lease nobody took over is still the owner's), the lease set to `lease_until` and the
    /// expiry to `expires_at`, or to `lease_until` if later. `now` is the caller's clock: the
    /// contract does not judge by it (a lapsed lease is extended all the same).
    pub fn extend(
        &mut self,
        key: u8,
        token: Token,
        _now: Millis,
        lease_until: Millis,
        expires_at: Millis,
        mutant: Mutant,
    ) -> (Fenced, Observed) {
        let mut observed = Observed::default();
        let k = usize::from(key);
        let Some(mut record) = self.records[k] else {
            return (Fenced::LostClaim, observed);
        };
        let owns = match mutant {
            Mutant::UnfencedExtend => record.status == Status::InProgress,
            Mutant::ExtendIgnoresStatus => record.token == token,
            _ => record.token == token && record.status == Status::InProgress,
        };
        if !owns {
            return (Fenced::LostClaim, observed);
        }
        observed.stale_accepted = self.latest[k] != Some(token);
        // The unfenced mutant writes the whole record for the caller's token (a put with no
        // token condition): the owner it fenced off holds the key again.
        record.token = token;
        record.lease_until = Some(lease_until);
        let asked = expires_at.max(lease_until);
        record.expires_at = self.stored_expiry(asked, mutant);
        // The asked expiry (a ghost) of a completed record stays its completion's: that is
        // when it should stop counting.
        if record.status == Status::InProgress {
            record.asked_expires_at = asked;
        }
        self.records[k] = Some(record);
        (Fenced::Ok, observed)
    }

    /// release: deletes the record only for its own token, in progress.
    pub fn release(&mut self, key: u8, token: Token, mutant: Mutant) -> (Fenced, Observed) {
        let mut observed = Observed::default();
        let k = usize::from(key);
        match self.records[k] {
            Some(r)
                if r.status == Status::InProgress
                    && (r.token == token || mutant == Mutant::UnfencedRelease) =>
            {
                observed.stale_accepted = self.latest[k] != Some(token);
                self.records[k] = None;
                (Fenced::Ok, observed)
            }
            _ => (Fenced::LostClaim, observed),
        }
    }

    /// claim_completed: under the claim's condition, writes the record completed and commits
    /// the effects, in one step.
    pub fn claim_completed(&mut self, req: Request, mutant: Mutant) -> (OneShotAnswer, Observed) {
        let mut observed = Observed::default();
        match self.refusal(&req, mutant) {
            Some(ClaimAnswer::Completed { expires_at }) => {
                return (OneShotAnswer::Completed { expires_at }, observed);
            }
            Some(ClaimAnswer::HeldElsewhere { lease_until }) => {
                return (OneShotAnswer::HeldElsewhere { lease_until }, observed);
            }
            Some(ClaimAnswer::Acquired(_)) | None => {}
        }
        self.overwrite_facts(&req, &mut observed);
        let token = self.fresh_token();
        let k = usize::from(req.key);
        self.records[k] = Some(Record {
            status: Status::Completed,
            token,
            lease_until: None,
            expires_at: self.stored_expiry(req.expires_at, mutant),
            asked_expires_at: req.expires_at,
        });
        self.latest[k] = Some(token);
        observed.effects_applied = true;
        observed.completion_expires_at = Some(req.expires_at);
        (OneShotAnswer::Committed, observed)
    }

    /// A packed one-shot (one transaction, distinct keys): if every write's condition holds,
    /// all are written; otherwise nothing is, the refused writes get their own answers and the
    /// others [`PackedAnswer::Unsent`].
    pub fn claim_completed_packed(
        &mut self,
        reqs: &[Request],
        mutant: Mutant,
    ) -> (Vec<PackedAnswer>, Vec<Observed>) {
        let refusals: Vec<_> = reqs.iter().map(|r| self.refusal(r, mutant)).collect();
        if refusals.iter().any(Option::is_some) {
            let answers = refusals
                .into_iter()
                .map(|refusal| match refusal {
                    Some(ClaimAnswer::Completed { expires_at }) => {
                        PackedAnswer::Answered(OneShotAnswer::Completed { expires_at })
                    }
                    Some(ClaimAnswer::HeldElsewhere { lease_until }) => {
                        PackedAnswer::Answered(OneShotAnswer::HeldElsewhere { lease_until })
                    }
                    Some(ClaimAnswer::Acquired(_)) | None => PackedAnswer::Unsent,
                })
                .collect();
            return (answers, vec![Observed::default(); reqs.len()]);
        }
        reqs.iter()
            .map(|r| {
                let (answer, observed) = self.claim_completed(*r, mutant);
                (PackedAnswer::Answered(answer), observed)
            })
            .unzip()
    }

    /// Renames tokens by `rename` (the protocol model's canonical form).
    pub(crate) fn rename_tokens(&mut self, rename: &mut impl FnMut(Token) -> Token) {
        for r in self.records.iter_mut().flatten() {
            r.token = rename(r.token);
        }
        for t in self.latest.iter_mut().flatten() {
            *t = rename(*t);
        }
    }

    /// Moves every time `by` ms earlier, clamping at `floor` (the protocol model's
    /// relative time).
    pub(crate) fn shift(&mut self, by: Millis, floor: Millis) {
        let shift = |t: Millis| if t == NEVER { t } else { (t - by).max(floor) };
        for slot in &mut self.records {
            if let Some(r) = slot {
                r.lease_until = r.lease_until.map(shift);
                r.expires_at = shift(r.expires_at);
                r.asked_expires_at = shift(r.asked_expires_at);
                // Expired for every clock the model has: as good as deleted.
                if r.expires_at <= floor && r.asked_expires_at <= floor {
                    *slot = None;
                }
            }
        }
    }
}
