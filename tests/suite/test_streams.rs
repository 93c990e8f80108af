//! Kinesis, DynamoDB Streams and Kafka consumers (`sqs_claim::stream`) replayed through the
//! test kit's stand-in for Lambda's stream event source mappings (`sqs_claim_testkit::stream`:
//! checkpoint at the lowest reported sequence number or offset, retry from it, bisect on a
//! function error, give up by retry attempts or record age), on the memory store and on
//! DynamoDB Local: every record applied exactly once and in order per shard or partition (the
//! effects commit with the claims' completions, so the applied log is the commit order),
//! failures, replays after a partial checkpoint and after a lost response, splits, a record
//! that cannot be decoded, a batch of 10,000.

use crate::support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use sqs_claim::store::MemoryEffect;
use sqs_claim::stream::{DynamoDbStreams, Kafka, Kinesis};
use sqs_claim::{BoxError, ClaimStore, Clock, Effects, Lease, MemoryStore, Message, Processor};
use sqs_claim_testkit::store::Spy;
use sqs_claim_testkit::stream::{Drained, Mapping, Source, Stream};

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

/// A record's sequence number as the stand-in names it (a Kafka record's offset is its
/// sequence number here: unique in the stream).
fn sequence_of(msg: &Message) -> String {
    let attributes = &msg.sqs().attributes;
    attributes
        .get("SequenceNumber")
        .or_else(|| attributes.get("Offset"))
        .cloned()
        .unwrap_or_default()
}

