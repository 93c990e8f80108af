//! The `consumer` Lambda binary under the fake Runtime API (`sqs_claim_testkit::runtime`)
//! with its store behind the fault proxy (`sqs_claim_testkit::fault`), going dark **after**
//! start-up: DynamoDB Local, PostgreSQL, Redis, and the tiered store with its durable tier dark.
//!
//! Each test starts the consumer on the proxied store URL, serves one healthy invocation (the
//! consumer is warm, its connections open), then turns the proxy dark, before the next batch
//! and, in a second consumer at the same time, mid-batch (once half the batch's bytes reached
//! the store). The batch credits one account `2^i` cents for message `i`, so the balance says
//! exactly which messages were credited. Then:
//!
//! * the consumer posts a batch response (not an error) before the invocation's deadline;
//! * it names only messages of the batch, each once; dark from the start, it names them all;
//!   every message it does not name was credited (the balance, read around the proxy);
//! * healed, and once the leases lapsed, the batch is delivered again (then what is still
//!   reported, as SQS would) until nothing is reported: the balance is then exactly `2^n - 1`,
//!   every message credited once.
//!
//! A consumer that has not answered [`GRACE`] after the deadline is reported, killed and
//! replaced for the redeliveries (Lambda would have timed it out).
#![cfg(all(feature = "redis", feature = "postgres"))]

use crate::support;

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, SystemTime};

use consumer::{Consumer, TempDir};
use serde_json::{Value, json};
use sqs_claim_testkit::fault::{Fault, FaultProxy};
use sqs_claim_testkit::local as dynamodb_local;
use sqs_claim_testkit::runtime::{FakeRuntime, Posted};
use sqs_claim_testkit::sqs;
use support::{cli, consumer, servers};

/// Messages per batch (at most 62: the balance keeps one bit per message).
const BATCH: usize = 20;

/// Each invocation's deadline is this far from when it is queued.
const BUDGET: Duration = Duration::from_secs(3);

/// How long after its deadline an answer is still waited for, before the consumer is
/// reported, killed and replaced.
const GRACE: Duration = Duration::from_secs(3);

/// Redeliveries after the store heals, at most.
const ROUNDS: usize = 3;

/// The longest start-up and a healthy invocation may take.
const WAIT: Duration = Duration::from_secs(30);

/// One store the consumer can run on, reached directly (to initialize it and read balances)
/// and through a proxy (what the consumer gets).
struct Store {
    name: &'static str,
    direct: String,
    proxied: String,
    /// Environment for the consumer (on top of `SQS_CLAIM_STORE`).
    consumer_env: Vec<(String, String)>,
    /// Environment for the CLI on the direct URL.
    cli_env: Vec<(String, String)>,
    proxy: FaultProxy,
}

