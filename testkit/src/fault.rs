//! A TCP fault proxy on 127.0.0.1, in front of a real server (DynamoDB Local, PostgreSQL,
//! Redis), switchable at run time between healthy forwarding and the ways a network dependency
//! fails without saying so: what a store client does when its server hangs, vanishes, or loses an
//! answer after applying the request.
//!
//! ```
//! use std::time::Duration;
//! use sqs_claim_testkit::fault::{Fault, FaultProxy};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! // A server to stand in front of (in a real test: Redis, PostgreSQL, DynamoDB Local; or
//! // `FaultProxy::in_front_of("redis://127.0.0.1:6379/")`, which also rewrites the URL).
//! let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let upstream = echo.local_addr()?;
//! tokio::spawn(async move {
//!     while let Ok((mut s, _)) = echo.accept().await {
//!         tokio::spawn(async move {
//!             let mut buf = [0u8; 64];
//!             while let Ok(n @ 1..) = s.read(&mut buf).await {
//!                 let _ = s.write_all(&buf[..n]).await;
//!             }
//!         });
//!     }
//! });
//!
//! let proxy = FaultProxy::start(upstream).await?;
//! let mut client = tokio::net::TcpStream::connect(proxy.addr()).await?;
//! client.write_all(b"ping").await?;
//! let mut answer = [0u8; 4];
//! client.read_exact(&mut answer).await?;
//! assert_eq!(&answer, b"ping");
//!
//! proxy.set(Fault::Dark); // a partition: nothing moves, nothing closes
//! client.write_all(b"ping").await?;
//! let read = tokio::time::timeout(Duration::from_millis(200), client.read(&mut answer)).await;
//! assert!(read.is_err(), "no answer through a dark proxy");
//!
//! proxy.set_after_bytes(4096, Fault::Stall); // once 4 KiB more went to the server
//! proxy.set_after(Duration::from_millis(50), Fault::Reset); // or after a while
//! // a slow server: every answer 1-3 s late, none lost
//! proxy.set(Fault::Slow { min: Duration::from_secs(1), max: Duration::from_secs(3) });
//! proxy.set(Fault::Pass); // heal (and cancel anything armed)
//! # Ok(())
//! # }
//! ```
//!
//! | fault | existing connections | new connections |
//! |-------|----------------------|-----------------|
//! | [`Fault::Pass`] | forwarded both ways | connected upstream and forwarded |
//! | [`Fault::Stall`] | the client's bytes are read and discarded, the server's too: nothing forwarded, nothing answered, nothing closed (a server that hangs) | accepted and read, never connected upstream, never answered |
//! | [`Fault::Dark`] | nothing is read on either side, so nothing moves, and nothing is ever closed (a partition, a security-group change: bytes sit unacknowledged in the kernel buffers) | accepted, never read, never answered |
//! | [`Fault::DropAnswer`] | the client's bytes reach the server, the server's answer is discarded: the request is applied, the answer is lost | connected upstream, requests forwarded, answers discarded |
//! | [`Fault::Reset`] | closed at once with a TCP RST (`SO_LINGER` 0) | accepted and reset |
//! | [`Fault::Slow`] | forwarded both ways, each chunk of the server's answer held back a random time between `min` and `max` (answers stay in order; answers on one connection are held side by side, not one after another) | connected upstream and forwarded, answers late |
//!
//! # Healing
//!
//! A partition that heals delivers what TCP held: after [`Fault::Dark`], switching back to
//! [`Fault::Pass`] lets the held bytes through (late: the client may have given up on them).
//! A connection that **lost** bytes (discarded by `Stall` or `DropAnswer`) can never be used
//! again, since its byte stream has a hole a client would read as garbage: as soon as the fault
//! would forward in the direction that lost bytes, the proxy resets it. Clients reconnect, as
//! they would after a real server restart.
//!
//! # Bounds
//!
//! At most [`MAX_CONNECTIONS`] connections at once (more are reset on accept), one 16 KiB
//! buffer per direction and connection, upstream connects bounded by [`CONNECT_TIMEOUT`].
//! Dropping the [`FaultProxy`] stops everything: the accept loop, every connection (their
//! sockets close) and every armed timer. A [`FaultHandle`] that outlives it switches nothing.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

/// The most connections the proxy keeps open at once; the next ones are reset on accept.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a connection to the upstream server may take before the client is reset.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

const BUFFER: usize = 16 * 1024;

