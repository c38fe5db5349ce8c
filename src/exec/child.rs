//! One run of the command: a process group of its own, started with the leadership's term and
//! identity in its environment, and stopped as a group (SIGTERM, then SIGKILL after the grace),
//! so that what the command started itself (a shell's children, say) stops with it.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use leader_lock::Term;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::{EXEC_IDENTITY_ENV, EXEC_TERM_ENV};

/// How often a stop looks whether the rest of the group has gone once the command itself has:
/// the grace is for the whole group, and nothing announces a grandchild's exit to us.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// How long a SIGKILLed command may take to be reaped before the stop gives up on it: a process
/// in uninterruptible sleep (a hung NFS read) dies only when the kernel lets it.
const REAP_AFTER_KILL: Duration = Duration::from_secs(5);

/// The command to run: the program, its arguments and the environment it gets besides ours.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The program, found on `PATH` unless it holds a `/`.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables added to the inherited environment (the proxy's `KUBECONFIG`, with a proxy).
    pub env: Vec<(OsString, OsString)>,
}

/// A running command.
pub struct Child {
    inner: tokio::process::Child,
    /// The command's process id, which is also its process group's.
    pid: Pid,
    /// The term it was started under.
    pub term: Term,
    /// When it was started.
    pub started: Instant,
}

/// How a stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The command exited with this status.
    Exited(ExitStatus),
    /// The command could not be reaped even after SIGKILL.
    Lost,
}

// === impl Child ===

impl Child {
    /// Starts `spec` under `term` with `identity`, in a new process group, with our stdin,
    /// stdout and stderr.
    ///
    /// # Errors
    /// When the program cannot be started (not found, not executable).
    pub fn spawn(spec: &Spec, term: Term, identity: &str) -> io::Result<Child> {
        let mut cmd = tokio::process::Command::new(&spec.program);
        cmd.args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .env(EXEC_TERM_ENV, term.to_string())
            .env(EXEC_IDENTITY_ENV, identity)
            // Its own group, so one signal reaches everything it starts (unless that leaves the
            // group itself, as a daemon's setsid does).
            .process_group(0)
            // Should this process unwind while the command runs, the command dies with it
            // rather than keep running as if it still led.
            .kill_on_drop(true);
        let inner = cmd.spawn()?;
        let pid = inner
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| io::Error::other("the command exited before its id was known"))?;
        info!(pid = pid.as_raw(), term = %term, "command started");
        Ok(Child {
            inner,
            pid,
            term,
            started: Instant::now(),
        })
    }

    /// The command's process id.
    pub fn pid(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }

    /// Waits for the command to exit by itself.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`tokio::process::Child::wait`].
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.inner.wait().await
    }

    /// Stops the command's whole group: SIGTERM, then SIGKILL to whatever is left of it once
    /// `grace` has passed. Returns when the command has been reaped.
    pub async fn stop(mut self, grace: Duration) -> Stopped {
        let deadline = Instant::now() + grace;
        self.signal(Signal::SIGTERM);
        let status = match tokio::time::timeout_at(deadline, self.inner.wait()).await {
            Ok(Ok(status)) => Some(status),
            Ok(Err(e)) => {
                warn!(pid = self.pid.as_raw(), error = %e, "cannot wait for the command");
                None
            }
            Err(_) => None,
        };
        if status.is_some() {
            self.wait_group(deadline).await;
        }
        if self.group_alive() {
            warn!(pid = self.pid.as_raw(), term = %self.term, grace = ?grace,
                "the command's process group outlived the grace after SIGTERM: SIGKILL");
            self.signal(Signal::SIGKILL);
        }
        let status = match status {
            Some(s) => Some(s),
            None => match tokio::time::timeout(REAP_AFTER_KILL, self.inner.wait()).await {
                Ok(Ok(s)) => Some(s),
                _ => None,
            },
        };
        self.reap_group();
        match status {
            Some(s) => Stopped::Exited(s),
            None => {
                warn!(
                    pid = self.pid.as_raw(),
                    "the command could not be reaped after SIGKILL"
                );
                Stopped::Lost
            }
        }
    }

    /// After the command exited by itself: stops what it left in its group (SIGTERM, SIGKILL
    /// after `grace`), so that nothing it started keeps running without a leadership.
    pub async fn stop_leftovers(mut self, grace: Duration) {
        self.reap_group();
        if !self.group_alive() {
            return;
        }
        info!(
            pid = self.pid.as_raw(),
            "stopping what the command left in its process group"
        );
        self.signal(Signal::SIGTERM);
        self.wait_group(Instant::now() + grace).await;
        if self.group_alive() {
            self.signal(Signal::SIGKILL);
        }
        self.reap_group();
    }

    /// Waits until nothing is left of the group, or `deadline`.
    async fn wait_group(&mut self, deadline: Instant) {
        loop {
            self.reap_group();
            if !self.group_alive() || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(GROUP_POLL.min(deadline - Instant::now())).await;
        }
    }

    fn signal(&self, sig: Signal) {
        match killpg(self.pid, sig) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => warn!(pid = self.pid.as_raw(), signal = %sig, error = %e,
                "cannot signal the command's process group"),
        }
    }

    /// Whether any process of the group is left. A group we may not signal (EPERM: a member
    /// changed its user) is left alone: nothing we send would reach it.
    fn group_alive(&self) -> bool {
        killpg(self.pid, None).is_ok()
    }

    /// Reaps members of the group that became our children (when this process is PID 1 of a
    /// container, or a subreaper, orphans are reparented to it): their zombies would otherwise
    /// count as alive. Only once the command itself was reaped by tokio, so that this never
    /// takes its status from tokio; `try_wait` says whether it was.
    fn reap_group(&mut self) {
        if !matches!(self.inner.try_wait(), Ok(Some(_))) {
            return;
        }
        let group = Pid::from_raw(-self.pid.as_raw());
        while let Ok(status) = waitpid(group, Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
    }
}

/// The exit code a shell would give for `status`: the code, or 128 + the signal's number for a
/// command a signal killed.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(255),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_a_shells() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        // Killed by SIGTERM (15) and SIGKILL (9).
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}
