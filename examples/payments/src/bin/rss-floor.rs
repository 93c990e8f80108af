//! The floor of `scripts/measure-rss.py`: a bare `lambda_runtime` SQS function on a default
//! `#[tokio::main]` runtime that decodes the batch as `SqsEvent` and answers an empty partial
//! batch response, nothing else. What any Rust SQS function holds for the same event (the
//! runtime, its threads, the event itself), measured in the same run as the `consumer` and
//! `payments invoke`, so their peak RSS is given against it.
//!
//! Under a Runtime API (`AWS_LAMBDA_RUNTIME_API` set) it serves invocations; with
//! `--event FILE` it reads and decodes the file once, as `payments invoke` does, and prints
//! `{}`. With neither it does nothing. Built only with the feature `rss-floor`.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use sqs_claim::events::{SqsBatchResponse, SqsEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some_and(|v| !v.is_empty()) {
        return lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| async move {
            std::hint::black_box(&event.payload);
            Ok::<_, Error>(SqsBatchResponse::default())
        }))
        .await;
    }
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args
        .iter()
        .position(|a| a == "--event")
        .and_then(|i| args.get(i + 1))
    else {
        return Ok(());
    };
    let text = std::fs::read_to_string(path)?;
    let event: SqsEvent = serde_json::from_str(&text)?;
    std::hint::black_box(&event);
    println!("{}", serde_json::to_string(&SqsBatchResponse::default())?);
    Ok(())
}
