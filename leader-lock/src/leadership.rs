//! This replica's leadership as writers see it: [`Leadership`] and its [`WritePermit`]s, the
//! stream of [`LeadershipChange`]s, and why a write may not go ahead ([`NotLeader`],
//! [`GuardedError`]).

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::WatchStream;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use crate::record::Term;

mod changes;

pub use changes::{LeadershipChange, LeadershipChanges};

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
#[non_exhaustive]
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
/// Holding it delays the graceful release until the write is done (or the permit dropped): drop
/// it as soon as the write is over, never keep one across writes. A permit is no promise about
/// the future: it stays tied to the leadership it was taken under, and [`check`](Self::check)
/// fails once that leadership ended or its validity passed, for instance after the process was
/// frozen while holding it. Run writes with [`Leadership::run`] or [`WritePermit::run`], which
/// enforce that.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use leader_lock::Leadership;
/// use leader_lock::leadership::NotLeader;
///
/// let leadership = Leadership::always_leader();
/// let permit = leadership.check()?;
/// assert!(permit.remaining().is_some(), "time left before the deadline");
/// let sent = permit
///     .run(|permit| async move {
///         // ... read and prepare; then, with no await in between, check and send:
///         let term = permit.check()?;
///         Ok::<_, NotLeader>(format!("sent under term {term}"))
///     })
///     .await?; // the permit is dropped when the write is done
/// assert_eq!(sent, "sent under term disabled");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a permit proves nothing once dropped; run the write with it"]
pub struct WritePermit {
    /// The fencing term the write carries.
    pub term: Term,
    /// The validity deadline when the permit was taken; no write may be sent after it.
    pub valid_until: Instant,
    rx: watch::Receiver<LeaderState>,
    /// The first refusal [`check`](Self::check) gave, shared by the clones of this permit, so
    /// that [`run`](Self::run) can report a write that its own check stopped as
    /// [`GuardedError::NotLeader`] whatever error type the write turned the refusal into.
    refusal: Arc<OnceLock<NotLeader>>,
    _in_flight: TaskTrackerToken,
}

impl WritePermit {
    /// Time left until the validity deadline, or `None` once it has come (as for
    /// [`check`](Self::check), the deadline itself is no longer valid).
    pub fn remaining(&self) -> Option<Duration> {
        self.valid_until
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    /// Asks whether a request may be sent under this permit *now*: the leadership it was taken
    /// under is still the published one and still valid. Call it right before sending.
    ///
    /// Unlike [`Leadership::check`] it passes during a graceful shutdown: a write that already
    /// holds a permit may finish while the elector drains.
    ///
    /// # Errors
    /// [`NotLeader`] once the leadership the permit was taken under is over or past its
    /// deadline (whichever deadline is earlier: the permit's own never moves).
    pub fn check(&self) -> Result<Term, NotLeader> {
        let verdict = self.verdict();
        if let Err(refused) = &verdict {
            // Only the first refusal counts: it is the one the write saw.
            let _ = self.refusal.set(refused.clone());
        }
        verdict
    }

    fn verdict(&self) -> Result<Term, NotLeader> {
        let now = Instant::now();
        let state = self.rx.borrow().clone();
        match state {
            LeaderState::Leader { term, valid_until } if term == self.term => {
                // A renew moves the published deadline out; the permit's own never moves, so
                // the earlier of the two is the one a request must beat.
                let until = valid_until.min(self.valid_until);
                if now < until {
                    Ok(term)
                } else {
                    Err(NotLeader::Expired {
                        term,
                        ago: now - until,
                    })
                }
            }
            LeaderState::Follower { holder, .. } => Err(NotLeader::Follower { holder }),
            // Another term of ours (a lost and retaken lock) is another leadership.
            LeaderState::Leader { .. } | LeaderState::Starting => {
                Err(NotLeader::Follower { holder: None })
            }
            LeaderState::Stopped => Err(NotLeader::ShuttingDown),
        }
    }

    /// Runs one guarded write under this permit.
    ///
    /// The write starts only if [`check`](Self::check) passes now, and is abandoned (its future
    /// dropped) when the permit's validity deadline arrives. `write` gets the permit and must
    /// call [`check`](Self::check) again right before it sends its request: preparing a write
    /// (reading the object, say) can take a while, and leadership can end meanwhile. The permit
    /// is dropped when `write` returns.
    ///
    /// # Errors
    /// - [`GuardedError::NotLeader`] when the write could not start, or when the write's own
    ///   [`check`](Self::check) refused it and the write then failed (whatever error it turned
    ///   the refusal into: `permit.check()?` in a write returning `anyhow::Result` counts too);
    /// - [`GuardedError::Deadline`] when it did not finish in time;
    /// - [`GuardedError::Write`] with the write's own error otherwise.
    ///
    /// # Cancel safety
    /// Dropping the returned future drops the write and the permit with it.
    pub async fn run<T, E, F, Fut>(mut self, write: F) -> Result<T, GuardedError<E>>
    where
        F: FnOnce(WritePermit) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let term = self.check().map_err(GuardedError::NotLeader)?;
        // A slot of this write's own: a refusal seen before `run` is not this write's.
        let refusal = Arc::new(OnceLock::new());
        self.refusal = refusal.clone();
        let deadline = self.valid_until;
        match tokio::time::timeout_at(deadline, write(self)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(match refusal.get() {
                Some(refused) => GuardedError::NotLeader(refused.clone()),
                None => GuardedError::Write(e),
            }),
            Err(_) => Err(GuardedError::Deadline { term }),
        }
    }
}

