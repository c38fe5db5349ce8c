//! One failover: stop the leader the scenario's way, change the route at once, and time the
//! next leadership and its first status write from the signal.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use nix::sys::signal::Signal;
use serde::Serialize;

pub mod member;

use crate::args::Plan;
use crate::cluster::{Cluster, ROUTE};
use crate::lane::Lane;
use crate::lockserver::LockServer;
use crate::scenario::Scenario;
use crate::topology::Topology;
use gateway_leader_log::Event;
use leader_lock::clock;

/// What one round measured.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// The round, from 0.
    pub round: usize,
    /// How the leader was stopped (under `chaos`, the draw of this round).
    pub scenario: Scenario,
    /// Under `graceful`: signal → the stopped leader's release of the lock returned (its
    /// `released leadership` line, ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_released_ms: Option<f64>,
    /// Under `graceful`: signal → the stopped leader sent its release (our own part of
    /// [`to_released_ms`](Self::to_released_ms), before the server's; ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_release_sent_ms: Option<f64>,
    /// Signal → the next replica's `leadership: leading` (ms).
    pub to_leader_ms: Option<f64>,
    /// Signal → the new leader's first status write (ms); `None` when not counted.
    pub to_write_ms: Option<f64>,
    /// The stopping leader wrote the change itself: the write is not counted.
    pub old_leader_wrote: bool,
    /// The term that was stopped, and the new one.
    pub terms: (u64, u64),
    /// What went wrong, if the round did not finish.
    pub error: Option<String>,
    /// Under a member fault or a Sentinel failover (the leading replica kept running): whether
    /// it stepped down, or another replica led under a newer term, between the fault and the
    /// round's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stepped_down: Option<bool>,
    /// Under an etcd member's fault: which member it hit (`m1`, or `m1 (Raft leader)` when it
    /// led the Raft group at the fault).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

impl Sample {
    /// A round that could not run at all.
    pub fn failed(round: usize, scenario: Scenario, error: String) -> Sample {
        Sample {
            error: Some(error),
            ..Sample::begun(round, scenario, (0, 0))
        }
    }

    /// A round under way, nothing measured yet.
    pub fn begun(round: usize, scenario: Scenario, terms: (u64, u64)) -> Sample {
        Sample {
            round,
            scenario,
            to_released_ms: None,
            to_release_sent_ms: None,
            to_leader_ms: None,
            to_write_ms: None,
            old_leader_wrote: false,
            terms,
            error: None,
            stepped_down: None,
            member: None,
        }
    }
}

/// How long a new leader may take for its first write after it leads.
pub(crate) const WRITE_PATIENCE: Duration = Duration::from_secs(30);

