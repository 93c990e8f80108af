//! Store faults in the middle of real batches: DynamoDB Local, PostgreSQL, Redis and the tiered
//! store (Redis cache in front of PostgreSQL), each behind the fault proxy of
//! `sqs_claim_testkit::fault`, under a [`Processor`] on the wall clock.
//!
//! Every test runs one fault three times at once, on stores of their own: switched on before
//! the batch; mid-batch, once half the batch's bytes reached the server (so it can land inside
//! a request); and from inside the handler of the batch's 10th call, so that at least that
//! message's completion meets the fault (a completion cut off, or lost in flight). A
//! batch is [`BATCH`] messages whose handler returns one atomic effect each (a counter per
//! key, +1), with a deadline [`BUDGET`] away and the default `answer_reserve`. Then:
//!
//! * (a) `process` returns before the deadline: a correctness bound, not a speed claim (the
//!   figure is printed with `--nocapture`);
//! * (b) every message is in the report, and is either a success (processed, duplicate) or in
//!   the batch response, once: never missing;
//! * (c) the proxy heals, the leases (the deadline) lapse, and the whole batch is delivered
//!   again (then whatever still failed, up to [`ROUNDS`] times, as SQS would): every message
//!   ends a success, a message that succeeded under the fault is never processed again (its
//!   completion had committed: it is a duplicate, or fails transiently on a connection the
//!   fault broke), and every key's counter is exactly 1: no effect applied twice, none lost.
//!
//! The `*_no_effects` tests run a handler without effects: (a) and (b) hold the same, and only
//! the reported messages are redelivered (a success without effects may be a handler that ran
//! and a completion that did not commit: SQS deletes it, so must the test).
//!
//! A `process` that has not returned [`GRACE`] after its deadline is abandoned and reported, so
//! an engine that does not bound steps in flight fails these tests instead of hanging them.

use crate::support;

use support::{dynamodb as dynamodb_local, servers};

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use redis::AsyncCommands;
use sqs_claim::store::{ClaimStore, Effects};
use sqs_claim::{
    BatchReport, BoxError, Clock, DynamoDbStore, Message, Outcome, PgEffect, PostgresStore,
    Processor, RedisEffect, RedisStore, TieredStore,
};
use sqs_claim_testkit::fault::{Fault, FaultProxy};
use support::batch::{Rec, Seen, event, event_with_deadline, failed_ids, init_logs, rec};
use tower::service_fn;

/// Messages per batch.
const BATCH: usize = 20;

/// Each invocation's deadline is this far from its start.
const BUDGET: Duration = Duration::from_secs(3);

/// How long after its deadline a `process` that has not returned is abandoned.
const GRACE: Duration = Duration::from_secs(3);

/// Redeliveries after the fault heals, at most.
const ROUNDS: usize = 3;

/// An effect adding 1 to a key's counter.
type Increment<E> = Arc<dyn Fn(&str) -> E + Send + Sync>;

/// A store behind a fault proxy, with a counter per key that its effects increment.
trait Rig {
    type Store: ClaimStore;

    /// Which store, for messages.
    fn name(&self) -> String;

    /// The store as the processor uses it: through the proxy.
    fn store(&self) -> Self::Store;

    /// The proxy the test switches.
    fn proxy(&self) -> &FaultProxy;

    /// The effect of one message: +1 on its key's counter.
    fn increment(&self) -> Increment<<Self::Store as ClaimStore>::Effect>;

    /// Every counter, read around the proxy.
    fn counts(&self) -> impl Future<Output = HashMap<String, i64>>;

    /// Drops what the rig created.
    fn cleanup(self) -> impl Future<Output = ()>;

    /// The store through the proxy as a consumer builds it, every call bounded by the store's
    /// own default timeout (the DynamoDB test client above has none).
    fn bounded(&self) -> impl Future<Output = Self::Store> {
        async { self.store() }
    }

    /// The word a failure on this store names it by.
    fn store_word(&self) -> &'static str;
}

// ---------------------------------------------------------------------------------------------
// The rigs
// ---------------------------------------------------------------------------------------------

struct Dynamo {
    direct: DynamoDbStore,
    counters: String,
    proxied: DynamoDbStore,
    proxy: FaultProxy,
    endpoint: String,
}

impl Dynamo {
    async fn new() -> Dynamo {
        let direct = dynamodb_local::dynamodb_store("faults").await;
        // A second table of the same shape (string key `id`) holds the counters.
        let counters = dynamodb_local::dynamodb_store("faults-counters")
            .await
            .table()
            .to_owned();
        let (proxy, endpoint) = FaultProxy::in_front_of(&dynamodb_local::dynamodb_endpoint())
            .await
            .expect("a proxy in front of DynamoDB Local");
        let proxied =
            DynamoDbStore::new(dynamodb_local::dynamodb_client(&endpoint), direct.table());
        Dynamo {
            direct,
            counters,
            proxied,
            proxy,
            endpoint,
        }
    }
}

impl Rig for Dynamo {
    type Store = DynamoDbStore;