fn aws_env(endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

async fn proxy_for(url: &str) -> (FaultProxy, String) {
    FaultProxy::in_front_of(url)
        .await
        .unwrap_or_else(|e| panic!("a proxy in front of {url}: {e}"))
}

impl Store {
    async fn dynamodb() -> Store {
        let endpoint = dynamodb_local::dynamodb_endpoint();
        let (proxy, proxied_endpoint) = proxy_for(&endpoint).await;
        let url = format!("dynamodb:faults-{}", uuid::Uuid::new_v4().simple());
        Store {
            name: "dynamodb",
            direct: url.clone(),
            proxied: url,
            consumer_env: aws_env(&proxied_endpoint),
            cli_env: aws_env(&endpoint),
            proxy,
        }
    }

    /// The default claims table `sqs_claim_processed_events`, shared with other tests: each
    /// test has a namespace and an account of its own.
    async fn postgres() -> Store {
        let direct = servers::pg_url();
        let (proxy, proxied) = proxy_for(&direct).await;
        Store {
            name: "postgres",
            direct,
            proxied,
            consumer_env: Vec::new(),
            cli_env: Vec::new(),
            proxy,
        }
    }

    async fn redis() -> Store {
        let direct = servers::redis_url();
        let (proxy, proxied) = proxy_for(&direct).await;
        let prefix = format!("?prefix=faults:{}:", uuid::Uuid::new_v4().simple());
        Store {
            name: "redis",
            direct: format!("{direct}{prefix}"),
            proxied: format!("{proxied}{prefix}"),
            consumer_env: Vec::new(),
            cli_env: Vec::new(),
            proxy,
        }
    }

    /// Redis (healthy, not proxied) in front of PostgreSQL (behind the proxy that goes dark).
    async fn tiered() -> Store {
        let pg = servers::pg_url();
        let (proxy, proxied_pg) = proxy_for(&pg).await;
        let cache = format!(
            "{}?prefix=faults:{}:",
            servers::redis_url(),
            uuid::Uuid::new_v4().simple()
        );
        Store {
            name: "tiered (redis+postgres, durable store dark)",
            direct: format!("tiered:{cache}|{pg}"),
            proxied: format!("tiered:{cache}|{proxied_pg}"),
            consumer_env: Vec::new(),
            cli_env: Vec::new(),
            proxy,
        }
    }

    /// Runs the CLI on the direct URL (on a blocking thread: the proxies and the fake runtime
    /// keep running meanwhile).
    async fn cli(&self, args: &[&str], namespace: &str) -> String {
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        args.extend(["--store".to_owned(), self.direct.clone()]);
        let mut env = self.cli_env.clone();
        env.push(("SQS_CLAIM_NAMESPACE".into(), namespace.to_owned()));
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            cli::run(&args, &env).0
        })
        .await
        .expect("the CLI task panicked")
    }

    /// The balance of `account`, read around the proxy (0 if it has none).
    async fn balance(&self, account: &str, namespace: &str) -> i64 {
        let out = self.cli(&["balances"], namespace).await;
        out.lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(a, _)| *a == account)
            .map(|(_, cents)| cents.trim().parse().expect("a balance is a number"))
            .unwrap_or(0)
    }
}

/// When the proxy goes dark.
#[derive(Debug, Clone, Copy)]
enum When {
    Before,
    MidBatch,
}

/// An SQS event of `(message id, order id, account, cents)` records.
fn event(records: &[(String, String, String, i64)]) -> String {
    let recs: Vec<sqs::Record> = records
        .iter()
        .map(|(id, order, account, cents)| {
            sqs::record(
                id,
                &json!({"order_id": order, "account": account, "amount_cents": cents}).to_string(),
            )
        })
        .collect();
    sqs::event_json(&recs).to_string()
}

/// What came back for one invocation.
enum Answer {
    /// The batch response's `itemIdentifier`s.
    Response(Vec<String>),
    /// Something else, or nothing: the problem.
    Problem(String),
}

/// Queues `event` with a deadline [`BUDGET`] away and waits for the answer until [`GRACE`]
/// after it. Returns the answer and the deadline.
async fn invoke(
    what: &str,
    rt: &mut FakeRuntime,
    consumer: &Consumer,
    event: &str,
) -> (Answer, SystemTime) {
    // The fake's own deadline is computed a moment later, so this one is the stricter bound.
    let deadline = SystemTime::now() + BUDGET;
    let request_id = rt.queue(event, BUDGET);
    let posted = rt.next_post(BUDGET + GRACE).await;
    let at = SystemTime::now();
    let answer = match posted {
        None => Answer::Problem(format!(
            "no answer {GRACE:?} after the deadline\nlogs:\n{}",
            consumer.tail()
        )),
        Some(Posted::Response {
            request_id: id,
            body,
        }) if id == request_id => match serde_json::from_str::<Value>(&body) {
            Ok(v) => match v["batchItemFailures"].as_array() {
                Some(items) => Answer::Response(
                    items
                        .iter()
                        .map(|i| i["itemIdentifier"].as_str().unwrap_or("").to_owned())
                        .collect(),
                ),
                None => Answer::Problem(format!("a response without batchItemFailures: {body}")),
            },
            Err(e) => Answer::Problem(format!("the response is not JSON ({e}): {body}")),
        },
        Some(other) => Answer::Problem(format!(
            "expected the batch response to {request_id}, got {other:?}\nlogs:\n{}",
            consumer.tail()
        )),
    };
    let answer = match answer {
        Answer::Response(_) if at > deadline => Answer::Problem(format!(
            "answered {} ms after the deadline",
            at.duration_since(deadline).unwrap_or_default().as_millis()
        )),
        other => other,
    };
    if let Answer::Response(_) = &answer {
        let early = deadline.duration_since(at).unwrap_or_default();
        eprintln!(
            "{what}: answered {} ms before the deadline",
            early.as_millis()
        );
    }
    (answer, deadline)
}