/// What the proxy does to traffic. See the [module documentation](self) for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Forward both ways.
    Pass,
    /// Read from both sides, forward nothing, answer nothing, keep every socket open.
    Stall,
    /// Read nothing, forward nothing, close nothing.
    Dark,
    /// Forward the client's bytes, discard the server's.
    DropAnswer,
    /// Reset every connection, existing and new.
    Reset,
    /// Forward both ways, each chunk the server sends held back a random time in
    /// `min..=max` before it reaches the client: a server (or a path) that answers late, but
    /// answers. Switching to [`Fault::Pass`] delivers what is held at once.
    Slow {
        /// The least delay of an answer.
        min: Duration,
        /// The most delay of an answer (taken as `min` if smaller).
        max: Duration,
    },
}

impl Fault {
    /// Whether client bytes reach the server.
    fn forwards_up(self) -> bool {
        matches!(self, Fault::Pass | Fault::DropAnswer | Fault::Slow { .. })
    }

    /// Whether server bytes reach the client (late, under `Slow`).
    fn forwards_down(self) -> bool {
        matches!(self, Fault::Pass | Fault::Slow { .. })
    }

    /// Whether sockets are read at all.
    fn reads(self) -> bool {
        matches!(
            self,
            Fault::Pass | Fault::Stall | Fault::DropAnswer | Fault::Slow { .. }
        )
    }

    /// How long to hold back a chunk of the server's answer: random in `min..=max` under
    /// `Slow`, else nothing.
    fn hold(self) -> Duration {
        match self {
            Fault::Slow { min, max } if max > min => {
                let span = (max - min).as_nanos();
                let pick = uuid::Uuid::new_v4().as_u128() % (span + 1);
                min + Duration::from_nanos(u64::try_from(pick).unwrap_or(u64::MAX))
            }
            Fault::Slow { min, .. } => min,
            _ => Duration::ZERO,
        }
    }
}

/// A fault switch armed on client bytes.
#[derive(Debug, Clone, Copy)]
struct ByteTrigger {
    remaining: u64,
    fault: Fault,
}

struct Shared {
    fault: watch::Sender<Fault>,
    trigger: Mutex<Option<ByteTrigger>>,
    timers: Mutex<Vec<AbortHandle>>,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    accepted: AtomicUsize,
    open: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a single read or assignment: a poisoned lock holds a
    // consistent value.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Of `len` client bytes about to be forwarded, how many may go before an armed byte
    /// trigger fires (it fires here, so the rest of the chunk meets the new fault).
    fn take_up(&self, len: usize) -> usize {
        let mut trigger = lock(&self.trigger);
        let allowed = match trigger.as_mut() {
            Some(t) if (len as u64) >= t.remaining => {
                let allowed = t.remaining as usize;
                let fault = t.fault;
                *trigger = None;
                self.fault.send_replace(fault);
                allowed
            }
            Some(t) => {
                t.remaining -= len as u64;
                len
            }
            None => len,
        };
        self.bytes_up.fetch_add(allowed as u64, Ordering::SeqCst);
        allowed
    }

    fn disarm(&self) {
        *lock(&self.trigger) = None;
        for timer in lock(&self.timers).drain(..) {
            timer.abort();
        }
    }
}

/// A clonable switch for a running [`FaultProxy`] (to flip it from a handler, say).
#[derive(Clone)]
pub struct FaultHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultHandle")
            .field("fault", &self.fault())
            .field("open", &self.open())
            .finish_non_exhaustive()
    }
}

impl FaultHandle {
    /// Switches to `fault` now, and cancels any switch armed with
    /// [`set_after_bytes`](Self::set_after_bytes) or [`set_after`](Self::set_after).
    pub fn set(&self, fault: Fault) {
        self.shared.disarm();
        self.shared.fault.send_replace(fault);
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        *self.shared.fault.borrow()
    }

    /// Switches to `fault` once `bytes` more client bytes have been forwarded to the server
    /// (counted across connections, from this call). The byte that completes the count is the
    /// last one forwarded: the rest of its chunk already meets `fault`, so a fault can land in
    /// the middle of a request. Replaces an earlier byte trigger; `0` switches now.
    pub fn set_after_bytes(&self, bytes: u64, fault: Fault) {
        if bytes == 0 {
            *lock(&self.shared.trigger) = None;
            self.shared.fault.send_replace(fault);
            return;
        }
        *lock(&self.shared.trigger) = Some(ByteTrigger {
            remaining: bytes,
            fault,
        });
    }

    /// Switches to `fault` after `delay` (a timer task, stopped with the proxy or by
    /// [`set`](Self::set)).
    pub fn set_after(&self, delay: Duration, fault: Fault) {
        let shared = Arc::downgrade(&self.shared);
        let timer = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(shared) = shared.upgrade() {
                shared.fault.send_replace(fault);
            }
        });
        let mut timers = lock(&self.shared.timers);
        timers.retain(|t| !t.is_finished());
        timers.push(timer.abort_handle());
    }

    /// Client bytes forwarded to the server so far.
    pub fn bytes_up(&self) -> u64 {
        self.shared.bytes_up.load(Ordering::SeqCst)
    }

    /// Server bytes forwarded to clients so far (discarded answers are not counted).
    pub fn bytes_down(&self) -> u64 {
        self.shared.bytes_down.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }
}

