//! A memory store behind the kit's spy that goes dark on a switch: once it is on, every claim
//! and one-shot write waits `timeout` and fails as a client whose own timeout ran out
//! (`Action::Silent`), which the processor reads as the store's silence. The other calls pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lambda_runtime::LambdaEvent;
use sqs_claim::events::SqsEvent;
use sqs_claim::{BatchReport, Error, MemoryStore, Outcome};
use sqs_claim_testkit::sqs::{lambda_event, record};
use sqs_claim_testkit::store::{Action, Method, Spy};

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

/// What [`behind_duplicates`] answers, for an assertion's message.
pub(crate) const FIGURES: &str = "(claims and one-shot writes that reached the dark store, \
     duplicates answered, messages reported \"store dark\" at once)";

/// The dark-store scenario behind a cache: four keys completed through `process` (so the cache
/// in front of the darkening store holds them), then `dark`'s switch on, then a batch of one
/// new message, the four duplicates and nine more new ones. Answers the [`FIGURES`], the whole
/// seconds (tokio's clock) the dark batch took, and its report as JSON.
pub(crate) async fn behind_duplicates(
    process: impl AsyncFn(LambdaEvent<SqsEvent>) -> Result<BatchReport, Error>,
    dark: (&Spy<MemoryStore>, &AtomicBool),
) -> ((usize, usize, usize), u64, String) {
    let (spy, switch) = dark;
    let writes = || spy.count(Method::Claim) + spy.count(Method::ClaimCompleted);
    let cached: Vec<_> = (1..=4).map(|i| record(&format!("c{i}"), "{}")).collect();
    let warm = process(lambda_event(&cached)).await.unwrap();
    assert_eq!(warm.counts().processed, 4);

    switch.store(true, Ordering::SeqCst);
    let before = writes();
    let mut batch = vec![record("f1", "{}")];
    batch.extend(cached.iter().cloned());
    batch.extend((2..=10).map(|i| record(&format!("f{i}"), "{}")));
    let started = tokio::time::Instant::now();
    let report = process(lambda_event(&batch)).await.unwrap();
    let took = started.elapsed().as_secs();
    let store_dark = report
        .items()
        .iter()
        .filter(|i| matches!(&i.outcome, Outcome::Failed(f) if f.message.contains("store dark")))
        .count();
    let figures = (writes() - before, report.counts().duplicate, store_dark);
    (figures, took, report.to_json().to_string())
}
