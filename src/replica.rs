//! What every subcommand's replica shares: the Kubernetes client, the health server, the
//! elector (or the always-valid leadership when leader election is off), the logs and Events of
//! its changes, and the order of a graceful stop.
//!
//! `run` (the status writer), `proxy` (the write gate in front of the apiserver) and `exec` (a
//! child process run while leading) differ only in what they do under the [`Leadership`]; each
//! starts a [`Replica`], does its work, then [`drains`](Replica::release) it and lets it
//! [`finish`](Replica::finish).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use backon::{ExponentialBuilder, Retryable};
use leader_lock::backend::LockError;
use leader_lock::readiness::Readiness;
use leader_lock::wrap::{InstrumentedLock, PollingLock};
use leader_lock::{clock, Elector, ElectorConfig, Identity, Leadership, Term};
use leader_lock_kubernetes::{LeaderEventsConfig, EVENT_POST_TIMEOUT};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::backend;
use crate::config::{Backend, Settings, Wakeup};
use crate::health::{self, Health, LeaderInfo};
use crate::metrics::Metrics;
use crate::run::log_changes;
use crate::PROGRAM;

/// Kubernetes kills a pod this long after SIGTERM unless told otherwise
/// (`terminationGracePeriodSeconds`; deploy/base/deployment.yaml sets the same 30 s).
pub const TERMINATION_GRACE: Duration = Duration::from_secs(30);
/// What the whole stop after SIGTERM may take: the work and the elector stop together within
/// the elector's budget (`leader_lock::elector::SHUTDOWN_BUDGET`: drain, then release), a quiet
/// moment for the successor follows, then the last leader-election Event gets what is left. The
/// rest of the grace period is margin for the exit itself. A name of its own: the elector's
/// budget is one part of it, and the two are not interchangeable.
pub const PROCESS_SHUTDOWN_BUDGET: Duration = Duration::from_secs(25);
const _: () = assert!(
    leader_lock::elector::SHUTDOWN_BUDGET.as_secs()
        + leader_lock::elector::AFTER_RELEASE_QUIET.as_secs()
        + EVENT_POST_TIMEOUT.as_secs()
        <= PROCESS_SHUTDOWN_BUDGET.as_secs()
        && PROCESS_SHUTDOWN_BUDGET.as_secs() < TERMINATION_GRACE.as_secs()
);

/// The longest a graceful stop of `run` or `proxy` takes with this renew deadline: the drain and
/// the release (each up to the renew deadline, both within the elector's budget), the quiet
/// moment and the last Event, and never more than [`PROCESS_SHUTDOWN_BUDGET`]. A pod's
/// `terminationGracePeriodSeconds` must be longer (docs/operations.md, "The shutdown budget";
/// the chart checks the same formula).
///
/// ```
/// use std::time::Duration;
/// use gateway_leader::replica::graceful_stop_budget;
///
/// assert_eq!(graceful_stop_budget(Duration::from_secs(10)), Duration::from_secs(23));
/// assert_eq!(graceful_stop_budget(Duration::from_secs(30)), Duration::from_secs(25));
/// ```
pub fn graceful_stop_budget(renew_deadline: Duration) -> Duration {
    let parts = renew_deadline.saturating_mul(2)
        + leader_lock::elector::AFTER_RELEASE_QUIET
        + EVENT_POST_TIMEOUT;
    parts.min(PROCESS_SHUTDOWN_BUDGET)
}

/// SIGTERM and SIGINT, caught from the start: a signal that arrives while the replica is still
/// connecting must stop it cleanly, not kill it with the default action.
pub struct ShutdownSignals {
    term: Signal,
    int: Signal,
}

