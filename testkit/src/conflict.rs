//! DynamoDB's transaction-conflict rule, in front of DynamoDB Local, which does not apply it.
//!
//! Real DynamoDB cancels a `TransactWriteItems` at once when one of its items is part of
//! another transaction still in progress, and refuses a single-item write to such an item
//! ([documented](https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling)).
//! DynamoDB Local queues overlapping transactions instead, so every one of them succeeds there
//! and a consumer whose messages contend for one item looks fine in tests. [`ConflictProxy`]
//! is a loopback HTTP proxy that puts the rule back:
//!
//! | request | while one of its items is held by a transaction in flight | otherwise |
//! |---------|-----------------------------------------------------------|-----------|
//! | `TransactWriteItems` | answered at once, HTTP 400 `TransactionCanceledException`, one `CancellationReasons` entry per action in order: `TransactionConflict` ("Transaction is ongoing for the item") at the conflicting actions, `None` elsewhere | its items are held, it is forwarded, and released when DynamoDB Local has answered and the [hold](ConflictProxy::hold) has passed, just before the answer goes back |
//! | `PutItem`, `UpdateItem`, `DeleteItem` | answered at once, HTTP 400 `TransactionConflictException` | forwarded (a single-item write holds nothing) |
//! | anything else | forwarded | forwarded |
//!
//! Nothing is forwarded for a refused request. An item is its table plus its key attributes:
//! `Update`, `Delete` and `ConditionCheck` actions and single-item writes name them in `Key`;
//! for a `Put` (`Item`) the proxy learns the table's key attribute names once, with a
//! `DescribeTable` it forwards under the request's own `Authorization` header, and caches them.
//!
//! The hold stands for the time a transaction takes at DynamoDB (a few milliseconds to tens of
//! them, more under load): by default zero, so the window is what DynamoDB Local takes to
//! answer. Items are released before the answer is written, so a client that waits for one
//! transaction's answer before sending the next on the same item never conflicts.
//!
//! ```
//! use std::time::Duration;
//! use sqs_claim_testkit::conflict::ConflictProxy;
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! // In a real test the upstream is DynamoDB Local (`local::dynamodb_endpoint()`) and the
//! // client an SDK client on `proxy.endpoint()`; here a stand-in that answers `{}`.
//! let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let upstream_addr = upstream.local_addr()?;
//! tokio::spawn(async move {
//!     while let Ok((mut s, _)) = upstream.accept().await {
//!         tokio::spawn(async move {
//!             let mut buf = [0u8; 4096];
//!             while let Ok(1..) = s.read(&mut buf).await {
//!                 let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
//!                 if s.write_all(answer.as_bytes()).await.is_err() {
//!                     break;
//!                 }
//!             }
//!         });
//!     }
//! });
//!
//! let proxy = ConflictProxy::start(&format!("http://{upstream_addr}")).await?;
//! proxy.hold(Duration::from_millis(500)); // each transaction lasts half a second
//! let credit = |account: &str| {
//!     let body = format!(
//!         r#"{{"TransactItems":[{{"Update":{{"TableName":"accounts","Key":{{"account":{{"S":"{account}"}}}},"UpdateExpression":"ADD b :one"}}}}]}}"#
//!     );
//!     format!(
//!         "POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: DynamoDB_20120810.TransactWriteItems\r\n\
//!          Content-Length: {}\r\n\r\n{body}",
//!         body.len()
//!     )
//! };
//! let port = proxy.endpoint().rsplit(':').next().unwrap_or_default().to_owned();
//! let mut first = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}")).await?;
//! first.write_all(credit("alice").as_bytes()).await?;
//! tokio::time::sleep(Duration::from_millis(50)).await;
//!
//! // The same account while the first transaction is in flight: cancelled at once.
//! let mut second = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}")).await?;
//! second.write_all(credit("alice").as_bytes()).await?;
//! let mut answer = vec![0u8; 4096];
//! let n = second.read(&mut answer).await?;
//! let answer = String::from_utf8_lossy(&answer[..n]);
//! assert!(answer.starts_with("HTTP/1.1 400"));
//! assert!(answer.contains(r#""CancellationReasons":[{"Code":"TransactionConflict""#));
//! assert_eq!((proxy.conflicts(), proxy.forwarded()), (1, 1));
//! # Ok(())
//! # }
//! ```
//!
//! # Limits
//!
//! Bodies must come with a `Content-Length` (the AWS SDKs and DynamoDB Local send one), heads
//! up to [`MAX_HEAD`] bytes, bodies up to [`MAX_BODY`]; anything else closes the connection.
//! `BatchWriteItem` and `TransactGetItems` are forwarded as they are (real DynamoDB refuses
//! their conflicting items too; nothing here models that yet). Dropping the proxy stops it and
//! closes every connection.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The largest request or response head the proxy reads.
pub const MAX_HEAD: usize = 64 * 1024;

