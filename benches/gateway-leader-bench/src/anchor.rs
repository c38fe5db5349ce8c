//! The `etcdctl elect` anchor: etcd's own election tool, stopped and timed as our graceful rounds
//! are, against the same etcd, so that the etcd × graceful figures have a reference that is not
//! ours.
//!
//! Two `etcdctl elect <name> <proposal>` campaign; the leader gets SIGTERM (on which etcdctl
//! resigns: it deletes its key), and the round times signal → the other printing its election.
//! Each round a fresh campaigner joins the one that now leads, so every round has one leader and
//! one waiter, as a lane has.
//!
//! The one implementation of these rounds: [`run`] times them beside etcd × graceful, and
//! `etcd-handover` ([`crate::etcd_handover`]) one at a time ([`Election`]) between handovers of
//! our elector.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::round::Sample;
use crate::scenario::Scenario;
use crate::stats::Summary;
use leader_lock::clock;

/// What the anchor is called in the tables and the JSON.
pub const TOOL: &str = "etcdctl elect";

/// The election's name: a prefix of its own, apart from every lane's lock key.
const ELECTION: &str = "gateway-leader-bench/anchor/etcdctl-elect";

/// How long a new waiter is left, once it watches, before the leader is signalled, as
/// `etcd-handover` leaves a follower of ours: a fresh etcdctl signalled as soon as its watch is
/// open is slower to take over for reasons inside that process, not the release
/// (docs/benchmarks.md has the figures). Our own rounds likewise start with every follower
/// following (`Lane::settle`), so both measure a settled waiter.
pub const SETTLE: Duration = Duration::from_millis(150);

/// How long a campaigner may take to be elected, or to start campaigning, on a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// `etcdctl`, from the same build as the bench's etcd itself (`testkit::built::etcdctl`).
///
/// # Errors
/// It is not built: the message says how to build it.
pub fn etcdctl() -> Result<PathBuf> {
    testkit::built::etcdctl()
}

/// A reference's rounds beside one backend × scenario: this module's `etcdctl elect`, or the
/// Kubernetes floor ([`crate::floor`]).
#[derive(Debug, Clone, Serialize)]
pub struct Anchor {
    /// The backend whose server it ran against.
    pub backend: String,
    /// The scenario it stands beside.
    pub scenario: String,
    /// The tool ([`TOOL`], [`crate::floor::TOOL`]).
    pub tool: String,
    /// What its instants count from.
    pub from: Start,
    /// Every round. For `etcdctl elect`, `to_leader_ms` is signal → the waiting campaigner
    /// printed its election; the floor has every instant but `to_release_sent_ms` (its 0).
    pub samples: Vec<Sample>,
}

/// Where an anchor's instants count from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Start {
    /// The leader's signal, as ours do (`etcdctl elect`).
    #[serde(rename = "signal")]
    Signal,
    /// The release's sending (the floor: it has no signal).
    #[serde(rename = "release sent")]
    ReleaseSent,
}

impl std::fmt::Display for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Start::Signal => "signal",
            Start::ReleaseSent => "release sent",
        })
    }
}

impl Anchor {
    /// → the lock released, over the rounds that have it.
    pub fn to_released(&self) -> Option<Summary> {
        Summary::over(self.samples.iter().filter_map(|s| s.to_released_ms))
    }

    /// → new leader, over the rounds that have it.
    pub fn to_leader(&self) -> Option<Summary> {
        Summary::over(self.samples.iter().filter_map(|s| s.to_leader_ms))
    }

    /// → first status write, over the rounds that have it.
    pub fn to_write(&self) -> Option<Summary> {
        Summary::over(self.samples.iter().filter_map(|s| s.to_write_ms))
    }

    /// Rounds that did not finish.
    pub fn errors(&self) -> usize {
        self.samples.iter().filter(|s| s.error.is_some()).count()
    }
}

/// Where in `etcdctl elect`'s stdout lines its election shows: the index of the key line.
///
/// Once elected, etcdctl prints the election key (`<name>/<lease id in hex>`) and then its own
/// proposal (the key's value), one per line; nothing before.
pub fn election(lines: &[&str], name: &str, proposal: &str) -> Option<usize> {
    let prefix = format!("{name}/");
    lines
        .windows(2)
        .position(|w| w[0].starts_with(&prefix) && w[1] == proposal)
}

/// One `etcdctl elect` process; killed on drop.
struct Campaigner {
    proposal: String,
    child: Child,
}

