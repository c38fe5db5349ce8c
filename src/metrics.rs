//! Prometheus metrics: leadership as client-go reports it, lock request latencies and
//! reachability, what the status writer wrote, refused to write, or could not write, and what
//! the proxy did with each request. The alert rules and the dashboard of deploy/monitoring/ read
//! them by these names (docs/operations.md, "Alerts" and "Dashboard").

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leader_lock::backend::LockError;
use leader_lock::wrap::{LockObserver, LockRequest};
use leader_lock::{LeaderState, Leadership, Term};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use gateway_leader_status::StatusMetrics;

/// `name`: the lock, as client-go labels `leader_election_master_status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LockLabel {
    /// The lock's name.
    pub name: String,
}

/// `op`: which lock operation a latency is for.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    /// `acquire_or_renew`, `release` or `get`.
    pub op: &'static str,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// `lease`: the controller's election Lease that the proxy answers, as `namespace/name`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabel {
    /// `namespace/name`.
    pub lease: String,
}

/// `verb` and `outcome` of a request through the proxy.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProxyLabels {
    /// The verb the apiserver would authorize (`get`, `list`, `watch`, `create`, ...,
    /// `connect`, `unknown`).
    pub verb: &'static str,
    /// What the proxy did with it ([`ProxyOutcome`]).
    pub outcome: &'static str,
}

/// What the proxy did with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyOutcome {
    /// Sent to the apiserver, whose answer (whatever its status) went back whole.
    Forwarded,
    /// A write refused unsent: this replica did not validly lead.
    Refused,
    /// A write cut at the end of its permit's validity: its body still arriving, or the
    /// apiserver's answer not yet complete.
    Cut,
    /// Answered by the proxy itself: a body too large or broken.
    Rejected,
    /// The apiserver did not answer.
    Failed,
    /// An upgraded stream (exec, attach, port-forward, proxy) that ran and was closed by one of
    /// its ends.
    Upgraded,
    /// An upgraded stream cut by the proxy: its leadership ended, or the proxy drained.
    UpgradeCut,
    /// A request for the controller's election Lease, answered by the proxy itself
    /// (`--proxy-election-lease`).
    Election,
}

impl ProxyOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyOutcome::Forwarded => "forwarded",
            ProxyOutcome::Refused => "refused",
            ProxyOutcome::Cut => "cut",
            ProxyOutcome::Rejected => "rejected",
            ProxyOutcome::Failed => "failed",
            ProxyOutcome::Upgraded => "upgraded",
            ProxyOutcome::UpgradeCut => "upgrade_cut",
            ProxyOutcome::Election => "election",
        }
    }
}

/// Every metric of one replica, and the registry that serves them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    lock_name: String,
    /// 1 while this replica leads, else 0 (client-go's `leader_election_master_status`).
    pub master_status: Family<LockLabel, Gauge>,
    /// Leaderships this replica took.
    pub transitions: Counter,
    /// The fencing term of this replica's current leadership (0 while it does not lead, and with
    /// leader election disabled).
    pub term: Gauge<u64, AtomicU64>,
    /// When this replica's current leadership started, in seconds since the Unix epoch (0 while
    /// it does not lead): "since when" on a dashboard. The wall clock, for people only: no
    /// decision reads it.
    pub leadership_start: Gauge<f64, AtomicU64>,
    /// Lock request latencies by operation and outcome.
    pub lock_requests: Family<OpLabel, Histogram>,
    /// The status writer's metrics, registered under the `gateway_leader` prefix.
    pub status: Arc<StatusMetrics>,
    /// Requests through the proxy by verb and outcome.
    pub proxy_requests: Family<ProxyLabels, Counter>,
    /// The time the proxy adds to a forwarded request: from its arrival to its being handed to
    /// the client (classification, the permit, reading a write's body).
    pub proxy_added_seconds: Histogram,
    /// 1 while the last lock request reached the backend (a refusal is an answer), else 0;
    /// 0 until the first answer. Always 1 with leader election disabled.
    pub lock_reachable: Gauge,
    /// 1, labelled with the Lease, when the proxy answers the controller's own election
    /// (`--proxy-election-lease`); absent otherwise. The alert on writes refused in that mode
    /// (where the controller should not send them) joins on it.
    pub proxy_election_lease: Family<LeaseLabel, Gauge>,
}

/// The proxy's added latency: buckets from 10 µs to about 0.3 s.
fn added_latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.000_01, 2.0, 16)
}

/// Latency buckets from 1 ms to about 16 s.
fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 15)
}

