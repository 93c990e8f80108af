//! # sqs-claim-cli
//!
//! The operator's tool for the claims tables of [`sqs_claim`]: the `sqs-claim` binary
//! (`cargo install sqs-claim-cli`), on every store and key layout, needing nothing but the
//! claims table. Its commands work for any consumer built on `sqs-claim`:
//!
//! | command | what it does |
//! |---------|--------------|
//! | `sqs-claim init` | creates the claims table (DynamoDB with TTL, PostgreSQL, SQLite), migrates an older one |
//! | `sqs-claim prune` | deletes expired claim records where the store has no TTL (SQLite, PostgreSQL) |
//! | `sqs-claim doctor` | checks the queue, the event source mapping and the claims table against the protocol's rules |
//! | `sqs-claim inspect KEY` | shows one key's claim record |
//! | `sqs-claim inspect --event FILE` | shows each record of a captured batch (SQS, Kinesis, DynamoDB Streams): its key and claim, and where each shard stands |
//! | `sqs-claim release KEY` | frees a stuck in-progress claim (never a completed one) |
//! | `sqs-claim forget KEY` | deletes a completed record, so its message runs again (never an in-progress one) |
//!
//! The library half is what the binary is made of, for a team's binary that offers these
//! commands beside its own (the example app's `payments` does not: it is built on the library
//! alone). The `SQS_CLAIM_*` settings and
//! the store URLs it reads are the library's, [`sqs_claim::settings`]:
//!
//! | what | where |
//! |------|-------|
//! | whichever claims store a URL names, opened as one [`BoxStore`](sqs_claim::store::BoxStore) ([`StoreUrl::open`](sqs_claim::settings::StoreUrl::open)); its administration ([`sqs_claim::store::StoreAdmin`]) | the library, [`sqs_claim::settings`] |
//! | the commands, the store flags over the environment, one-line errors and exit codes | [`command`] |
//! | `doctor`: facts, pure rules, the report | [`doctor`] |
//! | `inspect`, `release`, `forget` | [`operator`] |
//! | `inspect --event`: a batch's keys (the library's `ProcessorBuilder::record_keys`) and claims | `batch.rs` |
//!
//! Errors are one `error: ...` line on stderr: exit 1 for bad input, a missing record or a
//! store that does not answer; exit 2 for a usage mistake.

mod batch;
pub mod command;
pub mod doctor;
pub mod operator;

// The settings and store URLs every consumer reads are the library's (`sqs_claim::settings`).
pub(crate) use sqs_claim::settings::{Settings, StoreUrl};
