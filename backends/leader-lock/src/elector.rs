use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::leadership::{LeaderState, Leadership};
use crate::lock::{Attempt, LeaderLock, LockError, LockEvent};
use crate::record::{Candidate, Identity, Term};
use crate::timing::Timing;

/// How an elector runs.
#[derive(Debug, Clone)]
pub struct ElectorConfig {
    /// Who we are.
    pub identity: Identity,
    /// Lease, renew and retry durations.
    pub timing: Timing,
    /// Release the lock on graceful shutdown so a follower takes over at once.
    pub release_on_shutdown: bool,
}

/// Runs the acquire/renew loop against a [`LeaderLock`] and publishes a [`Leadership`].
pub struct Elector {
    leadership: Leadership,
    tx: Arc<watch::Sender<LeaderState>>,
    cancel: CancellationToken,
    task: JoinHandle<Option<Term>>,
    watcher: JoinHandle<()>,
    lock: Arc<dyn LeaderLock>,
    candidate: Candidate,
    config: ElectorConfig,
}

/// What the watch task tells the loop: the last event and whether the stream is up.
#[derive(Debug, Clone, Default)]
struct WatchStatus {
    healthy: bool,
    last: Option<LockEvent>,
}

impl Elector {
    /// Starts electing in the background. Must be called inside a Tokio runtime.
    pub fn spawn(lock: Arc<dyn LeaderLock>, config: ElectorConfig) -> Self {
        let (tx, rx) = watch::channel(LeaderState::Starting);
        let tx = Arc::new(tx);
        let leadership = Leadership::new(rx);
        let cancel = CancellationToken::new();
        let candidate = Candidate {
            identity: config.identity.clone(),
            lease_duration: config.timing.lease_duration,
        };
        let (wtx, wrx) = watch::channel(WatchStatus::default());
        let watcher = tokio::spawn(watch_loop(
            lock.clone(),
            wtx,
            config.timing,
            cancel.child_token(),
        ));
        let run = Run {
            lock: lock.clone(),
            candidate: candidate.clone(),
            timing: config.timing,
            tx: tx.clone(),
            events: wrx,
            held: None,
        };
        let task = tokio::spawn(run.run(cancel.child_token()));
        Elector {
            leadership,
            tx,
            cancel,
            task,
            watcher,
            lock,
            candidate,
            config,
        }
    }

    /// A handle that writers use to check leadership before each write.
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// The candidate this elector campaigns as.
    pub fn candidate(&self) -> &Candidate {
        &self.candidate
    }

    /// Graceful stop: refuse new writes, wait for in-flight writes, stop renewing, release.
    ///
    /// Returns whether the lock was released by us.
    pub async fn shutdown(self) -> Result<bool, LockError> {
        let timing = self.config.timing;
        // Writes in flight hold permits that end at the validity deadline at the latest.
        if tokio::time::timeout(timing.renew_deadline, self.leadership.close_and_drain())
            .await
            .is_err()
        {
            warn!("writes still in flight after the renew deadline; releasing anyway");
        }
        self.cancel.cancel();
        let held = self.task.await.unwrap_or(None);
        let _ = self.watcher.await;
        self.tx.send_replace(LeaderState::Stopped);
        let Some(term) = held else {
            return Ok(false);
        };
        if !self.config.release_on_shutdown {
            info!(%term, "stopped leading; leaving the lease to expire (release-on-shutdown off)");
            return Ok(false);
        }
        match tokio::time::timeout(
            timing.renew_deadline,
            self.lock.release(&self.candidate, term),
        )
        .await
        {
            Ok(Ok(released)) => {
                info!(%term, released, lock = %self.lock.describe(), "released leadership");
                Ok(released)
            }
            Ok(Err(e)) => {
                warn!(%term, error = %e, "release failed; the lease will expire on its own");
                Err(e)
            }
            Err(_) => Err(LockError::Timeout(timing.renew_deadline)),
        }
    }

    /// Stops at once without releasing, as a crash would (the lease expires on its own).
    pub async fn abort(self) {
        self.cancel.cancel();
        self.task.abort();
        self.watcher.abort();
        let _ = self.task.await;
        let _ = self.watcher.await;
        self.tx.send_replace(LeaderState::Stopped);
    }
}

struct Run {
    lock: Arc<dyn LeaderLock>,
    candidate: Candidate,
    timing: Timing,
    tx: Arc<watch::Sender<LeaderState>>,
    events: watch::Receiver<WatchStatus>,
    /// Our term and the end of its validity, while we lead.
    held: Option<(Term, Instant)>,
}

enum Wake {
    Cancelled,
    Timer,
    Expired,
    Event(Option<LockEvent>),
}

impl Run {
    async fn run(mut self, cancel: CancellationToken) -> Option<Term> {
        let me = self.candidate.holder();
        info!(identity = %me, lock = %self.lock.describe(), "campaigning for leadership");
        let mut next = Instant::now();
        loop {
            let expiry = self.held.map(|(_, until)| until);
            let wake = tokio::select! {
                biased;
                _ = cancel.cancelled() => Wake::Cancelled,
                _ = sleep_until(expiry.unwrap_or(next)), if expiry.is_some_and(|e| e <= next) => Wake::Expired,
                _ = sleep_until(next) => Wake::Timer,
                r = self.events.changed() => match r {
                    Ok(()) => Wake::Event(self.events.borrow_and_update().last.clone()),
                    // The watch task ended (only on cancel): keep polling.
                    Err(_) => { self.events = watch::channel(WatchStatus::default()).1; Wake::Event(None) }
                },
            };
            match wake {
                Wake::Cancelled => return self.held.map(|(t, _)| t),
                Wake::Expired => {
                    if let Some((term, until)) = self.held {
                        if Instant::now() >= until {
                            warn!(%term, "renew deadline passed without a successful renew; stepping down");
                            self.held = None;
                            self.publish(LeaderState::Follower {
                                holder: None,
                                term: None,
                            });
                            next = Instant::now();
                        }
                    }
                    continue;
                }
                Wake::Event(ev) => {
                    if !self.should_attempt_on(ev.as_ref(), &me, &mut next) {
                        continue;
                    }
                }
                Wake::Timer => {}
            }
            next = self.attempt(&me).await;
        }
    }

