//! The status library driven by a program of its own: a Lease elector, the status controller
//! (watch Gateway API objects, compute their statuses, write them only while leading), and its
//! metrics in a registry of the program's own, printed when it stops.
//!
//! Against `gateway-leader-bench local-apiserver` (a throwaway kube-apiserver with the Gateway
//! API CRDs; from the checkout):
//!
//! ```sh
//! cargo run -p gateway-leader-bench -- local-apiserver --dir .local &
//! export KUBECONFIG=$PWD/.local/kubeconfig    # once it exists
//! kubectl apply -f deploy/examples/hello.yaml # a GatewayClass, a Gateway, a Service, an HTTPRoute
//! cargo run -p gateway-leader-status --example status_writer &
//! kubectl -n demo get httproute hello \
//!   -o jsonpath='{range .status.parents[0].conditions[*]}{.type}={.status} {end}{"\n"}'
//! kill %2     # stops writing, releases the Lease and prints the metrics
//! ```
//!
//! It serves the GatewayClasses of `controllerName` `gateway-leader.dev/gateway-controller`
//! (`hello.yaml`'s) and elects on the Lease `status-writer-example` in the kubeconfig's
//! namespace: start a second copy and only one of them writes.

use std::sync::Arc;
use std::time::Duration;

use gateway_leader_status::{StatusController, StatusMetrics, WriterConfig};
use leader_lock::readiness::Readiness;
use leader_lock::{Elector, ElectorConfig, Identity, Timing};
use leader_lock_kubernetes::LeaseLock;
use prometheus_client::registry::Registry;
use tokio::signal::unix::{signal, SignalKind};
use tracing::info;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    // Kubeconfig (KUBECONFIG or ~/.kube/config) or the pod's service account.
    let config = kube::Config::infer().await?;
    let namespace = config.default_namespace.clone();
    let client = leader_lock_kubernetes::client(config)?;

    let elector = Elector::spawn(
        Arc::new(LeaseLock::new(
            client.clone(),
            &namespace,
            "status-writer-example",
        )),
        ElectorConfig {
            identity: Identity::new("status-writer-example"),
            timing: Timing::default(),
            release_on_shutdown: true,
        },
    )?;

    let mut registry = Registry::default();
    let metrics = StatusMetrics::register(registry.sub_registry_with_prefix("example"));
    let config = WriterConfig::default()
        .with_identity(elector.candidate().holder())
        .with_field_manager("status-writer-example")
        .with_concurrency(4)
        .with_shutdown_grace(Duration::from_secs(3))
        .with_metrics(metrics);
    let (readiness_tx, mut readiness) = tokio::sync::watch::channel(Readiness::default());
    let status = StatusController::start(client, elector.leadership(), config, readiness_tx);

    tokio::spawn(async move {
        if readiness.wait_for(|r| *r == Readiness::Ready).await.is_ok() {
            info!("watches synced; statuses are written while this replica leads");
        }
    });

    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }

    // Stop writing first (writes in flight finish within the grace), then release the Lease.
    status.stop().await;
    let released = elector.shutdown().await?;
    info!(released, "stopped");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    print!("{text}");
    Ok(())
}
