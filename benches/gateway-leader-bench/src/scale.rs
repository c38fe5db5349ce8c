//! `--scenario scale`: two replicas over `--routes` HTTPRoutes. What it measures, per backend:
//!
//! - every route's first status written, and each replica's resident memory once settled;
//! - a graceful takeover: SIGTERM to the leader, then one route changed at once. Signal → new
//!   leader, new leader → first write of the changed route, new leader → its check of every
//!   cached status done, and the requests on the Gateway API resources the apiserver counted
//!   meanwhile (its own `apiserver_request_total`, the bench's one change taken off);
//! - a burst: up to 1,000 routes changed by the bench as fast as the apiserver takes them, and how
//!   long the leader takes to write all of their statuses, against the apiserver's own rate.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use futures::{StreamExt, TryStreamExt};
use gateway_api::httproutes::HttpRoute;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use nix::sys::signal::Signal;
use serde::Serialize;
use serde_json::json;

use crate::args::Plan;
use crate::cluster::Cluster;
use crate::cost::sum_metric;
use crate::lane::Lane;
use crate::lockserver::LockServer;
use gateway_leader_log::Event;
use leader_lock::clock::mono_ms;
use testkit::process::{peak_rss_mib, rss_mib};

/// Requests the bench sends at once when it creates or changes routes.
const CONCURRENCY: usize = 16;
/// The most routes the burst changes.
const BURST: usize = 1000;
/// The Gateway API resources whose requests a takeover is charged with.
const RESOURCES: [&str; 3] = [
    "resource=\"httproutes\"",
    "resource=\"gateways\"",
    "resource=\"gatewayclasses\"",
];

/// One backend's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleResult {
    /// The lock backend.
    pub backend: String,
    /// HTTPRoutes.
    pub routes: usize,
    /// From the first leader's leading line to the last route's first status write (ms).
    pub initial_ms: f64,
    /// The leader's and the follower's resident memory once settled (MiB).
    pub rss_mib: Vec<f64>,
    /// The most each of them held since it started, read at the same time (MiB): the initial
    /// lists and the first computation peak above the settled figure.
    pub peak_rss_mib: Vec<f64>,
    /// SIGTERM → the new leader's leading line (ms).
    pub takeover_ms: f64,
    /// The new leader's leading line → its check of every cached status done (ms).
    pub check_ms: f64,
    /// The new leader's leading line → the changed route's status written (ms).
    pub change_write_ms: f64,
    /// Requests on the Gateway API resources from the SIGTERM until the check was done.
    pub takeover_requests: f64,
    /// The new leader's resident memory after the takeover (MiB).
    pub new_leader_rss_mib: f64,
    /// Routes the burst changed.
    pub burst: usize,
    /// The bench's own changes per second (the apiserver's write rate, in the same run).
    pub apiserver_writes_per_s: f64,
    /// The leader's status writes per second, from the burst's start to its last write.
    pub status_writes_per_s: f64,
}

