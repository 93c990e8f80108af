//! The one retry policy: how often, how long apart, and never past the time budget.
//!
//! Every loop of ours that retries (the processor's completion, the publisher's failed entries)
//! uses [`RetryPolicy`], and nothing else retries on top of it: the AWS SDK clients get an
//! explicit `RetryConfig` of their own for the calls they can see, and our loops retry only what
//! they cannot (a store client without retries of its own, entries that failed inside a `200`
//! answer). Stacked loops multiply: three retries over an SDK's three attempts are twelve calls.
//!
//! The delay before retry `n` is drawn uniformly from `[step/2, step]`, where
//! `step = min(cap, first · 2ⁿ)` ("equal jitter"): many Lambdas throttled at the same moment
//! must not come back in lockstep, and the cap keeps a long run of failures from sleeping for
//! minutes. A retry whose delay would end past the budget's hard stop is not attempted: the
//! caller gets the last error at once, while there is still time to answer.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How a failed call is retried. Cheap to copy.
///
/// ```
/// use std::time::Duration;
/// use sqs_claim::RetryPolicy;
///
/// // 3 retries after the first attempt, from 50 ms, never more than 1 s apart.
/// let policy = RetryPolicy::new(3, Duration::from_millis(50)).with_cap(Duration::from_secs(1));
/// assert_eq!(policy, RetryPolicy::new(3, Duration::from_millis(50)).with_cap(Duration::from_secs(1)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_retries: u32,
    first: Duration,
    cap: Duration,
}

impl RetryPolicy {
    /// At most `max_retries` retries after the first attempt, the first one `first_backoff`
    /// later (with jitter), doubling each time up to the cap (default 2 s).
    pub const fn new(max_retries: u32, first_backoff: Duration) -> Self {
        RetryPolicy {
            max_retries,
            first: first_backoff,
            cap: Duration::from_secs(2),
        }
    }

    /// No retries: one attempt.
    pub const fn none() -> Self {
        RetryPolicy::new(0, Duration::ZERO)
    }

    /// The longest delay between two attempts.
    pub const fn with_cap(mut self, cap: Duration) -> Self {
        self.cap = cap;
        self
    }

