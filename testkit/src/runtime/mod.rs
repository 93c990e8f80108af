//! A fake AWS Lambda Runtime API on 127.0.0.1, enough for the `lambda_runtime` 1.x client, and
//! a way to start your Lambda binary against it as Lambda would ([`LambdaCommand`]).
//!
//! It speaks plain HTTP/1.1 over `tokio::net` (persistent connections, `Content-Length` and
//! chunked request bodies), so a test can run the real Lambda binary with
//! `AWS_LAMBDA_RUNTIME_API=<addr>` and see exactly what it posts back, without AWS.
//!
//! The exchange is driven by the test: [`FakeRuntime::queue`] hands an event, with a deadline,
//! to the function's pending `GET /2018-06-01/runtime/invocation/next`, and
//! [`FakeRuntime::next_post`] returns the next thing the function posted (a response, an
//! invocation error, an init error, or a request this fake does not know). While nothing is
//! queued, `next` simply does not answer, as on Lambda between invocations: the function sits
//! in its loop until the test kills it.
//!
//! Several invocations can be in flight: a function run with `lambda_runtime::run_concurrent`
//! (Lambda Managed Instances, `AWS_LAMBDA_MAX_CONCURRENCY=N`) polls `next` N times at once;
//! [`FakeRuntime::polling`] says how many polls wait, each queued event answers one of them, and
//! the posts come back in the order the function sends them (match them by
//! [`Posted::request_id`]).
//!
//! Paths and headers are those of `lambda_runtime` 1.5 (`src/requests.rs`, `src/types.rs`):
//! `next` answers with `Lambda-Runtime-Aws-Request-Id`, `Lambda-Runtime-Deadline-Ms` (epoch
//! milliseconds), `Lambda-Runtime-Invoked-Function-Arn` and `Lambda-Runtime-Trace-Id`; the
//! function posts `/2018-06-01/runtime/invocation/{id}/response`,
//! `/2018-06-01/runtime/invocation/{id}/error` or `/2018-06-01/runtime/init/error`.
//!
//! ```no_run
//! use std::time::Duration;
//! use sqs_claim_testkit::runtime::{FakeRuntime, LambdaCommand, Posted};
//! use sqs_claim_testkit::sqs::{self, record};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let mut runtime = FakeRuntime::start().await?;
//! // Your Lambda binary (in an integration test: env!("CARGO_BIN_EXE_<name>")).
//! let logs = std::env::temp_dir();
//! let mut function = LambdaCommand::new("target/debug/my-consumer")
//!     .env("TABLE_NAME", "claims")
//!     .logs_in(&logs, "my-consumer")
//!     .start(&runtime.address())?;
//!
//! let event = sqs::event_json(&[record("m-1", "{}"), record("m-2", "{}")]);
//! let id = runtime.queue(event.to_string(), Duration::from_secs(30));
//! match runtime.next_post(Duration::from_secs(60)).await {
//!     Some(Posted::Response { request_id, body }) => {
//!         assert_eq!(request_id, id);
//!         assert_eq!(body, r#"{"batchItemFailures":[]}"#);
//!     }
//!     other => panic!("{other:?}\n{}", function.tail()),
//! }
//! function.kill();
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;

mod process;

pub use process::{LambdaCommand, LambdaProcess};

/// The function name [`LambdaCommand`] sets by default (`AWS_LAMBDA_FUNCTION_NAME`), the one
/// [`FUNCTION_ARN`] names.
pub const FUNCTION_NAME: &str = "consumer";

/// The ARN the fake hands out as the invoked function (`Context::invoked_function_arn`).
pub const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:consumer";

/// Bodies larger than this are refused: Lambda's own payload cap is 6 MB, and a runaway read
/// must fail the test rather than eat the machine.
const MAX_BODY: usize = 8 * 1024 * 1024;

