//! Endpoints on 127.0.0.1 that misbehave in the two ways a partition looks like from a client:
//! a port that accepts connections and never answers ([`silent`]), and one that accepts, reads
//! the request and closes ([`closing`]). Plus [`fake_pg`], which completes PostgreSQL's start-up
//! handshake (so a pool hands out a connection) and then goes silent or closes on the first
//! query: the start-up check of a store whose server vanished after the connect.
//!
//! Point a client's endpoint at one to test its timeouts: no real server needed, nothing to
//! switch (the [`fault`](crate::fault) proxy does the same in front of a real server, switchable).
//!
//! ```
//! use std::time::Duration;
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let endpoint = sqs_claim_testkit::silent::silent().await;
//! // e.g. DynamoDbStore::new(client_for(&endpoint.http_url()), "claims")
//! let mut client = tokio::net::TcpStream::connect(endpoint.addr()).await?;
//! client.write_all(b"GET / HTTP/1.1\r\n\r\n").await?;
//! let mut buf = [0u8; 16];
//! let read = tokio::time::timeout(Duration::from_millis(100), client.read(&mut buf)).await;
//! assert!(read.is_err(), "a silent endpoint never answers");
//! # Ok(())
//! # }
//! ```
//!
//! # Panics
//!
//! The constructors panic if 127.0.0.1 cannot be bound: the test's machine, not the code under
//! test, is broken then.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What a fake endpoint does once a client is connected (and, for [`fake_pg`], past the
/// handshake).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Read everything, answer nothing, keep the connection open.
    Silent,
    /// Read the first request, then close the connection.
    Close,
}

/// A listener serving every connection with one behaviour. Dropping it stops the server and
/// closes the connections.
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    server: JoinHandle<()>,
}

impl Endpoint {
    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn serve<F, Fut>(per_connection: F) -> Endpoint
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let server = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            connections.spawn(per_connection(stream));
        }
    });
    Endpoint { addr, server }
}

async fn behave(mut stream: TcpStream, then: Then) {
    let mut buf = [0u8; 4096];
    match then {
        Then::Silent => while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {},
        Then::Close => {
            let _ = stream.read(&mut buf).await;
        }
    }
}

/// A port that accepts connections and never answers.
pub async fn silent() -> Endpoint {
    serve(|s| behave(s, Then::Silent)).await
}

/// A port that accepts, reads the first request, and closes the connection.
pub async fn closing() -> Endpoint {
    serve(|s| behave(s, Then::Close)).await
}

/// A PostgreSQL server that accepts any start-up (no TLS, no password: `AuthenticationOk`,
/// `ReadyForQuery`) and then does `then` with the first query.
pub async fn fake_pg(then: Then) -> Endpoint {
    serve(move |s| pg_connection(s, then)).await
}

async fn read_startup(stream: &mut TcpStream) -> Option<()> {
    loop {
        let len = stream.read_i32().await.ok()?;
        let mut body = vec![0u8; usize::try_from(len).ok()?.checked_sub(4)?];
        stream.read_exact(&mut body).await.ok()?;
        // SSLRequest / GSSENCRequest: refuse, and the client sends its StartupMessage.
        let code = body
            .get(..4)
            .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        if matches!(code, Some(80_877_103 | 80_877_104)) {
            stream.write_all(b"N").await.ok()?;
            continue;
        }
        return Some(());
    }
}

async fn pg_connection(mut stream: TcpStream, then: Then) {
    if read_startup(&mut stream).await.is_none() {
        return;
    }
    // AuthenticationOk, then ReadyForQuery (idle).
    let mut hello = Vec::new();
    hello.extend_from_slice(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
    hello.extend_from_slice(&[b'Z', 0, 0, 0, 5, b'I']);
    if stream.write_all(&hello).await.is_err() {
        return;
    }
    behave(stream, then).await;
}
