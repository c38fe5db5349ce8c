//! `gateway-leader-bench etcd-handover`: our etcd lock's graceful handover beside `etcdctl
//! elect`'s, on one throwaway etcd (docs/etcd.md, "Graceful handover beside `etcdctl elect`").
//!
//! - Ours: from `Elector::shutdown()` on the leader to the follower's `check()` passing, both
//!   electors in this process. Each round starts a fresh follower (its own connection), lets it
//!   settle, then stops the leader.
//! - `etcdctl elect`: the [`crate::anchor`] that `run` times beside etcd × graceful, one
//!   handover per round.
//!
//! Rounds alternate between the two on the same server, so that both meet the same moments of
//! the machine; `--load N` adds N tasks that write to another key without pause.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use leader_lock::{Elector, ElectorConfig, Identity, Timing};
use leader_lock_etcd::{EtcdConfig, EtcdLock};
use testkit::etcd::EtcdServer;
use tokio::time::Instant;

use crate::anchor::{self, Election};
use crate::args::MAX_ROUNDS;
use crate::EXIT_USAGE;

/// The most writer tasks `--load` may start: each keeps a connection busy.
pub const MAX_LOAD: usize = 64;

/// Our electors' lock key: apart from the anchor's election and the load's keys.
const LOCK: &str = "bench";

/// How long a new follower of ours is left before the leader stops: it connects, reads, watches
/// and grants its spare lease, so that the round times the release, not the follower's start.
/// The anchor leaves its waiter as long ([`anchor::SETTLE`]).
const SETTLE: Duration = anchor::SETTLE;

/// How long a handover of ours, or the first election, may take on a busy machine.
const LIMIT: Duration = Duration::from_secs(30);

/// Flags of `gateway-leader-bench etcd-handover`.
#[derive(Debug, Args)]
pub struct EtcdHandoverArgs {
    /// Handovers of each: ours and `etcdctl elect`'s, alternating.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub rounds: usize,
    /// Tasks that write to another key without pause during the rounds.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub load: usize,
    /// Where `etcdctl elect`'s output is written (`logs/etcd-handover-anchor/`).
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
}

impl EtcdHandoverArgs {
    /// The flags' check, before anything starts.
    fn check(&self) -> Result<(), String> {
        if !(1..=MAX_ROUNDS).contains(&self.rounds) {
            return Err(format!(
                "--rounds {}: accepted: 1 to {MAX_ROUNDS}",
                self.rounds
            ));
        }
        if self.load > MAX_LOAD {
            return Err(format!("--load {}: accepted: 0 to {MAX_LOAD}", self.load));
        }
        Ok(())
    }
}

/// Runs `gateway-leader-bench etcd-handover`; returns the exit code: 0, 1 (a failure at run
/// time, such as a handover that did not happen in time), 2 (bad input, nothing started).
pub fn main(args: EtcdHandoverArgs) -> ExitCode {
    if let Err(e) = args.check() {
        eprintln!("gateway-leader-bench etcd-handover: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    // Before anything starts, as `run` does: a missing etcdctl names how to build it.
    let etcdctl = match anchor::etcdctl() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gateway-leader-bench etcd-handover: {e:#}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Two workers: the electors, the anchor's bookkeeping and the load share them.
    let logs = args.out.join("logs").join("etcd-handover-anchor");
    crate::on_two_workers(
        "etcd-handover",
        run(&etcdctl, args.rounds, args.load, &logs),
    )
}

async fn run(etcdctl: &Path, rounds: usize, load: usize, logs: &Path) -> Result<()> {
    let server = EtcdServer::start().await.context("starting etcd")?;
    let endpoint = server.endpoint();

    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for i in 0..load {
        let mut c = etcd_client::Client::connect([endpoint.as_str()], None)
            .await
            .context("connecting a load writer")?;
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let key = format!("/load/{i}");
            while !stop.load(Ordering::Relaxed) {
                let _ = c.put(key.as_str(), "x".repeat(64), None).await;
            }
        }));
    }

    let measured = rounds_of_both(etcdctl, &endpoint, rounds, logs).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    let (mut ours, mut theirs) = measured?;

    println!(
        "graceful handover on one etcd ({}), load writers: {load}",
        etcd_version()
    );
    report("gateway-leader (shutdown -> follower check ok)", &mut ours);
    report(
        &format!("{} (SIGTERM -> follower elected)", anchor::TOOL),
        &mut theirs,
    );
    Ok(())
}

