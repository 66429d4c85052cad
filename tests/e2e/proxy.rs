//! A loopback TCP proxy in front of kube-apiserver that a test can cut and restore, so an
//! informer can be disconnected while the admin client (talking to the apiserver directly)
//! keeps changing objects.
//!
//! TLS passes through untouched: the server certificate names `127.0.0.1`, which the proxy's
//! address is as well.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    /// Bumped by [`Proxy::cut`]: every live connection ends when it changes.
    generation: watch::Sender<u64>,
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
        let accept_task = {
            let cut = cut.clone();
            let generation = generation.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
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
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream_port)).await
                        else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
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
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept_task.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}