/// The proxy: a listener on an ephemeral port of 127.0.0.1 in front of `upstream`. Dropping it
/// stops it (see the [module documentation](self)).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    handle: FaultHandle,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Binds 127.0.0.1 on an ephemeral port and starts forwarding to `upstream`
    /// ([`Fault::Pass`]). Must be called inside a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (fault, _) = watch::channel(Fault::Pass);
        let shared = Arc::new(Shared {
            fault,
            trigger: Mutex::new(None),
            timers: Mutex::new(Vec::new()),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            accepted: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, upstream, Arc::clone(&shared)));
        Ok(FaultProxy {
            addr,
            upstream,
            handle: FaultHandle { shared },
            accept,
        })
    }

    /// The proxy's address (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The server behind it.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// A clonable switch.
    pub fn handle(&self) -> FaultHandle {
        self.handle.clone()
    }

    /// A proxy in front of the server a URL names (`scheme://[user[:password]@]host[:port]/...`,
    /// as `postgres://`, `redis://`, `http://`; the port defaults by scheme), and the same URL
    /// pointing at the proxy instead.
    pub async fn in_front_of(url: &str) -> io::Result<(FaultProxy, String)> {
        let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, why.to_owned());
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("URL without scheme://"))?;
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let host_port = if host_port
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            host_port.to_owned()
        } else {
            let port = match scheme {
                "postgres" | "postgresql" => 5432,
                "redis" => 6379,
                "http" => 80,
                _ => {
                    return Err(invalid(
                        "URL without a port, of a scheme with no known default",
                    ));
                }
            };
            format!("{host_port}:{port}")
        };
        let upstream = tokio::net::lookup_host(host_port.as_str())
            .await?
            .next()
            .ok_or_else(|| invalid("the URL's host does not resolve"))?;
        let proxy = FaultProxy::start(upstream).await?;
        let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let proxied = format!("{scheme}://{userinfo}{}{tail}", proxy.addr());
        Ok((proxy, proxied))
    }
}

impl std::ops::Deref for FaultProxy {
    type Target = FaultHandle;

