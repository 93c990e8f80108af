//! Whether the store still answers, as one batch sees it: what tells a store that has gone
//! **dark** (its calls time out and nothing answers any more) from one that is **slow** (its
//! calls answer late, under their bounds).
//!
//! Every store call of an attempt reports how it ended ([`Liveness::observe`]):
//!
//! * an **answer**: the call returned, with a result or with an error the store itself sent
//!   back (a conditional check that failed, a conflict, a refusal). The store is alive, however
//!   late the answer came;
//! * **no answer**: the call got no reply within the store's own bound (the PostgreSQL call
//!   timeout, the DynamoDB client's operation timeout, Redis' response timeout: an error marked
//!   by `Error::is_no_answer`);
//! * anything else (a refused or reset connection, throttling): neither. Such errors come back
//!   at once, so nothing waits behind them anyway;
//! * a duplicate answered by a **cache** in front of the store from what it remembers (a
//!   `CachedStore` hit, a `TieredStore` marker: the answer says
//!   [`AnsweredBy::Cache`](crate::store::AnsweredBy::Cache)): neither. It says nothing of the
//!   store behind, and duplicates answered at once would otherwise hide a store gone dark for
//!   one more timeout per window of messages.
//!
//! The store is dark once a call got no answer **and no call has answered since that call was
//! sent**: the silence covers the whole time the call waited. From then on the processor starts
//! nothing more on it; the messages not yet started are reported for retry at once, naming the
//! store, instead of each waiting out the timeout. An answer that arrives later (a flapping
//! store, a partition that healed) ends it: messages start again.
//!
//! A slow store never meets the rule (each call answers, late), so it keeps being used, at the
//! lower in-flight limit the adaptive limit (`processor/limit.rs`) settles on. A store that
//! answers some calls and lets others time out is not dark either: the answers show it alive.
//!
//! One per batch: a later batch tries the store again from scratch (and pays one timeout to
//! learn it is still dark), so a store that came back is used at once.

use std::sync::Mutex;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::store::{AnsweredBy, Claim, OneShotWrite};
use crate::{Error, ErrorKind};

/// What a store call answered, as liveness reads it: who gave the answer. Every answer type an
/// attempt sends for says it; a claim's or a one-shot write's duplicate carries its own
/// [`AnsweredBy`].
pub(crate) trait StoreAnswer {
    /// Whether the store or a cache in front of it answered.
    fn answered_by(&self) -> AnsweredBy;
}

/// A completion, an extension, a release: only the store answers them.
impl StoreAnswer for () {
    fn answered_by(&self) -> AnsweredBy {
        AnsweredBy::Store
    }
}

impl StoreAnswer for Claim {
    fn answered_by(&self) -> AnsweredBy {
        match self {
            Claim::Completed { answered_by, .. } => *answered_by,
            Claim::Acquired(_) | Claim::HeldElsewhere { .. } => AnsweredBy::Store,
        }
    }
}

impl StoreAnswer for OneShotWrite {
    fn answered_by(&self) -> AnsweredBy {
        match self {
            OneShotWrite::Completed { answered_by, .. } => *answered_by,
            OneShotWrite::Committed | OneShotWrite::HeldElsewhere { .. } => AnsweredBy::Store,
        }
    }
}

/// See the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Liveness {
    state: Mutex<State>,
    /// Whether the store is dark now; waiters subscribe to hear it go dark.
    dark: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct State {
    /// When a call last answered in this batch.
    last_answer: Option<Instant>,
    /// Why the store is dark, while it is: the call that went unanswered, and its error.
    dark: Option<String>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            state: Mutex::new(State::default()),
            dark: watch::Sender::new(false),
        }
    }
}

