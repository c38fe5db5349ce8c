//! `gateway-leader run`: the status writer guarded by the elector, until SIGTERM or Ctrl-C.

use gateway_leader_status::{StatusController, WriterConfig};
use leader_lock::readiness::Readiness;
use leader_lock::{clock, Identity};
use tokio::sync::watch;
use tracing::info;

use crate::config::Settings;
use crate::election::Election;
use crate::health::{self, HealthConfig};
use crate::kube_client::KubeClient;
use crate::metrics::Metrics;
use crate::program::PROGRAM;
use crate::shutdown::{ShutdownSignals, PROCESS_SHUTDOWN_BUDGET};

/// The longest field manager name the apiserver accepts.
const FIELD_MANAGER_MAX: usize = 128;
/// The field manager of this replica's status writes: it names the replica in `managedFields`,
/// so an object shows which replica wrote which of its fields.
pub fn field_manager(identity: &Identity) -> String {
    let mut m = format!("{PROGRAM}/{}", identity.name());
    if m.len() > FIELD_MANAGER_MAX {
        let mut end = FIELD_MANAGER_MAX;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
    }
    m
}

/// Runs until a shutdown signal: watches and computes statuses on every replica, writes them
/// while leading, and on the way out stops writing, lets writes in flight finish, then releases
/// the lock (when configured to).
///
/// # Errors
/// Kubernetes or the lock refuses (credentials, permissions, a timing the lock cannot honour),
/// or the health address cannot be bound.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    info!(
        identity = %settings.identity,
        controller = %settings.controller_name,
        leader_election = !settings.disabled,
        version = env!("CARGO_PKG_VERSION"),
        "starting gateway-leader"
    );
    let mut signals = ShutdownSignals::install()?;
    let identity = Identity::new(&settings.identity);
    let kube = KubeClient::connect(&settings.kube, &identity).await?;
    let metrics = Metrics::new(&settings.lock_name);
    // Every kind's write and failure series from 0: the alert on failing writes counts the first.
    metrics.status.zero_every_kind();
    // The status writer says when its watches have synced.
    let (synced_tx, synced_rx) = watch::channel(Readiness::default());
    let health = HealthConfig::from_settings(&settings, &identity);
    let health = health::Server::start(health, metrics.clone(), synced_rx).await?;
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
    let writer = WriterConfig::default()
        .with_controller_name(&settings.controller_name)
        .with_addresses_from(settings.gateway_addresses_service.clone())
        .with_field_manager(field_manager(&identity))
        .with_identity(identity.to_string())
        // The elector drains for as long; writes still in flight then are abandoned.
        .with_shutdown_grace(
            settings
                .timing
                .renew_deadline
                .min(leader_lock::elector::SHUTDOWN_BUDGET / 2),
        )
        .with_metrics(metrics.status.clone());
    let mut status = StatusController::start(
        kube.client,
        election.leadership().clone(),
        writer,
        synced_tx,
    );
    let sig = signals.recv().await;
    info!(
        signal = sig,
        budget = ?PROCESS_SHUTDOWN_BUDGET,
        mono_ms = clock::mono_ms(),
        "shutting down: no new writes, draining, then releasing"
    );
    // The writer stops scheduling while the elector refuses new permits and waits for the
    // writes in flight (each bounded by its validity deadline); only then is the lock released.
    // The rest (watches, computation, the last Event) is torn down after the release.
    let deadline = election.release(status.stop_writing()).await;
    status.stop().await;
    election.finish(deadline).await;
    health.stop().await;
    info!(mono_ms = clock::mono_ms(), "replica stopped");
    Ok(())
}
