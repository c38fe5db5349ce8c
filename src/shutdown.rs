//! The order and the budget of a graceful stop, and the signals that start it.

use std::time::Duration;

use anyhow::Context;
use leader_lock_kubernetes::EVENT_POST_TIMEOUT;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Kubernetes kills a pod this long after SIGTERM unless told otherwise
/// (`terminationGracePeriodSeconds`; deploy/base/deployment.yaml sets the same 30 s).
pub const TERMINATION_GRACE: Duration = Duration::from_secs(30);
/// What the whole stop after SIGTERM may take: the work and the elector stop together within
/// the elector's budget (`leader_lock::elector::SHUTDOWN_BUDGET`: drain, then release), a quiet
/// moment for the successor follows, then the last leader-election Event gets what is left. The
/// rest of the grace period is margin for the exit itself. A name of its own: the elector's
/// budget is one part of it, and the two are not interchangeable.
pub const PROCESS_SHUTDOWN_BUDGET: Duration = Duration::from_secs(25);
const _: () = assert!(
    leader_lock::elector::SHUTDOWN_BUDGET.as_secs()
        + leader_lock::elector::AFTER_RELEASE_QUIET.as_secs()
        + EVENT_POST_TIMEOUT.as_secs()
        <= PROCESS_SHUTDOWN_BUDGET.as_secs()
        && PROCESS_SHUTDOWN_BUDGET.as_secs() < TERMINATION_GRACE.as_secs()
);

/// The longest a graceful stop of `run` or `proxy` takes with this renew deadline: the drain and
/// the release (each up to the renew deadline, both within the elector's budget), the quiet
/// moment and the last Event, and never more than [`PROCESS_SHUTDOWN_BUDGET`]. A pod's
/// `terminationGracePeriodSeconds` must be longer (docs/operations.md, "The shutdown budget";
/// the chart checks the same formula).
///
/// ```
/// use std::time::Duration;
/// use gateway_leader::shutdown::graceful_stop_budget;
///
/// assert_eq!(graceful_stop_budget(Duration::from_secs(10)), Duration::from_secs(23));
/// assert_eq!(graceful_stop_budget(Duration::from_secs(30)), Duration::from_secs(25));
/// ```
pub fn graceful_stop_budget(renew_deadline: Duration) -> Duration {
    let parts = renew_deadline.saturating_mul(2)
        + leader_lock::elector::AFTER_RELEASE_QUIET
        + EVENT_POST_TIMEOUT;
    parts.min(PROCESS_SHUTDOWN_BUDGET)
}

/// SIGTERM and SIGINT, caught from the start: a signal that arrives while the replica is still
/// connecting must stop it cleanly, not kill it with the default action.
pub struct ShutdownSignals {
    term: Signal,
    int: Signal,
}

// === impl ShutdownSignals ===

impl ShutdownSignals {
    /// Installs both handlers.
    ///
    /// # Errors
    /// When a handler cannot be installed.
    pub fn install() -> anyhow::Result<Self> {
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// Waits for either; returns its name.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal that arrives meanwhile is kept for the next call.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