impl Liveness {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section leaves the state consistent: a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records how a store call sent at `sent` ended (an answer a cache gave is none of the
    /// store's: see the [module documentation](self)).
    pub(crate) fn observe<T: StoreAnswer>(&self, sent: Instant, result: &Result<T, Error>) {
        match result {
            Ok(answer) if answer.answered_by() == AnsweredBy::Cache => {}
            Err(e) if e.is_no_answer() => self.unanswered(sent, e),
            Err(e) if e.kind() == ErrorKind::StoreUnavailable => {}
            _ => self.answered(),
        }
    }

    fn answered(&self) {
        let mut state = self.state();
        state.last_answer = Some(Instant::now());
        if state.dark.take().is_some() {
            self.dark.send_replace(false);
        }
    }

    fn unanswered(&self, sent: Instant, e: &Error) {
        let mut state = self.state();
        if state.dark.is_some() || state.last_answer.is_some_and(|at| at >= sent) {
            return;
        }
        let waited = Instant::now().saturating_duration_since(sent);
        state.dark = Some(format!(
            "store dark: a call got no answer in {} ms and no call has answered since it was \
             sent ({e:#}); not started, nothing ran",
            waited.as_millis()
        ));
        self.dark.send_replace(true);
    }

    /// Why the store is dark, if it is now.
    pub(crate) fn dark(&self) -> Option<String> {
        self.state().dark.clone()
    }

    /// `work`'s output, unless the store goes dark first (or is dark already): `None` then.
    pub(crate) async fn unless_dark<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let mut dark = self.dark.subscribe();
        if *dark.borrow_and_update() {
            return None;
        }
        let gone_dark = std::pin::pin!(dark.wait_for(|d| *d));
        let work = std::pin::pin!(work);
        match futures::future::select(work, gone_dark).await {
            futures::future::Either::Left((out, _)) => Some(out),
            futures::future::Either::Right(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn silent() -> Result<(), Error> {
        Err(Error::new(
            ErrorKind::StoreUnavailable,
            "PostgreSQL: no answer within 5000 ms",
        )
        .no_answer())
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_with_no_answer_since_is_dark() {
        let l = Liveness::default();
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(5)).await;
        l.observe(sent, &silent());
        let why = l.dark().expect("dark");
        assert!(
            why.contains("store dark") && why.contains("PostgreSQL"),
            "{why}"
        );
        assert!(why.contains("5000 ms"), "{why}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_while_a_call_waited_is_not_dark() {
        let l = Liveness::default();
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(3)).await;
        // Another call answered, 3 s late, while the first still waited.
        l.observe(Instant::now() - Duration::from_secs(3), &Ok(()));
        tokio::time::advance(Duration::from_secs(2)).await;
        l.observe(sent, &silent());
        assert_eq!(l.dark(), None);
        // An error reply is an answer too: the store is alive.
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        l.observe::<()>(sent, &Err(Error::new(ErrorKind::Contention, "conflict")));
        tokio::time::advance(Duration::from_secs(4)).await;
        l.observe(sent, &silent());
        assert_eq!(l.dark(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_connection_is_neither_and_a_later_answer_ends_it() {
        let l = Liveness::default();
        let sent = Instant::now();
        l.observe::<()>(
            sent,
            &Err(Error::new(ErrorKind::StoreUnavailable, "refused")),
        );
        assert_eq!(l.dark(), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        l.observe(sent, &silent());
        assert!(l.dark().is_some());
        l.observe(Instant::now(), &Ok(()));
        assert_eq!(l.dark(), None, "an answer after the silence: alive again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cache_answer_is_not_the_store_answering() {
        use crate::store::{ClaimRecord, Status};
        let record = ClaimRecord {
            status: Status::Completed,
            expires_at: std::time::SystemTime::UNIX_EPOCH,
            lease_until: None,
            fingerprint: None,
            response: None,
        };
        let duplicate = |answered_by| {
            Ok::<_, Error>(OneShotWrite::Completed {
                record: record.clone(),
                answered_by,
            })
        };
        let l = Liveness::default();
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(3)).await;
        // A cache answered a duplicate while the call waited: no proof the store is alive.
        l.observe(Instant::now(), &duplicate(AnsweredBy::Cache));
        tokio::time::advance(Duration::from_secs(2)).await;
        l.observe(sent, &silent());
        assert!(l.dark().is_some(), "a cache hit hid the dark store");
        l.observe(
            Instant::now(),
            &Ok::<_, Error>(Claim::Completed {
                record: record.clone(),
                answered_by: AnsweredBy::Cache,
            }),
        );
        assert!(l.dark().is_some(), "a cache hit is no answer of the store");
        l.observe(Instant::now(), &duplicate(AnsweredBy::Store));
        assert_eq!(l.dark(), None, "the store's own duplicate answer: alive");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_stops_waiting_when_the_store_goes_dark() {
        let l = std::sync::Arc::new(Liveness::default());
        let waiting = {
            let l = std::sync::Arc::clone(&l);
            tokio::spawn(async move { l.unless_dark(std::future::pending::<()>()).await })
        };
        tokio::time::advance(Duration::from_secs(5)).await;
        l.observe(Instant::now() - Duration::from_secs(5), &silent());
        assert_eq!(waiting.await.expect("the waiter"), None);
        assert_eq!(
            l.unless_dark(async { 1 }).await,
            None,
            "dark already: not run"
        );
    }
}
