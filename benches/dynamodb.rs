//! The Rust side of `make bench` (scripts/bench/compare.py): one process per run, on DynamoDB
//! Local (directly, or behind the delay proxy of `benches/delay_proxy.rs`).
//!
//! * `--impl sqs-claim`: the library's `Processor` over `DynamoDbStore::from_env` with every
//!   builder default except the key (the body's `order_id`, as the other implementations use)
//!   and a trivial handler (it parses the body). Later changes to the defaults (concurrency,
//!   settings) show up here without editing the bench.
//! * `--impl sqs-claim-one-shot`: the processor in one-shot mode, no effects (one conditional
//!   `PutItem` per message).
//! * `--impl sqs-claim-credit`: the example's real write, one-shot with an effect: the claim
//!   and a credit to an item of the message's own in one transaction, packed several per
//!   `TransactWriteItems`.
//! * `--impl bare`: the floor. For each message a conditional `PutItem` claim and an
//!   `UpdateItem` completion with `aws-sdk-dynamodb` directly, as many in flight as the
//!   processor's default concurrency (read from the builder, see [`default_concurrency`]).
//!
//! The protocol every worker of compare.py follows: read the event file, create the table, run
//! the warm-up batch, print `ready`, wait for a line on stdin, process every timed batch, print
//! one JSON line: `{"walls": [s, ...], "cpu": s, "ok": n, "failed": n, "vmhwm_kib": n, ...}`.
//! The CPU is user+sys of this process (getrusage) over the timed batches only; `vmhwm_kib` the
//! process's peak resident set, start-up included.
//!
//! With no `--impl` (how `cargo bench` and `cargo test --benches` call every bench target) it
//! does nothing: the comparison needs compare.py to start DynamoDB Local's proxy, the other
//! implementations and to read the figures.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TransactWriteItem, Update,
};
use futures::StreamExt;
use lambda_runtime::{Context, LambdaEvent};
use sqs_claim::events::SqsEvent;
use sqs_claim::store::StoreAdmin;
use sqs_claim::{DynamoDbStore, Error, KeySource, Message, Processor};
use tower::service_fn;

#[derive(serde::Deserialize)]
struct Input {
    warmup: SqsEvent,
    batches: Vec<SqsEvent>,
}

struct Args {
    imp: String,
    events: String,
    table: String,
    /// A what-if: replaces the processor's default concurrency (both implementations).
    concurrency: Option<usize>,
}

fn args() -> Option<Args> {
    let argv: Vec<String> = std::env::args().collect();
    let get = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    };
    Some(Args {
        imp: get("--impl")?,
        events: get("--events")?,
        table: get("--table")?,
        concurrency: get("--concurrency").and_then(|v| v.parse().ok()),
    })
}

/// User+sys CPU seconds of this process, every thread included.
fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one whole `rusage` through the pointer, which points at a
    // zeroed value of that type that lives across the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return f64::NAN;
    }
    // SAFETY: zero-initialised and, on success, filled in by the kernel.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn trivial_handler() -> impl tower::Service<
    Message,
    Response = (),
    Error = Error,
    Future = impl Future<Output = Result<(), Error>> + Send,
> + Clone
+ Send
+ Sync
+ 'static {
    service_fn(|m: Message| async move {
        let _: serde_json::Value = m.json()?;
        Ok::<(), Error>(())
    })
}

/// This process's peak resident set in KiB (`VmHWM`). Not getrusage's `ru_maxrss`: that one
/// keeps the high-water mark of the parent that forked us (the bench driver) across `exec`.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn report(walls: &[f64], cpu: f64, ok: usize, failed: usize, extra: serde_json::Value) {
    let mut out = serde_json::json!({
        "walls": walls, "cpu": cpu, "ok": ok, "failed": failed, "vmhwm_kib": peak_rss_kib(),
    });
    if let (Some(o), serde_json::Value::Object(e)) = (out.as_object_mut(), extra) {
        o.extend(e);
    }
    println!("{out}");
}