/// The largest request or response body the proxy reads (DynamoDB's own limit on a
/// `TransactWriteItems` is 4 MB).
pub const MAX_BODY: usize = 16 * 1024 * 1024;

/// The reason DynamoDB gives for an action that met a transaction in progress.
const ONGOING: &str = "Transaction is ongoing for the item";

/// An item: its table and its key attributes, canonically written.
type ItemId = (String, String);

struct Shared {
    upstream: SocketAddr,
    hold_nanos: AtomicU64,
    conflicts: AtomicU64,
    forwarded: AtomicU64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Items of the transactions in flight.
    held: HashSet<ItemId>,
    /// Key attribute names per table, from `DescribeTable`.
    keys: HashMap<String, Arc<Vec<String>>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Every critical section leaves the sets consistent: a poisoned lock is still usable.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A loopback HTTP proxy in front of DynamoDB Local that cancels overlapping transactions as
/// DynamoDB does. See the [module documentation](self).
pub struct ConflictProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for ConflictProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConflictProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("conflicts", &self.conflicts())
            .field("forwarded", &self.forwarded())
            .finish_non_exhaustive()
    }
}

impl Drop for ConflictProxy {
    fn drop(&mut self) {
        // The accept task owns every connection task: aborting it drops them all.
        self.accept.abort();
    }
}

impl ConflictProxy {
    /// Starts a proxy on 127.0.0.1 (a free port) in front of `upstream`, an endpoint URL such
    /// as `http://127.0.0.1:8000` ([`local::dynamodb_endpoint`](crate::local::dynamodb_endpoint))
    /// or a bare `host:port`. Plain HTTP only.
    pub async fn start(upstream: &str) -> io::Result<ConflictProxy> {
        let authority = upstream
            .strip_prefix("http://")
            .unwrap_or(upstream)
            .trim_end_matches('/');
        if authority.contains("://") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the conflict proxy forwards plain HTTP only",
            ));
        }
        let upstream = tokio::net::lookup_host(authority)
            .await?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "upstream has no address"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            hold_nanos: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(ConflictProxy {
            addr,
            shared,
            accept,
        })
    }

    /// The endpoint to point a DynamoDB client at: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sets how long each forwarded transaction holds its items at least, counted from when it
    /// was forwarded (default zero: as long as DynamoDB Local takes to answer). Takes effect
    /// for transactions forwarded from now on.
    pub fn hold(&self, hold: Duration) {
        let nanos = u64::try_from(hold.as_nanos()).unwrap_or(u64::MAX);
        self.shared.hold_nanos.store(nanos, Ordering::SeqCst);
    }

    /// Requests refused so far: cancelled transactions and refused single-item writes.
    pub fn conflicts(&self) -> u64 {
        self.shared.conflicts.load(Ordering::SeqCst)
    }

    /// Requests forwarded to the upstream so far (the proxy's own `DescribeTable` calls not
    /// counted).
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::SeqCst)
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    connections.spawn(serve(shared.clone(), stream));
                }
                // Out of descriptors, say: try again shortly rather than stop serving.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            // Reap finished connections so the set does not grow over a long test.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One HTTP/1.1 message read off a connection: its bytes, unchanged, and its parsed head.
struct Message {
    raw: Vec<u8>,
    head_len: usize,
    headers: Vec<(String, String)>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn body(&self) -> &[u8] {
        &self.raw[self.head_len..]
    }
}

/// A connection with the bytes read past the last message.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