/// A campaigner's election, stamped when the bench read its key line.
struct Elected {
    /// The campaigner's proposal.
    proposal: String,
    /// `CLOCK_MONOTONIC` ms.
    mono_ms: f64,
}

impl Campaigner {
    /// Starts `etcdctl elect` for `proposal`; its output goes to `<logs>/<proposal>.log` and
    /// its election, once printed, to `elected`.
    fn start(
        etcdctl: &Path,
        endpoints: &str,
        proposal: &str,
        logs: &Path,
        elected: UnboundedSender<Elected>,
    ) -> Result<Campaigner> {
        let log = logs.join(format!("{proposal}.log"));
        let mut file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let stderr = file.try_clone().context("the anchor's log")?;
        let mut child = Command::new(etcdctl)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"))
            .args(["elect", ELECTION, proposal])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} elect", etcdctl.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("etcdctl elect {proposal}: no stdout pipe"))?;
        let me = proposal.to_string();
        std::thread::Builder::new()
            .name(format!("anchor-{proposal}"))
            .spawn(move || {
                let mut seen: Vec<(f64, String)> = Vec::new();
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    // Stamped as read: the pipe's delay is in the figure (ours are stamped by
                    // the replica itself).
                    let at = clock::mono_ms();
                    let _ = writeln!(file, "{line}");
                    seen.push((at, line));
                    let lines: Vec<&str> = seen.iter().map(|(_, l)| l.as_str()).collect();
                    if let Some(i) = election(&lines, ELECTION, &me) {
                        let _ = elected.send(Elected {
                            proposal: me.clone(),
                            mono_ms: seen[i].0,
                        });
                        seen.clear();
                    }
                }
            })
            .context("starting the anchor's output reader")?;
        Ok(Campaigner {
            proposal: proposal.to_string(),
            child,
        })
    }

    /// Sends SIGTERM; the `CLOCK_MONOTONIC` instant (ms) just before, as for a replica.
    fn terminate(&mut self) -> Result<f64> {
        let pid = i32::try_from(self.child.id()).context("pid out of range")?;
        let at = clock::mono_ms();
        kill(Pid::from_raw(pid), Signal::SIGTERM)
            .with_context(|| format!("SIGTERM to etcdctl elect {}", self.proposal))?;
        Ok(at)
    }

    /// Waits up to `limit` for the process to exit (it resigns first); kills it otherwise.
    async fn wait_exit(&mut self, limit: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        while matches!(self.child.try_wait(), Ok(None)) {
            if tokio::time::Instant::now() >= deadline {
                return Err(anyhow!(
                    "etcdctl elect {} did not exit within {limit:?}",
                    self.proposal
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

impl Drop for Campaigner {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Waits for `proposal`'s election.
async fn elected(rx: &mut UnboundedReceiver<Elected>, proposal: &str) -> Result<f64> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(e)) if e.proposal == proposal => return Ok(e.mono_ms),
            Ok(Some(_)) => {}
            _ => return Err(anyhow!("{proposal} was not elected within {PATIENCE:?}")),
        }
    }
}

/// Waits until the round is set as our rounds are (a leader, and a follower that follows it):
/// both campaigners' keys are under the election, and the waiter watches for the leader's key
/// to go (etcd's `etcd_debugging_mvcc_watcher_total`: in `run` the anchor is alone on the
/// server, and the leader has no watch left once elected). Beside `etcd-handover`'s electors,
/// whose watches count too, it is the keys and [`SETTLE`] that make the round wait.
async fn settled(client: &mut etcd_client::Client, endpoints: &str) -> Result<()> {
    let first = endpoints.split(',').next().unwrap_or_default().trim();
    let hostport = first
        .strip_prefix("http://")
        .map(|h| h.trim_end_matches('/').to_string())
        .ok_or_else(|| {
            anyhow!("the anchor reads etcd's /metrics over plain http only ({first})")
        })?;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let opts = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    loop {
        let r = client
            .get(format!("{ELECTION}/"), Some(opts.clone()))
            .await
            .context("counting the campaigners' keys")?;
        let h = hostport.clone();
        let text = tokio::task::spawn_blocking(move || crate::cost::http_get(&h, "/metrics"))
            .await
            .map_err(|e| anyhow!("{e}"))??;
        let watchers = crate::cost::sum_metric(&text, "etcd_debugging_mvcc_watcher_total", None);
        if r.count() >= 2 && watchers >= 1.0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(anyhow!(
                "the waiting campaigner was not watching under {ELECTION} within {PATIENCE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An `etcdctl elect` election with a leader, handed over one round at a time; its processes'
/// output in `logs`. Every process it started is killed when it is dropped.
pub struct Election {
    etcdctl: PathBuf,
    endpoints: String,
    logs: PathBuf,
    client: etcd_client::Client,
    elected_tx: UnboundedSender<Elected>,
    elected_rx: UnboundedReceiver<Elected>,
    leader: Campaigner,
    /// Campaigners started so far: the next one's proposal is `p<started>`.
    started: usize,
}

impl Election {
    /// Starts the first campaigner against `endpoints` and waits for its election.
    ///
    /// # Errors
    /// `logs` cannot be created, etcd is not reached, or the first campaigner is not elected.
    pub async fn start(etcdctl: &Path, endpoints: &str, logs: &Path) -> Result<Election> {
        std::fs::create_dir_all(logs).with_context(|| format!("creating {}", logs.display()))?;
        let eps: Vec<&str> = endpoints.split(',').map(str::trim).collect();
        let client = etcd_client::Client::connect(eps, None)
            .await
            .context("connecting to etcd for the anchor")?;
        let (elected_tx, mut elected_rx) = unbounded_channel();
        let leader = Campaigner::start(etcdctl, endpoints, "p0", logs, elected_tx.clone())?;
        elected(&mut elected_rx, &leader.proposal).await?;
        Ok(Election {
            etcdctl: etcdctl.to_path_buf(),
            endpoints: endpoints.to_string(),
            logs: logs.to_path_buf(),
            client,
            elected_tx,
            elected_rx,
            leader,
            started: 1,
        })
    }

    /// One handover: a fresh campaigner joins; once the round is set (`settled`, then
    /// [`SETTLE`]) the leader gets SIGTERM. Returns signal → the new campaigner's election, in
    /// ms. On an error the leader stays as it was and the new campaigner is killed.
    ///
    /// # Errors
    /// A campaigner does not start, the round is not set, or the election or the old leader's
    /// exit does not come in time.
    pub async fn handover(&mut self) -> Result<f64> {
        let proposal = format!("p{}", self.started);
        self.started += 1;
        let waiter = Campaigner::start(
            &self.etcdctl,
            &self.endpoints,
            &proposal,
            &self.logs,
            self.elected_tx.clone(),
        )?;
        settled(&mut self.client, &self.endpoints).await?;
        tokio::time::sleep(SETTLE).await;
        let at = self.leader.terminate()?;
        let led = elected(&mut self.elected_rx, &waiter.proposal).await?;
        self.leader.wait_exit(PATIENCE).await?;
        self.leader = waiter;
        Ok(led - at)
    }

    /// Stops the leader as the rounds do (it resigns), then lets every process go.
    pub async fn stop(mut self) {
        if self.leader.terminate().is_ok() {
            let _ = self.leader.wait_exit(PATIENCE).await;
        }
    }
}

/// Runs `rounds` rounds of the anchor against `endpoints`, its processes' output in `logs`.
/// A round that fails ends the anchor (its error is in that round's sample); what was measured
/// before stays.
pub async fn run(
    etcdctl: &Path,
    endpoints: &str,
    rounds: usize,
    logs: &Path,
) -> Result<Vec<Sample>> {
    let mut election = Election::start(etcdctl, endpoints, logs).await?;
    let mut samples = Vec::new();
    for round in 0..rounds {
        let mut sample = Sample::begun(round, Scenario::Graceful, (0, 0));
        match election.handover().await {
            Ok(ms) => {
                sample.to_leader_ms = Some(ms);
                samples.push(sample);
            }
            Err(e) => {
                sample.error = Some(format!("{e:#}"));
                samples.push(sample);
                break;
            }
        }
    }
    election.stop().await;
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_election_is_the_key_line_followed_by_the_proposal() {
        // As etcdctl 3.4 prints it (checked by hand against a local etcd).
        let out = ["e/694d7d5c2a1b0f05", "p1"];
        assert_eq!(election(&out, "e", "p1"), Some(0));
        // Someone else's proposal, a key of another election, or the key alone: not yet.
        assert_eq!(election(&out, "e", "p2"), None);
        assert_eq!(election(&out, "other", "p1"), None);
        assert_eq!(election(&out[..1], "e", "p1"), None);
        // A warning before the election does not hide it.
        let noisy = ["{\"level\":\"warn\"}", "e/694d7d5c2a1b0f0a", "p3"];
        assert_eq!(election(&noisy, "e", "p3"), Some(1));
    }
}
