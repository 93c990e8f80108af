//! Your own consumer, runnable on your machine as well as in Lambda: `sqs_claim::lambda::run`.
//!
//! The same binary serves Lambda invocations when Lambda starts it, and processes an SQS event
//! file when you do:
//!
//! ```text
//! cargo run --example local_event -- --event events/negative-amount.json
//! cargo run --example local_event -- --event events/plain.json --report json
//! ```
//!
//! stdout gets the partial batch response (here the one message with a negative amount),
//! stderr a summary of the outcomes. The store is in memory, so each run starts empty; a
//! deployed consumer uses a shared store (`DynamoDbStore`). `tests/suite/test_lambda_run.rs` runs
//! this binary, on event files and under a fake Lambda Runtime API.

use std::process::ExitCode;

use sqs_claim::{KeySource, MemoryStore, Message, Processor};
use tower::service_fn;

#[derive(serde::Deserialize)]
struct Order {
    order_id: String,
    account: String,
    amount_cents: i64,
}

#[tokio::main]
async fn main() -> ExitCode {
    // Logs on stderr, so stdout carries only the batch response when run on an event file.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();

    let handler = service_fn(|msg: Message| async move {
        let order: Order = msg.json()?; // a body that does not decode fails this message only
        if order.amount_cents < 0 {
            // An error fails this message alone: it is reported for retry, the claim released.
            return Err(format!("order {} has a negative amount", order.order_id).into());
        }
        // ... credit the account here, passing `msg.key()` on as an idempotency key ...
        tracing::info!(message_id = msg.id(), account = order.account, "credited");
        Ok::<(), sqs_claim::BoxError>(())
    });
    let processor = Processor::builder(MemoryStore::new(), handler)
        .key(KeySource::JsonPointer("/order_id".into()))
        .namespace("orders")
        .build();

    sqs_claim::lambda::run(processor).await
}
