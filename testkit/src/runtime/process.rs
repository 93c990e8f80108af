//! A Lambda binary started as Lambda starts it: a clean environment with the runtime's
//! variables, output to files, killed when the test is done with it.
//!
//! Output goes to files, not pipes: a pipe nobody reads fills up and stalls the function, which
//! then looks like a hang of the code under test.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use super::FUNCTION_NAME;

/// How to start a Lambda binary under the fake Runtime API: the binary, its arguments, its
/// settings, where its output goes. [`start`](Self::start) runs it.
///
/// The process gets a clean environment: `PATH`, then what Lambda sets
/// (`AWS_LAMBDA_RUNTIME_API`, `AWS_LAMBDA_FUNCTION_NAME`, `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`,
/// `AWS_LAMBDA_FUNCTION_VERSION`, `AWS_LAMBDA_LOG_STREAM_NAME`, `AWS_LAMBDA_LOG_GROUP_NAME`,
/// `AWS_REGION`), then the variables given with [`env`](Self::env), which win. Nothing of the
/// test's own environment leaks in (no `RUST_LOG`, no AWS credentials) unless passed.
///
/// ```no_run
/// use sqs_claim_testkit::runtime::{FakeRuntime, LambdaCommand};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let runtime = FakeRuntime::start().await?;
/// let function = LambdaCommand::new("target/debug/my-consumer")
///     .function_name("orders")
///     .env("AWS_LAMBDA_MAX_CONCURRENCY", "4")
///     .start(&runtime.address())?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LambdaCommand {
    binary: PathBuf,
    args: Vec<OsString>,
    function_name: String,
    env: Vec<(OsString, OsString)>,
    logs: Option<(PathBuf, String)>,
    current_dir: Option<PathBuf>,
}

impl LambdaCommand {
    /// The binary at `binary` (in an integration test of its package,
    /// `env!("CARGO_BIN_EXE_<name>")`).
    pub fn new(binary: impl AsRef<Path>) -> Self {
        LambdaCommand {
            binary: binary.as_ref().to_path_buf(),
            args: Vec::new(),
            function_name: FUNCTION_NAME.to_owned(),
            env: Vec::new(),
            logs: None,
            current_dir: None,
        }
    }

    /// A command-line argument (Lambda passes none; a test binary re-run as the function needs
    /// some).
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Command-line arguments, as [`arg`](Self::arg).
    pub fn args<A: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = A>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// `AWS_LAMBDA_FUNCTION_NAME` (and the log group's name); default [`FUNCTION_NAME`].
    pub fn function_name(mut self, name: &str) -> Self {
        self.function_name = name.to_owned();
        self
    }

    /// One more environment variable, set after Lambda's own (so it may override them).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Environment variables, as [`env`](Self::env).
    pub fn envs<K, V>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// Writes stdout and stderr to `dir/NAME.stdout` and `dir/NAME.stderr`. Without it they go
    /// to a fresh directory under the system temp dir, removed with the [`LambdaProcess`].
    pub fn logs_in(mut self, dir: impl AsRef<Path>, name: &str) -> Self {
        self.logs = Some((dir.as_ref().to_path_buf(), name.to_owned()));
        self
    }

    /// The working directory (default: the test's).
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.current_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Starts the binary against the Runtime API at `runtime_api` (`host:port`, as
    /// [`FakeRuntime::address`](super::FakeRuntime::address) gives it).
    pub fn start(&self, runtime_api: &str) -> io::Result<LambdaProcess> {
        let (dir, name, owned_dir) = match &self.logs {
            Some((dir, name)) => (dir.clone(), name.clone(), false),
            None => {
                let dir = std::env::temp_dir().join(format!("lambda-{}", uuid::Uuid::new_v4()));
                std::fs::create_dir_all(&dir)?;
                (dir, self.function_name.clone(), true)
            }
        };
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        let mut command = Command::new(&self.binary);
        command
            .args(&self.args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
            .env("AWS_LAMBDA_FUNCTION_NAME", &self.function_name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_STREAM_NAME",
                "2026/11/30/[$LATEST]0123456789abcdef0123456789abcdef",
            )
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", self.function_name),
            )
            .env("AWS_REGION", "us-east-1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(File::create(&stdout)?)
            .stderr(File::create(&stderr)?);
        if let Some(cwd) = &self.current_dir {
            command.current_dir(cwd);
        }
        let child = command.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot start {}: {e}", self.binary.display()),
            )
        })?;
        Ok(LambdaProcess {
            child,
            stdout,
            stderr,
            owned_dir: owned_dir.then_some(dir),
        })
    }
}

/// A running Lambda binary, killed when dropped (so a failing assertion never leaks a process).
#[derive(Debug)]
pub struct LambdaProcess {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    /// The log directory, when this process made it (and removes it).
    owned_dir: Option<PathBuf>,
}

impl LambdaProcess {
    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Everything it wrote so far, stdout then stderr.
    pub fn logs(&self) -> String {
        format!("{}{}", self.stdout(), self.stderr())
    }

    /// What it wrote to stdout so far (a Lambda function's log lines).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The last 15 lines of its logs, for a failure message.
    pub fn tail(&self) -> String {
        let logs = self.logs();
        let lines: Vec<&str> = logs.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Kills it now and waits for it (dropping does too).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LambdaProcess {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = &self.owned_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
