//! The elector: one loop that acquires or renews the lock and publishes this replica's
//! [`Leadership`].
//!
//! Invariants (docs/leader-election.md):
//! 1. Validity is counted from the instant an attempt was *sent*: a successful attempt sent at
//!    `sent` makes us leader until `sent + renew_deadline`, however late its reply arrives (or
//!    from the earlier instant the lock says its hold counts from: `Attempt::Leader::held_from`).
//! 2. A leader that has not renewed by that deadline steps down at that instant, on its own timer,
//!    without waiting for the lock to answer.
//! 3. Only a lock's positive answer under a real term makes us leader: a failure, a timeout, a
//!    reply after the validity it would grant, or term 0 or the disabled marker never do.
//! 4. A term lower than one already seen is an error: the backend lost or rewrote the lock.
//! 5. The loop never spins: it wakes on a timer, a lock event or a cancel. A watch task that dies
//!    (even by a panic) is reported and restarted with backoff; the loop polls meanwhile.
//! 6. A cancel is answered at once, even during an attempt, so a shutdown never waits for one.
//! 7. A withdrawn [`Candidacy`] attempts nothing: a leader stops publishing its leadership,
//!    waits for the permits in flight (no longer than their validity), then releases, so no write
//!    of it lands after a successor's first.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::clock;
use crate::config::ConfigError;
use crate::leadership::{LeaderState, Leadership, Publisher};
use crate::lock::{Attempt, LeaderLock, LockError, LockEvent};
use crate::record::{Candidate, Identity, LockRecord, Term};
use crate::timing::Timing;

mod candidacy;
mod decide;
mod stream;

pub use candidacy::Candidacy;
use decide::{decide, not_leading, regression, Context, Decision, Held, Note};
use stream::WatchTask;

/// How long [`Elector::shutdown`] may take in all: draining writes, then releasing.
///
/// Kubernetes kills a pod `terminationGracePeriodSeconds` (30 s by default) after SIGTERM; this
/// leaves room for the last leader-election Event and the exit itself.
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(20);

/// How long a replica that has released the lock holds back the rest of its shutdown (closing
/// its watches, a last Kubernetes Event): a successor is taking over at that moment, and its
/// acquisition and first writes should have the servers to themselves.
///
/// Without it, the released replica's own requests (two Events and a read, its watches
/// closing) reach the apiserver at the moment the successor takes the Lease and writes, and
/// slow that takeover down (docs/benchmarks.md, "The apiserver's floor"). A second covers a
/// takeover on a loaded cluster with room; it only delays the exit of a process that no longer
/// leads.
pub const AFTER_RELEASE_QUIET: Duration = Duration::from_secs(1);

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
///
/// # Usage
///
/// Spawn one elector per process and lock ([`Elector::spawn`], which refuses a timing the lock
/// cannot honour), hand [`Elector::leadership`] to every task that writes, take a
/// [`WritePermit`](crate::WritePermit) before each write ([`Leadership::check`],
/// [`Leadership::run`]), and call [`Elector::shutdown`] on the way out: it refuses new writes,
/// waits for the permits in flight, then releases the lock so a follower takes over at once.
///
/// # Examples
///
/// A single contender on the in-memory lock: it leads, writes once, and hands over.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
///
/// let elector = Elector::spawn(
///     Arc::new(MemoryStore::new().lock("my-controller")),
///     ElectorConfig {
///         identity: Identity::new("pod-a"),
///         timing: Timing::default(),
///         release_on_shutdown: true,
///     },
/// )?;
/// let leadership = elector.leadership();
/// // Drop the permit once the write is done: a permit kept holds back the release.
/// let permit = leadership.wait_leader().await?;
/// let term = permit.run(|p| async move { p.check() }).await?;
/// assert!(term.is_elected());
/// assert!(elector.shutdown().await?, "released for the next leader");
/// # Ok(())
/// # }
/// ```
pub struct Elector {
    leadership: Leadership,
    publisher: Arc<Publisher>,
    cancel: CancellationToken,
    task: JoinHandle<Ended>,
    lock: Arc<dyn LeaderLock>,
    candidate: Candidate,
    config: ElectorConfig,
    candidacy: Candidacy,
}

