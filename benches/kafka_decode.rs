//! Kafka records decoded from Avro and Protobuf (`stream::schema`) against the JSON path, as a
//! ratio measured in the same run.
//!
//! `cargo bench --bench kafka_decode --features kafka-avro,kafka-protobuf` (or
//! `make bench-kafka`). One event of N records (default 1,000, `SQS_CLAIM_BENCH_N`) over three
//! partitions, run through a Kafka consumer on the memory store whose handler reads each
//! payment into a `serde` struct:
//!
//! * **baseline, JSON:** each value the payment's JSON text, no decoder (the consumer as it was
//!   before `kafka-schema`);
//! * **Avro:** each value a payment as Confluent's `AvroSerializer` wrote it (framing, schema id),
//!   `Decoder::avro`;
//! * **Protobuf:** each value as Confluent's `ProtobufSerializer` wrote it (framing, message
//!   index), `Decoder::protobuf`.
//!
//! The values are the ones in events/streams/kafka-avro.json and kafka-protobuf.json (made by
//! the producers' own libraries, scripts/kafka-fixtures.py). The three runs alternate, 15 rounds;
//! each figure is a median, and the ratio is the decoded path's time per record over the JSON
//! path's.

use std::hint::black_box;
use std::time::{Duration, Instant};

use base64::Engine as _;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::stream::Kafka;
use sqs_claim::stream::schema::Decoder;
use sqs_claim::{Error, MemoryStore, Message, Processor};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[derive(serde::Deserialize)]
struct Payment {
    payment_id: String,
    cents: i64,
}

#[path = "../tests/support/pb_payment.rs"]
mod pb_payment;
use pb_payment::PbPayment;

fn fixture_value(file: &str, partition: &str, offset: i64) -> Vec<u8> {
    let path = format!("{}/events/streams/{file}", env!("CARGO_MANIFEST_DIR"));
    let event: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let record = event["records"][partition]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["offset"] == offset)
        .unwrap()
        .clone();
    base64::engine::general_purpose::STANDARD
        .decode(record["value"].as_str().unwrap())
        .unwrap()
}

/// An MSK event of `n` records over three partitions, each value `value`.
fn event(n: usize, value: &[u8]) -> Value {
    let value = base64::engine::general_purpose::STANDARD.encode(value);
    let mut partitions = serde_json::Map::new();
    for i in 0..n {
        let p = i % 3;
        partitions
            .entry(format!("payments-{p}"))
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(json!({
                "topic": "payments", "partition": p, "offset": i,
                "timestamp": 1764806400000_i64, "timestampType": "CREATE_TIME",
                "key": null, "value": value, "headers": [],
            }));
    }
    json!({"eventSource": "aws:kafka", "records": partitions})
}

/// The time a fresh consumer (built before the clock starts) takes for `event`, its handler
/// reading each payment.
async fn timed(decoder: Option<Decoder>, protobuf: bool, event: Value) -> Duration {
    let handler = tower::service_fn(move |m: Message| async move {
        let cents = if protobuf {
            let p: PbPayment = m.json()?;
            black_box(&p.payment_id);
            p.cents
        } else {
            let p: Payment = m.json()?;
            black_box(&p.payment_id);
            p.cents
        };
        black_box(cents);
        Ok::<(), Error>(())
    });
    let builder = Processor::builder(MemoryStore::new(), handler).namespace("bench");
    let mut kafka = Kafka::new(builder).expect("a Kafka consumer");
    if let Some(decoder) = decoder {
        kafka = kafka.value(decoder);
    }
    let start = Instant::now();
    let answer = kafka
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .expect("process");
    let took = start.elapsed();
    assert_eq!(
        answer.response()["batchItemFailures"],
        json!([]),
        "every record decoded"
    );
    took
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let n: usize = std::env::var("SQS_CLAIM_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let avro = fixture_value("kafka-avro.json", "payments-0", 10);
    let protobuf = fixture_value("kafka-protobuf.json", "payments-pb-0", 20);
    let schema_path = format!(
        "{}/events/streams/schemas/payment.avsc",
        env!("CARGO_MANIFEST_DIR")
    );
    let schema = std::fs::read_to_string(schema_path).unwrap();
    let avro_decoder = Decoder::avro(&schema).unwrap();
    // The JSON the Avro value decodes to: the same payment, as a JSON producer writes it.
    let json_value =
        br#"{"payment_id":"pay-1","account":"alice","cents":1250,"currency":"EUR","memo":null}"#;
    let (mut j, mut a, mut p) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..16 {
        let tj = rt.block_on(timed(None, false, event(n, json_value)));
        let ta = rt.block_on(timed(Some(avro_decoder.clone()), false, event(n, &avro)));
        let tp = rt.block_on(timed(
            Some(Decoder::protobuf::<PbPayment>()),
            true,
            event(n, &protobuf),
        ));
        if round > 0 {
            // the first round warms the allocator and the caches
            j.push(tj);
            a.push(ta);
            p.push(tp);
        }
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    let (j, a, p) = (median(j), median(a), median(p));
    println!("Kafka consumer, N = {n} records on the memory store, median of 15 alternated rounds");
    println!("  JSON values (baseline)      {:>7.2} µs/record", per(j));
    println!(
        "  Avro (Confluent framing)    {:>7.2} µs/record   ratio {:.2}x the JSON path ({:+.2} µs)",
        per(a),
        a.as_secs_f64() / j.as_secs_f64(),
        per(a) - per(j)
    );
    println!(
        "  Protobuf (Confluent, index) {:>7.2} µs/record   ratio {:.2}x the JSON path ({:+.2} µs)",
        per(p),
        p.as_secs_f64() / j.as_secs_f64(),
        per(p) - per(j)
    );
}
