//! What the elector's tests share: timing, spawning, scripted and counting locks, logs.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use leader_lock::backend::{
    Attempt, Candidate, LeaderLock, LockError, LockEvent, LockEventStream, LockRecord,
};
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState, Term, Timing};
use tokio::sync::mpsc;
use tokio::time::Instant;

pub(crate) fn timing() -> Timing {
    Timing::new(
        Duration::from_millis(1500),
        Duration::from_millis(1000),
        Duration::from_millis(200),
    )
    .expect("valid")
}

pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) fn spawn_with(
    lock: Arc<dyn LeaderLock>,
    id: &str,
    release: bool,
    timing: Timing,
) -> Elector {
    Elector::spawn(
        lock,
        ElectorConfig {
            identity: Identity::new(id),
            timing,
            release_on_shutdown: release,
        },
    )
    .expect("a valid timing")
}

pub(crate) fn spawn(lock: Arc<dyn LeaderLock>, id: &str, release: bool) -> Elector {
    spawn_with(lock, id, release, timing())
}

pub(crate) fn valid_until(s: &LeaderState) -> Instant {
    match s {
        LeaderState::Leader { valid_until, .. } => *valid_until,
        other => panic!("not leading: {other:?}"),
    }
}

/// A lock whose change stream never opens: followers must still take over by polling.
pub(crate) struct NoWatch(pub(crate) Arc<dyn LeaderLock>);

#[async_trait]
impl LeaderLock for NoWatch {
    fn describe(&self) -> String {
        "no-watch".into()
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.0.try_acquire_or_renew(c).await
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.0.release(c, term).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.0.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        Err(LockError::unavailable("watch refused"))
    }
}

/// Counts the attempts and change streams of a lock, so a test knows when a watch is up.
pub(crate) struct Counted {
    inner: Arc<dyn LeaderLock>,
    pub(crate) attempts: AtomicUsize,
    pub(crate) watches: AtomicUsize,
}

impl Counted {
    pub(crate) fn new(inner: Arc<dyn LeaderLock>) -> Arc<Self> {
        Arc::new(Counted {
            inner,
            attempts: AtomicUsize::new(0),
            watches: AtomicUsize::new(0),
        })
    }
}

#[async_trait]
impl LeaderLock for Counted {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire_or_renew(c).await
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let stream = self.inner.watch().await;
        self.watches.fetch_add(1, Ordering::SeqCst);
        stream
    }
}

/// One scripted answer: after `delay`, lead or follow under a term, or fail (or be refused).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    Lead(u64),
    Follow(u64),
    Fail,
    Refuse,
}

/// A lock that answers attempts from a script (the last answer repeats), each after a delay.
pub(crate) struct Scripted {
    answers: Mutex<VecDeque<(Duration, Answer)>>,
    pub(crate) sent: Mutex<Vec<Instant>>,
    /// How long a release takes, and the terms released.
    release_delay: Duration,
    pub(crate) released: Mutex<Vec<Term>>,
    /// What the first change stream yields (events the test sends); later ones stay silent.
    events: Mutex<Option<mpsc::UnboundedReceiver<LockEvent>>>,
}

impl Scripted {
    pub(crate) fn new(answers: &[(Duration, Answer)]) -> Arc<Self> {
        Self::releasing_in(answers, Duration::ZERO)
    }

    pub(crate) fn releasing_in(
        answers: &[(Duration, Answer)],
        release_delay: Duration,
    ) -> Arc<Self> {
        Arc::new(Scripted {
            answers: Mutex::new(answers.iter().copied().collect()),
            sent: Mutex::new(Vec::new()),
            release_delay,
            released: Mutex::new(Vec::new()),
            events: Mutex::new(None),
        })
    }

    /// A scripted lock whose change stream yields what the returned sender sends.
    pub(crate) fn with_events(
        answers: &[(Duration, Answer)],
    ) -> (Arc<Self>, mpsc::UnboundedSender<LockEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let lock = Self::new(answers);
        *lock.events.lock().expect("events") = Some(rx);
        (lock, tx)
    }

    pub(crate) fn sends(&self) -> Vec<Instant> {
        self.sent.lock().expect("sent").clone()
    }
}

pub(crate) fn record(holder: &str, term: u64) -> LockRecord {
    LockRecord {
        holder: holder.into(),
        term: Term(term),
        lease_duration: timing().lease_duration,
        acquire_time: None,
        renew_time: None,
        version: "1".into(),
    }
}

#[async_trait]
impl LeaderLock for Scripted {
    fn describe(&self) -> String {
        "scripted".into()
    }
    async fn try_acquire_or_renew(&self, _: &Candidate) -> Result<Attempt, LockError> {
        self.sent.lock().expect("sent").push(Instant::now());
        let (delay, answer) = {
            let mut a = self.answers.lock().expect("answers");
            if a.len() > 1 {
                a.pop_front().expect("an answer")
            } else {
                *a.front().expect("an answer")
            }
        };
        tokio::time::sleep(delay).await;
        match answer {
            Answer::Lead(t) => Ok(Attempt::leader(Term(t))),
            Answer::Follow(t) => Ok(Attempt::Follower {
                holder: Some("b_1".into()),
                term: Some(Term(t)),
                retry_after: None,
            }),
            Answer::Fail => Err(LockError::unavailable("scripted failure")),
            Answer::Refuse => Err(LockError::refused("scripted refusal")),
        }
    }
    async fn release(&self, _: &Candidate, term: Term) -> Result<bool, LockError> {
        tokio::time::sleep(self.release_delay).await;
        self.released.lock().expect("released").push(term);
        Ok(true)
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        Ok(None)
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        match self.events.lock().expect("events").take() {
            Some(rx) => Ok(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
                .map(Ok)
                .chain(futures::stream::pending())
                .boxed()),
            None => Ok(futures::stream::pending().boxed()),
        }
    }
}

/// Runs this file's tests one at a time. Several capture logs through a thread's default
/// subscriber, and tracing decides once per callsite, process-wide, whether anyone listens: a
/// callsite first hit by a test on another thread while a capture is being set up could be
/// left out of the capture (about one full run in fifteen on a busy machine). Each test takes a
/// few milliseconds of paused time, so running them in turn costs nothing.
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    // A test that failed while holding it must not fail the others.
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// JSON log lines of the current thread's tasks, for tests that check what is logged.
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures this thread's logs (current-thread runtimes run every task here).
    pub(crate) fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || writer.clone())
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        // Callsites cache whether anyone wants them; one first hit on another test's thread
        // (with no subscriber there) could otherwise hide this thread's events from it.
        tracing::callsite::rebuild_interest_cache();
        (logs, guard)
    }

    /// The lines whose message is `message`.
    pub(crate) fn with_message(&self, message: &str) -> Vec<serde_json::Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["fields"]["message"] == message)
            .collect()
    }

    pub(crate) fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().expect("logs").clone();
        String::from_utf8(bytes)
            .expect("utf-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

/// Waits on a condition by polling, for state that has no change notification.
pub(crate) async fn wait_until(f: impl Fn() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("condition within patience");
}
