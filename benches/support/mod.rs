//! What `benches/processor.rs` uses: the baseline loop and the median.

use std::time::{Duration, SystemTime};

use sqs_claim::events::SqsEvent;
use sqs_claim::store::{Claim, ClaimRequest, ClaimStore, Completion};

/// The Powertools batch loop, the baseline: claim, handle, complete, one message after another
/// (two store round trips per message, none overlapping). `handle` gets each body.
pub(crate) async fn sequential_baseline<S: ClaimStore>(
    store: &S,
    ev: &SqsEvent,
    handle: impl Fn(&str),
) {
    for m in &ev.records {
        let now = SystemTime::now();
        let key = format!("seq#{}", m.message_id.as_deref().unwrap_or_default());
        let req = ClaimRequest {
            key: &key,
            now,
            lease_until: now + Duration::from_secs(60),
            expires_at: now + Duration::from_secs(3600),
            fingerprint: None,
        };
        if let Ok(Claim::Acquired(token)) = store.claim(req).await {
            handle(m.body.as_deref().unwrap_or(""));
            let _ = store
                .complete_with(
                    &key,
                    &token,
                    Completion::new(now + Duration::from_secs(3600)),
                )
                .await;
        }
    }
}

/// The median of some timings.
pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}
