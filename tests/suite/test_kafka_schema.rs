//! Kafka values as producers encode them (`sqs_claim::stream::schema`, features `kafka-avro`
//! and `kafka-protobuf`), on the events scripts/kafka-fixtures.py made with producers' own
//! libraries (Apache's `avro`, Google's `protobuf`, Confluent's serializers; Glue's framing per
//! AWS's layout): keys inside the decoded values, Confluent and Glue framing (zlib too), the
//! mapping's schema registry integration (framing taken off, or decoded to JSON), a tombstone,
//! and records that fail alone (truncated, unknown schema id, a framing of neither registry, a
//! key or header that does not decode); then a topic replayed through the test kit's stand-in
//! for the event source mapping (checkpoints, retries, lost responses): every payment applied
//! once, in order per partition.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::stream::schema::{Decoder, Framing};
use sqs_claim::stream::{Answer, Kafka};
use sqs_claim::{BoxError, KeySource, MemoryStore, Message, MissingKey, Processor};
use sqs_claim_testkit::stream::{Mapping, Stream};

/// The payment as the team's handler reads it (`serde`), whichever way it was encoded.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Payment {
    payment_id: String,
    account: String,
    cents: i64,
    currency: String,
    memo: Option<String>,
}

#[path = "../support/pb_payment.rs"]
mod pb_payment;
use pb_payment::PbPayment;

