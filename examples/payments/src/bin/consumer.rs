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

use payments::{AnyLedger, Ledger, Settings};
use sqs_claim::logging::{LogFormat, Logging};

/// Runs the Lambda runtime loop on `ledger`, once it is open and ready.
async fn serve_on<L: Ledger>(ledger: L, settings: &Settings) -> Result<(), lambda_runtime::Error> {
    let processor = payments::build(ledger, settings).await?;
    // Lambda Managed Instances set AWS_LAMBDA_MAX_CONCURRENCY: `run` would only warn and serve
    // one invocation at a time; `run_concurrent` polls with that many workers (the same switch
    // as `sqs_claim::lambda::run`). A clone of the consumer is an `Arc` bump.
    if std::env::var_os("AWS_LAMBDA_MAX_CONCURRENCY").is_some_and(|v| !v.is_empty()) {
        lambda_runtime::run_concurrent(processor).await
    } else {
        lambda_runtime::run(processor).await
    }
}

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

async fn serve() -> Result<(), lambda_runtime::Error> {
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
    let ledger = AnyLedger::open_prepared(&url, settings.startup_timeout).await?;
    payments::with_ledger!(ledger, l => serve_on(l, &settings).await)
}

#[tokio::main]
async fn main() -> ExitCode {
    // JSON when Lambda does not say (its logs have always been JSON lines); the set-up drops
    // lambda_runtime's TRACE events whatever the filter says, as they carry raw events.
    if let Err(e) = Logging::from_env().default_format(LogFormat::Json).init() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    match serve().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One JSON line that says what to fix; Lambda reports the init failure and
            // retries the batch later.
            tracing::error!(error = %format_args!("{e:#}"), "the consumer stopped");
            ExitCode::FAILURE
        }
    }
}