/// Why a guarded write did not complete.
///
/// It is a [`std::error::Error`] for any write error that is `Debug + Display`, `anyhow::Error`
/// included, so `leadership.run(..).await?` works in a function returning `anyhow::Result` or
/// `Result<_, Box<dyn Error>>`. Its message is the write error's own (or the refusal's); the
/// write error's causes are not repeated as its [`source`](std::error::Error::source): match
/// [`GuardedError::Write`] to get the error itself.
///
/// # Examples
///
/// ```
/// use leader_lock::Leadership;
///
/// async fn reconcile(leadership: &Leadership) -> anyhow::Result<()> {
///     leadership
///         .run(|permit| async move {
///             permit.check()?; // a refusal here comes back as GuardedError::NotLeader
///             anyhow::Ok(())
///         })
///         .await?;
///     Ok(())
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// # reconcile(&Leadership::always_leader()).await
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum GuardedError<E> {
    /// This replica may not write: the write did not start, or its own check before sending
    /// refused it.
    NotLeader(NotLeader),
    /// The write was abandoned at the validity deadline of its term.
    Deadline {
        /// The term the write ran under.
        term: Term,
    },
    /// The write itself failed.
    Write(E),
}

// === impl GuardedError ===

impl<E: fmt::Display> fmt::Display for GuardedError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The inner formatter is passed on, so `{:#}` still shows an anyhow chain.
            GuardedError::NotLeader(n) => fmt::Display::fmt(n, f),
            GuardedError::Deadline { term } => {
                write!(f, "write abandoned at the validity deadline of term {term}")
            }
            GuardedError::Write(e) => fmt::Display::fmt(e, f),
        }
    }
}

/// `Display + Debug`, not `std::error::Error`, so that `anyhow::Error` (which is no
/// `std::error::Error`) qualifies; a `From` into `anyhow::Error` would overlap anyhow's blanket
/// impl instead.
impl<E: fmt::Debug + fmt::Display> std::error::Error for GuardedError<E> {}

/// One published state and the instant it took effect.
pub type Stamped = (Instant, LeaderState);

/// Observers of every publication (the conformance suite's split-brain checker).
type Taps = Arc<Mutex<Vec<mpsc::UnboundedSender<Stamped>>>>;

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking observer must not poison publication for the elector.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sending side of a [`Leadership`]: every change of state goes out through it.
#[derive(Debug)]
pub(crate) struct Publisher {
    tx: watch::Sender<LeaderState>,
    taps: Taps,
    sighted: Sighted,
}

/// When the lock last showed this replica its record: shared by a publisher and its handles.
type Sighted = Arc<Mutex<Option<Instant>>>;