fn fixture(name: &str) -> Value {
    let path = format!("{}/events/streams/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The schema version id scripts/kafka-fixtures.py frames Glue records with.
const GLUE_VERSION: &str = "b7b4a7f0-9c2e-4c1a-8f3d-2a6c0e5d4f11";

/// The fixtures' Avro decoder: schema id 1 (Confluent, and the mapping's metadata) and the
/// Glue version; any other fails.
fn avro_decoder() -> Decoder {
    Decoder::avro(&avro_schema())
        .unwrap()
        .schema_ids([1])
        .schema_versions([GLUE_VERSION])
        .unwrap()
}

fn avro_schema() -> String {
    let path = format!(
        "{}/events/streams/schemas/payment.avsc",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).unwrap()
}

/// Each partition's applied (offset, payment id), in commit order.
type Applied = BTreeMap<String, Vec<(i64, String)>>;

/// What the handler saw: (record id, payment id or `tombstone`).
type Seen = Vec<(String, String)>;

/// `event` through a Kafka consumer keyed by the payment id inside the decoded value
/// (tombstones, with no value and so no key, run without a claim): the answer, and what the
/// handler saw, sorted.
async fn run(value: Decoder, protobuf: bool, event: Value) -> (Answer<Value>, Seen) {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let handler = {
        let seen = Arc::clone(&seen);
        tower::service_fn(move |msg: Message| {
            let seen = Arc::clone(&seen);
            async move {
                let id = msg.id().to_owned();
                if msg.body().is_empty() {
                    seen.lock().unwrap().push((id, "tombstone".into()));
                    return Ok(());
                }
                let payment_id = if protobuf {
                    let p: PbPayment = msg.json()?;
                    assert!(p.cents > 0 && !p.account.is_empty());
                    p.payment_id
                } else {
                    let p: Payment = msg.json()?;
                    assert!(p.cents > 0 && !p.account.is_empty() && !p.currency.is_empty());
                    p.payment_id
                };
                seen.lock().unwrap().push((id, payment_id));
                Ok::<(), BoxError>(())
            }
        })
    };
    let builder = Processor::builder(MemoryStore::new(), handler)
        .namespace("payments")
        .key(KeySource::JsonPointer("/payment_id".into()))
        .missing_key(MissingKey::ProcessWithoutDedup);
    let kafka = Kafka::new(builder).unwrap().value(value);
    let answer = kafka
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    (answer, seen)
}

/// Each failed record's id and reason, from the answer's report.
fn failures(report: &sqs_claim::BatchReport) -> BTreeMap<String, String> {
    report
        .items()
        .iter()
        .filter_map(|i| match &i.outcome {
            sqs_claim::Outcome::Failed(f) => Some((i.message_id.clone(), f.message.clone())),
            _ => None,
        })
        .collect()
}

fn failed_partitions(response: &Value) -> BTreeMap<String, i64> {
    response["batchItemFailures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let id = &f["itemIdentifier"];
            (
                id["partition"].as_str().unwrap().to_owned(),
                id["offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// No reason quotes a payment: only where and why.
fn assert_no_payload(reasons: &BTreeMap<String, String>) {
    for reason in reasons.values() {
        for word in ["alice", "bob", "carol", "pay-", "rent", "tip"] {
            assert!(
                !reason.contains(word),
                "a reason quotes the record: {reason}"
            );
        }
    }
}

#[tokio::test]
async fn avro_records_from_confluent_glue_and_the_mapping_decode_and_bad_ones_fail_alone() {
    let decoder = avro_decoder();
    let (answer, seen) = run(decoder, false, fixture("kafka-avro.json")).await;
    let response = serde_json::to_value(&answer).unwrap();
    assert_eq!(
        failed_partitions(&response),
        BTreeMap::from([
            ("payments-0".to_owned(), 13), // truncated
            ("payments-1".to_owned(), 5),  // unknown schema id
            ("payments-3".to_owned(), 7),  // neither framing
        ]),
        "{response}"
    );
    assert_eq!(
        seen,
        [
            ("payments-0@10", "pay-1"), // Confluent; @11 is the same payment again: skipped
            ("payments-0@12", "tombstone"),
            ("payments-1@3", "pay-2"), // Glue
            ("payments-1@4", "pay-3"), // Glue, zlib
            ("payments-2@0", "pay-6"), // the mapping took the framing off (SOURCE)
            ("payments-2@1", "pay-4"), // the mapping decoded it to JSON
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    let reasons = failures(answer.report());
    assert_eq!(
        reasons.keys().collect::<Vec<_>>(),
        ["payments-0@13", "payments-1@5", "payments-3@7"]
    );
    let truncated = &reasons["payments-0@13"];
    assert!(
        truncated.contains("topic payments, partition 0, offset 13")
            && truncated.contains("its value (Avro)")
            && truncated.contains("truncated"),
        "{truncated}"
    );
    assert!(
        reasons["payments-1@5"].contains("unknown schema id 99"),
        "{}",
        reasons["payments-1@5"]
    );
    assert!(
        reasons["payments-3@7"].contains("neither Confluent framing"),
        "{}",
        reasons["payments-3@7"]
    );
    assert_no_payload(&reasons);
    // A record that does not decode is a permanent failure, and was never claimed.
    for item in answer.report().items() {
        if let sqs_claim::Outcome::Failed(f) = &item.outcome {
            assert!(f.permanent, "{}: {:?}", item.message_id, f.message);
        }
    }
}

#[tokio::test]
async fn protobuf_records_from_confluent_with_a_message_index_and_from_glue_decode() {
    let (answer, seen) = run(
        Decoder::protobuf::<PbPayment>(),
        true,
        fixture("kafka-protobuf.json"),
    )
    .await;
    let response = serde_json::to_value(&answer).unwrap();
    assert_eq!(
        failed_partitions(&response),
        BTreeMap::from([("payments-pb-0".to_owned(), 23)]),
        "{response}"
    );
    assert_eq!(
        seen,
        [
            ("payments-pb-0@20", "pay-1"), // Confluent, message index [1]
            ("payments-pb-0@22", "tombstone"),
            ("payments-pb-1@3", "pay-2"), // Glue
            ("payments-pb-1@4", "pay-3"), // Glue, zlib
            ("payments-pb-2@0", "pay-6"), // plain
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    let reasons = failures(answer.report());
    let truncated = &reasons["payments-pb-0@23"];
    assert!(
        truncated.contains("topic payments-pb, partition 0, offset 23")
            && truncated.contains("PbPayment"),
        "{truncated}"
    );
    assert_no_payload(&reasons);
}

/// One record of the Avro fixture, with a key and headers of the test's own.
fn with_key_and_headers(key: Option<&[u8]>, headers: Value) -> Value {
    let mut event = fixture("kafka-avro.json");
    let mut record = event["records"]["payments-0"][0].clone();
    record["key"] = key.map_or(Value::Null, |k| json!(base64_encode(k)));
    record["headers"] = headers;
    event["records"] = json!({"payments-0": [record]});
    event
}

/// A fixture record's key, as text.
fn key_text(record: &Value) -> String {
    use base64::Engine as _;
    let key = record["key"].as_str().unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(key)
            .unwrap(),
    )
    .unwrap()
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn a_key_or_header_that_does_not_decode_fails_its_record_naming_the_part() {
    let value = || Decoder::avro(&avro_schema()).unwrap();
    // A key decoded as JSON: its text is the `Key` attribute.
    let keys: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let handler = {
        let keys = Arc::clone(&keys);
        tower::service_fn(move |msg: Message| {
            keys.lock()
                .unwrap()
                .push(msg.sqs().attributes.get("Key").cloned());
            async { Ok::<(), BoxError>(()) }
        })
    };
    let kafka = Kafka::new(Processor::builder(MemoryStore::new(), handler).namespace("k"))
        .unwrap()
        .value(value())
        .key(Decoder::json().framing(Framing::Plain));
    let ok = with_key_and_headers(Some(br#"{"customer":"c-1"}"#), json!([{"h": [104]}]));
    let answer = kafka
        .process(LambdaEvent::new(ok, Context::default()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&answer).unwrap(),
        json!({"batchItemFailures": []})
    );
    assert_eq!(
        keys.lock().unwrap().clone(),
        [Some(r#"{"customer":"c-1"}"#.to_owned())]
    );
    // A key that is not JSON.
    let bad_key = with_key_and_headers(Some(b"c-1 not json"), json!([]));
    let answer = kafka
        .process(LambdaEvent::new(bad_key, Context::default()))
        .await
        .unwrap();
    let reasons = failures(answer.report());
    let why = &reasons["payments-0@10"];
    assert!(
        why.contains("offset 10): its key (JSON) is not JSON"),
        "{why}"
    );
    assert!(!why.contains("c-1"), "{why}");
    // A header that is not a list of bytes.
    let bad_header = with_key_and_headers(None, json!([{"trace": "t-1"}]));
    let answer = kafka
        .process(LambdaEvent::new(bad_header, Context::default()))
        .await
        .unwrap();
    let reasons = failures(answer.report());
    let why = &reasons["payments-0@10"];
    assert!(
        why.contains(r#"its header "trace" is not a list of bytes"#),
        "{why}"
    );
    assert_eq!(keys.lock().unwrap().len(), 1, "neither reached the handler");
}

/// The Avro fixture's records that decode (Confluent, Glue, zlib, the mapping's forms), put on
/// a topic of three partitions again and again (a producer's retries: the same payment under
/// new offsets), with one truncated record, replayed through the stand-in mapping with
/// transient handler failures and lost responses: each payment applied once, in offset order
/// per partition; the truncated record given up on by the mapping (retry attempts), its
/// partition going on after it.
#[tokio::test]
async fn an_avro_topic_replayed_through_the_mapping_applies_each_payment_once_in_order() {
    let fixture = fixture("kafka-avro.json");
    let mut good: Vec<Value> = Vec::new();
    let mut truncated = None;
    for (partition, records) in fixture["records"].as_object().unwrap() {
        for r in records.as_array().unwrap() {
            match (partition.as_str(), r["offset"].as_i64().unwrap()) {
                ("payments-0", 13) => truncated = Some(r.clone()),
                ("payments-0", 12) | ("payments-1", 5) | ("payments-3", 7) => {}
                _ => good.push(r.clone()),
            }
        }
    }
    let mut stream = Stream::kafka("payments");
    let mut poison = String::new();
    // Each record's payment id (its Kafka key, as the producer wrote it).
    let mut payment_of: HashMap<String, String> = HashMap::new();
    for i in 0..36 {
        let shard = format!("payments-{}", i % 3);
        let seq = stream.put(&shard, &json!({}));
        let source = if i == 16 {
            poison = seq.clone();
            truncated.as_ref().unwrap()
        } else {
            &good[(i * 5) % good.len()]
        };
        payment_of.insert(seq.clone(), key_text(source));
        let record = stream.record_mut(&seq).unwrap();
        record["value"] = source["value"].clone();
        if let Some(metadata) = source.get("valueSchemaMetadata") {
            record["valueSchemaMetadata"] = metadata.clone();
        }
    }
    // The handler's effect: the payment appended to its partition's log, committed with the
    // claim's completion.
    let log: Arc<Mutex<Applied>> = Arc::default();
    let tries: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let handler = {
        let (log, tries) = (Arc::clone(&log), Arc::clone(&tries));
        tower::service_fn(move |msg: Message| {
            let (log, tries) = (Arc::clone(&log), Arc::clone(&tries));
            async move {
                let payment: Payment = msg.json()?;
                let partition = msg.group_id().unwrap().to_owned();
                let offset: i64 = msg.sqs().attributes["Offset"].parse().unwrap();
                // Every payment's first try fails: the mapping must retry it.
                let n = {
                    let mut tries = tries.lock().unwrap();
                    let n = tries.entry(payment.payment_id.clone()).or_default();
                    *n += 1;
                    *n
                };
                if n == 1 {
                    return Err::<sqs_claim::Effects<_>, BoxError>("transient".into());
                }
                let effect = sqs_claim::store::MemoryEffect::new(move || {
                    log.lock()
                        .unwrap()
                        .entry(partition.clone())
                        .or_default()
                        .push((offset, payment.payment_id.clone()));
                });
                Ok(sqs_claim::Effects::one(effect))
            }
        })
    };
    let builder = Processor::builder(MemoryStore::new(), handler)
        .namespace("replay")
        .key(KeySource::JsonPointer("/payment_id".into()));
    let kafka = Kafka::new(builder).unwrap().value(avro_decoder());
    let invocation = AtomicUsize::new(0);
    let mapping = Mapping {
        batch_size: 5,
        max_retry_attempts: Some(6),
        ..Mapping::default()
    };
    let drained = mapping
        .drain(&stream, |event| {
            let n = invocation.fetch_add(1, Ordering::Relaxed);
            let kafka = kafka.clone();
            async move {
                let answer = kafka
                    .process(LambdaEvent::new(event, Context::default()))
                    .await
                    .map_err(|e| e.to_string())?;
                if n % 5 == 3 {
                    return Err("the response was lost".to_owned());
                }
                Ok(answer.into_response())
            }
        })
        .await;
    assert!(!drained.stopped_early);
    // The mapping gives up on the batch that starts at the truncated record (its retries
    // spent); the payments of that batch's other records were put elsewhere too.
    let given_up = drained.given_up(&stream);
    assert_eq!(given_up.first(), Some(&poison), "{given_up:?}");
    let log = log.lock().unwrap().clone();
    let mut applied: Vec<String> = log.values().flatten().map(|(_, p)| p.clone()).collect();
    applied.sort();
    let mut expected: Vec<String> = payment_of
        .iter()
        .filter(|(seq, _)| !given_up.contains(seq))
        .map(|(_, payment)| payment.clone())
        .collect();
    expected.sort();
    expected.dedup();
    assert_eq!(
        expected.len(),
        6,
        "every payment is on the topic outside the given-up batch"
    );
    assert_eq!(applied, expected, "each payment applied once");
    for (partition, entries) in &log {
        let offsets: Vec<i64> = entries.iter().map(|(o, _)| *o).collect();
        let mut sorted = offsets.clone();
        sorted.sort();
        assert_eq!(offsets, sorted, "{partition} applied in offset order");
    }
}

/// Every Avro type as fastavro (another producer library than the events') writes it
/// (events/streams/avro-types.json: records, enums, fixed, arrays, maps, unions, decimals in
/// bytes and fixed, uuid, date, times, timestamps, extremes of int and long, 256-byte and
/// 300-character values, 70-entry maps): the handler gets exactly the JSON the fixture says.
#[tokio::test]
async fn every_avro_type_as_fastavro_writes_it_reads_as_the_json_it_stands_for() {
    let fixture = fixture("avro-types.json");
    let schema = fixture["schema"].to_string();
    let cases = fixture["cases"].as_array().unwrap();
    let records: Vec<Value> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            json!({"topic": "types", "partition": 0, "offset": i, "timestamp": 0,
                   "timestampType": "CREATE_TIME", "key": null,
                   "value": case["bytes"], "headers": []})
        })
        .collect();
    let event = json!({"eventSource": "aws:kafka", "records": {"types-0": records}});
    let bodies: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let handler = {
        let bodies = Arc::clone(&bodies);
        tower::service_fn(move |msg: Message| {
            bodies
                .lock()
                .unwrap()
                .push((msg.id().to_owned(), msg.body().to_owned()));
            async { Ok::<(), BoxError>(()) }
        })
    };
    let kafka = Kafka::new(Processor::builder(MemoryStore::new(), handler).namespace("t"))
        .unwrap()
        .value(Decoder::avro(&schema).unwrap().framing(Framing::Plain));
    let answer = kafka
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&answer).unwrap(),
        json!({"batchItemFailures": []}),
        "{:?}",
        failures(answer.report())
    );
    let mut bodies = bodies.lock().unwrap().clone();
    bodies.sort();
    assert_eq!(bodies.len(), cases.len());
    for (i, case) in cases.iter().enumerate() {
        let got: Value = serde_json::from_str(&bodies[i].1).unwrap();
        assert_eq!(got, case["expected"], "case {i} ({})", bodies[i].0);
    }
}