/// One event waiting for the function's next `GET .../invocation/next`.
#[derive(Debug, Clone)]
struct Invocation {
    /// `Lambda-Runtime-Aws-Request-Id`.
    request_id: String,
    /// The event JSON, sent as the body (bytes: a test may send what is not UTF-8).
    body: Vec<u8>,
    /// `Lambda-Runtime-Deadline-Ms`, epoch milliseconds.
    deadline_ms: u64,
    /// `Lambda-Runtime-Trace-Id`.
    trace_id: String,
}

/// The `Lambda-Runtime-Trace-Id` of an invocation queued without one of its own.
pub const TRACE_ID: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0";

/// Something the function posted to the fake.
///
/// The four cases are all the Runtime API defines; anything else arrives as `Unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    /// `POST /2018-06-01/runtime/invocation/{request_id}/response`.
    Response {
        /// The id from the path.
        request_id: String,
        /// The response body (the handler's output, JSON).
        body: String,
    },
    /// `POST /2018-06-01/runtime/invocation/{request_id}/error`: the invocation failed and
    /// Lambda would redeliver the whole batch.
    InvocationError {
        /// The id from the path.
        request_id: String,
        /// `Lambda-Runtime-Function-Error-Type`, if sent.
        error_type: Option<String>,
        /// The diagnostic body (`{"errorType", "errorMessage"}`).
        body: String,
    },
    /// `POST /2018-06-01/runtime/init/error`.
    InitError {
        /// `Lambda-Runtime-Function-Error-Type`, if sent.
        error_type: Option<String>,
        /// The diagnostic body.
        body: String,
    },
    /// Any request this fake does not implement (answered 404), kept so a test can fail on it.
    Unknown {
        /// The HTTP method.
        method: String,
        /// The request target.
        path: String,
        /// The body.
        body: String,
    },
}

/// The fake Runtime API. Dropping it stops the server (the accept loop and its connections).
///
/// Must be started, and used, inside a tokio runtime.
#[derive(Debug)]
pub struct FakeRuntime {
    addr: SocketAddr,
    queue: mpsc::UnboundedSender<Invocation>,
    posts: mpsc::UnboundedReceiver<Posted>,
    polling: Arc<AtomicUsize>,
    server: JoinHandle<()>,
}

