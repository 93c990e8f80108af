//! A memory store behind the kit's spy that goes dark on a switch: once it is on, every claim
//! waits `timeout` and fails as a client whose own timeout ran out (`Action::Silent`), which
//! the processor reads as the store's silence. The other calls pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqs_claim::MemoryStore;
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
