//! Kinesis and DynamoDB Streams consumers (`sqs_claim::stream`) replayed through the test kit's
//! stand-in for Lambda's stream event source mappings (`sqs_claim_testkit::stream`: checkpoint
//! at the lowest reported sequence number, retry from it, bisect on a function error, give up
//! by retry attempts or record age), on the memory store and on DynamoDB Local: every record
//! applied exactly once and in order per shard (the effects commit with the claims'
//! completions, so the applied log is the commit order), failures, replays after a partial
//! checkpoint and after a lost response, splits, a record that cannot be decoded, a batch of
//! 10,000.

mod common;
mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use sqs_claim::store::MemoryEffect;
use sqs_claim::stream::{DynamoDbStreams, Kinesis};
use sqs_claim::{BoxError, ClaimStore, Effects, MemoryStore, Message, Processor};
use sqs_claim_testkit::stream::{Drained, Mapping, Stream};

/// What the handler does to a record: fail it a number of times first, or always.
#[derive(Clone, Default)]
struct Faults {
    /// Sequence number → how many more times the handler fails it.
    transient: Arc<Mutex<HashMap<String, u32>>>,
    /// Sequence numbers the handler always fails.
    poison: Arc<HashSet<String>>,
    /// Invocations (from 0) whose response is lost after the consumer ran: a function error
    /// to the mapping, so the whole batch comes back.
    lost: Arc<HashSet<usize>>,
}

/// Makes the effect that appends `seq` to `shard`'s applied log.
type MakeEffect<E> = Arc<dyn Fn(&str, &str) -> E + Send + Sync>;

/// Drives `stream` through `mapping` into a consumer of `store`; returns how the mapping went
/// and every response the consumer gave.
async fn replay<S: ClaimStore>(
    store: S,
    stream: &Stream,
    mapping: &Mapping,
    faults: &Faults,
    effect: MakeEffect<S::Effect>,
    dynamodb: bool,
) -> (Drained, Vec<Value>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let faults = faults.clone();
        let calls = Arc::clone(&calls);
        tower::service_fn(move |msg: Message| {
            let faults = faults.clone();
            let effect = Arc::clone(&effect);
            calls.fetch_add(1, Ordering::Relaxed);
            async move {
                let seq = msg.sqs().attributes["SequenceNumber"].clone();
                let shard = msg.group_id().unwrap_or("").to_owned();
                // The payload decoded: Kinesis' `data`, DynamoDB's record.
                let payload: Value = msg.json()?;
                let n = if dynamodb {
                    payload.pointer("/dynamodb/NewImage/n/N").cloned()
                } else {
                    payload.get("n").cloned()
                };
                assert!(n.is_some(), "the handler sees the record's payload");
                if faults.poison.contains(&seq) {
                    return Err::<Effects<S::Effect>, BoxError>("poison record".into());
                }
                if let Some(left) = faults.transient.lock().unwrap().get_mut(&seq)
                    && *left > 0
                {
                    *left -= 1;
                    return Err("transient failure".into());
                }
                Ok(Effects::one(effect(&shard, &seq)))
            }
        })
    };
    let builder = Processor::builder(store, handler)
        .namespace(sqs_claim_testkit::local::unique_name("streams"));
    let (kinesis, ddb) = if dynamodb {
        (None, Some(DynamoDbStreams::new(builder).unwrap()))
    } else {
        (Some(Kinesis::new(builder).unwrap()), None)
    };
    let responses = Arc::new(Mutex::new(Vec::new()));
    let invocation = AtomicUsize::new(0);
    let invoke = |event: Value| {
        let n = invocation.fetch_add(1, Ordering::Relaxed);
        let lost = faults.lost.contains(&n);
        let responses = Arc::clone(&responses);
        let (kinesis, ddb) = (kinesis.clone(), ddb.clone());
        async move {
            let context = Context::default();
            let response = match (kinesis, ddb) {
                (Some(k), _) => serde_json::to_value(
                    k.process(LambdaEvent::new(event, context))
                        .await
                        .map_err(|e| e.to_string())?,
                ),
                (_, Some(d)) => serde_json::to_value(
                    d.process(LambdaEvent::new(event, context))
                        .await
                        .map_err(|e| e.to_string())?,
                ),
                _ => unreachable!(),
            }
            .unwrap();
            responses.lock().unwrap().push(response.clone());
            if lost {
                return Err("the response was lost".to_owned());
            }
            Ok(response)
        }
    };
    let drained = mapping.drain(stream, invoke).await;
    let responses = responses.lock().unwrap().clone();
    assert!(
        !drained.stopped_early,
        "the mapping did not drain the stream"
    );
    (drained, responses)
}

