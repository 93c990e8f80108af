//! [`MemoryLedger`]: the example on a [`MemoryStore`], balances in a map. For tests and
//! `--store memory:` (nothing survives the process).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Ledger, Payment};
use sqs_claim::store::MemoryEffect;
use sqs_claim::{Error, MemoryStore};

/// A [`MemoryStore`] plus account balances. Clones share both; [`Ledger::store`] is the claim
/// store inside (to inspect records or simulate an outage in tests).
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

    fn lock(balances: &Mutex<BTreeMap<String, i64>>) -> MutexGuard<'_, BTreeMap<String, i64>> {
        // Every write is one insert: a poisoned map is still consistent.
        balances.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Ledger for MemoryLedger {
    type Store = MemoryStore;

    fn store(&self) -> &MemoryStore {
        &self.store
    }

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
