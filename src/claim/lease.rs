//! How long a claim is held: [`Lease`].

use std::time::{Duration, SystemTime};

use crate::deadline::after;

/// How long a claim is held before another worker may take it over: a short lease its owner
/// extends while the handler runs (the default), "until this invocation's deadline", or "at
/// least this long" (for handlers that must not run again for a while after a timeout).
///
/// | policy | lease of a claim taken at `now` | after a crash or timeout, the key runs again | trade-off |
/// |--------|---------------------------------|-----------------------------------------------|-----------|
/// | [`Lease::extended(fallback)`](Lease::extended) (default, fallback 5 min) | a quarter of the time left to the deadline (at least 2 s, never past it), extended by the owner while its handler runs; `fallback`, extended so, when there is no deadline | soon after the owner stopped: a processor's retry that meets the claim waits out the rest of its short lease and takes the key over (a stream's retry comes at once: the crash costs one retry); the idempotency layer answers "in progress" unless it waits ([`IdempotencyBuilder::wait_in_progress`](crate::idempotency::IdempotencyBuilder::wait_in_progress)) | a handler killed midway runs again sooner; a handler that runs past half its lease costs one conditional write per half lease; an owner whose extension is refused (taken over) or unanswered until its lease ends is stopped, its result discarded and nothing committed |
/// | [`Lease::until_deadline(fallback)`](Lease::until_deadline) (fallback 5 min) | the invocation's deadline; `now + fallback` when there is none (outside Lambda) | as soon as the next delivery arrives after the deadline | a stream's retry comes before it: each is answered "held elsewhere" until the deadline has passed, so a crash costs a stream several retries |
/// | [`Lease::at_least(d)`](Lease::at_least) | the later of the deadline and `now + d` | not before `now + d`, even if the invocation died at once | every redelivery before then is answered "held elsewhere" and retried; if visibility timeout × `maxReceiveCount` is shorter than `d`, the message reaches the dead-letter queue before the lease lapses; on a stream, every retry before `now + d` fails and the shard waits |
///
/// Inside Lambda a handler still running is never overtaken by a second worker: under
/// [`Lease::extended`] its owner keeps the lease ahead of it (and, if it cannot, stops the
/// handler before anything is committed), under the other two the lease outlasts the deadline.
/// [`Lease::extended`] needs a store that extends leases
/// ([`Capabilities::extends_leases`](crate::store::Capabilities::extends_leases): every store
/// of this crate); on another store it is [`Lease::until_deadline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease(LeaseKind);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseKind {
    Extended { fallback: Duration },
    UntilDeadline { fallback: Duration },
    AtLeast(Duration),
}

/// The shortest extended lease: what a claim gets however little time is left, so that an
/// extension (one conditional write) has half of it to be answered.
pub(crate) const MIN_EXTENDED: Duration = Duration::from_secs(2);

/// The share of the time left to the deadline an extended lease covers at a time.
const EXTENDED_SHARE: u32 = 4;

impl Default for Lease {
    fn default() -> Self {
        Lease::extended(Duration::from_secs(300))
    }
}

impl Lease {
    /// A short lease the owner extends while its handler runs (the default, fallback 5
    /// minutes): a quarter of the time left to the invocation's deadline, at least 2 s and
    /// never past the deadline; `fallback` when the invocation has no deadline (local runs,
    /// `Context::default()`). When half of it is left and the handler still runs, the owner
    /// extends it by as much again (one conditional write, fenced by its token). So a worker
    /// that died holds its keys a few seconds at most, and a live one is never taken over.
    pub fn extended(fallback: Duration) -> Self {
        Lease(LeaseKind::Extended { fallback })
    }

    /// Until the invocation's deadline, the moment a dead or timed-out worker's claim can no
    /// longer be running; `fallback` from the claim when the invocation has no deadline (local
    /// runs, `Context::default()`). Never extended. What a claim on a store that does not
    /// extend leases gets.
    pub fn until_deadline(fallback: Duration) -> Self {
        Lease(LeaseKind::UntilDeadline { fallback })
    }

    /// At least `duration` from the claim, inside Lambda too: the claim of a worker that dies
    /// or times out keeps every other worker off the key for `duration` (never less than the
    /// invocation's deadline). Never extended. See the table above for what it costs.
    pub fn at_least(duration: Duration) -> Self {
        Lease(LeaseKind::AtLeast(duration))
    }

