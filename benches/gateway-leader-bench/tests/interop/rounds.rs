//! The rounds: how a card stops the leader, and the waits on the replicas' lines around it.

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DeleteParams;
use kube::Api;
use nix::sys::signal::Signal;
use rand::seq::SliceRandom;
use std::time::Duration;

use gateway_leader_bench::lane::{Lane, Leader};
use gateway_leader_log::Event;
use leader_lock::clock;
use testkit::replica::Record;

use crate::{patience, timing, EXIT_PATIENCE, LOCK, WRITE_PATIENCE};

/// Which programs a replica index belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Side {
    Ours,
    Peers,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Ours => "ours",
            Side::Peers => "peer",
        })
    }
}

/// How a round stops the leader; the sides are where the Lease is and where it must go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Card {
    Graceful(Side, Side),
    Crash(Side, Side),
    Pause(Side),
    Delete(Side),
}

impl Card {
    /// One deck: each way, from each side.
    pub(crate) const DECK: [Card; 10] = [
        Card::Graceful(Side::Ours, Side::Peers),
        Card::Graceful(Side::Peers, Side::Ours),
        Card::Graceful(Side::Ours, Side::Ours),
        Card::Graceful(Side::Peers, Side::Peers),
        Card::Crash(Side::Ours, Side::Peers),
        Card::Crash(Side::Peers, Side::Ours),
        Card::Pause(Side::Ours),
        Card::Pause(Side::Peers),
        Card::Delete(Side::Ours),
        Card::Delete(Side::Peers),
    ];

    fn from(self) -> Side {
        match self {
            Card::Graceful(s, _) | Card::Crash(s, _) | Card::Pause(s) | Card::Delete(s) => s,
        }
    }
}

impl std::fmt::Display for Card {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Card::Graceful(a, b) => write!(f, "graceful {a}→{b}"),
            Card::Crash(a, b) => write!(f, "crash {a}→{b}"),
            Card::Pause(a) => write!(f, "pause {a}"),
            Card::Delete(a) => write!(f, "delete under {a}"),
        }
    }
}

/// What one round did.
pub(crate) struct Played {
    pub(crate) card: Card,
    pub(crate) old: (usize, u64),
    pub(crate) new: (usize, u64),
    pub(crate) to_leader_ms: f64,
    /// The new leader's first status write, when it is ours (ms from the fault); `None` also
    /// when it had nothing to write ([`first_write`]).
    pub(crate) to_write_ms: Option<f64>,
    /// A frozen leader's replica index and the instant it was thawed.
    pub(crate) thawed: Option<(usize, f64)>,
}

pub(crate) fn side(lane: &Lane, index: usize) -> Side {
    if lane.peers().contains(&index) {
        Side::Peers
    } else {
        Side::Ours
    }
}

fn slot_side(lane: &Lane, slot: usize) -> Side {
    if lane.peer(slot).is_some() {
        Side::Peers
    } else {
        Side::Ours
    }
}

fn running(lane: &mut Lane, slot: usize) -> bool {
    lane.slots[slot].as_mut().is_some_and(|r| r.running())
}

/// One leader and every other process following it. A peer that lost its leadership has
/// ended, as client-go's and controller-runtime's do: it is started again. One of ours never
/// ends by itself.
pub(crate) async fn settle(lane: &mut Lane) -> Result<Leader> {
    let deadline = tokio::time::Instant::now() + patience() * 2;
    loop {
        for slot in 0..lane.slots.len() {
            if running(lane, slot) {
                continue;
            }
            if lane.peer(slot).is_none() {
                let log = lane.slots[slot].as_ref().map(|r| r.log.clone());
                bail!("a replica of ours ended by itself; its log: {log:?}");
            }
            if let Some(r) = lane.slots[slot].as_mut() {
                r.kill();
            }
            lane.spawn(slot)?;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match lane.settle(left).await {
            Ok(l) => return Ok(l),
            Err(e) => {
                let all = (0..lane.slots.len()).all(|s| running(lane, s));
                if all || tokio::time::Instant::now() >= deadline {
                    return Err(e);
                }
            }
        }
    }
}

/// The first `leadership: leading` (or a peer's `started leading`) at or after `at` of a
/// replica that `ok` accepts.
async fn new_leader(lane: &mut Lane, at: f64, ok: impl Fn(usize) -> bool) -> Result<Record> {
    lane.wait(patience(), |e| {
        e.mono_ms >= at && matches!(e.what, Event::Leading { .. }) && ok(e.replica)
    })
    .await
    .ok_or_else(|| anyhow!("no new leader within {:?}", patience()))
}

fn term(e: &Record) -> u64 {
    match e.what {
        Event::Leading { term, .. } => term,
        _ => 0,
    }
}

/// The first status write of leadership `led` (one of ours), or `None` when it had nothing to
/// write: its sweep wrote nothing and the route's status on the server is already right. That
/// happens in a graceful round when the old leader saw the round's change of the route before
/// it handled its SIGTERM: the write it had started is drained before its release (as it must
/// be), and carries the change.
async fn first_write(lane: &mut Lane, led: &Record) -> Result<Option<f64>> {
    let t = term(led);
    let deadline = tokio::time::Instant::now() + WRITE_PATIENCE;
    let mut sweep_checked = false;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let e = lane
            .wait(left, |e| {
                e.replica == led.replica
                    && e.mono_ms >= led.mono_ms
                    && match e.what {
                        Event::Written { term, .. } => term == t,
                        Event::SweepDone { term, written, .. } => {
                            term == t && written == 0 && !sweep_checked
                        }
                        _ => false,
                    }
            })
            .await
            .ok_or_else(|| anyhow!("the new leader wrote nothing within {WRITE_PATIENCE:?}"))?;
        if matches!(e.what, Event::Written { .. }) {
            return Ok(Some(e.mono_ms));
        }
        sweep_checked = true;
        if lane.route.status_problem().await?.is_none() {
            return Ok(None);
        }
    }
}