    fn name(&self) -> String {
        "dynamodb".into()
    }

    async fn bounded(&self) -> DynamoDbStore {
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(&self.endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .load()
            .await;
        DynamoDbStore::from_sdk_config(
            &config,
            self.direct.table(),
            sqs_claim::store::dynamodb::DynamoDbSettings::default(),
        )
    }

    fn store_word(&self) -> &'static str {
        "DynamoDB"
    }

    fn store(&self) -> DynamoDbStore {
        self.proxied.clone()
    }

    fn proxy(&self) -> &FaultProxy {
        &self.proxy
    }

    fn increment(&self) -> Increment<TransactWriteItem> {
        let table = self.counters.clone();
        Arc::new(move |key: &str| {
            let update = Update::builder()
                .table_name(&table)
                .key("id", AttributeValue::S(key.to_owned()))
                .update_expression("ADD #n :one")
                .expression_attribute_names("#n", "n")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .build()
                .expect("the update names its table, key and expression");
            TransactWriteItem::builder().update(update).build()
        })
    }

    async fn counts(&self) -> HashMap<String, i64> {
        let mut counts = HashMap::new();
        let mut start = None;
        loop {
            let page = self
                .direct
                .client()
                .scan()
                .table_name(&self.counters)
                .set_exclusive_start_key(start)
                .send()
                .await
                .expect("scan the counters");
            for item in page.items() {
                let key = item["id"].as_s().expect("id is a string").clone();
                let n = item["n"].as_n().expect("n is a number");
                counts.insert(key, n.parse().expect("n is an integer"));
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return counts;
            }
        }
    }

    async fn cleanup(self) {
        for table in [self.direct.table(), &self.counters] {
            let _ = self
                .direct
                .client()
                .delete_table()
                .table_name(table)
                .send()
                .await;
        }
    }
}

/// A migrated PostgreSQL table with a counters table next to it, reached directly and through
/// a proxy.
struct PgTables {
    direct: PostgresStore,
    proxied: PostgresStore,
    proxy: FaultProxy,
}

impl PgTables {
    async fn new() -> PgTables {
        let direct = servers::pg_store("faults").await;
        servers::sql(
            &direct,
            &format!(
                "CREATE TABLE {}_counts (k TEXT PRIMARY KEY, n BIGINT NOT NULL)",
                direct.table()
            ),
        )
        .await;
        let (proxy, url) = FaultProxy::in_front_of(&servers::pg_url())
            .await
            .expect("a proxy in front of PostgreSQL");
        let proxied = PostgresStore::connect(&url)
            .and_then(|s| s.with_table(direct.table()))
            .expect("a store on the proxied URL");
        PgTables {
            direct,
            proxied,
            proxy,
        }
    }

    fn increment(&self) -> Increment<PgEffect> {
        let sql = format!(
            "INSERT INTO {t}_counts (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = {t}_counts.n + 1",
            t = self.direct.table()
        );
        Arc::new(move |key: &str| PgEffect::new(sql.clone()).bind(key.to_owned()))
    }

    async fn counts(&self) -> HashMap<String, i64> {
        let client = self.direct.pool().get().await.expect("a direct connection");
        client
            .query(
                &format!("SELECT k, n FROM {}_counts", self.direct.table()),
                &[],
            )
            .await
            .expect("read the counters")
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    async fn cleanup(self) {
        let t = self.direct.table();
        servers::sql(
            &self.direct,
            &format!("DROP TABLE IF EXISTS {t}, {t}_counts"),
        )
        .await;
    }
}

struct Pg(PgTables);

impl Pg {
    async fn new() -> Pg {
        Pg(PgTables::new().await)
    }
}

impl Rig for Pg {
    type Store = PostgresStore;

    fn name(&self) -> String {
        "postgres".into()
    }

    fn store_word(&self) -> &'static str {
        "PostgreSQL"
    }

    fn store(&self) -> PostgresStore {
        self.0.proxied.clone()
    }

    fn proxy(&self) -> &FaultProxy {
        &self.0.proxy
    }

    fn increment(&self) -> Increment<PgEffect> {
        self.0.increment()
    }

    async fn counts(&self) -> HashMap<String, i64> {
        self.0.counts().await
    }

    async fn cleanup(self) {
        self.0.cleanup().await;
    }
}

/// A Redis prefix of its own, reached directly and through a proxy.
struct RedisKeys {
    direct: RedisStore,
    proxied: RedisStore,
    proxy: FaultProxy,
}

impl RedisKeys {
    /// `lazy`: connect the proxied store on first use (as a tiered cache should).
    async fn new(lazy: bool) -> RedisKeys {
        let direct = servers::redis_store().await;
        let (proxy, url) = FaultProxy::in_front_of(&servers::redis_url())
            .await
            .expect("a proxy in front of Redis");
        let proxied = if lazy {
            RedisStore::connect_lazy(&url).expect("a lazy Redis store")
        } else {
            RedisStore::connect(&url)
                .await
                .expect("Redis through the proxy")
        };
        let proxied = proxied.with_prefix(direct.prefix());
        RedisKeys {
            direct,
            proxied,
            proxy,
        }
    }

