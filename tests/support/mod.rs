//! The library's test support, one home: the batches and recording handlers the processor
//! tests share (`batch`), and the real servers behind the store tests: DynamoDB Local on a
//! fresh table, Redis under a fresh prefix, PostgreSQL on a fresh table, and the Powertools for
//! AWS Lambda (Python) driver. Each server helper fails, never skips, when its server does not
//! answer.
//!
//! What a user's tests would want too (the fake Runtime API, the fault proxy, silent endpoints,
//! the EMF checker, event builders, where the stand-ins are) is in `sqs-claim-testkit`; these
//! modules hold what needs the library's own types or this repository's scripts. Included once
//! by `tests/suite/main.rs` (and parts of it by the example app's tests); a build with fewer
//! features compiles out the modules that use some of it, hence the `dead_code` allowance.
#![allow(dead_code)]

pub(crate) mod batch;
pub(crate) mod dark;
#[cfg(feature = "dynamodb")]
pub(crate) mod dynamodb;
pub(crate) mod powertools;
pub(crate) mod servers;
