//! The operator's binary, `sqs-claim` (the crate `cli/`, package `sqs-claim-cli`). The app's
//! `payments` binary has its own commands only (`invoke`, `balances`, `init`): `prune`,
//! `doctor`, `inspect`, `release` and `forget` run on the same store with `sqs-claim`, as an
//! operator of this app runs them.
//!
//! Part of `support/mod.rs`.

use std::path::{Path, PathBuf};

/// The variable naming the `sqs-claim` binary to run instead of the one in the target dir.
pub const BIN_VAR: &str = "SQS_CLAIM_OPERATOR_BIN";

/// The path of the operator's `sqs-claim` binary: `$SQS_CLAIM_OPERATOR_BIN` if set, else
/// `sqs-claim` beside the `payments` binary under test, in the shared target dir, where `cargo
/// test --workspace` (and `make test`) builds it for `sqs-claim-cli`'s own tests.
///
/// Cargo builds only this package's binaries for its tests: a subset run (`cargo test -p
/// payments ...`) uses whatever `sqs-claim` binary is in the target dir, as fresh as its last
/// build (`cargo build -p sqs-claim-cli --bin sqs-claim` makes it current). Panics, saying how
/// to build it, if there is none.
pub fn sqs_claim_bin() -> PathBuf {
    let (bin, from) = match std::env::var_os(BIN_VAR).filter(|v| !v.is_empty()) {
        Some(bin) => (PathBuf::from(bin), BIN_VAR),
        None => {
            let payments = Path::new(env!("CARGO_BIN_EXE_payments"));
            let name = format!("sqs-claim{}", std::env::consts::EXE_SUFFIX);
            (payments.with_file_name(name), "the target dir")
        }
    };
    assert!(
        bin.is_file(),
        "no operator binary at {} ({from}): the operator's commands run with `sqs-claim`; \
         build it first, `cargo build -p sqs-claim-cli --bin sqs-claim` (or run `make test`, \
         which builds the whole workspace), or set {BIN_VAR} to its path",
        bin.display()
    );
    bin
}
