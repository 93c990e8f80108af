//! A `main` for your consumer: serve Lambda, or process an event file on your machine.
//!
//! [`run`] is what a consumer's `main` calls. Under Lambda (`AWS_LAMBDA_RUNTIME_API` is set) it
//! serves invocations with `lambda_runtime::run`, or with `lambda_runtime::run_concurrent` when
//! `AWS_LAMBDA_MAX_CONCURRENCY` is set (Lambda Managed Instances: several invocations in flight
//! in one process). Started anywhere else, it reads an SQS event file and processes it through
//! the same processor, so your own handler runs locally exactly as Lambda would run it:
//!
//! ```text
//! my-consumer --event events/plain.json [--timeout SECS] [--report json]
//! ```
//!
//! stdout gets the partial batch response, pretty-printed (with `--report json`, every
//! message's outcome as [`BatchReport::to_json`] gives it); stderr gets a [`summary`]: the
//! counts, then one line per message that would be retried. The exit status is 0 when the batch
//! ran, even if messages failed (the response lists them), 1 when it could not run (a missing
//! file, not JSON, not an SQS event, a record without `messageId`), 2 for a usage mistake; every
//! failure is one `error: ...` line. `--timeout` is the function timeout to simulate (default
//! 30 s, as `template.yaml`'s default; `0` runs without a deadline, leases then
//! last the processor's `lease`): SQS events carry no deadline of their own.
//!
//! [`serve`] is the same for any other event: a service of `LambdaEvent<T>` (say an API
//! Gateway handler under the [idempotency layer](crate::idempotency)) is served under Lambda,
//! and called once locally with the event in `--event FILE` (an API Gateway request, say), its
//! response printed on stdout as one line of JSON, exactly as Lambda would send it:
//!
//! ```text
//! my-api --event examples/events/payment.json [--timeout SECS]
//! ```
//!
//! The exit status is 0 when the service answered, 1 when it failed (or the file could not be
//! read as the event type), with one `error: ...` line on stderr, 2 for a usage mistake.
//!
//! ```no_run
//! use sqs_claim::{MemoryStore, Message, Processor};
//! use tower::service_fn;
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     let handler = service_fn(|msg: Message| async move {
//!         let _order: serde_json::Value = msg.json()?;
//!         Ok::<(), sqs_claim::Error>(())
//!     });
//!     let processor = Processor::new(MemoryStore::new(), handler);
//!     sqs_claim::lambda::run(processor).await
//! }
//! ```

use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use lambda_runtime::{Context, LambdaEvent};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::{Service, ServiceExt};

use crate::outcome::{BatchReport, Outcome};
use crate::processor::{Handler, Processor};
use crate::store::ClaimStore;
use crate::{BoxError, Error, ErrorKind};

/// The function timeout [`run`] simulates outside Lambda when `--timeout` is not given: the
/// default of the reference deployment (`template.yaml`'s `FunctionTimeout`).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

const USAGE: &str = "usage: --event FILE [--timeout SECS] [--report json]";
const SERVE_USAGE: &str = "usage: --event FILE [--timeout SECS]";

/// Serves Lambda invocations with `processor`, or, outside Lambda, processes the event file
/// named by `--event FILE` and prints the report (see the [module docs](self)).
///
/// Returns the process's exit status: `main` can return it as it is.
pub async fn run<S, H>(processor: Processor<S, H>) -> ExitCode
where
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    if in_lambda() {
        return match serve_lambda(processor).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, &one_line(e.as_ref())),
        };
    }
    let args = match LocalArgs::parse(
        std::env::args_os().skip(1),
        USAGE,
        "to process an SQS event file locally",
    ) {
        Ok(args) => args,
        Err(message) => return fail(2, &message),
    };
    let report = match run_event_file(&processor, &args.event, args.timeout).await {
        Ok(report) => report,
        Err(e) => return fail(1, &one_line(&e)),
    };
    let out = if args.json_report {
        report.to_json()
    } else {
        serde_json::to_value(report.response()).unwrap_or_default()
    };
    match serde_json::to_string_pretty(&out) {
        Ok(text) => println!("{text}"),
        Err(e) => return fail(1, &format!("cannot print the report: {e}")),
    }
    eprint!("{}", summary(&report));
    ExitCode::SUCCESS
}

