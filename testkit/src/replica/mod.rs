//! One `gateway-leader run` replica process started by the bench, its log kept in a file and
//! read as it is written. A Go peer (client-go's elector, a controller-runtime manager;
//! [`peer`]) is started and read the same way, from its own command and its own lines.

pub mod peer;

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::sync::mpsc::UnboundedSender;

use gateway_leader_log::{self as events, Event};
use leader_lock::clock;

/// The prefix of `gateway-leader run`'s environment variables: the bench removes every one of
/// the user's from the replicas (and from the check of their settings), as it decides them all.
pub const REPLICA_ENV: &str = "GATEWAY_LEADER";

/// The log filter of every replica: info, plus the leadership logger's debug lines (renewals
/// with their validity deadlines, which the split-brain checker needs).
pub const LOG_FILTER: &str = "info,gateway_leader::run=debug";

/// Which output of a process carries the lines the bench reads; the other goes to the log too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// `gateway-leader run` logs its JSON lines on stderr.
    Stderr,
    /// The Go peers print their JSON lines on stdout (client-go's own logs go to stderr).
    Stdout,
}

/// Reads one line of process `index`'s output; `None` for lines that do not matter.
pub type Parser = fn(usize, &str) -> Option<Event>;

/// A running replica.
pub struct Replica {
    /// Its index in the lane.
    pub index: usize,
    /// Its identity (`--leader-election-identity`).
    pub name: String,
    child: Child,
    /// Where its log is kept.
    pub log: PathBuf,
}

impl Replica {
    /// Starts `exe run <args>` as replica `index` named `name`; its JSON log goes to `log` and
    /// every line that matters to `events`.
    pub fn start(
        exe: &Path,
        index: usize,
        name: &str,
        args: &[String],
        log: PathBuf,
        events: UnboundedSender<Event>,
    ) -> Result<Replica> {
        let mut cmd = Command::new(exe);
        cmd.arg("run")
            .args(args)
            .args(["--leader-election-identity", name])
            .args(["--health-addr", "127.0.0.1:0", "--log-format", "json"])
            .args(["--log-level", LOG_FILTER])
            .env("RUST_LOG", LOG_FILTER);
        // The user's own settings must not leak into the replicas: the bench decides them all.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with(REPLICA_ENV) {
                cmd.env_remove(k);
            }
        }
        for k in ["POD_NAME", "POD_NAMESPACE"] {
            cmd.env_remove(k);
        }
        Replica::spawn(
            cmd,
            index,
            name,
            log,
            (Lines::Stderr, events::parse),
            events,
        )
    }

    /// Starts `cmd` as process `index` named `name`: both its outputs go to `log`, and each
    /// line of `lines` that `parse` reads goes to `events`.
    pub fn spawn(
        mut cmd: Command,
        index: usize,
        name: &str,
        log: PathBuf,
        (lines, parse): (Lines, Parser),
        events: UnboundedSender<Event>,
    ) -> Result<Replica> {
        let mut file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let other = file
            .try_clone()
            .with_context(|| format!("opening {} twice", log.display()))?;
        cmd.stdin(Stdio::null());
        match lines {
            Lines::Stderr => cmd.stdout(other).stderr(Stdio::piped()),
            Lines::Stdout => cmd.stdout(Stdio::piped()).stderr(other),
        };
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        let read: Box<dyn std::io::Read + Send> = match lines {
            Lines::Stderr => Box::new(
                child
                    .stderr
                    .take()
                    .ok_or_else(|| anyhow!("{name}: no stderr pipe"))?,
            ),
            Lines::Stdout => Box::new(
                child
                    .stdout
                    .take()
                    .ok_or_else(|| anyhow!("{name}: no stdout pipe"))?,
            ),
        };
        std::thread::Builder::new()
            .name(format!("log-{name}"))
            .spawn(move || {
                for line in BufReader::new(read).lines().map_while(Result::ok) {
                    let _ = writeln!(file, "{line}");
                    if let Some(e) = parse(index, &line) {
                        if events.send(e).is_err() {
                            return;
                        }
                    }
                }
            })
            .context("starting a log reader thread")?;
        Ok(Replica {
            index,
            name: name.to_string(),
            child,
            log,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig`; returns the `CLOCK_MONOTONIC` instant (ms) just before it was sent.
    pub fn signal(&mut self, sig: Signal) -> Result<f64> {
        if !self.running() {
            return Err(anyhow!("replica {} has exited", self.name));
        }
        let pid = i32::try_from(self.child.id()).context("pid out of range")?;
        let at = clock::mono_ms();
        kill(Pid::from_raw(pid), sig).with_context(|| format!("{sig} to {}", self.name))?;
        Ok(at)
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `limit` for the process to exit; kills it if it does not.
    pub async fn wait_exit(&mut self, limit: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        while self.running() {
            if tokio::time::Instant::now() >= deadline {
                self.kill();
                return Err(anyhow!(
                    "replica {} did not exit within {limit:?}; killed",
                    self.name
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Kills and reaps the process (thawing it first, should it be frozen).
    pub fn kill(&mut self) {
        // Only a child not yet reaped: its pid could belong to another process afterwards.
        if self.running() {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}
