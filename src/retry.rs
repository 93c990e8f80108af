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
/// use sqs_claim::retry::RetryPolicy;
///
/// // 3 retries after the first attempt, from 50 ms, never more than 1 s apart.
/// let policy = RetryPolicy::new(3, Duration::from_millis(50)).with_cap(Duration::from_secs(1));
/// assert_eq!(policy.max_retries(), 3);
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

    /// Retries after the first attempt.
    pub const fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The delay before retry number `retry` (0 for the first retry), jitter included.
    pub fn delay(&self, retry: u32) -> Duration {
        let step = self
            .first
            .saturating_mul(2u32.saturating_pow(retry.min(31)))
            .min(self.cap);
        // Equal jitter: at least half the step, so a retry never comes back at once.
        let half = step / 2;
        let nanos = u64::try_from((step - half).as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(fastrand::u64(0..=nanos))
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

impl Default for RetryPolicy {
    /// 3 retries from 50 ms, capped at 2 s.
    fn default() -> Self {
        RetryPolicy::new(3, Duration::from_millis(50))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