/// [`run`], with the store's start-up check `ready` run beside the runtime's first
/// `GET /runtime/invocation/next` instead of before it: under Lambda, `ready` is spawned at
/// once and the runtime asks for the first event meanwhile, and every invocation waits for the
/// check's answer (at once after the first) before the processor sees its event. Init ends as
/// soon as the runtime is ready, and the check's round trip to the store overlaps the handover
/// of the first event instead of adding to the cold start.
///
/// A check that fails stops the function before any message is processed, as a failure in
/// init would: one `ERROR` log line with the check's error (its whole chain, as `{:#}` prints
/// it; on stderr as `error: ...` when no `tracing` subscriber is set), nothing posted for the
/// invocation, and exit status 1. What Lambda does with that is what it does with an init that
/// fails: the invocation fails (`Runtime.ExitError`), the execution environment is discarded
/// and the next invocation starts a new one (which checks again), and an SQS batch is
/// redelivered whole when its visibility timeout expires. Nothing is lost. (An invocation that
/// *returned* an error would keep the environment, with its failed check, for the next batch.)
/// The wait is bounded by the invocation's deadline, less 100 ms to say so: a check still
/// unanswered then stops the function with an error saying the store did not answer, rather
/// than letting Lambda time the invocation out without a word.
///
/// Outside Lambda, `ready` is awaited first (a failure is one `error: ...` line, exit status
/// 1), then the event file is processed as [`run`] does.
///
/// `ready` is usually the store's [`check_ready`](crate::store::StoreAdmin::check_ready),
/// bounded (with feature `settings`, [`bounded_startup`](crate::settings::bounded_startup) and
/// [`Settings::startup_timeout`](crate::settings::Settings::startup_timeout)):
///
/// ```no_run
/// use std::time::Duration;
/// use sqs_claim::store::StoreAdmin;
/// use sqs_claim::{DynamoDbStore, Message, Processor};
/// use tower::service_fn;
///
/// #[tokio::main]
/// async fn main() -> std::process::ExitCode {
///     // Building the client sends nothing; the check is the store's first request.
///     let store = DynamoDbStore::from_env("claims").await;
///     let check = {
///         let store = store.clone();
///         async move {
///             match tokio::time::timeout(Duration::from_secs(5), store.check_ready()).await {
///                 Ok(checked) => checked,
///                 Err(_) => Err(sqs_claim::Error::new(
///                     sqs_claim::ErrorKind::StoreUnavailable,
///                     "the store did not answer within 5 s at start-up",
///                 )),
///             }
///         }
///     };
///     let handler = service_fn(|msg: Message| async move {
///         let _order: serde_json::Value = msg.json()?;
///         Ok::<(), sqs_claim::Error>(())
///     });
///     let processor = Processor::new(store, handler);
///     sqs_claim::lambda::run_when_ready(processor, check).await
/// }
/// ```
pub async fn run_when_ready<S, H, R>(processor: Processor<S, H>, ready: R) -> ExitCode
where
    S: ClaimStore,
    H: Handler<S::Effect>,
    R: Future<Output = Result<(), Error>> + Send + 'static,
{
    run_gated(processor, ready, false).await
}

