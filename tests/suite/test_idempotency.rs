//! The idempotency layer, in-process: replay byte for byte, the refusals (409, 422, 400 and
//! their errors), what a failing, panicking, overlong or stale handler leaves behind, effects
//! atomic with the completion, and the deadline. Memory store and paused time; the replay once
//! more on SQLite.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use aws_lambda_events::apigw::{ApiGatewayProxyRequest, ApiGatewayV2httpRequest};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use sqs_claim::idempotency::{HttpAnswers, Idempotency, IdempotentResponse, WithEffects, key};
use sqs_claim::store::MemoryEffect;
use sqs_claim::store::StoreAdmin;
use sqs_claim::store::{Claim, ClaimRequest, ClaimStore, Completion, Status};
use sqs_claim::{
    BoxError, Clock, Effects, Error, ErrorKind, Lease, MemoryStore, MissingKey, PayloadCheck,
};
use sqs_claim_testkit::store::{Action, Method, Spy};
use tokio::sync::Notify;
use tower::{Layer, ServiceExt};

// ---------------------------------------------------------------------------------------------
// Events and helpers

/// A context whose deadline is `budget` from now (tests whose time moves use
/// [`deadline_on`] with the layer's own clock).
fn deadline_in(budget: Duration) -> Context {
    deadline_on(&Clock::tokio(), budget)
}

fn deadline_on(clock: &Clock, budget: Duration) -> Context {
    let mut context = Context::default();
    let deadline = clock.now() + budget;
    context.deadline = sqs_claim::store::epoch_millis(deadline) as u64;
    context
}

/// An HTTP API v2 `POST /payments`, with an `Idempotency-Key` header unless `key` is `None`.
fn v2(key: Option<&str>, body: &str) -> ApiGatewayV2httpRequest {
    let mut headers = serde_json::Map::new();
    headers.insert("content-type".into(), json!("application/json"));
    if let Some(key) = key {
        // Sent in mixed case, as a client would.
        headers.insert("Idempotency-Key".into(), json!(key));
    }
    serde_json::from_value(json!({
        "version": "2.0",
        "routeKey": "POST /payments",
        "rawPath": "/payments",
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api",
            "domainName": "api.example.com",
            "http": {"method": "POST", "path": "/payments", "protocol": "HTTP/1.1",
                     "sourceIp": "192.0.2.1", "userAgent": "test"},
            "requestId": "r",
            "routeKey": "POST /payments",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": 1767225600000u64
        },
        "body": body,
        "isBase64Encoded": false
    }))
    .expect("a v2 event")
}

fn http_event(
    key: Option<&str>,
    body: &str,
    context: Context,
) -> LambdaEvent<ApiGatewayV2httpRequest> {
    LambdaEvent::new(v2(key, body), context)
}

fn kind(e: &BoxError) -> Option<ErrorKind> {
    e.downcast_ref::<Error>().map(Error::kind)
}

fn status_of(response: &IdempotentResponse) -> u64 {
    response.parse::<Value>().unwrap()["statusCode"]
        .as_u64()
        .expect("an HTTP response")
}

/// A handler for `POST /payments` that counts its runs and answers 201 with the payment.
fn counting(
    runs: &Arc<AtomicUsize>,
) -> impl Fn(LambdaEvent<ApiGatewayV2httpRequest>) -> futures::future::Ready<Result<Value, BoxError>>
+ Clone
+ Send
+ use<> {
    let runs = Arc::clone(runs);
    move |event| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        let body: Value = serde_json::from_str(event.payload.body.as_deref().unwrap_or("null"))
            .unwrap_or(Value::Null);
        futures::future::ready(Ok(json!({
            "statusCode": 201,
            "headers": {"content-type": "application/json"},
            "body": json!({"payment": format!("pay_{n}"), "amount": body["amount"]}).to_string(),
        })))
    }
}

fn payments(store: MemoryStore) -> Idempotency<MemoryStore, key::Header> {
    Idempotency::builder(store, key::header("Idempotency-Key"))
        .namespace("payments")
        .clock(Clock::tokio())
        .build()
}

/// Switches that make [`test_store`] hang its claims or its completions.
#[derive(Default)]
struct Hang {
    claim: std::sync::atomic::AtomicBool,
    complete: std::sync::atomic::AtomicBool,
}

