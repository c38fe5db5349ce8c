//! The replica harness: `gateway-leader run` processes (and the Go peers of `testkit/peers/`)
//! started as the tests, the bench and the demo start them, their JSON log lines read into a
//! [`Journal`] as they are written, typed as the product declares them
//! (`gateway_leader_log::Event`), and the signals a failover needs.
//!
//! ```text
//! Replica::run_command ─► Replica::spawn ─► reader thread ─┬─► Journal ─► waits, Records
//!                                                          └─► Transcript (file or stderr)
//! ```
//!
//! It knows the binary only by its command line and its log: it links none of it, so a test
//! of any crate may use it.

mod journal;
mod line;
pub mod peer;

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use leader_lock::clock;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub use journal::{Journal, Snapshot};
pub use line::{Dialect, Line, Record};

/// The prefix of `gateway-leader run`'s environment variables (its `ENV_PREFIX`): a replica
/// started here gets none of the caller's, nor its pod variables, so its flags say everything.
pub const SETTINGS_ENV_PREFIX: &str = "GATEWAY_LEADER";

/// Removes the caller's settings (`GATEWAY_LEADER*`) and pod variables from `cmd`'s
/// environment: a replica started by a test or the bench does what its flags say.
pub fn clear_settings(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with(SETTINGS_ENV_PREFIX) {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("POD_NAME").env_remove("POD_NAMESPACE")
}

/// Where a process's output goes beside the journal.
#[derive(Debug, Clone)]
pub enum Transcript {
    /// Into this file, both outputs, line by line: a log to read after a bench run or a demo.
    File(PathBuf),
    /// To the caller's stderr, each line of the read output prefixed with the process's name:
    /// a test's output, shown when it fails. The other output is dropped.
    Stderr,
}

/// A running process whose JSON lines go to a [`Journal`]; killed (and reaped) when dropped.
pub struct Replica {
    /// Its index in its journal.
    pub index: usize,
    /// Its name (a replica's `--leader-election-identity`).
    pub name: String,
    /// Where its output is kept, when in a file.
    pub log: Option<PathBuf>,
    child: Child,
    journal: Journal,
}

/// The instants just before a signal was sent.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    /// On `CLOCK_MONOTONIC`, in ms: compares with the lines' [`Line::mono_ms`].
    pub mono_ms: f64,
    /// On the wall clock: compares with the lines' [`Line::at`].
    pub at: SystemTime,
}

// === impl Replica ===

impl Replica {
    /// `exe run <args>` as replica `name`: JSON logs, `name` as its identity, a free health
    /// port unless `args` picks one (many replicas share the machine), and none of the
    /// caller's settings in its environment. The log level is the caller's to set
    /// (`RUST_LOG`, `--log-level`).
    pub fn run_command<S: AsRef<OsStr>>(exe: &Path, name: &str, args: &[S]) -> Command {
        Self::command(exe, "run", name, args)
    }

    /// `exe <subcommand> <args>` as replica `name`, set up as [`run_command`](Self::run_command)
    /// sets up `run`; what goes after the flags (`exec`'s `-- COMMAND`) is the caller's to add.
    pub fn command<S: AsRef<OsStr>>(
        exe: &Path,
        subcommand: &str,
        name: &str,
        args: &[S],
    ) -> Command {
        let mut cmd = Command::new(exe);
        cmd.arg(subcommand).args(args);
        if !args.iter().any(|a| a.as_ref() == "--health-addr") {
            cmd.args(["--health-addr", "127.0.0.1:0"]);
        }
        cmd.args(["--log-format", "json", "--leader-election-identity", name]);
        clear_settings(&mut cmd);
        cmd
    }

    /// Starts `cmd` as process `name` of `journal`: each line of the output `dialect` names goes
    /// to the journal (when it is JSON) and to `transcript`.
    pub fn spawn(
        mut cmd: Command,
        name: &str,
        dialect: Dialect,
        journal: &Journal,
        transcript: Transcript,
    ) -> Result<Replica> {
        let (file, log) = match &transcript {
            Transcript::File(path) => {
                let f =
                    File::create(path).with_context(|| format!("creating {}", path.display()))?;
                (Some(f), Some(path.clone()))
            }
            Transcript::Stderr => (None, None),
        };
        let other = match &file {
            Some(f) => Stdio::from(f.try_clone().context("opening the log file twice")?),
            None => Stdio::null(),
        };
        cmd.stdin(Stdio::null());
        match dialect {
            Dialect::GatewayLeader => cmd.stdout(other).stderr(Stdio::piped()),
            Dialect::GoPeer => cmd.stdout(Stdio::piped()).stderr(other),
        };
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        let read: Box<dyn Read + Send> = match dialect {
            Dialect::GatewayLeader => Box::new(child.stderr.take().context("no stderr pipe")?),
            Dialect::GoPeer => Box::new(child.stdout.take().context("no stdout pipe")?),
        };
        let index = journal.join(name);
        let reader = Reader {
            index,
            name: name.to_string(),
            dialect,
            journal: journal.clone(),
            file,
        };
        std::thread::Builder::new()
            .name(format!("log-{name}"))
            .spawn(move || reader.run(read))
            .context("starting a log reader thread")?;
        Ok(Replica {
            index,
            name: name.to_string(),
            log,
            child,
            journal: journal.clone(),
        })
    }

