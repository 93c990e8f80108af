//! Item locks: no two writes on one item in flight at once from one process.
//!
//! DynamoDB cancels a transaction that meets another one in flight on any of its items
//! (`TransactionConflict`). A batch that credits one hot account from ten messages, each its
//! own transaction sent at once, would cancel nine of them, and each retry would race the
//! others again. Inside one process that is contention we create ourselves, and it is avoided
//! by taking turns: a write waits for the writes before it on the same items, while writes on
//! other items go on concurrently. Contention between processes (several invocations, several
//! Lambda environments) cannot be avoided this way; it is retried with backoff instead
//! ([`Attempt`](super::Attempt)).
//!
//! Items are hashes ([`ClaimStore::effect_item`](crate::store::ClaimStore::effect_item) for
//! an effect, [`claim_item`] for a claim's own record). A write takes the locks of all its
//! items in ascending order, so two writes that share several items cannot deadlock. The
//! locks are fair (first come, first served), so writes on one item go in the order they
//! asked (in a standard-queue batch, the order its messages reached the lock). A lock nobody
//! holds or waits for is removed, so the table holds only the items in use.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

type Lock = Arc<tokio::sync::Mutex<()>>;

/// A process's item locks. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub(crate) struct ItemLocks {
    locks: Mutex<HashMap<u64, Lock>>,
}

/// The locks one write holds; released when dropped.
#[derive(Debug)]
pub(crate) struct Held<'a> {
    table: &'a ItemLocks,
    held: Vec<(u64, OwnedMutexGuard<()>)>,
}

/// The item hash of the claim record stored under `key`, apart from any effect's.
pub(crate) fn claim_item(key: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    "sqs-claim record".hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

impl ItemLocks {
    /// Waits until no other write of this process holds any of `items`, then holds them all
    /// until the returned value is dropped. Cancel-safe: dropped while waiting, it holds
    /// nothing.
    pub(crate) async fn lock(&self, mut items: Vec<u64>) -> Held<'_> {
        items.sort_unstable();
        items.dedup();
        let mut held = Held {
            table: self,
            held: Vec::with_capacity(items.len()),
        };
        for item in items {
            let lock = {
                let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
                Arc::clone(locks.entry(item).or_default())
            };
            // Pushed as soon as it is held, so a cancellation between two items releases
            // the first.
            let guard = lock.lock_owned().await;
            held.held.push((item, guard));
        }
        held
    }

    /// How many items have a lock now (held or waited for).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut locks = self.table.locks.lock().unwrap_or_else(|p| p.into_inner());
        for (item, guard) in self.held.drain(..) {
            drop(guard);
            // Only the table's own reference left: nobody holds or waits for it. Clones are
            // made under the same mutex, so none can appear between the check and the removal.
            if locks.get(&item).is_some_and(|l| Arc::strong_count(l) == 1) {
                locks.remove(&item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn writes_on_one_item_take_turns_and_others_do_not_wait() {
        let locks = Arc::new(ItemLocks::default());
        let first = locks.lock(vec![1, 2]).await;
        // A write on item 3 goes at once.
        let other = tokio::time::timeout(Duration::from_millis(1), locks.lock(vec![3])).await;
        assert!(other.is_ok(), "item 3 is free");
        drop(other);
        // A write on item 2 waits for the first.
        let waiting = {
            let locks = Arc::clone(&locks);
            tokio::spawn(async move {
                let _held = locks.lock(vec![2, 5]).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished(), "item 2 is held");
        drop(first);
        waiting
            .await
            .expect("the second write runs once the first is done");
        assert_eq!(locks.len(), 0, "no lock left behind");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_wait_holds_nothing() {
        let locks = ItemLocks::default();
        let first = locks.lock(vec![2]).await;
        // Takes 1, then waits for 2, and is cancelled: 1 must be free again.
        let cut = tokio::time::timeout(Duration::from_millis(5), locks.lock(vec![1, 2])).await;
        assert!(cut.is_err());
        let again = tokio::time::timeout(Duration::from_millis(1), locks.lock(vec![1])).await;
        assert!(again.is_ok(), "item 1 released by the cancelled wait");
        drop(again);
        drop(first);
        assert_eq!(locks.len(), 0);
    }
}