/// A [`MemoryStore`] that hangs claims or completions while `hang` says so, and says it keeps
/// responses up to `limit` bytes (the memory store's own limit if `None`); for the rest it
/// says what the trait's default says of a store.
fn test_store(hang: &Arc<Hang>, limit: Option<usize>) -> Spy<MemoryStore> {
    let hang = Arc::clone(hang);
    Spy::new(MemoryStore::new())
        .on_call(move |call| {
            let flag = match call.method() {
                Method::Claim => &hang.claim,
                Method::Complete => &hang.complete,
                _ => return Action::Forward,
            };
            if flag.load(Ordering::SeqCst) {
                Action::Hang
            } else {
                Action::Forward
            }
        })
        .map_capabilities(move |inner| {
            let mut caps = sqs_claim::store::Capabilities::new();
            caps.max_response_bytes = limit.unwrap_or(inner.max_response_bytes);
            caps
        })
}

async fn stored_response(store: &impl StoreAdmin, key: &str) -> Option<String> {
    store
        .inspect(key)
        .await
        .unwrap()
        .and_then(|i| i.record.response)
        .map(|r| r.into_string())
}

// ---------------------------------------------------------------------------------------------
// Replay

/// A response whose text depends on how it is serialised: members in declaration order (not
/// sorted), a raw fragment with its own spacing, digits of a float.
#[derive(serde::Serialize)]
struct Receipt {
    zulu: &'static str,
    alpha: f64,
    raw: Box<serde_json::value::RawValue>,
    run: usize,
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_gets_the_first_response_byte_for_byte() {
    let store = MemoryStore::new();
    let idempotency = Idempotency::builder(store.clone(), key::json_pointer("/order"))
        .namespace("orders")
        .clock(Clock::tokio())
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let handler = |_event: LambdaEvent<Value>| {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            Ok::<_, BoxError>(Receipt {
                zulu: "last letter first",
                alpha: 0.1 + 0.2,
                raw: serde_json::value::RawValue::from_string("{ \"b\" :1,  \"a\":2 }".into())
                    .unwrap(),
                run,
            })
        }
    };
    let event = || {
        LambdaEvent::new(
            json!({"order": "o-1", "cents": 5}),
            deadline_in(Duration::from_secs(30)),
        )
    };

