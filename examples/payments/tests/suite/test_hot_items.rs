//! Hot items (issue 18): the example consumer, as `payments::build` makes it (one-shot mode:
//! one `TransactWriteItems` per message, the claim completed with the credit), on DynamoDB
//! Local behind the test kit's [`ConflictProxy`], which cancels a transaction overlapping
//! another in flight on one of its items as real DynamoDB does (DynamoDB Local queues them).
//!
//! 50 payment messages crediting 5 accounts, delivered to 1 invocation and to 8 concurrent
//! invocations (the same batch to each, as SQS's at-least-once delivery can); every message
//! that fails is delivered again, as SQS would after its visibility timeout, until none is
//! left. What is measured: the share of copies failed on the first delivery, and how many
//! deliveries it takes to settle. What always holds: nothing lost, nothing applied twice,
//! balances exact. Run with `--nocapture` to see the table.
//!
//! `hot_accounts_settle_exactly_once` asserts the invariants on every row of the table;
//! `hot_accounts_meet_the_targets` its goals: alone, nothing fails on contention the batch makes
//! itself (writes of one process on one item take turns); from 8 invocations (each a consumer
//! of its own, as each runs in a Lambda environment of its own) contention is retried with
//! backoff, and at most 2% of the copies fail on the first delivery.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use payments::{DynamoDbLedger, Ledger, Settings};
use sqs_claim::aws_sdk_dynamodb::config::{
    BehaviorVersion, Credentials, Region, SharedCredentialsProvider,
};
use sqs_claim::{DynamoDbSettings, DynamoDbStore, Outcome};
use sqs_claim_testkit::conflict::ConflictProxy;
use sqs_claim_testkit::local;
use sqs_claim_testkit::sqs::{self, Record};

/// Messages per batch.
const MESSAGES: usize = 50;

/// How long each transaction holds its items beyond DynamoDB Local's own answer time (a
/// transaction at DynamoDB takes a few milliseconds): 5 ms, or `SQS_CLAIM_CONFLICT_HOLD_MS`.
fn hold() -> Duration {
    std::env::var("SQS_CLAIM_CONFLICT_HOLD_MS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(Duration::from_millis(5), Duration::from_millis)
}

/// Deliveries after which a run that has not settled fails the test. SQS would have
/// dead-lettered long before (`maxReceiveCount` is 3 to 5 in most set-ups); this bound only
/// says that contention ends. Measured before issue 18's fix: 2 to 6 deliveries alone or on
/// distinct accounts, 29 to 37 for 8 invocations on 5 accounts (each redelivery of the 8 copies
/// races again); the target is 2.
const MAX_DELIVERIES: usize = 100;

/// One row of the table.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    name: &'static str,
    invocations: usize,
    accounts: usize,
    concurrency: Option<usize>,
}

const ALONE: Scenario = Scenario {
    name: "1 invocation, default concurrency",
    invocations: 1,
    accounts: 5,
    concurrency: None,
};
const ALONE_10: Scenario = Scenario {
    name: "1 invocation, SQS_CLAIM_CONCURRENCY=10",
    invocations: 1,
    accounts: 5,
    concurrency: Some(10),
};
const EIGHT: Scenario = Scenario {
    name: "8 concurrent invocations of the batch",
    invocations: 8,
    accounts: 5,
    concurrency: None,
};
const ALONE_DISTINCT: Scenario = Scenario {
    name: "1 invocation, 50 distinct accounts",
    invocations: 1,
    accounts: 50,
    concurrency: None,
};
const EIGHT_DISTINCT: Scenario = Scenario {
    name: "8 concurrent invocations, 50 distinct accounts",
    invocations: 8,
    accounts: 50,
    concurrency: None,
};

/// What one run measured.
#[derive(Debug)]
struct Figures {
    scenario: Scenario,
    copies: usize,
    failed_first: usize,
    deliveries: usize,
    conflicts: u64,
    /// Requests that reached DynamoDB Local (the conflict model's refusals not counted).
    requests: u64,
}

impl Figures {
    fn failed_share(&self) -> f64 {
        self.failed_first as f64 / self.copies as f64
    }
}