    async fn cleanup(self) {
        servers::cleanup(self.direct.connection(), self.direct.prefix()).await;
    }
}

struct Redis {
    keys: RedisKeys,
    counters: String,
}

impl Redis {
    async fn new() -> Redis {
        let keys = RedisKeys::new(false).await;
        let counters = format!("{}counters", keys.direct.prefix());
        Redis { keys, counters }
    }
}

impl Rig for Redis {
    type Store = RedisStore;

    fn name(&self) -> String {
        "redis".into()
    }

    fn store_word(&self) -> &'static str {
        "Redis"
    }

    fn store(&self) -> RedisStore {
        self.keys.proxied.clone()
    }

    fn proxy(&self) -> &FaultProxy {
        &self.keys.proxy
    }

    fn increment(&self) -> Increment<RedisEffect> {
        let counters = self.counters.clone();
        Arc::new(move |key: &str| RedisEffect::hincr_by(counters.clone(), key, 1))
    }

    async fn counts(&self) -> HashMap<String, i64> {
        let mut conn = self.keys.direct.connection().clone();
        conn.hgetall(&self.counters)
            .await
            .expect("HGETALL the counters")
    }

    async fn cleanup(self) {
        self.keys.cleanup().await;
    }
}

/// Which tier of the tiered store the test faults.
#[derive(Debug, Clone, Copy)]
enum Tier {
    Cache,
    Durable,
}

struct Tiered {
    cache: RedisKeys,
    durable: PgTables,
    faulted: Tier,
}

impl Tiered {
    async fn new(faulted: Tier) -> Tiered {
        Tiered {
            cache: RedisKeys::new(true).await,
            durable: PgTables::new().await,
            faulted,
        }
    }
}

impl Rig for Tiered {
    type Store = TieredStore<PostgresStore>;

    fn name(&self) -> String {
        format!(
            "tiered (redis+postgres, {} faulted)",
            match self.faulted {
                Tier::Cache => "cache",
                Tier::Durable => "durable store",
            }
        )
    }

    fn store_word(&self) -> &'static str {
        match self.faulted {
            Tier::Cache => "Redis",
            Tier::Durable => "PostgreSQL",
        }
    }

    fn store(&self) -> TieredStore<PostgresStore> {
        TieredStore::new(self.cache.proxied.clone(), self.durable.proxied.clone())
    }

    fn proxy(&self) -> &FaultProxy {
        match self.faulted {
            Tier::Cache => &self.cache.proxy,
            Tier::Durable => &self.durable.proxy,
        }
    }

    fn increment(&self) -> Increment<PgEffect> {
        self.durable.increment()
    }

    async fn counts(&self) -> HashMap<String, i64> {
        self.durable.counts().await
    }

    async fn cleanup(self) {
        self.cache.cleanup().await;
        self.durable.cleanup().await;
    }
}

// ---------------------------------------------------------------------------------------------
// One scenario
// ---------------------------------------------------------------------------------------------

/// When the fault is switched on.
#[derive(Debug, Clone, Copy)]
enum When {
    /// Before the batch starts.
    Before,
    /// Once half the batch's bytes (measured on a warm-up message) reached the server.
    MidBatch,
    /// From inside the handler of the batch's [`FLIP_AT`]th call, before it returns.
    InHandler,
}

/// Which handler call of the batch switches the fault on, for [`When::InHandler`]: with the
/// default concurrency (10), earlier messages are completing around it and later ones claiming.
const FLIP_AT: usize = 10;

/// One invocation, timed against its deadline.
struct Invocation {
    deadline: SystemTime,
    /// `None` if `process` failed or was abandoned (`problem` says which).
    report: Option<BatchReport>,
    /// How long before the deadline it answered (negative: after).
    early_ms: i128,
    problem: Option<String>,
}

fn millis(t: SystemTime) -> i128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i128)
        .unwrap_or(0)
}

/// Processes `batch` with a deadline [`BUDGET`] from now, abandoning it [`GRACE`] after the
/// deadline.
async fn invoke<S, H>(p: &Processor<S, H>, batch: &[Rec]) -> Invocation
where
    S: ClaimStore,
    H: tower::Service<Message> + Clone + Send + Sync + 'static,
    H::Future: Send + 'static,
    H::Response: Into<Effects<S::Effect>>,
    H::Error: Into<BoxError>,
{
    let deadline_ms = support::batch::deadline_in(&Clock::system(), BUDGET);
    let deadline = UNIX_EPOCH + Duration::from_millis(deadline_ms);
    let result = tokio::time::timeout(
        BUDGET + GRACE,
        p.process(event_with_deadline(batch, deadline_ms)),
    )
    .await;
    let answered = SystemTime::now();
    let early_ms = millis(deadline) - millis(answered);
    let (report, mut problem) = match result {
        Err(_) => (
            None,
            Some(format!(
                "process had not returned {GRACE:?} after its deadline: abandoned"
            )),
        ),
        Ok(Err(e)) => (None, Some(format!("process failed: {e}"))),
        Ok(Ok(report)) => (Some(report), None),
    };
    if problem.is_none() && answered > deadline {
        problem = Some(format!("answered {} ms after its deadline", -early_ms));
    }
    Invocation {
        deadline,
        report,
        early_ms,
        problem,
    }
}