impl Conn {
    fn new(stream: TcpStream) -> Self {
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    /// The next message, `None` if the peer closed cleanly between messages.
    async fn read_message(&mut self) -> io::Result<Option<Message>> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(invalid("HTTP head too large"));
            }
            if !self.fill().await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
        };
        let head = std::str::from_utf8(&self.buf[..head_end])
            .map_err(|_| invalid("HTTP head not text"))?;
        let mut headers = Vec::new();
        for line in head.split("\r\n").skip(1).filter(|l| !l.is_empty()) {
            let (name, value) = line.split_once(':').ok_or_else(|| invalid("bad header"))?;
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        if find("transfer-encoding").is_some() {
            return Err(invalid("chunked bodies are not supported"));
        }
        let len = match find("content-length") {
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| invalid("bad Content-Length"))?,
            None => 0,
        };
        if len > MAX_BODY {
            return Err(invalid("body too large"));
        }
        while self.buf.len() < head_end + len {
            if !self.fill().await? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        let rest = self.buf.split_off(head_end + len);
        let raw = std::mem::replace(&mut self.buf, rest);
        Ok(Some(Message {
            raw,
            head_len: head_end,
            headers,
        }))
    }

    /// Reads more bytes; false at end of stream.
    async fn fill(&mut self) -> io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }
}

async fn serve(shared: Arc<Shared>, stream: TcpStream) {
    let mut client = Conn::new(stream);
    let mut upstream = None;
    while let Ok(Some(request)) = client.read_message().await {
        let Ok(answer) = shared.handle(&request, &mut upstream).await else {
            // The upstream failed mid-exchange: close, as a dead server's connection would.
            return;
        };
        if client.stream.write_all(&answer).await.is_err() {
            return;
        }
        if request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        {
            return;
        }
    }
}

/// Releases a transaction's items however its exchange ends (answered, failed, aborted).
struct Held<'a> {
    shared: &'a Shared,
    items: Vec<ItemId>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        for item in self.items.drain(..) {
            state.held.remove(&item);
        }
    }
}

impl Shared {
    async fn handle(&self, request: &Message, upstream: &mut Option<Conn>) -> io::Result<Vec<u8>> {
        let op = request
            .header("x-amz-target")
            .and_then(|t| t.strip_prefix("DynamoDB_20120810."))
            .unwrap_or_default();
        let body: Option<Value> = match op {
            "TransactWriteItems" | "PutItem" | "UpdateItem" | "DeleteItem" => {
                serde_json::from_slice(request.body()).ok()
            }
            _ => None,
        };
        // Not JSON, or not a write: DynamoDB Local answers it as it would.
        let Some(body) = body else {
            return self.forward(&request.raw, upstream).await;
        };
        if op == "TransactWriteItems" {
            let actions = body
                .get("TransactItems")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut items = Vec::with_capacity(actions.len());
            for action in &actions {
                items.push(self.item_of_action(action, request, upstream).await?);
            }
            let held = {
                let mut state = lock(&self.state);
                let conflicting: Vec<bool> = items
                    .iter()
                    .map(|i| i.as_ref().is_some_and(|i| state.held.contains(i)))
                    .collect();
                if conflicting.contains(&true) {
                    drop(state);
                    self.conflicts.fetch_add(1, Ordering::SeqCst);
                    return Ok(transaction_cancelled(&conflicting));
                }
                // An item named twice is DynamoDB's ValidationException: hold it once and let
                // DynamoDB Local refuse the request.
                let mut mine = Vec::new();
                for item in items.into_iter().flatten() {
                    if state.held.insert(item.clone()) {
                        mine.push(item);
                    }
                }
                Held {
                    shared: self,
                    items: mine,
                }
            };
            let started = Instant::now();
            let answer = self.forward(&request.raw, upstream).await;
            let hold = Duration::from_nanos(self.hold_nanos.load(Ordering::SeqCst));
            if let Some(left) = hold.checked_sub(started.elapsed()) {
                tokio::time::sleep(left).await;
            }
            drop(held);
            return answer;
        }
        let table = body.get("TableName").and_then(Value::as_str);
        let item = match (table, body.get("Key"), body.get("Item")) {
            (Some(table), Some(key), _) => key_id(table, key, None),
            (Some(table), None, Some(item)) => {
                let keys = self.key_names(table, request, upstream).await?;
                keys.and_then(|k| key_id(table, item, Some(k.as_slice())))
            }
            _ => None,
        };
        if let Some(item) = item
            && lock(&self.state).held.contains(&item)
        {
            self.conflicts.fetch_add(1, Ordering::SeqCst);
            return Ok(write_conflict());
        }
        self.forward(&request.raw, upstream).await
    }