/// A DynamoDB ledger on fresh tables, its client on `endpoint` and bounded as the consumer's
/// (`DynamoDbStore::from_env` uses the same settings).
async fn ledger(endpoint: &str) -> DynamoDbLedger {
    let config = sqs_claim::aws_config::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "test", "test", None, None, "test",
        )))
        .build();
    let table = local::unique_name("hot");
    let store = DynamoDbStore::from_sdk_config(&config, &table, DynamoDbSettings::default());
    let ledger = DynamoDbLedger::new(store, format!("{table}-accounts"));
    if let Err(e) = ledger.init().await {
        panic!(
            "DynamoDB Local is not usable at {}: {e}\nrun `make test`, or `scripts/services.sh check`",
            local::dynamodb_endpoint()
        );
    }
    ledger
}

/// The batch: message `i` credits `i + 1` cents to account `i % accounts`, under an order id
/// of this run.
fn batch(run: &str, accounts: usize) -> (Vec<Record>, BTreeMap<String, i64>) {
    let mut expected = BTreeMap::new();
    let records = (0..MESSAGES)
        .map(|i| {
            let account = format!("acct-{run}-{}", i % accounts);
            let amount = i as i64 + 1;
            *expected.entry(account.clone()).or_insert(0) += amount;
            let body = serde_json::json!({
                "order_id": format!("ord-{run}-{i}"),
                "account": account,
                "amount_cents": amount,
            });
            sqs::record(&format!("m-{i}"), &body.to_string())
        })
        .collect();
    (records, expected)
}

fn deadline_in(d: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from((now + d).as_millis()).unwrap_or(u64::MAX)
}

async fn run(scenario: Scenario) -> Figures {
    let proxy = ConflictProxy::start(&local::dynamodb_endpoint())
        .await
        .expect("conflict proxy");
    proxy.hold(hold());
    let ledger = ledger(&proxy.endpoint()).await;
    let concurrency = scenario.concurrency.map(|n| n.to_string());
    let settings = Settings::from_lookup(|name| match name {
        "SQS_CLAIM_CONCURRENCY" => concurrency.clone(),
        _ => None,
    })
    .expect("settings");
    // One consumer per invocation, as each concurrent invocation runs in a Lambda environment
    // of its own: nothing in one process (its item locks, its in-flight limit) is shared with
    // another's.
    let mut consumers = Vec::new();
    for _ in 0..scenario.invocations {
        let consumer = payments::build(ledger.clone(), &settings)
            .await
            .expect("consumer");
        assert!(consumer.is_one_shot(), "the example's default mode");
        consumers.push(consumer);
    }

    let run = uuid::Uuid::new_v4().simple().to_string();
    let (records, expected) = batch(&run, scenario.accounts);
    let by_id: HashMap<String, Record> = records
        .iter()
        .map(|r| (r.id().unwrap_or_default().to_owned(), r.clone()))
        .collect();

    // What each invocation still has to deliver; how often each message was processed.
    let mut pending: Vec<Vec<Record>> = vec![records; scenario.invocations];
    let mut processed: HashMap<String, usize> = HashMap::new();
    let mut failed_first = 0;
    let mut deliveries = 0;
    let conflicts_before = proxy.conflicts();
    let forwarded_before = proxy.forwarded();
    while pending.iter().any(|p| !p.is_empty()) {
        deliveries += 1;
        assert!(
            deliveries <= MAX_DELIVERIES,
            "{}: not settled after {MAX_DELIVERIES} deliveries",
            scenario.name
        );
        // Invocation `i` always runs on consumer `i`; one with nothing left is not invoked.
        let invocations: Vec<_> = pending
            .iter()
            .zip(&consumers)
            .map(|(batch, consumer)| {
                let (consumer, batch) = (consumer.clone(), batch.clone());
                (!batch.is_empty()).then(|| {
                    tokio::spawn(async move {
                        let event = sqs::lambda_event_with_deadline(
                            &batch,
                            deadline_in(Duration::from_secs(30)),
                        );
                        consumer.process(event).await
                    })
                })
            })
            .collect();
        let mut next = Vec::new();
        for invocation in invocations {
            let Some(invocation) = invocation else {
                next.push(Vec::new());
                continue;
            };
            let report = invocation
                .await
                .expect("invocation task")
                .expect("the batch is processed");
            let mut again = Vec::new();
            for item in report.items() {
                if item.outcome == Outcome::Processed {
                    *processed.entry(item.message_id.clone()).or_default() += 1;
                }
                if !item.outcome.is_success() {
                    let record = by_id[&item.message_id]
                        .clone()
                        .receive_count(deliveries as u32 + 1);
                    again.push(record);
                }
            }
            if deliveries == 1 {
                failed_first += again.len();
            }
            next.push(again);
        }
        pending = next;
    }

    // Nothing lost, nothing doubled: each message processed exactly once (the other copies are
    // duplicates), and every balance the sum of its credits.
    for id in by_id.keys() {
        assert_eq!(
            processed.get(id).copied().unwrap_or(0),
            1,
            "{}: message {id} processed {} times",
            scenario.name,
            processed.get(id).copied().unwrap_or(0)
        );
    }
    let balances: BTreeMap<String, i64> = ledger
        .balances()
        .await
        .expect("balances")
        .into_iter()
        .filter(|(account, _)| account.contains(&run))
        .collect();
    assert_eq!(balances, expected, "{}: balances", scenario.name);

    Figures {
        scenario,
        copies: MESSAGES * scenario.invocations,
        failed_first,
        deliveries,
        conflicts: proxy.conflicts() - conflicts_before,
        requests: proxy.forwarded() - forwarded_before,
    }
}

