//! Powertools interop, against Powertools for AWS Lambda (Python) itself.
//!
//! `scripts/powertools/venv.sh` installs the pinned Powertools into `.powertools/venv` (the
//! first test to need it runs it); `scripts/powertools/driver.py` runs Powertools' own key
//! derivation, and a real `@idempotent` handler and `@idempotent_function` SQS record handler
//! (`scripts/powertools/app.py`) against DynamoDB Local. The tests skip, saying so, when
//! `SQS_CLAIM_DYNAMODB_ENDPOINT` is not set. The hash grid needs no server: it reads keys and
//! hashes through the public API only (`PowertoolsFormat::key`, `KeyFormat::fingerprint`, and a
//! record's key and validation for the text path, which keeps numbers as Python reads them).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use sqs_claim::ClaimStore;
use sqs_claim::KeySource;
use sqs_claim::claim::KeyFormat;
use sqs_claim::events::SqsMessage;
use sqs_claim::powertools::{HashFunction, PowertoolsFormat, RecordPayload, python_json_dumps};
use sqs_claim::store::StoreAdmin;
use sqs_claim::store::dynamodb::DynamoDbKeySchema;
use sqs_claim::store::{Claim, ClaimRequest, Completion, Status, StoredResponse};

use crate::support;

use support::{dynamodb, powertools};

/// The Lambda function name the Python side runs under (`AWS_LAMBDA_FUNCTION_NAME`).
const FUNCTION: &str = "orders-fn";

/// Runs `driver.py ARGS` with `stdin` as [`FUNCTION`], returns the JSON it prints.
fn driver(args: &[&str], stdin: &str) -> Value {
    powertools::driver(FUNCTION, args, stdin)
}

/// The DynamoDB Local endpoint, or `None` (and a message) when it is not configured.
fn dynamodb_configured(test: &str) -> bool {
    if std::env::var_os("SQS_CLAIM_DYNAMODB_ENDPOINT").is_none() {
        eprintln!(
            "SKIPPED {test}: SQS_CLAIM_DYNAMODB_ENDPOINT is not set (run `make test`, or \
             `scripts/standins.sh up` and source .standins/env)"
        );
        return false;
    }
    true
}

/// The JSON texts the grid compares: unicode, escapes, floats, integers, nesting, key order,
/// empty values.
const GRID: &[&str] = &[
    r#""059f36b4-87a3-44ab-83d2-661975830a7d""#,
    r#""abc""#,
    r#""é ü ß 日本 😀 \u0000 \u001f \u007f \u0080 \uffff \ud83d\ude00""#,
    r#""quote \" backslash \\ slash / \/ tab \t nl \n cr \r bs \b ff \f""#,
    r#""""#,
    r#"0"#,
    r#"-0"#,
    r#"-17"#,
    r#"9007199254740993"#,
    r#"18446744073709551615"#,
    r#"-9223372036854775808"#,
    r#"123456789012345678901234567890"#,
    r#"-123456789012345678901234567890"#,
    r#"0.0"#,
    r#"-0.0"#,
    r#"1.0"#,
    r#"1.5"#,
    r#"0.1"#,
    r#"1e2"#,
    r#"1E2"#,
    r#"1e+20"#,
    r#"1e20"#,
    r#"100000000000000000000.0"#,
    r#"1e16"#,
    r#"1e15"#,
    r#"1234567890123456.7"#,
    r#"0.0001"#,
    r#"0.00001"#,
    r#"1e-7"#,
    r#"1.5e-7"#,
    r#"2.5e-300"#,
    r#"5e-324"#,
    r#"1.7976931348623157e308"#,
    r#"0.30000000000000004"#,
    r#"3.141592653589793238462643383279"#,
    r#"2.2250738585072011e-308"#,
    r#"true"#,
    r#"false"#,
    r#"null"#,
    r#"{}"#,
    r#"[]"#,
    r#"[null]"#,
    r#"[null, 1]"#,
    r#"{"a": null}"#,
    r#"{"b":1,"a":2,"A":3,"_":4,"aa":5,"é":6,"z":7,"😀":8,"":9}"#,
    r#"{"order_id":"o-1","amount":12.5,"items":[{"sku":"x","qty":2},{"qty":1,"sku":"y"}]}"#,
    r#"{"a":1,"a":2}"#,
    r#"{"nested":{"deeper":{"deepest":[1,[2,[3,{}]]]}},"list":[true,false,null,"",0]}"#,
    r#"[1, "1", 1.0, [], {}, [[]], {"x": []}]"#,
    r#"{"body":"{\"order_id\": \"o-1\"}","messageId":"m-1"}"#,
];