/// (b): every message of `batch` is in the report, in order, and is a success or in the
/// response, once.
fn check_accounted(report: &BatchReport, batch: &[Rec], ids: &[String]) -> Option<String> {
    let reported: Vec<&str> = report
        .items()
        .iter()
        .map(|i| i.message_id.as_str())
        .collect();
    let wanted: Vec<&str> = ids.iter().map(String::as_str).collect();
    if reported != wanted {
        return Some(format!(
            "the report names {reported:?}, the batch was {wanted:?} ({} records)",
            batch.len()
        ));
    }
    let response = failed_ids(&report.response());
    let unique: HashSet<&String> = response.iter().collect();
    if unique.len() != response.len() {
        return Some(format!("the response names a message twice: {response:?}"));
    }
    let failed: HashSet<&String> = report
        .items()
        .iter()
        .filter(|i| !i.outcome.is_success())
        .map(|i| &i.message_id)
        .collect();
    if unique != failed {
        return Some(format!(
            "the response {response:?} is not exactly the messages that did not succeed {failed:?}"
        ));
    }
    None
}

fn summary(report: &BatchReport) -> String {
    let mut names: HashMap<String, usize> = HashMap::new();
    for item in report.items() {
        let name = match &item.outcome {
            Outcome::CutOff(step) => format!("cut_off({})", step.as_str()),
            Outcome::Failed(f) => format!("failed({})", f.kind.as_str()),
            other => other.name().to_owned(),
        };
        *names.entry(name).or_default() += 1;
    }
    let mut names: Vec<_> = names.into_iter().collect();
    names.sort();
    names
        .iter()
        .map(|(n, c)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn sleep_past(t: SystemTime) {
    let wait = (t + Duration::from_millis(50))
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    tokio::time::sleep(wait).await;
}

/// Runs one fault at one moment on `rig` and returns what went wrong (empty: nothing).
async fn scenario<R: Rig>(rig: R, fault: Fault, when: When, effects: bool) -> Vec<String> {
    let name = format!(
        "{}, {fault:?} {}{}",
        rig.name(),
        match when {
            When::Before => "before the batch",
            When::MidBatch => "mid-batch",
            When::InHandler => "from a handler",
        },
        if effects { "" } else { ", no effects" }
    );
    let problems = run(&rig, fault, when, effects).await;
    rig.cleanup().await;
    problems
        .into_iter()
        .map(|p| format!("{name}: {p}"))
        .collect()
}

async fn run<R: Rig>(rig: &R, fault: Fault, when: When, effects: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let seen = Seen::new();
    let increment = rig.increment();
    // For `When::InHandler`: handler calls left before the one that switches the fault on.
    let countdown: Arc<Mutex<Option<usize>>> = Arc::new(Mutex::new(None));
    let handler = {
        let seen = seen.clone();
        let countdown = Arc::clone(&countdown);
        let switch = rig.proxy().handle();
        service_fn(move |msg: Message| {
            let seen = seen.clone();
            let increment = Arc::clone(&increment);
            let countdown = Arc::clone(&countdown);
            let switch = switch.clone();
            async move {
                let key = msg.key().ok_or("the message has no key")?.to_owned();
                seen.saw(&key);
                {
                    let mut left = countdown.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(n) = left.as_mut() {
                        *n -= 1;
                        if *n == 0 {
                            *left = None;
                            switch.set(fault);
                        }
                    }
                }
                let effects = if effects {
                    Effects::one(increment(&key))
                } else {
                    Effects::none()
                };
                Ok::<_, BoxError>(effects)
            }
        })
    };
    let namespace = format!("faults-{}", uuid::Uuid::new_v4().simple());
    let p = Processor::builder(rig.store(), handler)
        .namespace(&namespace)
        .clock(Clock::system())
        .build();
    let key = |id: &str| format!("{namespace}#{id}");

    // Warm-up: the store is up and connected, as a consumer is after start-up; the second
    // message measures what one message sends.
    let mut per_message = 0;
    for id in ["warm-0", "warm-1"] {
        let before = rig.proxy().bytes_up();
        let warm = invoke(&p, &[rec(id, "{}")]).await;
        let ok = warm
            .report
            .as_ref()
            .is_some_and(|r| r.items().iter().all(|i| i.outcome.is_success()));
        if !ok {
            return vec![format!(
                "the warm-up through the healthy proxy failed: {:?} {:?}",
                warm.problem,
                warm.report.as_ref().map(|r| r.to_json())
            )];
        }
        per_message = rig.proxy().bytes_up() - before;
    }

    let batch: Vec<Rec> = (0..BATCH)
        .map(|i| rec(&format!("m{i:02}"), &format!("{{\"n\":{i}}}")))
        .collect();
    let ids: Vec<String> = (0..BATCH).map(|i| format!("m{i:02}")).collect();
    match when {
        When::Before => rig.proxy().set(fault),
        When::MidBatch => rig
            .proxy()
            .set_after_bytes(per_message * BATCH as u64 / 2, fault),
        When::InHandler => {
            *countdown.lock().unwrap_or_else(|p| p.into_inner()) = Some(FLIP_AT);
        }
    }
    let first = invoke(&p, &batch).await;
    let fired = rig.proxy().fault() == fault;
    problems.extend(first.problem.clone());
    let mut succeeded: HashSet<String> = HashSet::new();
    match &first.report {
        Some(report) => {
            problems.extend(check_accounted(report, &batch, &ids));
            eprintln!(
                "{}, {fault:?} {when:?}{}: answered {} ms before the deadline (fault fired: \
                 {fired}): {}",
                rig.name(),
                if effects { "" } else { ", no effects" },
                first.early_ms,
                summary(report)
            );
            succeeded.extend(
                report
                    .items()
                    .iter()
                    .filter(|i| i.outcome.is_success())
                    .map(|i| i.message_id.clone()),
            );
        }
        None => eprintln!(
            "{}, {fault:?} {when:?}: {}",
            rig.name(),
            first.problem.as_deref().unwrap_or("no report")
        ),
    }
    if !fired {
        problems.push(match when {
            When::MidBatch => format!(
                "the fault never fired (the batch sent less than half of {} bytes)",
                per_message * BATCH as u64
            ),
            _ => format!("the fault never fired (fewer than {FLIP_AT} handler calls)"),
        });
    }

    // Heal, let the leases lapse, redeliver.
    rig.proxy().set(Fault::Pass);
    sleep_past(first.deadline).await;
    let mut pending: Vec<usize> = (0..BATCH)
        .filter(|&i| effects || !succeeded.contains(&ids[i]))
        .collect();
    let mut last = String::new();
    for round in 1..=ROUNDS {
        if pending.is_empty() {
            break;
        }
        let redelivery: Vec<Rec> = pending.iter().map(|&i| batch[i].clone()).collect();
        let redelivered_ids: Vec<String> = pending.iter().map(|&i| ids[i].clone()).collect();
        let inv = invoke(&p, &redelivery).await;
        problems.extend(inv.problem.map(|p| format!("redelivery {round}: {p}")));
        let Some(report) = inv.report else {
            sleep_past(inv.deadline).await;
            continue;
        };
        problems.extend(
            check_accounted(&report, &redelivery, &redelivered_ids)
                .map(|p| format!("redelivery {round}: {p}")),
        );
        // A success under the fault committed its completion (with its effect): a redelivery
        // may fail transiently (a connection broken by the fault), but never run it again.
        for item in report.items() {
            if succeeded.contains(&item.message_id) && item.outcome == Outcome::Processed {
                problems.push(format!(
                    "redelivery {round}: {} succeeded under the fault, so its completion had \
                     committed, yet the redelivery processed it again",
                    item.message_id
                ));
            }
        }
        let done: HashSet<&str> = report
            .items()
            .iter()
            .filter(|i| i.outcome.is_success())
            .map(|i| i.message_id.as_str())
            .collect();
        pending.retain(|&i| !done.contains(ids[i].as_str()));
        last = format!("redelivery {round}: {}", report.to_json());
        if !pending.is_empty() {
            sleep_past(inv.deadline).await;
        }
    }
    if !pending.is_empty() {
        problems.push(format!(
            "{} messages still not processed after {ROUNDS} redeliveries of a healthy store; {last}",
            pending.len()
        ));
    }

    if effects {
        let counts = rig.counts().await;
        for id in &ids {
            match counts.get(&key(id)) {
                Some(1) => {}
                Some(n) => problems.push(format!("{id}: its effect was applied {n} times")),
                None => problems.push(format!("{id}: its effect was never applied")),
            }
        }
        let expected: HashSet<String> = ids
            .iter()
            .map(String::as_str)
            .chain(["warm-0", "warm-1"])
            .map(key)
            .collect();
        let mut stray: Vec<_> = counts
            .iter()
            .filter(|(k, _)| k.starts_with(&namespace) && !expected.contains(*k))
            .collect();
        stray.sort();
        if !stray.is_empty() {
            problems.push(format!("counters of keys outside the batch: {stray:?}"));
        }
    } else {
        for id in &ids {
            if seen.count(&key(id)) == 0 {
                problems.push(format!("{id}: the handler never ran"));
            }
        }
    }
    problems
}

/// The fault before the batch, mid-batch and from a handler, at once, on rigs of their own.
async fn both<R: Rig, F: Future<Output = R>>(make: impl Fn() -> F, fault: Fault, effects: bool) {
    init_logs();
    let (before, mid, in_handler) = tokio::join!(
        async { scenario(make().await, fault, When::Before, effects).await },
        async { scenario(make().await, fault, When::MidBatch, effects).await },
        async { scenario(make().await, fault, When::InHandler, effects).await },
    );
    let problems: Vec<String> = before.into_iter().chain(mid).chain(in_handler).collect();
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

macro_rules! fault_tests {
    ($($name:ident: $make:expr, $fault:expr, $effects:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            both($make, $fault, $effects).await;
        }
    )*};
}

fault_tests! {
    dynamodb_stall: Dynamo::new, Fault::Stall, true;
    dynamodb_dark: Dynamo::new, Fault::Dark, true;
    dynamodb_drop_answer: Dynamo::new, Fault::DropAnswer, true;
    dynamodb_reset: Dynamo::new, Fault::Reset, true;
    dynamodb_dark_no_effects: Dynamo::new, Fault::Dark, false;

    postgres_stall: Pg::new, Fault::Stall, true;
    postgres_dark: Pg::new, Fault::Dark, true;
    postgres_drop_answer: Pg::new, Fault::DropAnswer, true;
    postgres_reset: Pg::new, Fault::Reset, true;
    postgres_dark_no_effects: Pg::new, Fault::Dark, false;

    redis_stall: Redis::new, Fault::Stall, true;
    redis_dark: Redis::new, Fault::Dark, true;
    redis_drop_answer: Redis::new, Fault::DropAnswer, true;
    redis_reset: Redis::new, Fault::Reset, true;
    redis_dark_no_effects: Redis::new, Fault::Dark, false;

    tiered_cache_stall: || Tiered::new(Tier::Cache), Fault::Stall, true;
    tiered_cache_dark: || Tiered::new(Tier::Cache), Fault::Dark, true;
    tiered_cache_drop_answer: || Tiered::new(Tier::Cache), Fault::DropAnswer, true;
    tiered_cache_reset: || Tiered::new(Tier::Cache), Fault::Reset, true;
    tiered_durable_stall: || Tiered::new(Tier::Durable), Fault::Stall, true;
    tiered_durable_dark: || Tiered::new(Tier::Durable), Fault::Dark, true;
    tiered_durable_drop_answer: || Tiered::new(Tier::Durable), Fault::DropAnswer, true;
    tiered_durable_reset: || Tiered::new(Tier::Durable), Fault::Reset, true;
    tiered_durable_dark_no_effects: || Tiered::new(Tier::Durable), Fault::Dark, false;
}

// ---------------------------------------------------------------------------------------------
// Dark and slow: a store that stopped answering fails fast; a store that answers late is used
// ---------------------------------------------------------------------------------------------

/// Messages of a dark or slow batch (distinct keys).
const LONG_BATCH: usize = 60;

/// Messages in flight at most in the dark and slow runs.
const DARK_CONCURRENCY: usize = 16;

/// The lease of a claim without a deadline in the dark and slow runs: what the timed-out claims
/// wrote, once the partition heals and TCP delivers them, lapses this soon.
const SHORT_LEASE: Duration = Duration::from_secs(3);

/// The deadline of the dark runs under Lambda: more than one store timeout (5 s at most) plus
/// the deadline margin (2 s), so that the dark store, not the deadline, ends the batch.
const LAMBDA_BUDGET: Duration = Duration::from_secs(10);

/// A processor on `store` whose handler records each key it runs and returns one effect: +1 on
/// the key's counter.
// The handler's type is only ever named here.
#[allow(clippy::type_complexity)]
fn counting<R: Rig>(
    rig: &R,
    store: R::Store,
    namespace: &str,
    seen: &Seen,
    concurrency: Option<usize>,
) -> Processor<
    R::Store,
    impl tower::Service<
        Message,
        Response = Effects<<R::Store as ClaimStore>::Effect>,
        Error = BoxError,
        Future = impl Future<Output = Result<Effects<<R::Store as ClaimStore>::Effect>, BoxError>>
                 + Send
                 + 'static,
    > + Clone
    + Send
    + Sync
    + 'static,
> {
    let increment = rig.increment();
    let seen = seen.clone();
    let handler = service_fn(move |msg: Message| {
        let seen = seen.clone();
        let increment = Arc::clone(&increment);
        async move {
            let key = msg.key().ok_or("the message has no key")?.to_owned();
            seen.saw(&key);
            Ok::<_, BoxError>(Effects::one(increment(&key)))
        }
    });
    let builder = Processor::builder(store, handler)
        .namespace(namespace)
        .clock(Clock::system())
        .lease_policy(sqs_claim::Lease::until_deadline(SHORT_LEASE));
    match concurrency {
        Some(c) => builder.concurrency(c).build(),
        None => builder.build(),
    }
}

/// What a dark or slow run found: its problems, and its figure for the printed table.
struct Ran {
    problems: Vec<String>,
    figure: String,
}

/// 60 messages on `rig`'s store gone dark after a healthy warm-up, without a deadline (as
/// `payments invoke`) or under one (as Lambda): every message reported for retry, none run,
/// the not-started ones reported at once as "store dark", naming the store. Then healed: every
/// message processed on redelivery, each effect applied exactly once.
async fn dark_batch<R: Rig>(rig: &R, lambda: bool) -> Ran {
    let mut problems = Vec::new();
    let seen = Seen::new();
    let namespace = format!("dark-{}", uuid::Uuid::new_v4().simple());
    // Fewer in flight than the batch on every store (as PostgreSQL's pool of 16 does by
    // itself): some messages have not started when the first timeouts come.
    let p = counting(
        rig,
        rig.bounded().await,
        &namespace,
        &seen,
        Some(DARK_CONCURRENCY),
    );
    let key = |id: &str| format!("{namespace}#{id}");
    let warm = p.process(event(&[rec("warm", "{}")])).await;
    if !warm
        .as_ref()
        .is_ok_and(|r| r.response().batch_item_failures.is_empty())
    {
        return Ran {
            problems: vec![format!(
                "the warm-up failed: {:?}",
                warm.map(|r| r.to_json())
            )],
            figure: String::new(),
        };
    }
    let batch: Vec<Rec> = (0..LONG_BATCH)
        .map(|i| rec(&format!("d{i:02}"), "{}"))
        .collect();
    let ids: Vec<String> = (0..LONG_BATCH).map(|i| format!("d{i:02}")).collect();
    rig.proxy().set(Fault::Dark);
    let deadline_ms = if lambda {
        support::batch::deadline_in(&Clock::system(), LAMBDA_BUDGET)
    } else {
        0
    };
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(120),
        p.process(event_with_deadline(&batch, deadline_ms)),
    )
    .await;
    let took = started.elapsed();
    let mut figure = format!(
        "{}, dark, {}: answered in {} ms",
        rig.name(),
        if lambda {
            "under a deadline"
        } else {
            "no deadline"
        },
        took.as_millis()
    );
    match result {
        Err(_) => problems.push("process had not returned after 120 s".into()),
        Ok(Err(e)) => problems.push(format!("process failed: {e}")),
        Ok(Ok(report)) => {
            problems.extend(check_accounted(&report, &batch, &ids));
            let reported = failed_ids(&report.response());
            if reported.len() != LONG_BATCH {
                problems.push(format!(
                    "every message must be reported for retry, {} were: {}",
                    reported.len(),
                    summary(&report)
                ));
            }
            let dark: Vec<&Outcome> = report
                .items()
                .iter()
                .map(|i| &i.outcome)
                .filter(|o| matches!(o, Outcome::Failed(f) if f.message.contains("store dark")))
                .collect();
            if dark.is_empty() {
                problems.push(format!(
                    "no message was reported as \"store dark\": {}",
                    report.to_json()
                ));
            }
            for outcome in &dark {
                if let Outcome::Failed(f) = outcome
                    && (f.kind != sqs_claim::FailureKind::StoreUnavailable
                        || !f.message.contains(rig.store_word()))
                {
                    problems.push(format!(
                        "a store-dark report must be store_unavailable and name {}: {f:?}",
                        rig.store_word()
                    ));
                }
            }
            figure = format!(
                "{figure}: {} ({} of them store dark)",
                summary(&report),
                dark.len()
            );
        }
    }
    for id in &ids {
        if seen.count(&key(id)) > 0 {
            problems.push(format!("{id}: the handler ran on a dark store"));
        }
    }

    // Healed: once the claims that reached the server lapse, every message is processed.
    rig.proxy().set(Fault::Pass);
    let lease_end = SystemTime::now() + if lambda { LAMBDA_BUDGET } else { SHORT_LEASE };
    sleep_past(lease_end).await;
    let mut pending: Vec<usize> = (0..LONG_BATCH).collect();
    for _ in 0..ROUNDS {
        if pending.is_empty() {
            break;
        }
        let again: Vec<Rec> = pending.iter().map(|&i| batch[i].clone()).collect();
        if let Ok(report) = p.process(event(&again)).await {
            let done: HashSet<&str> = report
                .items()
                .iter()
                .filter(|i| i.outcome.is_success())
                .map(|i| i.message_id.as_str())
                .collect();
            pending.retain(|&i| !done.contains(ids[i].as_str()));
        }
        if !pending.is_empty() {
            tokio::time::sleep(SHORT_LEASE).await;
        }
    }
    if !pending.is_empty() {
        problems.push(format!(
            "{} messages never processed once healed",
            pending.len()
        ));
    }
    let counts = rig.counts().await;
    for id in &ids {
        match counts.get(&key(id)) {
            Some(1) => {}
            Some(n) => problems.push(format!("{id}: its effect was applied {n} times")),
            None => problems.push(format!("{id}: its effect was never applied")),
        }
    }
    Ran { problems, figure }
}

/// 60 messages on `rig`'s store with every answer `min..=max` late (under the store's
/// timeout), or with `fault` in force: all processed, none reported, each effect applied once.
async fn answering_batch<R: Rig>(rig: &R, fault: Fault) -> Ran {
    let mut problems = Vec::new();
    let seen = Seen::new();
    let namespace = format!("slow-{}", uuid::Uuid::new_v4().simple());
    let p = counting(
        rig,
        rig.bounded().await,
        &namespace,
        &seen,
        Some(DARK_CONCURRENCY),
    );
    let key = |id: &str| format!("{namespace}#{id}");
    let batch: Vec<Rec> = (0..LONG_BATCH)
        .map(|i| rec(&format!("s{i:02}"), "{}"))
        .collect();
    let ids: Vec<String> = (0..LONG_BATCH).map(|i| format!("s{i:02}")).collect();
    let warm = p.process(event(&[rec("warm", "{}")])).await;
    if !warm
        .as_ref()
        .is_ok_and(|r| r.response().batch_item_failures.is_empty())
    {
        return Ran {
            problems: vec![format!(
                "the warm-up failed: {:?}",
                warm.map(|r| r.to_json())
            )],
            figure: String::new(),
        };
    }
    rig.proxy().set(fault);
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(300), p.process(event(&batch))).await;
    let took = started.elapsed();
    rig.proxy().set(Fault::Pass);
    let mut figure = format!(
        "{}, {fault:?}: answered in {} ms",
        rig.name(),
        took.as_millis()
    );
    match result {
        Err(_) => problems.push("process had not returned after 300 s".into()),
        Ok(Err(e)) => problems.push(format!("process failed: {e}")),
        Ok(Ok(report)) => {
            problems.extend(check_accounted(&report, &batch, &ids));
            if report
                .items()
                .iter()
                .any(|i| i.outcome != Outcome::Processed)
            {
                problems.push(format!(
                    "every message must be processed, nothing reported: {}",
                    report.to_json()
                ));
            }
            figure = format!(
                "{figure}: {} (concurrency {})",
                summary(&report),
                p.concurrency()
            );
        }
    }
    let counts = rig.counts().await;
    for id in &ids {
        if seen.count(&key(id)) != 1 {
            problems.push(format!(
                "{id}: the handler ran {} times",
                seen.count(&key(id))
            ));
        }
        if counts.get(&key(id)) != Some(&1) {
            problems.push(format!("{id}: effect count {:?}", counts.get(&key(id))));
        }
    }
    Ran { problems, figure }
}

