//! The loop of `gateway-leader exec`: the command runs only between a leadership's start and its
//! end.
//!
//! Invariants:
//! - The command is started only while the published state is a leadership whose validity
//!   deadline has not passed, and it is told that leadership's term.
//! - It is sent SIGTERM as soon as that leadership ends: when the elector publishes its end
//!   (lost, the renew deadline passed, the record vanished, another term) or, without waiting
//!   for the elector, when its validity deadline passes without a renewal.
//! - A signal to this process stops the command before the caller releases the lock.
//! - One command at a time: the next one starts only once the last one was reaped.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::process::ExitStatus;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use leader_lock::{LeaderState, Leadership, Term};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::child::{exit_code, Child, Spec, Stopped};
use crate::config::{ExecRestart, ExecSettings};
use crate::validity::ended;
#[cfg(test)]
use crate::validity::still_valid;

/// The first wait before a command that exited by itself is started again.
const RESTART_MIN: Duration = Duration::from_secs(1);
/// The longest wait between restarts of a command that keeps exiting.
const RESTART_MAX: Duration = Duration::from_secs(30);
/// A run at least this long was healthy: the next restart waits [`RESTART_MIN`] again.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// How the loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A signal asked this process to stop; the command's end, if one was running.
    Signal(Option<Stopped>),
    /// `--exec-restart never`: the command ran once and ended, by itself or stopped at the end
    /// of its leadership.
    Ended(Stopped),
    /// The elector stopped by itself: no leadership will come.
    ElectorStopped,
}

/// The command could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start {program}")]
pub struct SpawnError {
    /// The program, as given.
    pub program: String,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// Why a running command is stopped or was lost.
enum End {
    /// A signal to this process.
    Signal(&'static str),
    /// It exited by itself.
    Exited(io::Result<ExitStatus>),
    /// Its leadership ended: what the state says now.
    Leadership(&'static str),
}

/// Runs `spec` while `leadership` validly leads, until `shutdown` completes (a signal's name),
/// or with [`ExecRestart::Never`] until the command's one run ended. Returns with no command
/// running.
///
/// # Errors
/// When the command cannot be started.
pub async fn supervise(
    spec: &Spec,
    identity: &str,
    settings: ExecSettings,
    leadership: &Leadership,
    shutdown: impl Future<Output = &'static str>,
) -> Result<Outcome, SpawnError> {
    let mut shutdown = pin!(shutdown);
    let mut rx = leadership.subscribe();
    let mut backoff = restart_backoff();
    let mut not_before = Instant::now();
    loop {
        // 1. Wait for a valid leadership (and for the restart backoff to pass).
        let (term, _) = tokio::select! {
            biased;
            sig = &mut shutdown => {
                info!(signal = sig, "stopping: no command was running");
                return Ok(Outcome::Signal(None));
            }
            lead = leading(&mut rx) => match lead {
                Some(lead) => lead,
                None => return Ok(Outcome::ElectorStopped),
            },
        };
        if Instant::now() < not_before {
            tokio::select! {
                biased;
                sig = &mut shutdown => {
                    info!(signal = sig, "stopping: no command was running");
                    return Ok(Outcome::Signal(None));
                }
                () = tokio::time::sleep_until(not_before) => continue,
            }
        }
        // 2. Start the command under this term.
        let mut child = Child::spawn(spec, term, identity).map_err(|source| SpawnError {
            program: spec.program.to_string_lossy().into_owned(),
            source,
        })?;
        // 3. Watch the command, and the leadership to its end.
        let end = tokio::select! {
            biased;
            sig = &mut shutdown => End::Signal(sig),
            status = child.wait() => End::Exited(status),
            why = ended(&mut rx, term) => End::Leadership(why),
        };
        // 4. Stop it, and decide what comes next.
        let ran = child.started.elapsed();
        match end {
            End::Signal(sig) => {
                info!(signal = sig, pid = child.pid(), term = %term, grace = ?settings.grace,
                    "stopping the command before the lock is released");
                let stopped = child.stop(settings.grace).await;
                log_stopped(stopped, term);
                return Ok(Outcome::Signal(Some(stopped)));
            }
            End::Leadership(why) => {
                info!(pid = child.pid(), term = %term, why, grace = ?settings.grace,
                    "leadership ended: stopping the command");
                let stopped = child.stop(settings.grace).await;
                log_stopped(stopped, term);
                if settings.restart == ExecRestart::Never {
                    return Ok(Outcome::Ended(stopped));
                }
            }
            End::Exited(Ok(status)) => {
                let code = exit_code(status);
                if settings.restart == ExecRestart::Never {
                    info!(code, term = %term, "the command exited while leading; \
                        --exec-restart never: stopping");
                    child.stop_leftovers(settings.grace).await;
                    return Ok(Outcome::Ended(Stopped::Exited(status)));
                }
                if ran >= HEALTHY_RUN {
                    backoff = restart_backoff();
                }
                let delay = backoff.next().unwrap_or(RESTART_MAX);
                warn!(code, term = %term, ran = ?ran, restart_in = ?delay,
                    "the command exited while leading; starting it again");
                child.stop_leftovers(settings.grace).await;
                not_before = Instant::now() + delay;
            }
            End::Exited(Err(e)) => {
                warn!(pid = child.pid(), error = %e, "cannot wait for the command: stopping it");
                let stopped = child.stop(settings.grace).await;
                if settings.restart == ExecRestart::Never {
                    return Ok(Outcome::Ended(stopped));
                }
                not_before = Instant::now() + backoff.next().unwrap_or(RESTART_MAX);
            }
        }
    }
}

/// The waits between restarts of a command that keeps exiting.
fn restart_backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(RESTART_MIN)
        .with_max_delay(RESTART_MAX)
        .without_max_times()
        .build()
}

/// Waits until the published state is a leadership still valid now; `None` once the elector
/// stopped.
async fn leading(rx: &mut watch::Receiver<LeaderState>) -> Option<(Term, Instant)> {
    loop {
        let state = rx.borrow_and_update().clone();
        match state {
            LeaderState::Leader { term, valid_until } if Instant::now() < valid_until => {
                return Some((term, valid_until))
            }
            LeaderState::Stopped => return None,
            // A leadership past its deadline ends when the elector says so; wait for that.
            _ => {}
        }
        rx.changed().await.ok()?;
    }
}

fn log_stopped(stopped: Stopped, term: Term) {
    match stopped {
        Stopped::Exited(status) => {
            info!(code = exit_code(status), term = %term, "the command stopped")
        }
        Stopped::Lost => warn!(term = %term, "the command could not be reaped"),
    }
}

#[cfg(test)]
mod tests;
