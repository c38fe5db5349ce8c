//! `gateway-leader run`: the status writer guarded by the elector, until SIGTERM or Ctrl-C.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use backon::{ExponentialBuilder, Retryable};
use leader_lock::backend::LockError;
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState, Leadership, Term};
use leader_lock_kubernetes::{LeaderEventsConfig, EVENT_POST_TIMEOUT};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::backend;
use crate::config::{Settings, Wakeup};
use crate::health::{self, Health};
use crate::metrics::Metrics;
use gateway_leader_log::{field, message};
use gateway_leader_status::{Readiness, StatusController, WriterConfig};
use leader_lock::clock;
use leader_lock::wrap::{InstrumentedLock, PollingLock};

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
    // Every publication with the instant it took effect: the lines say when a leadership began
    // and ended, not when this task got round to looking (on a busy machine that can be after
    // the lock was released and taken by another replica).
    let (first, mut rx) = leadership.record();
    tokio::spawn(async move {
        let mut last: Option<LeaderState> = None;
        let mut next = Some(first);
        while let Some((at, state)) = next.take() {
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
            // Lines that machines read (gateway-leader-log declares them): `mono_ms`
            // (CLOCK_MONOTONIC) lets the bench and its split-brain checker compare these instants
            // across processes; the validity deadline moves with each renew (logged at debug, so
            // only when asked for).
            let mono_ms = clock::instant_mono_ms(at);
            if same {
                if let LeaderState::Leader { term, valid_until } = state {
                    debug!({ field::TERM } = %term, { field::MONO_MS } = mono_ms,
                        { field::VALID_UNTIL_MONO_MS } = clock::instant_mono_ms(valid_until),
                        "{}", message::RENEWED);
                }
            } else {
                match state {
                    // Terms are logged as text (`Display`), so `term` has one JSON type
                    // everywhere, the disabled marker included.
                    LeaderState::Leader { term, valid_until } => info!(
                        { field::TERM } = %term,
                        { field::MONO_MS } = mono_ms,
                        { field::VALID_UNTIL_MONO_MS } = clock::instant_mono_ms(valid_until),
                        "{}", message::LEADING
                    ),
                    LeaderState::Follower { holder, term } => info!(
                        { field::HOLDER } = holder.as_deref().unwrap_or(field::HOLDER_UNKNOWN),
                        // `display` comes with the macro.
                        { field::TERM } = term.map(display),
                        { field::MONO_MS } = mono_ms,
                        "{}",
                        message::FOLLOWING
                    ),
                    LeaderState::Starting => {}
                    LeaderState::Stopped => {
                        info!({ field::MONO_MS } = mono_ms, "{}", message::STOPPED);
                        return;
                    }
                }
            }
            next = rx.recv().await;
        }
    })
}

pub use crate::PROGRAM;