async fn check(runs: Vec<Ran>) {
    let mut problems = Vec::new();
    for run in runs {
        eprintln!("{}", run.figure);
        problems.extend(
            run.problems
                .into_iter()
                .map(|p| format!("{}: {p}", run.figure)),
        );
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// Dark without a deadline and under one, at once, on rigs of their own.
async fn dark_both<R: Rig, F: Future<Output = R>>(make: impl Fn() -> F) {
    init_logs();
    let (cli, lambda) = tokio::join!(
        async {
            let rig = make().await;
            let ran = dark_batch(&rig, false).await;
            rig.cleanup().await;
            ran
        },
        async {
            let rig = make().await;
            let ran = dark_batch(&rig, true).await;
            rig.cleanup().await;
            ran
        },
    );
    check(vec![cli, lambda]).await;
}

/// A slow store: answers `min..=max` late.
fn slow(min_ms: u64, max_ms: u64) -> Fault {
    Fault::Slow {
        min: Duration::from_millis(min_ms),
        max: Duration::from_millis(max_ms),
    }
}

async fn answering<R: Rig, F: Future<Output = R>>(make: impl Fn() -> F, fault: Fault) {
    init_logs();
    let rig = make().await;
    let ran = answering_batch(&rig, fault).await;
    rig.cleanup().await;
    check(vec![ran]).await;
}

macro_rules! dark_tests {
    ($($name:ident: $make:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            dark_both($make).await;
        }
    )*};
}

dark_tests! {
    dynamodb_gone_dark_fails_the_batch_fast: Dynamo::new;
    postgres_gone_dark_fails_the_batch_fast: Pg::new;
    redis_gone_dark_fails_the_batch_fast: Redis::new;
    tiered_durable_gone_dark_fails_the_batch_fast: || Tiered::new(Tier::Durable);
}

macro_rules! answering_tests {
    ($($name:ident: $make:expr, $fault:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            answering($make, $fault).await;
        }
    )*};
}

// Each store's calls answer late, under its own bound: DynamoDB's attempt timeout and Redis'
// response timeout are 2 s (one round trip a call); PostgreSQL's call timeout is 5 s for a
// call of several round trips (a completion: begin, update, the effect, commit), each late.
answering_tests! {
    dynamodb_slow_is_used_not_failed: Dynamo::new, slow(500, 1500);
    postgres_slow_is_used_not_failed: Pg::new, slow(250, 1000);
    redis_slow_is_used_not_failed: Redis::new, slow(500, 1500);
    tiered_durable_slow_is_used_not_failed: || Tiered::new(Tier::Durable), slow(250, 1000);
    // Its cache dark, the tiered store still answers (from PostgreSQL): not a dark store.
    tiered_cache_dark_is_used_not_failed: || Tiered::new(Tier::Cache), Fault::Dark;
}
