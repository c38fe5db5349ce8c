//! `gateway-leader proxy`: the write gate in front of the apiserver, for any controller.
//!
//! A Kubernetes API proxy on a loopback address or a Unix socket (`--proxy-listen`), sending
//! with this replica's own client and credentials. Requests the apiserver would authorize as a
//! write ([`classify`]) go out only under a valid leadership and are bounded by its validity;
//! reads pass on every replica and stream. A controller whose kubeconfig points here
//! (docs/sidecar.md) has its writes fenced without a line of its code changed.
//!
//! [`Proxy::serve`] is the proxy alone, for `exec` as well; [`run`] is the subcommand. A
//! request's path, one module each, top to bottom: `server` (the listener and the connections),
//! `forward` (one request: classified, gated when it writes, sent, its answer streamed back),
//! `upgrade` (an upgraded stream, fenced by the leadership's validity), `exchange` (what every
//! exchange of one proxy shares), `status` (the proxy's own answers), [`classify`] (which
//! requests write), [`relay`] and `pool` (the sender to the apiserver and its HTTP/2 pool).
//!
//! It is a module tree of the binary, not a crate: its only users are `proxy` and `exec`, and
//! it shares the binary's metrics and settings. `leader-lock-kubernetes` lends it the stack
//! every client is built on (`leader_lock_kubernetes::stack`).

mod body;
pub mod classify;
mod election_lease;
mod exchange;
mod forward;
mod kubeconfig;
mod listen;
mod pool;
pub mod relay;
mod server;
mod status;
mod upgrade;

use anyhow::Context;
use leader_lock::readiness::Readiness;
use leader_lock::{clock, Identity};
use tokio::sync::watch;
use tracing::info;

use crate::config::{ProxyListen, Settings};
use crate::election::Election;
use crate::health::{self, HealthConfig};
use crate::kube_client::KubeClient;
use crate::metrics::Metrics;
use crate::shutdown::{ShutdownSignals, PROCESS_SHUTDOWN_BUDGET};

pub use election_lease::ElectionLease;
pub use forward::MAX_BODY;
pub use kubeconfig::{kubeconfig, write_kubeconfig};
pub use listen::Bound;
use relay::RelayClient;
pub use server::{Proxy, HEAD_TIMEOUT, MAX_CONNECTIONS, MAX_HEAD};

/// The client a proxy sends with: the replica's configuration, over HTTP/2 when the apiserver
/// negotiates it, so that its callers' watches share a few connections (as many streams on
/// each as the apiserver allows) instead of one TLS connection each; no retries, which are the
/// caller's ([`RelayClient`]).
///
/// # Errors
/// The TLS or authentication settings cannot be used (the replica's own client was built from
/// the same ones).
pub fn upstream_client(kube: &KubeClient) -> anyhow::Result<RelayClient> {
    RelayClient::new(kube.config.clone())
        .context("a client for the proxy's requests to the apiserver")
}

/// Runs `gateway-leader proxy` until a shutdown signal: elects as `run` does, serves the proxy,
/// and on the way out stops accepting, lets the gated exchanges in flight finish, then releases.
///
/// # Errors
/// As `run`, and when the proxy's address cannot be bound.
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
    let mut signals = ShutdownSignals::install()?;
    let identity = Identity::new(&settings.identity);
    let kube = KubeClient::connect(&settings.kube, &identity).await?;
    let metrics = Metrics::new(&settings.lock_name);
    // Ready once the proxy listens: it has no watches to sync.
    let (ready_tx, ready_rx) = watch::channel(Readiness::Waiting(
        "the proxy is not listening yet".to_string(),
    ));
    let health = HealthConfig::from_settings(&settings, &identity);
    let health = health::Server::start(health, metrics.clone(), ready_rx).await?;
    let started = Election::start(
        &settings,
        &identity,
        Some(&kube),
        &metrics,
        &mut signals,
        &health,
    );
    let Some(mut election) = started.await? else {
        return Ok(());
    };
    let leadership = election.leadership().clone();
    let lease = settings.proxy_election_lease.clone().map(|target| {
        info!(lease = %target, "answering the controller's own election from this replica's \
            leadership");
        metrics.proxy_answers_election(&target.to_string());
        ElectionLease::start(
            target,
            leadership.clone(),
            election.candidacy(),
            settings.timing.lease_duration,
            Some(kube.client.clone()),
        )
    });
    let served = match upstream_client(&kube) {
        Ok(upstream) => {
            let lease = lease.clone();
            Proxy::serve(&listen, upstream, leadership, &identity, metrics, lease).await
        }
        Err(e) => Err(e),
    };
    let proxy = match served {
        Ok(p) => p,
        Err(e) => {
            if let Some(lease) = &lease {
                lease.stop();
            }
            election.stop().await;
            health.stop().await;
            info!(mono_ms = clock::mono_ms(), "replica stopped");
            return Err(e);
        }
    };
    ready_tx.send_replace(Readiness::Ready);
    let sig = signals.recv().await;
    info!(
        signal = sig,
        budget = ?PROCESS_SHUTDOWN_BUDGET,
        mono_ms = clock::mono_ms(),
        "shutting down: no new connections, draining the writes in flight, then releasing"
    );
    let deadline = election.release(proxy.drain()).await;
    proxy.stop().await;
    if let Some(lease) = &lease {
        lease.stop();
    }
    election.finish(deadline).await;
    health.stop().await;
    info!(mono_ms = clock::mono_ms(), "replica stopped");
    Ok(())
}