impl Elector {
    /// Checks the timing ([`Timing::validate`]) and the lock's own rules for it
    /// ([`LeaderLock::validate`]), then starts electing in the background.
    ///
    /// # Errors
    /// The [`ConfigError`] of the first rule broken; nothing was sent to the lock then.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn spawn(lock: Arc<dyn LeaderLock>, config: ElectorConfig) -> Result<Self, ConfigError> {
        config.timing.validate()?;
        lock.validate(&config.timing)?;
        let (publisher, leadership) = Publisher::channel(LeaderState::Starting);
        let cancel = CancellationToken::new();
        let candidate = Candidate {
            identity: config.identity.clone(),
            lease_duration: config.timing.lease_duration,
        };
        let token = cancel.child_token();
        let (candidacy, campaigning) = watch::channel(true);
        let run = Run {
            lock: lock.clone(),
            candidate: candidate.clone(),
            timing: config.timing,
            publisher: publisher.clone(),
            watch: WatchTask::spawn(lock.clone(), config.timing, &token),
            held: None,
            last_term: None,
            seen: None,
            answered: false,
            campaigning,
            leadership: leadership.clone(),
        };
        let task = tokio::spawn(run.run(token));
        Ok(Elector {
            leadership,
            publisher,
            cancel,
            task,
            lock,
            candidate,
            config,
            candidacy: Candidacy::new(candidacy),
        })
    }

    /// The switch that makes this elector stand aside and campaign again: for a replica whose
    /// leadership is worth nothing while something it serves is down (a controller that stopped
    /// renewing its own election through `gateway-leader proxy`), so that it never holds the
    /// other replicas back.
    pub fn candidacy(&self) -> Candidacy {
        self.candidacy.clone()
    }

    /// A handle that writers use to check leadership before each write.
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// The candidate this elector campaigns as.
    pub fn candidate(&self) -> &Candidate {
        &self.candidate
    }

    /// Graceful stop within [`SHUTDOWN_BUDGET`]: see [`shutdown_within`](Self::shutdown_within).
    ///
    /// # Errors
    /// As [`shutdown_within`](Self::shutdown_within).
    ///
    /// # Cancel safety
    /// As [`shutdown_within`](Self::shutdown_within).
    pub async fn shutdown(self) -> Result<bool, LockError> {
        self.shutdown_within(SHUTDOWN_BUDGET).await
    }

    /// Graceful stop: refuse new writes and stop renewing, wait for in-flight writes, release,
    /// then close the change stream; all within `budget`.
    ///
    /// The drain gets at most half the budget, and never more than the renew deadline (by which
    /// every permit has ended); the loop stops at once, beside the drain; the release gets what
    /// is left. Returns whether the lock was released by us.
    ///
    /// # Errors
    /// The release's own error, or [`LockError::Timeout`] when it did not finish in the budget;
    /// either way the lease then expires on its own.
    ///
    /// # Cancel safety
    /// Not cancel safe: bound it with `budget`, not with a timeout around it. Its first poll
    /// refuses new writes and stops the loop for good; dropped after that, it is a crash from
    /// the lock's point of view: the lock is not released (or a release under way is cut short,
    /// [`LeaderLock::release`]) and the lease expires on its own.
    pub async fn shutdown_within(mut self, budget: Duration) -> Result<bool, LockError> {
        let deadline = Instant::now() + budget;
        let drain = self.config.timing.renew_deadline.min(budget / 2);
        // The loop stops beside the drain, not after it: the release waits for both, and a
        // follower for the release. Writes in flight need no renew to finish: each ends by the
        // validity its permit was given, which no longer moves.
        self.cancel.cancel();
        let drained = async {
            if tokio::time::timeout(drain, self.leadership.close_and_drain())
                .await
                .is_err()
            {
                warn!(
                    waited = ?drain,
                    "writes still in flight after the drain budget; releasing anyway"
                );
            }
            // The phases of a release at debug level, on the bench's time line: where its
            // milliseconds go (docs/benchmarks.md).
            debug!(mono_ms = clock::mono_ms(), "writes drained");
        };
        let ((), ended) = tokio::join!(drained, &mut self.task);
        let (held, watch) = match ended {
            Ok(Ended { held, watch }) => (held, Some(watch)),
            Err(e) => {
                error!(error = %describe_join_error(e), "the elector task failed; not releasing");
                (None, None)
            }
        };
        debug!(mono_ms = clock::mono_ms(), "elector loop ended");
        self.publisher.publish(LeaderState::Stopped);
        let released = self.release(held, deadline, budget).await;
        // A follower is waiting for the release, not for our change stream to close: that is
        // torn down after (it was cancelled with the loop and is ending on its own meanwhile).
        if let Some(mut watch) = watch {
            watch.stop().await;
        }
        released
    }

    /// Releases `held` (when configured to), within what is left until `deadline`.
    async fn release(
        &self,
        held: Option<Term>,
        deadline: Instant,
        budget: Duration,
    ) -> Result<bool, LockError> {
        let Some(term) = held else {
            // A follower leaving: its lock may keep a candidacy that a leader's release could
            // hand the lock to; taken back before this process is gone.
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lock.withdraw(&self.candidate)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    warn!(error = %e.chain(),
                        "withdrawing the candidacy failed; it ends with its lease")
                }
                Err(_) => {
                    warn!(
                        budget = ?budget,
                        "withdrawing the candidacy did not finish within the shutdown budget; \
                         it ends with its lease"
                    )
                }
            }
            return Ok(false);
        };
        if !self.config.release_on_shutdown {
            info!(
                term = %term,
                "stopped leading; leaving the lease to expire (release-on-shutdown off)"
            );
            return Ok(false);
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        let outcome = tokio::time::timeout(left, self.lock.release(&self.candidate, term)).await;
        // The instants the release was sent and returned, as `mono_ms` (CLOCK_MONOTONIC) like
        // the leadership lines of `gateway-leader run`, so the bench times signal → release sent
        // (our own part) and signal → lock released (with the server's) (docs/benchmarks.md).
        let returned = Instant::now();
        match outcome {
            Ok(Ok(released)) => {
                info!(term = %term, released, lock = %self.lock.describe(),
                    sent_mono_ms = clock::instant_mono_ms(sent),
                    mono_ms = clock::instant_mono_ms(returned), "released leadership");
                Ok(released)
            }
            Ok(Err(e)) => {
                warn!(term = %term, error = %e.chain(),
                    "release failed; the lease will expire on its own");
                Err(e)
            }
            Err(_) => {
                warn!(
                    term = %term,
                    budget = ?budget,
                    "release did not finish within the shutdown budget; \
                     the lease will expire on its own"
                );
                Err(LockError::Timeout(left))
            }
        }
    }

    /// Stops at once without releasing, as a crash would (the lease expires on its own).
    ///
    /// It publishes [`LeaderState::Stopped`], so this replica stops passing `check()` at once:
    /// to test a leader that crashed while others still see it valid, hang its lock instead.
    ///
    /// # Cancel safety
    /// Its first poll stops the loop and aborts its task; dropped after that, only
    /// [`LeaderState::Stopped`] may be left unpublished, and a permit can then be taken until the
    /// validity deadline already published, as from a leader that crashed.
    pub async fn abort(mut self) {
        self.cancel.cancel();
        self.task.abort();
        let _ = (&mut self.task).await;
        self.publisher.publish(LeaderState::Stopped);
    }
}