/// Every round, ours then the anchor's; their times in ms.
async fn rounds_of_both(
    etcdctl: &Path,
    endpoint: &str,
    rounds: usize,
    logs: &Path,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut ours = Vec::with_capacity(rounds);
    let mut theirs = Vec::with_capacity(rounds);
    let first = contender(endpoint, 0).await?;
    // The permit is dropped at once: a held one would hold up the next shutdown.
    drop(
        tokio::time::timeout(LIMIT, first.leadership().wait_leader())
            .await
            .map_err(|_| anyhow!("no first leader within {LIMIT:?}"))?
            .context("the first leader")?,
    );
    // Empty only while a shutdown has it, or after one failed (it consumed the elector).
    let mut leader = Some(first);
    let mut election = Election::start(etcdctl, endpoint, logs).await?;
    let r = async {
        for round in 1..=rounds {
            let follower = contender(endpoint, round).await?;
            tokio::time::sleep(SETTLE).await;
            let old = leader
                .take()
                .ok_or_else(|| anyhow!("round {round}: no leader to stop"))?;
            let started = Instant::now();
            old.shutdown()
                .await
                .with_context(|| format!("round {round}: the release"))?;
            let permit = tokio::time::timeout(LIMIT, follower.leadership().wait_leader())
                .await
                .map_err(|_| anyhow!("round {round}: no handover within {LIMIT:?}"))?
                .with_context(|| format!("round {round}: the follower's leadership"))?;
            ours.push(started.elapsed().as_secs_f64() * 1000.0);
            drop(permit);
            leader = Some(follower);

            let ms = election
                .handover()
                .await
                .with_context(|| format!("round {round}: {}", anchor::TOOL))?;
            theirs.push(ms);
        }
        Ok::<_, anyhow::Error>(())
    }
    .await;
    if let Some(leader) = leader {
        leader.abort().await;
    }
    election.stop().await;
    r.map(|()| (ours, theirs))
}

async fn contender(endpoint: &str, i: usize) -> Result<Elector> {
    let mut config = EtcdConfig::new(vec![endpoint.to_string()]);
    config.request_timeout = Some(Duration::from_secs(5));
    let lock = EtcdLock::connect(config, LOCK)
        .await
        .with_context(|| format!("contender {i}: connecting to etcd"))?;
    Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity: Identity::new(format!("bench-{i}")),
            timing: Timing::default(),
            release_on_shutdown: true,
        },
    )
    .map_err(|e| anyhow!("contender {i}: {e}"))
}

/// The first line of the measured etcd's `--version`.
fn etcd_version() -> String {
    testkit::built::etcd()
        .ok()
        .and_then(|etcd| {
            std::process::Command::new(etcd)
                .arg("--version")
                .output()
                .ok()
        })
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "etcd".into())
}

/// One line: the count, p50, p90, p99 and max of `samples` (ms).
fn report(what: &str, samples: &mut [f64]) {
    samples.sort_by(f64::total_cmp);
    let pick = |q: f64| nearest_rank(samples, q).unwrap_or(f64::NAN);
    println!(
        "{what}: n={} p50={:.2}ms p90={:.2}ms p99={:.2}ms max={:.2}ms",
        samples.len(),
        pick(0.50),
        pick(0.90),
        pick(0.99),
        pick(1.0)
    );
}

/// The `q` quantile of `sorted` by nearest rank: the smallest sample with at least `q` of them
/// at or below it.
fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let rank = (sorted.len() as f64 * q).ceil() as usize;
    sorted.get(rank.max(1) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_ranks() {
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(nearest_rank(&ten, 0.5), Some(5.0));
        assert_eq!(nearest_rank(&ten, 0.9), Some(9.0));
        assert_eq!(nearest_rank(&ten, 0.99), Some(10.0));
        assert_eq!(nearest_rank(&ten, 1.0), Some(10.0));
        assert_eq!(nearest_rank(&[], 0.5), None);
    }

    #[test]
    fn bad_counts_are_refused() {
        let args = |rounds, load| EtcdHandoverArgs {
            rounds,
            load,
            out: PathBuf::from("out"),
        };
        assert!(args(200, 0).check().is_ok());
        assert!(args(0, 0)
            .check()
            .is_err_and(|e| e.starts_with("--rounds 0")));
        assert!(args(1, MAX_LOAD + 1)
            .check()
            .is_err_and(|e| e.starts_with("--load")));
    }
}
