//! `gateway-leader run`: the status writer guarded by the elector, until SIGTERM or Ctrl-C.

use std::time::Duration;

use anyhow::Context;
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState, Leadership, Term};
use leader_lock_kubernetes::EVENT_POST_TIMEOUT;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::backend;
use crate::config::Settings;
use crate::status::{StatusController, WriterConfig};

/// SIGTERM and SIGINT, caught from the start: a signal that arrives while the replica is still
/// connecting must stop it cleanly, not kill it with the default action.
struct ShutdownSignals {
    term: Signal,
    int: Signal,
}

impl ShutdownSignals {
    fn install() -> anyhow::Result<Self> {
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// Waits for either; returns its name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
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
                // Terms are logged as text (`Display`), so `term` has one JSON type everywhere,
                // the disabled marker included.
                LeaderState::Leader { term, .. } => info!(term = %term, "leadership: leading"),
                LeaderState::Follower { holder, term } => info!(
                    holder = holder.as_deref().unwrap_or("unknown"),
                    // `display` comes with the macro.
                    term = term.map(display),
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

/// Status writes in flight at once: the test apiserver's throughput flattens out at 16–64.
const WRITE_CONCURRENCY: usize = 16;
/// How long a status write that kept failing on the server waits before it is tried again.
const REQUEUE_AFTER: Duration = Duration::from_secs(5);
/// The longest field manager name the apiserver accepts.
const FIELD_MANAGER_MAX: usize = 128;
/// Kubernetes kills a pod this long after SIGTERM unless told otherwise
/// (`terminationGracePeriodSeconds`; deploy/kubernetes/deployment.yaml keeps the default).
const TERMINATION_GRACE: Duration = Duration::from_secs(30);
/// What the whole stop after SIGTERM may take: the writer and the elector stop together within
/// the elector's budget (drain, then release), then the last leader-election Event gets what is
/// left. The rest of the grace period is margin for the exit itself.
const SHUTDOWN_BUDGET: Duration = Duration::from_secs(25);
const _: () = assert!(
    leader_lock::SHUTDOWN_BUDGET.as_secs() + EVENT_POST_TIMEOUT.as_secs()
        <= SHUTDOWN_BUDGET.as_secs()
        && SHUTDOWN_BUDGET.as_secs() < TERMINATION_GRACE.as_secs()
);

/// The field manager of this replica's status writes: it names the replica in `managedFields`,
/// so an object shows which replica wrote which of its fields.
pub fn field_manager(identity: &Identity) -> String {
    let mut m = format!("gateway-leader/{}", identity.name());
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
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    let mut signals = ShutdownSignals::install()?;
    let identity = Identity::new(&settings.identity);
    info!(
        identity = %identity,
        controller = %settings.controller_name,
        leader_election = !settings.disabled,
        version = env!("CARGO_PKG_VERSION"),
        "starting gateway-leader"
    );
    let user_agent = format!("gateway-leader/{} ({identity})", env!("CARGO_PKG_VERSION"));
    let (client, default_ns) = leader_lock_kubernetes::client(
        settings.kube.kubeconfig.as_deref(),
        settings.kube.context.as_deref(),
        &user_agent,
    )
    .await
    .context("connecting to Kubernetes")?;
    let writer = WriterConfig {
        controller_name: settings.controller_name.clone(),
        field_manager: field_manager(&identity),
        identity: identity.to_string(),
        concurrency: WRITE_CONCURRENCY,
        requeue_after: REQUEUE_AFTER,
        // The elector drains for as long; writes still in flight then are abandoned.
        shutdown_grace: settings
            .timing
            .renew_deadline
            .min(leader_lock::SHUTDOWN_BUDGET / 2),
    };
    if settings.disabled {
        let leadership = Leadership::always_leader();
        info!(identity = %identity, term = %Term::DISABLED, controller = %settings.controller_name,
            "leader election disabled: this replica always writes");
        let logger = log_changes(&leadership);
        let status = StatusController::start(client, leadership, writer);
        let sig = signals.recv().await;
        info!(signal = sig, "shutting down: no new writes");
        status.stop().await;
        logger.abort();
        return Ok(());
    }
    info!(
        backend = %settings.backend,
        lock = %settings.lock_name,
        identity = %identity,
        controller = %settings.controller_name,
        lease_duration = ?settings.timing.lease_duration,
        renew_deadline = ?settings.timing.renew_deadline,
        retry_period = ?settings.timing.retry_period,
        "starting leader election"
    );
    let connected = backend::connect(&settings, (&client, &default_ns)).await?;
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
    let events = connected.lease_namespace.map(|ns| {
        leader_lock_kubernetes::spawn_leader_events(
            client.clone(),
            &ns,
            &settings.lock_name,
            &identity,
            leadership.clone(),
        )
    });
    let status = StatusController::start(client, leadership, writer);
    let sig = signals.recv().await;
    let deadline = Instant::now() + SHUTDOWN_BUDGET;
    info!(
        signal = sig,
        budget = ?SHUTDOWN_BUDGET,
        "shutting down: no new writes, draining, then releasing"
    );
    // The writer stops scheduling while the elector refuses new permits, waits for the writes
    // in flight (each bounded by its validity deadline), and only then releases the lock.
    let ((), stopped) = tokio::join!(status.stop(), elector.shutdown());
    match stopped {
        Ok(released) => info!(released, "elector stopped"),
        Err(e) => warn!(error = %e, "elector stopped without a clean release"),
    }
    let _ = logger.await;
    if let Some(ev) = events {
        // The "stopped leading" Event (each post is bounded on its own), within the budget.
        if tokio::time::timeout_at(deadline, ev).await.is_err() {
            warn!("the last leader election event was not posted within the shutdown budget");
        }
    }
    Ok(())
}