    let first = idempotency.call(event(), handler).await.unwrap();
    assert!(!first.is_replay());
    assert_eq!(
        first.json(),
        r#"{"zulu":"last letter first","alpha":0.30000000000000004,"raw":{ "b" :1,  "a":2 },"run":1}"#
    );
    assert_eq!(
        stored_response(&store, "orders#o-1").await.as_deref(),
        Some(first.json()),
        "the store keeps the bytes the first caller got"
    );
    for _ in 0..2 {
        let again = idempotency.call(event(), handler).await.unwrap();
        assert!(again.is_replay());
        assert_eq!(again.json(), first.json());
        // What lambda_runtime sends: the response serialised through serde_json.
        assert_eq!(
            serde_json::to_vec(&again).unwrap(),
            serde_json::to_vec(&first).unwrap()
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
}

#[tokio::test(start_paused = true)]
async fn the_layer_serves_an_api_gateway_event_twice_with_one_charge() {
    let store = MemoryStore::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let service = payments(store.clone())
        .layer()
        .layer(tower::service_fn(counting(&runs)));
    let body = r#"{"amount": 1250, "currency": "eur"}"#;
    let first = service
        .clone()
        .oneshot(http_event(
            Some("k-1"),
            body,
            deadline_in(Duration::from_secs(30)),
        ))
        .await
        .unwrap();
    // Served from a spawned task, as lambda_runtime serves: the service's future is Send.
    let second = tokio::spawn(service.clone().oneshot(http_event(
        Some("k-1"),
        body,
        deadline_in(Duration::from_secs(30)),
    )))
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status_of(&first), 201);
    assert_eq!(second.json(), first.json());
    assert!(second.is_replay());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // A REST API (payload format 1.0) event keys on the same header.
    let rest: ApiGatewayProxyRequest = serde_json::from_value(json!({
        "resource": "/payments", "path": "/payments", "httpMethod": "POST",
        "headers": {"IDEMPOTENCY-KEY": "k-1"}, "multiValueHeaders": {},
        "requestContext": {"httpMethod": "POST", "resourcePath": "/payments"},
        "body": body, "isBase64Encoded": false
    }))
    .unwrap();
    let rest_service = payments(store.clone()).service(tower::service_fn(
        |_: LambdaEvent<ApiGatewayProxyRequest>| async {
            Ok::<_, BoxError>(json!({"statusCode": 500}))
        },
    ));
    let replayed = rest_service
        .oneshot(LambdaEvent::new(rest, deadline_in(Duration::from_secs(30))))
        .await
        .unwrap();
    assert_eq!(
        replayed.json(),
        first.json(),
        "same key, same body: the same record"
    );
}

/// A user's handler on [`ApiGatewayRequest`] (either payload format) that logs the request's
/// method, path and whether its body came base64-encoded: the accessors it calls are public
/// (they were crate-private for a while, which broke such a handler), and answer for both.
#[tokio::test(start_paused = true)]
async fn a_user_handler_logs_the_method_path_and_encoding_of_either_format() {
    use sqs_claim::idempotency::ApiGatewayRequest;

    async fn handler(event: LambdaEvent<ApiGatewayRequest>) -> Result<Value, BoxError> {
        let request = &event.payload;
        let (method, path, base64) = (
            request.method(),
            request.path().unwrap_or("/"),
            request.is_base64_encoded(),
        );
        tracing::info!(method, path, base64, "request");
        Ok(json!({"statusCode": 200, "body": format!("{method} {path} {base64}")}))
    }

    let http: ApiGatewayRequest = serde_json::from_value(json!({
        "version": "2.0", "rawPath": "/payments/7", "rawQueryString": "",
        "headers": {"idempotency-key": "k-http"},
        "requestContext": {"http": {"method": "PUT", "path": "/payments/7"}},
        "body": "e30=", "isBase64Encoded": true
    }))
    .unwrap();
    let rest: ApiGatewayRequest = serde_json::from_value(json!({
        "resource": "/payments", "path": "/payments", "httpMethod": "POST",
        "headers": {"Idempotency-Key": "k-rest"}, "multiValueHeaders": {},
        "requestContext": {"httpMethod": "POST"}, "body": "{}", "isBase64Encoded": false
    }))
    .unwrap();
    let service = payments(MemoryStore::new()).service(tower::service_fn(handler));
    for (request, want) in [
        (http, "PUT /payments/7 true"),
        (rest, "POST /payments false"),
    ] {
        let answer = service
            .clone()
            .oneshot(LambdaEvent::new(
                request,
                deadline_in(Duration::from_secs(30)),
            ))
            .await
            .unwrap();
        assert_eq!(answer.parse::<Value>().unwrap()["body"], want);
    }
}

// ---------------------------------------------------------------------------------------------
// Refusals

#[tokio::test(start_paused = true)]
async fn a_request_in_progress_elsewhere_gets_409_with_retry_after() {
    let store = MemoryStore::new();
    let idempotency = payments(store.clone());
    let release = Arc::new(Notify::new());
    let first = {
        let (idempotency, release) = (idempotency.clone(), Arc::clone(&release));
        tokio::spawn(async move {
            idempotency
                .call(
                    http_event(Some("k-2"), "{}", deadline_in(Duration::from_secs(30))),
                    |_| async move {
                        release.notified().await;
                        Ok::<_, BoxError>(json!({"statusCode": 201, "body": "done"}))
                    },
                )
                .await
        })
    };
    while store.status("payments#k-2") != Some(Status::InProgress) {
        tokio::task::yield_now().await;
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let busy = idempotency
        .call(
            http_event(Some("k-2"), "{}", deadline_in(Duration::from_secs(10))),
            counting(&runs),
        )
        .await
        .unwrap();
    let answer: Value = busy.parse().unwrap();
    assert_eq!(answer["statusCode"], 409);
    // The first claim's lease lapses a quarter of its 30 s from now (7.5 s, rounded up), unless
    // its owner extends it meanwhile.
    assert_eq!(answer["headers"]["retry-after"], "8");
    let message: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert!(message["message"].as_str().unwrap().contains("in progress"));
    assert!(!busy.is_replay());
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    release.notify_one();
    let done = first.await.unwrap().unwrap();
    let replay = idempotency
        .call(
            http_event(Some("k-2"), "{}", deadline_in(Duration::from_secs(30))),
            counting(&runs),
        )
        .await
        .unwrap();
    assert_eq!(replay.json(), done.json());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A key reused on another route with the same body (`/accounts/A/withdraw`, then
/// `/accounts/B/withdraw`) is another request: 422, never A's response for B.
#[tokio::test(start_paused = true)]
async fn the_same_key_and_body_on_another_route_gets_422() {
    let store = MemoryStore::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let service = payments(store)
        .layer()
        .layer(tower::service_fn(counting(&runs)));
    let body = r#"{"amount": 100, "currency": "eur"}"#;
    let on = |path: &str, query: &str| {
        let mut event = v2(Some("k-route"), body);
        event.raw_path = Some(path.to_owned());
        event.raw_query_string = Some(query.to_owned());
        event.query_string_parameters = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), vec![v.to_owned()])
            })
            .collect::<std::collections::HashMap<_, _>>()
            .into();
        LambdaEvent::new(event, deadline_in(Duration::from_secs(30)))
    };
    let first = service
        .clone()
        .oneshot(on("/accounts/A/withdraw", ""))
        .await
        .unwrap();
    assert_eq!(status_of(&first), 201);
    let again = service
        .clone()
        .oneshot(on("/accounts/A/withdraw", ""))
        .await
        .unwrap();
    assert!(again.is_replay(), "the same route is a duplicate");
    let other = service
        .clone()
        .oneshot(on("/accounts/B/withdraw", ""))
        .await
        .unwrap();
    assert_eq!(status_of(&other), 422, "another path");
    let query = service
        .clone()
        .oneshot(on("/accounts/A/withdraw", "dry_run=true"))
        .await
        .unwrap();
    assert_eq!(status_of(&query), 422, "another query");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn the_same_key_with_another_request_gets_422_and_does_not_run() {
    let store = MemoryStore::new();
    let idempotency = payments(store);
    let runs = Arc::new(AtomicUsize::new(0));
    let ctx = || deadline_in(Duration::from_secs(30));
    let first = idempotency
        .call(
            http_event(Some("k-3"), r#"{"amount": 100}"#, ctx()),
            counting(&runs),
        )
        .await
        .unwrap();
    assert_eq!(status_of(&first), 201);
    // The same JSON spelled differently is the same request.
    let same = idempotency
        .call(
            http_event(Some("k-3"), r#"{ "amount" : 100 }"#, ctx()),
            counting(&runs),
        )
        .await
        .unwrap();
    assert_eq!(same.json(), first.json());
    let other = idempotency
        .call(
            http_event(Some("k-3"), r#"{"amount": 999}"#, ctx()),
            counting(&runs),
        )
        .await
        .unwrap();
    assert_eq!(status_of(&other), 422);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Not an HTTP event: an error of the refusal's kind.
    let values = Idempotency::builder(MemoryStore::new(), key::json_pointer("/id"))
        .clock(Clock::tokio())
        .build();
    let ok = |_: LambdaEvent<Value>| async { Ok::<_, BoxError>(json!("ok")) };
    values
        .call(LambdaEvent::new(json!({"id": 1, "n": 1}), ctx()), ok)
        .await
        .unwrap();
    let err = values
        .call(LambdaEvent::new(json!({"id": 1, "n": 2}), ctx()), ok)
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::PayloadMismatch));
    // With the check off, it is a replay.
    let unchecked = Idempotency::builder(MemoryStore::new(), key::json_pointer("/id"))
        .payload_check(PayloadCheck::Off)
        .build();
    unchecked
        .call(LambdaEvent::new(json!({"id": 1, "n": 1}), ctx()), ok)
        .await
        .unwrap();
    let replay = unchecked
        .call(LambdaEvent::new(json!({"id": 1, "n": 2}), ctx()), ok)
        .await
        .unwrap();
    assert!(replay.is_replay());
}

#[tokio::test(start_paused = true)]
async fn a_missing_key_gets_400_or_an_error_or_runs_unprotected_when_asked() {
    let runs = Arc::new(AtomicUsize::new(0));
    let store = MemoryStore::new();
    let ctx = || deadline_in(Duration::from_secs(30));
    let answer = payments(store.clone())
        .call(http_event(None, "{}", ctx()), counting(&runs))
        .await
        .unwrap();
    let answer: Value = answer.parse().unwrap();
    assert_eq!(answer["statusCode"], 400);
    assert!(answer["body"].as_str().unwrap().contains("Idempotency-Key"));
    // A blank header is no key either.
    let blank = payments(store.clone())
        .call(http_event(Some("  "), "{}", ctx()), counting(&runs))
        .await
        .unwrap();
    assert_eq!(status_of(&blank), 400);
    // Another status, if the API says so.
    let custom = Idempotency::builder(store.clone(), key::header("Idempotency-Key"))
        .answers(HttpAnswers::new().with_status(ErrorKind::MissingKey, 428))
        .build()
        .call(http_event(None, "{}", ctx()), counting(&runs))
        .await
        .unwrap();
    assert_eq!(status_of(&custom), 428);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(store.is_empty());

    let values = Idempotency::new(MemoryStore::new(), key::json_pointer("/id"));
    let err = values
        .call(LambdaEvent::new(json!({"no_id": 1}), ctx()), |_| async {
            Ok::<_, BoxError>(json!(1))
        })
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::MissingKey));