    /// The delay before retry number `retry` (0 for the first retry), jitter included.
    pub(crate) fn delay(&self, retry: u32) -> Duration {
        let step = self
            .first
            .saturating_mul(2u32.saturating_pow(retry.min(31)))
            .min(self.cap);
        equal_jitter(step, fastrand::f64())
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` refuses, runs out of
    /// retries, or the next retry would end past `stop_at`. `on_retry(retry, &error)` is called
    /// before each retry's delay (to log it).
    ///
    /// `stop_at` is the budget's hard stop (`None`: no deadline). The loop never sleeps past it;
    /// the caller still races the whole loop against the budget, since one attempt can hang.
    pub async fn retry<T, E, F, Fut>(
        &self,
        stop_at: Option<Instant>,
        mut op: F,
        retryable: impl Fn(&E) -> bool,
        mut on_retry: impl FnMut(u32, &E),
    ) -> Result<T, E>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut retry = 0;
        loop {
            match op(retry).await {
                Err(e) if retry < self.max_retries && retryable(&e) => {
                    let delay = self.delay(retry);
                    if stop_at.is_some_and(|at| Instant::now() + delay >= at) {
                        return Err(e);
                    }
                    on_retry(retry, &e);
                    // Boxed: allocated only when a retry happens, instead of a timer inside
                    // every caller's future.
                    Box::pin(tokio::time::sleep(delay)).await;
                    retry += 1;
                }
                other => return other,
            }
        }
    }
}

/// Equal jitter, the one rule both [`RetryPolicy`] and [`Backoff`] draw with: at least half of
/// `step`, plus `unit` (in `[0, 1]`) of the other half, so a retry never comes back at once and
/// callers that failed together spread out.
fn equal_jitter(step: Duration, unit: f64) -> Duration {
    let half = step / 2;
    half + (step - half).mul_f64(unit.clamp(0.0, 1.0))
}

impl Default for RetryPolicy {
    /// 3 retries from 50 ms, capped at 2 s.
    fn default() -> Self {
        RetryPolicy::new(3, Duration::from_millis(50))
    }
}

/// When a message reported for retry comes back: the visibility timeout it is given, from its
/// `ApproximateReceiveCount` (used by `Redelivery`, feature `sqs`). Cheap to copy.
///
/// The delay after receive `n` fails is drawn from `[step/2, step]`, where
/// `step = min(cap, first · factorⁿ⁻¹)` (equal jitter, as [`RetryPolicy`]): messages that
/// failed together (a provider down for everyone) do not come back in lockstep, and none comes
/// back sooner than half its step. The draw is a hash of the message id and the receive count,
/// so it differs between messages and is the same every time one message's delay is asked.
///
/// The default (30 s, doubling, at most 15 min) as a message sees it:
///
/// | receive that failed | 1 | 2 | 3 | 4 | 5 | 6 and later |
/// |---|---|---|---|---|---|---|
/// | delay before the next receive | 15–30 s | 30–60 s | 1–2 min | 2–4 min | 4–8 min | 7.5–15 min |
///
/// ```
/// use std::time::Duration;
/// use sqs_claim::Backoff;
///
/// let policy = Backoff::exponential(Duration::from_secs(10), Duration::from_secs(600));
/// assert_eq!(policy.step(1), Duration::from_secs(10));
/// assert_eq!(policy.step(3), Duration::from_secs(40));
/// assert_eq!(policy.step(20), Duration::from_secs(600));
/// assert_eq!(policy.receives_to_cap(), Some(7)); // 10 · 2⁶ = 640 s ≥ 600 s
/// let d = policy.delay(3, "a-message-id");
/// assert!(d >= Duration::from_secs(20) && d <= Duration::from_secs(40));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    factor: u32,
    cap: Duration,
    jitter: bool,
}

impl Backoff {
    /// The longest visibility timeout SQS accepts: 12 hours.
    pub(crate) const MAX: Duration = Duration::from_secs(12 * 3600);

    /// `first` after the first receive fails, doubling on each later one, at most `cap`
    /// (itself at most `Backoff::MAX`), with jitter.
    pub fn exponential(first: Duration, cap: Duration) -> Self {
        let cap = cap.min(Self::MAX);
        Backoff {
            first: first.min(cap),
            factor: 2,
            cap,
            jitter: true,
        }
    }

    /// The same delay after every receive, without jitter (at most `Backoff::MAX`).
    pub fn fixed(delay: Duration) -> Self {
        let delay = delay.min(Self::MAX);
        Backoff {
            first: delay,
            factor: 1,
            cap: delay,
            jitter: false,
        }
    }

    /// Multiply the step by `factor` per receive (default 2; values below 1 count as 1).
    pub fn factor(mut self, factor: u32) -> Self {
        self.factor = factor.max(1);
        self
    }

    /// With (the default for [`exponential`](Self::exponential)) or without jitter: without,
    /// the delay is the step itself.
    pub fn jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// The delay after the first failed receive, before jitter.
    pub fn first(&self) -> Duration {
        self.first
    }

    /// The longest delay.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The step after receive `receive_count` failed (1 for the first receive), before
    /// jitter: `min(cap, first · factor^(receive_count − 1))`.
    pub fn step(&self, receive_count: u32) -> Duration {
        let exponent = receive_count.saturating_sub(1).min(63);
        let mut step = self.first;
        for _ in 0..exponent {
            if step >= self.cap {
                break;
            }
            step = step.saturating_mul(self.factor);
        }
        step.min(self.cap)
    }

    /// The delay for message `message_id` after receive `receive_count` failed, jitter
    /// included (see the type's docs).
    pub fn delay(&self, receive_count: u32, message_id: &str) -> Duration {
        let step = self.step(receive_count);
        if !self.jitter {
            return step;
        }
        use std::hash::{Hash, Hasher};
        // `DefaultHasher::new` has fixed keys: the same draw in every process of one build.
        let mut h = std::hash::DefaultHasher::new();
        message_id.hash(&mut h);
        receive_count.hash(&mut h);
        let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
        equal_jitter(step, unit)
    }

