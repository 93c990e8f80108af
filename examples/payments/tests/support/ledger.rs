//! The reference consumer's balance range on one ledger: every credit that would take a
//! balance out of `0..=Payment::MAX_BALANCE_CENTS` is refused by the store with the completion
//! (`effect_rejected`), and the balance stays what it was and readable by `balances`.
//!
//! Called by the store tests, once per ledger.

use std::time::{Duration, SystemTime};

use payments::{Ledger, Payment};
use sqs_claim::ErrorKind;
use sqs_claim::store::{ClaimStore, Completion, Effects};
use sqs_claim_testkit::conformance::{acquire, request};

/// Claims a fresh key and completes it with one credit; the completion's result.
async fn credit<L: Ledger>(ledger: &L, account: &str, amount: i64) -> Result<(), sqs_claim::Error> {
    let key = format!("range#{}", uuid::Uuid::new_v4().simple());
    let now = SystemTime::now();
    let token = acquire(ledger.store(), request(&key, now)).await;
    let effects = Effects::one(ledger.credit(account, amount));
    ledger
        .store()
        .complete_with(
            &key,
            &token,
            Completion::new(now + Duration::from_secs(3600)).with_effects(effects),
        )
        .await
}

async fn balance<L: Ledger>(ledger: &L, account: &str) -> Option<i64> {
    let balances = ledger
        .balances()
        .await
        .unwrap_or_else(|e| panic!("balances must stay readable: {e}"));
    balances.iter().find(|(a, _)| a == account).map(|(_, b)| *b)
}

async fn refused<L: Ledger>(ledger: &L, account: &str, amount: i64) {
    match credit(ledger, account, amount).await {
        Err(e) if e.kind() == ErrorKind::EffectRejected => {}
        Err(e) => panic!("credit of {amount} to {account}: expected effect_rejected, got {e}"),
        Ok(()) => panic!("credit of {amount} to {account} must be refused (balance range)"),
    }
}

async fn accepted<L: Ledger>(ledger: &L, account: &str, amount: i64) {
    if let Err(e) = credit(ledger, account, amount).await {
        panic!("credit of {amount} to {account} must be accepted: {e}");
    }
}

/// The whole scenario, on accounts of a name unique to this run.
pub async fn balance_stays_in_range<L: Ledger>(ledger: &L) {
    let max = Payment::MAX_BALANCE_CENTS;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let (full, fresh) = (format!("full-{run}"), format!("fresh-{run}"));

    // Near the top: one more cent than the room left is refused, nothing written.
    accepted(ledger, &full, max - 5).await;
    refused(ledger, &full, 6).await;
    assert_eq!(
        balance(ledger, &full).await,
        Some(max - 5),
        "balance changed"
    );
    // Exactly the room left is fine; then not one cent more, of any size.
    accepted(ledger, &full, 5).await;
    assert_eq!(balance(ledger, &full).await, Some(max));
    for amount in [1, Payment::MAX_AMOUNT_CENTS, max, i64::MAX] {
        refused(ledger, &full, amount).await;
    }
    accepted(ledger, &full, 0).await;
    assert_eq!(balance(ledger, &full).await, Some(max), "balance changed");
    // Below zero, for a caller that passes a negative amount straight to the ledger.
    for amount in [-(max + 1), i64::MIN] {
        refused(ledger, &full, amount).await;
    }
    assert_eq!(balance(ledger, &full).await, Some(max), "balance changed");

    // A new account: opened only by an amount that is itself a valid balance.
    for amount in [-1, max + 1, i64::MAX, i64::MIN] {
        refused(ledger, &fresh, amount).await;
        assert_eq!(
            balance(ledger, &fresh).await,
            None,
            "a refused credit of {amount} opened the account"
        );
    }
    accepted(ledger, &fresh, 7).await;
    refused(ledger, &fresh, -8).await;
    assert_eq!(balance(ledger, &fresh).await, Some(7));
}
