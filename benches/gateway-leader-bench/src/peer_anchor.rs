//! The client-go and controller-runtime anchors: the same rounds as Kubernetes × graceful and
//! × crash, on the same apiserver with the same Lease timing, run by the Go peers of
//! `testkit/peers/` instead of our replicas, so that our figures stand beside what those
//! libraries do themselves.
//!
//! Each peer gets a lane of its own (its namespace, its Lease, as many processes as our lanes
//! have replicas), and [`round::run`] plays it exactly as it plays ours: the leader is signalled
//! (SIGTERM: client-go's `ReleaseOnCancel`, controller-runtime's `LeaderElectionReleaseOnCancel`;
//! SIGKILL), and the round times signal → release, → the next `started leading`, → that
//! leadership's first write (the peer's ConfigMap write, the first thing its callback does, where
//! ours write the route's status). Its steady state is measured as a lane's is, with the
//! requests on leases per renewal. The anchors run after our Kubernetes lanes, one after the
//! other, with nothing else on the apiserver.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::anchor::{Anchor, Start};
use crate::args::Plan;
use crate::checker::{check_mixed, Mixed};
use crate::cluster::Cluster;
use crate::cost::{self, Cost};
use crate::lane::Lane;
use crate::lockserver::LockServer;
use crate::report::LaneVerdict;
use crate::round::{self, Sample};
use crate::scenario::Scenario;
use testkit::replica::peer::{Peer, PeerArgs};

/// The scenarios the anchors stand beside.
pub const SCENARIOS: [Scenario; 2] = [Scenario::Graceful, Scenario::Crash];

/// How often a leading peer writes its ConfigMap: once at the start of its leadership (the
/// first write the rounds time), then about as often as it renews.
const WRITE_EVERY: Duration = Duration::from_secs(1);

/// What the anchor is called in the tables and the JSON.
pub fn tool(p: Peer) -> String {
    match p {
        Peer::ClientGo => "client-go leaderelection".to_string(),
        Peer::ControllerRuntime => "controller-runtime manager".to_string(),
        Peer::ClientGoGated => "client-go leaderelection with recovery and write gate".to_string(),
    }
}

/// What the anchors measured.
#[derive(Debug, Default)]
pub struct Measured {
    /// One per peer and scenario.
    pub anchors: Vec<Anchor>,
    /// One steady state per peer (when the plan measures it).
    pub costs: Vec<Cost>,
    /// The checker's verdict on each peer's lane (what a peer breaks is a finding).
    pub verdicts: Vec<LaneVerdict>,
}

/// Whether the plan runs the anchors: Kubernetes with graceful or crash.
pub fn wanted(plan: &Plan) -> bool {
    plan.backends
        .contains(&crate::topology::Topology::Kubernetes)
        && SCENARIOS.iter().any(|s| plan.scenarios.contains(s))
}

/// Runs both peers' anchors on `cluster` (the Lease is the Kubernetes lock's, so `server` is
/// [`LockServer::Kubernetes`]); `dir` holds the peers, `exe` is ours (unused by a peer lane).
/// A round that cannot run is reported in its sample; three in a row end that peer's anchor.
///
/// # Errors
/// A peer's lane cannot start.
pub async fn run(
    plan: &Plan,
    (dir, exe): (&Path, &Path),
    server: &mut LockServer,
    cluster: &mut Cluster,
    say: &dyn Fn(String),
) -> Result<Measured> {
    let mut out = Measured::default();
    for p in Peer::ALL {
        let label = format!("kubernetes-{p}");
        let ns = format!("bench-anchor-{p}");
        let lock = format!("{ns}-lock");
        let route = cluster
            .lane(&ns, &format!("gateway-leader.dev/{ns}"))
            .await?;
        let mut lane = Lane::new(
            &label,
            exe.to_path_buf(),
            Vec::new(),
            plan.out.join("logs").join(&label),
            route,
            (&ns, &lock),
            (Vec::new(), None),
        )?;
        let args = PeerArgs {
            dir: dir.to_path_buf(),
            kubeconfig: cluster.kubeconfig().to_path_buf(),
            namespace: ns.clone(),
            lease: lock.clone(),
            configmap: format!("{p}-writes"),
            timing: plan.timing,
            write_every: WRITE_EVERY,
            lock_kubeconfig: None,
        };
        for _ in 0..plan.replicas {
            lane.add_peer(p, args.clone())?;
        }
        if !plan.steady.is_zero() {
            say(format!(
                "{} anchor: steady state for {:?}",
                tool(p),
                plan.steady
            ));
            let c = cost::of_lane(
                &mut lane,
                (server, cluster),
                plan.steady,
                plan.leader_patience(),
            )
            .await;
            match c {
                Ok(Some(mut c)) => {
                    c.wakeup = format!("{p} anchor");
                    out.costs.push(c);
                }
                Ok(None) => {}
                Err(e) => say(format!("{} anchor, steady state: {e:#}", tool(p))),
            }
        }
        for scenario in SCENARIOS.into_iter().filter(|s| plan.scenarios.contains(s)) {
            say(format!("{} anchor: {scenario}", tool(p)));
            let mut samples = Vec::new();
            let mut failed_in_a_row = 0;
            for r in 0..plan.rounds {
                let s = round::run(&mut lane, plan, scenario, r, (server, cluster))
                    .await
                    .unwrap_or_else(|e| Sample::failed(r, scenario, format!("{e:#}")));
                if let Some(e) = &s.error {
                    say(format!(
                        "{} anchor {scenario} round {}: {e}",
                        tool(p),
                        r + 1
                    ));
                    failed_in_a_row += 1;
                } else {
                    failed_in_a_row = 0;
                }
                samples.push(s);
                if failed_in_a_row == 3 {
                    break;
                }
            }
            out.anchors.push(Anchor {
                backend: server.backend().to_string(),
                scenario: scenario.to_string(),
                tool: tool(p),
                from: Start::Signal,
                samples,
            });
        }
        lane.stop(plan.timing.renew_deadline + Duration::from_secs(10))
            .await;
        let mixed = Mixed {
            peers: lane.peers().clone(),
            deletions: Vec::new(),
        };
        out.verdicts.push(LaneVerdict {
            backend: server.backend().to_string(),
            wakeup: format!("{p} anchor"),
            verdict: check_mixed(&lane.events, &lane.killed, &mixed),
        });
    }
    Ok(out)
}