/// [`run_when_ready`], except that an event handed over while the check is still in flight
/// (the first, in a cold start) is processed beside it rather than after it: the batch's first
/// writes go out with the check, and a cold invocation at a distance saves the check's round
/// trip. Once the check has answered, every invocation is as [`run_when_ready`]'s.
///
/// A check that fails still stops the function, as [`run_when_ready`] says, and the event is
/// never answered (Lambda redelivers the batch whole when its visibility timeout expires),
/// whether the check failed before the batch ended (the batch is dropped where it is) or
/// after. What the batch wrote meanwhile stays as a crash would leave it: a message whose
/// effects committed is a duplicate on redelivery, a claim still in progress is free again
/// when its lease ends (leases are bounded by the invocation's deadline, which the visibility
/// timeout exceeds).
///
/// Use it only where a write the check would refuse cannot land where a ready store would not
/// have it: on DynamoDB, a claims table with a partition key alone (a missing table or a
/// mismatched key fails the write). With a sort key configured it does not hold (on a table
/// without one every write succeeds on the wrong item, and only the check sees it): use
/// [`run_when_ready`]. Outside Lambda the check runs first, as [`run_when_ready`]'s does.
pub async fn run_while_checking<S, H, R>(processor: Processor<S, H>, ready: R) -> ExitCode
where
    S: ClaimStore,
    H: Handler<S::Effect>,
    R: Future<Output = Result<(), Error>> + Send + 'static,
{
    run_gated(processor, ready, true).await
}

/// [`run_when_ready`] and [`run_while_checking`]: `overlap` says which.
async fn run_gated<S, H, R>(processor: Processor<S, H>, ready: R, overlap: bool) -> ExitCode
where
    S: ClaimStore,
    H: Handler<S::Effect>,
    R: Future<Output = Result<(), Error>> + Send + 'static,
{
    if !in_lambda() {
        if let Err(e) = ready.await {
            return fail(1, &format!("{e:#}"));
        }
        return run(processor).await;
    }
    // On the runtime's workers, while this task asks for the first event.
    let check = tokio::spawn(ready);
    let ready: Ready = async move {
        match check.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Arc::from(format!("{e:#}"))),
            Err(e) => Err(Arc::from(format!("the start-up check did not finish: {e}"))),
        }
    }
    .boxed()
    .shared();
    let (stop, mut stopped) = tokio::sync::mpsc::unbounded_channel();
    let gated = Gated {
        processor,
        ready: ready.clone(),
        stop,
        overlap,
    };
    let ready_after = ready.clone();
    let failed = async move {
        match ready.await {
            Err(why) => why,
            Ok(()) => std::future::pending().await,
        }
    };
    // Whichever says first that the store is not ready stops the runtime's loop where it is:
    // waiting for an event, or holding one it will never process.
    let served = tokio::select! {
        why = failed => return not_ready(&why),
        Some(why) = stopped.recv() => return not_ready(&why),
        served = serve_lambda(gated) => served,
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        // The runtime's loop ended (no Runtime API to talk to, say) before the check said
        // anything: the check's failure, if it fails, is the one to tell.
        Err(e) => match ready_after.await {
            Err(why) => not_ready(&why),
            Ok(()) => fail(1, &one_line(e.as_ref())),
        },
    }
}

/// The answer of [`run_when_ready`]'s check, shared by every invocation: the error as one line.
type Ready = Shared<BoxFuture<'static, Result<(), Arc<str>>>>;

/// What an invocation keeps of its deadline to say that the check did not answer in time.
const NOT_READY_MARGIN: Duration = Duration::from_millis(100);

/// The processor behind its start-up check ([`run_when_ready`]).
struct Gated<S: ClaimStore, H> {
    processor: Processor<S, H>,
    ready: Ready,
    /// Tells [`run_when_ready`] to stop, with why.
    stop: tokio::sync::mpsc::UnboundedSender<Arc<str>>,
    /// An event handed over before the check answered is processed beside it
    /// ([`run_while_checking`]).
    overlap: bool,
}

impl<S: ClaimStore, H> Clone for Gated<S, H>
where
    Processor<S, H>: Clone,
{
    fn clone(&self) -> Self {
        Gated {
            processor: self.processor.clone(),
            ready: self.ready.clone(),
            stop: self.stop.clone(),
            overlap: self.overlap,
        }
    }
}