/// Dropped without [`shutdown`](Elector::shutdown) or [`abort`](Elector::abort) (an embedder's
/// task that ended early, a panic unwinding), the elector stops as `abort` does: the loop is
/// cancelled, nothing is released (the lease expires on its own) and [`LeaderState::Stopped`] is
/// published, so no write of this replica starts afterwards. Left running, its loop would keep
/// renewing a leadership whose owner is gone, and block every other replica for good.
impl Drop for Elector {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
        self.publisher.publish(LeaderState::Stopped);
    }
}

/// A panic's message, or the join error itself.
pub(super) fn describe_join_error(e: JoinError) -> String {
    if !e.is_panic() {
        return e.to_string();
    }
    let payload = e.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = payload.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

/// What the loop leaves when it stops: the term it held, and its change stream, to be closed
/// once the lock is released.
struct Ended {
    held: Option<Term>,
    watch: WatchTask,
}

struct Run {
    lock: Arc<dyn LeaderLock>,
    candidate: Candidate,
    timing: Timing,
    publisher: Arc<Publisher>,
    watch: WatchTask,
    held: Option<Held>,
    last_term: Option<Term>,
    /// Another holder's record as the watch last showed it.
    seen: Option<LockRecord>,
    /// The last attempt was answered: only then may the watch put the next one off. A new
    /// elector's first attempt, or the one after a failure, is what registers it with the lock
    /// (an etcd follower's candidacy); a watch that showed the holder renewing before it would
    /// otherwise put it off for as long as the holder renews.
    answered: bool,
    /// Whether to attempt at all ([`Candidacy`]).
    campaigning: watch::Receiver<bool>,
    /// The permits in flight, which a withdrawal waits for before it releases.
    leadership: Leadership,
}

/// Why the loop woke up.
enum Wake {
    /// Shutdown.
    Cancelled,
    /// Our validity deadline arrived before the next attempt.
    Expired,
    /// Time for the next attempt.
    Timer,
    /// The change stream saw something (`None`: nothing worth an attempt).
    Event(Option<LockEvent>),
    /// The watch task ended without a cancel.
    WatchEnded,
    /// Time to start a new watch task.
    RestartWatch,
    /// The [`Candidacy`] was withdrawn or resumed.
    Candidacy,
}

/// How far off the next attempt is put while the candidacy is withdrawn: never, in practice
/// (a resume wakes the loop), near enough not to overflow an `Instant`.
const ASIDE: Duration = Duration::from_secs(24 * 3600);

impl Run {
    async fn run(mut self, cancel: CancellationToken) -> Ended {
        let me = self.candidate.holder();
        info!(identity = %me, lock = %self.lock.describe(), "campaigning for leadership");
        let mut next = Instant::now();
        loop {
            let expiry = self.held.map(|h| h.valid_until);
            let restart = self.watch.restart_at;
            let running = self.watch.handle.is_some();
            let wake = tokio::select! {
                biased;
                _ = cancel.cancelled() => Wake::Cancelled,
                _ = sleep_until(expiry.unwrap_or(next)), if expiry.is_some_and(|e| e <= next) =>
                    Wake::Expired,
                _ = sleep_until(next) => Wake::Timer,
                r = self.watch.rx.changed(), if running => match r {
                    Ok(()) => Wake::Event(self.watch.rx.borrow_and_update().last.clone()),
                    Err(_) => Wake::WatchEnded,
                },
                _ = sleep_until(restart.unwrap_or(next)), if restart.is_some() =>
                    Wake::RestartWatch,
                // The sender lives as long as the elector, whose drop cancels this loop.
                Ok(()) = self.campaigning.changed() => Wake::Candidacy,
            };
            match wake {
                Wake::Cancelled => {
                    debug!(mono_ms = clock::mono_ms(), "elector loop saw the cancel");
                    break;
                }
                Wake::Expired => {
                    if self.step_down_if_expired(Instant::now()) {
                        next = Instant::now();
                    }
                    continue;
                }
                Wake::Event(ev) => {
                    if !self.should_attempt_on(ev.as_ref(), &me, &mut next)
                        || !*self.campaigning.borrow()
                    {
                        continue;
                    }
                }
                Wake::WatchEnded => {
                    if self.watch.ended(&cancel).await {
                        // Without the stream nothing wakes us on a change: poll meanwhile.
                        next = next.min(Instant::now() + self.timing.jittered_retry());
                    }
                    continue;
                }
                Wake::RestartWatch => {
                    self.watch.restart(&cancel);
                    continue;
                }
                Wake::Candidacy => {
                    if *self.campaigning.borrow_and_update() {
                        info!(identity = %me, "campaigning again");
                        next = Instant::now();
                    } else {
                        tokio::select! {
                            biased;
                            _ = cancel.cancelled() => break,
                            () = self.stand_aside() => {}
                        }
                        next = Instant::now() + ASIDE;
                    }
                    continue;
                }
                Wake::Timer if !*self.campaigning.borrow() => {
                    next = Instant::now() + ASIDE;
                    continue;
                }
                Wake::Timer => {}
            }
            // The attempt's outcome is unknown when a cancel drops it: the lock may record us, but
            // we never published that leadership, and the record expires by itself.
            next = tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                next = self.attempt(&me) => next,
            };
        }
        Ended {
            held: self.held.map(|h| h.term),
            watch: self.watch,
        }
    }

    /// Steps down when our validity has ended by `now`; returns whether it did.
    fn step_down_if_expired(&mut self, now: Instant) -> bool {
        match self.held {
            Some(h) if now >= h.valid_until => {
                warn!(
                    term = %h.term,
                    late = ?(now - h.valid_until),
                    "renew deadline passed without a successful renew; stepping down"
                );
                self.held = None;
                self.publisher.publish(not_leading());
                true
            }
            _ => false,
        }
    }

    /// Notes a term the lock reported; a lower one than the latest is an error.
    fn see(&mut self, term: Term) {
        if let Some(previous) = regression(self.last_term, term) {
            self.log_regression(previous, term);
        }
        self.last_term = Some(term);
    }

    fn log_regression(&self, previous: Term, term: Term) {
        error!(
            term = %term,
            previous_term = %previous,
            lock = %self.lock.describe(),
            "the lock's term went backwards: its backend lost or rewrote the lock's state, \
             so terms no longer order leaderships"
        );
    }

    /// Decides whether a change seen on the watch calls for an attempt now.
    fn should_attempt_on(&mut self, ev: Option<&LockEvent>, me: &str, next: &mut Instant) -> bool {
        match ev {
            Some(LockEvent::Changed(Some(rec))) if !rec.is_free() => {
                if rec.holder == me {
                    // Our own write, or (while we hold nothing) a lock handed to us by its last
                    // holder's release, which the lock takes on an attempt: now, not a lease on.
                    return self.held.is_none();
                }
                if self.held.is_some() {
                    // Someone else's record while we believe we lead: find out now.
                    return true;
                }
                self.see(rec.term);
                self.publisher.sighted(Instant::now());
                self.publisher.publish(LeaderState::Follower {
                    holder: Some(rec.holder.clone()),
                    term: Some(rec.term),
                });
                // A record that changed (a renewal, a new holder) cannot expire before a lease
                // from now: the next look is then, whatever an earlier answer said, so a follower
                // whose watch shows the holder renewing sends nothing at all. A replayed record
                // (a reopened watch) moves nothing later: a takeover that is due stays due.
                let wait = rec.lease_duration.min(self.timing.lease_duration);
                let due = Instant::now() + wait;
                let changed = self.seen.as_ref() != Some(rec);
                self.seen = Some(rec.clone());
                *next = if changed && self.answered {
                    due
                } else {
                    (*next).min(due)
                };
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
        self.step_down_if_expired(sent);
        // A leader's renew cannot help after its validity ends; a candidate gets the renew
        // deadline.
        let limit = match self.held {
            Some(h) => h.valid_until.saturating_duration_since(sent),
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
        self.answered = result.is_ok();
        if result.is_ok() {
            self.publisher.sighted(sent);
        }
        let context = Context {
            timing: self.timing,
            held: self.held,
            last_term: self.last_term,
            watch_healthy: self.watch.healthy(),
            starting: matches!(self.publisher.current(), LeaderState::Starting),
            jittered_retry: self.timing.jittered_retry(),
        };
        let d = decide(&context, sent, now, &result);
        self.log(me, &d, &result);
        self.held = d.held;
        self.last_term = d.last_term;
        if let Some(state) = d.publish {
            self.publisher.publish(state);
        }
        d.next
    }

    fn log(&self, me: &str, d: &Decision, result: &Result<Attempt, LockError>) {
        let lock = self.lock.describe();
        if let (Some(previous), Some(term)) = (d.regressed_from, d.last_term) {
            self.log_regression(previous, term);
        }
        if let Err(e) = result {
            match e {
                LockError::Refused { .. } | LockError::Malformed { .. } => {
                    error!(error = %e.chain(), lock = %lock, "lock attempt failed")
                }
                _ => warn!(error = %e.chain(), lock = %lock, "lock attempt failed"),
            }
        }
        match &d.note {
            Note::Became(term) => {
                info!(term = %term, identity = %me, lock = %lock, "became leader")
            }
            Note::Renewed(term) => debug!(term = %term, "renewed leadership"),
            Note::NewTerm { old, term } => {
                warn!(
                    old_term = %old,
                    term = %term,
                    identity = %me,
                    "leadership continued under another term"
                )
            }
            Note::Lost { term, holder } => warn!(term = %term,
                holder = holder.as_deref().unwrap_or("unknown"), "lost leadership"),
            Note::Following => match &d.publish {
                // Once per change of holder or term, not once per poll.
                Some(state @ LeaderState::Follower { holder, term })
                    if *state != self.publisher.current() =>
                {
                    debug!(
                        holder = holder.as_deref().unwrap_or("unknown"),
                        term = term.map(tracing::field::display),
                        "following"
                    );
                }
                _ => {}
            },
            Note::Failed {
                stepped_down: Some(term),
            } => warn!(term = %term, "renew deadline passed; stepping down"),
            Note::Failed { stepped_down: None } => {}
            Note::NotElected(term) => error!(
                term = %term,
                lock = %lock,
                "the lock granted a term that is no real leadership (0 or the disabled marker); \
                 not leading"
            ),
            Note::TooLate(term) => warn!(term = %term, lock = %lock,
                "the lock answered after the validity it would grant had ended; not leading"),
        }
    }
}

#[cfg(test)]
mod tests;
