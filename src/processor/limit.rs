//! The in-flight limit of a standard-queue batch: how many messages run at once, adapted to
//! what the store answers (AIMD, as TCP's congestion window).
//!
//! A fixed limit floods a store that slows down: 256 writes at once on a store starved of CPU
//! time out together, and on DynamoDB writes to hot items cancel each other. So the limit
//! starts at the maximum ([`Processor::concurrency`](super::Processor::concurrency): the
//! builder's value, else the store's
//! [`max_in_flight`](crate::store::Capabilities::max_in_flight)) and:
//!
//! * **shrinks** to 3/4 of itself (never below 1) when a message meets pressure: a write
//!   cancelled on contention (even one retried successfully), a store that did not answer in
//!   time (`store_unavailable`), or a store step cut off by the time budget. At most once per
//!   "round": messages that started before the last cut do not cut again, so a burst of
//!   conflicts from one wave counts once.
//! * **grows back** by one message per limit's worth of messages that met none (additive
//!   increase), up to the maximum.
//!
//! The limit belongs to the processor, so it carries over the warm invocations of one Lambda
//! environment (and is shared by concurrent invocations under `run_concurrent`). Each batch's
//! [`BatchMetrics::in_flight_limit`](crate::metrics::BatchMetrics::in_flight_limit) is the
//! limit when the batch ended (`InFlightLimit` in the EMF line).

use std::sync::Mutex;

use tokio::sync::Notify;

/// The adaptive in-flight limit. See the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Limit {
    max: usize,
    state: Mutex<State>,
    freed: Notify,
}

#[derive(Debug)]
struct State {
    /// The limit, fractional so that additive increase can add 1/limit per success.
    limit: f64,
    in_flight: usize,
    /// Bumped at every cut: a permit taken before the last cut does not cut again.
    round: u64,
}

/// One message's place under the limit. Say how it went with [`Permit::finish`]; dropped
/// without that (a cancelled batch), it frees its place and says nothing.
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    limit: &'a Limit,
    round: u64,
}

impl Limit {
    /// A limit of at most `max` (at least 1), starting there.
    pub(crate) fn new(max: usize) -> Limit {
        let max = max.max(1);
        Limit {
            max,
            state: Mutex::new(State {
                limit: max as f64,
                in_flight: 0,
                round: 0,
            }),
            freed: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the state consistent: a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The limit now, in whole messages.
    pub(crate) fn current(&self) -> usize {
        whole(self.state().limit)
    }

    /// Waits for a place under the limit.
    pub(crate) async fn acquire(&self) -> Permit<'_> {
        loop {
            // Registered before the check, so a place freed between the check and the wait
            // is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut state = self.state();
                if state.in_flight < whole(state.limit) {
                    state.in_flight += 1;
                    return Permit {
                        limit: self,
                        round: state.round,
                    };
                }
            }
            freed.await;
        }
    }
}

impl Permit<'_> {
    /// Frees the place, saying whether the message met pressure (contention, a store that did
    /// not answer in time).
    pub(crate) fn finish(self, pressure: bool) {
        let limit = self.limit;
        let grew = {
            let mut state = limit.state();
            let before = whole(state.limit);
            if pressure {
                if self.round == state.round {
                    state.limit = (state.limit * 0.75).max(1.0);
                    state.round += 1;
                }
            } else {
                state.limit = (state.limit + 1.0 / state.limit).min(limit.max as f64);
            }
            whole(state.limit) > before
        };
        // `Drop` frees the place and wakes one waiter; a limit that grew wakes them all.
        drop(self);
        if grew {
            limit.freed.notify_waiters();
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.limit.state().in_flight -= 1;
        self.limit.freed.notify_one();
    }
}

fn whole(limit: f64) -> usize {
    // At least 1: a limit of 0 would stall the batch.
    (limit.floor() as usize).max(1)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn pressure_cuts_once_per_round_and_success_grows_back() {
        let limit = Limit::new(100);
        assert_eq!(limit.current(), 100);
        // A wave of 10 messages, all meeting contention: one cut, not ten.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let wave: Vec<_> = futures::future::join_all((0..10).map(|_| limit.acquire())).await;
            for p in wave {
                p.finish(true);
            }
            assert_eq!(limit.current(), 75);
            // The next wave meets it again: cut again.
            let p = limit.acquire().await;
            p.finish(true);
            assert_eq!(limit.current(), 56);
            // Additive increase: about one per limit's worth of successes.
            for _ in 0..56 {
                limit.acquire().await.finish(false);
            }
            assert_eq!(limit.current(), 57);
            for _ in 0..10_000 {
                limit.acquire().await.finish(false);
            }
            assert_eq!(limit.current(), 100, "never above the maximum");
        });
    }

    #[test]
    fn never_below_one() {
        let limit = Limit::new(4);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            for _ in 0..50 {
                limit.acquire().await.finish(true);
            }
        });
        assert_eq!(limit.current(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gets_the_place_a_finished_message_frees() {
        let limit = std::sync::Arc::new(Limit::new(1));
        let first = limit.acquire().await;
        let second = {
            let limit = std::sync::Arc::clone(&limit);
            tokio::spawn(async move {
                limit.acquire().await.finish(false);
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!second.is_finished(), "at the limit, the second waits");
        first.finish(false);
        second
            .await
            .expect("the second runs once the first is done");
    }
}