/// Drives `stream` through `mapping` into a consumer of `store`; returns how the mapping went
/// and every response the consumer gave.
async fn replay<S: ClaimStore>(
    store: S,
    stream: &Stream,
    mapping: &Mapping,
    faults: &Faults,
    effect: MakeEffect<S::Effect>,
    source: Source,
) -> (Drained, Vec<Value>) {
    let dynamodb = source == Source::DynamoDb;
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let faults = faults.clone();
        let calls = Arc::clone(&calls);
        tower::service_fn(move |msg: Message| {
            let faults = faults.clone();
            let effect = Arc::clone(&effect);
            calls.fetch_add(1, Ordering::Relaxed);
            async move {
                let seq = sequence_of(&msg);
                let shard = msg.group_id().unwrap_or("").to_owned();
                // The payload decoded: Kinesis' `data`, Kafka's `value`, DynamoDB's record.
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
    let (kinesis, ddb, kafka) = match source {
        Source::Kinesis => (Some(Kinesis::new(builder).unwrap()), None, None),
        Source::DynamoDb => (None, Some(DynamoDbStreams::new(builder).unwrap()), None),
        Source::Kafka => (None, None, Some(Kafka::new(builder).unwrap())),
    };
    let responses = Arc::new(Mutex::new(Vec::new()));
    let invocation = AtomicUsize::new(0);
    let invoke = |event: Value| {
        let n = invocation.fetch_add(1, Ordering::Relaxed);
        let lost = faults.lost.contains(&n);
        let responses = Arc::clone(&responses);
        let (kinesis, ddb, kafka) = (kinesis.clone(), ddb.clone(), kafka.clone());
        async move {
            let context = Context::default();
            let response = match (kinesis, ddb, kafka) {
                (Some(k), _, _) => serde_json::to_value(
                    k.process(LambdaEvent::new(event, context))
                        .await
                        .map_err(|e| e.to_string())?,
                ),
                (_, Some(d), _) => serde_json::to_value(
                    d.process(LambdaEvent::new(event, context))
                        .await
                        .map_err(|e| e.to_string())?,
                ),
                (_, _, Some(f)) => Ok(f
                    .process(LambdaEvent::new(event, context))
                    .await
                    .map_err(|e| e.to_string())?
                    .into_response()),
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
/// response names at most one record per shard, never an empty one (Kinesis, DynamoDB: one
/// shard per batch; Kafka: a partition and an offset, each partition at most once).
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
        let mut partitions = HashSet::new();
        for f in failures {
            match &f["itemIdentifier"] {
                Value::Object(id) => {
                    let partition = id["partition"].as_str().unwrap();
                    assert!(!partition.is_empty(), "{response}");
                    assert!(id["offset"].is_i64(), "{response}");
                    assert!(
                        partitions.insert(partition),
                        "one per partition: {response}"
                    );
                }
                id => {
                    assert!(failures.len() <= 1, "one shard per batch: {response}");
                    assert!(!id.as_str().unwrap().is_empty());
                }
            }
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
    support::batch::init_logs();
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
        Source::Kinesis,
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
    support::batch::init_logs();
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
        Source::Kinesis,
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
    support::batch::init_logs();
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
        Source::Kinesis,
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

/// A record whose payload does not decode fails without a claim and without reaching the
/// handler, even one that never reads the body (it would otherwise complete the record with an
/// empty body and the mapping would move past it): on Kinesis, DynamoDB Streams and Kafka, its
/// reason says why, it is its shard's named failure, and the shard stops there.
#[tokio::test]
async fn an_unreadable_record_never_reaches_a_handler_that_ignores_the_body() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler = {
        let seen = Arc::clone(&seen);
        tower::service_fn(move |msg: Message| {
            seen.lock().unwrap().push(msg.id().to_owned());
            async { Ok::<(), BoxError>(()) }
        })
    };
    let builder = || Processor::builder(MemoryStore::new(), handler.clone()).namespace("u");
    let record = |seq: &str, data: &str| {
        json!({"eventID": format!("shardId-1:{seq}"), "eventSource": "aws:kinesis",
               "kinesis": {"sequenceNumber": seq, "data": data}})
    };
    let event = json!({"Records": [record("1", "e30="), record("2", "%%%"), record("3", "e30=")]});
    let answer = Kinesis::new(builder())
        .unwrap()
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(answer.response()).unwrap(),
        json!({"batchItemFailures": [{"itemIdentifier": "2"}]})
    );
    let why = format!("{:?}", answer.report().items()[1].outcome);
    assert!(why.contains("not base64"), "{why}");
    assert_eq!(
        *seen.lock().unwrap(),
        ["shardId-1:1"],
        "only the record before it ran"
    );

    seen.lock().unwrap().clear();
    let record = |seq: &str, keys: Value| {
        json!({"eventID": format!("e-{seq}"), "eventSource": "aws:dynamodb", "eventName": "INSERT",
               "dynamodb": {"SequenceNumber": seq, "Keys": keys}})
    };
    let event =
        json!({"Records": [record("10", json!({"pk": {"S": "a"}})), record("11", json!(null))]});
    let answer = DynamoDbStreams::new(builder())
        .unwrap()
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(answer.response()).unwrap(),
        json!({"batchItemFailures": [{"itemIdentifier": "11"}]})
    );
    let why = format!("{:?}", answer.report().items()[1].outcome);
    assert!(why.contains("no dynamodb.Keys"), "{why}");
    assert_eq!(*seen.lock().unwrap(), ["e-10"]);

    seen.lock().unwrap().clear();
    let record = |offset: i64, value: &str| json!({"topic": "t", "partition": 0, "offset": offset, "value": value});
    let event = json!({"eventSource": "aws:kafka",
                       "records": {"t-0": [record(5, "e30="), record(6, "%%%"), record(7, "e30=")]}});
    let answer = Kafka::new(builder())
        .unwrap()
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(answer.response()).unwrap(),
        json!({"batchItemFailures": [{"itemIdentifier": {"partition": "t-0", "offset": 6}}]})
    );
    let why = format!("{:?}", answer.report().items()[1].outcome);
    assert!(why.contains("not base64"), "{why}");
    assert_eq!(*seen.lock().unwrap(), ["t-0@5"]);
}

/// An after-batch step on a stream consumer sees each record's group (its shard), as the
/// handler's `Message::group_id` does.
#[tokio::test]
async fn an_after_batch_step_sees_each_record_s_shard() {
    use futures::future::BoxFuture;
    use sqs_claim::processor::{AfterBatch, Finished};

    #[derive(Debug, Default, Clone)]
    struct Groups(Arc<Mutex<Vec<Option<String>>>>);
    impl AfterBatch for Groups {
        fn after<'a>(&'a self, batch: &'a mut Finished<'_>) -> BoxFuture<'a, ()> {
            let groups = batch
                .received()
                .iter()
                .map(|r| r.group_id().map(str::to_owned));
            self.0.lock().unwrap().extend(groups);
            Box::pin(async {})
        }
    }
    let groups = Groups::default();
    let handler = tower::service_fn(|_msg: Message| async { Ok::<(), BoxError>(()) });
    let builder = Processor::builder(MemoryStore::new(), handler)
        .namespace("g")
        .after_batch(groups.clone());
    let record = |id: &str| {
        json!({"eventID": id, "eventSource": "aws:kinesis",
               "kinesis": {"sequenceNumber": id.rsplit(':').next().unwrap(), "data": "e30="}})
    };
    let event = json!({"Records": [record("shardId-1:1"), record("shardId-2:2")]});
    Kinesis::new(builder)
        .unwrap()
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .unwrap();
    assert_eq!(
        *groups.0.lock().unwrap(),
        [Some("shardId-1".to_owned()), Some("shardId-2".to_owned())]
    );
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
        Source::Kinesis,
    )
    .await;
    assert_eq!(drained.invocations, 1);
    check(&stream, &drained, &responses, &log.lock().unwrap());
}

/// A Kafka topic whose name holds `-`, three partitions of `per_partition` records, failures
/// that pass after one to three tries, lost responses.
fn kafka_scenario(topic: &str, per_partition: usize) -> (Stream, Faults) {
    let mut stream = Stream::kafka(topic);
    let mut seqs = Vec::new();
    for i in 0..per_partition {
        for p in 0..3 {
            seqs.push(stream.put(&format!("{topic}-{p}"), &json!({"n": i, "p": p})));
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
async fn kafka_failures_replays_and_splits_apply_every_record_once_in_order_per_partition() {
    support::batch::init_logs();
    let (stream, faults) = kafka_scenario("orders-eu", 40);
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
        Source::Kafka,
    )
    .await;
    assert_eq!(
        stream.shards(),
        ["orders-eu-0", "orders-eu-1", "orders-eu-2"]
    );
    check(&stream, &drained, &responses, &log.lock().unwrap());
    assert!(drained.on_failure.is_empty());
    let sent: usize = drained.batches.iter().map(|b| b.1.len()).sum();
    assert!(sent > 120, "{sent} records sent for 120");
    assert!(
        drained
            .batches
            .iter()
            .any(|b| b.1.len() < 9 && !b.1.is_empty()),
        "a split"
    );
    // Partitions fail in the same batch, and each is named once.
    assert!(
        responses
            .iter()
            .any(|r| r["batchItemFailures"].as_array().unwrap().len() > 1),
        "a response naming two partitions"
    );
}

#[tokio::test]
async fn a_kafka_poison_record_is_given_up_and_the_other_partitions_go_on() {
    support::batch::init_logs();
    let (stream, mut faults) = kafka_scenario("payments", 20);
    let poison = stream.sequence_numbers("payments-1")[7].clone();
    faults.poison = Arc::new([poison.clone()].into_iter().collect());
    let (log, effect) = memory_log();
    let mapping = Mapping {
        batch_size: 10,
        bisect_on_error: true,
        max_retry_attempts: Some(5),
        ..Mapping::default()
    };
    let (drained, responses) = replay(
        MemoryStore::new(),
        &stream,
        &mapping,
        &faults,
        effect,
        Source::Kafka,
    )
    .await;
    check(&stream, &drained, &responses, &log.lock().unwrap());
    assert_eq!(drained.on_failure.len(), 1, "{:?}", drained.on_failure);
    assert_eq!(drained.on_failure[0].shard, "payments-1");
    assert_eq!(drained.on_failure[0].start_sequence_number, poison);
    assert_eq!(log.lock().unwrap()["payments-0"].len(), 20);
    assert_eq!(log.lock().unwrap()["payments-2"].len(), 20);
}

#[tokio::test]
async fn a_kafka_value_that_is_not_base64_fails_one_record_and_stops_its_partition() {
    support::batch::init_logs();
    let mut stream = Stream::kafka("orders-eu");
    let mut a = Vec::new();
    for i in 0..6 {
        a.push(stream.put("orders-eu-0", &json!({"n": i})));
        stream.put("orders-eu-1", &json!({"n": i}));
    }
    stream.record_mut(&a[2]).unwrap()["value"] = json!("%%% not base64");
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
        Source::Kafka,
    )
    .await;
    // The first answer names the undecodable record alone, by partition and offset.
    let offset: i64 = a[2].parse().unwrap();
    assert_eq!(
        responses[0],
        json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "orders-eu-0", "offset": offset}}
        ]})
    );
    check(&stream, &drained, &responses, &log.lock().unwrap());
    assert_eq!(drained.given_up(&stream), a[2..].to_vec());
    assert_eq!(log.lock().unwrap()["orders-eu-0"], a[..2].to_vec());
    assert_eq!(log.lock().unwrap()["orders-eu-1"].len(), 6);
}