/// Runs the scale scenario on every backend of the plan; prints and saves the figures.
pub fn main(rt: &tokio::runtime::Runtime, plan: &Plan, exe: &Path) -> ExitCode {
    let results = match rt.block_on(run(plan, exe)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gateway-leader-bench: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", table(&results));
    let path = plan.out.join("scale.json");
    let saved = serde_json::to_string_pretty(&results)
        .map_err(anyhow::Error::from)
        .and_then(|t| std::fs::write(&path, t).map_err(anyhow::Error::from));
    match saved {
        Ok(()) => {
            println!("figures: {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gateway-leader-bench: writing {}: {e:#}", path.display());
            ExitCode::FAILURE
        }
    }
}

fn table(results: &[ScaleResult]) -> String {
    let mut t = String::from(
        "| backend | routes | all written (s) | RSS leader / follower (MiB) \
         | peak RSS leader / follower (MiB) \
         | signal → leader (ms) | leader → changed route written (ms) | check done (ms) \
         | requests | new leader RSS (MiB) | burst | apiserver writes/s | status writes/s |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let mib = |v: &[f64]| {
            v.iter()
                .map(|m| format!("{m:.0}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        t.push_str(&format!(
            "| {} | {} | {:.1} | {} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} \
             | {} | {:.0} | {:.0} ({:.0} %) |\n",
            r.backend,
            r.routes,
            r.initial_ms / 1e3,
            mib(&r.rss_mib),
            mib(&r.peak_rss_mib),
            r.takeover_ms,
            r.change_write_ms,
            r.check_ms,
            r.takeover_requests,
            r.new_leader_rss_mib,
            r.burst,
            r.apiserver_writes_per_s,
            r.status_writes_per_s,
            r.status_writes_per_s / r.apiserver_writes_per_s * 100.0,
        ));
    }
    t
}

async fn run(plan: &Plan, exe: &Path) -> Result<Vec<ScaleResult>> {
    let cluster = Cluster::start(plan.kubeconfig.as_deref()).await?;
    let mut out = Vec::new();
    for &backend in &plan.backends {
        let server = LockServer::start(backend, &plan.endpoints).await?;
        eprintln!("{backend}: creating {} routes", plan.routes);
        out.push(one(plan, exe, &cluster, &server).await?);
    }
    Ok(out)
}

fn route_name(i: usize) -> String {
    format!("r-{i}")
}

fn route(ns: &str, name: &str, backend: &str) -> serde_json::Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
           "metadata": {"name": name, "namespace": ns},
           "spec": {"parentRefs": [{"name": "gw"}],
                    "rules": [{"backendRefs": [{"name": backend, "port": 80}]}]}})
}

/// The apiserver's count of requests on the Gateway API resources.
async fn requests(cluster: &Cluster) -> Result<f64> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = cluster.client().request_text(req).await?;
    Ok(RESOURCES
        .iter()
        .map(|r| sum_metric(&text, "apiserver_request_total", Some(r)))
        .sum())
}

/// How long the replicas may log no write before `all_written` asks the server.
const WRITES_IDLE: Duration = Duration::from_secs(10);

/// Where a route's first status can be seen on the server: the routes and our controller.
struct OnServer<'a> {
    api: &'a Api<HttpRoute>,
    controller: &'a str,
}

impl OnServer<'_> {
    /// Which of `names` hold an entry of ours in `status.parents`.
    async fn written(&self, names: &HashSet<String>) -> Result<HashSet<String>> {
        let mut found = HashSet::new();
        let mut params = ListParams::default().limit(500);
        loop {
            let page = self.api.list(&params).await?;
            for r in &page.items {
                let mut entries = r.status.iter().flat_map(|s| &s.parents);
                let ours = entries.any(|p| p.controller_name == self.controller);
                match &r.metadata.name {
                    Some(n) if ours && names.contains(n) => {
                        found.insert(n.clone());
                    }
                    _ => {}
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => params = params.continue_token(&c),
                None => return Ok(found),
            }
        }
    }
}

/// Waits until the leader of `term` has written every route in `names` since `since` (mono
/// ms); the instant of the last of those writes.
///
/// A write whose leadership ended while its response was on the way is not logged as written
/// (the writer cannot know it landed) and the next leadership finds it already shown: with
/// `on_server`, once the replicas have logged no write for a while, the routes whose status
/// the server shows count as written (the instant stays the last logged write's).
async fn all_written(
    lane: &mut Lane,
    names: &HashSet<String>,
    term: Option<u64>,
    since: f64,
    limit: Duration,
    on_server: Option<&OnServer<'_>>,
) -> Result<f64> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut seen = HashSet::new();
    let mut last = f64::NAN;
    let mut quiet_since = tokio::time::Instant::now();
    // The lane's events only grow: each check reads those that came since the last one, so
    // waiting for 100,000 routes does not read every event again every 200 ms.
    let mut read = 0;
    loop {
        let new = lane.events.get(read..).unwrap_or_default();
        read = lane.events.len();
        for e in new {
            if let Event::Written {
                term: t,
                object_kind,
                name,
                ..
            } = &e.what
            {
                let ours = term.is_none_or(|x| x == *t) && e.mono_ms >= since;
                if ours && object_kind == "HTTPRoute" && names.contains(name) {
                    seen.insert(name.clone());
                    quiet_since = tokio::time::Instant::now();
                    last = if last.is_nan() {
                        e.mono_ms
                    } else {
                        last.max(e.mono_ms)
                    };
                }
            }
        }
        if seen.len() == names.len() {
            return Ok(last);
        }
        if let Some(server) = on_server.filter(|_| quiet_since.elapsed() >= WRITES_IDLE) {
            let missing: HashSet<String> = names.difference(&seen).cloned().collect();
            let shown = server.written(&missing).await?;
            if !shown.is_empty() {
                eprintln!(
                    "{} routes not logged as written show our status on the server \
                     (writes cut when a leadership ended)",
                    shown.len()
                );
                seen.extend(shown);
                continue;
            }
            quiet_since = tokio::time::Instant::now();
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(anyhow!(
                "{} of {} routes written within {limit:?}",
                seen.len(),
                names.len()
            ));
        }
        // Any event: the next check sees it.
        lane.wait(Duration::from_millis(200), |_| false).await;
    }
}

