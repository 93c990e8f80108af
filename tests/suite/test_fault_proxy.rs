//! The fault proxy (`sqs_claim_testkit::fault`) against a local echo server: each fault
//! does what the store fault tests rely on, healing behaves as documented, and dropping the
//! proxy stops it. No external server is needed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqs_claim_testkit::fault::{Fault, FaultProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long a read waits before the test calls it "no answer". Only ever used to prove an
/// absence, so a slow machine makes the tests slower, never wrong.
const QUIET: Duration = Duration::from_millis(200);

/// The longest a wait for something that must happen may take.
const WAIT: Duration = Duration::from_secs(5);

/// An echo server that counts the bytes it received.
struct Echo {
    addr: SocketAddr,
    received: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Echo {
    async fn start() -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
        let addr = listener.local_addr().expect("echo addr");
        let received = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&received);
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        counter.fetch_add(n as u64, Ordering::SeqCst);
                        if s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Echo {
            addr,
            received,
            task,
        }
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connect(proxy: &FaultProxy) -> TcpStream {
    TcpStream::connect(proxy.addr())
        .await
        .expect("connect to the proxy")
}

/// Reads exactly `want.len()` bytes within [`WAIT`] and checks them.
async fn expect_echo(s: &mut TcpStream, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    tokio::time::timeout(WAIT, s.read_exact(&mut got))
        .await
        .expect("an echo within WAIT")
        .expect("read the echo");
    assert_eq!(got, want);
}

/// Nothing arrives, and the connection is not closed, for [`QUIET`].
async fn expect_silence(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(QUIET, s.read(&mut buf)).await {
        Err(_) => {}
        Ok(Ok(0)) => panic!("the proxy closed the connection; it must stay open and silent"),
        Ok(Ok(n)) => panic!("the proxy answered {n} bytes; it must stay silent"),
        Ok(Err(e)) => panic!("the connection failed ({e}); it must stay open and silent"),
    }
}

/// The connection is reset (or at least closed) within [`WAIT`].
async fn expect_closed(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(WAIT, s.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!("expected the connection closed, read {n} bytes"),
        Err(_) => panic!("the connection is still open after {WAIT:?}"),
    }
}

/// The connection is reset: a read fails with `ConnectionReset` within [`WAIT`].
async fn expect_reset(s: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(WAIT, s.read(&mut buf)).await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected a reset, got {other:?}"),
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let started = tokio::time::Instant::now();
    while !check() {
        assert!(started.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn pass_forwards_both_ways() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    let mut s = connect(&proxy).await;
    s.write_all(b"hello").await.unwrap();
    expect_echo(&mut s, b"hello").await;
    assert_eq!((proxy.bytes_up(), proxy.bytes_down()), (5, 5));
    assert_eq!(proxy.accepted(), 1);
}

#[tokio::test]
async fn stall_reads_forwards_nothing_and_keeps_the_socket_open() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    let mut old = connect(&proxy).await;
    old.write_all(b"one").await.unwrap();
    expect_echo(&mut old, b"one").await;

    proxy.set(Fault::Stall);
    old.write_all(b"two").await.unwrap();
    expect_silence(&mut old).await;
    let mut new = connect(&proxy).await;
    new.write_all(b"three").await.unwrap();
    expect_silence(&mut new).await;
    assert_eq!(
        echo.received(),
        3,
        "nothing reaches the server while stalled"
    );

    // Healed: both connections lost bytes, so they are reset; a new one works.
    proxy.set(Fault::Pass);
    expect_reset(&mut old).await;
    expect_reset(&mut new).await;
    let mut fresh = connect(&proxy).await;
    fresh.write_all(b"four").await.unwrap();
    expect_echo(&mut fresh, b"four").await;
}

#[tokio::test]
async fn dark_holds_traffic_both_ways_and_delivers_it_when_healed() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    let mut old = connect(&proxy).await;
    old.write_all(b"one").await.unwrap();
    expect_echo(&mut old, b"one").await;

    proxy.set(Fault::Dark);
    old.write_all(b"two").await.unwrap();
    expect_silence(&mut old).await;
    let mut new = connect(&proxy).await;
    new.write_all(b"three").await.unwrap();
    expect_silence(&mut new).await;
    assert_eq!(echo.received(), 3, "nothing reaches the server while dark");

    // A partition that heals delivers what TCP held, on both connections.
    proxy.set(Fault::Pass);
    expect_echo(&mut old, b"two").await;
    expect_echo(&mut new, b"three").await;
}

#[tokio::test]
async fn slow_holds_each_answer_back_and_delivers_it_in_order() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    let mut s = connect(&proxy).await;
    s.write_all(b"one").await.unwrap();
    expect_echo(&mut s, b"one").await;