impl<S, H> Service<LambdaEvent<SqsEvent>> for Gated<S, H>
where
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    type Response = SqsBatchResponse;
    type Error = lambda_runtime::Error;
    type Future = BoxFuture<'static, Result<SqsBatchResponse, lambda_runtime::Error>>;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<SqsEvent>) -> Self::Future {
        let (processor, ready, stop) = (
            self.processor.clone(),
            self.ready.clone(),
            self.stop.clone(),
        );
        let overlap = self.overlap && ready.peek().is_none();
        Box::pin(async move {
            if overlap {
                // The batch beside the check (run_while_checking); a check that fails, first or
                // last, stops the process with this event unanswered, as below.
                let deadline = event.context.deadline;
                let check = checked(ready, deadline);
                let batch = processor.process(event);
                tokio::pin!(check, batch);
                let answer = tokio::select! {
                    answer = &mut check => match answer {
                        Ok(()) => Ok(batch.await),
                        Err(why) => Err(why),
                    },
                    report = &mut batch => check.await.map(|()| report),
                };
                return match answer {
                    Ok(report) => Ok(report?.response()),
                    Err(why) => {
                        let _ = stop.send(why);
                        std::future::pending().await
                    }
                };
            }
            if let Err(why) = checked(ready, event.context.deadline).await {
                // `run_when_ready` ends the process with `why`: this event is neither
                // processed nor answered, and Lambda redelivers it.
                let _ = stop.send(why);
                std::future::pending::<()>().await;
            }
            let report = processor.process(event).await?;
            Ok(report.response())
        })
    }
}

/// The check's answer, waited for until the invocation's deadline (epoch ms, 0 for none)
/// less [`NOT_READY_MARGIN`].
async fn checked(ready: Ready, deadline_ms: u64) -> Result<(), Arc<str>> {
    if let Some(answer) = ready.peek() {
        return answer.clone();
    }
    if deadline_ms == 0 {
        return ready.await;
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms));
    match tokio::time::timeout(left.saturating_sub(NOT_READY_MARGIN), ready).await {
        Ok(answer) => answer,
        Err(_) => Err(Arc::from(format!(
            "the store did not answer the start-up check before the invocation's deadline \
             ({} ms were left when the event was handed over): check that it is up and \
             reachable from here (network, firewall or security group, endpoint)",
            left.as_millis()
        ))),
    }
}

/// Reports a failed start-up check: one `ERROR` event, or one `error: ...` line on stderr
/// when nothing would show the event.
fn not_ready(why: &str) -> ExitCode {
    if !tracing::dispatcher::has_been_set() {
        return fail(1, why);
    }
    tracing::error!(error = %why, "the store is not ready: stopped before processing any message");
    ExitCode::from(1)
}

/// Whether this process runs under Lambda (`AWS_LAMBDA_RUNTIME_API` is set).
fn in_lambda() -> bool {
    std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some_and(|v| !v.is_empty())
}

/// Serves an SQS batch service under Lambda with `lambda_runtime::run_concurrent`: sequential,
/// or `AWS_LAMBDA_MAX_CONCURRENCY` workers.
async fn serve_lambda<Svc>(service: Svc) -> Result<(), lambda_runtime::Error>
where
    Svc: Service<LambdaEvent<SqsEvent>, Response = SqsBatchResponse, Error = lambda_runtime::Error>
        + Clone
        + Send
        + 'static,
    Svc::Future: Send + 'static,
{
    // `run_concurrent` makes the choice itself (lambda_runtime 1.5): with
    // AWS_LAMBDA_MAX_CONCURRENCY above 1, that many polling workers; unset or at most 1, one
    // invocation at a time, as `run`. The processor fits its bounds: a clone is an `Arc` bump,
    // and every processor future is `Send + 'static`.
    lambda_runtime::run_concurrent(service).await
}

