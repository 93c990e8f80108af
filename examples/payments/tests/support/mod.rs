//! What the example app's tests share: the `payments` command line, the operator's `sqs-claim`
//! on the same store and the `consumer` binary run as a user runs them, the ledgers' balance
//! range, stores on the real servers, the Powertools driver, and log capture.
//!
//! The fake Runtime API, the fault proxy, silent endpoints, the EMF checker and the event
//! builders are `sqs-claim-testkit`'s. Included once by `tests/suite/main.rs`; a build with
//! fewer features compiles out the modules that use some of it, hence the `dead_code`
//! allowance.
#![allow(dead_code)]

pub mod cli;
pub mod consumer;
pub mod ledger;
pub mod operator;
// The library's own test support, compiled here too (one copy; why not a crate: the header of
// `servers.rs`).
#[path = "../../../../tests/support/powertools.rs"]
pub mod powertools;
#[path = "../../../../tests/support/servers.rs"]
pub mod servers;

/// Installs a test log subscriber once (respects `RUST_LOG`), so failures can be read with logs.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_test_writer()
        .try_init();
}
