//! The latency comparison of `benches/processor.rs`, against a real store: DynamoDB Local.
//!
//! `make bench` runs it after starting the stand-ins (or: `scripts/standins.sh up`, then
//! `cargo bench --bench dynamodb`). Baseline and sqs-claim use the same `DynamoDbStore` over
//! the same HTTP client, in the same run:
//!
//! * baseline: the Powertools batch loop, one message after another (claim, handle, complete);
//! * sqs-claim: `Processor` with its default concurrency (10).
//!
//! DynamoDB Local answers in well under a millisecond on loopback, far faster than DynamoDB
//! over the network, so this ratio is a lower bound of what the concurrency buys in Lambda.

use std::time::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use lambda_runtime::{Context, LambdaEvent};
use sqs_claim::events::{SqsEvent, SqsMessage};
use sqs_claim::{DynamoDbStore, Error, KeySource, Message, Processor};
use tower::service_fn;

mod support;
use support::{median, sequential_baseline};

fn event(n: usize, tag: &str) -> SqsEvent {
    let mut e = SqsEvent::default();
    e.records = (0..n)
        .map(|i| {
            let mut m = SqsMessage::default();
            m.message_id = Some(format!("{tag}-{i}"));
            m.body = Some(format!(
                r#"{{"order_id":"{tag}-o-{i}","account":"a","amount_cents":{i}}}"#
            ));
            m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:payments".into());
            m
        })
        .collect();
    e
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let endpoint = std::env::var("SQS_CLAIM_DYNAMODB_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:8000".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "bench"))
            .build();
        let store = DynamoDbStore::new(
            Client::from_conf(config),
            format!("bench-{}", uuid::Uuid::new_v4()),
        );
        if let Err(e) = store.create_table().await {
            eprintln!("DynamoDB Local is not answering at {endpoint} ({e}): run `scripts/standins.sh up`");
            std::process::exit(1);
        }
        let handler = service_fn(|m: Message| async move {
            let _: serde_json::Value = m.json()?;
            Ok::<(), Error>(())
        });
        let processor = Processor::builder(store.clone(), handler)
            .key(KeySource::JsonPointer("/order_id".into()))
            .namespace("bench")
            .build();
        // DynamoDB Local is a JVM: right after `standins.sh up` its first thousand or so requests
        // run unoptimised, and whichever side met them looked slow (x0.9 on a cold server, x1.5
        // warm). Warm it up, untimed, with both request shapes.
        for run in 0..5 {
            let ev = event(100, &format!("warm-b-r{run}-{}", uuid::Uuid::new_v4()));
            sequential_baseline(&store, &ev, |body| {
                    let _ = serde_json::from_str::<serde_json::Value>(body);
                })
                .await;
            let ev = event(100, &format!("warm-p-r{run}-{}", uuid::Uuid::new_v4()));
            let _ = processor
                .process(LambdaEvent::new(ev, Context::default()))
                .await;
        }
        println!("== DynamoDB Local at {endpoint}: sequential (Powertools loop) vs sqs-claim");
        for batch in [10usize, 100] {
            let (mut base, mut ours) = (Vec::new(), Vec::new());
            for run in 0..7 {
                let ev = event(batch, &format!("b{batch}-r{run}-{}", uuid::Uuid::new_v4()));
                let start = Instant::now();
                sequential_baseline(&store, &ev, |body| {
                    let _ = serde_json::from_str::<serde_json::Value>(body);
                })
                .await;
                base.push(start.elapsed());

                let ev = event(batch, &format!("p{batch}-r{run}-{}", uuid::Uuid::new_v4()));
                let start = Instant::now();
                let report = processor
                    .process(LambdaEvent::new(ev, Context::default()))
                    .await
                    .expect("process");
                ours.push(start.elapsed());
                assert_eq!(report.counts().processed, batch, "every message processed");
            }
            let (b, o) = (median(base), median(ours));
            println!(
                "batch {batch:>4}: sequential baseline {:>8.1} ms | sqs-claim {:>8.1} ms | speed-up x{:.1}",
                b.as_secs_f64() * 1e3,
                o.as_secs_f64() * 1e3,
                b.as_secs_f64() / o.as_secs_f64()
            );
        }
    });
}
