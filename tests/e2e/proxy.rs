//! A loopback TCP proxy in front of kube-apiserver that a test can cut and restore, or whose
//! connections it can black-hole, so an informer can be disconnected while the admin client
//! (talking to the apiserver directly) keeps changing objects.
//!
//! TLS passes through untouched: the server certificate names `127.0.0.1`, which the proxy's
//! address is as well.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    /// Bumped by [`Proxy::cut`]: every live connection ends when it changes.
    generation: watch::Sender<u64>,
    /// Connections are numbered from 0 as they are accepted; those numbered below this value are
    /// black-holed ([`Proxy::black_hole`]), 0 when none is.
    holed_below: watch::Sender<u64>,
    accepted: Arc<AtomicU64>,
    accept_task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream_port`.
    pub async fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the proxy binds a loopback port");
        let port = listener.local_addr().expect("bound address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let (holed_below, _) = watch::channel(0u64);
        let accepted = Arc::new(AtomicU64::new(0));
        let accept_task = {
            let cut = cut.clone();
            let generation = generation.clone();
            let holed_below = holed_below.clone();
            let accepted = accepted.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    // Subscribe before looking at the flag: a cut that lands in between still
                    // ends this connection through the generation change.
                    let mut changed = generation.subscribe();
                    if cut.load(Ordering::SeqCst) {
                        // Disconnected: the client sees its connection closed at once.
                        drop(client);
                        continue;
                    }
                    let id = accepted.fetch_add(1, Ordering::SeqCst);
                    let holed = holed_below.subscribe();
                    tokio::spawn(async move {
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)).await
                        else {
                            return;
                        };
                        // Like kube-apiserver's own sockets: small writes (watch events) are
                        // not held back by Nagle's algorithm.
                        let _ = server.set_nodelay(true);
                        let _ = client.set_nodelay(true);
                        let (client_read, client_write) = client.into_split();
                        let (server_read, server_write) = server.into_split();
                        let upstream = pump(client_read, server_write, id, holed.clone());
                        let downstream = pump(server_read, client_write, id, holed);
                        tokio::select! {
                            _ = async { tokio::join!(upstream, downstream) } => {}
                            _ = changed.changed() => {}
                        }
                        // Dropping both sockets closes them: the client's request or watch breaks.
                    });
                }
            })
        };
        Proxy {
            port,
            cut,
            generation,
            holed_below,
            accepted,
            accept_task,
        }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// Closes every forwarded connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// Black-holes every connection forwarded so far: from now on no byte passes through them
    /// in either direction, yet their sockets stay open (no FIN, no RST), as when packets are
    /// silently dropped on a dead network path. Each side only learns of it by a timeout of
    /// its own; TCP keepalive does not help either, since the proxy's end of each socket is
    /// alive and acknowledges. Connections accepted afterwards are forwarded normally, so a
    /// client that gives up on a dead connection can reconnect.
    ///
    /// Bytes already read from one side when the black hole starts are held, not dropped:
    /// [`Proxy::heal`] delivers them, as TCP retransmission would once the path is back.
    pub fn black_hole(&self) {
        let next = self.accepted.load(Ordering::SeqCst);
        self.holed_below.send_replace(next);
    }

    /// Ends the black hole: the black-holed connections that are still open pass bytes again
    /// (what piled up meanwhile included), as when a dead path comes back.
    pub fn heal(&self) {
        self.holed_below.send_replace(0);
    }

    /// How many connections have been forwarded (accepted while not cut) so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Copies `from` to `to` while connection `id` is not black-holed; closes `to`'s write side
/// once `from` ends, like `copy_bidirectional`.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    id: u64,
    mut holed_below: watch::Receiver<u64>,
) {
    let open = move |below: &u64| *below <= id;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // While black-holed nothing is read, so the peer's bytes (and its FIN, if it gives up)
        // wait in the kernel's buffers: nothing reaches the other side.
        if holed_below.wait_for(open).await.is_err() {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            // `read` is cancel safe: stopping it loses no bytes. (A `bool`, not the `Ref`
            // `wait_for` returns, so that no lock guard is held across an await.)
            sender_alive = async { holed_below.wait_for(|below| !open(below)).await.is_ok() } => {
                if sender_alive {
                    continue;
                }
                return;
            }
        };
        let n = match read {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // Black-holed between the read and now: hold the bytes until healed.
        if holed_below.wait_for(open).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept_task.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}
