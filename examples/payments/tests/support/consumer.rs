//! The `consumer` Lambda binary started as Lambda would start it, and a temp dir for it: shared
//! by the tests that run it under the fake Runtime API (`fake_runtime.rs`).
//!
//! Its stdout and stderr go to files (a pipe nobody reads would fill and stall it); dropping
//! the guard kills it, so a failing assertion never leaks a process.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

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

/// The running consumer, killed when dropped.
pub struct Consumer {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

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
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        let child = Command::new(CONSUMER)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
            .env("AWS_LAMBDA_FUNCTION_NAME", "consumer")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_STREAM_NAME",
                "2026/11/30/[$LATEST]0123456789abcdef0123456789abcdef",
            )
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/consumer")
            .env("AWS_REGION", "us-east-1")
            .envs(env)
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).expect("create the stdout file"))
            .stderr(File::create(&stderr).expect("create the stderr file"))
            .spawn()
            .expect("start the consumer binary");
        Consumer {
            child,
            stdout,
            stderr,
        }
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Everything it wrote so far, stdout then stderr.
    pub fn logs(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        format!("{}{}", read(&self.stdout), read(&self.stderr))
    }

    /// What it wrote to stdout so far (its JSON log lines).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// The last lines of the logs, for a failure message.
    pub fn tail(&self) -> String {
        let logs = self.logs();
        let lines: Vec<&str> = logs.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Kills it now (dropping does too).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.kill();
    }
}