    // Answers far later than QUIET: the request reaches the server at once, the answer waits.
    let late = Duration::from_secs(60);
    proxy.set(Fault::Slow {
        min: late,
        max: late,
    });
    s.write_all(b"two").await.unwrap();
    eventually("the request reaches the server", || echo.received() == 6).await;
    s.write_all(b"three").await.unwrap();
    eventually("the second request reaches the server", || {
        echo.received() == 11
    })
    .await;
    expect_silence(&mut s).await;
    // Healed: what was held arrives at once, in order, and nothing was lost.
    proxy.set(Fault::Pass);
    expect_echo(&mut s, b"twothree").await;

    // A short delay: answered, late but whole, without healing.
    proxy.set(Fault::Slow {
        min: Duration::from_millis(10),
        max: Duration::from_millis(30),
    });
    for word in [&b"four"[..], b"five", b"six"] {
        s.write_all(word).await.unwrap();
        expect_echo(&mut s, word).await;
    }
}

#[tokio::test]
async fn drop_answer_applies_the_request_and_loses_the_answer() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    let mut s = connect(&proxy).await;
    s.write_all(b"one").await.unwrap();
    expect_echo(&mut s, b"one").await;

    proxy.set(Fault::DropAnswer);
    s.write_all(b"two").await.unwrap();
    eventually("the request reaches the server", || echo.received() == 6).await;
    expect_silence(&mut s).await;
    let mut new = connect(&proxy).await;
    new.write_all(b"three").await.unwrap();
    eventually("a new connection's request reaches the server", || {
        echo.received() == 11
    })
    .await;
    expect_silence(&mut new).await;

    // Healed: the answers were lost, so both connections are reset.
    proxy.set(Fault::Pass);
    expect_reset(&mut s).await;
    expect_reset(&mut new).await;
}

#[tokio::test]
async fn reset_closes_existing_and_new_connections_with_rst() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    let mut old = connect(&proxy).await;
    old.write_all(b"one").await.unwrap();
    expect_echo(&mut old, b"one").await;

    proxy.set(Fault::Reset);
    expect_reset(&mut old).await;
    let mut new = connect(&proxy).await;
    expect_reset(&mut new).await;
    eventually("no connection stays open", || proxy.open() == 0).await;

    proxy.set(Fault::Pass);
    let mut fresh = connect(&proxy).await;
    fresh.write_all(b"two").await.unwrap();
    expect_echo(&mut fresh, b"two").await;
}

/// A byte trigger lands inside a chunk: exactly the first `n` bytes get through.
#[tokio::test]
async fn a_byte_trigger_switches_in_the_middle_of_a_write() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    let mut s = connect(&proxy).await;
    s.write_all(b"warm").await.unwrap();
    expect_echo(&mut s, b"warm").await;

    proxy.set_after_bytes(3, Fault::Dark);
    s.write_all(b"abcdefgh").await.unwrap();
    eventually("the first 3 bytes reach the server", || {
        echo.received() == 7
    })
    .await;
    // Dark: the echo of those 3 bytes is not read from the server, the other 5 not forwarded.
    expect_silence(&mut s).await;
    assert_eq!(proxy.fault(), Fault::Dark);
    assert_eq!(echo.received(), 7);
    assert_eq!(proxy.bytes_up(), 7);

    // Nothing was lost, only held: healing delivers all of it, in order.
    proxy.set(Fault::Pass);
    expect_echo(&mut s, b"abcdefgh").await;
    assert_eq!(echo.received(), 12);
}

#[tokio::test]
async fn a_timer_switches_later_and_set_cancels_it() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    proxy.set_after(Duration::from_millis(20), Fault::Reset);
    eventually("the timer fires", || proxy.fault() == Fault::Reset).await;

    proxy.set(Fault::Pass);
    proxy.set_after(QUIET, Fault::Reset);
    proxy.set_after_bytes(1, Fault::Stall);
    proxy.set(Fault::Pass);
    tokio::time::sleep(QUIET * 2).await;
    let mut s = connect(&proxy).await;
    s.write_all(b"still healthy").await.unwrap();
    expect_echo(&mut s, b"still healthy").await;
    assert_eq!(proxy.fault(), Fault::Pass, "set() cancels what was armed");
}

#[tokio::test]
async fn dropping_the_proxy_stops_it() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.expect("start proxy");
    let addr = proxy.addr();
    let handle = proxy.handle();
    let mut s = connect(&proxy).await;
    proxy.set(Fault::Dark);
    let mut dark = connect(&proxy).await;
    eventually("both connections are served", || handle.open() == 2).await;

    drop(proxy);
    expect_closed(&mut s).await;
    expect_closed(&mut dark).await;
    eventually("every connection task ended", || handle.open() == 0).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}
