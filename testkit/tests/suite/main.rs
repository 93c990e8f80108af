//! The test kit's integration tests: one test binary, a module per area (`cargo test -p sqs-claim-testkit --test suite`); run one
//! area with its module's name as the filter, `cargo test -p sqs-claim-testkit --all-features --test suite
//! test_spy::`. A module that needs features is compiled only with them (`cargo test` with the
//! defaults builds what it can run). One binary links the dependency graph once, where a
//! binary per file linked it 2 times (docs/testing.md).

mod test_my_consumer;
mod test_spy;