impl Publisher {
    /// A publisher starting at `initial`, and the leadership handle it feeds.
    pub(crate) fn channel(initial: LeaderState) -> (Arc<Publisher>, Leadership) {
        let (tx, rx) = watch::channel(initial);
        let taps = Taps::default();
        let sighted = Sighted::default();
        let leadership = Leadership {
            rx,
            closing: Arc::new(AtomicBool::new(false)),
            in_flight: TaskTracker::new(),
            taps: taps.clone(),
            sighted: sighted.clone(),
            _publisher: None,
        };
        (Arc::new(Publisher { tx, taps, sighted }), leadership)
    }

    /// Notes that the lock answered with its record (an attempt's answer, a watch event) as of
    /// `at`: how fresh the holder in the published state is.
    pub(crate) fn sighted(&self, at: Instant) {
        let mut last = guard(&self.sighted);
        // Two sources (the loop's attempts, its watch) may report out of order: keep the newest.
        if last.is_none_or(|l| l < at) {
            *last = Some(at);
        }
    }

    /// Publishes `state` unless it is the current one; returns whether it changed.
    pub(crate) fn publish(&self, state: LeaderState) -> bool {
        self.tx.send_if_modified(|cur| {
            if *cur == state {
                return false;
            }
            // Stamped under the channel's write lock: no `check()` can read the new state before
            // this instant, nor the old one after it. Observers get exact publication times.
            let at = Instant::now();
            guard(&self.taps).retain(|tap| tap.send((at, state.clone())).is_ok());
            *cur = state;
            true
        })
    }

    /// The state last published.
    pub(crate) fn current(&self) -> LeaderState {
        self.tx.borrow().clone()
    }
}

/// Publishes states to a [`Leadership::scripted`] handle, for tests of what consumes one.
#[cfg(feature = "test-util")]
#[derive(Debug, Clone)]
pub struct Scripted(Arc<Publisher>);

#[cfg(feature = "test-util")]
impl Scripted {
    /// Publishes `state`, as an elector would.
    pub fn publish(&self, state: LeaderState) {
        self.0.publish(state);
    }

    /// Notes a sighting of the lock's record at `at`, as the elector does on each answer.
    pub fn sighted(&self, at: Instant) {
        self.0.sighted(at);
    }
}

/// A cheap, cloneable view of this replica's leadership, for any task.
#[derive(Debug, Clone)]
pub struct Leadership {
    rx: watch::Receiver<LeaderState>,
    closing: Arc<AtomicBool>,
    in_flight: TaskTracker,
    /// Read by [`record`](Self::record).
    taps: Taps,
    /// Read by [`last_sighting`](Self::last_sighting).
    sighted: Sighted,
    /// The sender of an [`always_leader`](Self::always_leader) handle, kept alive so that a wait
    /// for the next change waits instead of failing at once.
    _publisher: Option<Arc<Publisher>>,
}

impl Leadership {
    /// A leadership that always holds, for a program that runs without leader election (a
    /// single replica, a test): every [`check`](Self::check) passes.
    ///
    /// Its term is [`Term::DISABLED`] (shown as `disabled`), not a number: no election took place,
    /// and no real term may be mistaken for it.
    pub fn always_leader() -> Self {
        // Far enough to never expire in practice, near enough not to overflow Instant.
        let valid_until = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        let (publisher, mut leadership) = Publisher::channel(LeaderState::Leader {
            term: Term::DISABLED,
            valid_until,
        });
        leadership._publisher = Some(publisher);
        leadership
    }

    /// A leadership whose states a test publishes by hand through the returned [`Scripted`].
    #[cfg(feature = "test-util")]
    pub fn scripted(initial: LeaderState) -> (Scripted, Self) {
        let (publisher, leadership) = Publisher::channel(initial);
        (Scripted(publisher), leadership)
    }

