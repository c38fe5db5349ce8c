//! The task that keeps the lock's change stream open, supervised by the elector's loop: it is
//! restarted with backoff when it dies (even by a panic), and the loop polls meanwhile.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use super::describe_join_error;

use crate::lock::{LeaderLock, LockEvent};
use crate::timing::Timing;

/// What the watch task tells the loop: the last event and whether the stream is up.
#[derive(Debug, Clone, Default)]
pub(super) struct WatchStatus {
    pub(super) healthy: bool,
    pub(super) last: Option<LockEvent>,
}

/// The task that keeps the lock's change stream open, supervised by the loop.
pub(super) struct WatchTask {
    pub(super) lock: Arc<dyn LeaderLock>,
    pub(super) timing: Timing,
    pub(super) rx: watch::Receiver<WatchStatus>,
    /// The running task; `None` while a restart is pending.
    pub(super) handle: Option<JoinHandle<()>>,
    /// When to start it again after it died.
    pub(super) restart_at: Option<Instant>,
    pub(super) backoff: ExponentialBackoff,
}

pub(super) fn restart_backoff(timing: &Timing) -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(timing.retry_period.max(Duration::from_millis(100)) * 4)
        .with_jitter()
        .without_max_times()
        .build()
}

impl WatchTask {
    pub(super) fn spawn(
        lock: Arc<dyn LeaderLock>,
        timing: Timing,
        cancel: &CancellationToken,
    ) -> Self {
        let (tx, rx) = watch::channel(WatchStatus::default());
        let handle = tokio::spawn(watch_loop(lock.clone(), tx, timing, cancel.child_token()));
        WatchTask {
            lock,
            timing,
            rx,
            handle: Some(handle),
            restart_at: None,
            backoff: restart_backoff(&timing),
        }
    }

    pub(super) fn healthy(&self) -> bool {
        self.handle.is_some() && self.rx.borrow().healthy
    }

    /// The task ended: reports why, and schedules a restart unless we are stopping. Returns
    /// whether the loop goes on without a stream for now.
    pub(super) async fn ended(&mut self, cancel: &CancellationToken) -> bool {
        let outcome = match self.handle.take() {
            Some(h) => h.await,
            None => Ok(()),
        };
        if cancel.is_cancelled() {
            return false;
        }
        let delay = self.backoff.next().unwrap_or(self.timing.retry_period);
        match outcome {
            Err(e) => {
                error!(
                    error = %describe_join_error(e),
                    lock = %self.lock.describe(),
                    restart_in = ?delay,
                    "the lock watch task failed; polling until it is restarted"
                )
            }
            Ok(()) => warn!(lock = %self.lock.describe(), restart_in = ?delay,
                "the lock watch task ended; polling until it is restarted"),
        }
        self.restart_at = Some(Instant::now() + delay);
        true
    }

    pub(super) fn restart(&mut self, cancel: &CancellationToken) {
        let fresh = WatchTask::spawn(self.lock.clone(), self.timing, cancel);
        self.rx = fresh.rx;
        self.handle = fresh.handle;
        self.restart_at = None;
        // The backoff grows across restarts; a task that keeps dying is retried less often.
    }

    pub(super) async fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            // The task answers the (already cancelled) token at once.
            let _ = h.await;
        }
    }
}

/// Keeps a change stream open, reopening it with exponential backoff when it breaks.
pub(super) async fn watch_loop(
    lock: Arc<dyn LeaderLock>,
    tx: watch::Sender<WatchStatus>,
    timing: Timing,
    cancel: CancellationToken,
) {
    let builder = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(timing.retry_period.max(Duration::from_millis(100)))
        .with_jitter()
        .without_max_times();
    let mut backoff = builder.build();
    let send = |healthy: bool, last: Option<LockEvent>| {
        tx.send_replace(WatchStatus { healthy, last });
    };
    loop {
        let opened = tokio::select! {
            _ = cancel.cancelled() => return,
            r = lock.watch() => r,
        };
        match opened {
            Ok(mut stream) => {
                backoff = builder.build();
                send(true, Some(LockEvent::Resynced));
                loop {
                    let item = tokio::select! {
                        _ = cancel.cancelled() => return,
                        item = stream.next() => item,
                    };
                    match item {
                        Some(Ok(ev)) => send(true, Some(ev)),
                        Some(Err(e)) => {
                            warn!(error = %e.chain(), "lock watch broke; polling until it is back");
                            break;
                        }
                        None => {
                            debug!("lock watch ended; reopening");
                            break;
                        }
                    }
                }
            }
            Err(e) => warn!(error = %e.chain(), "cannot open lock watch; polling meanwhile"),
        }
        send(false, None);
        let delay = backoff.next().unwrap_or(timing.retry_period);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
