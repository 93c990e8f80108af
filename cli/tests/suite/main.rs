//! The operator CLI's integration tests: one test binary, a module per area (`cargo test -p sqs-claim-cli --test suite`); run one
//! area with its module's name as the filter, `cargo test -p sqs-claim-cli --all-features --test suite
//! test_commands::`. A module that needs features is compiled only with them (`cargo test` with the
//! defaults builds what it can run). One binary links the dependency graph once, where a
//! binary per file linked it 3 times (docs/testing.md).

mod test_commands;
mod test_doctor;
mod test_inspect_event;