/// Reads the SQS event in `path` ([`read_event_file`]) and processes it with `processor`, as
/// one invocation whose deadline is `timeout` from now (`Duration::ZERO`: no deadline).
///
/// Fails with [`ErrorKind::InvalidEvent`] when the file cannot be read or is not an SQS event;
/// otherwise as [`Processor::process`].
pub async fn run_event_file<S, H>(
    processor: &Processor<S, H>,
    path: impl AsRef<Path>,
    timeout: Duration,
) -> Result<BatchReport, Error>
where
    S: ClaimStore,
    H: Handler<S::Effect>,
{
    let event = read_event_file(path)?;
    processor
        .process(LambdaEvent::new(event, local_context(timeout)))
        .await
}

/// Serves Lambda invocations with `service`, for any event type `T`; outside Lambda, calls it
/// once with the event in `--event FILE` and prints its response as one line of JSON (see the
/// [module docs](self)). What [`run`] is for an SQS processor, for every other handler.
///
/// A stream consumer (`stream::Kinesis`, `stream::DynamoDbStreams`, `stream::Kafka`, feature
/// `streams`) served locally prints its partial batch response on stdout and, on stderr, its
/// batch's [`summary`] (the counts, then each record that did not succeed with why), as
/// [`run`] does for an SQS batch.
///
/// Under Lambda it serves with `lambda_runtime::run`, or `run_concurrent` when
/// `AWS_LAMBDA_MAX_CONCURRENCY` is set. Returns the process's exit status.
///
/// With the idempotency layer (feature `idempotency`):
///
#[cfg_attr(feature = "idempotency", doc = "```no_run")]
#[cfg_attr(not(feature = "idempotency"), doc = "```ignore")]
/// use lambda_runtime::LambdaEvent;
/// use sqs_claim::MemoryStore;
/// use sqs_claim::idempotency::{Idempotency, key};
///
/// #[tokio::main]
/// async fn main() -> std::process::ExitCode {
///     let idempotency = Idempotency::new(MemoryStore::new(), key::json_pointer("/id"));
///     let service = idempotency.service(tower::service_fn(
///         |event: LambdaEvent<serde_json::Value>| async move {
///             Ok::<_, sqs_claim::BoxError>(serde_json::json!({"done": event.payload["id"]}))
///         },
///     ));
///     sqs_claim::lambda::serve(service).await
/// }
/// ```
pub async fn serve<T, Svc>(service: Svc) -> ExitCode
where
    T: DeserializeOwned + Send + 'static,
    Svc: Service<LambdaEvent<T>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Response: Serialize + Send + 'static,
    Svc::Error: Into<BoxError> + Send + 'static,
{
    if in_lambda() {
        // The runtime reports errors through its `Diagnostic`, which a `BoxError` converts to.
        let service = service.map_err(Into::<BoxError>::into);
        // One invocation at a time, or AWS_LAMBDA_MAX_CONCURRENCY's workers: the runtime's
        // choice (`serve_lambda`).
        let served = lambda_runtime::run_concurrent(service).await;
        return match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(1, &one_line(e.as_ref())),
        };
    }
    let args = match LocalArgs::parse(
        std::env::args_os().skip(1),
        SERVE_USAGE,
        "to call the handler once with an event file",
    ) {
        Ok(args) if args.json_report => {
            return fail(
                2,
                &format!("--report is for SQS batches (lambda::run) ({SERVE_USAGE})"),
            );
        }
        Ok(args) => args,
        Err(message) => return fail(2, &message),
    };
    let response = match call_event_file(service, &args.event, args.timeout).await {
        Ok(response) => response,
        Err(e) => return fail(1, &one_line(e.as_ref())),
    };
    match local_output(&response) {
        Ok((stdout, stderr)) => {
            println!("{stdout}");
            eprint!("{stderr}");
        }
        Err(e) => return fail(1, &format!("cannot print the response: {e}")),
    }
    ExitCode::SUCCESS
}