    fn deref(&self) -> &FaultHandle {
        &self.handle
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The accept task owns the connections' `JoinSet`: aborting it drops them all.
        self.accept.abort();
        self.handle.shared.disarm();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else {
                    // Out of file descriptors, say: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                if connections.len() >= MAX_CONNECTIONS {
                    reset(client);
                    continue;
                }
                connections.spawn(serve(client, upstream, Arc::clone(&shared)));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Closes with an RST rather than a FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Counts a connection open while it lives.
struct OpenGuard(Arc<Shared>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One direction's state: bytes read but not yet handled, end of stream seen / delivered, and
/// whether bytes were discarded (the stream has a hole).
#[derive(Default)]
struct Lane {
    pending: Vec<u8>,
    eof: bool,
    eof_delivered: bool,
    lost: bool,
}

impl Lane {
    fn idle(&self) -> bool {
        self.pending.is_empty() && (!self.eof || self.eof_delivered)
    }
}

async fn read_some(stream: Option<&mut TcpStream>, buf: &mut [u8]) -> io::Result<usize> {
    match stream {
        Some(s) => s.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Writes all of `bytes`, unless the fault turns to `Reset` first (`false`), or the proxy stops.
async fn write_or_reset(
    dst: &mut TcpStream,
    bytes: &[u8],
    fault: &mut watch::Receiver<Fault>,
) -> io::Result<bool> {
    let write = dst.write_all(bytes);
    tokio::pin!(write);
    loop {
        tokio::select! {
            r = &mut write => return r.map(|()| true),
            changed = fault.changed() => {
                if changed.is_err() || *fault.borrow() == Fault::Reset {
                    return Ok(false);
                }
            }
        }
    }
}

async fn serve(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    shared.open.fetch_add(1, Ordering::SeqCst);
    let _open = OpenGuard(Arc::clone(&shared));
    let mut fault = shared.fault.subscribe();
    let mut client = client;
    let mut server: Option<TcpStream> = None;
    let mut up = Lane::default();
    let mut down = Lane::default();
    // Under `Slow`: chunks of the server's answers, each with when it may reach the client.
    let mut held: std::collections::VecDeque<(tokio::time::Instant, Vec<u8>)> =
        std::collections::VecDeque::new();
    let mut up_buf = vec![0u8; BUFFER];
    let mut down_buf = vec![0u8; BUFFER];

    loop {
        let now = *fault.borrow_and_update();
        if now == Fault::Reset
            || (now.forwards_up() && up.lost)
            || (now.forwards_down() && down.lost)
        {
            reset(client);
            if let Some(s) = server {
                reset(s);
            }
            return;
        }
        if now.forwards_up() && server.is_none() {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    server = Some(s);
                }
                _ => {
                    reset(client);
                    return;
                }
            }
        }

        // Handle what was read, under the fault in force now.
        if !up.idle() {
            match now {
                Fault::Pass | Fault::DropAnswer | Fault::Slow { .. } => {
                    let Some(s) = server.as_mut() else { return };
                    if !up.pending.is_empty() {
                        let allowed = shared.take_up(up.pending.len());
                        match write_or_reset(s, &up.pending[..allowed], &mut fault).await {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(_) => {
                                reset(client);
                                return;
                            }
                        }
                        up.pending.drain(..allowed);
                    } else {
                        let _ = s.shutdown().await;
                        up.eof_delivered = true;
                    }
                    continue;
                }
                Fault::Stall => {
                    up.pending.clear();
                    up.lost = true;
                    // A close the server never hears of is a loss too.
                    up.eof_delivered = up.eof;
                }
                Fault::Dark | Fault::Reset => {}
            }
        }
        // Under `Slow`, what the server sent waits its turn; what is due (all of it once the
        // fault is `Pass` again) goes to the client in order.
        if let Fault::Slow { .. } = now
            && !down.pending.is_empty()
        {
            let due = tokio::time::Instant::now() + now.hold();
            // In order: never before the chunk ahead of it.
            let due = held.back().map_or(due, |(ahead, _)| due.max(*ahead));
            held.push_back((due, std::mem::take(&mut down.pending)));
        }
        if now.forwards_down()
            && let Some((due, _)) = held.front()
            && (now == Fault::Pass || *due <= tokio::time::Instant::now())
        {
            if let Some((_, chunk)) = held.pop_front() {
                match write_or_reset(&mut client, &chunk, &mut fault).await {
                    Ok(true) => {}
                    Ok(false) => {
                        held.push_front((tokio::time::Instant::now(), chunk));
                        continue;
                    }
                    Err(_) => return,
                }
                shared
                    .bytes_down
                    .fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
            continue;
        }
        if matches!(now, Fault::Stall | Fault::DropAnswer) && !held.is_empty() {
            held.clear();
            down.lost = true;
        }
        if !down.idle() && held.is_empty() {
            match now {
                Fault::Pass | Fault::Slow { .. } => {
                    if !down.pending.is_empty() {
                        let n = down.pending.len();
                        match write_or_reset(&mut client, &down.pending, &mut fault).await {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(_) => return,
                        }
                        shared.bytes_down.fetch_add(n as u64, Ordering::SeqCst);
                        down.pending.clear();
                    } else {
                        let _ = client.shutdown().await;
                        down.eof_delivered = true;
                    }
                    continue;
                }
                Fault::Stall | Fault::DropAnswer => {
                    down.pending.clear();
                    down.lost = true;
                    down.eof_delivered = down.eof;
                }
                Fault::Dark | Fault::Reset => {}
            }
        }
        if up.eof_delivered && down.eof_delivered && held.is_empty() && now.forwards_down() {
            return;
        }

        let read_client = now.reads() && up.pending.is_empty() && !up.eof;
        let read_server = now.reads() && down.pending.is_empty() && !down.eof;
        let next_due = held
            .front()
            .map(|(due, _)| *due)
            .filter(|_| now.forwards_down());
        tokio::select! {
            () = tokio::time::sleep_until(next_due.unwrap_or_else(tokio::time::Instant::now)), if next_due.is_some() => {}
            changed = fault.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            r = client.read(&mut up_buf), if read_client => match r {
                Ok(0) => up.eof = true,
                Ok(n) => up.pending.extend_from_slice(&up_buf[..n]),
                Err(_) => {
                    // The client is gone (reset): pass it on.
                    if let Some(s) = server {
                        reset(s);
                    }
                    return;
                }
            },
            r = read_some(server.as_mut(), &mut down_buf), if read_server => match r {
                Ok(0) => down.eof = true,
                Ok(n) => down.pending.extend_from_slice(&down_buf[..n]),
                Err(_) => {
                    // The server reset the connection: the client hears of it only if traffic
                    // flows down; otherwise the socket stays open and silent.
                    down.eof = true;
                    if now.forwards_down() {
                        reset(client);
                        return;
                    }
                    down.lost = true;
                    down.eof_delivered = true;
                }
            },
        }
    }
}