    /// The first receive count whose step is the cap: a queue whose `maxReceiveCount` is
    /// lower moves a failing message to its DLQ before the backoff reaches its cap. `None`
    /// if the step never grows to it (a factor of 1 below the cap).
    pub fn receives_to_cap(&self) -> Option<u32> {
        (1..=64).find(|&n| self.step(n) >= self.cap)
    }

    /// The least total time a message failing on every receive spends waiting before receive
    /// `receives` (the sum of the half steps: the jitter's floor).
    pub fn least_wait_before(&self, receives: u32) -> Duration {
        (1..receives).fold(Duration::ZERO, |sum, n| {
            sum.saturating_add(if self.jitter {
                self.step(n) / 2
            } else {
                self.step(n)
            })
        })
    }
}

impl Default for Backoff {
    /// 30 s, doubling, at most 15 minutes, with jitter.
    fn default() -> Self {
        Backoff::exponential(Duration::from_secs(30), Duration::from_secs(15 * 60))
    }
}

/// What a handler's error says about its own retry: return it (or wrap your error in it) to
/// have the message come back after a given delay (a provider's `Retry-After`), or to mark the
/// failure permanent (with `FailureDestination::at_once`, feature `sqs`, it goes to the failure
/// destination on this receive). The processor finds it anywhere in the error's chain.
///
/// `Display` is its own short message; [`source`](std::error::Error::source) is your error.
///
/// ```
/// use std::time::Duration;
/// use sqs_claim::{Error, ErrorKind, Message};
/// use sqs_claim::Retry;
///
/// async fn handle(msg: Message) -> Result<(), sqs_claim::BoxError> {
///     let _ = msg;
///     // the provider answered 429 with `Retry-After: 120`
///     let busy = Error::new(ErrorKind::Other, "provider throttled the charge");
///     Err(Retry::after(Duration::from_secs(120), busy).into())
/// }
/// ```
#[derive(Debug)]
pub struct Retry {
    when: RetryWhen,
    source: crate::BoxError,
}

#[derive(Debug, Clone, Copy)]
enum RetryWhen {
    After(Duration),
    Never,
}

impl Retry {
    /// Come back after `delay` (at most 12 hours, SQS's limit), whatever the backoff policy
    /// says. Needs `ProcessorBuilder::redelivery` (feature `sqs`) to take effect.
    pub fn after(delay: Duration, source: impl Into<crate::BoxError>) -> Self {
        Retry {
            when: RetryWhen::After(delay.min(Backoff::MAX)),
            source: source.into(),
        }
    }

    /// A failure retrying cannot fix (the charge was declined for good).
    pub fn permanent(source: impl Into<crate::BoxError>) -> Self {
        Retry {
            when: RetryWhen::Never,
            source: source.into(),
        }
    }

    /// The delay asked for, if any.
    pub(crate) fn delay(&self) -> Option<Duration> {
        match self.when {
            RetryWhen::After(d) => Some(d),
            RetryWhen::Never => None,
        }
    }

    /// Whether the failure is marked permanent.
    pub(crate) fn is_permanent(&self) -> bool {
        matches!(self.when, RetryWhen::Never)
    }

    /// The first `Retry` in `err`'s chain (`err` itself included).
    pub(crate) fn in_chain<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Retry> {
        let mut next = Some(err);
        while let Some(e) = next {
            if let Some(ours) = e.downcast_ref::<Retry>() {
                return Some(ours);
            }
            next = e.source();
        }
        None
    }
}

impl std::fmt::Display for Retry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.when {
            RetryWhen::After(d) => write!(f, "retry after {} s", d.as_secs_f64()),
            RetryWhen::Never => f.write_str("permanent failure"),
        }
    }
}

