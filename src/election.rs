//! A replica's election: the elector on the connected lock (or the always-valid leadership
//! with leader election off), the log lines and gauges that follow its leadership, the
//! leader-election Events of a Lease, and the order of its graceful release.

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use gateway_leader_log::{field, message};
use leader_lock::backend::LeaderLock;
use leader_lock::wrap::{InstrumentedLock, PollingLock};
use leader_lock::{
    clock, Candidacy, Elector, ElectorConfig, Identity, LeaderState, Leadership, Term,
};
use leader_lock_kubernetes::LeaderEventsConfig;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::backend;
use crate::config::{Settings, Wakeup};
use crate::fencing::check::report_fence;
use crate::health;
use crate::kube_client::KubeClient;
use crate::metrics::Metrics;
use crate::program::PROGRAM;
use crate::shutdown::{ShutdownSignals, PROCESS_SHUTDOWN_BUDGET};

/// One replica's election, running: [`release`](Self::release) it, stop the work, then
/// [`finish`](Self::finish) it.
pub struct Election {
    leadership: Leadership,
    /// `None` with leader election off, and once released.
    elector: Option<Elector>,
    /// Leader election off: no elector ends the leadership, so its followers are stopped here.
    disabled: bool,
    logger: JoinHandle<()>,
    gauges: JoinHandle<()>,
    events: Option<JoinHandle<()>>,
}

// === impl Election ===

impl Election {
    /// Starts the election `settings` configure for `identity`: with leader election off, an
    /// always-valid leadership; else the lock, connected once its backend answers (waited for
    /// while it is unreachable, as Kubernetes' own client does), and the elector on it. `kube`
    /// is the replica's client, for a Lease and its Events; `health` follows the leadership
    /// from its start. `None` when a signal arrived before the lock answered: nothing was held.
    ///
    /// # Errors
    /// The lock refuses (credentials, permissions, a timing it cannot honour).
    pub async fn start(
        settings: &Settings,
        identity: &Identity,
        kube: Option<&KubeClient>,
        metrics: &Arc<Metrics>,
        signals: &mut ShutdownSignals,
        health: &health::Server,
    ) -> anyhow::Result<Option<Election>> {
        let election = if settings.disabled {
            info!(identity = %identity, term = %Term::DISABLED,
                "leader election disabled: this replica always writes");
            Election::always_leader(metrics)
        } else {
            match Election::elect(settings, identity, kube, metrics, signals).await? {
                Some(election) => election,
                None => return Ok(None),
            }
        };
        health.follow(election.leadership.clone());
        Ok(Some(election))
    }

    /// The lock, connected once its backend answers, and the elector on it; `None` when a
    /// signal arrived first.
    async fn elect(
        settings: &Settings,
        identity: &Identity,
        kube: Option<&KubeClient>,
        metrics: &Arc<Metrics>,
        signals: &mut ShutdownSignals,
    ) -> anyhow::Result<Option<Election>> {
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
        let Some(connected) = backend::connect_when_reachable(settings, kube, signals).await?
        else {
            return Ok(None);
        };
        let config = ElectorConfig {
            identity: identity.clone(),
            timing: settings.timing,
            release_on_shutdown: settings.release_on_shutdown,
        };
        let election = Election::spawn(connected.lock, config, settings.wakeup, metrics)?;
        Ok(Some(match (connected.lease_namespace, kube) {
            (Some(namespace), Some(kube)) => {
                election.on_lease(&kube.client, namespace, &settings.lock_name, identity)
            }
            _ => election,
        }))
    }

    /// Leader election off: a leadership that is always valid, under the disabled marker.
    pub fn always_leader(metrics: &Arc<Metrics>) -> Election {
        let leadership = Leadership::always_leader();
        metrics.set_lock_reachable(true);
        Election {
            gauges: metrics.follow(&leadership),
            logger: log_changes(&leadership),
            leadership,
            elector: None,
            disabled: true,
            events: None,
        }
    }

    /// The elector on `lock`, woken by its watch or, with [`Wakeup::Poll`], by polling only;
    /// each lock request counted in `metrics`.
    ///
    /// # Errors
    /// The lock refuses `config`'s timing.
    pub fn spawn(
        lock: Arc<dyn LeaderLock>,
        config: ElectorConfig,
        wakeup: Wakeup,
        metrics: &Arc<Metrics>,
    ) -> anyhow::Result<Election> {
        let lock = match wakeup {
            Wakeup::Watch => lock,
            Wakeup::Poll => Arc::new(PollingLock::new(lock)),
        };
        let elector = Elector::spawn(
            Arc::new(InstrumentedLock::new(lock, metrics.clone())),
            config,
        )
        .context("starting the elector: the lock refused the timing")?;
        let leadership = elector.leadership();
        Ok(Election {
            gauges: metrics.follow(&leadership),
            logger: log_changes(&leadership),
            leadership,
            elector: Some(elector),
            disabled: false,
            events: None,
        })
    }

    /// On the Lease `namespace/lock`: client-go's leader-election Events, and, said once
    /// without holding up the start, whether the apiserver fences the Lease's holder.
    fn on_lease(
        mut self,
        client: &kube::Client,
        namespace: String,
        lock: &str,
        identity: &Identity,
    ) -> Election {
        tokio::spawn(report_fence(
            client.clone(),
            namespace.clone(),
            lock.to_string(),
            identity.name().to_string(),
        ));
        let config = LeaderEventsConfig {
            component: PROGRAM.to_string(),
            namespace,
            lease_name: lock.to_string(),
            identity: identity.clone(),
        };
        self.events = Some(leader_lock_kubernetes::spawn_leader_events(
            client.clone(),
            config,
            self.leadership.clone(),
        ));
        self
    }

    /// The switch that makes the elector stand aside; `None` with leader election disabled.
    pub fn candidacy(&self) -> Option<Candidacy> {
        self.elector.as_ref().map(Elector::candidacy)
    }

    /// This replica's leadership: the work gates its writes on it.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// The first half of a graceful stop: no new permits while `drain` runs (the work stops
    /// starting writes and finishes those in flight, each bounded by its validity deadline),
    /// then the lock is released, and a quiet moment follows for the successor, whose first
    /// requests should not queue behind ours at the apiserver. Returns the deadline of the whole
    /// stop ([`PROCESS_SHUTDOWN_BUDGET`] from now) for what the work tears down afterwards.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped midway, the lock may be left unreleased (it then expires).
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

    /// A stop with no work to drain: [`release`](Self::release), then
    /// [`finish`](Self::finish).
    pub async fn stop(mut self) {
        let deadline = self.release(async {}).await;
        self.finish(deadline).await;
    }

    /// The second half: the last leader-election Event (within `deadline`) and the gauges.
    /// Call [`release`](Self::release) first.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

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
