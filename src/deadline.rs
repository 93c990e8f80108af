//! The time budget of one invocation: cut-off arithmetic from the Lambda context, and the clock
//! it all reads. (How long a claim is held, the lease, is a claim policy: [`crate::claim::Lease`].)
//!
//! Lambda gives each invocation a deadline (epoch milliseconds). A claim's lease never lasts
//! past it (under the default, extended lease: a share of the time left, extended while the
//! handler runs): if the function is killed, the lease lapses soon after, by the deadline at
//! the latest, and a redelivery can take the message over.
//!
//! Two instants before the deadline bound the work, so the invocation always returns a partial
//! batch response instead of timing out (a timeout would redeliver the whole batch, including
//! what already succeeded, and leave every claim in flight held until its lease lapses):
//!
//! ```text
//!  start ─────────────── cut-off ─────────── hard stop ──── deadline
//!                        (deadline − margin)  (deadline − answer reserve)
//!   messages start        nothing new starts   every step still in flight is cut off,
//!                                              the answer is sent
//! ```
//!
//! `Budget::bounded` races a step against the hard stop; the processor runs every step through
//! it (claim, handler, completion with its retries, release, and the steps after the batch).
//! The budget is time alone: what the steps count (store latencies, conflicts, retries) is the
//! batch's `BatchStats` (`metrics.rs`), passed beside it.

use std::time::{Duration, SystemTime};

/// Where the processor reads the time.
///
/// [`Clock::system`] (the default) is the wall clock, which the Lambda deadline is expressed
/// in. [`Clock::tokio`] follows tokio's clock, so tests can drive leases and deadlines with
/// `tokio::time::pause()` and `advance()` instead of sleeping.
#[derive(Debug, Clone)]
pub struct Clock(ClockKind);

#[derive(Debug, Clone)]
enum ClockKind {
    System,
    Tokio,
}

/// The one pairing of wall time and a monotonic instant that every [`Clock::tokio`] maps
/// through, taken the first time one is made. Two tokio clocks made at different moments then
/// read the same time: each clock taking its own pairing would put them apart by the real time
/// between their creations, which paused tokio time does not see.
fn tokio_anchor() -> (SystemTime, std::time::Instant) {
    static ANCHOR: std::sync::OnceLock<(SystemTime, std::time::Instant)> =
        std::sync::OnceLock::new();
    *ANCHOR.get_or_init(|| (SystemTime::now(), std::time::Instant::now()))
}

impl Clock {
    /// The system wall clock.
    pub fn system() -> Self {
        Clock(ClockKind::System)
    }

    /// A clock that advances with tokio's clock (`tokio::time::Instant`), expressed as wall
    /// time: it reads the wall time of the moment the first tokio clock of the process was
    /// made, plus how far tokio's clock has moved since. Under `tokio::time::pause()` it stands
    /// still until time is advanced. Every tokio clock in a process reads the same time, so a
    /// test may make one for the processor and another for the deadlines it builds. Read it
    /// inside a tokio runtime.
    pub fn tokio() -> Self {
        tokio_anchor();
        Clock(ClockKind::Tokio)
    }

