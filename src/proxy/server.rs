//! The proxy's listener and connections: each connection served over HTTP/1.1 by hyper, each
//! request handed to [`super::forward`], and the order of a drain.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gateway_leader_log::{field, message};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use leader_lock::{Identity, Leadership};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::classify::Verb;
use super::election_lease::ElectionLease;
use super::exchange::Shared;
use super::forward;
use super::listen::{self, Bound};
use super::relay::RelayClient;
use crate::config::ProxyListen;
use crate::metrics::Metrics;

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
    gated: Arc<Shared>,
}

// === impl Proxy ===

impl Proxy {
    /// Binds `listen` and serves the proxy: `client` (ungated: the gate is here) sends, under
    /// `leadership`, with `identity` named in refusals; counted in `metrics`; `election`, when
    /// given, answers the controller's own election.
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
        election: Option<Arc<ElectionLease>>,
    ) -> anyhow::Result<Proxy> {
        let (listener, bound) = listen::bind(listen)
            .await
            .with_context(|| format!("serving the proxy on {listen} (--proxy-listen)"))?;
        // The gated verbs' refusals and cuts from 0: the alerts on them count the first.
        metrics.zero_proxy_writes(
            Verb::ALL
                .into_iter()
                .filter(|v| v.gated())
                .map(Verb::as_str),
        );
        let shared = Arc::new(Shared {
            client,
            leadership,
            identity: identity.to_string(),
            metrics,
            gated: TaskTracker::new(),
            latest_deadline: Default::default(),
            refusals: Default::default(),
            cut_streams: CancellationToken::new(),
            election,
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
    /// `Election::release`.
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
    shared: Arc<Shared>,
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
    shared: Arc<Shared>,
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