impl Metrics {
    /// Every metric, registered, for the lock `lock_name`.
    pub fn new(lock_name: &str) -> Arc<Self> {
        let mut registry = Registry::default();
        let m = Metrics {
            lock_name: lock_name.to_string(),
            master_status: Family::default(),
            transitions: Counter::default(),
            term: Gauge::default(),
            leadership_start: Gauge::default(),
            lock_requests: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            status: Arc::default(),
            proxy_requests: Family::default(),
            proxy_added_seconds: Histogram::new(added_latency_buckets()),
            lock_reachable: Gauge::default(),
            proxy_election_lease: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "leader_election_master_status",
            "Whether this replica is the leader (1) or not (0), as client-go reports it",
            m.master_status.clone(),
        );
        let mine = registry.sub_registry_with_prefix("gateway_leader");
        mine.register(
            "leadership_transitions",
            "Leaderships this replica took",
            m.transitions.clone(),
        );
        mine.register(
            "term",
            "Fencing term of this replica's current leadership (0 when not leading)",
            m.term.clone(),
        );
        mine.register(
            "leadership_start_time_seconds",
            "Start of this replica's current leadership, in seconds since the Unix epoch (0 when not leading)",
            m.leadership_start.clone(),
        );
        mine.register(
            "lock_request_seconds",
            "Latency of lock requests by operation and outcome",
            m.lock_requests.clone(),
        );
        mine.register(
            "proxy_requests",
            "Requests through the Kubernetes API proxy by verb and outcome",
            m.proxy_requests.clone(),
        );
        mine.register(
            "proxy_added_seconds",
            "Time the proxy adds to a forwarded request before handing it to the client",
            m.proxy_added_seconds.clone(),
        );
        mine.register(
            "lock_reachable",
            "Whether the last lock request reached the lock's backend (1) or not (0)",
            m.lock_reachable.clone(),
        );
        mine.register(
            "proxy_election_lease",
            "The controller's election Lease the proxy answers itself (1), when it answers one",
            m.proxy_election_lease.clone(),
        );
        let status = StatusMetrics::register(mine);
        Arc::new(Metrics {
            registry,
            status,
            ..m
        })
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Counts a request through the proxy: `verb` as the apiserver's authorizer names it
    /// ([`ProxyLabels::verb`]).
    pub fn proxy_request(&self, verb: &'static str, outcome: ProxyOutcome) {
        self.proxy_requests
            .get_or_create(&ProxyLabels {
                verb,
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// Creates the series of `verbs` (the gated ones) refused and cut at 0, as a proxy starts:
    /// a series that first appears at 1 hides that first refusal or cut from Prometheus' `rate`
    /// and `increase`, on which the alerts count them.
    pub fn zero_proxy_writes(&self, verbs: impl IntoIterator<Item = &'static str>) {
        for verb in verbs {
            for outcome in [ProxyOutcome::Refused, ProxyOutcome::Cut] {
                self.proxy_requests
                    .get_or_create(&ProxyLabels {
                        verb,
                        outcome: outcome.as_str(),
                    })
                    .inc_by(0);
            }
        }
    }

    /// Records the time the proxy added to a forwarded request.
    pub fn proxy_added(&self, took: Duration) {
        self.proxy_added_seconds.observe(took.as_secs_f64());
    }

    /// True when the last lock request reached the backend.
    pub fn lock_reachable(&self) -> bool {
        self.lock_reachable.get() == 1
    }

    /// Marks the lock reachable without a request (leader election disabled).
    pub fn set_lock_reachable(&self, reachable: bool) {
        self.lock_reachable.set(i64::from(reachable));
    }

    /// Says that the proxy answers the controller's election Lease `lease` (`namespace/name`).
    pub fn proxy_answers_election(&self, lease: &str) {
        self.proxy_election_lease
            .get_or_create(&LeaseLabel {
                lease: lease.to_string(),
            })
            .set(1);
    }

    /// Keeps the leadership gauges current until the elector stops.
    pub fn follow(self: &Arc<Self>, leadership: &Leadership) -> JoinHandle<()> {
        let mut rx = leadership.subscribe();
        let m = self.clone();
        tokio::spawn(async move {
            let mut led: Option<Term> = None;
            loop {
                let state = rx.borrow_and_update().clone();
                let now = state.term();
                if now != led {
                    if now.is_some() {
                        m.transitions.inc();
                    }
                    m.leadership_start
                        .set(now.map_or(0.0, |_| unix_seconds(SystemTime::now())));
                    led = now;
                }
                let leading = i64::from(now.is_some());
                m.master_status
                    .get_or_create(&LockLabel {
                        name: m.lock_name.clone(),
                    })
                    .set(leading);
                // Disabled mode's marker is no term: the gauge says 0 there, as for a follower.
                m.term
                    .set(now.filter(|t| !t.is_disabled()).map_or(0, |t| t.0));
                if matches!(state, LeaderState::Stopped) || rx.changed().await.is_err() {
                    m.master_status
                        .get_or_create(&LockLabel {
                            name: m.lock_name.clone(),
                        })
                        .set(0);
                    return;
                }
            }
        })
    }
}

/// `at` in seconds since the Unix epoch (0 for a clock set before it).
fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Every lock request timed (an [`InstrumentedLock`](leader_lock::wrap::InstrumentedLock)
/// reports it here), and whether the backend answered.
impl LockObserver for Metrics {
    fn observe(&self, request: LockRequest, took: Duration, outcome: Result<(), &LockError>) {
        self.lock_requests
            .get_or_create(&OpLabel {
                op: request.as_str(),
                outcome: if outcome.is_ok() { "ok" } else { "error" },
            })
            .observe(took.as_secs_f64());
        // A refusal is an answer: the backend is reachable, it just said no.
        let reachable = !matches!(
            outcome,
            Err(LockError::Unavailable { .. } | LockError::Timeout(_))
        );
        self.set_lock_reachable(reachable);
    }
}

#[cfg(test)]
mod tests {
    use leader_lock::backend::LeaderLock;
    use leader_lock::wrap::InstrumentedLock;
    use tokio::time::Instant;

    use super::*;

    #[tokio::test]
    async fn leadership_shows_in_the_gauges_as_client_go_names_them() {
        let m = Metrics::new("my-lock");
        let (tx, leadership) = Leadership::scripted(LeaderState::Leader {
            term: Term(1),
            valid_until: Instant::now() + Duration::from_secs(3600),
        });
        let follow = m.follow(&leadership);
        tokio::task::yield_now().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !m
            .encode()
            .contains("leader_election_master_status{name=\"my-lock\"} 1")
        {
            assert!(std::time::Instant::now() < deadline, "{}", m.encode());
            tokio::task::yield_now().await;
        }
        assert!(m
            .encode()
            .contains("gateway_leader_leadership_transitions_total 1"));
        let since = m.leadership_start.get();
        let now = unix_seconds(SystemTime::now());
        assert!(since > now - 3600.0 && since <= now, "{since} vs {now}");
        tx.publish(LeaderState::Stopped);
        follow.await.expect("stops with the elector");
        assert!(m
            .encode()
            .contains("leader_election_master_status{name=\"my-lock\"} 0"));
        assert_eq!(m.leadership_start.get(), 0.0, "not leading: 0");
    }

    #[test]
    fn proxy_requests_are_counted_by_verb_and_outcome_and_the_added_time_observed() {
        let m = Metrics::new("x");
        m.proxy_request("create", ProxyOutcome::Refused);
        m.proxy_request("create", ProxyOutcome::Refused);
        m.proxy_request("watch", ProxyOutcome::Forwarded);
        m.proxy_request("patch", ProxyOutcome::Cut);
        m.proxy_added(Duration::from_micros(150));
        m.zero_proxy_writes(["delete"]);
        let text = m.encode();
        for line in [
            "gateway_leader_proxy_requests_total{verb=\"create\",outcome=\"refused\"} 2",
            "gateway_leader_proxy_requests_total{verb=\"watch\",outcome=\"forwarded\"} 1",
            "gateway_leader_proxy_requests_total{verb=\"patch\",outcome=\"cut\"} 1",
            "gateway_leader_proxy_added_seconds_count 1",
            "gateway_leader_proxy_requests_total{verb=\"delete\",outcome=\"refused\"} 0",
            "gateway_leader_proxy_requests_total{verb=\"delete\",outcome=\"cut\"} 0",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[tokio::test]
    async fn lock_requests_are_timed_and_reachability_follows_the_answers() {
        let m = Metrics::new("x");
        let store = leader_lock::MemoryStore::new();
        let lock = InstrumentedLock::new(Arc::new(store.lock("x")), m.clone());
        assert!(!m.lock_reachable(), "unknown until a request answered");
        lock.get().await.expect("memory answers");
        assert!(m.lock_reachable());
        assert!(m.encode().contains("gateway_leader_lock_reachable 1"));
        assert!(m
            .encode()
            .contains("gateway_leader_lock_request_seconds_count{op=\"get\",outcome=\"ok\"} 1"));
        let unreachable = LockError::unavailable("down");
        m.observe(
            LockRequest::Withdraw,
            Duration::from_millis(3),
            Err(&unreachable),
        );
        assert!(!m.lock_reachable(), "no answer");
        assert!(m.encode().contains("gateway_leader_lock_reachable 0"));
        assert!(m.encode().contains(
            "gateway_leader_lock_request_seconds_count{op=\"withdraw\",outcome=\"error\"} 1"
        ));
        m.observe(
            LockRequest::Get,
            Duration::ZERO,
            Err(&LockError::refused("no")),
        );
        assert!(m.lock_reachable(), "a refusal is an answer");
    }

    #[test]
    fn the_election_lease_mode_shows_as_a_series_only_when_in_use() {
        let m = Metrics::new("x");
        assert!(!m.encode().contains("gateway_leader_proxy_election_lease{"));
        m.proxy_answers_election("ctl/contour");
        assert!(m
            .encode()
            .contains("gateway_leader_proxy_election_lease{lease=\"ctl/contour\"} 1"));
    }
}