/// Texts a `serde_json::Value` cannot carry as Python does (integers past u64/i64, `-0`,
/// which serde_json reads as the float -0.0, a float its default parser rounds otherwise):
/// only the text path is compared for them.
fn value_path_limited(text: &str) -> bool {
    text.contains("123456789012345678901234567890")
        || text == "-0"
        || text == "2.2250738585072011e-308"
}

fn python_hashes(args: &[&str]) -> Vec<Value> {
    let input = serde_json::to_string(GRID).unwrap();
    let out = driver(&[&["hash"], args].concat(), &input);
    out.as_array().expect("an array").clone()
}

/// An SQS record whose body is `{"k": <text>}`: a key source `json:/k` and the validation
/// `BodyJson("/k")` read `text` as it is written, as Python's `json.loads` reads it.
fn record_with(text: &str) -> SqsMessage {
    let mut msg = SqsMessage::default();
    msg.message_id = Some("m-1".into());
    msg.body = Some(format!("{{\"k\": {text}}}"));
    msg
}

/// The key of `text` by the text path (`json:/k` of [`record_with`]), `None` where Powertools
/// finds no key.
fn key_of_text(format: &PowertoolsFormat, text: &str) -> Option<String> {
    let record = record_with(text);
    let body = record.body.as_deref().unwrap();
    format
        .record_key("", &KeySource::JsonPointer("/k".into()), &record, body)
        .unwrap()
}

#[test]
fn hash_grid_matches_powertools() {
    let pt = python_hashes(&["--handler", "app.lambda_handler"]);
    let format = PowertoolsFormat::new(FUNCTION, "app.lambda_handler");
    let validating = PowertoolsFormat::new(FUNCTION, "app.lambda_handler")
        .with_record_validation(RecordPayload::BodyJson("/k".into()));
    assert_eq!(pt.len(), GRID.len());
    for (text, py) in GRID.iter().zip(&pt) {
        let value: Value = serde_json::from_str(text).unwrap();
        if !value_path_limited(text) {
            assert_eq!(format.fingerprint(&value), py["hash"], "hash of {text}");
        }
        assert_eq!(
            validating.record_fingerprint(&record_with(text), &format!("{{\"k\": {text}}}")),
            py["hash"].as_str().map(str::to_owned),
            "hash of text {text}"
        );
        if py["key"].is_null() {
            assert_eq!(
                key_of_text(&format, text),
                None,
                "Powertools: no key for {text}"
            );
            continue;
        }
        if !value_path_limited(text) {
            assert_eq!(
                python_json_dumps(&value),
                py["dumps"],
                "json.dumps of {text}"
            );
            assert_eq!(format.key(&value), py["key"], "key of {text}");
        }
        assert_eq!(
            key_of_text(&format, text).as_deref(),
            py["key"].as_str(),
            "key of text {text}"
        );
    }
}

#[test]
fn key_prefix_and_sha256_match_powertools() {
    let pt = python_hashes(&["--key-prefix", "orders", "--hash-function", "sha256"]);
    let format =
        PowertoolsFormat::with_key_prefix("orders").with_hash_function(HashFunction::Sha256);
    for (text, py) in GRID.iter().zip(&pt) {
        if !py["key"].is_null() {
            assert_eq!(
                key_of_text(&format, text).as_deref(),
                py["key"].as_str(),
                "key of {text}"
            );
        }
    }
}

// ---- the table, both ways ---------------------------------------------------------------

fn api_format() -> PowertoolsFormat {
    PowertoolsFormat::new(FUNCTION, "app.lambda_handler")
}

