//! Powertools for AWS Lambda (Python) for the tests: the pinned venv
//! (`scripts/powertools/venv.sh`, installed on first use) and `scripts/powertools/driver.py`,
//! which runs Powertools' own key derivation and a real `@idempotent` handler or
//! `@idempotent_function` SQS batch consumer (`scripts/powertools/app.py`) against DynamoDB
//! Local. The example app's tests use this file too (`#[path]` in
//! `examples/payments/tests/support/mod.rs`): the driver is this repository's scripts, not
//! something the test kit ships.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// The repository root: the first directory up from this crate's that holds the scripts.
pub(crate) fn repo_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .find(|dir| dir.join("scripts/powertools/venv.sh").is_file())
            .expect("scripts/powertools/venv.sh above the crate")
            .to_path_buf()
    })
}

/// The venv's python, installing the pinned Powertools on first use.
pub(crate) fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/powertools/venv.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/powertools/venv.sh");
        assert!(
            out.status.success(),
            "scripts/powertools/venv.sh failed: Powertools could not be installed"
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// Runs `driver.py ARGS` with `stdin`, as the Lambda function `function`
/// (`AWS_LAMBDA_FUNCTION_NAME`) against DynamoDB Local (`SQS_CLAIM_DYNAMODB_ENDPOINT`, default
/// `http://127.0.0.1:8000`); returns the JSON it prints last.
pub(crate) fn driver(function: &str, args: &[&str], stdin: &str) -> Value {
    let endpoint = std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:8000".into());
    let mut child = Command::new(python())
        .arg(repo_root().join("scripts/powertools/driver.py"))
        .args(args)
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("SQS_CLAIM_DYNAMODB_ENDPOINT", endpoint)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn driver.py");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("driver.py");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "driver.py {args:?} exited {:?} and printed {text:?}: {e}",
            out.status
        )
    })
}
