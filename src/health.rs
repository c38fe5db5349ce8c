//! One HTTP port for the kubelet and Prometheus: `/healthz`, `/readyz` and `/metrics`.
//!
//! - `/healthz` fails when this replica believes it leads but its leadership ran past the renew
//!   deadline without the elector stepping down (a stuck elector, as client-go's watchdog
//!   catches): restarting the process is the only safe way out.
//! - `/readyz` fails while the lock backend does not answer or the watches have not synced (a
//!   required Gateway API CRD that is not installed is named).
//! - `/metrics` is the Prometheus text exposition.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use gateway_leader_log::{field, message};
use gateway_leader_status::Readiness;
use leader_lock::{LeaderState, Leadership};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

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
}

impl Health {
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
        None
    }
}

async fn healthz(State(h): State<Health>) -> impl IntoResponse {
    verdict(h.unhealthy())
}

async fn readyz(State(h): State<Health>) -> impl IntoResponse {
    verdict(h.not_ready())
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
            Readiness::default()
        });
        (
            Health {
                leadership,
                metrics,
                synced: srx,
                grace: Duration::from_secs(2),
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
}
