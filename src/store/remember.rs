//! What the two caching stores share: remember what completed, pending until it committed.
//!
//! [`CachedStore`](super::CachedStore) (a map in the process) and `TieredStore` (markers in
//! Redis) both answer a duplicate with a completed record they copied, and both must copy
//! exactly the record the store behind them holds. A completion is not told the claim's
//! fingerprint, so each claim acquired through the cache is remembered here, by owner token,
//! until its completion or release; the completed record is built from it only once the store
//! behind has committed. Where to keep the record (and for how long) is each store's own.
//!
//! The rules, kept in one place so the two stores cannot drift apart:
//!
//! * **only after the commit**: [`Pending::complete`] hands back a record only if the store
//!   behind said the completion succeeded; a fenced, refused or failed completion caches
//!   nothing, so a cache never answers `Completed` where the store behind would not;
//! * **the claim is dropped whatever the outcome**, a transient error included: after an
//!   ambiguous failure the first attempt may have landed, and a retry is then a no-op on the
//!   store behind, which keeps the first attempt's response and expiry. A record built from
//!   the retry's could differ from the stored one (and replay another response); without the
//!   pending claim nothing is cached, and the next duplicate copies the stored record instead;
//! * **a release** drops the claim unless it failed transiently (the claim may still be live,
//!   and its completion may follow);
//! * **bounded**: at most [`MAX_PENDING`] claims wait; beyond it a completion caches nothing
//!   (its next duplicate asks the store behind, and caches then);
//! * **a cache's answer is not the store's**: a duplicate answered from what a cache remembers
//!   says so in the answer ([`AnsweredBy::Cache`](super::AnsweredBy::Cache)), and an answer the
//!   store behind gave is forwarded as it came, so a batch that watches whether its store still
//!   answers (`claim/liveness.rs`) does not take a cache's answer for the store's. Otherwise
//!   duplicates answered at once would hide a store gone dark behind them for one more timeout.
//!   A pack's writes each carry their own answer's origin, and the processor's packer hands
//!   each answer to the write's own attempt as it came.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use super::{Claim, ClaimRecord, ClaimRequest, ClaimToken, Completion, Status, StoredResponse};
use crate::Error;

/// At most this many claims in flight are remembered (see the [module documentation](self)).
pub(crate) const MAX_PENDING: usize = 100_000;

/// The longest response a cache copies; a key with a longer one is not cached, and its
/// duplicates ask the store behind.
pub(crate) const MAX_CACHED_RESPONSE: usize = 64 * 1024;

/// Whether a completed record's response is small enough to be copied into a cache.
pub(crate) fn response_fits(record: &ClaimRecord) -> bool {
    record
        .response
        .as_ref()
        .is_none_or(|r| r.len() <= MAX_CACHED_RESPONSE)
}

/// The claims acquired through a cache, by owner token, until completed or released.
#[derive(Default)]
pub(crate) struct Pending {
    claims: Mutex<HashMap<ClaimToken, Claimed>>,
}

/// What a completion needs from its claim: the fingerprint (the completion is not told it,
/// and a cached record must carry it) and the claim's `now` (a store never reads a clock).
struct Claimed {
    fingerprint: Option<String>,
    at: SystemTime,
}

/// A completion the store behind committed, for a claim acquired through the cache.
pub(crate) struct Committed {
    /// The record the store behind now holds for the key.
    pub(crate) record: ClaimRecord,
    /// The `now` of the claim that acquired it.
    pub(crate) claimed_at: SystemTime,
}

/// The count only: the fingerprints are hashes of message bodies, kept out of `Debug`.
impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("claims", &self.claims().len())
            .finish()
    }
}

