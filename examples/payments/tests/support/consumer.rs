//! The `consumer` Lambda binary started as Lambda would start it (the test kit's
//! `LambdaCommand`), and a temp dir for it: shared by the tests that run it under the fake
//! Runtime API (`sqs_claim_testkit::runtime`).
//!
//! Its stdout and stderr go to files in the temp dir; dropping the guard kills it, so a failing
//! assertion never leaks a process.

use std::ffi::OsStr;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};

use sqs_claim_testkit::runtime::{LambdaCommand, LambdaProcess};

const CONSUMER: &str = env!("CARGO_BIN_EXE_consumer");

/// A fresh directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new directory under the system temp dir, named `PREFIX-<uuid>`.
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The running consumer (the test kit's [`LambdaProcess`]: `exited`, `logs`, `stdout`, `tail`,
/// `kill`), killed when dropped.
#[derive(Debug)]
pub struct Consumer(LambdaProcess);

impl Consumer {
    /// Starts the binary in `dir` as Lambda would: a clean environment with the runtime
    /// variables, then `env` (the consumer's settings; `RUST_LOG` only if a test sets it).
    /// Its output goes to `dir/NAME.stdout` and `dir/NAME.stderr`.
    pub fn start<K, V>(
        dir: &Path,
        name: &str,
        runtime_api: &str,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Consumer
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let process = LambdaCommand::new(CONSUMER)
            .function_name("consumer")
            .current_dir(dir)
            .logs_in(dir, name)
            .envs(env)
            .start(runtime_api)
            .expect("start the consumer binary");
        Consumer(process)
    }
}

impl Deref for Consumer {
    type Target = LambdaProcess;

    fn deref(&self) -> &LambdaProcess {
        &self.0
    }
}

impl DerefMut for Consumer {
    fn deref_mut(&mut self) -> &mut LambdaProcess {
        &mut self.0
    }
}
