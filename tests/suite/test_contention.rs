//! Contention (issue 18): a batch never fails on contention it creates itself, and contention
//! from elsewhere is retried, not failed.
//!
//! * Writes of one processor on one item take turns (`claim/locks.rs`): a store that counts
//!   the writes in flight per item sees at most one, in one-shot and in two-step mode, while
//!   writes on other items run together.
//! * A write cancelled on contention ([`ErrorKind::Contention`]: nothing written) is sent again
//!   on every path (claim, completion, one-shot, release) and counted (`Conflicts`,
//!   `Retries`); a message fails, as `contention`, only when the contention retries run out,
//!   and then nothing of it is written.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqs_claim::RetryPolicy;
use sqs_claim::metrics::BatchMetrics;
use sqs_claim::store::MemoryEffect;
use sqs_claim::store::{Claim, ClaimRequest, ClaimStore, ClaimToken, Completion, OneShotWrite};
use sqs_claim::{
    BoxError, Effects, Error, FailureKind, MemoryStore, Message, Processor, store::Status,
};
use support::batch::*;

/// A credit of `amount` to account `account`.
#[derive(Debug, Clone)]
struct Credit {
    account: u64,
    amount: i64,
}

/// A store whose writes with effects take 5 ms (as a transaction does at DynamoDB), counting
/// how many are in flight on each account at once and in all.
#[derive(Clone, Default)]
struct Ledger {
    records: MemoryStore,
    balances: Arc<Mutex<HashMap<u64, i64>>>,
    in_flight: Arc<Mutex<HashMap<u64, usize>>>,
    most_on_one_item: Arc<AtomicUsize>,
    writing: Arc<AtomicUsize>,
    most_at_once: Arc<AtomicUsize>,
}

impl Ledger {
    /// Holds every account of `effects` for 5 ms, then applies them.
    async fn write(&self, effects: &Effects<Credit>) {
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            for c in effects.as_slice() {
                let n = in_flight.entry(c.account).or_default();
                *n += 1;
                self.most_on_one_item.fetch_max(*n, Ordering::SeqCst);
            }
        }
        let now = self.writing.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.writing.fetch_sub(1, Ordering::SeqCst);
        let mut in_flight = self.in_flight.lock().unwrap();
        let mut balances = self.balances.lock().unwrap();
        for c in effects.as_slice() {
            *in_flight.entry(c.account).or_default() -= 1;
            *balances.entry(c.account).or_default() += c.amount;
        }
    }

    fn balance(&self, account: u64) -> i64 {
        self.balances
            .lock()
            .unwrap()
            .get(&account)
            .copied()
            .unwrap_or(0)
    }
}

impl ClaimStore for Ledger {
    type Effect = Credit;

    fn effect_item(&self, effect: &Credit) -> Option<u64> {
        Some(effect.account)
    }

    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, Error> {
        self.records.claim(req).await
    }

    async fn complete_with(
        &self,
        key: &str,
        token: &ClaimToken,
        completion: Completion<Credit>,
    ) -> Result<(), Error> {
        self.write(&completion.effects).await;
        self.records
            .complete_with(key, token, Completion::new(completion.expires_at))
            .await
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        self.records.release(key, token).await
    }

    async fn claim_completed(
        &self,
        req: ClaimRequest<'_>,
        effects: Effects<Credit>,
    ) -> Result<OneShotWrite, Error> {
        self.write(&effects).await;
        self.records.claim_completed(req, Effects::none()).await
    }
}

