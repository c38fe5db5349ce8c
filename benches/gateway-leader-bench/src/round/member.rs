//! One etcd member fault under a leading replica that keeps running (`etcd-cluster` lanes): the
//! member that replica talks to killed, frozen or cut off, the Raft leader killed, a member
//! restarted, or all restarted in turn. The replicas hold all three members, so the leader
//! should ride it out: the round records whether it stepped down, and times, from the fault,
//! the status write of a route change made right after the fault. The split-brain checker reads
//! the same logs as for every other scenario.
//!
//! Which member a replica talks to is what it logs (`using etcd endpoint`, at connect and after
//! each move), as an operator would read it.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::args::Plan;
use crate::cluster::ROUTE;
use crate::lane::Lane;
use crate::lockserver::LockServer;
use crate::round::{Sample, WRITE_PATIENCE};
use crate::scenario::Scenario;
use gateway_leader_log::Event;
use leader_lock::clock;
use testkit::etcd_cluster::EtcdCluster;

/// How long the cluster may take to be whole again after a fault, on a busy machine.
pub(crate) const HEAL_PATIENCE: Duration = Duration::from_secs(90);

/// Runs one round of the member fault `scenario` on `lane`, whose lock is on `server`'s
/// 3-member cluster.
pub async fn run(
    lane: &mut Lane,
    plan: &Plan,
    scenario: Scenario,
    round: usize,
    server: &mut LockServer,
) -> Result<Sample> {
    let cluster = server
        .members_mut()
        .ok_or_else(|| anyhow!("{scenario} needs --lock-backend etcd-cluster"))?;
    cluster
        .wait_healthy(HEAL_PATIENCE)
        .await
        .context("the etcd cluster before the fault")?;
    let old = lane.settle(plan.leader_patience()).await?;
    // Single restarts go round the members, so that over three rounds each one takes its turn.
    let member = round % cluster.members().len();
    let mut sample = Sample::begun(round, scenario, (old.term, old.term));
    // The kill, freeze and cut hit the member the leading replica talks to.
    let theirs = match scenario {
        Scenario::MemberKill | Scenario::MemberFreeze | Scenario::MemberCut => {
            let m = talks_to(lane, old.index, cluster)?;
            sample.member = Some(describe(cluster, m).await);
            m
        }
        _ => member,
    };
    let at = clock::mono_ms();
    match scenario {
        Scenario::MemberKill => {
            cluster.member(theirs).kill();
            lane.route.flip().await?;
            // Down for longer than the renew deadline: a client that stayed would step down.
            tokio::time::sleep(plan.timing.lease_duration).await;
            cluster.member(theirs).restart().await?;
        }
        Scenario::MemberKillRaftLeader => {
            let raft = cluster
                .leader()
                .await
                .ok_or_else(|| anyhow!("no etcd member leads"))?;
            sample.member = Some(describe(cluster, raft).await);
            cluster.member(raft).kill();
            lane.route.flip().await?;
            cluster.wait_new_leader(raft, HEAL_PATIENCE).await?;
            cluster.member(raft).restart().await?;
        }
        Scenario::MemberFreeze => {
            cluster.member(theirs).pause()?;
            lane.route.flip().await?;
            tokio::time::sleep(plan.timing.lease_duration / 2).await;
            cluster.member(theirs).resume()?;
        }
        Scenario::MemberCut => {
            cluster.member(theirs).proxy().cut();
            lane.route.flip().await?;
            tokio::time::sleep(plan.timing.lease_duration * 3 / 2).await;
            cluster.member(theirs).proxy().heal();
        }
        Scenario::MemberRestart => {
            lane.route.flip().await?;
            cluster.member(member).restart().await?;
        }
        Scenario::RollingRestart => {
            lane.route.flip().await?;
            for i in 0..cluster.members().len() {
                cluster.member(i).restart().await?;
                cluster.wait_healthy(HEAL_PATIENCE).await?;
            }
        }
        s => return Err(anyhow!("{s} is not a member fault")),
    }
    cluster
        .wait_healthy(HEAL_PATIENCE)
        .await
        .context("the etcd cluster after the fault")?;
    // The route's change written by whoever leads (the leader, unless it stepped down).
    let wrote = lane
        .wait(WRITE_PATIENCE + plan.leader_patience(), |e| {
            e.mono_ms >= at
                && matches!(
                    &e.what,
                    Event::Written { name, term, .. } if name == ROUTE && *term >= old.term
                )
        })
        .await;
    match wrote {
        Some(e) => {
            sample.to_write_ms = Some(e.mono_ms - at);
            if let Event::Written { term, .. } = e.what {
                sample.terms.1 = term;
            }
        }
        None => sample.error = Some("no status write after the fault".into()),
    }
    // A retry period's worth more, so that a step-down at the end of the fault is seen.
    tokio::time::sleep(plan.timing.retry_period).await;
    lane.wait(Duration::ZERO, |_| false).await;
    let stepped = stepped_down(lane, old.index, old.term, at);
    sample.stepped_down = Some(stepped);
    if stepped {
        let next = lane.events.iter().find(|e| {
            e.mono_ms >= at && matches!(e.what, Event::Leading { term, .. } if term > old.term)
        });
        sample.to_leader_ms = next.map(|e| e.mono_ms - at);
    }
    Ok(sample)
}

/// Starts the killed member `killed` (if any) of `server`'s cluster again and waits until the
/// cluster is whole, for the next round.
pub(crate) async fn rejoin(server: &mut LockServer, killed: Option<usize>) -> Result<()> {
    let (Some(m), Some(cluster)) = (killed, server.members_mut()) else {
        return Ok(());
    };
    cluster
        .member(m)
        .restart()
        .await
        .context("starting the killed member again")?;
    cluster
        .wait_healthy(HEAL_PATIENCE)
        .await
        .context("the etcd cluster after the crash")?;
    Ok(())
}

/// The index of the member replica `index` talks to, by its last `using etcd endpoint` line.
pub(crate) fn talks_to(lane: &mut Lane, index: usize, cluster: &EtcdCluster) -> Result<usize> {
    let url = lane
        .endpoint(index)
        .ok_or_else(|| anyhow!("replica {index} logged no `using etcd endpoint` line"))?;
    cluster
        .endpoints()
        .iter()
        .position(|e| *e == url)
        .ok_or_else(|| anyhow!("replica {index} uses {url}, not one of the cluster's endpoints"))
}

/// Member `i`'s name, and whether it is the Raft leader, for the samples (`m1 (Raft leader)`).
pub(crate) async fn describe(cluster: &EtcdCluster, i: usize) -> String {
    let m = &cluster.members()[i];
    if m.is_leader().await {
        format!("{} (Raft leader)", m.name())
    } else {
        m.name().to_string()
    }
}

/// Whether, since `at`, replica `index` leading under `term` stepped down (`following`,
/// `stopped`) or another leadership began under a newer term: the events seen so far.
pub(crate) fn stepped_down(lane: &Lane, index: usize, term: u64, at: f64) -> bool {
    lane.events.iter().any(|e| {
        e.mono_ms >= at
            && match e.what {
                Event::Following { .. } | Event::Stopped => e.replica == index,
                Event::Leading { term: t, .. } => t > term,
                _ => false,
            }
    })
}