/// Runs one round of `scenario` on `lane`.
pub async fn run(
    lane: &mut Lane,
    plan: &Plan,
    scenario: Scenario,
    round: usize,
    (server, cluster): (&mut LockServer, &mut Cluster),
) -> Result<Sample> {
    if scenario.is_member_fault() {
        return member::run(lane, plan, scenario, round, server).await;
    }
    let old = lane.settle(plan.leader_patience()).await?;
    let mut promoted_at = None;
    // The etcd member killed with the leading replica (`crash-with-member`), and its name.
    let mut killed_member = None;
    let at = match scenario {
        Scenario::Graceful => lane.signal(old.slot, Signal::SIGTERM)?,
        Scenario::Crash => lane.signal(old.slot, Signal::SIGKILL)?,
        Scenario::CrashWithMember => {
            let members = server
                .members_mut()
                .ok_or_else(|| anyhow!("{scenario} needs --lock-backend etcd-cluster"))?;
            members
                .wait_healthy(member::HEAL_PATIENCE)
                .await
                .context("the etcd cluster before the crash")?;
            let m = member::talks_to(lane, old.index, members)?;
            let name = member::describe(members, m).await;
            // The same moment: the signal, then the member's SIGKILL right after it.
            let at = lane.signal(old.slot, Signal::SIGKILL)?;
            members.member(m).kill();
            killed_member = Some((m, name));
            at
        }
        Scenario::Pause => lane.signal(old.slot, Signal::SIGSTOP)?,
        Scenario::Vanish => {
            let at = clock::mono_ms();
            server.delete_record(cluster, &lane.ns, &lane.lock).await?;
            at
        }
        Scenario::BackendRestart => server.restart(cluster).await?,
        Scenario::SentinelFailover => {
            let (at, promoted) = server.fail_over().await?;
            promoted_at = Some(promoted);
            at
        }
        Scenario::Partition => lane.partition(old.slot, true)?,
        Scenario::Chaos => return Err(anyhow!("chaos is drawn per round, not run as such")),
        Scenario::Scale => {
            return Err(anyhow!(
                "scale runs on its own (benches/gateway-leader-bench/src/scale.rs)"
            ))
        }
        s => return Err(anyhow!("{s} is run by the member rounds")),
    };
    // The lock's server is back (or, after a Sentinel failover, the replica was promoted): a
    // renewal of the old leadership from here on means it lived through it.
    let back = promoted_at.unwrap_or_else(clock::mono_ms);
    let survivable = matches!(
        scenario,
        Scenario::BackendRestart | Scenario::SentinelFailover
    );
    // A change that only the next leadership should write. A stopped, killed or frozen leader
    // cannot write it, so it comes right after the signal. A leader that lost its lock but
    // still reaches the apiserver (a vanished record, a restarted or unreachable lock server)
    // may rightly write until its leadership ends, so the change waits for that end, or for a
    // new leadership if the end's line is not seen first.
    let old_can_write = match scenario {
        Scenario::Graceful | Scenario::Crash | Scenario::CrashWithMember | Scenario::Pause => false,
        Scenario::Partition => server.backend() != Topology::Kubernetes,
        _ => true,
    };
    let end_patience = plan.timing.lease_duration + Duration::from_secs(10);
    if old_can_write {
        lane.wait(end_patience, |e| {
            e.mono_ms >= at
                && match e.what {
                    Event::Following { .. } | Event::Stopped => e.replica == old.index,
                    Event::Leading { term, .. } => term > old.term,
                    // The old leadership renewed after the restart: it lives on.
                    Event::Renewed { term, .. } => {
                        survivable && term == old.term && e.mono_ms >= back
                    }
                    _ => false,
                }
        })
        .await;
    }
    lane.route.flip().await?;
    let mut sample = Sample::begun(round, scenario, (old.term, 0));
    sample.member = killed_member.as_ref().map(|(_, name)| name.clone());
    // After a vanish or a restart of the server the old leader may well lead again, under a
    // new term; after a restart with the data kept (etcd, the apiserver's etcd) its leadership
    // may even live on, renewed once the server is back.
    let anyone = matches!(
        scenario,
        Scenario::Vanish | Scenario::BackendRestart | Scenario::SentinelFailover
    );
    let led = lane
        .wait(plan.leader_patience(), |e| {
            e.mono_ms >= at
                && match e.what {
                    Event::Leading { term, .. } => {
                        (anyone || e.replica != old.index) && term > old.term
                    }
                    Event::Renewed { term, .. } => {
                        survivable
                            && e.replica == old.index
                            && term == old.term
                            && e.mono_ms >= back
                    }
                    _ => false,
                }
        })
        .await;
    let Some(led) = led else {
        sample.error = Some(format!(
            "no new leader within {:?} of the signal",
            plan.leader_patience()
        ));
        finish(lane, plan, scenario, old.slot, at).await?;
        member::rejoin(server, killed_member.map(|(m, _)| m)).await?;
        return Ok(sample);
    };
    let new_term = match led.what {
        Event::Leading { term, .. } | Event::Renewed { term, .. } => term,
        _ => 0,
    };
    sample.terms.1 = new_term;
    sample.to_leader_ms = Some(led.mono_ms - at);
    // The old leadership's own write of the change, when another one took over (by term:
    // after a vanish the same replica may lead again).
    let old_wrote = |lane: &Lane| {
        new_term != old.term
            && lane.events.iter().any(|e| {
                e.replica == old.index
                    && e.mono_ms >= at
                    && matches!(
                        &e.what,
                        Event::Written { name, term, .. } if name == ROUTE && *term == old.term
                    )
            })
    };
    // The new leader's first write of its term; or, when the old leader wrote the change
    // itself, the end of the new leader's first pass (it then finds nothing to write).
    let done = lane
        .wait(WRITE_PATIENCE, |e| {
            e.replica == led.replica
                && match &e.what {
                    Event::Written { term, .. } => *term == new_term && e.mono_ms >= at,
                    // Not by its instant, which older replicas did not log (NaN): a new
                    // term's sweep is after the signal anyway.
                    Event::SweepDone { term, .. } => *term == new_term && new_term != old.term,
                    _ => false,
                }
        })
        .await;
    let mut done = done;
    // A sweep that ended without a write counts only if the old leader wrote the change;
    // otherwise the change may still be on its way to the new leader: keep waiting.
    if matches!(
        done.as_ref().map(|e| &e.what),
        Some(Event::SweepDone { .. })
    ) && !old_wrote(lane)
    {
        done = lane
            .wait(WRITE_PATIENCE, |e| {
                e.replica == led.replica
                    && e.mono_ms >= at
                    && matches!(e.what, Event::Written { term, .. } if term == new_term)
            })
            .await;
    }
    finish(lane, plan, scenario, old.slot, at).await?;
    member::rejoin(server, killed_member.map(|(m, _)| m)).await?;
    if scenario == Scenario::Graceful {
        if let Some((sent, returned)) = released(lane, old.index, old.term, at).await {
            sample.to_release_sent_ms = sent;
            sample.to_released_ms = Some(returned);
        }
    }
    sample.old_leader_wrote = old_wrote(lane);
    if scenario == Scenario::SentinelFailover {
        sample.stepped_down = Some(member::stepped_down(lane, old.index, old.term, at));
    }
    match done {
        Some(e) if matches!(e.what, Event::Written { .. }) && !sample.old_leader_wrote => {
            sample.to_write_ms = Some(e.mono_ms - at)
        }
        Some(_) if sample.old_leader_wrote => {}
        _ => {
            sample.error = Some(format!(
                "the new leader wrote nothing within {WRITE_PATIENCE:?}"
            ))
        }
    }
    Ok(sample)
}

