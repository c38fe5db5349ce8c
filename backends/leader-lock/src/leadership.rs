use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use crate::record::Term;

/// What this replica currently is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderState {
    /// Not yet known: the elector has not finished its first attempt.
    Starting,
    /// We lead under `term` and may write until `valid_until` unless renewed.
    Leader {
        /// Our fencing term.
        term: Term,
        /// The end of validity: the instant the last successful renew was sent + renew deadline.
        valid_until: Instant,
    },
    /// Someone else leads (or nobody does yet).
    Follower {
        /// The current holder, when known.
        holder: Option<String>,
        /// The holder's term, when known.
        term: Option<Term>,
    },
    /// The elector stopped; this replica writes nothing any more.
    Stopped,
}

impl LeaderState {
    /// Our term, if this state is leadership.
    pub fn term(&self) -> Option<Term> {
        match self {
            LeaderState::Leader { term, .. } => Some(*term),
            _ => None,
        }
    }
}

/// Why a write may not go ahead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotLeader {
    /// Another replica leads, or nobody does yet.
    #[error("not the leader (holder: {})", holder.as_deref().unwrap_or("unknown"))]
    Follower {
        /// The current holder, when known.
        holder: Option<String>,
    },
    /// We led, but the last renew is older than the renew deadline.
    #[error("leadership of term {term} expired {ago:?} ago")]
    Expired {
        /// The term that expired.
        term: Term,
        /// How long ago its validity ended.
        ago: Duration,
    },
    /// The replica is shutting down and accepts no more writes.
    #[error("shutting down")]
    ShuttingDown,
}

/// Permission for one write: the term to carry and the deadline the write must finish by.
///
/// Holding it delays the graceful release until the write is done (or the permit dropped).
#[derive(Debug)]
pub struct WritePermit {
    /// The fencing term the write carries.
    pub term: Term,
    /// The write must be finished by then; no write may start after it.
    pub valid_until: Instant,
    _in_flight: TaskTrackerToken,
}

impl WritePermit {
    /// Time left until the validity deadline, or `None` when it has passed.
    pub fn remaining(&self) -> Option<Duration> {
        self.valid_until.checked_duration_since(Instant::now())
    }
}

/// A cheap, cloneable view of this replica's leadership, for any task.
#[derive(Debug, Clone)]
pub struct Leadership {
    rx: watch::Receiver<LeaderState>,
    closing: Arc<AtomicBool>,
    in_flight: TaskTracker,
}

impl Leadership {
    pub(crate) fn new(rx: watch::Receiver<LeaderState>) -> Self {
        Leadership {
            rx,
            closing: Arc::new(AtomicBool::new(false)),
            in_flight: TaskTracker::new(),
        }
    }

    /// A leadership that always holds under term 0, for `--leader-election-disable`.
    pub fn always_leader() -> (Self, watch::Sender<LeaderState>) {
        // Far enough to never expire in practice, near enough not to overflow Instant.
        let valid_until = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        let (tx, rx) = watch::channel(LeaderState::Leader {
            term: Term(0),
            valid_until,
        });
        (Leadership::new(rx), tx)
    }

    /// Asks whether a write may start now. Synchronous and cheap: call it before every write.
    pub fn check(&self) -> Result<WritePermit, NotLeader> {
        if self.closing.load(Ordering::SeqCst) {
            return Err(NotLeader::ShuttingDown);
        }
        let state = self.rx.borrow().clone();
        match state {
            LeaderState::Leader { term, valid_until } => {
                let now = Instant::now();
                if now < valid_until {
                    let token = self.in_flight.token();
                    // Re-check after taking the token: a drain that began before it must see it.
                    if self.closing.load(Ordering::SeqCst) {
                        return Err(NotLeader::ShuttingDown);
                    }
                    Ok(WritePermit {
                        term,
                        valid_until,
                        _in_flight: token,
                    })
                } else {
                    Err(NotLeader::Expired {
                        term,
                        ago: now - valid_until,
                    })
                }
            }
            LeaderState::Follower { holder, .. } => Err(NotLeader::Follower { holder }),
            LeaderState::Starting => Err(NotLeader::Follower { holder: None }),
            LeaderState::Stopped => Err(NotLeader::ShuttingDown),
        }
    }

    /// True when a write could start now.
    pub fn is_leader(&self) -> bool {
        self.check().is_ok()
    }

    /// The state as last published by the elector (validity is not re-checked here).
    pub fn state(&self) -> LeaderState {
        self.rx.borrow().clone()
    }

    /// A receiver that wakes on every change of state.
    pub fn subscribe(&self) -> watch::Receiver<LeaderState> {
        self.rx.clone()
    }

    /// Waits until `check()` passes (or the elector stops); returns the permit.
    pub async fn wait_leader(&self) -> Result<WritePermit, NotLeader> {
        let mut rx = self.rx.clone();
        loop {
            match self.check() {
                Ok(p) => return Ok(p),
                Err(NotLeader::ShuttingDown) => return Err(NotLeader::ShuttingDown),
                Err(_) => {}
            }
            if rx.changed().await.is_err() {
                return self.check();
            }
        }
    }

    /// Refuses new writes and waits for the permits in flight to be dropped.
    pub(crate) async fn close_and_drain(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.in_flight.close();
        self.in_flight.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn expired_leadership_does_not_pass() {
        let (tx, rx) = watch::channel(LeaderState::Leader {
            term: Term(3),
            valid_until: Instant::now() - Duration::from_millis(1),
        });
        let l = Leadership::new(rx);
        assert!(matches!(
            l.check(),
            Err(NotLeader::Expired { term: Term(3), .. })
        ));
        tx.send_replace(LeaderState::Leader {
            term: Term(4),
            valid_until: Instant::now() + Duration::from_secs(60),
        });
        let p = l.check().expect("valid");
        assert_eq!(p.term, Term(4));
        assert!(p.remaining().is_some());
    }

    #[tokio::test]
    async fn drain_waits_for_permits() {
        let (l, _tx) = Leadership::always_leader();
        let permit = l.check().expect("leader");
        let l2 = l.clone();
        let drained = tokio::spawn(async move { l2.close_and_drain().await });
        tokio::task::yield_now().await;
        assert!(matches!(l.check(), Err(NotLeader::ShuttingDown)));
        assert!(!drained.is_finished());
        drop(permit);
        tokio::time::timeout(Duration::from_secs(30), drained)
            .await
            .expect("drained after the permit was dropped")
            .expect("task");
    }
}