/// What [`serve`] prints outside Lambda for `response`: its JSON on one line (stdout), and
/// for a stream consumer's [`Answer`](crate::stream::Answer) its batch's [`summary`], each
/// record that did not succeed with why (stderr), as [`run`] prints an SQS batch's; nothing on
/// stderr for any other response.
fn local_output<R: Serialize + 'static>(
    response: &R,
) -> Result<(String, String), serde_json::Error> {
    let stdout = serde_json::to_string(response)?;
    #[cfg(feature = "streams")]
    if let Some(report) = crate::stream::report_of(response) {
        return Ok((stdout, summary(report)));
    }
    Ok((stdout, String::new()))
}

/// Reads the event in `path` as a `T` and calls `service` with it once, as one invocation
/// whose deadline is `timeout` from now (`Duration::ZERO`: no deadline). What [`serve`] does
/// outside Lambda, without the printing.
///
/// A file that cannot be read, is not JSON or is not a `T` fails with
/// [`ErrorKind::InvalidEvent`], naming the file and the line and column, never the content;
/// otherwise the service's own error is returned.
pub(crate) async fn call_event_file<T, Svc>(
    service: Svc,
    path: impl AsRef<Path>,
    timeout: Duration,
) -> Result<Svc::Response, BoxError>
where
    T: DeserializeOwned,
    Svc: Service<LambdaEvent<T>>,
    Svc::Error: Into<BoxError>,
{
    let path = path.as_ref();
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::with_source(
            ErrorKind::InvalidEvent,
            format!("cannot read event file {shown}"),
            e,
        )
    })?;
    // serde's own message may quote the offending value (a body): give its place only.
    let event: T = serde_json::from_str(&text).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() {
            "is not JSON"
        } else {
            "is not an event of the type the handler takes"
        };
        Error::new(
            ErrorKind::InvalidEvent,
            format!(
                "event file {shown} {what} (line {} column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    service
        .oneshot(LambdaEvent::new(event, local_context(timeout)))
        .await
        .map_err(Into::into)
}

/// The context of a local invocation: a fresh request id, and a deadline `timeout` from now
/// (none for `Duration::ZERO`).
fn local_context(timeout: Duration) -> Context {
    let mut context = Context::default();
    context.request_id = format!("local-{}", uuid::Uuid::new_v4());
    if !timeout.is_zero() {
        let deadline = SystemTime::now() + timeout;
        context.deadline = deadline
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
    }
    context
}

/// Reads and checks an SQS event file (the JSON Lambda hands an SQS-triggered function).
///
/// Every failure is an [`ErrorKind::InvalidEvent`] that names the file and what is wrong,
/// never the content: another source's `Records` (S3, SNS), a record without `messageId`
/// (Lambda could not report it, so the whole batch would fail), a field of the wrong type (by
/// line and column).
pub fn read_event_file(path: impl AsRef<Path>) -> Result<SqsEvent, Error> {
    let path = path.as_ref();
    let shown = path.display();
    let invalid = |why: String| Error::new(ErrorKind::InvalidEvent, why);
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::with_source(
            ErrorKind::InvalidEvent,
            format!("cannot read event file {shown}"),
            e,
        )
    })?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        invalid(format!(
            "event file {shown} is not JSON (line {} column {})",
            e.line(),
            e.column()
        ))
    })?;
    let not_sqs = |why: String| invalid(format!("{shown} is not an SQS event: {why}"));
    let Some(records) = value.get("Records").and_then(|r| r.as_array()) else {
        return Err(not_sqs("it has no \"Records\" array".into()));
    };
    for (i, record) in records.iter().enumerate() {
        let Some(record) = record.as_object() else {
            return Err(not_sqs(format!("record #{i} is not an object")));
        };
        // S3, SNS and DynamoDB-stream events also have "Records": name the source instead of
        // failing each record for a missing messageId.
        let source = record
            .get("eventSource")
            .or_else(|| record.get("EventSource"))
            .and_then(|s| s.as_str());
        if let Some(source) = source.filter(|s| *s != "aws:sqs") {
            return Err(not_sqs(format!(
                "record #{i} comes from {source:?}, not \"aws:sqs\""
            )));
        }
        if record
            .get("messageId")
            .is_none_or(|id| id.is_null() || id.as_str().is_some_and(str::is_empty))
        {
            return Err(invalid(format!(
                "{shown}: record #{i} has no messageId, so Lambda could not report it as a \
                 failure and would fail the whole batch"
            )));
        }
    }
    // Decoded from the text, not the value, so a type error has a line and column: serde's
    // own message would quote the offending value, which may be a body.
    serde_json::from_str(&text).map_err(|e| {
        not_sqs(format!(
            "a field has the wrong type or value (line {} column {})",
            e.line(),
            e.column()
        ))
    })
}