impl ShutdownSignals {
    /// Installs both handlers.
    ///
    /// # Errors
    /// When a handler cannot be installed.
    pub fn install() -> anyhow::Result<Self> {
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// Waits for either; returns its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// One replica: connected, serving health, electing (or not, when leader election is off).
pub struct Replica {
    /// This replica's identity, with its incarnation.
    pub identity: Identity,
    /// The Kubernetes client, ungated: the work gates its own writes on [`Self::leadership`].
    /// `None` when started with [`Kubernetes::IfLocked`] on an etcd or Redis lock.
    client: Option<kube::Client>,
    /// The configuration the client was built from, for a client of another shape (the
    /// proxy's, over HTTP/2); `None` as the client is.
    kube_config: Option<kube::Config>,
    /// Every metric, served on the health port.
    pub metrics: Arc<Metrics>,
    /// This replica's leadership.
    pub leadership: Leadership,
    /// SIGTERM and SIGINT.
    pub signals: ShutdownSignals,
    /// `None` with leader election off, and once released.
    elector: Option<Elector>,
    /// Leader election off: no elector ends the leadership, so its followers are stopped here.
    disabled: bool,
    logger: JoinHandle<()>,
    gauges: JoinHandle<()>,
    events: Option<JoinHandle<()>>,
    server: JoinHandle<()>,
    server_stop: CancellationToken,
}

const NO_KUBERNETES: &str =
    "no Kubernetes client: this replica was started without one (an etcd or Redis lock)";

/// Whether a replica talks to Kubernetes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kubernetes {
    /// Always: `run` writes statuses, `proxy` forwards to the apiserver.
    Needed,
    /// Only for a Lease lock (the lock and its Events): `exec` without the proxy, which can
    /// hold an etcd or Redis lock on a machine with no cluster at all.
    IfLocked,
}

/// How [`Replica::start`] ended.
pub enum Started {
    /// Electing.
    Replica(Box<Replica>),
    /// A signal arrived before the lock backend answered; nothing was held.
    Stopped,
}

impl Replica {
    /// Connects to Kubernetes, serves health (ready once `ready` says so and the lock answers),
    /// connects the lock (waiting while it is unreachable, as Kubernetes' own client does) and
    /// spawns the elector.
    ///
    /// # Errors
    /// When Kubernetes or the lock refuses (credentials, permissions, a timing the lock cannot
    /// honour), or the health address cannot be bound.
    pub async fn start(
        settings: &Settings,
        ready: watch::Receiver<Readiness>,
        kubernetes: Kubernetes,
    ) -> anyhow::Result<Started> {
        let mut signals = ShutdownSignals::install()?;
        let identity = Identity::new(&settings.identity);
        let needed = kubernetes == Kubernetes::Needed
            || (!settings.disabled && settings.backend == Backend::Kubernetes);
        let kube = if needed {
            let user_agent = format!("{PROGRAM}/{} ({identity})", env!("CARGO_PKG_VERSION"));
            let config = settings
                .kube
                .client_options()
                .with_user_agent(user_agent)
                .load()
                .await
                .context("connecting to Kubernetes")?;
            let default_ns = config.default_namespace.clone();
            let apiserver = config.cluster_url.to_string();
            let kube_config = config.clone();
            let client = leader_lock_kubernetes::client(config)
                .with_context(|| format!("connecting to Kubernetes: a client for {apiserver}"))?;
            Some((client, default_ns, kube_config))
        } else {
            info!(backend = %settings.backend, "not connecting to Kubernetes: nothing here needs it");
            None
        };
        let client = kube.as_ref().map(|(c, _, _)| c.clone());
        let kube_config = kube.as_ref().map(|(_, _, k)| k.clone());
        // Health and metrics answer from the start: not ready until the lock backend answers
        // and the work is ready, which the kubelet must be able to see.
        let metrics = Metrics::new(&settings.lock_name);
        let (lead_tx, lead_rx) = watch::channel(None);
        let server_stop = CancellationToken::new();
        let health = Health {
            leadership: lead_rx,
            metrics: metrics.clone(),
            synced: ready,
            grace: settings.timing.retry_period,
            leader: LeaderInfo {
                identity: identity.to_string(),
                backend: if settings.disabled {
                    "disabled".to_string()
                } else {
                    settings.backend.to_string()
                },
                lock: settings.lock_name.clone(),
            },
            readiness_follows_leadership: settings.readiness_follows_leadership,
        };
        let (_, server) = health::serve(settings.health_addr, health, server_stop.clone())
            .await
            .with_context(|| {
                format!(
                    "serving health and metrics on {} (--health-addr)",
                    settings.health_addr
                )
            })?;
        if settings.disabled {
            let leadership = Leadership::always_leader();
            info!(identity = %identity, term = %Term::DISABLED,
                "leader election disabled: this replica always writes");
            metrics.set_lock_reachable(true);
            let gauges = metrics.follow(&leadership);
            lead_tx.send_replace(Some(leadership.clone()));
            let logger = log_changes(&leadership);
            return Ok(Started::Replica(Box::new(Replica {
                identity,
                client,
                kube_config,
                metrics,
                leadership,
                signals,
                elector: None,
                disabled: true,
                logger,
                gauges,
                events: None,
                server,
                server_stop,
            })));
        }
        info!(
            backend = %settings.backend,
            lock = %settings.lock_name,
            identity = %identity,
            lease_duration = ?settings.timing.lease_duration,
            renew_deadline = ?settings.timing.renew_deadline,
            retry_period = ?settings.timing.retry_period,
            wakeup = %settings.wakeup,
            "starting leader election"
        );
        // A backend that is down at startup is waited for, as Kubernetes' own client does; only
        // a refusal (credentials, permissions) ends the process. A signal meanwhile stops
        // cleanly.
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(10))
            .with_jitter()
            .without_max_times();
        let connecting =
            (|| backend::connect(settings, kube.as_ref().map(|(c, ns, _)| (c, ns.as_str()))))
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
                return Ok(Started::Stopped);
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
        if let (Some(ns), Some(client)) = (&connected.lease_namespace, &client) {
            // Whether the apiserver fences this Lease's holder (deploy/components/server-fencing),
            // said once; it never holds up the start.
            tokio::spawn(crate::fencing::check::report_fence(
                client.clone(),
                ns.clone(),
                settings.lock_name.clone(),
                identity.name().to_string(),
            ));
        }
        let events = connected
            .lease_namespace
            .zip(client.clone())
            .map(|(ns, client)| {
                let config = LeaderEventsConfig {
                    component: PROGRAM.to_string(),
                    namespace: ns,
                    lease_name: settings.lock_name.clone(),
                    identity: identity.clone(),
                };
                leader_lock_kubernetes::spawn_leader_events(client, config, leadership.clone())
            });
        Ok(Started::Replica(Box::new(Replica {
            identity,
            client,
            kube_config,
            metrics,
            leadership,
            signals,
            elector: Some(elector),
            disabled: false,
            logger,
            gauges,
            events,
            server,
            server_stop,
        })))
    }