/// Every record applied once, in order per shard, except those given up on; and every
/// response names at most one record per shard, never an empty one.
fn check(
    stream: &Stream,
    drained: &Drained,
    responses: &[Value],
    applied: &BTreeMap<String, Vec<String>>,
) {
    let given_up: HashSet<String> = drained.given_up(stream).into_iter().collect();
    for shard in stream.shards() {
        let expected: Vec<String> = stream
            .sequence_numbers(&shard)
            .into_iter()
            .filter(|s| !given_up.contains(s))
            .collect();
        let got = applied.get(&shard).cloned().unwrap_or_default();
        assert_eq!(
            got, expected,
            "shard {shard}: applied (left) must be every record not given up on, once, in order"
        );
    }
    for response in responses {
        let failures = response["batchItemFailures"].as_array().unwrap();
        assert!(failures.len() <= 1, "one shard per batch: {response}");
        for f in failures {
            assert!(!f["itemIdentifier"].as_str().unwrap().is_empty());
        }
    }
}

/// Each shard's applied sequence numbers, in commit order.
type Log = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

fn memory_log() -> (Log, MakeEffect<MemoryEffect>) {
    let log: Log = Arc::default();
    let effect: MakeEffect<MemoryEffect> = {
        let log = Arc::clone(&log);
        Arc::new(move |shard: &str, seq: &str| {
            let (log, shard, seq) = (Arc::clone(&log), shard.to_owned(), seq.to_owned());
            MemoryEffect::new(move || {
                log.lock()
                    .unwrap()
                    .entry(shard.clone())
                    .or_default()
                    .push(seq.clone())
            })
        })
    };
    (log, effect)
}

/// Three shards of 40 records; failures that pass after one to three tries, responses lost
/// after the consumer ran (the whole batch replayed: its completed records are duplicates).
fn kinesis_scenario(shards: &[&str], per_shard: usize) -> (Stream, Faults) {
    let mut stream = Stream::kinesis("orders");
    let mut seqs = Vec::new();
    for i in 0..per_shard {
        for shard in shards {
            seqs.push(stream.put(shard, &json!({"n": i, "shard": shard})));
        }
    }
    let transient: HashMap<String, u32> = seqs
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 7 == 3)
        .map(|(i, s)| (s.clone(), (i % 3) as u32 + 1))
        .collect();
    let faults = Faults {
        transient: Arc::new(Mutex::new(transient)),
        poison: Arc::default(),
        lost: Arc::new([1, 4, 5, 9, 16].into_iter().collect()),
    };
    (stream, faults)
}

#[tokio::test]
async fn kinesis_failures_replays_and_splits_apply_every_record_once_in_order() {
    common::init_logs();
    let (stream, faults) = kinesis_scenario(
        &[
            "shardId-000000000000",
            "shardId-000000000001",
            "shardId-000000000002",
        ],
        40,
    );
    let (log, effect) = memory_log();
    let mapping = Mapping {
        batch_size: 9,
        bisect_on_error: true,
        ..Mapping::default()
    };
    let (drained, responses) = replay(
        MemoryStore::new(),
        &stream,
        &mapping,
        &faults,
        effect,
        false,
    )
    .await;
    check(&stream, &drained, &responses, &log.lock().unwrap());
    assert!(drained.on_failure.is_empty());
    // Replays happened: records were sent again after a partial checkpoint or a lost response.
    let sent: usize = drained.batches.iter().map(|b| b.1.len()).sum();
    assert!(sent > 120, "{sent} records sent for 120");
    // And splits: a lost response is a function error, and the batch was bisected.
    assert!(
        drained
            .batches
            .iter()
            .any(|b| b.1.len() < 9 && !b.1.is_empty())
    );
}

#[tokio::test]
async fn a_poison_record_is_given_up_by_retry_attempts_and_the_rest_applied_once_in_order() {
    common::init_logs();
    let (stream, mut faults) =
        kinesis_scenario(&["shardId-000000000000", "shardId-000000000001"], 30);
    let poison = stream.sequence_numbers("shardId-000000000001")[12].clone();
    faults.poison = Arc::new([poison.clone()].into_iter().collect());
    let (log, effect) = memory_log();
    let mapping = Mapping {
        batch_size: 10,
        bisect_on_error: true,
        // Above the transient failures' three tries: only the poison record runs out.
        max_retry_attempts: Some(5),
        ..Mapping::default()
    };
    let (drained, responses) = replay(
        MemoryStore::new(),
        &stream,
        &mapping,
        &faults,
        effect,
        false,
    )
    .await;
    check(&stream, &drained, &responses, &log.lock().unwrap());
    // Given up from the poison record on: the mapping's on-failure destination has its batch.
    assert_eq!(drained.on_failure.len(), 1, "{:?}", drained.on_failure);
    assert_eq!(drained.on_failure[0].start_sequence_number, poison);
    assert_eq!(drained.on_failure[0].condition, "RetryAttemptsExhausted");
}