    /// The current time.
    pub fn now(&self) -> SystemTime {
        match &self.0 {
            ClockKind::System => SystemTime::now(),
            ClockKind::Tokio => {
                let (system, instant) = tokio_anchor();
                let now = tokio::time::Instant::now().into_std();
                match now.checked_duration_since(instant) {
                    Some(since) => system + since,
                    // A runtime paused before the anchor was taken reads earlier than it.
                    None => system - instant.duration_since(now),
                }
            }
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

/// The longest lease or TTL the processor adds to the clock: 100 years. A longer one is capped,
/// so a huge configured value (`SQS_CLAIM_TTL_SECS=18446744073709551615`) means "practically
/// forever" instead of overflowing `SystemTime` and panicking in the middle of a batch.
pub(crate) const MAX_SPAN: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `t + d`, with `d` capped at [`MAX_SPAN`]. `t` is the clock's current time, and 100 years
/// from now fits in `SystemTime` on every platform, so this cannot overflow.
pub(crate) fn after(t: SystemTime, d: Duration) -> SystemTime {
    t + d.min(MAX_SPAN)
}

/// Deadlines below this (2001-09-09 in epoch milliseconds) are read as relative budgets.
pub(crate) const EPOCH_DEADLINE_FLOOR_MS: u64 = 1_000_000_000_000;

/// The hard stop as a future every step can race: one timer per invocation, shared. (A tokio
/// timeout per step would put a timer into every step's future, making each message's future
/// kilobytes larger for the scheduler to move around.) Created on first poll, so building a
/// budget needs no runtime.
type Stop = futures::future::Shared<futures::future::BoxFuture<'static, ()>>;

/// The time budget of one invocation.
#[derive(Clone)]
pub(crate) struct Budget {
    clock: Clock,
    /// The Lambda deadline, if the context has one.
    deadline: Option<SystemTime>,
    /// No message starts at or after this time.
    cutoff: Option<SystemTime>,
    /// Every step still in flight is cut off at this instant (tokio's clock, so paused-time
    /// tests drive it), leaving the answer reserve to send the response.
    hard_stop: Option<tokio::time::Instant>,
    /// Completes at `hard_stop`.
    stop: Option<Stop>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("deadline", &self.deadline)
            .field("cutoff", &self.cutoff)
            .field("hard_stop", &self.hard_stop)
            .finish()
    }
}

/// A step raced against the budget did not finish before the hard stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutOfTime;

impl Budget {
    /// `deadline_ms` is `Context::deadline`: epoch milliseconds, 0 meaning "no deadline" (as in
    /// `Context::default()`, used outside Lambda). A deadline already in the past is a real
    /// deadline that has passed: nothing starts.
    ///
    /// A value below [`EPOCH_DEADLINE_FLOOR_MS`] (before 2001) cannot be the epoch deadline of a
    /// real invocation: local emulators send a relative budget there (`cargo lambda watch`
    /// sends `600000`), so it is read as milliseconds from now.
    ///
    /// `reserve` is kept back from the deadline to send the answer: the hard stop is
    /// `deadline - reserve`.
    pub(crate) fn new(clock: Clock, deadline_ms: u64, margin: Duration, reserve: Duration) -> Self {
        let deadline = match deadline_ms {
            0 => None,
            ms if ms < EPOCH_DEADLINE_FLOOR_MS => {
                tracing::debug!(
                    deadline_ms = ms,
                    "deadline is not an epoch time (local emulator?): reading it as relative"
                );
                Some(clock.now() + Duration::from_millis(ms))
            }
            ms => Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
        };
        let cutoff = deadline.map(|d| d.checked_sub(margin).unwrap_or(SystemTime::UNIX_EPOCH));
        // The wall-clock deadline, turned once into an instant of tokio's monotonic clock: a
        // wall clock stepped back or forth mid-invocation must not move the hard stop.
        let now = clock.now();
        let hard_stop = deadline.map(|d| {
            let left = d.duration_since(now).unwrap_or(Duration::ZERO);
            tokio::time::Instant::now() + left.saturating_sub(reserve)
        });
        let stop = hard_stop.map(|at| {
            use futures::FutureExt;
            async move { tokio::time::sleep_until(at).await }
                .boxed()
                .shared()
        });
        Budget {
            clock,
            deadline,
            cutoff,
            hard_stop,
            stop,
        }
    }

    /// The instant every step still in flight is cut off (`None`: no deadline).
    pub(crate) fn hard_stop(&self) -> Option<tokio::time::Instant> {
        self.hard_stop
    }

    /// Runs `step` until it finishes or the hard stop comes, whichever is first. A step cut off
    /// is dropped (cancelled) where it stands.
    pub(crate) async fn bounded<F: std::future::Future>(
        &self,
        step: F,
    ) -> Result<F::Output, OutOfTime> {
        use futures::future::{Either, select};
        match &self.stop {
            None => Ok(step.await),
            // `select` polls the step first: a step that is ready is never cut off.
            Some(stop) => match select(std::pin::pin!(step), stop.clone()).await {
                Either::Left((output, _)) => Ok(output),
                Either::Right(((), _)) => Err(OutOfTime),
            },
        }
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.clock.now()
    }

    /// Whether a message may still start now.
    pub(crate) fn may_start(&self) -> bool {
        self.cutoff.is_none_or(|c| self.now() < c)
    }

    /// The invocation's deadline, if it has one.
    pub(crate) fn deadline(&self) -> Option<SystemTime> {
        self.deadline
    }

    /// The instant from which no message starts (the deadline less the margin), if there is
    /// a deadline.
    pub(crate) fn cutoff(&self) -> Option<SystemTime> {
        self.cutoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_deadline_means_none() {
        let b = Budget::new(Clock::system(), 0, Duration::from_secs(2), Duration::ZERO);
        assert!(b.may_start());
        assert_eq!(b.deadline(), None);
    }

    #[test]
    fn past_deadline_means_expired() {
        // 1 ms: read as a relative budget, already smaller than the margin.
        let b = Budget::new(Clock::system(), 1, Duration::from_secs(2), Duration::ZERO);
        assert!(!b.may_start());
    }

    #[test]
    fn past_epoch_deadline_means_expired() {
        let past = crate::store::epoch_millis(SystemTime::now()) as u64 - 1;
        let b = Budget::new(Clock::system(), past, Duration::ZERO, Duration::ZERO);
        assert!(!b.may_start());
    }

    #[test]
    fn emulator_relative_deadline_is_read_from_now() {
        // `cargo lambda watch` sends a fixed 600000.
        let b = Budget::new(
            Clock::system(),
            600_000,
            Duration::from_secs(2),
            Duration::ZERO,
        );
        assert!(b.may_start());
        let now = b.now();
        let deadline = b.deadline().expect("a deadline");
        assert!(
            deadline > now + Duration::from_secs(590) && deadline <= now + Duration::from_secs(600)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cutoff_is_margin_before_deadline() {
        let clock = Clock::tokio();
        let now = crate::store::epoch_millis(clock.now()) as u64;
        let b = Budget::new(clock, now + 10_000, Duration::from_secs(2), Duration::ZERO);
        assert!(b.may_start());
        tokio::time::advance(Duration::from_millis(7_999)).await;
        assert!(b.may_start());
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(!b.may_start());
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_cuts_a_step_off_at_deadline_minus_reserve() {
        let clock = Clock::tokio();
        let now = crate::store::epoch_millis(clock.now()) as u64;
        let b = Budget::new(
            clock,
            now + 1_000,
            Duration::from_millis(500),
            Duration::from_millis(200),
        );
        let start = tokio::time::Instant::now();
        let r = b.bounded(std::future::pending::<()>()).await;
        assert_eq!(r, Err(OutOfTime));
        assert_eq!(start.elapsed(), Duration::from_millis(800));
        assert_eq!(
            b.bounded(async { 7 }).await,
            Ok(7),
            "a ready step is not cut off"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_deadline_means_no_hard_stop() {
        let b = Budget::new(
            Clock::tokio(),
            0,
            Duration::from_secs(2),
            Duration::from_millis(250),
        );
        assert!(b.hard_stop().is_none());
        assert_eq!(b.bounded(async { 1 }).await, Ok(1));
    }

    /// A test builds the processor's clock and, later, the clock it computes deadlines with.
    /// Under paused time both must read the same instant, however much real time passed
    /// between (a loaded CI machine once put them 1 ms apart and a `Retry-After` read 31).
    #[tokio::test(start_paused = true)]
    async fn tokio_clocks_made_apart_in_real_time_read_the_same_time() {
        let first = Clock::tokio();
        std::thread::sleep(Duration::from_millis(20));
        let second = Clock::tokio();
        assert_eq!(first.now(), second.now());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(first.now(), second.now());
        let wall = SystemTime::now();
        let read = first.now();
        let apart = wall.duration_since(read).unwrap_or_else(|e| e.duration());
        assert!(
            apart < Duration::from_secs(60),
            "{apart:?} from the wall clock"
        );
    }
}