/// The longest field manager name the apiserver accepts.
const FIELD_MANAGER_MAX: usize = 128;
/// Kubernetes kills a pod this long after SIGTERM unless told otherwise
/// (`terminationGracePeriodSeconds`; deploy/base/deployment.yaml sets the same 30 s).
const TERMINATION_GRACE: Duration = Duration::from_secs(30);
/// What the whole stop after SIGTERM may take: the writer and the elector stop together within
/// the elector's budget (`leader_lock::elector::SHUTDOWN_BUDGET`: drain, then release), a quiet
/// moment for the successor follows, then the last leader-election Event gets what is left. The
/// rest of the grace period is margin for the exit itself. A name of its own: the elector's
/// budget is one part of it, and the two are not interchangeable.
const PROCESS_SHUTDOWN_BUDGET: Duration = Duration::from_secs(25);
const _: () = assert!(
    leader_lock::elector::SHUTDOWN_BUDGET.as_secs()
        + leader_lock::elector::AFTER_RELEASE_QUIET.as_secs()
        + EVENT_POST_TIMEOUT.as_secs()
        <= PROCESS_SHUTDOWN_BUDGET.as_secs()
        && PROCESS_SHUTDOWN_BUDGET.as_secs() < TERMINATION_GRACE.as_secs()
);

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
    let config = settings
        .kube
        .client_options()
        .with_user_agent(user_agent)
        .load()
        .await
        .context("connecting to Kubernetes")?;
    let default_ns = config.default_namespace.clone();
    let apiserver = config.cluster_url.to_string();
    let client = leader_lock_kubernetes::client(config)
        .with_context(|| format!("connecting to Kubernetes: a client for {apiserver}"))?;
    // Health and metrics answer from the start: not ready until the lock backend answers and the
    // watches have synced, which the kubelet must be able to see.
    let metrics = Metrics::new(&settings.lock_name);
    let (lead_tx, lead_rx) = watch::channel(None);
    let (synced_tx, synced_rx) = watch::channel(Readiness::default());
    let server_stop = CancellationToken::new();
    let health = Health {
        leadership: lead_rx,
        metrics: metrics.clone(),
        synced: synced_rx,
        grace: settings.timing.retry_period,
    };
    let (_, server) = health::serve(settings.health_addr, health, server_stop.clone())
        .await
        .with_context(|| {
            format!(
                "serving health and metrics on {} (--health-addr)",
                settings.health_addr
            )
        })?;
    let writer = WriterConfig::default()
        .with_controller_name(&settings.controller_name)
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
    if settings.disabled {
        let leadership = Leadership::always_leader();
        info!(identity = %identity, term = %Term::DISABLED, controller = %settings.controller_name,
            "leader election disabled: this replica always writes");
        metrics.set_lock_reachable(true);
        let gauges = metrics.follow(&leadership);
        lead_tx.send_replace(Some(leadership.clone()));
        let logger = log_changes(&leadership);
        let status = StatusController::start(client, leadership, writer, synced_tx);
        let sig = signals.recv().await;
        info!(signal = sig, "shutting down: no new writes");
        status.stop().await;
        logger.abort();
        gauges.abort();
        server_stop.cancel();
        let _ = server.await;
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
        wakeup = %settings.wakeup,
        "starting leader election"
    );
    // A backend that is down at startup is waited for, as Kubernetes' own client does; only a
    // refusal (credentials, permissions) ends the process. A signal meanwhile stops cleanly.
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times();
    let connecting = (|| backend::connect(&settings, (&client, &default_ns)))
        .retry(backoff)
        .when(|e| matches!(e, LockError::Unavailable { .. } | LockError::Timeout(_)))
        .notify(|e, after| {
            warn!(backend = %settings.backend, error = %e.chain(), retry_in = ?after,
                "lock backend unreachable; retrying")
        });
    let connected = tokio::select! {
        r = connecting => r.with_context(|| {
            format!("connecting to the {} lock backend", settings.backend)
        })?,
        sig = signals.recv() => {
            info!(signal = sig, "stopped before the lock backend could be reached");
            server_stop.cancel();
            let _ = server.await;
            return Ok(());
        }
    };
    let lock = match settings.wakeup {
        Wakeup::Watch => connected.lock,
        Wakeup::Poll => Arc::new(PollingLock::new(connected.lock)),
    };
    let elector = Elector::spawn(
        Arc::new(InstrumentedLock::new(lock, metrics.clone())),
        ElectorConfig {
            identity: identity.clone(),
            timing: settings.timing,
            release_on_shutdown: settings.release_on_shutdown,
        },
    )
    .context("starting the elector: the lock refused the timing")?;
    let leadership = elector.leadership();
    lead_tx.send_replace(Some(leadership.clone()));
    let gauges = metrics.follow(&leadership);
    let logger = log_changes(&leadership);
    if let Some(ns) = &connected.lease_namespace {
        tokio::spawn(crate::fencing::report(
            client.clone(),
            ns.clone(),
            settings.lock_name.clone(),
            identity.name().to_string(),
        ));
    }
    let events = connected.lease_namespace.map(|ns| {
        let config = LeaderEventsConfig {
            component: PROGRAM.to_string(),
            namespace: ns,
            lease_name: settings.lock_name.clone(),
            identity: identity.clone(),
        };
        leader_lock_kubernetes::spawn_leader_events(client.clone(), config, leadership.clone())
    });
    let mut status = StatusController::start(client, leadership, writer, synced_tx);
    let sig = signals.recv().await;
    let deadline = Instant::now() + PROCESS_SHUTDOWN_BUDGET;
    info!(
        signal = sig,
        budget = ?PROCESS_SHUTDOWN_BUDGET,
        mono_ms = clock::mono_ms(),
        "shutting down: no new writes, draining, then releasing"
    );
    // The writer stops scheduling while the elector refuses new permits, waits for the writes
    // in flight (each bounded by its validity deadline), and only then releases the lock. The
    // rest (watches, computation, the last Event) is torn down a quiet moment after the
    // release: a follower is waiting for it, then takes the lock and writes statuses, and those
    // requests should not queue behind ours at the apiserver.
    let ((), stopped) = tokio::join!(status.stop_writing(), elector.shutdown());
    match stopped {
        Ok(released) => {
            info!(released, "elector stopped");
            if released {
                tokio::time::sleep(leader_lock::elector::AFTER_RELEASE_QUIET).await;
            }
        }
        Err(e) => warn!(error = %e.chain(), "elector stopped without a clean release"),
    }
    status.stop().await;
    let _ = logger.await;
    if let Some(ev) = events {
        // The "stopped leading" Event (each post is bounded on its own), within the budget.
        if tokio::time::timeout_at(deadline, ev).await.is_err() {
            warn!("the last leader election event was not posted within the shutdown budget");
        }
    }
    let _ = gauges.await;
    server_stop.cancel();
    let _ = server.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Log lines written to memory.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_lines_carry_the_instant_of_the_change_not_of_the_log() {
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        let (script, leadership) = Leadership::scripted(LeaderState::Starting);
        let logger = log_changes(&leadership);
        script.publish(LeaderState::Leader {
            term: leader_lock::Term(3),
            valid_until: tokio::time::Instant::now() + Duration::from_secs(60),
        });
        // The logger gets round to the change five seconds after it happened (a busy machine).
        tokio::time::advance(Duration::from_secs(5)).await;
        script.publish(LeaderState::Stopped);
        logger.await.expect("the logger ends after Stopped");
        let logged_at = clock::mono_ms();
        let text = String::from_utf8(buf.0.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .expect("utf-8");
        // Read as the bench reads it: the line is the declared event.
        let leading: serde_json::Value = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .find(|v| {
                matches!(
                    gateway_leader_log::Event::from_json(v),
                    Some(gateway_leader_log::Event::Leading { term: 3, .. })
                )
            })
            .unwrap_or_else(|| panic!("no leading line in {text}"));
        let at = gateway_leader_log::mono_ms(&leading).expect("mono_ms");
        // Stamped five (paused) seconds before the logger looked, not when it looked.
        assert!(logged_at - at >= 4_000.0, "{logged_at} - {at}: {text}");
    }
}
