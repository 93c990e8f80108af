//! Benchmarks that print a ratio against a baseline measured in the same run.
//!
//! `cargo bench --bench processor` (or `make bench`). Two questions:
//!
//! 1. **Latency-bound batches** (what dominates in Lambda): a store with a simulated round trip
//!    (default 4 ms, about a same-region DynamoDB write). Baseline: the sequential loop
//!    Powertools' batch utility runs (claim, handle, complete, one message after another: 20
//!    round trips for 10 messages). Measured: `Processor` with its default concurrency.
//! 2. **CPU overhead** of the processor per message (keys, claims, outcomes, response) over the
//!    in-memory store, against a baseline that only decodes each body and calls the handler.
//!
//! Then the cost of boxing a store ([`BoxStore`]): the same workload as (2) over
//! `BoxStore::new(MemoryStore)` and over the `MemoryStore` itself, alternated in one run, as a
//! ratio and as the time per message it adds, a share of a message's client CPU (goal: under
//! 1%). Two shares: of the whole processor over the memory store (no network client at all: the
//! least CPU a message costs, so the share is the largest it can be), and of the client CPU of a
//! message on DynamoDB (`SQS_CLAIM_BENCH_CLIENT_CPU_US`, default 50 µs: the lowest figure of
//! `make bench`, a packed credit at N = 1000, in the README).
//!
//! Set `SQS_CLAIM_BENCH_RTT_MS` to change the simulated round trip.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lambda_runtime::{Context, LambdaEvent};
use sqs_claim::events::{SqsEvent, SqsMessage};
use sqs_claim::store::{BoxStore, Capabilities, ClaimStore};
use sqs_claim::{Error, KeySource, MemoryStore, Message, Processor};
use sqs_claim_testkit::store::{Action, Spy};
use tower::service_fn;

mod support;
use support::{median, sequential_baseline};

/// A memory store behind a simulated network round trip on every call. It says what the
/// trait's default says of a store (10 calls in flight), so the processor's default concurrency
/// is a real store's, not the memory store's.
fn slow_store(rtt: Duration) -> Spy<MemoryStore> {
    Spy::new(MemoryStore::new())
        .on_call(move |_| Action::Delay(rtt))
        .map_capabilities(|_| Capabilities::new())
}

#[derive(serde::Deserialize)]
struct Payment {
    #[allow(dead_code)]
    order_id: String,
    amount_cents: i64,
}

fn event(n: usize, run: usize) -> SqsEvent {
    let records = (0..n)
        .map(|i| {
            let mut m = SqsMessage::default();
            m.message_id = Some(format!("{run}-{i}-{}", uuid::Uuid::new_v4()));
            m.body = Some(format!(
                r#"{{"order_id":"o-{run}-{i}","account":"acct-{}","amount_cents":{}}}"#,
                i % 7,
                100 + i
            ));
            m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:payments".into());
            m
        })
        .collect();
    let mut e = SqsEvent::default();
    e.records = records;
    e
}

/// The time `process` takes for `ev` with a processor over `store` (built before the clock
/// starts), its handler decoding each body and adding its amount to `total`.
async fn timed_batch<S: ClaimStore>(store: S, ev: SqsEvent, total: &Arc<AtomicU64>) -> Duration {
    let processor = Processor::builder(store, summing(total))
        .key(KeySource::JsonPointer("/order_id".into()))
        .namespace("bench")
        .build();
    let n = ev.records.len();
    let start = Instant::now();
    let report = processor
        .process(LambdaEvent::new(ev, Context::default()))
        .await
        .expect("process");
    let took = start.elapsed();
    assert_eq!(report.counts().processed, n);
    black_box(report);
    took
}

/// The benchmarks' handler: decodes a payment and adds its amount to `total`.
fn summing(
    total: &Arc<AtomicU64>,
) -> impl tower::Service<Message, Response = (), Error = Error, Future: Send>
+ Clone
+ Send
+ Sync
+ 'static {
    let t = Arc::clone(total);
    service_fn(move |m: Message| {
        let t = Arc::clone(&t);
        async move {
            let p: Payment = m.json()?;
            t.fetch_add(p.amount_cents as u64, Ordering::Relaxed);
            Ok::<(), Error>(())
        }
    })
}