async fn one(
    plan: &Plan,
    exe: &Path,
    cluster: &Cluster,
    server: &LockServer,
) -> Result<ScaleResult> {
    let backend = server.backend();
    let label = format!("scale-{backend}");
    let ns = format!("bench-{label}");
    let controller = format!("gateway-leader.dev/bench-{label}");
    let lane_route = cluster.lane(&ns, &controller).await?;
    let api: Api<HttpRoute> = Api::namespaced(cluster.client(), &ns);
    let created = mono_ms();
    futures::stream::iter(1..plan.routes)
        .map(|i| {
            let api = api.clone();
            let obj = route(&ns, &route_name(i), "web");
            async move {
                let r: HttpRoute = serde_json::from_value(obj)?;
                match api.create(&PostParams::default(), &r).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(anyhow::Error::from(e).context(format!("creating route r-{i}"))),
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await?;
    eprintln!(
        "{backend}: {} routes created in {:.1} s; starting two replicas",
        plan.routes,
        (mono_ms() - created) / 1e3
    );
    let mut two = plan.clone();
    two.replicas = 2;
    let common = crate::lane_args(plan, &ns, controller.clone(), "watch");
    let (args, proxies, files) = crate::slot_args(&two, server, cluster, &ns, &common).await?;
    let lock = format!("{ns}-lock");
    let mut lane = Lane::new(
        &label,
        exe.to_path_buf(),
        args,
        plan.out.join("logs").join(&label),
        lane_route,
        (&ns, &lock),
        (proxies, files),
    )?;
    let on_server = OnServer {
        api: &api,
        controller: &controller,
    };
    let result = measure(plan, &mut lane, cluster, &on_server).await;
    lane.stop(plan.timing.renew_deadline + Duration::from_secs(10))
        .await;
    // The next lane's replicas watch every namespace: left here, these routes would be theirs
    // to hold in memory too, and its RSS would count them.
    if let Err(e) = api
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
    {
        eprintln!(
            "{backend}: could not delete the lane's routes ({e}); the next lane's RSS counts them"
        );
    }
    result.with_context(|| format!("{label} (logs in {})", plan.out.join("logs").display()))
}

async fn measure(
    plan: &Plan,
    lane: &mut Lane,
    cluster: &Cluster,
    on_server: &OnServer<'_>,
) -> Result<ScaleResult> {
    let patience = plan.leader_patience();
    // The apiserver writes a few hundred statuses a second: give the first pass room.
    let writes_limit = Duration::from_secs(60) + Duration::from_millis(plan.routes as u64 * 20);
    let leader = lane.settle(patience).await?;
    let led_at = lane
        .events
        .iter()
        .find(|e| matches!(e.what, Event::Leading { term, .. } if term == leader.term))
        .map(|e| e.mono_ms)
        .unwrap_or(f64::NAN);
    let mut names: HashSet<String> = (1..plan.routes).map(route_name).collect();
    names.insert(crate::cluster::ROUTE.to_string());
    let last = all_written(lane, &names, None, 0.0, writes_limit, Some(on_server)).await?;
    let term = leader.term;
    lane.wait(
        writes_limit,
        |e| matches!(e.what, Event::SweepDone { term: t, .. } if t == term),
    )
    .await
    .ok_or_else(|| anyhow!("the first leader never finished checking its statuses"))?;
    // Let the allocator settle after the initial lists and writes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pids: Vec<(usize, u32)> = lane
        .slots
        .iter()
        .enumerate()
        .filter_map(|(s, r)| r.as_ref().map(|r| (s, r.pid())))
        .collect();
    // The leader's first, then the follower's.
    let mut by_role = pids.clone();
    by_role.sort_by_key(|(s, _)| *s != leader.slot);
    let (rss, peak_rss): (Vec<f64>, Vec<f64>) = by_role
        .iter()
        .map(|(_, pid)| {
            let mib = |read: fn(u32) -> Option<f64>| read(*pid).unwrap_or(f64::NAN);
            (mib(rss_mib), mib(peak_rss_mib))
        })
        .unzip();
    // The takeover: SIGTERM, then one route changed at once.
    let before = requests(cluster).await?;
    let signalled = lane.signal(leader.slot, Signal::SIGTERM)?;
    lane.route.flip().await?;
    let new = lane
        .wait(
            patience,
            |e| matches!(e.what, Event::Leading { term: t, .. } if t > term),
        )
        .await
        .ok_or_else(|| anyhow!("no new leader within {patience:?}"))?;
    let Event::Leading { term: new_term, .. } = new.what else {
        return Err(anyhow!("not a leading line"));
    };
    let change = lane
        .wait(patience, |e| {
            matches!(&e.what, Event::Written { term: t, name, .. }
                if *t == new_term && name == crate::cluster::ROUTE)
        })
        .await
        .ok_or_else(|| anyhow!("the changed route was not written within {patience:?}"))?;
    let checked = lane
        .wait(
            writes_limit,
            |e| matches!(e.what, Event::SweepDone { term: t, .. } if t == new_term),
        )
        .await
        .ok_or_else(|| anyhow!("the new leader never finished checking its statuses"))?;
    let after = requests(cluster).await?;
    let new_pid = pids
        .iter()
        .find(|(s, _)| *s != leader.slot)
        .map(|p| p.1)
        .ok_or_else(|| anyhow!("no follower"))?;
    let new_leader_rss_mib = rss_mib(new_pid).unwrap_or(f64::NAN);
    // The burst: up to 1,000 routes moved to a missing backend, as fast as the apiserver takes.
    let burst: Vec<String> = (1..plan.routes).take(BURST).map(route_name).collect();
    let api: Api<HttpRoute> = Api::namespaced(cluster.client(), &lane.ns);
    let started = mono_ms();
    futures::stream::iter(burst.iter().cloned())
        .map(|name| {
            let api = api.clone();
            let ns = lane.ns.clone();
            async move {
                let patch = json!({"spec": route(&ns, &name, "missing")["spec"]});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .with_context(|| format!("changing route {name}"))
                    .map(|_| ())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await?;
    let patched = mono_ms();
    let burst_names: HashSet<String> = burst.into_iter().collect();
    let converged = all_written(
        lane,
        &burst_names,
        Some(new_term),
        started,
        writes_limit,
        None,
    )
    .await?;
    let n = burst_names.len() as f64;
    Ok(ScaleResult {
        backend: lane.label.trim_start_matches("scale-").to_string(),
        routes: plan.routes,
        initial_ms: last - led_at,
        rss_mib: rss,
        peak_rss_mib: peak_rss,
        takeover_ms: new.mono_ms - signalled,
        check_ms: checked.mono_ms - new.mono_ms,
        change_write_ms: change.mono_ms - new.mono_ms,
        // The bench's own change of the route is not the takeover's.
        takeover_requests: after - before - 1.0,
        new_leader_rss_mib,
        burst: burst_names.len(),
        apiserver_writes_per_s: n / ((patched - started) / 1e3),
        status_writes_per_s: n / ((converged - started) / 1e3),
    })
}