/// The sample event (events/streams/kafka.json, from the documented shape: ministack has no
/// Kafka): its second record's value is not JSON, so its partition is named at that offset;
/// the other partition, of a topic with `-` in its name, succeeds; a tombstone is an empty
/// body.
#[tokio::test]
async fn the_sample_kafka_event_answers_as_documented() {
    let path = format!("{}/events/streams/kafka.json", env!("CARGO_MANIFEST_DIR"));
    let event: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let handler = {
        let seen = Arc::clone(&seen);
        tower::service_fn(move |msg: Message| {
            seen.lock()
                .unwrap()
                .push((msg.key().unwrap_or("").to_owned(), msg.body().to_owned()));
            let body = msg.body().to_owned();
            async move {
                if body.is_empty() {
                    return Ok(()); // a tombstone: the key is deleted
                }
                serde_json::from_str::<Value>(&body)?;
                Ok::<(), BoxError>(())
            }
        })
    };
    let kafka = Kafka::new(Processor::builder(MemoryStore::new(), handler).namespace("f")).unwrap();
    let response = kafka
        .process(LambdaEvent::new(event, Context::default()))
        .await
        .unwrap()
        .into_response();
    assert_eq!(
        response,
        json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "orders-0", "offset": 16}}
        ]})
    );
    // The partitions ran concurrently: sorted, the keys are topic, partition and offset, and
    // offset 17 (after the failure) was not started.
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let keys: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "f#orders-0@15",
            "f#orders-0@16",
            "f#orders-eu-2@3",
            "f#orders-eu-2@4"
        ]
    );
    assert_eq!(seen[3].1, "", "a tombstone is an empty body");
}