fn main() {
    // `cargo test --benches` runs bench targets with no `--bench` flag: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let rtt_ms: u64 = std::env::var("SQS_CLAIM_BENCH_RTT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let rtt = Duration::from_millis(rtt_ms);

    rt.block_on(async {
        println!("== latency-bound batch (simulated store round trip {rtt_ms} ms)");
        for batch in [10usize, 100] {
            let total = Arc::new(AtomicU64::new(0));
            let store = slow_store(rtt);
            let processor = Processor::builder(store.clone(), summing(&total))
                .key(KeySource::JsonPointer("/order_id".into()))
                .namespace("bench")
                .build();
            let runs = 7;
            let mut base = Vec::new();
            let mut ours = Vec::new();
            for run in 0..runs {
                let ev = event(batch, run);
                let start = Instant::now();
                sequential_baseline(&store, &ev, |body| {
                    if let Ok(p) = serde_json::from_str::<Payment>(body) {
                        total.fetch_add(p.amount_cents as u64, Ordering::Relaxed);
                    }
                })
                .await;
                base.push(start.elapsed());

                let ev = event(batch, 1000 + run);
                let start = Instant::now();
                let report = processor
                    .process(LambdaEvent::new(ev, Context::default()))
                    .await
                    .expect("process");
                ours.push(start.elapsed());
                assert_eq!(report.counts().processed, batch);
            }
            let (b, o) = (median(base), median(ours));
            println!(
                "batch {batch:>4}: sequential baseline {:>8.1} ms | sqs-claim {:>8.1} ms | speed-up x{:.1}",
                b.as_secs_f64() * 1e3,
                o.as_secs_f64() * 1e3,
                b.as_secs_f64() / o.as_secs_f64()
            );
        }

        println!("== CPU overhead per message (in-memory store, batch of 1000)");
        let batch = 1000;
        let runs = 15;
        let mut base = Vec::new();
        let mut ours = Vec::new();
        let total = Arc::new(AtomicU64::new(0));
        for run in 0..runs {
            let ev = event(batch, 5000 + run);
            let start = Instant::now();
            for m in ev.records {
                let msg = Message::new(m, None);
                if let Ok(p) = msg.json::<Payment>() {
                    total.fetch_add(p.amount_cents as u64, Ordering::Relaxed);
                }
                black_box(&msg);
            }
            base.push(start.elapsed());

            let handler = summing(&total);
            let processor = Processor::builder(MemoryStore::new(), handler)
                .key(KeySource::JsonPointer("/order_id".into()))
                .namespace("bench")
                .build();
            let ev = event(batch, 9000 + run);
            let start = Instant::now();
            let report = processor
                .process(LambdaEvent::new(ev, Context::default()))
                .await
                .expect("process");
            ours.push(start.elapsed());
            black_box(report);
        }
        let (b, o) = (median(base), median(ours));
        let per = |d: Duration| d.as_secs_f64() * 1e9 / batch as f64;
        println!(
            "decode + handler only {:>8.0} ns/msg | full processor {:>8.0} ns/msg | overhead x{:.2} ({:.1} µs/msg added)",
            per(b),
            per(o),
            o.as_secs_f64() / b.as_secs_f64(),
            (per(o) - per(b)) / 1e3
        );

        println!("== BoxStore against the unboxed MemoryStore (batch of {batch}, same run)");
        let client_cpu_us: f64 = std::env::var("SQS_CLAIM_BENCH_CLIENT_CPU_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(50.0);
        let runs = 101;
        let (mut plain, mut boxed, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            let (p_ev, b_ev) = (event(batch, 20_000 + run), event(batch, 30_000 + run));
            // Alternate which goes first, so warm-up and drift fall on both alike.
            let (p, b) = if run % 2 == 0 {
                let p = timed_batch(MemoryStore::new(), p_ev, &total).await;
                let b = timed_batch(BoxStore::new(MemoryStore::new()), b_ev, &total).await;
                (p, b)
            } else {
                let b = timed_batch(BoxStore::new(MemoryStore::new()), b_ev, &total).await;
                let p = timed_batch(MemoryStore::new(), p_ev, &total).await;
                (p, b)
            };
            ratios.push(b.as_secs_f64() / p.as_secs_f64());
            plain.push(p);
            boxed.push(b);
        }
        ratios.sort_by(f64::total_cmp);
        let ratio = ratios[ratios.len() / 2];
        let (p, b) = (median(plain), median(boxed));
        // From the median ratio of the pairs (each pair measured seconds apart), which drift
        // between pairs does not move as it moves the medians of each side.
        let added_ns = (ratio - 1.0) * per(p);
        println!(
            "MemoryStore {:>8.0} ns/msg | BoxStore {:>8.0} ns/msg | ratio boxed/unboxed x{ratio:.3} \
             (median of {runs} pairs) | {added_ns:+.0} ns/msg: {:+.2}% of the in-memory processor's \
             CPU per message, {:+.3}% of a DynamoDB message's {client_cpu_us:.0} µs client CPU",
            per(p),
            per(b),
            added_ns / per(p) * 100.0,
            added_ns / (client_cpu_us * 1e3) * 100.0,
        );
        black_box(total.load(Ordering::Relaxed));

        lease_cost(&total).await;
    });
}

/// What the extended lease (the default) costs a warm batch of 1,000 whose handlers end well
/// inside their first lease, against `Lease::until_deadline` (the lease before it was
/// extended), alternated in one run: store requests per message (counted by a spy) and CPU per
/// message. Goal: the same requests, and no measurable CPU.
async fn lease_cost(total: &Arc<AtomicU64>) {
    use sqs_claim::{Clock, Lease};
    println!(
        "== the lease: Lease::extended (default) vs Lease::until_deadline, batch of 1000, 60 s deadline"
    );
    let batch = 1000;
    let runs = 21;
    let run_one = |lease: Lease, run: usize| {
        let total = Arc::clone(total);
        async move {
            let store = Spy::new(MemoryStore::new());
            let processor = Processor::builder(store.clone(), summing(&total))
                .key(KeySource::JsonPointer("/order_id".into()))
                .namespace("bench")
                .lease_policy(lease)
                .build();
            let mut context = Context::default();
            let deadline = Clock::system().now() + Duration::from_secs(60);
            context.deadline = sqs_claim::store::epoch_millis(deadline) as u64;
            let ev = event(batch, run);
            let start = Instant::now();
            let report = processor
                .process(LambdaEvent::new(ev, context))
                .await
                .expect("process");
            let took = start.elapsed();
            assert_eq!(report.counts().processed, batch);
            (took, store.calls())
        }
    };
    let (mut old, mut new, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut old_calls, mut new_calls) = (0, 0);
    for run in 0..runs {
        let until = Lease::until_deadline(Duration::from_secs(300));
        let extended = Lease::default();
        let ((o, oc), (n, nc)) = if run % 2 == 0 {
            let o = run_one(until, 40_000 + run).await;
            (o, run_one(extended, 50_000 + run).await)
        } else {
            let n = run_one(extended, 50_000 + run).await;
            (run_one(until, 40_000 + run).await, n)
        };
        ratios.push(n.as_secs_f64() / o.as_secs_f64());
        old.push(o);
        new.push(n);
        old_calls += oc;
        new_calls += nc;
    }
    ratios.sort_by(f64::total_cmp);
    let per = |d: Duration| d.as_secs_f64() * 1e9 / batch as f64;
    let msgs = (runs * batch) as f64;
    println!(
        "until_deadline {:.2} requests/msg, {:>6.0} ns/msg | extended {:.2} requests/msg, {:>6.0} ns/msg | \
         requests ratio x{:.3} | CPU ratio x{:.3} (median of {runs} pairs)",
        old_calls as f64 / msgs,
        per(median(old)),
        new_calls as f64 / msgs,
        per(median(new)),
        new_calls as f64 / old_calls as f64,
        ratios[ratios.len() / 2],
    );
}