#[tokio::test]
async fn an_undecodable_record_fails_alone_and_stops_its_shard() {
    common::init_logs();
    let mut stream = Stream::kinesis("orders");
    let a: Vec<String> = (0..6)
        .map(|i| stream.put("shardId-a", &json!({"n": i})))
        .collect();
    let _b: Vec<String> = (0..6)
        .map(|i| stream.put("shardId-b", &json!({"n": i})))
        .collect();
    stream.record_mut(&a[2]).unwrap()["kinesis"]["data"] = json!("%%% not base64");
    let (log, effect) = memory_log();
    let mapping = Mapping {
        batch_size: 6,
        max_retry_attempts: Some(1),
        ..Mapping::default()
    };
    let (drained, responses) = replay(
        MemoryStore::new(),
        &stream,
        &mapping,
        &Faults::default(),
        effect,
        false,
    )
    .await;
    // The first answer for shard a names the undecodable record, not the batch.
    assert_eq!(
        responses[0],
        json!({"batchItemFailures": [{"itemIdentifier": a[2]}]})
    );
    check(&stream, &drained, &responses, &log.lock().unwrap());
    assert_eq!(drained.given_up(&stream), a[2..].to_vec());
    assert_eq!(log.lock().unwrap()["shardId-a"], a[..2].to_vec());
}

#[tokio::test]
async fn a_batch_of_ten_thousand_records_runs_in_order() {
    let mut stream = Stream::kinesis("big");
    for i in 0..10_000 {
        stream.put("shardId-000000000000", &json!({"n": i}));
    }
    let (log, effect) = memory_log();
    let mapping = Mapping {
        batch_size: 10_000,
        ..Mapping::default()
    };
    let (drained, responses) = replay(
        MemoryStore::new(),
        &stream,
        &mapping,
        &Faults::default(),
        effect,
        false,
    )
    .await;
    assert_eq!(drained.invocations, 1);
    check(&stream, &drained, &responses, &log.lock().unwrap());
}

