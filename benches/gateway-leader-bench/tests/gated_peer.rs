//! client-go 0.38's leader election recovery and write gate (KEP-6361) beside ours on one
//! Lease: `client-go-gated-elector` (`testkit/peers/next/`, built by `scripts/build-peers.sh`)
//! runs client-go's `LeaderElector` with `LeaderElectionConfig.Recovery` and writes a ConfigMap
//! every 200 ms through a client wrapped with the elector's `WriteGate`. Its Lease client goes
//! through a black-hole proxy (`testkit::proxy`), so the test cuts its Lease traffic alone while
//! its writes still reach the apiserver: exactly what the gate is for.
//!
//! 1. **Recovery without a new term.** The peer leads alone. Its Lease traffic is cut for longer
//!    than the retry period plus the renew deadline: its gate closes ("stopped leading"), and
//!    every write it starts from then on is refused unsent. Healed, it renews the Lease it
//!    still holds, leads again under the same `leaseTransitions`, and its writes go through
//!    again, from the same callback (client-go does not call `OnStartedLeading` again).
//! 2. **Handover.** One of ours joins and follows. The peer's Lease traffic is cut again; ours
//!    take the Lease once it has not changed for a lease duration; the peer, healed, sees it
//!    taken and ends its run without leading again.
//!
//! Checked from what the processes logged (`checker::check_mixed`): never two valid leaders,
//! the peer's validity counted as it counts it. From what the apiserver held (watches on the
//! Lease and the ConfigMap): no write of the peer landed while the Lease named ours, and none
//! of the writes the peer logged as refused by its closed gate is among the ConfigMap's
//! versions. The timing is 6 s / 3 s / 1 s for both: client-go's gate closes when its renew
//! loop gives up, up to retry period + renew deadline after its last renewal (4 s), so the
//! lease must be longer than that for a follower's takeover to come after it (client-go's
//! defaults, 15 s / 10 s / 2 s, leave 3 s; docs/leader-election.md compares the two gates).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::Value;

use gateway_leader_bench::checker::{self, Mixed};
use gateway_leader_bench::cluster::Cluster;
use gateway_leader_bench::held::{self, Recorder, Version};
use gateway_leader_bench::lane::Lane;
use gateway_leader_bench::lockserver::LockServer;
use gateway_leader_log::Event;
use leader_lock::Timing;
use testkit::proxy::BlackholeProxy;
use testkit::replica::peer::{Peer, PeerArgs};

const NS: &str = "gated";
const LOCK: &str = "gated-lock";
const CONTROLLER: &str = "gateway-leader.dev/gated";
const CONFIGMAP: &str = "gated-writes";
/// What client-go's `ErrWriteGateClosed` says (`tools/leaderelection/writegate.go`).
const GATE_CLOSED: &str = "write gate is closed";

fn timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_secs(1),
    }
}

/// How long a takeover or a recovery may take on a busy machine.
fn patience() -> Duration {
    let t = timing();
    t.lease_duration * 3 + t.retry_period * 2 + Duration::from_secs(10)
}

/// How long a process may take to stop.
const EXIT_PATIENCE: Duration = Duration::from_secs(15);

/// The peer's JSON lines (its log also holds klog's text lines, skipped).
fn lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"].is_string())
        .collect()
}

