//! One HTTP port for the kubelet, Prometheus and people: `/healthz`, `/readyz`, `/metrics` and
//! `/leader`.
//!
//! - `/healthz` fails when this replica believes it leads but its leadership ran past the renew
//!   deadline without the elector stepping down (a stuck elector, as client-go's watchdog
//!   catches): restarting the process is the only safe way out.
//! - `/readyz` fails while the lock backend does not answer or the watches have not synced (a
//!   required Gateway API CRD that is not installed is named), and, with
//!   `--readiness-follows-leadership`, on every replica but the valid leader (for an
//!   active-passive Service that must send traffic to the leader alone).
//! - `/metrics` is the Prometheus text exposition.
//! - `/leader` is this replica's view of the leadership as JSON ([`LeaderView`]): whether it
//!   validly leads, its term, the holder it last saw and how long ago the lock showed it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use gateway_leader_log::{field, message};
use leader_lock::readiness::Readiness;
use leader_lock::{Identity, LeaderState, Leadership};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::info;

use crate::config::Settings;
use crate::metrics::Metrics;

/// What the endpoints look at.
#[derive(Clone)]
pub struct Health {
    /// This replica's leadership, once the lock backend was reached.
    pub leadership: watch::Receiver<Option<Leadership>>,
    /// Lock reachability and every metric.
    pub metrics: Arc<Metrics>,
    /// The status writer's readiness: its required watches have their initial lists, or what
    /// it waits for (a required Gateway API CRD that is not installed, say).
    pub synced: watch::Receiver<Readiness>,
    /// How long past its validity a leadership may still be published before the elector is
    /// considered stuck (the elector steps down *at* the deadline; this covers scheduling).
    pub grace: Duration,
    /// What `/leader` says of this replica besides its leadership.
    pub leader: LeaderInfo,
    /// `/readyz` fails on every replica that does not validly lead.
    pub readiness_follows_leadership: bool,
}

/// What `/leader` says of this replica besides its leadership.
#[derive(Debug, Clone, Default)]
pub struct LeaderInfo {
    /// This replica's identity, with its incarnation.
    pub identity: String,
    /// The lock backend (`kubernetes`, `etcd`, `redis`), or `disabled`.
    pub backend: String,
    /// The lock's name.
    pub lock: String,
}

/// The body of `GET /leader`.
///
/// Unlike the old `leader-elector` sidecar's `{"name": ...}`, which followers kept answering with
/// a leader long gone, it says how old the sighting of the holder is.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LeaderView {
    /// This replica's identity.
    pub identity: String,
    /// Whether this replica validly leads now: a write would get a permit.
    pub leading: bool,
    /// `starting`, `leader`, `follower` or `stopped`.
    pub state: &'static str,
    /// This replica's term while it leads (text: a number, or `disabled`).
    pub term: Option<String>,
    /// The holder this replica last saw (itself while it leads), when known.
    pub holder: Option<String>,
    /// The holder's term, when known.
    pub holder_term: Option<String>,
    /// Milliseconds since the lock last showed this replica its record; `null` before the first
    /// sighting and with leader election off.
    pub holder_seen_ms_ago: Option<u64>,
    /// Milliseconds of validity this replica's leadership has left; 0 unless it validly leads.
    pub valid_for_ms: u64,
    /// The lock backend, or `disabled`.
    pub backend: String,
    /// The lock's name.
    pub lock: String,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Health {
    /// `/leader`'s answer now.
    pub fn leader_view(&self) -> LeaderView {
        let info = &self.leader;
        let mut view = LeaderView {
            identity: info.identity.clone(),
            leading: false,
            state: "starting",
            term: None,
            holder: None,
            holder_term: None,
            holder_seen_ms_ago: None,
            valid_for_ms: 0,
            backend: info.backend.clone(),
            lock: info.lock.clone(),
        };
        let Some(leadership) = self.leadership.borrow().clone() else {
            return view;
        };
        let now = Instant::now();
        view.holder_seen_ms_ago = leadership
            .last_sighting()
            .map(|at| millis(now.saturating_duration_since(at)));
        match leadership.state() {
            LeaderState::Starting => {}
            LeaderState::Stopped => view.state = "stopped",
            LeaderState::Follower { holder, term } => {
                view.state = "follower";
                view.holder = holder;
                view.holder_term = term.map(|t| t.to_string());
            }
            LeaderState::Leader { term, valid_until } => {
                view.state = "leader";
                view.term = Some(term.to_string());
                view.holder = Some(info.identity.clone());
                view.holder_term = Some(term.to_string());
                // The permit's own check: a leadership past its deadline, or draining, is not
                // valid whatever the published state says.
                view.leading = leadership.is_leader();
                if view.leading {
                    view.valid_for_ms = millis(valid_until.saturating_duration_since(now));
                }
            }
        }
        view
    }

    /// Why the process is unhealthy, if it is.
    pub fn unhealthy(&self) -> Option<String> {
        let state = self.leadership.borrow().as_ref()?.state();
        match state {
            LeaderState::Leader { term, valid_until } => {
                let late = Instant::now().checked_duration_since(valid_until)?;
                (late > self.grace).then(|| {
                    format!(
                        "leading under term {term} but not renewed for {late:?} past the renew \
                         deadline: the elector is stuck"
                    )
                })
            }
            _ => None,
        }
    }

    /// Why the replica is not ready, if it is not.
    pub fn not_ready(&self) -> Option<String> {
        if self.leadership.borrow().is_none() {
            return Some("the lock backend has not been reached yet".into());
        }
        if let Some(why) = self.synced.borrow().problem() {
            return Some(why.to_string());
        }
        if !self.metrics.lock_reachable() {
            return Some("the lock backend does not answer".into());
        }
        if self.readiness_follows_leadership {
            let leads = self
                .leadership
                .borrow()
                .as_ref()
                .is_some_and(Leadership::is_leader);
            if !leads {
                return Some(
                    "not the valid leader (--readiness-follows-leadership: only the leader is \
                     ready)"
                        .into(),
                );
            }
        }
        None
    }
}