impl FakeRuntime {
    /// Binds a random port on 127.0.0.1 and starts serving.
    pub async fn start() -> std::io::Result<FakeRuntime> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (queue, queued) = mpsc::unbounded_channel::<Invocation>();
        let (posted, posts) = mpsc::unbounded_channel::<Posted>();
        // One receiver shared by every connection: `lambda_runtime` polls `next` on one
        // connection at a time, but hyper may open a new connection whenever it likes.
        let queued = Arc::new(Mutex::new(queued));
        let polling = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&polling);
        let server = tokio::spawn(async move {
            // Connection tasks end by themselves: when the client closes, or when the
            // `FakeRuntime` (the queue's sender) is dropped and a pending `next` gives up.
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_connection(
                    stream,
                    Arc::clone(&queued),
                    posted.clone(),
                    Arc::clone(&counter),
                ));
            }
        });
        Ok(FakeRuntime {
            addr,
            queue,
            posts,
            polling,
            server,
        })
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Queues `event` for the function's next `next` call, with a fresh request id and a
    /// deadline `budget` from now. Returns the request id.
    pub fn queue(&self, event: impl Into<String>, budget: Duration) -> String {
        let deadline_ms = (SystemTime::now() + budget)
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.queue_at(event, deadline_ms)
    }

    /// Queues `event` with a fresh request id and this `Lambda-Runtime-Deadline-Ms` (epoch
    /// milliseconds; one in the past hands out an invocation that is already late). Returns
    /// the request id.
    pub fn queue_at(&self, event: impl Into<String>, deadline_ms: u64) -> String {
        self.queue_bytes_at(event.into().into_bytes(), deadline_ms)
    }

    /// Queues `payload`, any bytes (a payload that is not UTF-8, not JSON), as
    /// [`queue`](Self::queue) queues an event. Returns the request id.
    pub fn queue_bytes(&self, payload: impl Into<Vec<u8>>, budget: Duration) -> String {
        let deadline_ms = (SystemTime::now() + budget)
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.queue_bytes_at(payload, deadline_ms)
    }

    /// Queues `payload`, any bytes, with this `Lambda-Runtime-Deadline-Ms`. Returns the
    /// request id.
    pub fn queue_bytes_at(&self, payload: impl Into<Vec<u8>>, deadline_ms: u64) -> String {
        self.enqueue(payload.into(), deadline_ms, TRACE_ID.to_owned())
    }

    /// Queues `event` as [`queue`](Self::queue) does, with this `Lambda-Runtime-Trace-Id`
    /// (the invocation's X-Ray trace, `Context::xray_trace_id`) instead of [`TRACE_ID`].
    /// Returns the request id.
    pub fn queue_traced(
        &self,
        event: impl Into<String>,
        budget: Duration,
        trace_id: &str,
    ) -> String {
        let deadline_ms = (SystemTime::now() + budget)
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        self.enqueue(event.into().into_bytes(), deadline_ms, trace_id.to_owned())
    }

    fn enqueue(&self, event: Vec<u8>, deadline_ms: u64, trace_id: String) -> String {
        let request_id = uuid::Uuid::new_v4().to_string();
        // The receiver lives as long as the server task; a send error means it died, which
        // the following `next_post` reports as a timeout with the reason.
        let _ = self.queue.send(Invocation {
            request_id: request_id.clone(),
            body: event,
            deadline_ms,
            trace_id,
        });
        request_id
    }

    /// How many `GET .../invocation/next` requests are waiting for an event right now: 1 for a
    /// function that polls one invocation at a time, N for `lambda_runtime::run_concurrent`
    /// with `AWS_LAMBDA_MAX_CONCURRENCY=N`.
    pub fn polling(&self) -> usize {
        self.polling.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` polls of `next` are waiting (a concurrent function has
    /// started all its workers, say), at most `timeout`. Whether they are.
    pub async fn wait_polling(&self, count: usize, timeout: Duration) -> bool {
        let give_up = tokio::time::Instant::now() + timeout;
        while self.polling() < count {
            if tokio::time::Instant::now() >= give_up {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// The next thing the function posted, waiting at most `timeout`. `None` on timeout.
    pub async fn next_post(&mut self, timeout: Duration) -> Option<Posted> {
        tokio::time::timeout(timeout, self.posts.recv())
            .await
            .ok()
            .flatten()
    }

    /// One invocation, start to end: queues `event` with a deadline `budget` from now and
    /// waits at most `timeout` for what the function posts. `None` on timeout.
    ///
    /// For one invocation at a time: with several in flight, a post may answer another one
    /// (queue them with [`queue`](Self::queue) and match [`Posted::request_id`]).
    pub async fn invoke(
        &mut self,
        event: impl Into<String>,
        budget: Duration,
        timeout: Duration,
    ) -> Option<Posted> {
        self.queue(event, budget);
        self.next_post(timeout).await
    }
}

impl Posted {
    /// The invocation it answers (`Response` and `InvocationError`).
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Posted::Response { request_id, .. } | Posted::InvocationError { request_id, .. } => {
                Some(request_id)
            }
            _ => None,
        }
    }

    /// The body it carried.
    pub fn body(&self) -> &str {
        match self {
            Posted::Response { body, .. }
            | Posted::InvocationError { body, .. }
            | Posted::InitError { body, .. }
            | Posted::Unknown { body, .. } => body,
        }
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// One parsed HTTP/1.1 request.
struct Request {
    method: String,
    path: String,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
    body: String,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn serve_connection(
    stream: TcpStream,
    queued: Arc<Mutex<mpsc::UnboundedReceiver<Invocation>>>,
    posted: mpsc::UnboundedSender<Posted>,
    polling: Arc<AtomicUsize>,
) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    // Persistent connection: serve requests until the client closes or sends garbage.
    while let Some(request) = read_request(&mut read).await {
        let reply = if request.method == "GET"
            && request.path == "/2018-06-01/runtime/invocation/next"
        {
            // Holding the lock while waiting is the point: a second `next` (a new connection)
            // queues behind the first, as invocations are handed out one at a time.
            polling.fetch_add(1, Ordering::SeqCst);
            let mut queued = queued.lock().await;
            let next = queued.recv().await;
            drop(queued);
            polling.fetch_sub(1, Ordering::SeqCst);
            let Some(inv) = next else {
                return;
            };
            let mut reply = format!(
                "HTTP/1.1 200 OK\r\n\
                 Content-Type: application/json\r\n\
                 Lambda-Runtime-Aws-Request-Id: {}\r\n\
                 Lambda-Runtime-Deadline-Ms: {}\r\n\
                 Lambda-Runtime-Invoked-Function-Arn: {FUNCTION_ARN}\r\n\
                 Lambda-Runtime-Trace-Id: {}\r\n\
                 Content-Length: {}\r\n\r\n",
                inv.request_id,
                inv.deadline_ms,
                inv.trace_id,
                inv.body.len(),
            )
            .into_bytes();
            reply.extend_from_slice(&inv.body);
            reply
        } else {
            let post = classify(request);
            let known = !matches!(post, Posted::Unknown { .. });
            let _ = posted.send(post);
            if known {
                accepted().into_bytes()
            } else {
                b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
                    .to_vec()
            }
        };
        if write.write_all(&reply).await.is_err() || write.flush().await.is_err() {
            return;
        }
    }
}

fn accepted() -> String {
    let body = r#"{"status":"OK"}"#;
    format!(
        "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn classify(request: Request) -> Posted {
    let error_type = request
        .header("lambda-runtime-function-error-type")
        .map(str::to_owned);
    if request.method == "POST" {
        if request.path == "/2018-06-01/runtime/init/error" {
            return Posted::InitError {
                error_type,
                body: request.body,
            };
        }
        if let Some(rest) = request.path.strip_prefix("/2018-06-01/runtime/invocation/") {
            if let Some(id) = rest
                .strip_suffix("/response")
                .filter(|id| !id.contains('/'))
            {
                return Posted::Response {
                    request_id: id.to_owned(),
                    body: request.body,
                };
            }
            if let Some(id) = rest.strip_suffix("/error").filter(|id| !id.contains('/')) {
                return Posted::InvocationError {
                    request_id: id.to_owned(),
                    error_type,
                    body: request.body,
                };
            }
        }
    }
    Posted::Unknown {
        method: request.method,
        path: request.path,
        body: request.body,
    }
}

/// Reads one request; `None` when the client closed the connection or sent something this
/// fake cannot parse (the connection is then dropped, which the client sees as an I/O error).
async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Option<Request> {
    let line = read_line(read).await?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let header = read_line(read).await?;
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let chunked = find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        let mut body = Vec::new();
        loop {
            let size_line = read_line(read).await?;
            let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
            if size == 0 {
                // Trailers, up to the blank line.
                while !read_line(read).await?.is_empty() {}
                break;
            }
            if body.len() + size > MAX_BODY {
                return None;
            }
            let start = body.len();
            body.resize(start + size, 0);
            read.read_exact(&mut body[start..]).await.ok()?;
            if !read_line(read).await?.is_empty() {
                return None;
            }
        }
        body
    } else {
        let length: usize = match find("content-length") {
            Some(v) => v.parse().ok()?,
            None => 0,
        };
        if length > MAX_BODY {
            return None;
        }
        let mut body = vec![0; length];
        read.read_exact(&mut body).await.ok()?;
        body
    };
    Some(Request {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// One CRLF-terminated line without its terminator; `None` at end of stream.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Option<String> {
    let mut line = String::new();
    // Header lines are short; a line this long means the stream is not HTTP.
    let n = read.take(64 * 1024).read_line(&mut line).await.ok()?;
    if n == 0 {
        return None;
    }
    Some(line.trim_end_matches(['\r', '\n']).to_owned())
}
