//! `gateway-leader proxy`: the write gate in front of the apiserver, for any controller.
//!
//! A Kubernetes API proxy on a loopback address or a Unix socket (`--proxy-listen`), sending
//! with this replica's own client and credentials. Requests the apiserver would authorize as a
//! write ([`classify`]) go out only under a valid leadership and are bounded by its validity
//! ([`forward`]); reads pass on every replica and stream. A controller whose kubeconfig points
//! here (docs/sidecar.md) has its writes fenced without a line of its code changed.
//!
//! [`Proxy::serve`] is the proxy alone, for `exec` as well; [`run`] is the subcommand.

pub mod classify;
mod forward;
mod listen;
mod pool;
pub mod relay;
mod status;
mod upgrade;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gateway_leader_log::{field, message};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use leader_lock::readiness::Readiness;
use leader_lock::{clock, Identity, Leadership};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::config::{ProxyListen, Settings};
use crate::metrics::Metrics;
use crate::replica::{Kubernetes, Replica, Started, PROCESS_SHUTDOWN_BUDGET};
use relay::RelayClient;

pub use forward::MAX_BODY;
pub use listen::Bound;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every answer: the apiserver's, streamed, or the proxy's own.
type ProxyBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>;

/// The longest request head (request line and headers) the proxy reads; a longer one is
/// answered 414 or 431 and the connection closed.
pub const MAX_HEAD: usize = 256 * 1024;
/// How long a client may take to send a request's head, and how long a kept-alive connection
/// may sit idle before its next one.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once; further ones wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 4096;

/// A running proxy. [`drain`](Self::drain) it before the lock is released, then
/// [`stop`](Self::stop) it.
pub struct Proxy {
    bound: Bound,
    /// Stop accepting; each connection finishes its request in flight, then closes.
    draining: CancellationToken,
    /// Close every connection now (watches included).
    closing: CancellationToken,
    accept: JoinHandle<()>,
    connections: TaskTracker,
    /// The gated exchanges in flight, and the deadline they end by.
    gated: Arc<forward::Shared>,
}

// === impl Proxy ===

impl Proxy {
    /// Binds `listen` and serves the proxy: `client` (ungated: the gate is here) sends, under
    /// `leadership`, with `identity` named in refusals; counted in `metrics`.
    ///
    /// # Errors
    /// When `listen` cannot be bound: in use, not allowed, or a path that exists and is not a
    /// socket.
    pub async fn serve(
        listen: &ProxyListen,
        client: RelayClient,
        leadership: Leadership,
        identity: &Identity,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Proxy> {
        let (listener, bound) = listen::bind(listen)
            .await
            .with_context(|| format!("serving the proxy on {listen} (--proxy-listen)"))?;
        let shared = Arc::new(forward::Shared {
            client,
            leadership,
            identity: identity.to_string(),
            metrics,
            gated: TaskTracker::new(),
            latest_deadline: Default::default(),
            refusals: Default::default(),
            cut_streams: CancellationToken::new(),
        });
        let draining = CancellationToken::new();
        let closing = CancellationToken::new();
        let connections = TaskTracker::new();
        let gated = shared.clone();
        let accept = tokio::spawn(accept_loop(
            listener,
            shared,
            draining.clone(),
            closing.clone(),
            connections.clone(),
        ));
        info!({ field::ADDR } = %bound, "{}", message::PROXY_SERVING);
        Ok(Proxy {
            bound,
            draining,
            closing,
            accept,
            connections,
            gated,
        })
    }

    /// Where it listens (the port the system picked for port 0).
    pub fn bound(&self) -> &Bound {
        &self.bound
    }

    /// Stops accepting and waits for the gated exchanges in flight, no longer than the latest
    /// deadline of their permits (past it, none may go on); the upgraded streams still open
    /// then are cut (renewals would keep them open, and the release must not wait for them).
    /// Reads keep streaming until [`stop`](Self::stop). Run it as the drain of
    /// [`Replica::release`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn drain(&self) {
        self.draining.cancel();
        self.gated.gated.close();
        self.wait_gated().await;
        self.gated.cut_streams.cancel();
    }