async fn healthz(State(h): State<Health>) -> impl IntoResponse {
    verdict(h.unhealthy())
}

async fn readyz(State(h): State<Health>) -> impl IntoResponse {
    verdict(h.not_ready())
}

async fn leader(State(h): State<Health>) -> impl IntoResponse {
    axum::Json(h.leader_view())
}

async fn metrics(State(h): State<Health>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.metrics.encode(),
    )
}

fn verdict(problem: Option<String>) -> (StatusCode, String) {
    match problem {
        None => (StatusCode::OK, "ok\n".into()),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// Binds `addr` and serves until `cancel`; returns the bound address (port 0 picks one).
///
/// # Errors
/// When the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    health: Health,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/leader", get(leader))
        .with_state(health);
    // The address machines read (gateway-leader-log): a test's replica asks for port 0.
    info!({ field::ADDR } = %bound, "{}", message::SERVING);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { cancel.cancelled().await })
            .await;
    });
    Ok((bound, task))
}

/// What a replica's health server needs besides its metrics and the work's readiness.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    /// Where to serve (port 0 picks one).
    pub addr: SocketAddr,
    /// [`Health::grace`].
    pub grace: Duration,
    /// [`Health::leader`].
    pub leader: LeaderInfo,
    /// [`Health::readiness_follows_leadership`].
    pub readiness_follows_leadership: bool,
}

// === impl HealthConfig ===

impl HealthConfig {
    /// The health settings of `settings` for the replica `identity`.
    pub fn from_settings(settings: &Settings, identity: &Identity) -> Self {
        HealthConfig {
            addr: settings.health_addr,
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
        }
    }
}

/// A replica's running health server: it answers from the start (not ready until the lock
/// answers and the work is ready, which the kubelet must be able to see), follows the
/// leadership once there is one, and stops last, or when dropped.
pub struct Server {
    leadership: watch::Sender<Option<Leadership>>,
    stop: DropGuard,
    task: tokio::task::JoinHandle<()>,
}

// === impl Server ===

