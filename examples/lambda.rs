//! The processor *is* the Lambda handler: `lambda_runtime::run(processor)`.
//!
//! This example uses the in-process [`MemoryStore`] so it builds and runs with nothing else
//! installed; a deployed function uses a shared store (`DynamoDbStore`), since every Lambda
//! instance has its own memory. Try it locally with cargo-lambda:
//!
//! ```text
//! cargo lambda watch --example lambda
//! cargo lambda invoke --data-file events/plain.json
//! ```

use sqs_claim::{KeySource, MemoryStore, Message, Processor};
use tower::service_fn;

#[derive(serde::Deserialize)]
struct Order {
    order_id: String,
    amount_cents: i64,
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracing_subscriber::fmt().json().without_time().init();

    // The handler sees one message at a time. Returning an error (or panicking) fails that
    // message alone; a body that does not decode fails that message alone.
    let handler = service_fn(|msg: Message| async move {
        let order: Order = msg.json()?;
        // ... charge the card here, passing `msg.key()` as the provider's idempotency key ...
        tracing::info!(
            message_id = msg.id(),
            order_id = order.order_id,
            amount_cents = order.amount_cents,
            "order charged"
        );
        Ok::<(), sqs_claim::Error>(())
    });

    let processor: Processor<MemoryStore, _> = Processor::builder(MemoryStore::new(), handler)
        .key(KeySource::JsonPointer("/order_id".into()))
        .namespace("orders")
        .build();

    // A `tower::Service<LambdaEvent<SqsEvent>>` answering an `SqsBatchResponse`: the partial
    // batch response that lists only the messages to retry.
    lambda_runtime::run(processor).await
}