    /// The Kubernetes client (ungated: the work gates its own writes on
    /// [`Self::leadership`]).
    ///
    /// # Errors
    /// When the replica was started with [`Kubernetes::IfLocked`] on a lock outside Kubernetes.
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        self.client.clone().context(NO_KUBERNETES)
    }

    /// The configuration [`client`](Self::client) was built from, for a client of another
    /// shape (the proxy's, over HTTP/2).
    ///
    /// # Errors
    /// As [`client`](Self::client).
    pub fn kube_config(&self) -> anyhow::Result<kube::Config> {
        self.kube_config.clone().context(NO_KUBERNETES)
    }

    /// The first half of a graceful stop: no new permits while `drain` runs (the work stops
    /// starting writes and finishes those in flight, each bounded by its validity deadline),
    /// then the lock is released, and a quiet moment follows for the successor, whose first
    /// requests should not queue behind ours at the apiserver. Returns the deadline of the whole
    /// stop ([`PROCESS_SHUTDOWN_BUDGET`] from now) for what the work tears down afterwards.
    pub async fn release(&mut self, drain: impl Future<Output = ()>) -> Instant {
        let deadline = Instant::now() + PROCESS_SHUTDOWN_BUDGET;
        let Some(elector) = self.elector.take() else {
            drain.await;
            return deadline;
        };
        let ((), stopped) = tokio::join!(drain, elector.shutdown());
        match stopped {
            Ok(released) => {
                info!(released, "elector stopped");
                if released {
                    tokio::time::sleep(leader_lock::elector::AFTER_RELEASE_QUIET).await;
                }
            }
            Err(e) => warn!(error = %e.chain(), "elector stopped without a clean release"),
        }
        deadline
    }

    /// The second half: the last leader-election Event (within `deadline`), the gauges, the
    /// health server. Call [`release`](Self::release) first.
    pub async fn finish(mut self, deadline: Instant) {
        if let Some(elector) = self.elector.take() {
            // Not released by `release` (a caller that skipped it): release now.
            let _ = elector.shutdown().await;
        }
        if self.disabled {
            self.logger.abort();
            self.gauges.abort();
        }
        let _ = self.logger.await;
        if let Some(ev) = self.events {
            // The "stopped leading" Event (each post is bounded on its own), within the budget.
            if tokio::time::timeout_at(deadline, ev).await.is_err() {
                warn!("the last leader election event was not posted within the shutdown budget");
            }
        }
        let _ = self.gauges.await;
        self.server_stop.cancel();
        let _ = self.server.await;
        info!(mono_ms = clock::mono_ms(), "replica stopped");
    }
}
