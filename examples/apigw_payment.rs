//! `POST /payments` behind API Gateway (an HTTP API or a REST API: both payload formats), made idempotent by
//! the client's `Idempotency-Key` header: a client that retries after a timeout gets the first
//! answer back, byte for byte, and the card is charged once.
//!
//! ```text
//! cargo run --example apigw_payment --features apigw,sqlite -- --event examples/events/payment.json
//! cargo run --example apigw_payment --features apigw,sqlite -- --event examples/events/payment.json   # the same 201, replayed
//! cargo run --example apigw_payment --features apigw,sqlite -- --event examples/events/payment-other-body.json  # 422
//! ```
//!
//! | the request | the answer |
//! |-------------|------------|
//! | first with its key | 201, the payment (the provider is charged) |
//! | again, same key and body | the same 201, byte for byte (no charge) |
//! | same key while the first still runs | 409, `Retry-After` |
//! | same key, another body | 422 |
//! | no `Idempotency-Key` | 400 |
//! | a body that is not a payment | 400 from the handler (stored and replayed like any answer) |
//!
//! The same binary serves Lambda when Lambda starts it (`sqs_claim::lambda::serve`). The
//! handler takes an [`ApiGatewayRequest`], so one function serves an HTTP API (payload format
//! 2.0) and a REST API (1.0) alike, base64-encoded bodies included.
//!
//! Environment:
//!
//! * `IDEMPOTENCY_TABLE`: a DynamoDB table (partition key `id`, string) to keep the records in
//!   (feature `dynamodb`, the AWS configuration from the environment). Unset: an SQLite file,
//!   `IDEMPOTENCY_DB` (default `idempotency.sqlite3` in the working directory), so runs on one
//!   machine share it.
//! * `PROVIDER_LEDGER`: a file the fake payment provider appends one line to per charge (else it
//!   only logs); `PROVIDER_DELAY_MS`: how long a charge takes (default 0).
//! * `POWERTOOLS_HANDLER`: share the table of a Powertools-Python `@idempotent` handler
//!   (feature `powertools`; docs/powertools.md), named by its `module.qualname`
//!   (`app.lambda_handler`). Keys are then Powertools' own,
//!   `{AWS_LAMBDA_FUNCTION_NAME}.{POWERTOOLS_HANDLER}#{md5}` of the `Idempotency-Key` header
//!   (`event_key_jmespath='headers."Idempotency-Key"'`), the function name read as Powertools
//!   reads it (`test-func` when unset), and the request hash is its `validation` of
//!   `payload_validation_jmespath="powertools_json(body)"`: a request that Powertools answered
//!   is replayed from its stored response, not charged again, and Powertools replays this
//!   example's answers. Set without the feature, the example stops with exit code 2.
//!
//! ```text
//! IDEMPOTENCY_TABLE=idempotency POWERTOOLS_HANDLER=app.lambda_handler AWS_LAMBDA_FUNCTION_NAME=orders-api \
//!   cargo run --example apigw_payment --features apigw,sqlite,dynamodb,powertools -- --event examples/events/payment.json
//! ```

use std::process::ExitCode;
use std::time::Duration;

use lambda_runtime::LambdaEvent;
use serde_json::{Value, json};
use sqs_claim::idempotency::{ApiGatewayRequest, Idempotency, key};
use sqs_claim::{BoxError, ClaimStore};

#[derive(serde::Deserialize)]
struct NewPayment {
    amount: u64,
    currency: String,
}

/// The answer API Gateway turns into the HTTP response.
fn http(status: u16, body: &Value) -> Value {
    json!({
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": body.to_string(),
        "isBase64Encoded": false,
    })
}

/// The (fake) payment provider: one line in the ledger per charge.
async fn charge(payment_id: &str, amount: u64, currency: &str) -> Result<(), BoxError> {
    let delay = std::env::var("PROVIDER_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    if let Some(ledger) = std::env::var_os("PROVIDER_LEDGER") {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(ledger)?;
        writeln!(file, "{payment_id} {amount} {currency}")?;
    }
    tracing::info!(payment_id, amount, currency, "charged");
    Ok(())
}

/// The endpoint's own work. It runs once per `Idempotency-Key`; everything it answers is
/// stored and replayed, an error is not (the claim is released, a retry runs again).
async fn create_payment(event: LambdaEvent<ApiGatewayRequest>) -> Result<Value, BoxError> {
    let body = event.payload.body_text().unwrap_or_default();
    let Ok(new) = serde_json::from_str::<NewPayment>(&body) else {
        return Ok(http(
            400,
            &json!({"message": "expected {\"amount\": <cents>, \"currency\": \"eur\"}"}),
        ));
    };
    let id = format!("pay_{}", uuid::Uuid::new_v4().simple());
    // A real provider gets the key too (Stripe's own Idempotency-Key), so a retry after a
    // crash between the charge and the completion is not charged twice either.
    charge(&id, new.amount, &new.currency).await?;
    Ok(http(
        201,
        &json!({"id": id, "amount": new.amount, "currency": new.currency, "status": "succeeded"}),
    ))
}

/// `POWERTOOLS_HANDLER`, when set (and not empty).
fn powertools_handler() -> Option<String> {
    std::env::var("POWERTOOLS_HANDLER")
        .ok()
        .filter(|h| !h.trim().is_empty())
}

async fn serve<St: ClaimStore>(store: St, powertools: Option<String>) -> ExitCode {
    let builder =
        Idempotency::builder(store, key::header("Idempotency-Key")).namespace("payments-api");
    // Powertools' keys replace `payments-api#<key>`: the namespace does not enter them.
    #[cfg(feature = "powertools")]
    let builder = match powertools {
        Some(handler) => builder.key_format(sqs_claim::powertools::PowertoolsFormat::from_env(
            handler.trim(),
        )),
        None => builder,
    };
    #[cfg(not(feature = "powertools"))]
    let _ = powertools; // refused in `main`
    let idempotency = builder.build();
    let service = idempotency.service(tower::service_fn(create_payment));
    sqs_claim::lambda::serve(service).await
}

#[tokio::main]
async fn main() -> ExitCode {
    // Logs on stderr: stdout carries only the response when run on an event file.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();

    let powertools = powertools_handler();
    #[cfg(not(feature = "powertools"))]
    if let Some(handler) = &powertools {
        eprintln!(
            "error: POWERTOOLS_HANDLER={handler} needs the powertools feature (cargo run \
             --example apigw_payment --features apigw,sqlite,dynamodb,powertools)"
        );
        return ExitCode::from(2);
    }
    if let Some(table) = std::env::var("IDEMPOTENCY_TABLE")
        .ok()
        .filter(|t| !t.is_empty())
    {
        #[cfg(feature = "dynamodb")]
        return serve(sqs_claim::DynamoDbStore::from_env(table).await, powertools).await;
        #[cfg(not(feature = "dynamodb"))]
        {
            eprintln!("error: IDEMPOTENCY_TABLE={table} needs the dynamodb feature");
            return ExitCode::from(2);
        }
    }
    let path = std::env::var("IDEMPOTENCY_DB").unwrap_or_else(|_| "idempotency.sqlite3".into());
    match sqs_claim::SqliteStore::open(&path) {
        Ok(store) => serve(store, powertools).await,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