/// One-shot on ordered lanes: the heads of different partitions share a pack (one request for
/// several partitions' writes), and each partition still applies in offset order.
#[tokio::test]
async fn one_shot_writes_of_different_partitions_are_packed_and_each_stays_in_order() {
    let mut stream = Stream::kafka("orders-eu");
    for i in 0..20 {
        for p in 0..4 {
            stream.put(&format!("orders-eu-{p}"), &json!({"n": i}));
        }
    }
    let (log, effect) = memory_log();
    // A memory store that says it packs one-shot writes (as DynamoDB does); the spy records
    // the size of each pack.
    let store = Spy::new(MemoryStore::new()).map_capabilities(|mut caps| {
        caps.atomic_one_shot = true;
        caps.max_pack_actions = 100;
        caps
    });
    let packs = store.clone();
    let builder = Processor::one_shot(store, move |msg: &Message| {
        let seq = msg.sqs().attributes["Offset"].clone();
        let partition = msg.group_id().unwrap_or("").to_owned();
        Ok(Effects::one(effect(&partition, &seq)))
    })
    .namespace("packed");
    let kafka = Kafka::new(builder).unwrap();
    let (drained, responses) = {
        let responses = Arc::new(Mutex::new(Vec::new()));
        let drained = Mapping::default()
            .drain(&stream, |event| {
                let (kafka, responses) = (kafka.clone(), Arc::clone(&responses));
                async move {
                    let r = kafka
                        .process(LambdaEvent::new(event, Context::default()))
                        .await
                        .map_err(|e| e.to_string())?
                        .into_response();
                    responses.lock().unwrap().push(r.clone());
                    Ok(r)
                }
            })
            .await;
        let responses = responses.lock().unwrap().clone();
        (drained, responses)
    };
    assert_eq!(drained.invocations, 1, "one batch of the four partitions");
    check(&stream, &drained, &responses, &log.lock().unwrap());
    let packs = packs.packs();
    assert_eq!(packs.iter().sum::<usize>(), 80, "{packs:?}");
    assert!(
        packs.len() <= 40 && packs.iter().any(|&n| n > 1),
        "the partitions' writes went alone: {packs:?}"
    );
}