/// How long the release line of a replica that has exited may take to come through its log
/// reader.
const RELEASE_LINE_PATIENCE: Duration = Duration::from_secs(5);

/// Signal at `at` → the release of term `term` by replica `index` was sent (when the line says)
/// and returned (ms); `None` when it logged none (the release failed or found the lock someone
/// else's). Called once the replica has exited, so its line is written if it ever will be.
async fn released(lane: &mut Lane, index: usize, term: u64, at: f64) -> Option<(Option<f64>, f64)> {
    let e = lane
        .wait(RELEASE_LINE_PATIENCE, |e| {
            e.replica == index
                && e.mono_ms >= at
                && matches!(e.what, Event::Released { term: t, released: true, .. } if t == term)
        })
        .await?;
    let sent = match e.what {
        Event::Released { sent, .. } => sent.map(|s| s - at),
        _ => None,
    };
    Some((sent, e.mono_ms - at))
}

/// Brings the stopped replica back as a follower: a new process after a stop or a crash, the
/// same one thawed after a pause (held frozen longer than the lease first).
async fn finish(
    lane: &mut Lane,
    plan: &Plan,
    scenario: Scenario,
    slot: usize,
    at: f64,
) -> Result<()> {
    let patience = plan.timing.renew_deadline + Duration::from_secs(10);
    match scenario {
        Scenario::Graceful => {
            if let Some(r) = lane.slots[slot].as_mut() {
                r.wait_exit(patience).await?;
            }
            lane.spawn(slot)?;
        }
        Scenario::Crash | Scenario::CrashWithMember => {
            if let Some(r) = lane.slots[slot].as_mut() {
                r.kill();
            }
            lane.spawn(slot)?;
        }
        // Nothing was stopped: the same replicas go on.
        // (A member fault never gets here: its round is `member`'s.)
        Scenario::Vanish
        | Scenario::BackendRestart
        | Scenario::Chaos
        | Scenario::MemberKill
        | Scenario::MemberKillRaftLeader
        | Scenario::MemberFreeze
        | Scenario::MemberCut
        | Scenario::MemberRestart
        | Scenario::RollingRestart
        | Scenario::SentinelFailover
        | Scenario::Scale => {}
        Scenario::Pause | Scenario::Partition => {
            let held_for = plan.timing.lease_duration + Duration::from_millis(500);
            let left = at + held_for.as_secs_f64() * 1e3 - clock::mono_ms();
            if left > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(left / 1e3)).await;
            }
            let back = if scenario == Scenario::Pause {
                lane.signal(slot, Signal::SIGCONT)?
            } else {
                lane.partition(slot, false)?
            };
            let index = lane.slots[slot]
                .as_ref()
                .map(|r| r.index)
                .ok_or_else(|| anyhow!("slot {slot} is empty"))?;
            // A thawed replica finds its deadline passed and steps down; a cut-off one stepped
            // down at its renew deadline, while still cut off.
            let since = if scenario == Scenario::Pause {
                back
            } else {
                at
            };
            let stepped = lane
                .wait(patience, |e| {
                    e.replica == index
                        && e.mono_ms >= since
                        && matches!(e.what, Event::Following { .. })
                })
                .await;
            if stepped.is_none() {
                return Err(anyhow!(
                    "the {} replica did not step down within {patience:?}",
                    if scenario == Scenario::Pause {
                        "thawed"
                    } else {
                        "cut-off"
                    }
                ));
            }
        }
    }
    Ok(())
}
