//! A bare `lambda_runtime` function, the baseline of `scripts/measure-init.py`: what any Rust
//! function pays from exec to its first `GET /runtime/invocation/next` (the tokio runtime, the
//! runtime client, dynamic linking), measured in the same run as the `consumer`, so the
//! consumer's init is given as a ratio against it.
//!
//! It echoes each event back. With no `AWS_LAMBDA_RUNTIME_API` (how `cargo bench` and
//! `cargo test --benches` call every bench target) it does nothing.

use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        return Ok(());
    }
    lambda_runtime::run(service_fn(
        |event: LambdaEvent<serde_json::Value>| async move { Ok::<_, Error>(event.payload) },
    ))
    .await
}
