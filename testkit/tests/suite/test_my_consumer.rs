//! A user's own consumer, tested with the kit: what a team adopting `sqs-claim` writes.
//!
//! The consumer credits orders to accounts. It is built with `sqs_claim::Processor` on a
//! `MemoryStore` (a deployed one would use `DynamoDbStore`), keyed by the body's `order_id`,
//! and refuses a negative amount. The tests drive it with the kit's event builders and read the
//! partial batch response Lambda would get:
//!
//! * a standard batch with a duplicate order and a bad message: the bad one alone is reported,
//!   the duplicate credits nothing, and a redelivery of the batch credits nothing again;
//! * a FIFO batch: after a failure, the rest of that message group is reported (so SQS
//!   redelivers it in order), other groups go on;
//! * the same consumer as a Lambda function under the kit's fake Runtime API: this test binary
//!   runs itself as the function's process (see [`lambda_function`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqs_claim::{BoxError, KeySource, MemoryStore, Message, Processor};
use sqs_claim_testkit::runtime::{FakeRuntime, LambdaCommand, Posted};
use sqs_claim_testkit::sqs::{self, fifo, record};

// ------------------------------------------------------------------------------ the consumer

#[derive(serde::Deserialize)]
struct Order {
    order_id: String,
    account: String,
    amount_cents: i64,
}

/// Balances by account: the consumer's side effect.
type Ledger = Arc<Mutex<BTreeMap<String, i64>>>;

/// The consumer: one claim per `order_id`, then a credit.
fn consumer(
    ledger: &Ledger,
) -> Processor<
    MemoryStore,
    impl tower::Service<Message, Response = (), Error = BoxError, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static,
> {
    let ledger = Arc::clone(ledger);
    let handler = tower::service_fn(move |msg: Message| {
        let ledger = Arc::clone(&ledger);
        async move {
            let order: Order = msg.json()?;
            if order.amount_cents < 0 {
                return Err(format!("order {} has a negative amount", order.order_id).into());
            }
            *ledger
                .lock()
                .map_err(|_| "ledger lock poisoned")?
                .entry(order.account)
                .or_default() += order.amount_cents;
            Ok::<(), BoxError>(())
        }
    });
    Processor::builder(MemoryStore::new(), handler)
        .key(KeySource::JsonPointer("/order_id".into()))
        .namespace("orders")
        .build()
}

fn order(id: &str, account: &str, cents: i64) -> String {
    serde_json::json!({"order_id": id, "account": account, "amount_cents": cents}).to_string()
}

fn balances(ledger: &Ledger) -> Vec<(String, i64)> {
    let ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
    ledger.iter().map(|(a, b)| (a.clone(), *b)).collect()
}

// ------------------------------------------------------------------------------- the tests

#[tokio::test]
async fn a_duplicate_credits_once_and_only_the_bad_message_is_retried() {
    let ledger = Ledger::default();
    let processor = consumer(&ledger);
    let batch = [
        record("m-1", &order("o-1", "alice", 1000)),
        record("m-2", &order("o-2", "bob", 250)),
        // The same order sent twice (another message id): one credit.
        record("m-3", &order("o-1", "alice", 1000)),
        record("m-4", &order("o-3", "alice", -5)),
    ];

    let report = processor
        .process(sqs::lambda_event(&batch))
        .await
        .expect("the batch runs");
    assert_eq!(sqs::failed_ids(&report.response()), ["m-4"]);
    let credited = vec![("alice".to_owned(), 1000), ("bob".to_owned(), 250)];
    assert_eq!(balances(&ledger), credited);

    // Lambda redelivers what was not deleted, and SQS may deliver the rest again: every
    // message on its second receive. The credited ones are duplicates now.
    let redelivery: Vec<_> = batch.iter().map(|r| r.clone().receive_count(2)).collect();
    let report = processor
        .process(sqs::lambda_event(&redelivery))
        .await
        .expect("the batch runs");
    assert_eq!(sqs::failed_ids(&report.response()), ["m-4"]);
    assert_eq!(balances(&ledger), credited, "a redelivery credits nothing");
}

#[tokio::test]
async fn a_fifo_failure_holds_back_the_rest_of_its_group_only() {
    let ledger = Ledger::default();
    let processor = consumer(&ledger);
    let batch = [
        fifo("a-1", "alice", &order("o-1", "alice", 100)),
        fifo("a-2", "alice", &order("o-2", "alice", -1)),
        fifo("a-3", "alice", &order("o-3", "alice", 100)),
        fifo("b-1", "bob", &order("o-4", "bob", 7)),
    ];

    let report = processor
        .process(sqs::lambda_event(&batch))
        .await
        .expect("the batch runs");
    // a-3 did not run: reporting it keeps alice's order when SQS redelivers a-2 first.
    assert_eq!(sqs::failed_ids(&report.response()), ["a-2", "a-3"]);
    assert_eq!(
        balances(&ledger),
        [("alice".to_owned(), 100), ("bob".to_owned(), 7)]
    );
}

// ------------------------------------------------------------ under the fake Runtime API

/// Set in the environment of this test binary when it runs as the Lambda function.
const AS_FUNCTION: &str = "MY_CONSUMER_AS_LAMBDA_FUNCTION";

/// The function's `main`, as a user's binary has it: `sqs_claim::lambda::run(processor)`.
///
/// A user's test runs their real binary (`env!("CARGO_BIN_EXE_<name>")`); this crate has none,
/// so the test runs this test binary again, filtered to this one test, with [`AS_FUNCTION`]
/// set: then this function serves invocations until the test kills it. Run alone (without
/// [`AS_FUNCTION`]), it does nothing.
#[test]
fn lambda_function() {
    if std::env::var_os(AS_FUNCTION).is_none() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let ledger = Ledger::default();
    let code = runtime.block_on(sqs_claim::lambda::run(consumer(&ledger)));
    // Only reached if the runtime loop gives up (the fake went away).
    eprintln!("lambda::run returned {code:?}");
}

#[tokio::test]
async fn the_consumer_answers_lambda_with_a_partial_batch_response() {
    let mut runtime = FakeRuntime::start().await.expect("the fake Runtime API");
    let this_test_binary = std::env::current_exe().expect("the test binary");
    // The function's test name in this binary: its module path without the crate's name
    // (`lambda_function` alone when this file is a test crate of its own).
    let function_test = module_path!()
        .split_once("::")
        .map_or("lambda_function".to_owned(), |(_, m)| {
            format!("{m}::lambda_function")
        });
    let mut function = LambdaCommand::new(this_test_binary)
        .args([
            function_test.as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(AS_FUNCTION, "1")
        .start(&runtime.address())
        .expect("start the function");

    let event = sqs::event_json(&[
        record("m-1", &order("o-1", "alice", 1000)),
        record("m-2", "not JSON"),
    ]);
    let request_id = runtime.queue(event.to_string(), Duration::from_secs(30));
    let posted = runtime.next_post(Duration::from_secs(60)).await;
    let Some(Posted::Response {
        request_id: answered,
        body,
    }) = posted
    else {
        panic!("{posted:?}\nthe function's logs:\n{}", function.tail());
    };
    assert_eq!(answered, request_id);
    let response: serde_json::Value = serde_json::from_str(&body).expect("a JSON response");
    assert_eq!(
        response,
        serde_json::json!({"batchItemFailures": [{"itemIdentifier": "m-2"}]})
    );
    assert!(function.exited().is_none(), "the function keeps polling");
    function.kill();
}
