//! Steady-state cost: backend requests per second as the server itself counts them, per
//! renewal of the leader, and each replica's CPU and memory from /proc, over a quiet window with
//! one leader and N followers.

use std::net::ToSocketAddrs;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::cluster::Cluster;
use crate::lane::Lane;
use crate::lockserver::LockServer;
use gateway_leader_log::Event;
use leader_lock::clock;
use testkit::process::{cpu_seconds, rss_mib};

/// What one lane costs while nothing happens.
#[derive(Debug, Clone, Serialize)]
pub struct Cost {
    /// The backend.
    pub backend: String,
    /// The wake-up mode.
    pub wakeup: String,
    /// The window, in seconds.
    pub window_s: f64,
    /// Requests per second on the lock's server, when it can count them.
    pub requests_per_s: Option<f64>,
    /// What counted them (or why nothing did).
    pub counted_by: String,
    /// The leader's renewals in the window (its `renewed` lines), when they were counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewals: Option<usize>,
    /// Requests on the lock's server per renewal of the leader: what the leader and every
    /// follower together send for each renewal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_renewal: Option<f64>,
    /// The leader's CPU use, percent of one core.
    pub leader_cpu_pct: f64,
    /// The followers' mean CPU use, percent of one core.
    pub follower_cpu_pct: f64,
    /// The leader's resident memory, MiB.
    pub leader_rss_mib: f64,
    /// The followers' mean resident memory, MiB.
    pub follower_rss_mib: f64,
}

pub(crate) use testkit::metrics::sum as sum_metric;

/// One blocking plain-HTTP GET of `path` on `host:port`; the body.
pub(crate) fn http_get(hostport: &str, path: &str) -> Result<String> {
    let addr = hostport
        .to_socket_addrs()
        .with_context(|| format!("resolving {hostport}"))?
        .next()
        .ok_or_else(|| anyhow!("{hostport} resolves to no address"))?;
    testkit::metrics::get(addr, path)
}

/// The server's own request counter for the lock's traffic, and what it is.
async fn count(server: &LockServer, cluster: &Cluster) -> Result<(f64, String)> {
    match server {
        LockServer::Redis { url, .. } => {
            let client = redis::Client::open(url.as_str()).context("the Redis URL")?;
            let mut con = client.get_multiplexed_async_connection().await?;
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut con)
                .await?;
            // Every command but our own INFO: `cmdstat_get:calls=12,usec=...`.
            let calls = info
                .lines()
                .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
                .filter_map(|l| {
                    l.split("calls=")
                        .nth(1)?
                        .split(',')
                        .next()?
                        .parse::<f64>()
                        .ok()
                })
                .sum();
            Ok((calls, "redis INFO commandstats (all commands)".into()))
        }
        LockServer::Etcd { endpoints, .. } => {
            let first = endpoints.split(',').next().unwrap_or_default().trim();
            let Some(hostport) = first.strip_prefix("http://") else {
                bail!("etcd metrics are read over plain http only ({first})");
            };
            let hostport = hostport.trim_end_matches('/').to_string();
            let text = tokio::task::spawn_blocking(move || http_get(&hostport, "/metrics"))
                .await
                .map_err(|e| anyhow!("{e}"))??;
            Ok((
                sum_metric(&text, "grpc_server_msg_received_total", None),
                "etcd /metrics grpc_server_msg_received_total (every gRPC message)".into(),
            ))
        }
        LockServer::Kubernetes => {
            let req = http::Request::get("/metrics").body(Vec::new())?;
            let text = cluster.client().request_text(req).await?;
            Ok((
                sum_metric(
                    &text,
                    "apiserver_request_total",
                    Some("resource=\"leases\""),
                ),
                "apiserver /metrics apiserver_request_total{resource=\"leases\"}".into(),
            ))
        }
    }
}

/// Measures over `window` with the lane's replicas (`leader` is the leader's pid).
pub async fn measure(
    server: &LockServer,
    cluster: &Cluster,
    leader: u32,
    followers: &[u32],
    window: Duration,
) -> Cost {
    let cpu = |pids: &[u32]| -> Vec<f64> {
        pids.iter()
            .map(|p| cpu_seconds(*p).unwrap_or(f64::NAN))
            .collect()
    };
    let before = count(server, cluster).await;
    let (l0, f0) = (cpu(&[leader]), cpu(followers));
    let started = tokio::time::Instant::now();
    tokio::time::sleep(window).await;
    let after = count(server, cluster).await;
    let secs = started.elapsed().as_secs_f64();
    let (l1, f1) = (cpu(&[leader]), cpu(followers));
    let pct = |a: &[f64], b: &[f64]| {
        let d: Vec<f64> = a
            .iter()
            .zip(b)
            .map(|(x, y)| (y - x) / secs * 100.0)
            .collect();
        d.iter().sum::<f64>() / d.len().max(1) as f64
    };
    let mean_rss = |pids: &[u32]| {
        let r: Vec<f64> = pids.iter().filter_map(|p| rss_mib(*p)).collect();
        r.iter().sum::<f64>() / r.len().max(1) as f64
    };
    let (requests_per_s, counted_by) = match (before, after) {
        (Ok((a, what)), Ok((b, _))) => (Some((b - a) / secs), what),
        (Err(e), _) | (_, Err(e)) => (None, format!("not counted: {e:#}")),
    };
    Cost {
        backend: server.backend().to_string(),
        wakeup: String::new(),
        window_s: secs,
        requests_per_s,
        counted_by,
        renewals: None,
        requests_per_renewal: None,
        leader_cpu_pct: pct(&l0, &l1),
        follower_cpu_pct: pct(&f0, &f1),
        leader_rss_mib: mean_rss(&[leader]),
        follower_rss_mib: mean_rss(followers),
    }
}

/// How long the lines of a window's last instants may take through the log readers.
const LINES_PATIENCE: Duration = Duration::from_millis(300);

/// Settles `lane` (within `patience`) and measures it over `window` as [`measure`] does, with
/// the leader's renewals in the window and the requests per renewal; `None` when no process of
/// the lane leads.
///
/// # Errors
/// The lane does not settle.
pub async fn of_lane(
    lane: &mut Lane,
    (server, cluster): (&LockServer, &Cluster),
    window: Duration,
    patience: Duration,
) -> Result<Option<Cost>> {
    let leader = lane.settle(patience).await?;
    let pids: Vec<(usize, u32)> = lane
        .slots
        .iter()
        .enumerate()
        .filter_map(|(slot, r)| r.as_ref().map(|r| (slot, r.pid())))
        .collect();
    let Some(&(_, leader_pid)) = pids.iter().find(|(s, _)| *s == leader.slot) else {
        return Ok(None);
    };
    let followers: Vec<u32> = pids
        .iter()
        .filter(|(s, _)| *s != leader.slot)
        .map(|p| p.1)
        .collect();
    let from = clock::mono_ms();
    let mut c = measure(server, cluster, leader_pid, &followers, window).await;
    let to = clock::mono_ms();
    // Nothing matches: this only lets the window's last lines come in.
    lane.wait(LINES_PATIENCE, |_| false).await;
    let renewals = lane
        .events
        .iter()
        .filter(|e| e.replica == leader.index && (from..=to).contains(&e.mono_ms))
        .filter(|e| matches!(e.what, Event::Renewed { .. }))
        .count();
    c.renewals = Some(renewals);
    c.requests_per_renewal = c
        .requests_per_s
        .filter(|_| renewals > 0)
        .map(|r| r * c.window_s / renewals as f64);
    Ok(Some(c))
}