    let unprotected = Idempotency::builder(MemoryStore::new(), key::header("Idempotency-Key"))
        .missing_key(MissingKey::ProcessWithoutDedup)
        .build();
    for _ in 0..2 {
        let ran = unprotected
            .call(http_event(None, "{}", ctx()), counting(&runs))
            .await
            .unwrap();
        assert_eq!(status_of(&ran), 201);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2, "no key, no deduplication");
    assert!(unprotected.store().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_record_without_a_stored_response_is_not_replayed() {
    let store = MemoryStore::new();
    // Completed as the SQS processor completes: no response.
    let now = Clock::tokio().now();
    let Claim::Acquired(token) = store
        .claim(ClaimRequest {
            key: "payments#k-sqs",
            now,
            lease_until: now + Duration::from_secs(30),
            expires_at: now + Duration::from_secs(3600),
            fingerprint: None,
        })
        .await
        .unwrap()
    else {
        panic!("not acquired");
    };
    store
        .complete_with(
            "payments#k-sqs",
            &token,
            Completion::new(now + Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let err = payments(store)
        .call(
            http_event(Some("k-sqs"), "{}", deadline_in(Duration::from_secs(30))),
            counting(&runs),
        )
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::NotReplayable));
    assert!(err.to_string().contains("nothing to replay"), "{err}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------------------------
// What a failing handler leaves behind

#[tokio::test(start_paused = true)]
async fn a_handler_error_releases_the_claim_so_a_retry_runs() {
    let store = MemoryStore::new();
    let idempotency = payments(store.clone());
    let ctx = || deadline_in(Duration::from_secs(30));
    let err = idempotency
        .call(http_event(Some("k-4"), "{}", ctx()), |_| async {
            Err::<Value, BoxError>("card declined".into())
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "card declined",
        "the handler's own error, as it is"
    );
    assert_eq!(store.status("payments#k-4"), None, "released");
    let runs = Arc::new(AtomicUsize::new(0));
    let retry = idempotency
        .call(http_event(Some("k-4"), "{}", ctx()), counting(&runs))
        .await
        .unwrap();
    assert_eq!(status_of(&retry), 201);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_releases_the_claim_and_answers_an_error() {
    let store = MemoryStore::new();
    let idempotency = payments(store.clone());
    let ctx = || deadline_in(Duration::from_secs(30));
    let err = idempotency
        .call(http_event(Some("k-5"), "{}", ctx()), |_| async {
            if true {
                panic!("provider client bug");
            }
            Ok::<Value, BoxError>(json!(null))
        })
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::Panicked));
    assert!(err.to_string().contains("provider client bug"), "{err}");
    assert_eq!(store.status("payments#k-5"), None, "released");
    let runs = Arc::new(AtomicUsize::new(0));
    idempotency
        .call(http_event(Some("k-5"), "{}", ctx()), counting(&runs))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the retry ran");
}

#[tokio::test(start_paused = true)]
async fn a_response_over_the_store_limit_is_refused_with_nothing_committed() {
    let store = test_store(&Arc::default(), Some(64));
    let idempotency = Idempotency::builder(store.clone(), key::json_pointer("/id"))
        .namespace("big")
        .clock(Clock::tokio())
        .build();
    let applied = Arc::new(AtomicUsize::new(0));
    let effect = {
        let applied = Arc::clone(&applied);
        move || {
            let applied = Arc::clone(&applied);
            MemoryEffect::new(move || {
                applied.fetch_add(1, Ordering::SeqCst);
            })
        }
    };
    let ctx = || deadline_in(Duration::from_secs(30));
    let event = || LambdaEvent::new(json!({"id": "r-1"}), ctx());
    let err = idempotency
        .call(event(), |_| {
            let effect = effect();
            async move {
                Ok::<_, BoxError>(WithEffects::new("x".repeat(100), Effects::one(effect)))
            }
        })
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::ResponseTooLarge));
    assert!(
        err.to_string()
            .contains("over this store's limit of 64 bytes"),
        "{err}"
    );
    assert_eq!(applied.load(Ordering::SeqCst), 0, "no effect committed");
    assert!(
        store.get_ref().inspect("big#r-1").await.unwrap().is_none(),
        "claim released"
    );
    // A smaller answer to the retry goes through, once.
    let ok = idempotency
        .call(event(), |_| {
            let effect = effect();
            async move { Ok::<_, BoxError>(WithEffects::new("small", Effects::one(effect))) }
        })
        .await
        .unwrap();
    assert_eq!(ok.json(), r#""small""#);
    assert_eq!(applied.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// Effects and fencing

#[tokio::test(start_paused = true)]
async fn effects_commit_with_the_completion_once_and_a_refused_effect_commits_nothing() {
    let store = MemoryStore::new();
    let idempotency = Idempotency::builder(store.clone(), key::json_pointer("/id"))
        .namespace("ledger")
        .clock(Clock::tokio())
        .build();
    let balance = Arc::new(AtomicUsize::new(0));
    let credit = |balance: &Arc<AtomicUsize>, cents: usize| {
        let balance = Arc::clone(balance);
        move |event: LambdaEvent<Value>| {
            let balance = Arc::clone(&balance);
            async move {
                let effect = MemoryEffect::new(move || {
                    balance.fetch_add(cents, Ordering::SeqCst);
                });
                Ok::<_, BoxError>(WithEffects::new(
                    json!({"credited": event.payload["id"]}),
                    Effects::one(effect),
                ))
            }
        }
    };
    let ctx = || deadline_in(Duration::from_secs(30));
    for _ in 0..3 {
        idempotency
            .call(
                LambdaEvent::new(json!({"id": "c-1"}), ctx()),
                credit(&balance, 500),
            )
            .await
            .unwrap();
    }
    assert_eq!(
        balance.load(Ordering::SeqCst),
        500,
        "applied once, with the completion"
    );

    // A refused effect: nothing committed, the claim released, the error says so.
    let refused = |_: LambdaEvent<Value>| async {
        Ok::<_, BoxError>(WithEffects::new(
            json!("never"),
            Effects::one(MemoryEffect::conditional(
                || Err("insufficient funds".into()),
                || {},
            )),
        ))
    };
    let err = idempotency
        .call(LambdaEvent::new(json!({"id": "c-2"}), ctx()), refused)
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::EffectRejected));
    assert_eq!(store.status("ledger#c-2"), None, "released");
    idempotency
        .call(
            LambdaEvent::new(json!({"id": "c-2"}), ctx()),
            credit(&balance, 7),
        )
        .await
        .unwrap();
    assert_eq!(balance.load(Ordering::SeqCst), 507);
}

#[tokio::test(start_paused = true)]
async fn a_stale_claimant_cannot_complete_after_its_lease_was_taken_over() {
    let store = MemoryStore::new();
    // No deadline in the context (a local run): the lease is the 10 s fallback.
    let idempotency = Idempotency::builder(store.clone(), key::json_pointer("/id"))
        .namespace("fenced")
        .lease_policy(Lease::until_deadline(Duration::from_secs(10)))
        .clock(Clock::tokio())
        .build();
    let applied = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(Notify::new());
    let stale = {
        let (idempotency, applied, go) =
            (idempotency.clone(), Arc::clone(&applied), Arc::clone(&go));
        tokio::spawn(async move {
            idempotency
                .call(
                    LambdaEvent::new(json!({"id": "f-1"}), Context::default()),
                    move |_| async move {
                        go.notified().await;
                        Ok::<_, BoxError>(WithEffects::new(
                            json!({"by": "stale"}),
                            Effects::one(MemoryEffect::new(move || {
                                applied.fetch_add(1, Ordering::SeqCst);
                            })),
                        ))
                    },
                )
                .await
        })
    };
    while store.status("fenced#f-1") != Some(Status::InProgress) {
        tokio::task::yield_now().await;
    }
    tokio::time::advance(Duration::from_secs(11)).await;
    // The lease lapsed: a second invocation takes the key over and completes it.
    let applied2 = Arc::clone(&applied);
    let fresh = idempotency
        .call(
            LambdaEvent::new(json!({"id": "f-1"}), Context::default()),
            move |_| async move {
                Ok::<_, BoxError>(WithEffects::new(
                    json!({"by": "fresh"}),
                    Effects::one(MemoryEffect::new(move || {
                        applied2.fetch_add(1, Ordering::SeqCst);
                    })),
                ))
            },
        )
        .await
        .unwrap();
    assert_eq!(fresh.json(), r#"{"by":"fresh"}"#);
    go.notify_one();
    let err = stale.await.unwrap().unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::LostClaim));
    assert_eq!(
        applied.load(Ordering::SeqCst),
        1,
        "only the fresh claimant's effect"
    );
    let replay = idempotency
        .call(
            LambdaEvent::new(json!({"id": "f-1"}), Context::default()),
            |_| async { Ok::<_, BoxError>(json!({"by": "third"})) },
        )
        .await
        .unwrap();
    assert_eq!(
        replay.json(),
        r#"{"by":"fresh"}"#,
        "the fresh claimant's record stands"
    );
}

// ---------------------------------------------------------------------------------------------
// The deadline

#[tokio::test(start_paused = true)]
async fn a_hanging_store_or_handler_is_answered_before_the_deadline() {
    let hang = Arc::<Hang>::default();
    let store = test_store(&hang, None);
    let clock = Clock::tokio();
    let idempotency = Idempotency::builder(store.clone(), key::json_pointer("/id"))
        .namespace("slow")
        .answer_reserve(Duration::from_millis(200))
        .clock(clock.clone())
        .build();
    let ok = |_: LambdaEvent<Value>| async { Ok::<_, BoxError>(json!("ok")) };

    // A claim that never answers: cut off at deadline - reserve, nothing ran.
    hang.claim.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let err = idempotency
        .call(
            LambdaEvent::new(
                json!({"id": "h-1"}),
                deadline_on(&clock, Duration::from_secs(1)),
            ),
            ok,
        )
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::OutOfTime));
    assert_eq!(started.elapsed(), Duration::from_millis(800));
    hang.claim.store(false, Ordering::SeqCst);

