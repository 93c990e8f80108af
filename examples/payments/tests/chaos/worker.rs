//! One invocation, in a process of its own (this test binary, run with `--chaos-worker`): the
//! reference payments consumer over the batch on stdin, as Lambda would run it, with a deadline.
//!
//! It opens its store first (Lambda's init phase; every store here connects lazily, so this
//! touches no network), then takes its deadline, `CHAOS_WORKER_BUDGET_MS` from now, and
//! processes the batch. It prints one JSON line on stdout: when it started, its deadline, when
//! the processor answered, every message's outcome, and the batch response's failures. A worker killed before it answers
//! prints nothing, as a Lambda killed at its timeout answers nothing.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use lambda_runtime::{Context, LambdaEvent};
use payments::{Ledger, PaymentHandler};
use serde_json::json;
use sqs_claim::events::SqsEvent;
use sqs_claim::store::{ClaimStore, epoch_millis};
use sqs_claim::{Effects, KeySource, Message, Processor};
use tower::Service;

use crate::stores::{Spec, open};

pub const SPEC: &str = "CHAOS_WORKER_SPEC";
pub const MODE: &str = "CHAOS_WORKER_MODE";
pub const NAMESPACE: &str = "CHAOS_WORKER_NAMESPACE";
pub const BUDGET_MS: &str = "CHAOS_WORKER_BUDGET_MS";
pub const SEED: &str = "CHAOS_WORKER_SEED";

/// The message attribute that differs on every delivery: the control run keys on it, so no
/// two deliveries of one message ever share a key (deduplication off).
pub const DELIVERY_ATTRIBUTE: &str = "delivery";

/// No message starts later than this before the deadline.
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(1000);
/// The handler takes up to this long per message (a payment provider's round trip), so kills
/// and stalls land between a claim and its completion, not only around them.
const HANDLER_DELAY_MAX_MS: u64 = 300;

pub fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: chaos worker: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(line) => {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: chaos worker: {e}");
            ExitCode::FAILURE
        }
    }
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name)
        .map_err(|_| format!("{name} is not set (this process is started by the chaos driver)"))
}

async fn run() -> Result<String, String> {
    let spec: Spec = serde_json::from_str(&var(SPEC)?)
        .map_err(|e| format!("{SPEC} is not a store spec: {e}"))?;
    let key = match var(MODE)?.as_str() {
        "dedup" => KeySource::JsonPointer("/order_id".into()),
        "control" => KeySource::MessageAttribute(DELIVERY_ATTRIBUTE.into()),
        other => return Err(format!("{MODE}: unknown mode {other:?}")),
    };
    let budget = Duration::from_millis(
        var(BUDGET_MS)?
            .parse()
            .map_err(|e| format!("{BUDGET_MS}: {e}"))?,
    );
    let seed: u64 = var(SEED)?.parse().map_err(|e| format!("{SEED}: {e}"))?;
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| format!("cannot read the event on stdin: {e}"))?;
    let event: SqsEvent =
        serde_json::from_str(&input).map_err(|e| format!("the event on stdin: {e}"))?;
    let task = Invoke {
        event,
        key,
        namespace: var(NAMESPACE)?,
        budget,
        seed,
    };
    let ledger = open(&spec).await?;
    task.run(ledger).await
}

struct Invoke {
    event: SqsEvent,
    key: KeySource,
    namespace: String,
    budget: Duration,
    seed: u64,
}

impl Invoke {
    /// The invocation on `ledger`, whichever store it is on.
    async fn run<L: Ledger>(self, ledger: L) -> Result<String, String> {
        let handler = Slow {
            inner: PaymentHandler::new(ledger.clone()),
            rng: Arc::new(Mutex::new(fastrand::Rng::with_seed(self.seed))),
        };
        let processor = Processor::builder(ledger.store().clone(), handler)
            .key(self.key)
            .namespace(self.namespace)
            .ttl(Duration::from_secs(3600))
            .concurrency(4)
            .deadline_margin(DEADLINE_MARGIN)
            .build();
        let started = SystemTime::now();
        let deadline = started + self.budget;
        let mut context = Context::default();
        context.deadline = u64::try_from(epoch_millis(deadline)).unwrap_or_default();
        let report = processor
            .process(LambdaEvent::new(self.event, context))
            .await
            .map_err(|e| format!("the batch was refused: {e}"))?;
        let answered = SystemTime::now();
        let json = report.to_json();
        Ok(json!({
            "started_ms": epoch_millis(started),
            "deadline_ms": epoch_millis(deadline),
            "answered_ms": epoch_millis(answered),
            "outcomes": json["outcomes"],
            // What Lambda sees: SQS deletes every message of the batch not listed here.
            "retry": json["response"]["batchItemFailures"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["itemIdentifier"].as_str())
                .collect::<Vec<_>>(),
        })
        .to_string())
    }
}

/// The reference handler after a random pause.
#[derive(Clone)]
struct Slow<L> {
    inner: PaymentHandler<L>,
    rng: Arc<Mutex<fastrand::Rng>>,
}

/// The effect type of ledger `L`'s store.
type EffectOf<L> = <<L as Ledger>::Store as ClaimStore>::Effect;

impl<L: Ledger> Service<Message> for Slow<L> {
    type Response = Effects<EffectOf<L>>;
    type Error = sqs_claim::Error;
    type Future = BoxFuture<'static, Result<Effects<EffectOf<L>>, sqs_claim::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, msg: Message) -> Self::Future {
        let delay = match self.rng.lock() {
            Ok(mut rng) => rng.u64(0..=HANDLER_DELAY_MAX_MS),
            Err(_) => 0,
        };
        let call = self.inner.call(msg);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            call.await
        })
    }
}
