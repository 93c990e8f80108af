//! The reference consumer as a Lambda function: credits accounts from an SQS queue, each
//! message effectively once (see `payments`).
//!
//! Configured by environment variables (`SQS_CLAIM_TABLE`, `SQS_CLAIM_STORE`, ...; the table is
//! in the README's `config` section). Logs follow Lambda's log controls
//! (`sqs_claim::logging`): JSON lines unless `AWS_LAMBDA_LOG_FORMAT` says `Text`, at most as
//! verbose as `AWS_LAMBDA_LOG_LEVEL`, filtered by `RUST_LOG` (default `info`); message bodies
//! are never logged. After each batch it writes one CloudWatch EMF metrics line to stdout
//! (`SQS_CLAIM_METRICS_NAMESPACE`, default `sqs-claim`; `off` for none).
//!
//! At startup it checks that the store's tables exist and answer, so a misconfiguration is one
//! clear log line at init rather than a failure per message. The check is bounded
//! (`SQS_CLAIM_STARTUP_TIMEOUT_MS`, default 5 s): a store that does not answer stops the
//! consumer with one error line and a non-zero exit.

use std::process::ExitCode;

use payments::Settings;
use sqs_claim::logging::{LogFormat, Logging};

/// `lambda_runtime` panics on a missing runtime variable; say what is wrong instead.
fn check_lambda_environment() -> Result<(), lambda_runtime::Error> {
    for var in [
        "AWS_LAMBDA_RUNTIME_API",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_VERSION",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    ] {
        if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
            return Err(format!(
                "{var} is not set: this binary runs inside AWS Lambda (or `cargo lambda watch`); \
                 to run the consumer on an event file, use `payments invoke EVENT.json`"
            )
            .into());
        }
    }
    let memory = std::env::var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE").unwrap_or_default();
    if memory.parse::<i32>().is_err() {
        return Err(format!("AWS_LAMBDA_FUNCTION_MEMORY_SIZE={memory:?} is not a number").into());
    }
    Ok(())
}

/// The settings read, the store opened and checked, the consumer built: everything before the
/// first invocation, with a clear error for whatever is wrong.
async fn start() -> Result<payments::Consumer, lambda_runtime::Error> {
    let settings = Settings::from_env()?;
    let url = settings.lambda_store()?;
    tracing::info!(
        store = %url,
        key = %settings.key().describe(),
        namespace = %settings.namespace(),
        output_queue = settings.output_queue_url.is_some(),
        // The Powertools key prefix, when the interop is on (SQS_CLAIM_POWERTOOLS_*).
        powertools = settings.powertools.as_ref().map(|f| f.prefix()),
        "starting the reference consumer"
    );
    check_lambda_environment()?;
    // Bounded: a store that is dark at start-up fails the init with one line, never a hang.
    let ledger = payments::open_prepared(&url, settings.startup_timeout).await?;
    Ok(payments::build(ledger, &settings).await?)
}

#[tokio::main]
async fn main() -> ExitCode {
    // JSON when Lambda does not say (its logs have always been JSON lines); the set-up drops
    // lambda_runtime's TRACE events whatever the filter says, as they carry raw events.
    if let Err(e) = Logging::from_env().default_format(LogFormat::Json).init() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    match start().await {
        // The library's loop: `run_concurrent` under AWS_LAMBDA_MAX_CONCURRENCY (Lambda
        // Managed Instances), `run` otherwise.
        Ok(consumer) => sqs_claim::lambda::run(consumer).await,
        Err(e) => {
            // One JSON line that says what to fix; Lambda reports the init failure and
            // retries the batch later.
            tracing::error!(error = %format_args!("{e:#}"), "the consumer stopped");
            ExitCode::FAILURE
        }
    }
}