/// 50 messages crediting `i + 1` to account `i % 5`.
fn hot_batch() -> Vec<Rec> {
    (0..50)
        .map(|i| {
            rec(
                &format!("m{i}"),
                &format!(r#"{{"account": {}, "amount": {}}}"#, i % 5, i + 1),
            )
        })
        .collect()
}

fn credit_of(msg: &Message) -> Result<Credit, BoxError> {
    let body: serde_json::Value = msg.json()?;
    Ok(Credit {
        account: body["account"].as_u64().ok_or("no account")?,
        amount: body["amount"].as_i64().ok_or("no amount")?,
    })
}

fn assert_hot_batch_taken_in_turns(ledger: &Ledger, report: &sqs_claim::BatchReport) {
    assert_eq!(report.counts().processed, 50, "{:?}", outcome_names(report));
    assert_eq!(
        ledger.most_on_one_item.load(Ordering::SeqCst),
        1,
        "two writes on one account were in flight at once"
    );
    assert!(
        ledger.most_at_once.load(Ordering::SeqCst) > 1,
        "writes on different accounts still run together"
    );
    for account in 0..5 {
        let expected: i64 = (0..50).filter(|i| i % 5 == account).map(|i| i + 1).sum();
        assert_eq!(ledger.balance(account as u64), expected);
    }
}

#[tokio::test(start_paused = true)]
async fn one_shot_writes_on_one_item_take_turns() {
    let ledger = Ledger::default();
    let p = Processor::one_shot(ledger.clone(), |msg: &Message| {
        Ok(Effects::one(credit_of(msg)?))
    })
    .namespace("t")
    .build();
    let report = p.process(event(&hot_batch())).await.unwrap();
    assert_hot_batch_taken_in_turns(&ledger, &report);
}

#[tokio::test(start_paused = true)]
async fn two_step_completions_on_one_item_take_turns() {
    let ledger = Ledger::default();
    let handler = tower::service_fn(|msg: Message| async move {
        Ok::<_, BoxError>(Effects::one(credit_of(&msg)?))
    });
    let p = Processor::builder(ledger.clone(), handler)
        .namespace("t")
        .build();
    let report = p.process(event(&hot_batch())).await.unwrap();
    assert_hot_batch_taken_in_turns(&ledger, &report);
}

/// A memory store, the balance a one-shot processor on it credits, where its metrics go, and
/// the processor (with `retry` as its contention retries, if given).
type CreditRig = (
    MemoryStore,
    Arc<AtomicI64>,
    Arc<Mutex<Vec<BatchMetrics>>>,
    Processor<MemoryStore, sqs_claim::OneShot<CreditFn, MemoryEffect>>,
);

fn credit_rig(retry: Option<RetryPolicy>) -> CreditRig {
    let store = MemoryStore::new();
    let balance = Arc::new(AtomicI64::new(0));
    let metrics = Arc::default();
    let p = credit_processor(
        store.clone(),
        Arc::clone(&balance),
        Arc::clone(&metrics),
        retry,
    );
    (store, balance, metrics, p)
}

/// A one-shot processor on a memory store crediting `balance`, its metrics into `metrics`.
/// The one-shot handler `credit_processor` builds on.
type CreditFn = Box<dyn Fn(&Message) -> Result<Effects<MemoryEffect>, BoxError> + Send + Sync>;

fn credit_processor(
    store: MemoryStore,
    balance: Arc<AtomicI64>,
    metrics: Arc<Mutex<Vec<BatchMetrics>>>,
    retry: Option<RetryPolicy>,
) -> Processor<MemoryStore, sqs_claim::OneShot<CreditFn, MemoryEffect>> {
    let credit: CreditFn = Box::new(move |_msg: &Message| {
        let balance = Arc::clone(&balance);
        Ok(Effects::one(MemoryEffect::new(move || {
            balance.fetch_add(1, Ordering::SeqCst);
        })))
    });
    let mut builder = Processor::one_shot(store, credit)
        .namespace("t")
        .metrics(move |b: &BatchMetrics| metrics.lock().unwrap().push(b.clone()));
    if let Some(retry) = retry {
        builder = builder.contention_retry(retry);
    }
    builder.build()
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_write_cancelled_on_contention_is_sent_again() {
    let (store, balance, metrics, p) = credit_rig(None);
    store.contend_next_writes(3);
    let report = p.process(event(&[rec("m1", "{}")])).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed"]);
    assert_eq!(balance.load(Ordering::SeqCst), 1, "applied once");
    let m = metrics.lock().unwrap();
    assert_eq!((m[0].conflicts, m[0].retries), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn contention_past_the_retries_fails_the_message_as_contention_and_writes_nothing() {
    let (store, balance, metrics, p) =
        credit_rig(Some(RetryPolicy::new(2, Duration::from_millis(1))));
    store.contend_next_writes(100);
    let report = p.process(event(&[rec("m1", "{}")])).await.unwrap();
    let f = failure_of(&report, "m1");
    assert_eq!(f.kind, FailureKind::Contention);
    assert_eq!(f.kind.as_str(), "contention");
    assert!(
        f.message.contains("contention") && f.message.contains("nothing was written"),
        "{}",
        f.message
    );
    assert_eq!(failed_ids(&report.response()), ["m1"]);
    assert_eq!(balance.load(Ordering::SeqCst), 0);
    assert_eq!(store.status("t#m1"), None, "no record written");
    {
        let m = metrics.lock().unwrap();
        assert_eq!((m[0].conflicts, m[0].retries), (3, 2));
        assert!(
            m[0].in_flight_limit >= 1,
            "the limit is reported: {}",
            m[0].in_flight_limit
        );
    }
    // The redelivery, without contention, applies it once.
    store.contend_next_writes(0);
    let again = p.process(event(&[rec("m1", "{}")])).await.unwrap();
    assert_eq!(outcome_names(&again), ["processed"]);
    assert_eq!(balance.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn two_step_claim_and_completion_cancelled_on_contention_are_sent_again() {
    let store = MemoryStore::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&runs);
    let handler = tower::service_fn(move |_msg: Message| {
        let seen = Arc::clone(&seen);
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok::<_, BoxError>(Effects::<MemoryEffect>::none())
        }
    });
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .build();
    // The claim meets contention twice; it is then won and the handler runs once.
    store.contend_next_writes(2);
    let report = p.process(event(&[rec("m1", "{}")])).await.unwrap();
    assert_eq!(outcome_names(&report), ["processed"]);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(store.status("t#m1"), Some(Status::Completed));
    let dup = p.process(event(&[rec("m1", "{}")])).await.unwrap();
    assert_eq!(outcome_names(&dup), ["duplicate"]);
}

#[tokio::test(start_paused = true)]
async fn a_release_cancelled_on_contention_is_sent_again() {
    let store = MemoryStore::new();
    let handler = tower::service_fn(|_msg: Message| async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Err::<Effects<MemoryEffect>, BoxError>("provider down".into())
    });
    let p = Processor::builder(store.clone(), handler)
        .namespace("t")
        .build();
    // Claim wins at once; the handler fails; the release then meets contention once.
    let report = {
        let store = store.clone();
        let run = p.process(event(&[rec("m1", "{}")]));
        // The claim goes through; the release meets contention: the cancellation is armed
        // once the claim is written, while the handler runs.
        let arm = async move {
            while store.status("t#m1").is_none() {
                tokio::task::yield_now().await;
            }
            store.contend_next_writes(1);
        };
        let (report, ()) = tokio::join!(run, arm);
        report.unwrap()
    };
    assert_eq!(failure_of(&report, "m1").kind, FailureKind::Handler);
    assert_eq!(
        store.status("t#m1"),
        None,
        "the claim was released despite the contention"
    );
}
