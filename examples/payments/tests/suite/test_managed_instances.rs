//! Lambda Managed Instances: with `AWS_LAMBDA_MAX_CONCURRENCY` the `consumer` binary serves
//! several invocations at once (`lambda_runtime::run_concurrent`), each answered with its own
//! batch response, under the fake Runtime API.

use crate::support;

use std::time::{Duration, Instant};

use consumer::{Consumer, TempDir};
use serde_json::{Value, json};
use sqs_claim_testkit::runtime::{FakeRuntime, Posted};
use support::consumer;

const WAIT: Duration = Duration::from_secs(30);

fn record(id: &str, body: &str) -> Value {
    json!({
        "messageId": id,
        "receiptHandle": format!("rh-{id}"),
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1700000000000",
            "AWSTraceHeader": producer_trace(id)
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments",
        "awsRegion": "us-east-1"
    })
}

/// The `AWSTraceHeader` SQS gives message `id`: its producer's trace.
fn producer_trace(id: &str) -> String {
    format!("Root=1-5759e988-{id};Parent=53995c3f42cd8ad8;Sampled=1")
}

/// The next post, failing with the consumer's logs if it exits or nothing comes within WAIT.
async fn next_post(rt: &mut FakeRuntime, consumer: &mut Consumer) -> (String, Value) {
    let started = Instant::now();
    loop {
        if let Some(posted) = rt.next_post(Duration::from_millis(100)).await {
            match posted {
                Posted::Response { request_id, body } => {
                    let body = serde_json::from_str(&body).expect("a JSON response");
                    return (request_id, body);
                }
                other => panic!("not a response: {other:?}\nlogs:\n{}", consumer.logs()),
            }
        }
        if let Some(status) = consumer.exited() {
            panic!("the consumer exited ({status})\nlogs:\n{}", consumer.logs());
        }
        assert!(
            started.elapsed() < WAIT,
            "no answer within {WAIT:?}\nlogs:\n{}",
            consumer.logs()
        );
    }
}

async fn wait_for_polling(rt: &FakeRuntime, consumer: &mut Consumer, n: usize) {
    let started = Instant::now();
    while rt.polling() != n {
        if let Some(status) = consumer.exited() {
            panic!("the consumer exited ({status})\nlogs:\n{}", consumer.logs());
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{} invocation(s) polled at once, expected {n}: not run_concurrent?\nlogs:\n{}",
            rt.polling(),
            consumer.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn with_max_concurrency_two_invocations_are_in_flight_at_once() {
    // The output queue accepts connections and never answers, so a batch with a valid payment
    // hangs in its publish (until the SQS client's 4 s operation timeout); a batch of bad bodies
    // answers at once. Sequential serving would answer the second only after the first.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_addr = silent.local_addr().expect("addr");
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let dir = TempDir::new("managed");
    let store = format!("sqlite:{}", dir.path().join("claims.db").display());
    let endpoint = format!("http://{silent_addr}");
    let queue_url = format!("{endpoint}/000000000000/notices");
    let mut rt = FakeRuntime::start().await.expect("fake runtime");
    let mut consumer = Consumer::start(
        dir.path(),
        "consumer",
        &rt.address(),
        [
            ("AWS_LAMBDA_MAX_CONCURRENCY", "2"),
            ("SQS_CLAIM_STORE", store.as_str()),
            ("SQS_CLAIM_OUTPUT_QUEUE_URL", queue_url.as_str()),
            ("AWS_ENDPOINT_URL_SQS", endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    // Two workers, each waiting for an invocation: `run` never polls twice at once.
    wait_for_polling(&rt, &mut consumer, 2).await;

    let slow = json!({"Records": [
        record("slow-1", r#"{"order_id": "o-1", "account": "alice", "amount_cents": 100}"#),
    ]});
    let fast = json!({"Records": [
        record("fast-1", "not json"),
        record("fast-2", r#"{"order_id": "o-2"}"#),
    ]});
    // Each invocation with its own X-Ray trace, as Lambda hands them out.
    let (trace_a, trace_b) = (
        "Root=1-aaaaaaaa-000000000000000000000001;Sampled=1",
        "Root=1-bbbbbbbb-000000000000000000000002;Sampled=1",
    );
    let a = rt.queue_traced(slow.to_string(), Duration::from_secs(30), trace_a);
    // The first worker took it (and hangs in its publish); the second still waits.
    wait_for_polling(&rt, &mut consumer, 1).await;
    let b = rt.queue_traced(fast.to_string(), Duration::from_secs(30), trace_b);

    let (first, first_body) = next_post(&mut rt, &mut consumer).await;
    assert_eq!(
        first, b,
        "the second invocation must be answered while the first is still in flight"
    );
    assert_eq!(
        first_body,
        json!({"batchItemFailures": [{"itemIdentifier": "fast-1"}, {"itemIdentifier": "fast-2"}]})
    );
    let (second, second_body) = next_post(&mut rt, &mut consumer).await;
    assert_eq!(second, a);
    assert_eq!(
        second_body,
        json!({"batchItemFailures": [{"itemIdentifier": "slow-1"}]}),
        "the publish never answered: the credit is not completed, the message is retried"
    );
    // Both workers are back, waiting.
    wait_for_polling(&rt, &mut consumer, 2).await;
    hold.abort();

    // Trace context, from the logs: each message's failure line carries its own invocation's
    // X-Ray trace (the batch span's `xray_trace_id`), although the two ran at once, and its
    // producer's (the message span's `trace_header`).
    consumer.kill();
    let logs = consumer.logs();
    for (id, trace) in [
        ("slow-1", trace_a),
        ("fast-1", trace_b),
        ("fast-2", trace_b),
    ] {
        let line: Value = logs
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l["message"] == "message failed" && l["message_id"] == id)
            .unwrap_or_else(|| panic!("no failure line for {id}:\n{logs}"));
        assert_eq!(line["xray_trace_id"], trace, "{id}: {line}");
        assert_eq!(line["trace_header"], producer_trace(id), "{id}: {line}");
    }
}
