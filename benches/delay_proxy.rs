//! A delay proxy on loopback for `make bench`: puts a fixed delay on every HTTP request
//! sent to DynamoDB Local, as a remote table would, and counts the requests by operation.
//!
//! `delay_proxy --listen 127.0.0.1:0 --upstream 127.0.0.1:8000 --delay-ms 100` prints
//! `listening <addr>` once bound. Control requests (from compare.py, on their own connection):
//! `GET /__bench/take?delay_ms=N` answers the counts since the last take as JSON, resets them and
//! sets the delay for what follows.
//!
//! Why it parses requests instead of delaying each read: SDKs keep connections alive and send
//! request after request on one connection, so a delay per connection would be paid once; and a
//! delay per `read()` is paid once per TCP segment, several times for one request or once for
//! two. Reading each HTTP/1.1 request to its end (headers, then `Content-Length` bytes) gives
//! exactly one delay per request/response round trip, before the request is forwarded, and
//! names the operation (`X-Amz-Target`) for the counts. Responses are copied back as they come.
//! None of the clients compared pipelines requests or sends `Expect: 100-continue` or chunked
//! bodies to DynamoDB; a chunked request is refused with a message rather than mis-timed.
//!
//! With no `--listen` (how `cargo bench` and `cargo test --benches` call every bench target)
//! it does nothing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Stats {
    delay_ms: AtomicU64,
    connections: AtomicU64,
    ops: Mutex<BTreeMap<String, u64>>,
}

impl Stats {
    fn take(&self) -> serde_json::Value {
        let ops = match self.ops.lock() {
            Ok(mut ops) => std::mem::take(&mut *ops),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        let requests: u64 = ops.values().sum();
        serde_json::json!({
            "requests": requests,
            "connections": self.connections.swap(0, Ordering::Relaxed),
            "ops": ops,
        })
    }

    fn count(&self, op: &str) {
        let mut ops = match self.ops.lock() {
            Ok(ops) => ops,
            Err(p) => p.into_inner(),
        };
        *ops.entry(op.to_owned()).or_default() += 1;
    }
}

/// One request's head (request line and headers, as sent) and what the proxy needs from it.
struct Head {
    raw: Vec<u8>,
    path: String,
    content_length: usize,
    chunked: bool,
    target: Option<String>,
}

/// Reads one request head; `None` at a clean end of the connection.
async fn read_head<R: AsyncBufReadExt + Unpin>(r: &mut R) -> std::io::Result<Option<Head>> {
    let mut raw = Vec::with_capacity(1024);
    let mut line = Vec::new();
    let (mut path, mut content_length, mut chunked, mut target) = (String::new(), 0, false, None);
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).await? == 0 {
            return if raw.is_empty() {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        raw.extend_from_slice(&line);
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text.is_empty() {
            if raw.len() <= 2 {
                // A stray CRLF between requests (RFC 9112 allows it): skip.
                raw.clear();
                continue;
            }
            break;
        }
        if path.is_empty() {
            path = text.split(' ').nth(1).unwrap_or("/").to_owned();
            continue;
        }
        if let Some((name, value)) = text.split_once(':') {
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => content_length = value.parse().unwrap_or(0),
                "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
                "x-amz-target" => target = Some(value.to_owned()),
                _ => {}
            }
        }
    }
    Ok(Some(Head {
        raw,
        path,
        content_length,
        chunked,
        target,
    }))
}

async fn control(mut client: TcpStream, head: &Head, stats: &Stats) -> std::io::Result<()> {
    if let Some(v) = head
        .path
        .split_once("delay_ms=")
        .and_then(|(_, v)| v.split('&').next()?.parse::<u64>().ok())
    {
        stats.delay_ms.store(v, Ordering::Relaxed);
    }
    let body = stats.take().to_string();
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(answer.as_bytes()).await?;
    client.shutdown().await
}

async fn connection(client: TcpStream, upstream: String, stats: Arc<Stats>) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    let Some(first) = read_head(&mut client_read).await? else {
        return Ok(());
    };
    if first.path.starts_with("/__bench/") {
        let client = client_read
            .into_inner()
            .reunite(client_write)
            .map_err(std::io::Error::other)?;
        return control(client, &first, &stats).await;
    }
    stats.connections.fetch_add(1, Ordering::Relaxed);
    let server = TcpStream::connect(&upstream).await?;
    let _ = server.set_nodelay(true);
    let (mut server_read, mut server_write) = server.into_split();
    // Answers flow back untouched; the delay sits on the way in, once per request.
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    let mut head = Some(first);
    let mut body = Vec::new();
    while let Some(h) = head.take() {
        if h.chunked {
            eprintln!("delay_proxy: chunked request bodies are not supported; closing");
            break;
        }
        body.resize(h.content_length, 0);
        client_read.read_exact(&mut body).await?;
        let op = h
            .target
            .as_deref()
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("other");
        stats.count(op);
        let delay = stats.delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        server_write.write_all(&h.raw).await?;
        server_write.write_all(&body).await?;
        head = read_head(&mut client_read).await?;
    }
    let _ = server_write.shutdown().await;
    let _ = back.await;
    Ok(())
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let get = |name: &str| {
        argv.iter()
            .position(|a| a == name)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    };
    let Some(listen) = get("--listen") else {
        return;
    };
    let upstream = get("--upstream").unwrap_or_else(|| "127.0.0.1:8000".into());
    let stats = Arc::new(Stats::default());
    let delay = get("--delay-ms").and_then(|v| v.parse().ok()).unwrap_or(0);
    stats.delay_ms.store(delay, Ordering::Relaxed);
    // One thread: the proxy shares the machine with the client it measures and with DynamoDB
    // Local, and waiting is all it does.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("delay_proxy: tokio runtime: {e}");
            std::process::exit(2);
        }
    };
    rt.block_on(async move {
        let listener = match TcpListener::bind(&listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("delay_proxy: bind {listen}: {e}");
                std::process::exit(2);
            }
        };
        match listener.local_addr() {
            Ok(a) => println!("listening {a}"),
            Err(e) => {
                eprintln!("delay_proxy: {e}");
                std::process::exit(2);
            }
        }
        // Ends with its parent: compare.py holds our stdin open and never writes to it.
        std::thread::spawn(|| {
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            std::process::exit(0);
        });
        loop {
            let client = match listener.accept().await {
                Ok((client, _)) => client,
                Err(e) => {
                    eprintln!("delay_proxy: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let (upstream, stats) = (upstream.clone(), Arc::clone(&stats));
            tokio::spawn(async move {
                if let Err(e) = connection(client, upstream, stats).await
                    && e.kind() != std::io::ErrorKind::ConnectionReset
                {
                    eprintln!("delay_proxy: {e}");
                }
            });
        }
    });
}
