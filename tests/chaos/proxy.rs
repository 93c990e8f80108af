//! A TCP proxy between the chaos workers and one store server, whose behaviour the driver
//! switches at run time: pass bytes through, stall them, go dark, drop the answers, or reset
//! every connection.
//!
//! A minimal stand-in for the shared fault proxy of `tests/support/` (issue 8): it has only
//! what the chaos run needs, and runs inside the driver process, so every worker of a store
//! goes through the same faults at the same moment.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the bytes it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forwards everything.
    Pass,
    /// Holds every byte, both ways, until the mode changes; then delivers them (a congested or
    /// briefly partitioned network: TCP delivers late, but delivers).
    Stall,
    /// Swallows every byte and opens no new upstream connection; when the mode changes, the
    /// connections that saw it are reset (a partition long enough for TCP to give up).
    Dark,
    /// Forwards requests, but drops the first answer of each connection and resets it: the
    /// server did the work, the client never learns (the ambiguous case).
    DropAnswers,
}

/// A running proxy. Dropping it does not stop it: it lives as long as the runtime.
#[derive(Clone)]
pub struct FaultProxy {
    addr: SocketAddr,
    mode: Arc<watch::Sender<Mode>>,
    resets: Arc<watch::Sender<u64>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Request,
    Answer,
}

impl FaultProxy {
    /// Listens on an ephemeral port of 127.0.0.1, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, _) = watch::channel(Mode::Pass);
        let (resets, _) = watch::channel(0u64);
        let proxy = FaultProxy {
            addr,
            mode: Arc::new(mode),
            resets: Arc::new(resets),
        };
        let p = proxy.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let p = p.clone();
                tokio::spawn(async move { p.serve(client, upstream).await });
            }
        });
        Ok(proxy)
    }

    /// The port workers connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Switches the behaviour for every connection, open or new.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Resets every open connection now (new ones are accepted as usual).
    pub fn reset_all(&self) {
        self.resets.send_modify(|n| *n += 1);
    }

    async fn serve(&self, client: TcpStream, upstream: SocketAddr) {
        let mut mode = self.mode.subscribe();
        let mut resets = self.resets.subscribe();
        resets.mark_unchanged();
        // A reset, not a polite close: the client sees ECONNRESET as after a real failure.
        let _ = client.set_zero_linger();
        if *mode.borrow_and_update() == Mode::Dark {
            // Accepted, never answered; reset when the dark period ends.
            let _ = mode.wait_for(|m| *m != Mode::Dark).await;
            return;
        }
        let Ok(server) = TcpStream::connect(upstream).await else {
            return;
        };
        let _ = server.set_zero_linger();
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let request = pump(
            client_read,
            server_write,
            Dir::Request,
            self.mode.subscribe(),
        );
        let answer = pump(
            server_read,
            client_write,
            Dir::Answer,
            self.mode.subscribe(),
        );
        tokio::select! {
            _ = request => {}
            _ = answer => {}
            _ = resets.changed() => {}
        }
        // Every half is dropped here: with zero linger, both sockets are reset.
    }
}

/// Copies `from` to `to` under the proxy's mode; returns when either side ends or the
/// connection must be reset.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    dir: Dir,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        loop {
            let now = *mode.borrow_and_update();
            match now {
                Mode::Pass => break,
                Mode::DropAnswers if dir == Dir::Request => break,
                Mode::DropAnswers => {
                    // The server answered; the client never sees it.
                    return;
                }
                Mode::Stall => {
                    if mode.wait_for(|m| *m != Mode::Stall).await.is_err() {
                        return;
                    }
                }
                Mode::Dark => {
                    // The bytes are gone; the connection dies when the partition heals.
                    let _ = mode.wait_for(|m| *m != Mode::Dark).await;
                    return;
                }
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
