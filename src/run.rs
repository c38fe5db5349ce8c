//! `gateway-leader run`: the elector beside the controller, until SIGTERM or Ctrl-C.

use anyhow::Context;
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState, Leadership};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};

use crate::backend;
use crate::config::Settings;

/// Waits for SIGTERM or SIGINT.
async fn shutdown_signal() -> anyhow::Result<&'static str> {
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

/// Logs every change of leadership with its term, so operators see who writes and under which term.
fn log_changes(leadership: &Leadership) -> tokio::task::JoinHandle<()> {
    let mut rx = leadership.subscribe();
    tokio::spawn(async move {
        let mut last: Option<LeaderState> = None;
        loop {
            let state = rx.borrow_and_update().clone();
            // A renewal only moves the validity deadline: not a change of leadership.
            let same = match (&last, &state) {
                (
                    Some(LeaderState::Leader { term: a, .. }),
                    LeaderState::Leader { term: b, .. },
                ) => a == b,
                (Some(prev), cur) => prev == cur,
                (None, _) => false,
            };
            last = Some(state.clone());
            if same {
                if rx.changed().await.is_err() {
                    return;
                }
                continue;
            }
            match state {
                LeaderState::Leader { term, .. } => info!(%term, "leadership: leading"),
                LeaderState::Follower { holder, term } => info!(
                    holder = holder.as_deref().unwrap_or("unknown"),
                    term = term.map(|t| t.0),
                    "leadership: following"
                ),
                LeaderState::Starting => {}
                LeaderState::Stopped => {
                    info!("leadership: stopped");
                    return;
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    })
}

/// Runs until a shutdown signal; releases the lock on the way out when configured to.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let identity = Identity::new(&settings.identity);
    if settings.disabled {
        let (leadership, _keep) = Leadership::always_leader();
        info!(identity = %identity, term = 0, "leader election disabled: this replica always writes");
        let logger = log_changes(&leadership);
        let sig = shutdown_signal().await?;
        info!(signal = sig, "shutting down");
        logger.abort();
        return Ok(());
    }
    info!(
        backend = %settings.backend,
        lock = %settings.lock_name,
        identity = %identity,
        lease_duration = ?settings.timing.lease_duration,
        renew_deadline = ?settings.timing.renew_deadline,
        retry_period = ?settings.timing.retry_period,
        "starting leader election"
    );
    let connected = backend::connect(&settings).await?;
    let elector = Elector::spawn(
        connected.lock,
        ElectorConfig {
            identity: identity.clone(),
            timing: settings.timing,
            release_on_shutdown: settings.release_on_shutdown,
        },
    );
    let leadership = elector.leadership();
    let logger = log_changes(&leadership);
    let events = connected.kube.map(|(client, ns)| {
        leader_lock_kubernetes::spawn_leader_events(
            client,
            &ns,
            &settings.lock_name,
            &identity,
            leadership.clone(),
        )
    });
    let sig = shutdown_signal().await?;
    info!(
        signal = sig,
        "shutting down: no new writes, draining, then releasing"
    );
    match elector.shutdown().await {
        Ok(released) => info!(released, "elector stopped"),
        Err(e) => warn!(error = %e, "elector stopped without a clean release"),
    }
    let _ = logger.await;
    if let Some(ev) = events {
        // Give the "stopped leading" event a moment to be posted, but never hang the exit.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), ev).await;
    }
    Ok(())
}