impl Pending {
    fn claims(&self) -> MutexGuard<'_, HashMap<ClaimToken, Claimed>> {
        // Every write under this lock is a single insert or remove: a poisoned lock is still
        // consistent.
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes what the store behind answered `req`: an acquired claim is remembered until its
    /// completion or release; a completed record is returned, for the cache to copy.
    pub(crate) fn claimed<'c>(
        &self,
        req: &ClaimRequest<'_>,
        claim: &'c Claim,
    ) -> Option<&'c ClaimRecord> {
        match claim {
            Claim::Completed { record, .. } => Some(record),
            Claim::Acquired(token) => {
                let mut claims = self.claims();
                if claims.len() < MAX_PENDING {
                    claims.insert(
                        token.clone(),
                        Claimed {
                            fingerprint: req.fingerprint.map(str::to_owned),
                            at: req.now,
                        },
                    );
                }
                None
            }
            Claim::HeldElsewhere { .. } => None,
        }
    }

    /// Completes with `complete` (the store behind's completion), and answers the record it
    /// committed if the claim was acquired through this cache: `Ok(None)` when it was not.
    pub(crate) async fn complete<E, F>(
        &self,
        token: &ClaimToken,
        completion: Completion<E>,
        complete: impl FnOnce(Completion<E>) -> F,
    ) -> Result<Option<Committed>, Error>
    where
        F: Future<Output = Result<(), Error>>,
    {
        let expires_at = completion.expires_at;
        let response: Option<StoredResponse> = completion.response.clone();
        let result = complete(completion).await;
        // Taken whatever the outcome (see the module documentation), before the error returns.
        let claimed = self.claims().remove(token);
        result?;
        Ok(claimed.map(|claimed| Committed {
            record: ClaimRecord {
                status: Status::Completed,
                expires_at,
                lease_until: None,
                fingerprint: claimed.fingerprint,
                response,
            },
            claimed_at: claimed.at,
        }))
    }

    /// Releases with `release` (the store behind's release), dropping the claim unless the
    /// release failed transiently.
    pub(crate) async fn release(
        &self,
        token: &ClaimToken,
        release: impl Future<Output = Result<(), Error>>,
    ) -> Result<(), Error> {
        let result = release.await;
        if !result.as_ref().is_err_and(Error::is_transient) {
            self.claims().remove(token);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ErrorKind;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn request(now: SystemTime) -> ClaimRequest<'static> {
        ClaimRequest {
            key: "k",
            now,
            lease_until: now + Duration::from_secs(60),
            expires_at: now + Duration::from_secs(3600),
            fingerprint: Some("fp"),
        }
    }

    fn acquired(pending: &Pending, now: SystemTime) -> ClaimToken {
        let token = ClaimToken::generate();
        let claim = Claim::Acquired(token.clone());
        assert!(pending.claimed(&request(now), &claim).is_none());
        token
    }

    #[tokio::test]
    async fn a_committed_completion_is_remembered_with_its_claim() {
        let pending = Pending::default();
        let token = acquired(&pending, at(10));
        let completion =
            Completion::<()>::new(at(100)).with_response(StoredResponse::new("\"ok\""));
        let committed = pending
            .complete(&token, completion, |_| async { Ok(()) })
            .await
            .expect("committed")
            .expect("acquired here");
        assert_eq!(committed.claimed_at, at(10));
        assert_eq!(committed.record.status, Status::Completed);
        assert_eq!(committed.record.expires_at, at(100));
        assert_eq!(committed.record.fingerprint.as_deref(), Some("fp"));
        assert_eq!(
            committed
                .record
                .response
                .as_ref()
                .map(StoredResponse::as_str),
            Some("\"ok\"")
        );
        // Once only: a second completion with the token was not acquired "here" any more.
        let again = pending
            .complete(&token, Completion::<()>::new(at(100)), |_| async { Ok(()) })
            .await
            .expect("a no-op success");
        assert!(again.is_none());
    }

    #[tokio::test]
    async fn a_failed_completion_remembers_nothing_even_after_a_retry() {
        let pending = Pending::default();
        let token = acquired(&pending, at(10));
        let failed = pending
            .complete(&token, Completion::<()>::new(at(100)), |_| async {
                Err(Error::new(ErrorKind::StoreUnavailable, "lost answer"))
            })
            .await;
        assert!(failed.is_err());
        let retry = pending
            .complete(&token, Completion::<()>::new(at(200)), |_| async { Ok(()) })
            .await
            .expect("the retry succeeds");
        assert!(
            retry.is_none(),
            "the retry's expiry may not be the stored one"
        );
    }

    #[tokio::test]
    async fn a_transient_release_keeps_the_claim_and_a_final_one_drops_it() {
        let pending = Pending::default();
        let token = acquired(&pending, at(10));
        let transient = pending
            .release(&token, async {
                Err(Error::new(ErrorKind::StoreUnavailable, "timeout"))
            })
            .await;
        assert!(transient.is_err_and(|e| e.is_transient()));
        assert_eq!(pending.claims().len(), 1);
        pending.release(&token, async { Ok(()) }).await.unwrap();
        assert_eq!(pending.claims().len(), 0);
    }

    #[test]
    fn a_completed_claim_is_handed_back_and_nothing_kept() {
        let pending = Pending::default();
        let record = ClaimRecord {
            status: Status::Completed,
            expires_at: at(100),
            lease_until: None,
            fingerprint: None,
            response: None,
        };
        let claim = Claim::Completed {
            record: record.clone(),
            answered_by: crate::store::AnsweredBy::Store,
        };
        assert_eq!(pending.claimed(&request(at(10)), &claim), Some(&record));
        assert_eq!(pending.claims().len(), 0);
    }
}