/// The writes the peer logged as refused by its gate that it *started* while the gate was
/// closed (after a "stopped leading" line and before the next "started leading"): refused
/// unsent. A write already in flight when the gate closed is cancelled with the same error but
/// may have reached the server; it is not counted.
fn refused_unsent(lines: &[Value]) -> BTreeSet<u64> {
    let mut closed_since: Option<f64> = None;
    let mut out = BTreeSet::new();
    for v in lines {
        match v["event"].as_str() {
            Some("stopped leading") => closed_since = v["mono_ms"].as_f64(),
            Some("started leading") => closed_since = None,
            Some("write failed") => {
                let refused = v["error"].as_str().is_some_and(|e| e.contains(GATE_CLOSED));
                let sent = v["sent_mono_ms"].as_f64().unwrap_or(f64::MIN);
                if let (true, Some(since), Some(seq)) = (refused, closed_since, v["seq"].as_u64()) {
                    if sent > since {
                        out.insert(seq);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The sequence numbers of the ConfigMap versions that `holder` wrote.
fn landed(versions: &[Version], holder: &str) -> BTreeSet<u64> {
    versions
        .iter()
        .filter(|v| !v.deleted && v.object["data"]["holder"] == holder)
        .filter_map(|v| v.object["data"]["seq"].as_str()?.parse().ok())
        .collect()
}

fn term(e: &Event) -> Option<u64> {
    match e {
        Event::Leading { term, .. } => Some(*term),
        _ => None,
    }
}

/// Polls `f` every 100 ms until it holds, for up to `limit`.
async fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    while !f() {
        if tokio::time::Instant::now() >= deadline {
            bail!("{what}: not within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The Lease's holder and leaseTransitions as the apiserver holds them now.
async fn lease_now(cluster: &Cluster) -> Result<(String, i32)> {
    let lease = Api::<Lease>::namespaced(cluster.client(), NS)
        .get(LOCK)
        .await
        .context("reading the Lease")?;
    let spec = lease.spec.unwrap_or_default();
    Ok((
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or_default(),
    ))
}

/// Both phases (see the module docs); returns the refused writes and the figures to print.
async fn run(
    lane: &mut Lane,
    cluster: &Cluster,
    configmap: &Recorder,
    (peer_slot, ours_args): (usize, Vec<String>),
) -> Result<(BTreeSet<u64>, String, String)> {
    let peer = lane.slots[peer_slot]
        .as_ref()
        .map(|r| r.index)
        .ok_or_else(|| anyhow!("the peer's slot is empty"))?;
    let log = lane.slots[peer_slot]
        .as_ref()
        .and_then(|r| r.log.clone())
        .ok_or_else(|| anyhow!("the peer has no log file"))?;
    let is = |index: usize, want: fn(&Event) -> bool, after: f64| {
        move |r: &testkit::replica::Record| r.replica == index && r.mono_ms > after && want(&r.what)
    };
    let leading: fn(&Event) -> bool = |w| matches!(w, Event::Leading { .. });
    let stopped: fn(&Event) -> bool = |w| matches!(w, Event::Stopped);

    // 1. Recovery without a new term.
    let first = lane
        .wait(patience(), is(peer, leading, f64::MIN))
        .await
        .ok_or_else(|| anyhow!("the gated peer did not lead"))?;
    let first_term = term(&first.what).unwrap_or_default();
    let identity = lines(&log)
        .iter()
        .find(|v| v["event"] == "started")
        .and_then(|v| v["identity"].as_str().map(str::to_string))
        .ok_or_else(|| anyhow!("the peer's started line names no identity"))?;
    until(patience(), "the peer's first writes land", || {
        !landed(&configmap.versions(), &identity).is_empty()
    })
    .await?;
    let cut = lane.partition(peer_slot, true)?;
    let closed = lane
        .wait(patience(), is(peer, stopped, cut))
        .await
        .ok_or_else(|| anyhow!("the peer's gate did not close with its Lease traffic cut"))?;
    until(
        patience(),
        "three writes refused by the closed gate",
        || refused_unsent(&lines(&log)).len() >= 3,
    )
    .await?;
    let healed = lane.partition(peer_slot, false)?;
    let resumed = lane
        .wait(patience(), is(peer, leading, healed))
        .await
        .ok_or_else(|| anyhow!("the peer did not recover its Lease once healed"))?;
    ensure!(
        term(&resumed.what) == Some(first_term),
        "the peer recovered under term {:?}, not its term {first_term}",
        term(&resumed.what)
    );
    let (holder, transitions) = lease_now(cluster).await?;
    ensure!(
        holder == identity && u64::try_from(transitions).ok() == Some(first_term),
        "after the recovery the Lease names {holder:?} under {transitions} transitions, not \
         {identity:?} under {first_term}"
    );
    let refused_first = refused_unsent(&lines(&log));
    let last_refused = refused_first.last().copied().unwrap_or_default();
    until(patience(), "the recovered peer's writes land again", || {
        landed(&configmap.versions(), &identity)
            .last()
            .is_some_and(|seq| *seq > last_refused)
    })
    .await?;
    let refusal = lines(&log)
        .iter()
        .find_map(|v| {
            v["error"]
                .as_str()
                .filter(|e| e.contains(GATE_CLOSED))
                .map(str::to_string)
        })
        .unwrap_or_default();
    let recovery = format!(
        "recovery: gate closed {:.0} ms after the cut, {} writes refused unsent ({refusal:?}), \
         same term {} {:.0} ms after the heal",
        closed.mono_ms - cut,
        refused_first.len(),
        first_term,
        resumed.mono_ms - healed
    );

    // 2. Handover to ours.
    let ours_slot = lane.add_ours(ours_args)?;
    let ours = lane.slots[ours_slot]
        .as_ref()
        .map(|r| r.index)
        .ok_or_else(|| anyhow!("our slot is empty"))?;
    lane.settle(patience()).await?;
    let cut = lane.partition(peer_slot, true)?;
    let closed = lane
        .wait(patience(), is(peer, stopped, cut))
        .await
        .ok_or_else(|| anyhow!("the peer's gate did not close with its Lease traffic cut"))?;
    let took = lane
        .wait(patience(), is(ours, leading, cut))
        .await
        .ok_or_else(|| anyhow!("ours did not take the Lease over"))?;
    let healed = lane.partition(peer_slot, false)?;
    let exited = lane.slots[peer_slot]
        .as_mut()
        .ok_or_else(|| anyhow!("the peer's slot is empty"))?
        .wait_exit(patience())
        .await
        .context("the peer ends once it sees the Lease taken")?;
    ensure!(
        exited.code() == Some(1),
        "the peer ended with {exited}, not 1 (leadership lost)"
    );
    if let Some(again) = lane.wait(Duration::ZERO, is(peer, leading, healed)).await {
        bail!("the peer led again after the handover: {again:?}");
    }
    let handover = format!(
        "handover: the peer's gate closed {:.0} ms after the cut, ours led {:.0} ms after it \
         ({:.0} ms after the gate closed)",
        closed.mono_ms - cut,
        took.mono_ms - cut,
        took.mono_ms - closed.mono_ms
    );
    Ok((refused_unsent(&lines(&log)), recovery, handover))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_client_go_peer_recovers_in_its_term_and_writes_nothing_while_its_gate_is_closed() {
    let peers = testkit::built::peers().expect("the Go peers are built");
    let exe = testkit::workspace_binary("gateway-leader", "gateway-leader")
        .expect("gateway-leader builds");
    // The partition proxy needs an apiserver of the test's own.
    let cluster = Cluster::start(None).await.expect("the apiserver starts");
    let route = cluster
        .lane(NS, CONTROLLER)
        .await
        .expect("the lane's objects");
    let c = cluster.client();
    let lease = Recorder::start(Api::<Lease>::namespaced(c.clone(), NS), LOCK)
        .await
        .expect("the Lease's watch opens");
    let configmap = Recorder::start(Api::<ConfigMap>::namespaced(c, NS), CONFIGMAP)
        .await
        .expect("the ConfigMap's watch opens");
    let dir = tempfile::tempdir().expect("a temp dir");
    let upstream = cluster
        .local()
        .and_then(|s| s.local_addr())
        .expect("a local apiserver");
    let proxy = BlackholeProxy::start(upstream)
        .await
        .expect("the partition proxy starts");
    let lock_kubeconfig = dir.path().join("lock-kubeconfig");
    cluster
        .write_kubeconfig_via(proxy.addr(), &lock_kubeconfig)
        .expect("the peer's Lease kubeconfig");
    let logs = dir.path().join("logs");
    let mut lane = Lane::new(
        "gated",
        exe,
        Vec::new(),
        logs.clone(),
        route,
        (NS, LOCK),
        (Vec::new(), None),
    )
    .expect("the lane");
    let args = PeerArgs {
        dir: peers,
        kubeconfig: cluster.kubeconfig().to_path_buf(),
        namespace: NS.to_string(),
        lease: LOCK.to_string(),
        configmap: CONFIGMAP.to_string(),
        timing: timing(),
        write_every: Duration::from_millis(200),
        lock_kubeconfig: Some(lock_kubeconfig),
    };
    let peer_slot = lane
        .add_peer(Peer::ClientGoGated, args)
        .expect("the gated peer starts");
    lane.proxies[peer_slot] = vec![proxy];
    let mut ours = LockServer::Kubernetes.replica_args(NS, &[]);
    ours.extend(
        [
            "--kubeconfig",
            &cluster.kubeconfig().display().to_string(),
            "--leader-election-lock-name",
            LOCK,
            "--controller-name",
            CONTROLLER,
            "--lease-duration",
            "6s",
            "--renew-deadline",
            "3s",
            "--retry-period",
            "1s",
            "--wakeup",
            "watch",
        ]
        .map(String::from),
    );
    let outcome = run(&mut lane, &cluster, &configmap, (peer_slot, ours)).await;
    lane.stop(timing().renew_deadline + EXIT_PATIENCE).await;
    let keep = |dir: tempfile::TempDir| dir.keep().display().to_string();
    let (refused, recovery, handover) = match outcome {
        Ok(o) => o,
        Err(e) => panic!("{e:#}; logs kept in {}", keep(dir)),
    };
    eprintln!("gated peer: {recovery}\ngated peer: {handover}");

    let verdict = checker::check_mixed(
        &lane.events,
        &lane.killed,
        &Mixed {
            peers: lane.peers().clone(),
            deletions: Vec::new(),
        },
    );
    let overlaps: Vec<&String> = verdict
        .violations
        .iter()
        .chain(&verdict.findings)
        .filter(|l| l.starts_with("two valid leaders"))
        .collect();
    let (lease_versions, cm_versions) = (lease.versions(), configmap.versions());
    let leases = held::lease_states(&lease_versions);
    let writes = held::data_writes(&format!("ConfigMap {CONFIGMAP}"), &cm_versions);
    let stale = held::stale(&leases, &writes);
    let holders: BTreeSet<String> = cm_versions
        .iter()
        .filter_map(|v| v.object["data"]["holder"].as_str().map(str::to_string))
        .collect();
    let landed_refused: Vec<(String, u64)> = holders
        .iter()
        .flat_map(|h| {
            landed(&cm_versions, h)
                .intersection(&refused)
                .map(|seq| (h.clone(), *seq))
                .collect::<Vec<_>>()
        })
        .collect();
    if !verdict.violations.is_empty()
        || !overlaps.is_empty()
        || !stale.is_empty()
        || !landed_refused.is_empty()
    {
        panic!(
            "violations of ours: {:?}\nleaders at once: {overlaps:?}\nwrites landed under \
             another holder: {:?}\nrefused writes the apiserver holds: {landed_refused:?}\nlogs \
             kept in {}",
            verdict.violations,
            stale.iter().map(ToString::to_string).collect::<Vec<_>>(),
            keep(dir)
        );
    }
    assert!(
        refused.len() >= 3 && !writes.is_empty(),
        "the peer wrote ({} versions) and had writes refused ({}); logs in {}",
        writes.len(),
        refused.len(),
        keep(dir)
    );
}
