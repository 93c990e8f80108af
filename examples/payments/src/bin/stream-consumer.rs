//! The reference consumer on a stream, as a Lambda function: credits accounts from a Kinesis
//! data stream, a DynamoDB table's stream or a Kafka topic (`STREAM_SOURCE`), each record
//! effectively once, the credit committed with the claim's completion (`payments::stream`).
//! examples/streams/template.yaml deploys it, one function per source.
//!
//! Configured by the variables the template sets: `STREAM_SOURCE`, `CLAIMS_TABLE`,
//! `ACCOUNTS_TABLE`, `NAMESPACE`, `CLAIM_TTL_SECS` (`payments::stream::VARIABLES`); the AWS
//! clients by the standard AWS environment. Logs follow Lambda's log controls, as the SQS
//! consumer's do; record payloads are never logged.
//!
//! At start-up it checks that both tables exist and answer (bounded by
//! `SQS_CLAIM_STARTUP_TIMEOUT_MS`, default 15 s): a misconfiguration is one error line and a
//! non-zero exit, before any record is taken. Outside Lambda it processes `--event FILE` once
//! and prints the response (`sqs_claim::lambda::serve`).

use std::process::ExitCode;
use std::time::Duration;

use payments::stream::{Source, StreamSettings};
use payments::{BoxLedger, Ledger};
use sqs_claim::logging::{LogFormat, Logging};
use sqs_claim::stream::{DynamoDbStreams, Kafka, Kinesis};

/// The start-up bound when `SQS_CLAIM_STARTUP_TIMEOUT_MS` is unset (the SQS consumer's).
const STARTUP: Duration = Duration::from_secs(15);

fn startup_timeout() -> Result<Duration, sqs_claim::Error> {
    let lookup = |name: &str| std::env::var(name).ok();
    Ok(
        sqs_claim::settings::read::<u64>(&lookup, "SQS_CLAIM_STARTUP_TIMEOUT_MS")?
            .map_or(STARTUP, Duration::from_millis),
    )
}

/// The settings read, the ledger opened and checked.
async fn start() -> Result<(StreamSettings, BoxLedger), sqs_claim::Error> {
    let settings = StreamSettings::from_env()?;
    let store = settings.store();
    tracing::info!(
        source = %settings.source,
        store = %store,
        namespace = settings.namespace(),
        ttl_secs = settings.ttl.as_secs(),
        "starting the stream consumer"
    );
    let ledger = payments::open_prepared(&store, startup_timeout()?).await?;
    Ok((settings, ledger))
}

fn main() -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(serve()),
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> ExitCode {
    if let Err(e) = Logging::from_env().default_format(LogFormat::Json).init() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let (settings, ledger) = match start().await {
        Ok(started) => started,
        Err(e) => {
            tracing::error!(error = %format_args!("{e:#}"), "the stream consumer stopped");
            return ExitCode::FAILURE;
        }
    };
    let builder = payments::stream::builder(ledger, &settings);
    // One consumer type per source (each answers its source's response): serve the one named.
    let consumer = match settings.source {
        Source::Kinesis => Kinesis::new(builder).map(Consumer::Kinesis),
        Source::DynamoDb => DynamoDbStreams::new(builder).map(Consumer::DynamoDb),
        Source::Kafka => Kafka::new(builder).map(Consumer::Kafka),
    };
    match consumer {
        Ok(Consumer::Kinesis(c)) => sqs_claim::lambda::serve(c).await,
        Ok(Consumer::DynamoDb(c)) => sqs_claim::lambda::serve(c).await,
        Ok(Consumer::Kafka(c)) => sqs_claim::lambda::serve(c).await,
        Err(e) => {
            tracing::error!(error = %format_args!("{e:#}"), "the stream consumer stopped");
            ExitCode::FAILURE
        }
    }
}

type Handler = payments::CreditHandler<BoxLedger>;
type Store = <BoxLedger as Ledger>::Store;

/// The consumer `STREAM_SOURCE` names.
enum Consumer {
    Kinesis(Kinesis<Store, Handler>),
    DynamoDb(DynamoDbStreams<Store, Handler>),
    Kafka(Kafka<Store, Handler>),
}