/// The report for a person: the counts per outcome on one line, then one line per message
/// that will be retried, with its id and why (the format `payments invoke` prints).
///
/// ```text
/// 3 messages: 2 processed, 0 duplicate, 0 held elsewhere, 1 failed, 0 not started
///   failed         ce63a357-3d45-4ca8-935f-295d067c3cd9  handler_error: field "amount_cents" is negative
/// ```
pub fn summary(report: &BatchReport) -> String {
    let c = report.counts();
    let n = report.items().len();
    let mut s = format!(
        "{n} message{}: {} processed, {} duplicate, {} held elsewhere, {} failed, {} not started",
        if n == 1 { "" } else { "s" },
        c.processed,
        c.duplicate,
        c.held_elsewhere,
        c.failed,
        c.not_started,
    );
    // Only when they happened, so the line people grep for keeps its shape.
    if c.cut_off > 0 {
        s.push_str(&format!(", {} cut off by the deadline", c.cut_off));
    }
    if c.dead_lettered > 0 {
        s.push_str(&format!(
            ", {} sent to the failure queue with their reason",
            c.dead_lettered
        ));
    }
    s.push('\n');
    for item in report.items() {
        if matches!(item.outcome, Outcome::Processed | Outcome::Duplicate) {
            continue;
        }
        let detail = item.outcome.detail().unwrap_or_default();
        s.push_str(&format!(
            "  {:<14} {}  {}\n",
            item.outcome.name(),
            item.message_id,
            detail.replace('\n', " ")
        ));
    }
    s
}

/// What [`run`] reads from the command line outside Lambda.
#[derive(Debug)]
struct LocalArgs {
    event: PathBuf,
    timeout: Duration,
    json_report: bool,
}

impl LocalArgs {
    /// `usage` is the usage line to quote; `local` says what `--event` does ("to process an SQS
    /// event file locally").
    fn parse(
        args: impl IntoIterator<Item = OsString>,
        usage: &str,
        local: &str,
    ) -> Result<LocalArgs, String> {
        let (mut event, mut timeout, mut report) = (None, None, None);
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let arg = arg
                .into_string()
                .map_err(|a| format!("argument {:?} is not valid UTF-8", a.to_string_lossy()))?;
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(OsString::from(v))),
                _ => (arg, None),
            };
            let slot = match name.as_str() {
                "--event" => &mut event,
                "--timeout" => &mut timeout,
                "--report" => &mut report,
                other => return Err(format!("unexpected argument {other:?} ({usage})")),
            };
            let value = inline
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value ({usage})"))?;
            if slot.replace(value).is_some() {
                return Err(format!("{name} given twice"));
            }
        }
        let Some(event) = event else {
            return Err(format!(
                "not running in Lambda (AWS_LAMBDA_RUNTIME_API is not set): {local}, run with \
                 --event FILE ({usage})"
            ));
        };
        let timeout = match timeout {
            None => DEFAULT_TIMEOUT,
            Some(v) => v
                .to_str()
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_secs)
                .ok_or_else(|| {
                    format!(
                        "--timeout {:?} is not a whole number of seconds",
                        v.to_string_lossy()
                    )
                })?,
        };
        let json_report = match report.as_ref().map(|r| r.to_string_lossy()) {
            None => false,
            Some(r) if r == "json" => true,
            Some(other) => {
                return Err(format!(
                    "--report {other:?} is not supported: the only report format is json"
                ));
            }
        };
        Ok(LocalArgs {
            event: PathBuf::from(event),
            timeout,
            json_report,
        })
    }
}