    // A handler that never returns: cut off there too, and its claim is kept (it may have
    // reached an external service), so a retry meanwhile is refused as in progress.
    let started = tokio::time::Instant::now();
    let err = idempotency
        .call(
            LambdaEvent::new(
                json!({"id": "h-2"}),
                deadline_on(&clock, Duration::from_secs(1)),
            ),
            |_| async {
                std::future::pending::<()>().await;
                Ok::<_, BoxError>(json!("never"))
            },
        )
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::OutOfTime));
    assert_eq!(started.elapsed(), Duration::from_millis(800));
    assert_eq!(
        store.get_ref().status("slow#h-2"),
        Some(Status::InProgress),
        "claim kept"
    );
    let busy = idempotency
        .call(
            LambdaEvent::new(
                json!({"id": "h-2"}),
                deadline_on(&clock, Duration::from_secs(1)),
            ),
            ok,
        )
        .await
        .unwrap_err();
    assert_eq!(kind(&busy), Some(ErrorKind::InProgress));

    // A completion that never answers: without effects the response is still answered (the
    // side effect happened); with effects, an error, the claim kept.
    hang.complete.store(true, Ordering::SeqCst);
    let started = tokio::time::Instant::now();
    let answered = idempotency
        .call(
            LambdaEvent::new(
                json!({"id": "h-3"}),
                deadline_on(&clock, Duration::from_secs(1)),
            ),
            ok,
        )
        .await
        .unwrap();
    assert_eq!(answered.json(), r#""ok""#);
    assert_eq!(started.elapsed(), Duration::from_millis(800));
    let err = idempotency
        .call(
            LambdaEvent::new(
                json!({"id": "h-4"}),
                deadline_on(&clock, Duration::from_secs(1)),
            ),
            |_| async {
                Ok::<_, BoxError>(WithEffects::new(
                    json!("with effects"),
                    Effects::one(MemoryEffect::new(|| {})),
                ))
            },
        )
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::OutOfTime));
    assert_eq!(
        store.get_ref().status("slow#h-4"),
        Some(Status::InProgress),
        "claim kept"
    );

    // Past the deadline nothing starts.
    let err = idempotency
        .call(
            LambdaEvent::new(
                json!({"id": "h-5"}),
                deadline_on(&clock, Duration::from_millis(100)),
            ),
            ok,
        )
        .await
        .unwrap_err();
    assert_eq!(kind(&err), Some(ErrorKind::OutOfTime));
    assert_eq!(store.get_ref().status("slow#h-5"), None);
}