fn table(figures: &[Figures]) -> String {
    let mut out = format!(
        "| run ({MESSAGES} payment messages; hold {} ms) | failed on first delivery | deliveries to settle | conflicts | requests |\n|---|---|---|---|---|\n",
        hold().as_millis()
    );
    for f in figures {
        let _ = writeln!(
            out,
            "| {} ({} accounts) | {}/{} ({:.0}%) | {} | {} | {} |",
            f.scenario.name,
            f.scenario.accounts,
            f.failed_first,
            f.copies,
            f.failed_share() * 100.0,
            f.deliveries,
            f.conflicts,
            f.requests
        );
    }
    out
}

/// Every row of the table: however many copies fail on contention, every message is
/// credited exactly once in the end, and the conflict model did cancel writes (the stand-in
/// bites: on DynamoDB Local alone nothing here would fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_accounts_settle_exactly_once() {
    let mut figures = Vec::new();
    for scenario in [ALONE, ALONE_10, ALONE_DISTINCT, EIGHT, EIGHT_DISTINCT] {
        figures.push(run(scenario).await);
    }
    println!("{}", table(&figures));
    for f in &figures {
        assert!(
            f.deliveries <= MAX_DELIVERIES,
            "{}: settled within {MAX_DELIVERIES} deliveries",
            f.scenario.name
        );
    }
    let hot = figures
        .iter()
        .filter(|f| f.scenario.accounts < MESSAGES || f.scenario.invocations > 1);
    assert!(
        hot.map(|f| f.conflicts).sum::<u64>() > 0,
        "the conflict model cancelled nothing:\n{}",
        table(&figures)
    );
}

/// Issue 18's goals: alone, no message of the batch fails on contention it makes itself; from
/// 8 concurrent invocations at most 2% of the copies fail and all settle within 2 deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_accounts_meet_the_targets() {
    let alone = run(ALONE).await;
    let eight = run(EIGHT).await;
    let distinct = run(ALONE_DISTINCT).await;
    let figures = [alone, eight, distinct];
    let report = table(&figures);
    println!("{report}");
    assert_eq!(
        figures[0].failed_first, 0,
        "alone, nothing fails:\n{report}"
    );
    assert_eq!(
        figures[0].conflicts, 0,
        "alone, the batch's writes on one account take turns: no conflict at all:\n{report}"
    );
    assert!(
        figures[1].failed_share() <= 0.02,
        "8 invocations: at most 2% fail on the first delivery:\n{report}"
    );
    assert!(
        figures[1].deliveries <= 2,
        "8 invocations: settled within 2 deliveries:\n{report}"
    );
    // Packed: 50 one-shot writes on distinct accounts (100 actions) fit one transaction; a
    // few more requests are allowed for how the messages reach the packer.
    assert!(
        figures[2].requests <= 5,
        "50 messages on distinct items, packed: at most 5 requests:\n{report}"
    );
}
