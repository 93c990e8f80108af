//! A Stripe-style webhook receiver behind API Gateway (a REST API or an HTTP API): each
//! event is applied once, however often the provider delivers it, and every delivery gets the
//! same answer.
//!
//! ```text
//! STRIPE_TOLERANCE_SECS=0 cargo run --example stripe_webhook --features apigw,sqlite -- \
//!     --event examples/events/stripe-payment-succeeded.json
//! ```
//!
//! (The sample event was signed once, at a fixed time: `STRIPE_TOLERANCE_SECS=0` accepts its
//! age. A real delivery is checked against the default five minutes.)
//!
//! 1. The `Stripe-Signature` header (`t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>">`) is
//!    checked before anything else, outside the idempotency layer: a forged or stale delivery
//!    is answered 400 and claims nothing.
//! 2. The event is keyed on its own id, the body's `/id` (`evt_...`): Stripe redelivers an
//!    event under the same id.
//! 3. Applying it is an SQL statement committed in the same transaction as the completion
//!    (`WithEffects`): the event is recorded as applied exactly once, with the record that
//!    makes every redelivery a replay. A crash before the commit applies nothing; the
//!    redelivery applies it.
//!
//! Store: SQLite, `WEBHOOK_DB` (default `webhooks.sqlite3` in the working directory); its
//! `applied_events` table is the "business" table. Secret: `STRIPE_WEBHOOK_SECRET` (default
//! `whsec_test_secret`, the one the sample event is signed with).

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::LambdaEvent;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqs_claim::idempotency::{
    ApiGatewayRequest, Idempotency, IdempotentResponse, Payload, WithEffects, key,
};
use sqs_claim::{BoxError, Effects, SqlEffect, SqlValue, SqliteStore};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS applied_events (
    event_id TEXT PRIMARY KEY NOT NULL,
    type     TEXT NOT NULL,
    amount   INTEGER
)";

fn http(status: u16, body: &Value) -> Value {
    json!({
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": body.to_string(),
        "isBase64Encoded": false,
    })
}

/// HMAC-SHA256 (RFC 2104) over `sha2`, which is already a dependency.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Checks `Stripe-Signature: t=<time>,v1=<hex>[,v1=<hex>...]` against the body; `tolerance`
/// zero accepts any age. Says why not, without quoting the header.
fn verify(
    header: Option<&str>,
    body: &str,
    secret: &str,
    tolerance: Duration,
) -> Result<(), &'static str> {
    let header = header.ok_or("no Stripe-Signature header")?;
    let mut time = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => time = t.parse::<u64>().ok(),
            Some(("v1", sig)) => signatures.push(sig),
            _ => {}
        }
    }
    let time = time.ok_or("the signature has no timestamp")?;
    if !tolerance.is_zero() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if now.abs_diff(time) > tolerance.as_secs() {
            return Err("the signature's timestamp is outside the tolerance");
        }
    }
    let expected = hex::encode(hmac_sha256(
        secret.as_bytes(),
        format!("{time}.{body}").as_bytes(),
    ));
    // Compared in constant time: an early exit would tell a forger how much was right.
    let matches = signatures.iter().any(|sig| {
        sig.len() == expected.len()
            && sig
                .bytes()
                .zip(expected.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if matches {
        Ok(())
    } else {
        Err("the signature does not match")
    }
}

/// Applies one verified event: runs once per event id, and its statement commits with the
/// completion.
async fn apply(
    event: LambdaEvent<ApiGatewayRequest>,
) -> Result<WithEffects<Value, SqlEffect>, BoxError> {
    let body: Value = serde_json::from_str(&event.payload.body_text().unwrap_or_default())?;
    let id = body["id"].as_str().unwrap_or_default().to_owned();
    let kind = body["type"].as_str().unwrap_or("unknown").to_owned();
    let amount = body["data"]["object"]["amount"].as_i64();
    let effect = SqlEffect::new(
        "INSERT INTO applied_events (event_id, type, amount) VALUES (?1, ?2, ?3)",
        vec![
            SqlValue::Text(id),
            SqlValue::Text(kind.clone()),
            amount.map_or(SqlValue::Null, SqlValue::Integer),
        ],
    );
    Ok(WithEffects::new(
        http(200, &json!({"received": true, "applied": kind})),
        Effects::one(effect),
    ))
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();

    let path = std::env::var("WEBHOOK_DB").unwrap_or_else(|_| "webhooks.sqlite3".into());
    let store = match SqliteStore::open(&path) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = store.execute_batch(SCHEMA).await {
        eprintln!("error: {e:#}");
        return ExitCode::from(1);
    }
    let secret =
        std::env::var("STRIPE_WEBHOOK_SECRET").unwrap_or_else(|_| "whsec_test_secret".into());
    let tolerance = Duration::from_secs(
        std::env::var("STRIPE_TOLERANCE_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300),
    );
    let idempotency = Idempotency::builder(store, key::json_pointer("/id"))
        .namespace("stripe-webhooks")
        // Stripe retries a delivery for up to three days.
        .ttl(Duration::from_secs(7 * 24 * 3600))
        .build();

    // The function form: the signature is checked first, and only a genuine delivery reaches
    // the layer.
    let service = tower::service_fn(move |event: LambdaEvent<ApiGatewayRequest>| {
        let (idempotency, secret) = (idempotency.clone(), secret.clone());
        async move {
            let signature = event.payload.header("stripe-signature");
            let body = event.payload.body_text().unwrap_or_default();
            if let Err(why) = verify(signature, &body, &secret, tolerance) {
                tracing::warn!(why, "webhook refused");
                return Ok::<_, BoxError>(IdempotentResponse::new(&http(
                    400,
                    &json!({"message": why}),
                ))?);
            }
            idempotency.call(event, apply).await
        }
    });
    sqs_claim::lambda::serve(service).await
}