fn wait_for_go() {
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Builds the processor (with the what-if concurrency, if any) and runs the timed batches
/// through it: the same for every processor-based worker, whatever its handler type.
macro_rules! serve {
    ($input:expr, $builder:expr, $what_if:expr) => {{
        let mut builder = $builder;
        if let Some(n) = $what_if {
            builder = builder.concurrency(n);
        }
        let processor = builder.build();
        let concurrency = processor.concurrency();
        let config = format!("{processor:?}");
        timed(
            $input,
            move |event| {
                let p = processor.clone();
                async move { p.process(event).await }
            },
            config,
            Some(concurrency),
        )
        .await
    }};
}

/// The processor in one-shot mode: the same trivial handler (it parses the body) as a function
/// with no effects, then one write per message.
async fn run_one_shot(input: Input, table: &str, what_if: Option<usize>) -> Result<(), String> {
    let store = DynamoDbStore::from_env(table).await;
    store
        .init()
        .await
        .map_err(|e| format!("create table: {e}"))?;
    let builder = Processor::one_shot(store, |m: &Message| {
        let _: serde_json::Value = m.json()?;
        Ok(sqs_claim::Effects::none())
    })
    .key(KeySource::JsonPointer("/order_id".into()))
    .namespace("bench");
    serve!(input, builder, what_if)
}

/// The example's real write: one-shot, the claim and a credit (`ADD balance`) on an accounts
/// table in one transaction, on an item of its own per message (the account is the order id:
/// distinct items, so nothing contends), packed several per `TransactWriteItems`.
async fn run_credit(input: Input, table: &str, what_if: Option<usize>) -> Result<(), String> {
    let store = DynamoDbStore::from_env(table).await;
    store
        .init()
        .await
        .map_err(|e| format!("create table: {e}"))?;
    let accounts = format!("{table}-accounts");
    // The accounts table: string partition key `account` (created as a claims table with that
    // key layout, which is the same table shape plus a TTL attribute).
    DynamoDbStore::from_env(&accounts)
        .await
        .with_key_schema(sqs_claim::store::dynamodb::DynamoDbKeySchema::partition(
            "account", "{key}",
        ))
        .map_err(|e| format!("accounts layout: {e}"))?
        .init()
        .await
        .map_err(|e| format!("create accounts table: {e}"))?;
    let builder = Processor::one_shot(store, move |m: &Message| {
        #[derive(serde::Deserialize)]
        struct Payment {
            order_id: String,
            amount_cents: i64,
        }
        let p: Payment = m.json()?;
        let credit = Update::builder()
            .table_name(&accounts)
            .key("account", AttributeValue::S(p.order_id))
            .update_expression("ADD balance :amount")
            .expression_attribute_values(":amount", AttributeValue::N(p.amount_cents.to_string()))
            .build()
            .map_err(|e| Error::with_source(sqs_claim::ErrorKind::StoreRejected, "credit", e))?;
        Ok(sqs_claim::Effects::one(
            TransactWriteItem::builder().update(credit).build(),
        ))
    })
    .key(KeySource::JsonPointer("/order_id".into()))
    .namespace("bench");
    serve!(input, builder, what_if)
}

async fn run_sqs_claim(input: Input, table: &str, what_if: Option<usize>) -> Result<(), String> {
    let store = DynamoDbStore::from_env(table).await;
    store
        .init()
        .await
        .map_err(|e| format!("create table: {e}"))?;
    let builder = Processor::builder(store, trivial_handler())
        .key(KeySource::JsonPointer("/order_id".into()))
        .namespace("bench");
    serve!(input, builder, what_if)
}

/// The warm-up batch, the go signal, then the timed batches through `process`, and the report.
async fn timed<F, Fut>(
    input: Input,
    process: F,
    config: String,
    concurrency: Option<usize>,
) -> Result<(), String>
where
    F: Fn(LambdaEvent<SqsEvent>) -> Fut,
    Fut: Future<Output = Result<sqs_claim::BatchReport, Error>>,
{
    let _ = process(LambdaEvent::new(input.warmup, Context::default()))
        .await
        .map_err(|e| e.to_string())?;
    wait_for_go();
    let (mut walls, mut ok, mut failed, mut duplicate) = (Vec::new(), 0, 0, 0);
    let cpu0 = cpu_seconds();
    for event in input.batches {
        let start = Instant::now();
        let report = process(LambdaEvent::new(event, Context::default()))
            .await
            .map_err(|e| e.to_string())?;
        let response = report.response();
        walls.push(start.elapsed().as_secs_f64());
        let c = report.counts();
        ok += c.processed + c.duplicate;
        duplicate += c.duplicate;
        failed += response.batch_item_failures.len();
    }
    let cpu = cpu_seconds() - cpu0;
    report(
        &walls,
        cpu,
        ok,
        failed,
        serde_json::json!({ "duplicate": duplicate, "config": config, "concurrency": concurrency }),
    );
    Ok(())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

#[derive(Default)]
struct Tally {
    ok: usize,
    duplicate: usize,
    failed: usize,
}

/// One message the floor's way: parse the body once (key and handler share it), conditional
/// claim, completion fenced by the claim's token.
async fn bare_one(client: &Client, table: &str, body: Option<&str>) -> Result<bool, String> {
    let body = body.ok_or("no body")?;
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let key = v
        .get("order_id")
        .and_then(|k| k.as_str())
        .ok_or("no order_id")?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let token = uuid::Uuid::new_v4().to_string();
    let claim = client
        .put_item()
        .table_name(table)
        .item("pk", s(key))
        .item("status", s("INPROGRESS"))
        .item("token", s(&token))
        .item("expires", n(now.as_secs() + 24 * 3600))
        .item(
            "lease",
            n((now + Duration::from_secs(300)).as_millis() as u64),
        )
        .condition_expression(
            "attribute_not_exists(pk) OR expires <= :now_s \
             OR (#status = :inprogress AND lease <= :now_ms)",
        )
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":now_s", n(now.as_secs()))
        .expression_attribute_values(":now_ms", n(now.as_millis() as u64))
        .expression_attribute_values(":inprogress", s("INPROGRESS"))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    match claim {
        Ok(_) => {}
        Err(SdkError::ServiceError(e))
            if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
        {
            return Ok(false);
        }
        Err(e) => return Err(format!("claim: {e}")),
    }
    // The handler: the body is parsed already.
    std::hint::black_box(&v);
    client
        .update_item()
        .table_name(table)
        .key("pk", s(key))
        .update_expression("SET #status = :completed")
        .condition_expression("#token = :token AND #status = :inprogress")
        .expression_attribute_names("#status", "status")
        .expression_attribute_names("#token", "token")
        .expression_attribute_values(":completed", s("COMPLETED"))
        .expression_attribute_values(":token", s(&token))
        .expression_attribute_values(":inprogress", s("INPROGRESS"))
        .send()
        .await
        .map_err(|e| format!("complete: {e}"))?;
    Ok(true)
}

async fn bare_batch(client: &Client, table: &str, event: &SqsEvent, concurrency: usize) -> Tally {
    let mut tally = Tally::default();
    let mut results = futures::stream::iter(&event.records)
        .map(|m| bare_one(client, table, m.body.as_deref()))
        .buffer_unordered(concurrency);
    while let Some(r) = results.next().await {
        match r {
            Ok(true) => tally.ok += 1,
            Ok(false) => {
                tally.ok += 1;
                tally.duplicate += 1;
            }
            Err(e) => {
                eprintln!("bare: {e}");
                tally.failed += 1;
            }
        }
    }
    tally
}

async fn run_bare(input: Input, table: &str, what_if: Option<usize>) -> Result<(), String> {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let client = Client::new(&sdk);
    let created = client
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .map_err(|e| e.to_string())?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    if let Err(e) = created {
        let in_use = e
            .as_service_error()
            .is_some_and(|e| e.is_resource_in_use_exception());
        if !in_use {
            return Err(format!("create table: {e}"));
        }
    }
    // The processor's own bound, so the floor runs as wide as sqs-claim does.
    let probe =
        Processor::builder(DynamoDbStore::new(client.clone(), table), trivial_handler()).build();
    let width = what_if.unwrap_or_else(|| probe.concurrency());
    let concurrency = Some(width);
    let debug = format!("{probe:?}");
    bare_batch(&client, table, &input.warmup, width).await;
    wait_for_go();

    let (mut walls, mut tally) = (Vec::new(), Tally::default());
    let cpu0 = cpu_seconds();
    for event in &input.batches {
        let start = Instant::now();
        let t = bare_batch(&client, table, event, width.min(event.records.len().max(1))).await;
        walls.push(start.elapsed().as_secs_f64());
        tally.ok += t.ok;
        tally.duplicate += t.duplicate;
        tally.failed += t.failed;
    }
    let cpu = cpu_seconds() - cpu0;
    report(
        &walls,
        cpu,
        tally.ok,
        tally.failed,
        serde_json::json!({
            "duplicate": tally.duplicate,
            "concurrency": concurrency,
            "config": if concurrency.is_none() { debug } else { String::new() },
        }),
    );
    Ok(())
}

fn main() {
    let Some(args) = args() else {
        return;
    };
    let input: Input = match std::fs::read_to_string(&args.events)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(i) => i,
        Err(e) => {
            eprintln!("{}: {e}", args.events);
            std::process::exit(2);
        }
    };
    // Two workers, as on the 2-vCPU machine the bench runs on; Lambda gives one vCPU per
    // 1,769 MB, so this is the upper end of what a function sees.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            std::process::exit(2);
        }
    };
    let result = rt.block_on(async {
        match args.imp.as_str() {
            "sqs-claim" => run_sqs_claim(input, &args.table, args.concurrency).await,
            "sqs-claim-one-shot" => run_one_shot(input, &args.table, args.concurrency).await,
            "sqs-claim-credit" => run_credit(input, &args.table, args.concurrency).await,
            "bare" => run_bare(input, &args.table, args.concurrency).await,
            other => {
                eprintln!("unknown --impl {other} (sqs-claim | sqs-claim-one-shot | sqs-claim-credit | bare)");
                std::process::exit(2);
            }
        }
    });
    if let Err(e) = result {
        eprintln!("{}: {e}", args.imp);
        std::process::exit(1);
    }
}
