//! Calling the processor from your own Lambda handler, to do something around the batch
//! (metrics, a custom log line, an early exit) and still return the partial batch response.
//!
//! ```text
//! cargo lambda watch --example embed
//! cargo lambda invoke --data-file events/plain.json
//! ```

use lambda_runtime::{Error, LambdaEvent, service_fn};
use sqs_claim::events::{SqsBatchResponse, SqsEvent};
use sqs_claim::{MemoryStore, Message, Processor};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt().json().without_time().init();

    let handler = tower::service_fn(|msg: Message| async move {
        let value: serde_json::Value = msg.json()?;
        tracing::debug!(
            message_id = msg.id(),
            fields = value.as_object().map_or(0, |o| o.len()),
            "handled"
        );
        Ok::<(), sqs_claim::Error>(())
    });
    // Cheap to clone: one `Arc` inside, shared by every invocation of this instance.
    let processor = Processor::builder(MemoryStore::new(), handler)
        .namespace("embed-example")
        .build();

    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let processor = processor.clone();
        async move {
            let request_id = event.context.request_id.clone();
            // `process` fails as a whole only for a batch it cannot report on (a record
            // without a messageId): returning the error makes Lambda redeliver the batch.
            let report = processor.process(event).await?;
            let counts = report.counts();
            tracing::info!(
                request_id,
                processed = counts.processed,
                duplicate = counts.duplicate,
                failed = counts.failed + counts.held_elsewhere + counts.not_started,
                "batch summary"
            );
            Ok::<SqsBatchResponse, Error>(report.response())
        }
    }))
    .await
}
