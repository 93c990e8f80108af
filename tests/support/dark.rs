//! A memory store behind the kit's spy that goes dark on a switch: once it is on, every claim
//! and one-shot write waits `timeout` and fails as a client whose own timeout ran out
//! (`Action::Silent`), which the processor reads as the store's silence. The other calls pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqs_claim::store::Effects;
use sqs_claim::{BatchReport, BoxError, ClaimStore, MemoryStore, Message, Outcome, Processor};
use sqs_claim_testkit::sqs::{lambda_event, record};
use sqs_claim_testkit::store::{Action, Method, Spy};
use tower::Service;

/// The store, and its switch (off: a healthy memory store).
pub(crate) fn darkening(timeout: Duration) -> (Spy<MemoryStore>, Arc<AtomicBool>) {
    let dark = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&dark);
    let store = Spy::new(MemoryStore::new()).on_call(move |call| {
        let write = matches!(call.method(), Method::Claim | Method::ClaimCompleted);
        if dark.load(Ordering::SeqCst) && write {
            Action::Silent(timeout)
        } else {
            Action::Forward
        }
    });
    (store, switch)
}

/// The dark-store scenario behind a cache: four keys completed through `p` (so the cache in
/// front of the darkening store holds them), then `dark`'s switch on, then a batch of one new
/// message, the four duplicates and nine more new ones. Answers the report, how many claims
/// and one-shot writes reached the dark store, and how many messages were reported "store
/// dark" at once.
pub(crate) async fn behind_duplicates<S, H>(
    p: &Processor<S, H>,
    dark: (&Spy<MemoryStore>, &AtomicBool),
) -> (BatchReport, usize, usize)
where
    S: ClaimStore,
    H: Service<Message> + Clone + Send + Sync + 'static,
    H::Future: Send + 'static,
    H::Response: Into<Effects<S::Effect>>,
    H::Error: Into<BoxError>,
{
    let (spy, switch) = dark;
    let writes = || spy.count(Method::Claim) + spy.count(Method::ClaimCompleted);
    let cached: Vec<_> = (1..=4).map(|i| record(&format!("c{i}"), "{}")).collect();
    let warm = p.process(lambda_event(&cached)).await.unwrap();
    assert_eq!(warm.counts().processed, 4);

    switch.store(true, Ordering::SeqCst);
    let before = writes();
    let mut batch = vec![record("f1", "{}")];
    batch.extend(cached.iter().cloned());
    batch.extend((2..=10).map(|i| record(&format!("f{i}"), "{}")));
    let report = p.process(lambda_event(&batch)).await.unwrap();
    let store_dark = report
        .items()
        .iter()
        .filter(|i| matches!(&i.outcome, Outcome::Failed(f) if f.message.contains("store dark")))
        .count();
    (report, writes() - before, store_dark)
}
