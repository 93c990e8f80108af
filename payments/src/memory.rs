//! [`MemoryLedger`]: the example on a [`MemoryStore`], balances in a map. For tests and
//! `--store memory:` (nothing survives the process).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use super::{Ledger, Payment};
use sqs_claim::store::memory::MemoryEffect;
use sqs_claim::store::{Claim, ClaimRequest, ClaimStore, ClaimToken, Effects};
use sqs_claim::{Error, MemoryStore};

/// A [`MemoryStore`] plus account balances. Clones share both.
#[derive(Debug, Clone, Default)]
pub struct MemoryLedger {
    store: MemoryStore,
    balances: Arc<Mutex<BTreeMap<String, i64>>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// The claim store inside (to inspect records or simulate an outage in tests).
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    fn lock(balances: &Mutex<BTreeMap<String, i64>>) -> MutexGuard<'_, BTreeMap<String, i64>> {
        // Every write is one insert: a poisoned map is still consistent.
        balances.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ClaimStore for MemoryLedger {
    type Effect = MemoryEffect;

    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, Error> {
        self.store.claim(request).await
    }

    async fn complete(
        &self,
        key: &str,
        token: &ClaimToken,
        expires_at: SystemTime,
        effects: Effects<MemoryEffect>,
    ) -> Result<(), Error> {
        self.store.complete(key, token, expires_at, effects).await
    }

    async fn release(&self, key: &str, token: &ClaimToken) -> Result<(), Error> {
        self.store.release(key, token).await
    }
}

impl Ledger for MemoryLedger {
    /// Checked under the store's lock at completion: refused unless the new balance is within
    /// `0..=`[`Payment::MAX_BALANCE_CENTS`]. (Several credits of one account in one completion
    /// are each checked against the balance before it.)
    fn credit(&self, account: &str, amount_cents: i64) -> MemoryEffect {
        let (check_map, apply_map) = (Arc::clone(&self.balances), Arc::clone(&self.balances));
        let (check_account, apply_account) = (account.to_owned(), account.to_owned());
        MemoryEffect::conditional(
            move || {
                let balance = Self::lock(&check_map)
                    .get(&check_account)
                    .copied()
                    .unwrap_or(0);
                match Payment::balance_after(balance, amount_cents) {
                    Some(_) => Ok(()),
                    None => Err(format!(
                        "crediting account {check_account:?} would take its balance out of \
                         0..={} cents",
                        Payment::MAX_BALANCE_CENTS
                    )),
                }
            },
            move || {
                let mut map = Self::lock(&apply_map);
                let balance = map.entry(apply_account.clone()).or_insert(0);
                *balance = balance.saturating_add(amount_cents);
            },
        )
    }

    async fn balances(&self) -> Result<Vec<(String, i64)>, Error> {
        Ok(Self::lock(&self.balances)
            .iter()
            .map(|(a, b)| (a.clone(), *b))
            .collect())
    }

    async fn init(&self) -> Result<(), Error> {
        Ok(())
    }

    async fn prepare(&self) -> Result<(), Error> {
        Ok(())
    }
}