/// The error and its causes on one line: a cause is added only when the text so far does not
/// already say it (many errors print their cause in their own message).
fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn fail(code: u8, message: &str) -> ExitCode {
    // One line, whatever the causes' own formatting: scripts read the first line of stderr.
    let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
    eprintln!("error: {message}");
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    fn parse(args: &[&str]) -> Result<LocalArgs, String> {
        LocalArgs::parse(
            args.iter().map(OsString::from),
            USAGE,
            "to process an SQS event file locally",
        )
    }

    #[test]
    fn arguments() {
        let a = parse(&["--event", "e.json"]).unwrap();
        assert_eq!(a.event, PathBuf::from("e.json"));
        assert_eq!(a.timeout, DEFAULT_TIMEOUT);
        assert!(!a.json_report);
        let a = parse(&["--timeout=0", "--event=e.json", "--report", "json"]).unwrap();
        assert_eq!(a.timeout, Duration::ZERO);
        assert!(a.json_report);
    }

    /// `serve` run locally prints a stream consumer's failed records with why on stderr.
    #[cfg(feature = "streams")]
    #[tokio::test]
    async fn serve_prints_a_stream_batch_s_failures_on_stderr() {
        use base64::Engine as _;
        let handler = tower::service_fn(|msg: Message| async move {
            let _: serde_json::Value = msg.json()?;
            Ok::<(), Error>(())
        });
        let consumer = crate::stream::Kinesis::new(
            Processor::builder(crate::MemoryStore::new(), handler).namespace("t"),
        )
        .unwrap();
        let data = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let record = |seq: &str, text: &str| {
            serde_json::json!({
                "eventSource": "aws:kinesis",
                "eventID": format!("shardId-000000000000:{seq}"),
                "kinesis": {"sequenceNumber": seq, "data": data(text)}
            })
        };
        let event = serde_json::json!({"Records": [
            record("1", r#"{"n":1}"#),
            record("2", "not json"),
            record("3", r#"{"n":3}"#),
        ]});
        let answer = consumer
            .oneshot(LambdaEvent::new(event, Context::default()))
            .await
            .unwrap();
        let (stdout, stderr) = local_output(&answer).unwrap();
        assert_eq!(stdout, r#"{"batchItemFailures":[{"itemIdentifier":"2"}]}"#);
        assert!(
            stderr.starts_with(
                "3 messages: 1 processed, 0 duplicate, 0 held elsewhere, 1 failed, 1 not started"
            ),
            "{stderr}"
        );
        let failed = stderr
            .lines()
            .find(|l| l.contains("shardId-000000000000:2"))
            .unwrap_or_else(|| panic!("the failed record named: {stderr}"));
        assert!(
            failed.contains("failed") && failed.contains("not valid JSON"),
            "{failed}"
        );
        assert!(
            !stderr.contains("not json"),
            "no payload on stderr: {stderr}"
        );
        // Any other response: nothing on stderr.
        let (stdout, stderr) = local_output(&serde_json::json!({"ok": true})).unwrap();
        assert_eq!((stdout.as_str(), stderr.as_str()), (r#"{"ok":true}"#, ""));
    }

    #[test]
    fn bad_arguments_say_how_to_run() {
        let no_event = parse(&[]).unwrap_err();
        assert!(no_event.contains("AWS_LAMBDA_RUNTIME_API"), "{no_event}");
        assert!(no_event.contains("--event FILE"), "{no_event}");
        for bad in [
            &["--event"][..],
            &["--event", "a", "--event", "b"],
            &["--event", "a", "--timeout", "soon"],
            &["--event", "a", "--report", "xml"],
            &["e.json"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