/// Stops (SIGTERM) every running follower but `leader` that is not of side `keep`, so that
/// the Lease can only go to `keep`; returns their slots.
async fn stop_others(lane: &mut Lane, leader: usize, keep: Side) -> Result<Vec<usize>> {
    let slots: Vec<usize> = (0..lane.slots.len())
        .filter(|s| *s != leader && slot_side(lane, *s) != keep)
        .collect();
    for &s in &slots {
        if running(lane, s) {
            lane.signal(s, Signal::SIGTERM)?;
        }
    }
    for &s in &slots {
        if let Some(r) = lane.slots[s].as_mut() {
            r.wait_exit(EXIT_PATIENCE).await?;
        }
    }
    Ok(slots)
}

/// Deals the next card: the first of the deck's rest that starts from the leader's side;
/// when none does, a graceful handover to the other side (not from the deck).
pub(crate) fn deal(deck: &mut Vec<Card>, rng: &mut rand::rngs::StdRng, from: Side) -> Card {
    if deck.is_empty() {
        *deck = Card::DECK.to_vec();
        deck.shuffle(rng);
    }
    match deck.iter().position(|c| c.from() == from) {
        Some(i) => deck.remove(i),
        None => match from {
            Side::Ours => Card::Graceful(Side::Ours, Side::Peers),
            Side::Peers => Card::Graceful(Side::Peers, Side::Ours),
        },
    }
}

/// Plays one round of `card` from the settled `old` leader; a deletion of the Lease is noted
/// in `deletions`.
pub(crate) async fn play(
    lane: &mut Lane,
    (leases, deletions): (&Api<Lease>, &mut Vec<f64>),
    card: Card,
    old: Leader,
) -> Result<Played> {
    let mut respawn = Vec::new();
    let mut thaw = None;
    let at;
    let led;
    match card {
        Card::Graceful(_, to) | Card::Crash(_, to) => {
            respawn = stop_others(lane, old.slot, to).await?;
            let sig = if matches!(card, Card::Graceful(..)) {
                Signal::SIGTERM
            } else {
                Signal::SIGKILL
            };
            at = lane.signal(old.slot, sig)?;
            lane.route.flip().await?;
            let peers = lane.peers().clone();
            led = new_leader(lane, at, |i| {
                i != old.index && (peers.contains(&i) == (to == Side::Peers))
            })
            .await?;
            match sig {
                Signal::SIGTERM => {
                    if let Some(r) = lane.slots[old.slot].as_mut() {
                        r.wait_exit(EXIT_PATIENCE).await?;
                    }
                }
                _ => {
                    if let Some(r) = lane.slots[old.slot].as_mut() {
                        r.kill();
                    }
                }
            }
            respawn.push(old.slot);
        }
        Card::Pause(_) => {
            at = lane.signal(old.slot, Signal::SIGSTOP)?;
            lane.route.flip().await?;
            led = new_leader(lane, at, |i| i != old.index).await?;
            // Frozen past the lease, as the bench's pause rounds hold it.
            let hold = timing().lease_duration + Duration::from_millis(500);
            let left = at + hold.as_secs_f64() * 1e3 - clock::mono_ms();
            if left > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(left / 1e3)).await;
            }
            let thawed = lane.signal(old.slot, Signal::SIGCONT)?;
            thaw = Some((old.index, thawed));
            if side(lane, old.index) == Side::Ours {
                // The fencing case: it finds its deadline passed and steps down, writing
                // nothing (what the server holds says so at the end).
                lane.wait(EXIT_PATIENCE, |e| {
                    e.replica == old.index
                        && e.mono_ms >= thawed
                        && matches!(e.what, Event::Following { .. })
                })
                .await
                .ok_or_else(|| anyhow!("the thawed replica did not step down"))?;
            } else if let Some(r) = lane.slots[old.slot].as_mut() {
                // A peer finds out when its renew deadline has passed, and ends.
                r.wait_exit(timing().renew_deadline + EXIT_PATIENCE).await?;
                respawn.push(old.slot);
            }
        }
        Card::Delete(_) => {
            at = clock::mono_ms();
            deletions.push(at);
            leases
                .delete(LOCK, &DeleteParams::default())
                .await
                .context("deleting the Lease")?;
            led = new_leader(lane, at, |_| true).await?;
            lane.route.flip().await?;
        }
    }
    let to_write_ms = if side(lane, led.replica) == Side::Ours {
        first_write(lane, &led).await?.map(|w| w - at)
    } else {
        None
    };
    for slot in respawn {
        lane.spawn(slot)?;
    }
    Ok(Played {
        card,
        old: (old.index, old.term),
        new: (led.replica, term(&led)),
        to_leader_ms: led.mono_ms - at,
        to_write_ms,
        thawed: thaw,
    })
}
