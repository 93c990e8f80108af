//! The example app's integration tests: one test binary, a module per area (`cargo test -p payments --test suite`); run one
//! area with its module's name as the filter, `cargo test -p payments --all-features --test suite
//! test_ledgers::`. A module that needs features is compiled only with them (`cargo test` with the
//! defaults builds what it can run). One binary links the dependency graph once, where a
//! binary per file linked it 15 times (docs/testing.md).

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "cli")]
mod test_cli;
mod test_consumer_faults;
#[cfg(feature = "cli")]
mod test_e2e_retries;
mod test_envelopes;
mod test_failure_queue;
mod test_hot_items;
#[cfg(feature = "cli")]
mod test_lambda_runtime;
mod test_ledgers;
mod test_managed_instances;
#[cfg(feature = "cli")]
mod test_operator;
#[cfg(feature = "cli")]
mod test_powertools_app;
mod test_properties;
#[cfg(feature = "cli")]
mod test_startup;
mod test_template;
mod test_warm_cache;