    /// The current state, stamped now, then every state published afterwards (renewals
    /// included) with the instant it took effect: for split-brain checkers and for logs that
    /// must say when a leadership began and ended, not when a task got round to looking.
    pub fn record(&self) -> (Stamped, mpsc::UnboundedReceiver<Stamped>) {
        let (tx, rx) = mpsc::unbounded_channel();
        // The channel's read lock keeps a publication from slipping in between the snapshot and
        // the tap (a publication takes the write lock first, then the taps).
        let current = self.rx.borrow();
        guard(&self.taps).push(tx);
        ((Instant::now(), current.clone()), rx)
    }

    /// Asks whether a write may start now. Synchronous and cheap: call it before every write.
    ///
    /// The permit delays a graceful release ([`Elector::shutdown`](crate::Elector::shutdown))
    /// for as long as it is kept: take one per write and drop it when the write is done.
    ///
    /// # Errors
    /// [`NotLeader`] while another replica leads (or nobody does yet), once this replica's
    /// validity has passed, or during a shutdown.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_lock::Leadership;
    /// use leader_lock::leadership::NotLeader;
    ///
    /// fn write(leadership: &Leadership) -> Result<(), NotLeader> {
    ///     let permit = leadership.check()?;
    ///     // ... send the request carrying `permit.term`, finished by `permit.valid_until`;
    ///     // `Leadership::run` enforces the deadline for you.
    ///     drop(permit);
    ///     Ok(())
    /// }
    /// assert!(write(&Leadership::always_leader()).is_ok());
    /// ```
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
                    // Likewise a withdrawal, which publishes the end first, then waits for the
                    // tokens it sees.
                    if self.rx.borrow().term() != Some(term) {
                        return Err(NotLeader::Follower { holder: None });
                    }
                    Ok(WritePermit {
                        term,
                        valid_until,
                        rx: self.rx.clone(),
                        refusal: Arc::default(),
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

    /// Runs one guarded write: takes a permit ([`check`](Self::check)) and runs `write` under it
    /// ([`WritePermit::run`]), so the write starts only while leadership is valid, is abandoned
    /// at the validity deadline, and can [`check`](WritePermit::check) again right before it
    /// sends. This is the one way writes should go out.
    ///
    /// # Errors
    /// As [`WritePermit::run`]: a refusal by the write's own check comes back as
    /// [`GuardedError::NotLeader`].
    ///
    /// # Cancel safety
    /// As [`WritePermit::run`]: dropping the returned future drops the write and the permit
    /// with it.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use leader_lock::Leadership;
    /// use leader_lock::leadership::{GuardedError, NotLeader};
    ///
    /// let leadership = Leadership::always_leader();
    /// let written = leadership
    ///     .run(|permit| async move {
    ///         // ... read and prepare ...
    ///         let term = permit.check()?; // right before the request goes out
    ///         Ok::<_, NotLeader>(format!("written under term {term}"))
    ///     })
    ///     .await;
    /// match written {
    ///     Ok(what) => assert_eq!(what, "written under term disabled"),
    ///     // not ours to write
    ///     Err(GuardedError::NotLeader(_) | GuardedError::Deadline { .. }) => {}
    ///     Err(e) => panic!("the write failed: {e}"),
    /// }
    /// # }
    /// ```
    pub async fn run<T, E, F, Fut>(&self, write: F) -> Result<T, GuardedError<E>>
    where
        F: FnOnce(WritePermit) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self.check().map_err(GuardedError::NotLeader)?;
        permit.run(write).await
    }

    /// True when a write could start now.
    pub fn is_leader(&self) -> bool {
        self.check().is_ok()
    }

    /// The state as last published by the elector (validity is not re-checked here).
    pub fn state(&self) -> LeaderState {
        self.rx.borrow().clone()
    }

    /// When the lock last showed this replica its record (an answer to an attempt, or a change
    /// on its watch), so how old the holder in [`state`](Self::state) may be: a follower that
    /// lost its backend keeps naming the last holder it saw, and this says since when. For an
    /// answer it is the instant the request was sent, never later.
    ///
    /// While the holder renews and the backend answers, a sighting is at most about a lease
    /// old: a Lease's renewal shows on a follower's watch, and where a renewal changes nothing a
    /// follower sees (etcd's keep-alive, Redis's expiry), the follower looks when the lease
    /// would otherwise have run out. `None` before the first sighting, and for a leadership with
    /// no elector ([`always_leader`](Self::always_leader)).
    pub fn last_sighting(&self) -> Option<Instant> {
        *guard(&self.sighted)
    }

    /// A receiver that wakes on every change of state, each renewal included (it moves the
    /// validity deadline). For a new term and the end of one only, see [`changes`](Self::changes).
    pub fn subscribe(&self) -> watch::Receiver<LeaderState> {
        self.rx.clone()
    }

    /// The changes of this replica's leadership: a term that starts, a term that ends; never a
    /// renewal. If this replica leads when it is called, the first item is that term's
    /// [`StartedLeading`](LeadershipChange::StartedLeading); each term's
    /// [`StoppedLeading`](LeadershipChange::StoppedLeading) comes before the next one starts,
    /// even when the stream only sees the new term (states published faster than it is
    /// polled are skipped). It ends after the elector is gone.
    ///
    /// The end of a term comes when the elector publishes it: at the validity deadline at the
    /// latest, on the elector's own timer. Whether a write may go out is still
    /// [`check`](Self::check)'s answer (or [`run`](Self::run)'s, or the gate's), never this
    /// stream's.
    ///
    /// # Cancel safety
    /// Cancel safe: a change is taken out of the stream only when `next()` returns it.
    ///
    /// # Examples
    ///
    /// A trigger that fires when this replica starts leading, for kube-runtime's
    /// `Controller::reconcile_all_on` (a follower's writes were refused, so a new leader catches
    /// up at once; leader-lock-kubernetes' crate docs show the whole controller):
    ///
    /// ```
    /// use futures::{future, Stream, StreamExt};
    /// use leader_lock::{Leadership, LeadershipChange};
    ///
    /// fn new_terms(leadership: &Leadership) -> impl Stream<Item = ()> + Send + Sync + 'static {
    ///     leadership.changes().filter_map(|change| {
    ///         future::ready(
    ///             matches!(change, LeadershipChange::StartedLeading { .. }).then_some(()),
    ///         )
    ///     })
    /// }
    /// # let _ = new_terms(&Leadership::always_leader());
    /// ```
    ///
    /// A runnable one:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use futures::StreamExt;
    /// use leader_lock::{Leadership, LeadershipChange, Term};
    ///
    /// let mut changes = Leadership::always_leader().changes();
    /// let first = changes.next().await;
    /// assert_eq!(first, Some(LeadershipChange::StartedLeading { term: Term::DISABLED }));
    /// # }
    /// ```
    pub fn changes(&self) -> LeadershipChanges {
        LeadershipChanges::new(WatchStream::new(self.rx.clone()))
    }

    /// Waits until `check()` passes (or the elector stops); returns the permit.
    ///
    /// The permit delays a graceful release for as long as it is kept: to wait for leadership
    /// and then write now and then, drop it at once (`drop(leadership.wait_leader().await?)`)
    /// and take a fresh one per write with [`check`](Self::check) or [`run`](Self::run).
    ///
    /// # Errors
    /// [`NotLeader::ShuttingDown`] once the elector stops.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future before it completes takes no permit.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
    ///
    /// let config = ElectorConfig {
    ///     identity: Identity::new("pod-a"),
    ///     timing: Timing::default(),
    ///     release_on_shutdown: true,
    /// };
    /// let elector = Elector::spawn(Arc::new(MemoryStore::new().lock("x")), config)?;
    /// let leadership = elector.leadership();
    /// drop(leadership.wait_leader().await?); // leading now; keep no permit around
    /// assert!(leadership.is_leader());
    /// elector.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
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

    /// Waits for the permits in flight to be dropped, until `until` at the latest (past it,
    /// none of them may send). New ones are refused by what was published before.
    pub(crate) async fn wait_in_flight(&self, until: Instant) {
        // Polled: a TaskTracker's wait needs it closed, and closing is the shutdown's.
        while !self.in_flight.is_empty() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(2).min(until - Instant::now())).await;
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
mod tests;