    /// Decides whether a change seen on the watch calls for an attempt now.
    fn should_attempt_on(&mut self, ev: Option<&LockEvent>, me: &str, next: &mut Instant) -> bool {
        match ev {
            Some(LockEvent::Changed(Some(rec))) if !rec.is_free() => {
                if rec.holder == me {
                    return false;
                }
                if self.held.is_some() {
                    // Someone else's record while we believe we lead: find out now.
                    return true;
                }
                self.publish(LeaderState::Follower {
                    holder: Some(rec.holder.clone()),
                    term: Some(rec.term),
                });
                // Never later than a lease from now, and never later than the backend's own
                // expiry hint from the last attempt: a replayed record (a reopened watch) must
                // not postpone a takeover that is due.
                let wait = rec.lease_duration.min(self.timing.lease_duration);
                *next = (*next).min(Instant::now() + wait);
                false
            }
            // Released, deleted, or the watch reconnected: look now.
            Some(_) => true,
            None => false,
        }
    }

    async fn attempt(&mut self, me: &str) -> Instant {
        let sent = Instant::now();
        // A process that was frozen past its validity wakes here: step down before anything else.
        if let Some((term, until)) = self.held {
            if sent >= until {
                warn!(%term, late = ?(sent - until), "renew deadline passed without a successful renew; stepping down");
                self.held = None;
                self.publish(LeaderState::Follower {
                    holder: None,
                    term: None,
                });
            }
        }
        // A leader's renew cannot help after its validity ends; a candidate gets the renew deadline.
        let limit = match self.held {
            Some((_, until)) => until.saturating_duration_since(sent),
            None => self.timing.renew_deadline,
        };
        let result = match tokio::time::timeout(
            limit.max(Duration::from_millis(1)),
            self.lock.try_acquire_or_renew(&self.candidate),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(LockError::Timeout(limit)),
        };
        let now = Instant::now();
        match result {
            Ok(Attempt::Leader { term }) => {
                let valid_until = sent + self.timing.renew_deadline;
                match self.held {
                    Some((old, _)) if old == term => {
                        debug!(%term, "renewed leadership")
                    }
                    Some((old, _)) => {
                        warn!(old_term = %old, %term, identity = %me, "leadership changed term");
                    }
                    None => {
                        info!(%term, identity = %me, lock = %self.lock.describe(), "became leader")
                    }
                }
                self.held = Some((term, valid_until));
                self.publish(LeaderState::Leader { term, valid_until });
                sent + self.timing.retry_period
            }
            Ok(Attempt::Follower {
                holder,
                term,
                retry_after,
            }) => {
                if let Some((old, _)) = self.held.take() {
                    warn!(term = %old, holder = ?holder, "lost leadership");
                } else if self.tx.borrow().term().is_none() {
                    debug!(holder = ?holder, term = ?term, "following");
                }
                self.publish(LeaderState::Follower { holder, term });
                let fallback = if self.events.borrow().healthy {
                    self.timing.lease_duration
                } else {
                    self.timing.jittered_retry()
                };
                now + retry_after.map_or(fallback, |r| r.min(fallback))
            }
            Err(e) => {
                match &e {
                    LockError::Refused(_) | LockError::Malformed(_) => {
                        error!(error = %e, lock = %self.lock.describe(), "lock attempt failed")
                    }
                    _ => warn!(error = %e, lock = %self.lock.describe(), "lock attempt failed"),
                }
                if let Some((term, until)) = self.held {
                    if now >= until {
                        warn!(%term, "renew deadline passed; stepping down");
                        self.held = None;
                        self.publish(LeaderState::Follower {
                            holder: None,
                            term: None,
                        });
                    }
                    // Keep trying to renew at the retry period while still valid.
                    return now + self.timing.retry_period;
                }
                if matches!(self.tx.borrow().clone(), LeaderState::Starting) {
                    self.publish(LeaderState::Follower {
                        holder: None,
                        term: None,
                    });
                }
                now + self.timing.jittered_retry()
            }
        }
    }

    fn publish(&self, state: LeaderState) {
        self.tx.send_if_modified(|cur| {
            if *cur == state {
                false
            } else {
                *cur = state;
                true
            }
        });
    }
}

/// Keeps a change stream open, reopening it with exponential backoff when it breaks.
async fn watch_loop(
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
                            warn!(error = %e, "lock watch broke; polling until it is back");
                            break;
                        }
                        None => {
                            debug!("lock watch ended; reopening");
                            break;
                        }
                    }
                }
            }
            Err(e) => warn!(error = %e, "cannot open lock watch; polling meanwhile"),
        }
        send(false, None);
        let delay = backoff.next().unwrap_or(timing.retry_period);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