/// DynamoDB Streams on DynamoDB Local: the applied log is a list in the claims table itself,
/// appended in the completion's transaction.
#[tokio::test]
async fn dynamodb_streams_on_dynamodb_local_apply_every_record_once_in_order() {
    common::init_logs();
    let store = support::dynamodb::dynamodb_store("streams").await;
    let table = store.table().to_owned();
    let pk = store.key_schema().partition_key().name().to_owned();
    assert!(store.key_schema().sort_key().is_none());
    let effect: MakeEffect<TransactWriteItem> = {
        let (table, pk) = (table.clone(), pk.clone());
        Arc::new(move |shard: &str, seq: &str| {
            let update = Update::builder()
                .table_name(&table)
                .key(&pk, AttributeValue::S(format!("APPLIED#{shard}")))
                .update_expression("SET seqs = list_append(if_not_exists(seqs, :empty), :one)")
                .expression_attribute_values(":empty", AttributeValue::L(vec![]))
                .expression_attribute_values(
                    ":one",
                    AttributeValue::L(vec![AttributeValue::S(seq.to_owned())]),
                )
                .build()
                .unwrap();
            TransactWriteItem::builder().update(update).build()
        })
    };
    let mut stream = Stream::dynamodb("orders");
    let arn = stream.arn();
    let mut seqs = Vec::new();
    for i in 0..30 {
        seqs.push(stream.put(&arn, &json!({"n": {"N": i.to_string()}})));
    }
    let faults = Faults {
        transient: Arc::new(Mutex::new(
            [
                (seqs[4].clone(), 2),
                (seqs[11].clone(), 1),
                (seqs[25].clone(), 3),
            ]
            .into_iter()
            .collect(),
        )),
        poison: Arc::new([seqs[18].clone()].into_iter().collect()),
        lost: Arc::new([0, 3, 6].into_iter().collect()),
    };
    let mapping = Mapping {
        batch_size: 8,
        bisect_on_error: true,
        max_retry_attempts: Some(3),
        ..Mapping::default()
    };
    let client = store.client().clone();
    let (drained, responses) = replay(store, &stream, &mapping, &faults, effect, true).await;
    let item = client
        .get_item()
        .table_name(&table)
        .key(&pk, AttributeValue::S(format!("APPLIED#{arn}")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let applied: Vec<String> = item
        .item()
        .and_then(|i| i.get("seqs"))
        .and_then(|l| l.as_l().ok())
        .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
        .unwrap_or_default();
    let applied = BTreeMap::from([(arn.clone(), applied)]);
    check(&stream, &drained, &responses, &applied);
    assert_eq!(drained.on_failure.len(), 1, "{:?}", drained.on_failure);
    assert_eq!(drained.on_failure[0].start_sequence_number, seqs[18]);
    let sent: usize = drained.batches.iter().map(|b| b.1.len()).sum();
    assert!(sent > 30, "replays: {sent} records sent for 30");
}

/// The item's keys with the sequence number as the key
/// (`KeySource::MessageAttribute("dynamodb:keys")`).
#[tokio::test]
async fn dynamodb_item_keys_with_the_sequence_number_are_a_key_source() {
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler = {
        let keys = Arc::clone(&keys);
        tower::service_fn(move |msg: Message| {
            keys.lock()
                .unwrap()
                .push(msg.key().unwrap_or("").to_owned());
            async { Ok::<(), BoxError>(()) }
        })
    };
    let consumer = DynamoDbStreams::new(
        Processor::builder(MemoryStore::new(), handler)
            .namespace("t")
            .key(sqs_claim::KeySource::MessageAttribute(
                "dynamodb:keys".into(),
            )),
    )
    .unwrap();
    let mut stream = Stream::dynamodb("t");
    let arn = stream.arn();
    let seq = stream.put(&arn, &json!({"n": {"N": "1"}}));
    let (drained, _) = (
        Mapping::default()
            .drain(&stream, |event| {
                let consumer = consumer.clone();
                async move {
                    let r = consumer
                        .process(LambdaEvent::new(event, Context::default()))
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok(serde_json::to_value(r).unwrap())
                }
            })
            .await,
        (),
    );
    assert_eq!(drained.invocations, 1);
    assert_eq!(
        *keys.lock().unwrap(),
        vec![format!(r#"t#{{"id":{{"S":"{seq}"}}}}@{seq}"#)]
    );
}

#[cfg(feature = "sqs")]
#[tokio::test]
async fn a_failure_queue_or_a_redelivery_is_refused() {
    let handler = tower::service_fn(|_m: Message| async { Ok::<(), BoxError>(()) });
    let client = sqs_claim::aws_sdk_sqs::Client::from_conf(
        sqs_claim::aws_sdk_sqs::Config::builder()
            .behavior_version_latest()
            .build(),
    );
    let builder = Processor::builder(MemoryStore::new(), handler)
        .redelivery(sqs_claim::Redelivery::sqs(client));
    let e = Kinesis::new(builder).unwrap_err();
    assert_eq!(e.kind(), sqs_claim::ErrorKind::Config);
    assert!(e.to_string().contains("event source mapping"), "{e}");
}

/// The events ministack's stream mappings sent (events/streams/): the Kinesis batch's third
/// record is not JSON, so it alone is reported; the DynamoDB batch succeeds, keyed by eventID.
#[tokio::test]
async fn the_captured_events_answer_as_documented() {
    let read = |name: &str| -> Value {
        let path = format!("{}/events/streams/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler = {
        let keys = Arc::clone(&keys);
        tower::service_fn(move |msg: Message| {
            keys.lock()
                .unwrap()
                .push(msg.key().unwrap_or("").to_owned());
            let decoded = msg.json::<Value>();
            async move { decoded.map(|_| ()) }
        })
    };
    let kinesis =
        Kinesis::new(Processor::builder(MemoryStore::new(), handler.clone()).namespace("k"))
            .unwrap();
    let response = kinesis
        .process(LambdaEvent::new(read("kinesis.json"), Context::default()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(response).unwrap(),
        json!({"batchItemFailures": [{"itemIdentifier": "000000017963183600620000000007"}]})
    );
    assert_eq!(
        keys.lock().unwrap()[0],
        "k#shardId-000000000000:000000017963183600620000000005"
    );
    keys.lock().unwrap().clear();
    let ddb = DynamoDbStreams::new(Processor::builder(MemoryStore::new(), handler).namespace("d"))
        .unwrap();
    let response = ddb
        .process(LambdaEvent::new(read("dynamodb.json"), Context::default()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(response).unwrap(),
        json!({"batchItemFailures": []})
    );
    assert_eq!(
        *keys.lock().unwrap(),
        vec![
            "d#d62d8b0c-3e30-4608-91db-e82d7212f99c",
            "d#6c3b1e44-825e-4d3f-ac5b-54bc33c3fb0c",
            "d#71ea6128-2485-4d54-9f32-7445cf1592d0"
        ]
    );
}