    /// This policy on a store that extends leases or not: [`Lease::extended`] becomes
    /// [`Lease::until_deadline`] with its fallback on a store that does not.
    pub(crate) fn on_store(self, extends: bool) -> Self {
        match self.0 {
            LeaseKind::Extended { fallback } if !extends => Lease::until_deadline(fallback),
            _ => self,
        }
    }

    /// Whether the owner extends claims under this policy.
    pub(crate) fn is_extended(&self) -> bool {
        matches!(self.0, LeaseKind::Extended { .. })
    }

    /// When a claim taken (or extended) at `now` lapses, given the invocation's deadline
    /// (`None` outside Lambda). Durations past 100 years are capped there.
    pub(crate) fn lease_until(&self, now: SystemTime, deadline: Option<SystemTime>) -> SystemTime {
        match (self.0, deadline) {
            (LeaseKind::Extended { .. }, Some(d)) => {
                let left = d.duration_since(now).unwrap_or(Duration::ZERO);
                let span = (left / EXTENDED_SHARE).max(MIN_EXTENDED);
                d.min(after(now, span))
            }
            (LeaseKind::Extended { fallback } | LeaseKind::UntilDeadline { fallback }, None) => {
                after(now, fallback)
            }
            (LeaseKind::UntilDeadline { .. }, Some(d)) => d,
            (LeaseKind::AtLeast(min), Some(d)) => d.max(after(now, min)),
            (LeaseKind::AtLeast(min), None) => after(now, min),
        }
    }
}

impl std::fmt::Display for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            LeaseKind::Extended { fallback } => write!(
                f,
                "a quarter of the time left, at least {MIN_EXTENDED:?}, extended while the \
                 handler runs ({fallback:?} without a deadline)"
            ),
            LeaseKind::UntilDeadline { fallback } => {
                write!(f, "until the deadline ({fallback:?} without one)")
            }
            LeaseKind::AtLeast(d) => write!(f, "at least {d:?}, deadline or not"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_deadline_is_the_deadline_or_the_fallback() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let deadline = now + Duration::from_secs(30);
        let lease = Lease::until_deadline(Duration::from_secs(3600));
        assert_eq!(lease.lease_until(now, Some(deadline)), deadline);
        assert_eq!(
            lease.lease_until(now, None),
            now + Duration::from_secs(3600)
        );
        assert!(matches!(lease.0, LeaseKind::UntilDeadline { .. }));
    }

    #[test]
    fn at_least_outlives_the_deadline_and_is_never_shorter_than_it() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let deadline = now + Duration::from_secs(30);
        let hour = Lease::at_least(Duration::from_secs(3600));
        assert_eq!(
            hour.lease_until(now, Some(deadline)),
            now + Duration::from_secs(3600)
        );
        assert_eq!(hour.lease_until(now, None), now + Duration::from_secs(3600));
        let short = Lease::at_least(Duration::from_secs(5));
        assert_eq!(
            short.lease_until(now, Some(deadline)),
            deadline,
            "a lease shorter than the deadline would let a second worker in while the first runs"
        );
        assert!(matches!(hour.0, LeaseKind::AtLeast(_)));
    }

    #[test]
    fn extended_is_a_quarter_of_the_time_left_at_least_two_seconds_never_past_the_deadline() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let lease = Lease::default();
        assert!(lease.is_extended());
        let in_60 = now + Duration::from_secs(60);
        assert_eq!(
            lease.lease_until(now, Some(in_60)),
            now + Duration::from_secs(15)
        );
        let in_4 = now + Duration::from_secs(4);
        assert_eq!(lease.lease_until(now, Some(in_4)), now + MIN_EXTENDED);
        let in_1 = now + Duration::from_secs(1);
        assert_eq!(
            lease.lease_until(now, Some(in_1)),
            in_1,
            "never past the deadline"
        );
        assert_eq!(
            lease.lease_until(now + Duration::from_secs(9), Some(in_1)),
            in_1
        );
        assert_eq!(lease.lease_until(now, None), now + Duration::from_secs(300));
        assert_eq!(
            lease.on_store(false),
            Lease::until_deadline(Duration::from_secs(300))
        );
        assert_eq!(lease.on_store(true), lease);
        let hour = Lease::at_least(Duration::from_secs(3600));
        assert_eq!(hour.on_store(false), hour);
        assert!(!hour.is_extended());
    }
}