// ---------------------------------------------------------------------------------------------
// Keys

/// A payload with a `HashMap`: its members come out in another order for every instance.
#[derive(serde::Serialize)]
struct Tally {
    counts: std::collections::HashMap<String, i64>,
}

impl sqs_claim::idempotency::Payload for Tally {}

#[tokio::test(start_paused = true)]
async fn payload_hash_keys_identical_payloads_together_whatever_their_member_order() {
    let store = MemoryStore::new();
    let idempotency = Idempotency::builder(store.clone(), key::payload_hash())
        .namespace("h")
        .build();
    let runs = AtomicUsize::new(0);
    let handler = |event: LambdaEvent<Tally>| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, BoxError>(event.payload.counts.len()) }
    };
    let event = |pairs: &[(&str, i64)]| {
        LambdaEvent::new(
            Tally {
                counts: pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            },
            Context::default(),
        )
    };
    let many: Vec<(String, i64)> = (0..32).map(|i| (format!("k{i}"), i)).collect();
    let many: Vec<(&str, i64)> = many.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    idempotency.call(event(&many), handler).await.unwrap();
    for _ in 0..4 {
        let again = idempotency.call(event(&many), handler).await.unwrap();
        assert!(again.is_replay());
    }
    idempotency.call(event(&[("a", 1)]), handler).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(store.len(), 2);
}

