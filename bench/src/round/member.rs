//! One etcd member fault under a leading replica that keeps running (`etcd-cluster` lanes): a
//! member killed, frozen, cut off or restarted, or all restarted in turn. The replicas hold all
//! three members, so the leader should ride it out: the round records whether it stepped down,
//! and times, from the fault, the status write of a route change made right after the fault.
//! The split-brain checker reads the same logs as for every other scenario.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::args::Plan;
use crate::cluster::ROUTE;
use crate::events::What;
use crate::lane::Lane;
use crate::lockserver::LockServer;
use crate::round::{Sample, WRITE_PATIENCE};
use crate::scenario::Scenario;
use leader_lock::clock;

/// How long the cluster may take to be whole again after a fault, on a busy machine.
const HEAL_PATIENCE: Duration = Duration::from_secs(90);

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
    // Freezes, cuts and single restarts go round the members, so that over three rounds each
    // one (the one the leader talks to among them) takes its turn.
    let member = round % cluster.members().len();
    let at = clock::mono_ms();
    match scenario {
        Scenario::MemberKill => {
            let raft = cluster
                .leader()
                .await
                .ok_or_else(|| anyhow!("no etcd member leads"))?;
            cluster.member(raft).kill();
            lane.route.flip().await?;
            cluster.wait_new_leader(raft, HEAL_PATIENCE).await?;
            cluster.member(raft).restart().await?;
        }
        Scenario::MemberFreeze => {
            cluster.member(member).pause()?;
            lane.route.flip().await?;
            tokio::time::sleep(plan.timing.lease_duration / 2).await;
            cluster.member(member).resume()?;
        }
        Scenario::MemberCut => {
            cluster.member(member).proxy().cut();
            lane.route.flip().await?;
            tokio::time::sleep(plan.timing.lease_duration * 3 / 2).await;
            cluster.member(member).proxy().heal();
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
    let mut sample = Sample::begun(round, scenario, (old.term, old.term));
    // The route's change written by whoever leads (the leader, unless it stepped down).
    let wrote = lane
        .wait(WRITE_PATIENCE + plan.leader_patience(), |e| {
            e.mono_ms >= at
                && matches!(&e.what, What::Written { name, term, .. } if name == ROUTE && *term >= old.term)
        })
        .await;
    match wrote {
        Some(e) => {
            sample.to_write_ms = Some(e.mono_ms - at);
            if let What::Written { term, .. } = e.what {
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
            e.mono_ms >= at && matches!(e.what, What::Leading { term, .. } if term > old.term)
        });
        sample.to_leader_ms = next.map(|e| e.mono_ms - at);
    }
    Ok(sample)
}

/// Whether, since `at`, replica `index` leading under `term` stepped down (`following`,
/// `stopped`) or another leadership began under a newer term: the events seen so far.
pub(crate) fn stepped_down(lane: &Lane, index: usize, term: u64, at: f64) -> bool {
    lane.events.iter().any(|e| {
        e.mono_ms >= at
            && match e.what {
                What::Following { .. } | What::Stopped => e.replica == index,
                What::Leading { term: t, .. } => t > term,
                _ => false,
            }
    })
}