    /// The item one `TransactItems` entry writes or checks.
    async fn item_of_action(
        &self,
        action: &Value,
        request: &Message,
        upstream: &mut Option<Conn>,
    ) -> io::Result<Option<ItemId>> {
        for kind in ["Update", "Delete", "ConditionCheck"] {
            if let Some(a) = action.get(kind) {
                let table = a.get("TableName").and_then(Value::as_str);
                return Ok(table
                    .zip(a.get("Key"))
                    .and_then(|(table, key)| key_id(table, key, None)));
            }
        }
        let Some(put) = action.get("Put") else {
            return Ok(None);
        };
        let (Some(table), Some(item)) = (
            put.get("TableName").and_then(Value::as_str),
            put.get("Item"),
        ) else {
            return Ok(None);
        };
        let keys = self.key_names(table, request, upstream).await?;
        Ok(keys.and_then(|k| key_id(table, item, Some(k.as_slice()))))
    }

    /// The key attribute names of `table`, asked once with a `DescribeTable` signed as
    /// `request` is (DynamoDB Local keeps one database per access key and region unless run
    /// with `-sharedDb`, and does not check signatures). `None` if the table does not answer:
    /// the request is then forwarded untracked and DynamoDB Local says what is wrong.
    async fn key_names(
        &self,
        table: &str,
        request: &Message,
        upstream: &mut Option<Conn>,
    ) -> io::Result<Option<Arc<Vec<String>>>> {
        if let Some(keys) = lock(&self.state).keys.get(table) {
            return Ok(Some(keys.clone()));
        }
        let body = json!({ "TableName": table }).to_string();
        let mut head = String::from("POST / HTTP/1.1\r\n");
        for name in [
            "host",
            "authorization",
            "x-amz-date",
            "x-amz-security-token",
        ] {
            if let Some(value) = request.header(name) {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
        }
        head.push_str(&format!(
            "content-type: application/x-amz-json-1.0\r\n\
             x-amz-target: DynamoDB_20120810.DescribeTable\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        ));
        let answer = self.exchange(head.as_bytes(), upstream).await?;
        let answer: Value = match serde_json::from_slice(answer.body()) {
            Ok(v) => v,
            Err(_) => return Ok(None),
        };
        let Some(schema) = answer.pointer("/Table/KeySchema").and_then(Value::as_array) else {
            return Ok(None);
        };
        let names: Vec<String> = schema
            .iter()
            .filter_map(|k| k.get("AttributeName").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        if names.is_empty() {
            return Ok(None);
        }
        let names = Arc::new(names);
        lock(&self.state)
            .keys
            .insert(table.to_owned(), names.clone());
        Ok(Some(names))
    }

    /// Forwards a client's request and returns the upstream's answer, unchanged.
    async fn forward(&self, raw: &[u8], upstream: &mut Option<Conn>) -> io::Result<Vec<u8>> {
        self.forwarded.fetch_add(1, Ordering::SeqCst);
        Ok(self.exchange(raw, upstream).await?.raw)
    }

    /// One request and its answer on the connection to the upstream, opened when needed. A
    /// kept-alive connection the server closed while idle is opened again once, before any
    /// answer byte was read (so the server never saw the request on it).
    async fn exchange(&self, raw: &[u8], upstream: &mut Option<Conn>) -> io::Result<Message> {
        for attempt in 0..2 {
            let reused = upstream.is_some();
            let conn = match upstream {
                Some(conn) => conn,
                None => {
                    let stream = TcpStream::connect(self.upstream).await?;
                    let _ = stream.set_nodelay(true);
                    upstream.insert(Conn::new(stream))
                }
            };
            let sent = conn.stream.write_all(raw).await;
            let answer = match sent {
                Ok(()) => conn.read_message().await,
                Err(e) => Err(e),
            };
            match answer {
                Ok(Some(message)) => return Ok(message),
                Ok(None) if reused && attempt == 0 => *upstream = None,
                Err(e)
                    if reused
                        && attempt == 0
                        && matches!(
                            e.kind(),
                            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                        ) =>
                {
                    *upstream = None
                }
                Ok(None) => {
                    *upstream = None;
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Err(e) => {
                    *upstream = None;
                    return Err(e);
                }
            }
        }
        Err(io::ErrorKind::UnexpectedEof.into())
    }
}

/// `table` plus the key attributes of `attributes` (all of them for a `Key`; those named in
/// `key_names` for an `Item`), sorted by name so a `Put` and an `Update` of one item agree.
fn key_id(table: &str, attributes: &Value, key_names: Option<&[String]>) -> Option<ItemId> {
    let map = attributes.as_object()?;
    let mut parts: Vec<(&str, String)> = match key_names {
        None => map
            .iter()
            .map(|(k, v)| (k.as_str(), v.to_string()))
            .collect(),
        Some(names) => names
            .iter()
            .map(|n| map.get(n).map(|v| (n.as_str(), v.to_string())))
            .collect::<Option<_>>()?,
    };
    if parts.is_empty() {
        return None;
    }
    parts.sort();
    let key = parts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("\u{0}");
    Some((table.to_owned(), key))
}

/// DynamoDB's answer to a transaction that met another in progress, the reasons in action
/// order.
fn transaction_cancelled(conflicting: &[bool]) -> Vec<u8> {
    let codes: Vec<&str> = conflicting
        .iter()
        .map(|&c| if c { "TransactionConflict" } else { "None" })
        .collect();
    let reasons: Vec<Value> = conflicting
        .iter()
        .map(|&c| {
            if c {
                json!({ "Code": "TransactionConflict", "Message": ONGOING })
            } else {
                json!({ "Code": "None" })
            }
        })
        .collect();
    error_answer(json!({
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Message": format!(
            "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]",
            codes.join(", ")
        ),
        "CancellationReasons": reasons,
    }))
}

/// DynamoDB's answer to a single-item write on an item a transaction holds.
fn write_conflict() -> Vec<u8> {
    error_answer(json!({
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionConflictException",
        "message": ONGOING,
    }))
}

fn error_answer(body: Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "HTTP/1.1 400 Bad Request\r\n\
         x-amzn-RequestId: {}\r\n\
         Content-Type: application/x-amz-json-1.0\r\n\
         Content-Length: {}\r\n\r\n{body}",
        uuid::Uuid::new_v4(),
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_and_update_of_one_item_are_one_item() {
        let names = vec!["pk".to_owned(), "sk".to_owned()];
        let item = json!({"sk": {"N": "1"}, "pk": {"S": "a"}, "balance": {"N": "5"}});
        let key = json!({"pk": {"S": "a"}, "sk": {"N": "1"}});
        assert_eq!(
            key_id("t", &item, Some(names.as_slice())),
            key_id("t", &key, None),
            "a Put's item and an Update's key name the same item"
        );
        assert_ne!(key_id("t", &key, None), key_id("u", &key, None));
        assert_eq!(
            key_id("t", &json!({"sk": {"N": "1"}}), Some(names.as_slice())),
            None
        );
    }

    #[test]
    fn cancellation_reasons_follow_the_actions() {
        let answer = transaction_cancelled(&[false, true, false]);
        let text = String::from_utf8(answer).unwrap_or_default();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        assert!(head.starts_with("HTTP/1.1 400 "));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        let body: Value = serde_json::from_str(body).unwrap_or_default();
        assert_eq!(
            body["__type"],
            "com.amazonaws.dynamodb.v20120810#TransactionCanceledException"
        );
        assert_eq!(
            body["Message"],
            "Transaction cancelled, please refer cancellation reasons for specific reasons \
             [None, TransactionConflict, None]"
        );
        assert_eq!(
            body["CancellationReasons"],
            json!([
                {"Code": "None"},
                {"Code": "TransactionConflict", "Message": ONGOING},
                {"Code": "None"},
            ])
        );
    }

    /// Against DynamoDB Local through the SDK, as the consumers' tests use the proxy.
    #[cfg(feature = "dynamodb")]
    mod dynamodb_local {
        use super::super::*;
        use crate::local;
        use aws_sdk_dynamodb::Client;
        use aws_sdk_dynamodb::error::ProvideErrorMetadata;
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put,
            ScalarAttributeType, TransactWriteItem, Update,
        };

        async fn table(client: &Client) -> String {
            let name = local::unique_name("conflict");
            let created = client
                .create_table()
                .table_name(&name)
                .billing_mode(BillingMode::PayPerRequest)
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name("pk")
                        .key_type(KeyType::Hash)
                        .build()
                        .expect("key schema"),
                )
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name("pk")
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .expect("attribute"),
                )
                .send()
                .await;
            if let Err(e) = created {
                panic!(
                    "DynamoDB Local is not usable at {}: {e:?}",
                    local::dynamodb_endpoint()
                );
            }
            name
        }

        fn add(table: &str, pk: &str) -> TransactWriteItem {
            let update = Update::builder()
                .table_name(table)
                .key("pk", AttributeValue::S(pk.into()))
                .update_expression("ADD n :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .build()
                .expect("update");
            TransactWriteItem::builder().update(update).build()
        }

        fn put(table: &str, pk: &str) -> TransactWriteItem {
            let put = Put::builder()
                .table_name(table)
                .item("pk", AttributeValue::S(pk.into()))
                .item("n", AttributeValue::N("100".into()))
                .build()
                .expect("put");
            TransactWriteItem::builder().put(put).build()
        }

        async fn count(client: &Client, table: &str, pk: &str) -> Option<String> {
            let item = client
                .get_item()
                .table_name(table)
                .key("pk", AttributeValue::S(pk.into()))
                .consistent_read(true)
                .send()
                .await
                .expect("get");
            item.item()
                .and_then(|i| i.get("n"))
                .and_then(|n| n.as_n().ok())
                .cloned()
        }

        /// Two transactions on one item, overlapping: the second is cancelled with one reason
        /// per action, the conflict where it is, and nothing of it written.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn overlapping_transactions_on_one_item_cancel_the_second() {
            let proxy = ConflictProxy::start(&local::dynamodb_endpoint())
                .await
                .expect("proxy");
            proxy.hold(Duration::from_millis(400));
            let client = local::dynamodb_client(&proxy.endpoint());
            let table = table(&client).await;

            let first = {
                let (client, table) = (client.clone(), table.clone());
                tokio::spawn(async move {
                    client
                        .transact_write_items()
                        .transact_items(add(&table, "hot"))
                        .send()
                        .await
                })
            };
            tokio::time::sleep(Duration::from_millis(100)).await;
            let second = client
                .transact_write_items()
                .transact_items(add(&table, "cold"))
                .transact_items(put(&table, "hot"))
                .send()
                .await;
            let err = second.expect_err("the second transaction overlaps the first");
            let service = err.as_service_error().expect("a service error");
            assert_eq!(service.code(), Some("TransactionCanceledException"));
            assert!(
                service
                    .message()
                    .is_some_and(|m| m.ends_with("[None, TransactionConflict]")),
                "{:?}",
                service.message()
            );
            let tc = match service {
                aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(tc) => tc,
                other => panic!("expected TransactionCanceledException, got {other:?}"),
            };
            let reasons: Vec<_> = tc
                .cancellation_reasons()
                .iter()
                .map(|r| (r.code().map(str::to_owned), r.message().map(str::to_owned)))
                .collect();
            assert_eq!(
                reasons,
                [
                    (Some("None".to_owned()), None),
                    (
                        Some("TransactionConflict".to_owned()),
                        Some(ONGOING.to_owned())
                    ),
                ]
            );

            // A single-item write on the held item is refused too.
            let single = client
                .update_item()
                .table_name(&table)
                .key("pk", AttributeValue::S("hot".into()))
                .update_expression("ADD n :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .send()
                .await;
            let err = single.expect_err("a single write on a held item");
            assert_eq!(
                err.as_service_error().and_then(|e| e.code()),
                Some("TransactionConflictException")
            );

            first
                .await
                .expect("join")
                .expect("the first transaction commits");
            assert_eq!(proxy.conflicts(), 2);
            assert_eq!(count(&client, &table, "hot").await.as_deref(), Some("1"));
            assert_eq!(
                count(&client, &table, "cold").await,
                None,
                "nothing of it written"
            );

            // Once the first has answered, the same transaction goes through (the Put's key
            // came from the table's schema).
            client
                .transact_write_items()
                .transact_items(add(&table, "cold"))
                .transact_items(put(&table, "hot"))
                .send()
                .await
                .expect("no transaction in flight any more");
            assert_eq!(count(&client, &table, "hot").await.as_deref(), Some("100"));
        }

        /// Transactions on disjoint items never conflict, however much they overlap.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn disjoint_transactions_are_all_forwarded() {
            let proxy = ConflictProxy::start(&local::dynamodb_endpoint())
                .await
                .expect("proxy");
            proxy.hold(Duration::from_millis(200));
            let client = local::dynamodb_client(&proxy.endpoint());
            let table = table(&client).await;
            let before = proxy.forwarded();
            let writes: Vec<_> = (0..10)
                .map(|i| {
                    let (client, table) = (client.clone(), table.clone());
                    tokio::spawn(async move {
                        client
                            .transact_write_items()
                            .transact_items(put(&table, &format!("put-{i}")))
                            .transact_items(add(&table, &format!("add-{i}")))
                            .send()
                            .await
                    })
                })
                .collect();
            for write in writes {
                write
                    .await
                    .expect("join")
                    .expect("disjoint items never conflict");
            }
            assert_eq!(proxy.conflicts(), 0);
            assert_eq!(proxy.forwarded() - before, 10);
        }
    }
}
