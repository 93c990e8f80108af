//! How long a claim is held: [`Lease`].

use std::time::{Duration, SystemTime};

use crate::deadline::after;

/// How long a claim is held before another worker may take it over: the choice between
/// "until this invocation's deadline" (the default) and "at least this long" (for handlers that
/// must not run again for a while after a timeout).
///
/// | policy | lease of a claim taken at `now` | after a crash or timeout, the key runs again | trade-off |
/// |--------|---------------------------------|-----------------------------------------------|-----------|
/// | [`Lease::until_deadline(fallback)`](Lease::until_deadline) (default, fallback 5 min) | the invocation's deadline; `now + fallback` when there is none (outside Lambda) | as soon as the next delivery arrives after the deadline | a handler killed midway may run again seconds later: its side effects must be safe to repeat after a crash (pass the key to the provider) |
/// | [`Lease::at_least(d)`](Lease::at_least) | the later of the deadline and `now + d` | not before `now + d`, even if the invocation died at once | every redelivery before then is answered "held elsewhere" and retried; if visibility timeout × `maxReceiveCount` is shorter than `d`, the message reaches the dead-letter queue before the lease lapses |
///
/// A lease is never shorter than the invocation's deadline: inside Lambda, a handler still
/// running is never overtaken by a second worker. Without a deadline (local runs,
/// `Context::default()`) nothing stops a handler at the fallback: keep the fallback above the
/// longest handler run, or a second caller may take the key over while the first still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease(LeaseKind);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseKind {
    UntilDeadline { fallback: Duration },
    AtLeast(Duration),
}

impl Default for Lease {
    fn default() -> Self {
        Lease::until_deadline(Duration::from_secs(300))
    }
}

impl Lease {
    /// Until the invocation's deadline, the moment a dead or timed-out worker's claim can no
    /// longer be running; `fallback` from the claim when the invocation has no deadline (local
    /// runs, `Context::default()`). The default, with a 5-minute fallback.
    pub fn until_deadline(fallback: Duration) -> Self {
        Lease(LeaseKind::UntilDeadline { fallback })
    }

    /// At least `duration` from the claim, inside Lambda too: the claim of a worker that dies
    /// or times out keeps every other worker off the key for `duration` (never less than the
    /// invocation's deadline). See the table above for what it costs.
    pub fn at_least(duration: Duration) -> Self {
        Lease(LeaseKind::AtLeast(duration))
    }

    /// When a claim taken at `now` lapses, given the invocation's deadline (`None` outside
    /// Lambda). Durations past 100 years are capped there.
    pub(crate) fn lease_until(&self, now: SystemTime, deadline: Option<SystemTime>) -> SystemTime {
        match (self.0, deadline) {
            (LeaseKind::UntilDeadline { .. }, Some(d)) => d,
            (LeaseKind::UntilDeadline { fallback }, None) => after(now, fallback),
            (LeaseKind::AtLeast(min), Some(d)) => d.max(after(now, min)),
            (LeaseKind::AtLeast(min), None) => after(now, min),
        }
    }
}

impl std::fmt::Display for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
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
}