async fn sleep_past(t: SystemTime) {
    let wait = (t + Duration::from_millis(50))
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    tokio::time::sleep(wait).await;
}

async fn scenario(store: Store, when: When) -> Vec<String> {
    let name = format!(
        "{}, dark {}",
        store.name,
        match when {
            When::Before => "before the batch",
            When::MidBatch => "mid-batch",
        }
    );
    run(&store, when)
        .await
        .into_iter()
        .map(|p| format!("{name}: {p}"))
        .collect()
}

async fn run(store: &Store, when: When) -> Vec<String> {
    let mut problems = Vec::new();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let namespace = format!("faults-{tag}");
    let account = format!("acct-{tag}");
    let warm_account = format!("acct-warm-{tag}");
    {
        // `sqs-claim init` on PostgreSQL is not safe to run twice at once: the accounts table's
        // `CREATE TABLE IF NOT EXISTS` is not under the claims table's advisory lock, and two
        // racing fail on the catalog's unique index. The PostgreSQL and tiered tests share the
        // default tables, so their inits take turns.
        static INIT: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _turn = INIT.lock().await;
        store.cli(&["init"], &namespace).await;
    }

    let dir = TempDir::new("sqs-claim-faults");
    let mut rt = FakeRuntime::start().await.expect("start the fake runtime");
    let mut env = store.consumer_env.clone();
    env.extend([
        ("SQS_CLAIM_STORE".to_owned(), store.proxied.clone()),
        ("SQS_CLAIM_NAMESPACE".to_owned(), namespace.clone()),
    ]);
    let mut started = 0;
    let mut consumer = Consumer::start(
        dir.path(),
        &format!("consumer-{started}"),
        &rt.address(),
        env.iter().map(|(k, v)| (k, v)),
    );

    // Start-up and one healthy invocation: the consumer is warm.
    let warm = event(&[
        (
            format!("w0-{tag}"),
            format!("ord-w0-{tag}"),
            warm_account.clone(),
            1,
        ),
        (
            format!("w1-{tag}"),
            format!("ord-w1-{tag}"),
            warm_account.clone(),
            2,
        ),
    ]);
    let before = store.proxy.bytes_up();
    let request_id = rt.queue(warm, WAIT);
    match rt.next_post(WAIT).await {
        Some(Posted::Response {
            request_id: id,
            body,
        }) if id == request_id => {
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            if v != json!({"batchItemFailures": []}) {
                return vec![format!("the healthy warm-up batch answered {body}")];
            }
        }
        other => {
            return vec![format!(
                "the healthy warm-up batch got {other:?}\nlogs:\n{}",
                consumer.tail()
            )];
        }
    }
    let per_message = (store.proxy.bytes_up() - before) / 2;

    let records: Vec<(String, String, String, i64)> = (0..BATCH)
        .map(|i| {
            (
                format!("m{i:02}-{tag}"),
                format!("ord-{i:02}-{tag}"),
                account.clone(),
                1i64 << i,
            )
        })
        .collect();
    let ids: Vec<String> = records.iter().map(|r| r.0.clone()).collect();
    let batch = event(&records);
    match when {
        When::Before => store.proxy.set(Fault::Dark),
        When::MidBatch => store
            .proxy
            .set_after_bytes(per_message * BATCH as u64 / 2, Fault::Dark),
    }
    let label = format!("{}, dark {when:?}", store.name);
    let (answer, deadline) = invoke(&label, &mut rt, &consumer, &batch).await;
    let fired = store.proxy.fault() == Fault::Dark;
    store.proxy.set(Fault::Pass);
    if !fired {
        problems.push("the proxy never went dark (the batch sent less than expected)".into());
    }
    let reported: Vec<String> = match answer {
        Answer::Response(reported) => {
            eprintln!("{label}: {} of {BATCH} reported", reported.len());
            reported
        }
        Answer::Problem(p) => {
            problems.push(format!("the dark invocation: {p}"));
            // Lambda would have timed it out: a fresh consumer serves the redeliveries.
            drop(consumer);
            drop(rt);
            rt = FakeRuntime::start().await.expect("start the fake runtime");
            started += 1;
            consumer = Consumer::start(
                dir.path(),
                &format!("consumer-{started}"),
                &rt.address(),
                env.iter().map(|(k, v)| (k, v)),
            );
            ids.clone()
        }
    };
    let unique: BTreeSet<&String> = reported.iter().collect();
    if unique.len() != reported.len() || !reported.iter().all(|r| ids.contains(r)) {
        problems.push(format!(
            "the response must name messages of the batch, once each: {reported:?}"
        ));
    }
    if matches!(when, When::Before) && unique.len() != BATCH {
        problems.push(format!(
            "dark from the start, every message is affected, but only {} were reported",
            unique.len()
        ));
    }
    // Every message it did not report was credited (the balance has one bit per message).
    let credited = store.balance(&account, &namespace).await;
    for (i, id) in ids.iter().enumerate() {
        if !unique.contains(id) && credited & (1 << i) == 0 {
            problems.push(format!("{id} was not reported, yet not credited"));
        }
    }

    // Healed: once the leases lapsed, deliver the batch again, then what is still reported.
    sleep_past(deadline).await;
    let mut pending: Vec<usize> = (0..BATCH).collect();
    for round in 1..=ROUNDS {
        if pending.is_empty() {
            break;
        }
        let again: Vec<_> = pending.iter().map(|&i| records[i].clone()).collect();
        let what = format!("{label}, redelivery {round}");
        let (answer, deadline) = invoke(&what, &mut rt, &consumer, &event(&again)).await;
        match answer {
            Answer::Response(reported) => {
                pending.retain(|&i| reported.contains(&ids[i]));
            }
            Answer::Problem(p) => problems.push(format!("redelivery {round}: {p}")),
        }
        if !pending.is_empty() {
            sleep_past(deadline).await;
        }
    }
    if !pending.is_empty() {
        problems.push(format!(
            "{} messages still reported after {ROUNDS} redeliveries to a healthy store\nlogs:\n{}",
            pending.len(),
            consumer.tail()
        ));
    }
    let want = (1i64 << BATCH) - 1;
    let balance = store.balance(&account, &namespace).await;
    if balance > want {
        problems.push(format!(
            "the balance is {balance}, {} cents more than {want}: a message was credited more \
             than once",
            balance - want
        ));
    } else if balance < want {
        let missing: Vec<&String> = ids
            .iter()
            .enumerate()
            .filter(|(i, _)| balance & (1 << i) == 0)
            .map(|(_, id)| id)
            .collect();
        problems.push(format!(
            "the balance is {balance}, not {want}: never credited: {missing:?}"
        ));
    }
    if store.balance(&warm_account, &namespace).await != 3 {
        problems.push("the warm-up batch was credited other than once".into());
    }
    problems
}

/// Dark before the batch and mid-batch, at once, each on a store and a consumer of its own.
async fn both<F: Future<Output = Store>>(make: impl Fn() -> F) {
    support::init_logs();
    let (before, mid) = tokio::join!(
        async { scenario(make().await, When::Before).await },
        async { scenario(make().await, When::MidBatch).await },
    );
    let problems: Vec<String> = before.into_iter().chain(mid).collect();
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_on_dynamodb_gone_dark_answers_in_time() {
    both(Store::dynamodb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_on_postgres_gone_dark_answers_in_time() {
    both(Store::postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_on_redis_gone_dark_answers_in_time() {
    both(Store::redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_on_tiered_with_its_durable_store_gone_dark_answers_in_time() {
    both(Store::tiered).await;
}