impl Server {
    /// Binds `config.addr` and serves `metrics` and the work's readiness `ready`.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub async fn start(
        config: HealthConfig,
        metrics: Arc<Metrics>,
        ready: watch::Receiver<Readiness>,
    ) -> anyhow::Result<Server> {
        let (leadership, rx) = watch::channel(None);
        let stop = CancellationToken::new();
        let health = Health {
            leadership: rx,
            metrics,
            synced: ready,
            grace: config.grace,
            leader: config.leader,
            readiness_follows_leadership: config.readiness_follows_leadership,
        };
        let (_, task) = serve(config.addr, health, stop.clone())
            .await
            .with_context(|| {
                format!(
                    "serving health and metrics on {} (--health-addr)",
                    config.addr
                )
            })?;
        Ok(Server {
            leadership,
            stop: stop.drop_guard(),
            task,
        })
    }

    /// From now on the endpoints look at `leadership`.
    pub fn follow(&self, leadership: Leadership) {
        self.leadership.send_replace(Some(leadership));
    }

    /// Stops serving and waits for the server to end.
    pub async fn stop(self) {
        drop(self.stop);
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leader_lock::Term;

    fn health(
        state: LeaderState,
        synced: bool,
        reachable: bool,
    ) -> (Health, leader_lock::leadership::Scripted) {
        let (tx, leadership) = Leadership::scripted(state);
        let (_ltx, leadership) = watch::channel(Some(leadership));
        let metrics = Metrics::new("l");
        metrics.set_lock_reachable(reachable);
        let (_stx, srx) = watch::channel(if synced {
            Readiness::Ready
        } else {
            Readiness::Waiting("the watches have not synced yet".into())
        });
        (
            Health {
                leadership,
                metrics,
                synced: srx,
                grace: Duration::from_secs(2),
                leader: LeaderInfo {
                    identity: "pod-a_1".into(),
                    backend: "etcd".into(),
                    lock: "l".into(),
                },
                readiness_follows_leadership: false,
            },
            tx,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_past_its_deadline_is_unhealthy_after_the_grace() {
        let state = LeaderState::Leader {
            term: Term(4),
            valid_until: Instant::now() + Duration::from_secs(10),
        };
        let (h, _tx) = health(state, true, true);
        assert_eq!(h.unhealthy(), None);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(h.unhealthy(), None, "within the grace");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(h.unhealthy().is_some_and(|w| w.contains("stuck")));
    }

    #[tokio::test]
    async fn a_follower_is_healthy_and_ready_only_when_synced_and_the_lock_answers() {
        let follower = || LeaderState::Follower {
            holder: None,
            term: None,
        };
        assert_eq!(health(follower(), true, true).0.unhealthy(), None);
        assert_eq!(health(follower(), true, true).0.not_ready(), None);
        assert!(health(follower(), false, true)
            .0
            .not_ready()
            .is_some_and(|w| w.contains("synced")));
        assert!(health(follower(), true, false)
            .0
            .not_ready()
            .is_some_and(|w| w.contains("lock")));
    }

    #[tokio::test(start_paused = true)]
    async fn leader_says_who_leads_and_how_much_validity_is_left() {
        let state = LeaderState::Leader {
            term: Term(7),
            valid_until: Instant::now() + Duration::from_secs(10),
        };
        let (h, _tx) = health(state, true, true);
        tokio::time::advance(Duration::from_secs(4)).await;
        let v = h.leader_view();
        assert!(v.leading);
        assert_eq!(v.state, "leader");
        assert_eq!(v.term.as_deref(), Some("7"));
        assert_eq!(v.holder.as_deref(), Some("pod-a_1"));
        assert_eq!(v.valid_for_ms, 6_000);
        assert_eq!((v.backend.as_str(), v.lock.as_str()), ("etcd", "l"));
        // Past the deadline the published state still says leader; the answer does not.
        tokio::time::advance(Duration::from_secs(7)).await;
        let v = h.leader_view();
        assert!(!v.leading);
        assert_eq!(v.valid_for_ms, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn leader_on_a_follower_names_the_holder_and_the_age_of_the_sighting() {
        let state = LeaderState::Follower {
            holder: Some("pod-b_2".into()),
            term: Some(Term(3)),
        };
        let (h, tx) = health(state, true, true);
        assert_eq!(h.leader_view().holder_seen_ms_ago, None, "never sighted");
        tx.sighted(Instant::now());
        tokio::time::advance(Duration::from_millis(2_500)).await;
        let v = h.leader_view();
        assert!(!v.leading);
        assert_eq!(v.state, "follower");
        assert_eq!(v.term, None);
        assert_eq!(v.holder.as_deref(), Some("pod-b_2"));
        assert_eq!(v.holder_term.as_deref(), Some("3"));
        assert_eq!(v.holder_seen_ms_ago, Some(2_500));
        let json = serde_json::to_value(&v).expect("serializes");
        assert_eq!(json["holder"], "pod-b_2");
        assert_eq!(json["holder_seen_ms_ago"], 2_500);
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_can_follow_leadership() {
        let follower = LeaderState::Follower {
            holder: None,
            term: None,
        };
        let (mut h, tx) = health(follower, true, true);
        assert_eq!(h.not_ready(), None, "off by default");
        h.readiness_follows_leadership = true;
        assert!(h.not_ready().is_some_and(|w| w.contains("leader")));
        tx.publish(LeaderState::Leader {
            term: Term(1),
            valid_until: Instant::now() + Duration::from_secs(10),
        });
        assert_eq!(h.not_ready(), None);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(
            h.not_ready().is_some(),
            "an expired leadership is no leadership"
        );
    }
}
