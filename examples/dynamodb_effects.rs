//! A payments consumer whose business write commits in the same DynamoDB transaction as the
//! claim's completion: a crash can never leave the credit applied and the message unmarked, or
//! the message marked and the credit missing.
//!
//! Build: `cargo build --example dynamodb_effects`. Deploy it like `examples/payments/src/bin/consumer.rs`
//! (`CLAIMS_TABLE` and `ACCOUNTS_TABLE` name the two tables; `payments init --store
//! dynamodb:TABLE` creates both for the reference consumer's layout).

use sqs_claim::aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use sqs_claim::{BoxError, DynamoDbStore, Effects, KeySource, Message, Processor};
use tower::service_fn;

#[derive(serde::Deserialize)]
struct Payment {
    account: String,
    amount_cents: i64,
}

/// The credit, as an effect: an `Update` that the processor puts in the completion's
/// `TransactWriteItems`. The condition refuses an overdraft: the transaction is then cancelled,
/// the message fails (`effect_rejected`) and its claim is released.
fn credit(table: &str, p: &Payment) -> Result<TransactWriteItem, BoxError> {
    let update = Update::builder()
        .table_name(table)
        .key("account", AttributeValue::S(p.account.clone()))
        .update_expression("ADD balance :amount")
        .condition_expression("attribute_not_exists(balance) OR balance >= :debit")
        .expression_attribute_values(":amount", AttributeValue::N(p.amount_cents.to_string()))
        .expression_attribute_values(
            ":debit",
            AttributeValue::N((-p.amount_cents.min(0)).to_string()),
        )
        .build()?;
    Ok(TransactWriteItem::builder().update(update).build())
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let claims = std::env::var("CLAIMS_TABLE").unwrap_or_else(|_| "claims".into());
    let accounts = std::env::var("ACCOUNTS_TABLE").unwrap_or_else(|_| "accounts".into());
    let store = DynamoDbStore::from_env(claims).await;
    let handler = service_fn(move |msg: Message| {
        let accounts = accounts.clone();
        async move {
            let p: Payment = msg.json()?; // a bad body fails this message only
            Ok::<_, BoxError>(Effects::one(credit(&accounts, &p)?))
        }
    });
    let processor = Processor::builder(store, handler)
        .key(KeySource::JsonPointer("/order_id".into()))
        .namespace("payments")
        .build();
    lambda_runtime::run(processor).await
}