impl sqs_claim::idempotency::Payload for Transfer {}

#[derive(serde::Serialize, serde::Deserialize)]
struct Transfer {
    transfer_id: String,
    cents: i64,
}

#[tokio::test(start_paused = true)]
async fn a_users_own_event_type_keys_on_a_pointer_into_its_payload() {
    let store = MemoryStore::new();
    let idempotency = Idempotency::builder(store.clone(), key::json_pointer("/transfer_id"))
        .namespace("transfers")
        .build();
    let event = || {
        LambdaEvent::new(
            Transfer {
                transfer_id: "t-9".into(),
                cents: 1,
            },
            Context::default(),
        )
    };
    let handler = |e: LambdaEvent<Transfer>| async move { Ok::<_, BoxError>(e.payload.cents) };
    idempotency.call(event(), handler).await.unwrap();
    assert!(
        idempotency
            .call(event(), handler)
            .await
            .unwrap()
            .is_replay()
    );
    assert_eq!(store.status("transfers#t-9"), Some(Status::Completed));
}

// ---------------------------------------------------------------------------------------------
// SQLite

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn on_sqlite_a_duplicate_gets_the_stored_response_and_effects_apply_once() {
    use sqs_claim::{SqlEffect, SqlValue, SqliteStore};

    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("claims.sqlite3")).unwrap();
    store
        .execute_batch("CREATE TABLE paid (id TEXT PRIMARY KEY, cents INTEGER NOT NULL)")
        .await
        .unwrap();
    let service = payments_on(store.clone()).service(tower::service_fn(
        |event: LambdaEvent<ApiGatewayV2httpRequest>| async move {
            let body: Value = serde_json::from_str(event.payload.body.as_deref().unwrap_or(""))?;
            let cents = body["amount"].as_i64().unwrap_or(0);
            Ok::<_, BoxError>(WithEffects::new(
                json!({"statusCode": 201, "body": json!({"paid": cents}).to_string()}),
                Effects::one(SqlEffect::new(
                    "INSERT INTO paid (id, cents) VALUES (?1, ?2)",
                    vec![SqlValue::Text("k-sql".into()), SqlValue::Integer(cents)],
                )),
            ))
        },
    ));
    let body = r#"{"amount": 4200}"#;
    let first = service
        .clone()
        .oneshot(http_event(
            Some("k-sql"),
            body,
            deadline_in(Duration::from_secs(30)),
        ))
        .await
        .unwrap();
    let second = service
        .clone()
        .oneshot(http_event(
            Some("k-sql"),
            body,
            deadline_in(Duration::from_secs(30)),
        ))
        .await
        .unwrap();
    assert_eq!(second.json(), first.json());
    assert!(second.is_replay());
    let other = service
        .oneshot(http_event(
            Some("k-sql"),
            r#"{"amount": 1}"#,
            deadline_in(Duration::from_secs(30)),
        ))
        .await
        .unwrap();
    assert_eq!(status_of(&other), 422);
    let rows = store
        .query("SELECT count(*) FROM paid", vec![])
        .await
        .unwrap();
    assert_eq!(rows[0][0], SqlValue::Integer(1), "the effect applied once");
}

#[cfg(feature = "sqlite")]
fn payments_on<St: ClaimStore>(store: St) -> Idempotency<St, key::Header> {
    Idempotency::builder(store, key::header("Idempotency-Key"))
        .namespace("payments")
        .build()
}

#[test]
fn http_answers_change_only_for_the_kinds_the_layer_refuses_with() {
    let default = HttpAnswers::new();
    assert_eq!(default.with_status(ErrorKind::Other, 418), default);
    assert_eq!(
        default.with_status(ErrorKind::StoreUnavailable, 418),
        default
    );
    assert_ne!(default.with_status(ErrorKind::MissingKey, 428), default);
    let _ = SystemTime::now();
}