    /// The journal its lines go to.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Its lines so far.
    pub fn lines(&self) -> Vec<Line> {
        self.journal.read(|s| s.of(self.index).cloned().collect())
    }

    /// Blocks until one of its lines (one already read counts) satisfies `hit`; fails after
    /// `limit`, or when its output ends first. `what` names the line in the error.
    pub fn wait_line_blocking(
        &self,
        what: &str,
        limit: Duration,
        hit: impl Fn(&Line) -> bool,
    ) -> Result<Line> {
        let found = self.journal.wait_blocking(limit, |s| self.probe(s, &hit));
        self.found(found, what, limit)
    }

    /// As [`wait_line_blocking`](Self::wait_line_blocking), without blocking the runtime.
    pub async fn wait_line(
        &self,
        what: &str,
        limit: Duration,
        hit: impl Fn(&Line) -> bool,
    ) -> Result<Line> {
        let found = self.journal.wait(limit, |s| self.probe(s, &hit)).await;
        self.found(found, what, limit)
    }

    /// A line that satisfies `hit`, or the news that none will come.
    fn probe(&self, s: Snapshot<'_>, hit: &impl Fn(&Line) -> bool) -> Option<Option<Line>> {
        if let Some(l) = s.of(self.index).find(|l| hit(l)) {
            return Some(Some(l.clone()));
        }
        s.ended(self.index).then_some(None)
    }

    fn found(&self, found: Option<Option<Line>>, what: &str, limit: Duration) -> Result<Line> {
        match found {
            Some(Some(line)) => Ok(line),
            Some(None) => bail!("{}: exited before logging {what}", self.name),
            None => bail!("{}: no log line with {what} within {limit:?}", self.name),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig`; returns the instants just before it was sent.
    pub fn signal(&mut self, sig: Signal) -> Result<Sent> {
        if !self.running() {
            bail!("replica {} has exited", self.name);
        }
        let pid = i32::try_from(self.child.id()).context("pid out of range")?;
        let sent = Sent {
            mono_ms: clock::mono_ms(),
            at: SystemTime::now(),
        };
        kill(Pid::from_raw(pid), sig).with_context(|| format!("{sig} to {}", self.name))?;
        Ok(sent)
    }

    /// True while the process runs (a frozen one runs).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `limit` for the process to exit; kills it if it does not.
    pub async fn wait_exit(&mut self, limit: Duration) -> Result<ExitStatus> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                self.kill();
                bail!(
                    "replica {} did not exit within {limit:?}; killed",
                    self.name
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// As [`wait_exit`](Self::wait_exit), blocking.
    pub fn wait_exit_blocking(&mut self, limit: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                self.kill();
                bail!(
                    "replica {} did not exit within {limit:?}; killed",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

// === impl Reader ===

/// What a process's reader thread needs.
struct Reader {
    index: usize,
    name: String,
    dialect: Dialect,
    journal: Journal,
    file: Option<File>,
}

impl Reader {
    /// Copies every line of `output` to the transcript and the JSON ones to the journal, until
    /// the output ends.
    fn run(mut self, output: Box<dyn Read + Send>) {
        let mut output = BufReader::new(output);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match output.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // A line that is not UTF-8 is still read, and the ones after it.
            let text = String::from_utf8_lossy(&buf);
            let text = text.trim_end();
            match &mut self.file {
                // The file is what a reader keeps when something fails: every byte goes in.
                Some(f) => {
                    let _ = f.write_all(&buf);
                }
                None => eprintln!("[{}] {text}", self.name),
            }
            if let Some(line) = Line::read(self.index, self.dialect, text) {
                self.journal.push(line);
            }
        }
        self.journal.end(self.index);
    }
}