/// The effect that appends a sequence number to the list item `APPLIED#{prefix}{shard}` of
/// `store`'s table, in the completion's transaction, and how to read that list back.
fn dynamodb_log(
    store: &sqs_claim::DynamoDbStore,
    prefix: &str,
) -> (
    MakeEffect<TransactWriteItem>,
    impl AsyncFn(&str) -> Vec<String> + use<>,
) {
    let table = store.table().to_owned();
    let pk = store.key_schema().partition_key().name().to_owned();
    let client = store.client().clone();
    let effect: MakeEffect<TransactWriteItem> = {
        let (table, pk, prefix) = (table.clone(), pk.clone(), prefix.to_owned());
        Arc::new(move |shard: &str, seq: &str| {
            let update = Update::builder()
                .table_name(&table)
                .key(&pk, AttributeValue::S(format!("APPLIED#{prefix}{shard}")))
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
    let prefix = prefix.to_owned();
    let read = async move |shard: &str| -> Vec<String> {
        let item = client
            .get_item()
            .table_name(&table)
            .key(&pk, AttributeValue::S(format!("APPLIED#{prefix}{shard}")))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        item.item()
            .and_then(|i| i.get("seqs"))
            .and_then(|l| l.as_l().ok())
            .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
            .unwrap_or_default()
    };
    (effect, read)
}

/// DynamoDB Streams on DynamoDB Local: the applied log is a list in the claims table itself,
/// appended in the completion's transaction.
#[tokio::test]
async fn dynamodb_streams_on_dynamodb_local_apply_every_record_once_in_order() {
    support::batch::init_logs();
    let store = support::dynamodb::dynamodb_store("streams").await;
    assert!(store.key_schema().sort_key().is_none());
    let (effect, read_applied) = dynamodb_log(&store, "");
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
    let (drained, responses) =
        replay(store, &stream, &mapping, &faults, effect, Source::DynamoDb).await;
    let applied = BTreeMap::from([(arn.clone(), read_applied(&arn).await)]);
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

/// Drives `stream` through `mapping` into the consumer of `builder` for `source`; returns how
/// the mapping went, every response, and every batch's report (`stream::Answer::report`).
async fn drain_with<H>(
    builder: sqs_claim::ProcessorBuilder<MemoryStore, H>,
    source: Source,
    stream: &Stream,
    mapping: &Mapping,
) -> (Drained, Vec<Value>, Vec<sqs_claim::BatchReport>)
where
    H: tower::Service<Message, Response = ()> + Clone + Send + Sync + 'static,
    H::Future: Send + 'static,
    H::Error: Into<BoxError>,
{
    let answers: Arc<Mutex<Vec<(Value, sqs_claim::BatchReport)>>> = Arc::default();
    let (kinesis, ddb, kafka) = match source {
        Source::Kinesis => (Some(Kinesis::new(builder).unwrap()), None, None),
        Source::DynamoDb => (None, Some(DynamoDbStreams::new(builder).unwrap()), None),
        Source::Kafka => (None, None, Some(Kafka::new(builder).unwrap())),
    };
    let drained = mapping
        .drain(stream, |event| {
            let (kinesis, ddb, kafka) = (kinesis.clone(), ddb.clone(), kafka.clone());
            let answers = Arc::clone(&answers);
            async move {
                let event = LambdaEvent::new(event, Context::default());
                let (response, report) = match (kinesis, ddb, kafka) {
                    (Some(k), _, _) => {
                        let a = k.process(event).await.map_err(|e| e.to_string())?;
                        (serde_json::to_value(&a).unwrap(), a.report().clone())
                    }
                    (_, Some(d), _) => {
                        let a = d.process(event).await.map_err(|e| e.to_string())?;
                        (serde_json::to_value(&a).unwrap(), a.report().clone())
                    }
                    (_, _, Some(f)) => {
                        let a = f.process(event).await.map_err(|e| e.to_string())?;
                        (serde_json::to_value(&a).unwrap(), a.report().clone())
                    }
                    _ => unreachable!(),
                };
                answers.lock().unwrap().push((response.clone(), report));
                Ok(response)
            }
        })
        .await;
    assert!(
        !drained.stopped_early,
        "the mapping did not drain the stream"
    );
    let (responses, reports) = answers.lock().unwrap().drain(..).unzip();
    (drained, responses, reports)
}

/// One stream of `source` with one shard, and the pointer that keys its records by
/// `order_id`: Kinesis and Kafka into the decoded payload, DynamoDB Streams into the record's
/// `NewImage` (each record a new item: its own `id` key attribute, as a producer's retry that
/// made a new id writes it).
fn orders(source: Source) -> (Stream, String, &'static str) {
    match source {
        Source::Kinesis => (
            Stream::kinesis("orders"),
            "shardId-000000000000".to_owned(),
            "/order_id",
        ),
        Source::DynamoDb => {
            let stream = Stream::dynamodb("orders");
            let arn = stream.arn();
            (stream, arn, "/dynamodb/NewImage/order_id/S")
        }
        Source::Kafka => (Stream::kafka("orders"), "orders-0".to_owned(), "/order_id"),
    }
}

/// An order event as `source` carries it (DynamoDB: an item's attributes).
fn order(source: Source, id: &str, amount: u32) -> Value {
    match source {
        Source::DynamoDb => json!({"order_id": {"S": id}, "amount": {"N": amount.to_string()}}),
        _ => json!({"order_id": id, "amount": amount}),
    }
}

/// A handler that records each order it applies (its `order_id`, read through the pointer).
fn applying(
    pointer: &'static str,
    applied: Arc<Mutex<Vec<String>>>,
) -> impl tower::Service<Message, Response = (), Error = BoxError, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    tower::service_fn(move |msg: Message| {
        let applied = Arc::clone(&applied);
        async move {
            let payload: Value = msg.json()?;
            let id = payload
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("?");
            applied.lock().unwrap().push(id.to_owned());
            Ok::<(), BoxError>(())
        }
    })
}

/// On each source, a producer writes the same event twice, keyed by a pointer into the
/// payload: the second copy is a duplicate, skipped, and the shard goes on. In batches of 2
/// the copy comes in a later batch than its first (judged against the completed claim's
/// fingerprint); in batches of 100 in the same batch (judged against its first copy's).
#[tokio::test]
async fn a_producer_duplicate_keyed_by_a_pointer_is_skipped_on_every_source() {
    support::batch::init_logs();
    for source in [Source::Kinesis, Source::DynamoDb, Source::Kafka] {
        for batch_size in [2, 100] {
            let (mut stream, shard, pointer) = orders(source);
            let mut seqs = Vec::new();
            for (id, amount) in [
                ("o-1", 10),
                ("o-2", 20),
                ("o-2", 20),
                ("o-3", 30),
                ("o-3", 30),
                ("o-4", 40),
            ] {
                seqs.push(stream.put(&shard, &order(source, id, amount)));
            }
            let applied: Arc<Mutex<Vec<String>>> = Arc::default();
            let builder =
                Processor::builder(MemoryStore::new(), applying(pointer, Arc::clone(&applied)))
                    .namespace("orders")
                    .key(sqs_claim::KeySource::JsonPointer(pointer.into()));
            let mapping = Mapping {
                batch_size,
                max_retry_attempts: Some(2),
                ..Mapping::default()
            };
            let (drained, responses, reports) =
                drain_with(builder, source, &stream, &mapping).await;
            let what = format!("{source:?}, batches of {batch_size}");
            for response in &responses {
                assert_eq!(
                    response,
                    &json!({"batchItemFailures": []}),
                    "{what}: no record fails"
                );
            }
            assert!(
                drained.on_failure.is_empty(),
                "{what}: {:?}",
                drained.on_failure
            );
            assert_eq!(
                *applied.lock().unwrap(),
                ["o-1", "o-2", "o-3", "o-4"],
                "{what}: each order applied once, in order"
            );
            let duplicates: usize = reports.iter().map(|r| r.counts().duplicate).sum();
            assert_eq!(duplicates, 2, "{what}: the second copies were skipped");
            assert_eq!(
                drained.invocations,
                6_usize.div_ceil(batch_size),
                "{what}: the shard went on without a retry"
            );
        }
    }
}

/// The same key with another payload (a producer that reused an order id) still fails under
/// the default `PayloadCheck::Fail`, on every source: reported as its shard's failure, it
/// stops the shard until the mapping gives the batch up.
#[tokio::test]
async fn the_same_key_with_another_payload_still_fails_on_every_source() {
    support::batch::init_logs();
    for source in [Source::Kinesis, Source::DynamoDb, Source::Kafka] {
        let (mut stream, shard, pointer) = orders(source);
        let seqs: Vec<String> = [("o-1", 10), ("o-2", 20), ("o-2", 25), ("o-3", 30)]
            .into_iter()
            .map(|(id, amount)| stream.put(&shard, &order(source, id, amount)))
            .collect();
        let applied: Arc<Mutex<Vec<String>>> = Arc::default();
        let builder =
            Processor::builder(MemoryStore::new(), applying(pointer, Arc::clone(&applied)))
                .namespace("orders")
                .key(sqs_claim::KeySource::JsonPointer(pointer.into()));
        let mapping = Mapping {
            batch_size: 100,
            max_retry_attempts: Some(1),
            ..Mapping::default()
        };
        let (drained, responses, reports) = drain_with(builder, source, &stream, &mapping).await;
        let what = format!("{source:?}");
        let named = match source {
            Source::Kafka => json!({"partition": shard, "offset": seqs[2].parse::<i64>().unwrap()}),
            _ => json!(seqs[2]),
        };
        assert_eq!(
            responses[0],
            json!({"batchItemFailures": [{"itemIdentifier": named}]}),
            "{what}: the mismatch is its shard's failure"
        );
        let failed = reports[0]
            .items()
            .iter()
            .find(|i| !i.outcome.is_success())
            .unwrap();
        assert!(
            matches!(&failed.outcome, sqs_claim::Outcome::Failed(f)
                if f.kind == sqs_claim::FailureKind::PayloadMismatch),
            "{what}: {:?}",
            failed.outcome
        );
        assert_eq!(
            drained.on_failure.len(),
            1,
            "{what}: {:?}",
            drained.on_failure
        );
        assert_eq!(
            drained.on_failure[0].start_sequence_number, seqs[2],
            "{what}"
        );
        assert_eq!(*applied.lock().unwrap(), ["o-1", "o-2"], "{what}");
    }
}

/// `Message::position`: the sequence number (Kinesis, DynamoDB Streams), the topic-partition
/// and offset (Kafka), as the partial batch response names the record.
#[tokio::test]
async fn a_record_s_position_is_its_sequence_number_or_partition_and_offset() {
    use sqs_claim::stream::Position;
    for source in [Source::Kinesis, Source::DynamoDb, Source::Kafka] {
        let (mut stream, shard, _) = orders(source);
        let seqs: Vec<String> = (0..3)
            .map(|i| stream.put(&shard, &order(source, &format!("o-{i}"), i)))
            .collect();
        let seen: Arc<Mutex<Vec<Option<Position>>>> = Arc::default();
        let handler = {
            let seen = Arc::clone(&seen);
            tower::service_fn(move |msg: Message| {
                seen.lock().unwrap().push(msg.position());
                async { Ok::<(), BoxError>(()) }
            })
        };
        let builder = Processor::builder(MemoryStore::new(), handler).namespace("p");
        drain_with(builder, source, &stream, &Mapping::default()).await;
        let expected: Vec<Option<Position>> = seqs
            .iter()
            .map(|seq| {
                Some(match source {
                    Source::Kafka => Position::Offset {
                        partition: shard.clone(),
                        offset: seq.parse().unwrap(),
                    },
                    _ => Position::SequenceNumber(seq.clone()),
                })
            })
            .collect();
        assert_eq!(*seen.lock().unwrap(), expected, "{source:?}");
        if source == Source::Kafka {
            let shown = expected[0].as_ref().unwrap().to_string();
            assert_eq!(shown, format!("orders-0@{}", seqs[0]));
        }
    }
    // An SQS message, a FIFO one with its own `SequenceNumber` too, has none.
    let mut sqs = sqs_claim::events::SqsMessage::default();
    sqs.event_source = Some("aws:sqs".into());
    sqs.attributes
        .insert("SequenceNumber".into(), "18849496460467696128".into());
    sqs.attributes.insert("MessageGroupId".into(), "g".into());
    assert_eq!(Message::new(sqs, None).position(), None);
    assert_eq!(
        Message::new(sqs_claim::events::SqsMessage::default(), None).position(),
        None
    );
}

/// A `PowertoolsFormat` with a validation pointer hashes what that pointer selects from the
/// record as Powertools sees it (`dynamodb.NewImage.amount`), not the consumer's image rule:
/// the same amount under another item id is a duplicate, another amount a mismatch.
#[cfg(feature = "powertools")]
#[tokio::test]
async fn a_powertools_validation_pointer_reads_the_dynamodb_record_as_powertools_does() {
    use sqs_claim::powertools::{PowertoolsFormat, RecordPayload};
    let (mut stream, shard, pointer) = orders(Source::DynamoDb);
    let seqs: Vec<String> = [("o-1", 10), ("o-1", 10), ("o-1", 11)]
        .into_iter()
        .map(|(id, amount)| stream.put(&shard, &order(Source::DynamoDb, id, amount)))
        .collect();
    let applied: Arc<Mutex<Vec<String>>> = Arc::default();
    let format = PowertoolsFormat::new("orders-fn", "app.record_handler")
        .with_record_validation(RecordPayload::BodyJson("/dynamodb/NewImage/amount".into()));
    let builder = Processor::builder(MemoryStore::new(), applying(pointer, Arc::clone(&applied)))
        .key(sqs_claim::KeySource::JsonPointer(pointer.into()))
        .key_format(format);
    let mapping = Mapping {
        batch_size: 1,
        max_retry_attempts: Some(0),
        ..Mapping::default()
    };
    let (drained, responses, _) = drain_with(builder, Source::DynamoDb, &stream, &mapping).await;
    assert_eq!(
        responses[1],
        json!({"batchItemFailures": []}),
        "the same amount"
    );
    assert_eq!(
        responses[2],
        json!({"batchItemFailures": [{"itemIdentifier": seqs[2]}]}),
        "another amount"
    );
    assert_eq!(drained.given_up(&stream), [seqs[2].clone()]);
    assert_eq!(*applied.lock().unwrap(), ["o-1"]);
}

/// How a crash replay went: the mapping's account, each shard's applied log, and how many
/// times the handler was entered for the record the first invocation crashed on.
struct CrashReplay {
    drained: Drained,
    applied: BTreeMap<String, Vec<String>>,
    crash_calls: usize,
    stream: Stream,
}

/// One shard of 12 records through the stand-in; the first invocation dies (the process is
/// killed: its task aborted, nothing returned) once the handler is entered for the 6th record,
/// its claim taken and nothing of it committed. The mapping retries the batch at once, as
/// Lambda does after a function error on a stream, with the same function `timeout`: the
/// retry's deadline is the crashed one's plus the time the crash came into it. Claims are
/// leased under `lease`; time is tokio's, paused.
async fn crash_replay(source: Source, lease: Lease, timeout: Duration) -> CrashReplay {
    let (log, effect) = memory_log();
    let (drained, crash_calls, stream) = crash_replay_on(
        MemoryStore::new(),
        effect,
        Clock::tokio(),
        source,
        lease,
        timeout,
    )
    .await;
    let applied = log.lock().unwrap().clone();
    CrashReplay {
        drained,
        applied,
        crash_calls,
        stream,
    }
}

/// [`crash_replay`] on `store`, its effect appending to the applied log made by `effect`, on
/// `clock`: how the mapping went, the calls of the crashed record's handler, the stream.
async fn crash_replay_on<S: ClaimStore>(
    store: S,
    effect: MakeEffect<S::Effect>,
    clock: Clock,
    source: Source,
    lease: Lease,
    timeout: Duration,
) -> (Drained, usize, Stream) {
    let mut stream = match source {
        Source::Kinesis => Stream::kinesis("orders"),
        Source::DynamoDb => Stream::dynamodb("orders"),
        Source::Kafka => Stream::kafka("orders"),
    };
    let shard = if source == Source::Kafka {
        "orders-0"
    } else {
        "shardId-000000000000"
    };
    let seqs: Vec<String> = (0..12)
        .map(|i| stream.put(shard, &json!({"n": i})))
        .collect();
    let crash_seq = seqs[5].clone();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let crashed = Arc::new(tokio::sync::Notify::new());
    let crash_calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (armed, crashed, crash_calls) = (
            Arc::clone(&armed),
            Arc::clone(&crashed),
            Arc::clone(&crash_calls),
        );
        let crash_seq = crash_seq.clone();
        tower::service_fn(move |msg: Message| {
            let (armed, crashed, crash_calls) = (
                Arc::clone(&armed),
                Arc::clone(&crashed),
                Arc::clone(&crash_calls),
            );
            let effect = Arc::clone(&effect);
            let crash_seq = crash_seq.clone();
            async move {
                let seq = sequence_of(&msg);
                if seq == crash_seq {
                    crash_calls.fetch_add(1, Ordering::SeqCst);
                    if armed.swap(false, Ordering::SeqCst) {
                        // Killed here: the test aborts the invocation's task.
                        crashed.notify_one();
                        std::future::pending::<()>().await;
                    }
                }
                Ok::<_, BoxError>(Effects::one(effect(shard, &seq)))
            }
        })
    };
    let builder = Processor::builder(store, handler)
        .namespace(sqs_claim_testkit::local::unique_name("crash"))
        .clock(clock.clone())
        .lease_policy(lease);
    let (kinesis, ddb, kafka) = match source {
        Source::Kinesis => (Some(Kinesis::new(builder).unwrap()), None, None),
        Source::DynamoDb => (None, Some(DynamoDbStreams::new(builder).unwrap()), None),
        Source::Kafka => (None, None, Some(Kafka::new(builder).unwrap())),
    };
    let invoke = |event: Value| {
        let (kinesis, ddb, kafka) = (kinesis.clone(), ddb.clone(), kafka.clone());
        let crashed = Arc::clone(&crashed);
        let mut context = Context::default();
        context.deadline = support::batch::deadline_in(&clock, timeout);
        async move {
            let mut run = tokio::spawn(async move {
                let event = LambdaEvent::new(event, context);
                match (kinesis, ddb, kafka) {
                    (Some(k), _, _) => serde_json::to_value(k.process(event).await.unwrap()),
                    (_, Some(d), _) => serde_json::to_value(d.process(event).await.unwrap()),
                    (_, _, Some(f)) => Ok(f.process(event).await.unwrap().into_response()),
                    _ => unreachable!(),
                }
                .unwrap()
            });
            tokio::select! {
                response = &mut run => Ok(response.unwrap()),
                () = crashed.notified() => {
                    run.abort();
                    let _ = run.await;
                    Err("the function crashed (Runtime.ExitError)".to_owned())
                }
            }
        }
    };
    let mapping = Mapping {
        max_invocations: 6,
        ..Mapping::default()
    };
    let drained = mapping.drain(&stream, invoke).await;
    (drained, crash_calls.load(Ordering::SeqCst), stream)
}

/// A crash mid-batch costs one retry: the mapping's first retry (at once, under a 60 s and a
/// 6 s timeout) waits out the rest of the crashed claim's short lease, takes it over and
/// applies the crashed record, and every other record once, in order.
#[tokio::test(start_paused = true)]
async fn a_crash_mid_batch_costs_one_retry_on_every_source() {
    for source in [Source::Kinesis, Source::DynamoDb, Source::Kafka] {
        for timeout in [Duration::from_secs(60), Duration::from_secs(6)] {
            let replay = crash_replay(source, Lease::default(), timeout).await;
            let what = format!("{source:?}, {timeout:?} timeout");
            assert_eq!(
                replay.drained.invocations, 2,
                "{what}: the crashed invocation and one retry: {:?}",
                replay.drained.batches
            );
            assert!(replay.drained.on_failure.is_empty(), "{what}");
            check(&replay.stream, &replay.drained, &[], &replay.applied);
            assert_eq!(
                replay.crash_calls, 2,
                "{what}: the crashed record ran twice (crashed, then applied)"
            );
        }
    }
}

/// The contrast, which the test above would meet if claims were held until the deadline (the
/// lease before it was extended): the retry at once finds the crashed claim held past its own
/// cut-off and reports the record, again and again until the lease lapses.
#[tokio::test(start_paused = true)]
async fn with_leases_until_the_deadline_a_crash_costs_more_than_one_retry() {
    let replay = crash_replay(
        Source::Kinesis,
        Lease::until_deadline(Duration::from_secs(300)),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        replay.drained.invocations > 2,
        "{:?}",
        replay.drained.batches
    );
    assert_eq!(replay.crash_calls, 1, "never taken over at once");
}

/// The crash mid-batch on DynamoDB Local, in real time (a 6 s timeout: a 2 s lease): the
/// mapping's first retry waits out the crashed claim and applies every record once, in order,
/// the applied log written in the completions' transactions.
#[tokio::test]
async fn a_crash_mid_batch_costs_one_retry_on_dynamodb_local() {
    support::batch::init_logs();
    let store = support::dynamodb::dynamodb_store("crash").await;
    let (effect, read_applied) = dynamodb_log(&store, &format!("{}#", uuid::Uuid::new_v4()));
    let started = std::time::Instant::now();
    let (drained, crash_calls, stream) = crash_replay_on(
        store,
        effect,
        Clock::system(),
        Source::Kinesis,
        Lease::default(),
        Duration::from_secs(6),
    )
    .await;
    let shard = "shardId-000000000000";
    let applied = read_applied(shard).await;
    assert_eq!(drained.invocations, 2, "{:?}", drained.batches);
    check(
        &stream,
        &drained,
        &[],
        &BTreeMap::from([(shard.to_owned(), applied)]),
    );
    assert_eq!(crash_calls, 2);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the retry waited the 2 s lease out: {:?}",
        started.elapsed()
    );
}