    /// Waits for the gated exchanges in flight, until the latest deadline of their permits.
    async fn wait_gated(&self) {
        loop {
            let latest = *self
                .gated
                .latest_deadline
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // A permit taken while this waited may end later: look again after each wait.
            let Some(until) = latest.filter(|t| *t > tokio::time::Instant::now()) else {
                return;
            };
            if tokio::time::timeout_at(until, self.gated.gated.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
    }

    /// Closes every connection and removes the socket file.
    pub async fn stop(self) {
        self.draining.cancel();
        self.closing.cancel();
        self.gated.cut_streams.cancel();
        let _ = self.accept.await;
        self.connections.close();
        self.connections.wait().await;
        if let Bound::Unix(path) = &self.bound {
            if let Err(e) = std::fs::remove_file(path) {
                warn!(path = %path.display(), error = %e, "could not remove the proxy's socket");
            }
        }
    }
}

async fn accept_loop(
    listener: listen::Listener,
    shared: Arc<forward::Shared>,
    draining: CancellationToken,
    closing: CancellationToken,
    connections: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            _ = draining.cancelled() => break,
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = draining.cancelled() => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors, most likely: wait for some to close.
                warn!(error = %e, "proxy: cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = shared.clone();
        let (draining, closing) = (draining.clone(), closing.clone());
        connections.spawn(async move {
            match stream {
                listen::Stream::Tcp(s) => serve_connection(s, shared, draining, closing).await,
                listen::Stream::Unix(s) => serve_connection(s, shared, draining, closing).await,
            }
            drop(slot);
        });
    }
    drop(listener);
    info!("{}", message::PROXY_CLOSED);
}

async fn serve_connection<I>(
    io: I,
    shared: Arc<forward::Shared>,
    draining: CancellationToken,
    closing: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| forward::handle(shared.clone(), req));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let done = tokio::select! {
        r = conn.as_mut() => Some(r),
        _ = draining.cancelled() => None,
        _ = closing.cancelled() => return,
    };
    let r = match done {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                r = conn.as_mut() => r,
                _ = closing.cancelled() => return,
            }
        }
    };
    if let Err(e) = r {
        debug!(error = %e, "proxy connection ended");
    }
}

/// A kubeconfig whose one cluster is the proxy at `addr`, with no credentials (the proxy adds
/// its own): for a child process or a sidecar's controller. Unix sockets have no kubeconfig:
/// client-go cannot dial one.
pub fn kubeconfig(addr: std::net::SocketAddr) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: gateway-leader-proxy\n  cluster:\n    server: http://{addr}\n\
         contexts:\n\
         - name: gateway-leader-proxy\n  context:\n    cluster: gateway-leader-proxy\n    user: gateway-leader-proxy\n\
         users:\n\
         - name: gateway-leader-proxy\n  user: {{}}\n\
         current-context: gateway-leader-proxy\n"
    )
}

/// Writes [`kubeconfig`] for `bound` to `path` (mode 0600).
///
/// # Errors
/// `bound` is a Unix socket (client-go cannot dial one), or the file cannot be written.
pub fn write_kubeconfig(bound: &Bound, path: &Path) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Bound::Tcp(addr) = bound else {
        anyhow::bail!(
            "a kubeconfig cannot point at the Unix socket {bound}: client-go dials only TCP; \
             give --proxy-listen a loopback IP:PORT"
        );
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing the proxy's kubeconfig {}", path.display()))?;
    f.write_all(kubeconfig(*addr).as_bytes())
        .with_context(|| format!("writing the proxy's kubeconfig {}", path.display()))
}

/// The client a proxy of `replica` sends with: its configuration, over HTTP/2 when the
/// apiserver negotiates it, so that its callers' watches share a few connections (as many
/// streams on each as the apiserver allows) instead of one TLS connection each; no retries,
/// which are the caller's ([`RelayClient`]).
///
/// # Errors
/// The TLS or authentication settings cannot be used (the replica's own client was built from
/// the same ones).
pub fn upstream_client(replica: &Replica) -> anyhow::Result<RelayClient> {
    RelayClient::new(replica.kube_config()?)
        .context("a client for the proxy's requests to the apiserver")
}

/// Runs `gateway-leader proxy` until a shutdown signal: elects as `run` does, serves the proxy,
/// and on the way out stops accepting, lets the gated exchanges in flight finish, then releases.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let listen = match &settings.proxy_listen {
        Some(l) => l.clone(),
        None => ProxyListen::Tcp(
            ProxyListen::DEFAULT
                .parse()
                .context("the default of --proxy-listen")?,
        ),
    };
    info!(
        identity = %settings.identity,
        leader_election = !settings.disabled,
        listen = %listen,
        version = env!("CARGO_PKG_VERSION"),
        "starting gateway-leader proxy"
    );
    // Ready once the proxy listens: it has no watches to sync.
    let (ready_tx, ready_rx) = watch::channel(Readiness::Waiting(
        "the proxy is not listening yet".to_string(),
    ));
    let mut replica = match Replica::start(&settings, ready_rx, Kubernetes::Needed).await? {
        Started::Replica(r) => r,
        Started::Stopped => return Ok(()),
    };
    let served = match upstream_client(&replica) {
        Ok(upstream) => {
            Proxy::serve(
                &listen,
                upstream,
                replica.leadership.clone(),
                &replica.identity,
                replica.metrics.clone(),
            )
            .await
        }
        Err(e) => Err(e),
    };
    let proxy = match served {
        Ok(p) => p,
        Err(e) => {
            let deadline = replica.release(async {}).await;
            replica.finish(deadline).await;
            return Err(e);
        }
    };
    ready_tx.send_replace(Readiness::Ready);
    let sig = replica.signals.recv().await;
    info!(
        signal = sig,
        budget = ?PROCESS_SHUTDOWN_BUDGET,
        mono_ms = clock::mono_ms(),
        "shutting down: no new connections, draining the writes in flight, then releasing"
    );
    let deadline = replica.release(proxy.drain()).await;
    proxy.stop().await;
    replica.finish(deadline).await;
    Ok(())
}