/// An API Gateway event with an `Idempotency-Key` header, written to a temp file.
fn api_event(dir: &Path, idempotency_key: &str, body: &str) -> PathBuf {
    let event = json!({
        "resource": "/orders",
        "path": "/orders",
        "httpMethod": "POST",
        "headers": {"Idempotency-Key": idempotency_key, "Content-Type": "application/json"},
        "requestContext": {
            "accountId": "123456789012",
            "resourcePath": "/orders",
            "httpMethod": "POST",
            "stage": "prod",
            "requestId": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
        },
        "body": body,
        "isBase64Encoded": false,
    });
    let path = dir.join(format!("{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&path, event.to_string()).unwrap();
    path
}

fn apigw(table: &str, event: &Path, extra: &[&str]) -> Value {
    let event = event.to_str().unwrap();
    driver(
        &[&["apigw", "--table", table, "--event", event], extra].concat(),
        "",
    )
}

fn request<'a>(key: &'a str, now: SystemTime, fingerprint: Option<&'a str>) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        now,
        lease_until: now + Duration::from_secs(60),
        expires_at: now + Duration::from_secs(3600),
        fingerprint,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_powertools_completed_is_a_duplicate_for_sqs_claim() {
    if !dynamodb_configured("a_request_powertools_completed_is_a_duplicate_for_sqs_claim") {
        return;
    }
    let store = dynamodb::dynamodb_store("pt-completed").await;
    let dir = tempfile::tempdir().unwrap();
    let event = api_event(dir.path(), "req-1", r#"{"order_id":"o-1"}"#);
    let first = apigw(store.table(), &event, &[]);
    assert_eq!(first["ran"], true, "{first}");
    assert_eq!(first["error"], Value::Null, "{first}");

    let key = api_format().key(&json!("req-1"));
    match store
        .claim(request(&key, SystemTime::now(), None))
        .await
        .unwrap()
    {
        Claim::Completed { record, .. } => {
            assert_eq!(record.status, Status::Completed);
            // Its `data`: the handler's response as `json.dumps(result, sort_keys=True)`.
            let response = record.response.expect("Powertools stored the response");
            assert_eq!(response.as_str(), python_json_dumps(&first["response"]));
        }
        other => panic!("Powertools' completed request must be a duplicate, got {other:?}"),
    }
    // Its own second delivery is one too (the handler does not run again).
    let again = apigw(store.table(), &event, &[]);
    assert_eq!(again["ran"], false, "{again}");
    assert_eq!(again["response"], first["response"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_powertools_holds_is_held_until_its_in_progress_expiration() {
    if !dynamodb_configured("a_request_powertools_holds_is_held_until_its_in_progress_expiration") {
        return;
    }
    let store = dynamodb::dynamodb_store("pt-inprogress").await;
    let dir = tempfile::tempdir().unwrap();
    let event = api_event(dir.path(), "req-crash", "{}");
    let before = SystemTime::now();
    let crashed = apigw(
        store.table(),
        &event,
        &["--crash", "--remaining-ms", "30000"],
    );
    assert_eq!(crashed["crashed"], true, "{crashed}");

    let key = api_format().key(&json!("req-crash"));
    let lease_until = match store
        .claim(request(&key, SystemTime::now(), None))
        .await
        .unwrap()
    {
        Claim::HeldElsewhere {
            lease_until: Some(t),
        } => t,
        other => panic!("Powertools' in-progress record must be held, got {other:?}"),
    };
    assert!(
        lease_until >= before + Duration::from_secs(29)
            && lease_until <= SystemTime::now() + Duration::from_secs(31),
        "the lease is Powertools' in_progress_expiration (now + remaining time)"
    );
    // Just before it lapses: still held. From then on: taken over.
    assert!(matches!(
        store
            .claim(request(&key, lease_until - Duration::from_millis(1), None))
            .await
            .unwrap(),
        Claim::HeldElsewhere { .. }
    ));
    assert!(matches!(
        store.claim(request(&key, lease_until, None)).await.unwrap(),
        Claim::Acquired(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_sqs_claim_completed_is_a_duplicate_for_powertools() {
    if !dynamodb_configured("a_key_sqs_claim_completed_is_a_duplicate_for_powertools") {
        return;
    }
    let store = dynamodb::dynamodb_store("pt-ours").await;
    let dir = tempfile::tempdir().unwrap();
    let key = api_format().key(&json!("req-2"));
    let now = SystemTime::now();
    let Claim::Acquired(token) = store.claim(request(&key, now, None)).await.unwrap() else {
        panic!("a fresh key is acquired");
    };

    // While we hold it, Powertools sees it in progress and does not run.
    let event = api_event(dir.path(), "req-2", "{}");
    let held = apigw(store.table(), &event, &[]);
    assert_eq!(held["ran"], false, "{held}");
    assert_eq!(held["error"], "IdempotencyAlreadyInProgressError", "{held}");

    // Completed with a response (JSON text, as Powertools reads `data` with `json.loads`).
    let response = json!({"statusCode": 201, "body": "from sqs-claim, é"});
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + Duration::from_secs(3600))
                .with_response(StoredResponse::new(python_json_dumps(&response))),
        )
        .await
        .unwrap();
    let done = apigw(store.table(), &event, &[]);
    assert_eq!(done["ran"], false, "{done}");
    assert_eq!(done["error"], Value::Null, "{done}");
    assert_eq!(
        done["response"], response,
        "Powertools returns our stored response"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn powertools_sort_key_mode_table_is_shared_both_ways() {
    if !dynamodb_configured("powertools_sort_key_mode_table_is_shared_both_ways") {
        return;
    }
    // DynamoDBPersistenceLayer(sort_key_attr="sk"): every record under the partition key
    // `idempotency#{AWS_LAMBDA_FUNCTION_NAME}`, the key in `sk`.
    let table = format!("pt-sortkey-{}", uuid::Uuid::new_v4());
    let schema = DynamoDbKeySchema::partition("id", format!("idempotency#{FUNCTION}"))
        .with_sort("sk", "{key}");
    let store = sqs_claim::DynamoDbStore::new(
        dynamodb::dynamodb_client(&dynamodb::dynamodb_endpoint()),
        table,
    )
    .with_key_schema(schema)
    .unwrap();
    store.init().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sort_key = ["--sort-key-attr", "sk"];

    let first = apigw(
        store.table(),
        &api_event(dir.path(), "s-1", "{}"),
        &sort_key,
    );
    assert_eq!(first["ran"], true, "{first}");
    let key = api_format().key(&json!("s-1"));
    let Claim::Completed { record, .. } = store
        .claim(request(&key, SystemTime::now(), None))
        .await
        .unwrap()
    else {
        panic!("completed by Powertools");
    };
    assert_eq!(
        record.response.map(|r| r.into_string()),
        Some(python_json_dumps(&first["response"]))
    );

    let key = api_format().key(&json!("s-2"));
    let now = SystemTime::now();
    let Claim::Acquired(token) = store.claim(request(&key, now, None)).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + Duration::from_secs(3600))
                .with_response(StoredResponse::new(r#"{"from": "sqs-claim"}"#)),
        )
        .await
        .unwrap();
    let done = apigw(
        store.table(),
        &api_event(dir.path(), "s-2", "{}"),
        &sort_key,
    );
    assert_eq!(done["ran"], false, "{done}");
    assert_eq!(done["response"], json!({"from": "sqs-claim"}), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_other_payload_is_a_mismatch_on_both_sides() {
    if !dynamodb_configured("same_key_other_payload_is_a_mismatch_on_both_sides") {
        return;
    }
    let store = dynamodb::dynamodb_store("pt-validation").await;
    let dir = tempfile::tempdir().unwrap();
    let format = api_format();
    let validation = ["--validation", "body"];

    // Powertools -> sqs-claim: its `validation` is our fingerprint of the same payload.
    let event = api_event(dir.path(), "req-3", "payload A");
    let first = apigw(store.table(), &event, &validation);
    assert_eq!(first["ran"], true, "{first}");
    let key = format.key(&json!("req-3"));
    let same = format.fingerprint(&json!("payload A"));
    let other = format.fingerprint(&json!("payload B"));
    let Claim::Completed { record, .. } = store
        .claim(request(&key, SystemTime::now(), Some(&other)))
        .await
        .unwrap()
    else {
        panic!("completed by Powertools");
    };
    assert_eq!(record.fingerprint.as_deref(), Some(same.as_str()));
    assert_ne!(record.fingerprint.as_deref(), Some(other.as_str()));

    // sqs-claim -> Powertools: our fingerprint is its `validation`.
    let key = format.key(&json!("req-4"));
    let now = SystemTime::now();
    let Claim::Acquired(token) = store.claim(request(&key, now, Some(&same))).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    store
        .complete_with(
            &key,
            &token,
            Completion::new(now + Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let mismatch = apigw(
        store.table(),
        &api_event(dir.path(), "req-4", "payload B"),
        &validation,
    );
    assert_eq!(mismatch["ran"], false, "{mismatch}");
    assert_eq!(
        mismatch["error"], "IdempotencyValidationError",
        "{mismatch}"
    );
    let matching = apigw(
        store.table(),
        &api_event(dir.path(), "req-4", "payload A"),
        &validation,
    );
    assert_eq!(matching["ran"], false, "{matching}");
    assert_eq!(matching["error"], Value::Null, "{matching}");
}

// ---- the SQS processor and a Powertools batch consumer on one table ---------------------

fn record_format() -> PowertoolsFormat {
    PowertoolsFormat::new(FUNCTION, "app.record_handler")
}

/// An SQS event as Lambda delivers it, of `(message id, body)` records.
fn sqs_event(records: &[(&str, &str)]) -> Value {
    let records: Vec<Value> = records
        .iter()
        .map(|(id, body)| {
            json!({
                "messageId": id,
                "receiptHandle": format!("rh-{id}"),
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1700000000000",
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": "1700000000001"
                },
                "messageAttributes": {},
                "md5OfBody": "00000000000000000000000000000000",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:orders",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

/// Runs the batch through Powertools' batch consumer; the message ids whose handler ran.
fn powertools_batch(table: &str, dir: &Path, records: &[(&str, &str)], extra: &[&str]) -> Value {
    let path = dir.join(format!("{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&path, sqs_event(records).to_string()).unwrap();
    let out = driver(
        &[
            &[
                "sqs-record",
                "--table",
                table,
                "--event",
                path.to_str().unwrap(),
            ],
            extra,
        ]
        .concat(),
        "",
    );
    assert_eq!(out["error"], Value::Null, "{out}");
    out
}

/// Runs the batch through `processor`.
async fn sqs_claim_batch<H>(
    processor: &sqs_claim::Processor<sqs_claim::DynamoDbStore, H>,
    records: &[(&str, &str)],
) -> sqs_claim::BatchReport
where
    H: tower::Service<sqs_claim::Message, Response = (), Error = sqs_claim::Error>
        + Clone
        + Send
        + Sync
        + 'static,
    H::Future: Send + 'static,
{
    let event: sqs_claim::events::SqsEvent = serde_json::from_value(sqs_event(records)).unwrap();
    processor
        .process(lambda_runtime::LambdaEvent::new(
            event,
            lambda_runtime::Context::default(),
        ))
        .await
        .unwrap()
}

fn outcomes(report: &sqs_claim::BatchReport) -> Vec<(String, String)> {
    report
        .items()
        .iter()
        .map(|i| {
            let o = match &i.outcome {
                sqs_claim::Outcome::Processed => "processed".to_owned(),
                sqs_claim::Outcome::Duplicate => "duplicate".to_owned(),
                sqs_claim::Outcome::Failed(f) => format!("failed:{}", f.kind.as_str()),
                other => format!("{other:?}"),
            };
            (i.message_id.clone(), o)
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

type Ran = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

fn recording_handler(
    ran: &Ran,
) -> impl tower::Service<
    sqs_claim::Message,
    Response = (),
    Error = sqs_claim::Error,
    Future = impl Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    let ran = std::sync::Arc::clone(ran);
    tower::service_fn(move |msg: sqs_claim::Message| {
        let ran = std::sync::Arc::clone(&ran);
        async move {
            ran.lock().unwrap().push(msg.id().to_owned());
            Ok::<(), sqs_claim::Error>(())
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_keyed_records_are_duplicates_across_powertools_and_the_processor() {
    if !dynamodb_configured("body_keyed_records_are_duplicates_across_powertools_and_the_processor")
    {
        return;
    }
    let store = dynamodb::dynamodb_store("pt-records").await;
    let dir = tempfile::tempdir().unwrap();
    let key = ["--key", "powertools_json(body).order_id"];

    // Powertools first: a string, an integer and a float order id.
    let first = [
        ("m-1", r#"{"order_id":"o-1","amount":12.5}"#),
        ("m-2", r#"{"order_id":42}"#),
        ("m-3", r#"{"order_id":1e2}"#),
    ];
    let pt = powertools_batch(store.table(), dir.path(), &first, &key);
    assert_eq!(pt["ran"], json!(["m-1", "m-2", "m-3"]), "{pt}");

    // The processor: the same records, one of them re-sent under a new message id, one new.
    let ran = Ran::default();
    let processor = sqs_claim::Processor::builder(store.clone(), recording_handler(&ran))
        .key(sqs_claim::KeySource::JsonPointer("/order_id".into()))
        .key_format(record_format())
        .build();
    let mut second = first.to_vec();
    second.push(("m-1b", r#"{"amount":12.5,"order_id":"o-1"}"#));
    second.push(("m-4", r#"{"order_id":"o-4"}"#));
    let report = sqs_claim_batch(&processor, &second).await;
    assert_eq!(
        outcomes(&report),
        pairs(&[
            ("m-1", "duplicate"),
            ("m-2", "duplicate"),
            ("m-3", "duplicate"),
            ("m-1b", "duplicate"),
            ("m-4", "processed"),
        ])
    );
    assert_eq!(*ran.lock().unwrap(), ["m-4"]);
    assert_eq!(
        report.items()[4].key.as_deref(),
        Some(record_format().key(&json!("o-4")).as_str())
    );

    // Back to Powertools: what the processor completed is a duplicate there.
    let pt = powertools_batch(
        store.table(),
        dir.path(),
        &[
            ("m-4b", r#"{"order_id":"o-4"}"#),
            ("m-5", r#"{"order_id":"o-5"}"#),
        ],
        &key,
    );
    assert_eq!(pt["ran"], json!(["m-5"]), "{pt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_id_keyed_records_are_duplicates_across_powertools_and_the_processor() {
    if !dynamodb_configured(
        "message_id_keyed_records_are_duplicates_across_powertools_and_the_processor",
    ) {
        return;
    }
    let store = dynamodb::dynamodb_store("pt-msgid").await;
    let dir = tempfile::tempdir().unwrap();
    let pt = powertools_batch(store.table(), dir.path(), &[("m-1", "a")], &[]);
    assert_eq!(pt["ran"], json!(["m-1"]), "{pt}");

    let ran = Ran::default();
    let processor = sqs_claim::Processor::builder(store.clone(), recording_handler(&ran))
        .key_format(record_format())
        .build();
    let report = sqs_claim_batch(&processor, &[("m-1", "a"), ("m-2", "b")]).await;
    assert_eq!(
        outcomes(&report),
        pairs(&[("m-1", "duplicate"), ("m-2", "processed")])
    );

    let pt = powertools_batch(
        store.table(),
        dir.path(),
        &[("m-1", "a"), ("m-2", "b")],
        &[],
    );
    assert_eq!(pt["ran"], json!([]), "{pt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_payload_validation_is_shared_with_powertools() {
    if !dynamodb_configured("record_payload_validation_is_shared_with_powertools") {
        return;
    }
    let store = dynamodb::dynamodb_store("pt-recval").await;
    let dir = tempfile::tempdir().unwrap();
    let validation = ["--validation", "body"];
    let pt = powertools_batch(store.table(), dir.path(), &[("m-1", "A")], &validation);
    assert_eq!(pt["ran"], json!(["m-1"]), "{pt}");

    let ran = Ran::default();
    let processor = sqs_claim::Processor::builder(store.clone(), recording_handler(&ran))
        .key_format(
            record_format().with_record_validation(sqs_claim::powertools::RecordPayload::Body),
        )
        .build();
    let report = sqs_claim_batch(&processor, &[("m-1", "B"), ("m-2", "C")]).await;
    assert_eq!(
        outcomes(&report),
        pairs(&[("m-1", "failed:payload_mismatch"), ("m-2", "processed")])
    );
    let report = sqs_claim_batch(&processor, &[("m-1", "A")]).await;
    assert_eq!(outcomes(&report), pairs(&[("m-1", "duplicate")]));

    // Powertools checks the processor's `validation` the same way: the record fails (with
    // another record beside it: a batch whose every record fails is an error to Powertools).
    let pt = powertools_batch(
        store.table(),
        dir.path(),
        &[("m-2", "other"), ("m-9", "x")],
        &validation,
    );
    assert_eq!(pt["ran"], json!(["m-9"]), "{pt}");
    assert_eq!(
        pt["response"]["batchItemFailures"],
        json!([{"itemIdentifier": "m-2"}]),
        "{pt}"
    );
    let pt = powertools_batch(store.table(), dir.path(), &[("m-2", "C")], &validation);
    assert_eq!(pt["response"]["batchItemFailures"], json!([]), "{pt}");
}

// ---- the idempotency layer and a Powertools `@idempotent` handler on one table ----------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_layer_and_a_powertools_handler_share_requests() {
    use sqs_claim::idempotency::{Idempotency, key};
    if !dynamodb_configured("the_idempotency_layer_and_a_powertools_handler_share_requests") {
        return;
    }
    let store = dynamodb::dynamodb_store("pt-layer").await;
    let dir = tempfile::tempdir().unwrap();
    // Powertools validates what the layer fingerprints for an API Gateway event: the body.
    let validation = ["--validation", "powertools_json(body)"];
    let idempotency = Idempotency::builder(store.clone(), key::header("Idempotency-Key"))
        .key_format(api_format())
        .build();
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let call = |key: &str, body: &str| {
        let event_path = api_event(dir.path(), key, body);
        let text = std::fs::read_to_string(&event_path).unwrap();
        let event: aws_lambda_events::apigw::ApiGatewayProxyRequest =
            serde_json::from_str(&text).unwrap();
        let idempotency = idempotency.clone();
        let ran = std::sync::Arc::clone(&ran);
        async move {
            idempotency
                .call(
                    lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default()),
                    |_event| async move {
                        ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        Ok::<_, sqs_claim::BoxError>(
                            json!({"statusCode": 200, "body": "from the layer"}),
                        )
                    },
                )
                .await
                .unwrap()
        }
    };

    // Powertools -> the layer: the stored response is replayed, the handler does not run.
    let body = r#"{"cents": 500, "to": "acct-1"}"#;
    let first = apigw(
        store.table(),
        &api_event(dir.path(), "L-1", body),
        &validation,
    );
    assert_eq!(first["ran"], true, "{first}");
    let replay = call("L-1", body).await;
    assert!(replay.is_replay());
    assert_eq!(replay.parse::<Value>().unwrap(), first["response"]);
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Same key, other body: the layer refuses it (Powertools' validation hash differs).
    let other = call("L-1", r#"{"cents": 900, "to": "acct-1"}"#).await;
    assert_eq!(
        other.parse::<Value>().unwrap()["statusCode"],
        422,
        "{}",
        other.json()
    );

    // The layer -> Powertools: its response, and its validation.
    let ours = call("L-2", body).await;
    assert!(!ours.is_replay());
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1);
    let dup = apigw(
        store.table(),
        &api_event(dir.path(), "L-2", body),
        &validation,
    );
    assert_eq!(dup["ran"], false, "{dup}");
    assert_eq!(
        dup["response"],
        json!({"statusCode": 200, "body": "from the layer"})
    );
    let mismatch = apigw(
        store.table(),
        &api_event(dir.path(), "L-2", r#"{"cents": 1}"#),
        &validation,
    );
    assert_eq!(
        mismatch["error"], "IdempotencyValidationError",
        "{mismatch}"
    );
}