impl std::error::Error for Retry {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter_in_the_upper_half() {
        let b = Backoff::default();
        let steps: Vec<u64> = (1..=8).map(|n| b.step(n).as_secs()).collect();
        assert_eq!(steps, [30, 60, 120, 240, 480, 900, 900, 900]);
        assert_eq!(b.receives_to_cap(), Some(6));
        assert_eq!(b.step(u32::MAX), Duration::from_secs(900));
        for n in 1..10 {
            for id in ["a", "b", "c", "0f6c7d3e-1b2a-4c5d-8e9f-000000000000"] {
                let d = b.delay(n, id);
                assert!(d >= b.step(n) / 2 && d <= b.step(n), "{n} {id} {d:?}");
                assert_eq!(d, b.delay(n, id), "the same draw each time");
            }
        }
        assert_ne!(b.delay(3, "a"), b.delay(3, "b"), "messages spread out");
        assert_eq!(
            Backoff::exponential(Duration::from_secs(1), Duration::from_secs(100 * 3600)).cap(),
            Backoff::MAX
        );
        let fixed = Backoff::fixed(Duration::from_secs(5));
        assert_eq!(fixed.delay(9, "x"), Duration::from_secs(5));
        assert_eq!(fixed.receives_to_cap(), Some(1));
        assert_eq!(
            b.least_wait_before(5),
            Duration::from_secs(15 + 30 + 60 + 120)
        );
    }

    #[test]
    fn a_retry_hint_is_found_anywhere_in_the_chain() {
        let inner = crate::Error::new(crate::ErrorKind::BadBody, "no");
        let hint = Retry::after(Duration::from_secs(7), inner);
        let outer = crate::Error::with_source(crate::ErrorKind::Other, "charge failed", hint);
        let found = Retry::in_chain(&outer).map(Retry::delay);
        assert_eq!(found, Some(Some(Duration::from_secs(7))));
        assert_eq!(
            crate::Error::kind_in_chain(&outer),
            Some(crate::ErrorKind::Other)
        );
        assert!(Retry::permanent("declined").is_permanent());
    }

    #[test]
    fn delay_doubles_with_jitter_and_cap() {
        let p =
            RetryPolicy::new(10, Duration::from_millis(100)).with_cap(Duration::from_millis(500));
        for _ in 0..200 {
            let d0 = p.delay(0);
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100));
            let d1 = p.delay(1);
            assert!(d1 >= Duration::from_millis(100) && d1 <= Duration::from_millis(200));
            let d9 = p.delay(9);
            assert!(d9 >= Duration::from_millis(250) && d9 <= Duration::from_millis(500));
            assert!(p.delay(u32::MAX) <= Duration::from_millis(500));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_max_retries() {
        let p = RetryPolicy::new(2, Duration::from_millis(10));
        let mut calls = 0;
        let r: Result<(), u32> = p
            .retry(
                None,
                |n| {
                    calls += 1;
                    async move { Err(n) }
                },
                |_| true,
                |_, _| {},
            )
            .await;
        assert_eq!(r, Err(2));
        assert_eq!(calls, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn never_sleeps_past_the_stop() {
        let p = RetryPolicy::new(100, Duration::from_millis(100)).with_cap(Duration::from_secs(1));
        let start = Instant::now();
        let stop = start + Duration::from_millis(1500);
        let r: Result<(), ()> = p
            .retry(Some(stop), |_| async { Err(()) }, |_| true, |_, _| {})
            .await;
        assert!(r.is_err());
        assert!(Instant::now() < stop, "slept past the stop");
    }

    #[tokio::test(start_paused = true)]
    async fn does_not_retry_what_is_not_retryable() {
        let p = RetryPolicy::default();
        let mut calls = 0;
        let r: Result<(), &str> = p
            .retry(
                None,
                |_| {
                    calls += 1;
                    async { Err("permanent") }
                },
                |_| false,
                |_, _| {},
            )
            .await;
        assert_eq!(r, Err("permanent"));
        assert_eq!(calls, 1);
    }
}
