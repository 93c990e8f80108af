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
//! clear log line rather than a failure per message. The check is bounded
//! (`SQS_CLAIM_STARTUP_TIMEOUT_MS`, default 15 s, and each round trip by the store's own timeout): a store that does not answer stops the
//! consumer with one error line and a non-zero exit. It runs beside the runtime's first
//! `GET /runtime/invocation/next` rather than before it, so its round trip to the store is not
//! part of the cold start. On DynamoDB with a partition key alone (the default layout) the
//! first batch is processed beside it too (`sqs_claim::lambda::run_while_checking`): no write
//! can land on a table the check refuses, and a cold invocation saves a round trip; elsewhere
//! the first event waits for its answer (`run_when_ready`). A failed check stops the consumer
//! with the event unanswered (Lambda redelivers the batch; the next invocation starts, and
//! checks, afresh).

use std::future::Future;
use std::process::ExitCode;

use payments::{Ledger, Settings};
use sqs_claim::logging::{LogFormat, Logging};
use sqs_claim::settings::bounded_startup;

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

/// The start-up check of [`start`]: the ledger's tables exist, are active and have the
/// configured key layout, bounded by `SQS_CLAIM_STARTUP_TIMEOUT_MS`.
type Check = std::pin::Pin<Box<dyn Future<Output = Result<(), sqs_claim::Error>> + Send>>;

/// The settings read, the store opened, the consumer built: everything before the first
/// invocation, with a clear error for whatever is wrong; the store's start-up check, to run
/// beside the first `next`; and whether it may run beside the first batch's writes too.
async fn start() -> Result<(payments::Consumer, Check, bool), lambda_runtime::Error> {
    let settings = Settings::from_env()?;
    let url = settings.lambda_store()?;
    tracing::info!(
        store = %url,
        key = %settings.key(),
        namespace = %settings.namespace(),
        output_queue = settings.output_queue_url.is_some(),
        // The Powertools key prefix, when the interop is on (SQS_CLAIM_POWERTOOLS_*).
        powertools = settings.powertools.as_ref().map(|f| f.prefix()),
        "starting the reference consumer"
    );
    check_lambda_environment()?;
    // Bounded: a store that is dark at start-up fails with one line, never a hang. Opening
    // sends nothing on DynamoDB (Redis connects here); the check is the store's first request.
    let startup = settings.startup_timeout;
    let ledger = bounded_startup(startup, payments::open(&url)).await?;
    let check: Check = Box::pin({
        let ledger = ledger.clone();
        bounded_startup(startup, async move { ledger.prepare().await })
    });
    // Beside the first batch's writes where no write can land on a table the check refuses
    // (a partition key alone on DynamoDB: Ledger::check_may_overlap_writes), else before them.
    let overlap = ledger.check_may_overlap_writes();
    Ok((payments::build(ledger, &settings).await?, check, overlap))
}

/// The runtime: tokio's multi-thread scheduler, a worker per core (what `#[tokio::main]` builds).
///
/// A current-thread runtime was measured too: 1.1 MiB less at the peak of a warm batch and less
/// CPU (docs/performance.md, "Where a warm process's memory goes"). It is not used: under
/// `scripts/measure-cold.py`'s fake Runtime API, about one cold start in fifty with it lost the
/// response to its first `next` (the connection closed while the event was being sent; the
/// process then waited on a second `next`), and none in the same number with this one. Until
/// that is understood, the runtime every test and the deployed function have run on stays.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

fn main() -> ExitCode {
    match runtime() {
        Ok(runtime) => runtime.block_on(serve()),
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> ExitCode {
    // JSON when Lambda does not say (its logs have always been JSON lines); the set-up drops
    // lambda_runtime's TRACE events whatever the filter says, as they carry raw events.
    if let Err(e) = Logging::from_env().default_format(LogFormat::Json).init() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    match start().await {
        // The library's loop: `run_concurrent` under AWS_LAMBDA_MAX_CONCURRENCY (Lambda
        // Managed Instances), `run` otherwise; the check's failure is its one error line.
        Ok((consumer, check, true)) => sqs_claim::lambda::run_while_checking(consumer, check).await,
        Ok((consumer, check, false)) => sqs_claim::lambda::run_when_ready(consumer, check).await,
        Err(e) => {
            // One JSON line that says what to fix; Lambda reports the init failure and
            // retries the batch later.
            tracing::error!(error = %format_args!("{e:#}"), "the consumer stopped");
            ExitCode::FAILURE
        }
    }
}
