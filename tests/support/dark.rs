//! A memory store behind the kit's spy that goes dark on a switch: once it is on, every claim
//! waits `timeout` and fails as a client whose own timeout ran out (`Action::Silent`), which
//! the processor reads as the store's silence. The other calls pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqs_claim::{BatchReport, ClaimStore, Error, MemoryStore, Message, Outcome, Processor};
use sqs_claim_testkit::sqs::{lambda_event, record};
use sqs_claim_testkit::store::{Action, Method, Spy};

/// The store, and its switch (off: a healthy memory store).
pub(crate) fn darkening(timeout: Duration) -> (Spy<MemoryStore>, Arc<AtomicBool>) {
    let dark = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&dark);
    let store = Spy::new(MemoryStore::new()).on_call(move |call| {
        if dark.load(Ordering::SeqCst) && call.method() == Method::Claim {
            Action::Silent(timeout)
        } else {
            Action::Forward
        }
    });
    (store, switch)
}

/// The dark-store scenario behind a cache: four keys completed through `store` (so its cache
/// holds them), then `dark`'s switch on, then a batch of one new message, the four duplicates
/// and nine more new ones, four at a time. Answers the report, how many claims reached the
/// dark store, and how many messages were reported "store dark" at once.
pub(crate) async fn behind_duplicates<S: ClaimStore>(
    store: S,
    dark: (&Spy<MemoryStore>, &AtomicBool),
    namespace: &str,
) -> (BatchReport, usize, usize) {
    let (spy, switch) = dark;
    let handler = tower::service_fn(|_msg: Message| async { Ok::<(), Error>(()) });
    let p = Processor::builder(store, handler)
        .namespace(namespace)
        .concurrency(4)
        .build();
    let cached: Vec<_> = (1..=4).map(|i| record(&format!("c{i}"), "{}")).collect();
    let warm = p.process(lambda_event(&cached)).await.unwrap();
    assert_eq!(warm.counts().processed, 4);

    switch.store(true, Ordering::SeqCst);
    let before = spy.count(Method::Claim);
    let mut batch = vec![record("f1", "{}")];
    batch.extend(cached.iter().cloned());
    batch.extend((2..=10).map(|i| record(&format!("f{i}"), "{}")));
    let report = p.process(lambda_event(&batch)).await.unwrap();
    let store_dark = report
        .items()
        .iter()
        .filter(|i| matches!(&i.outcome, Outcome::Failed(f) if f.message.contains("store dark")))
        .count();
    let sent = spy.count(Method::Claim) - before;
    (report, sent, store_dark)
}
