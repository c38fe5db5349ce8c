//! Elector behaviour beyond the conformance suite, on the in-memory lock and scripted locks.
//!
//! Timer logic runs under tokio's paused clock (`start_paused`): the in-memory lock measures
//! with `tokio::time::Instant`, so these tests assert exact instants and take no real time.

// `serial()`'s guard is held across awaits on purpose: it keeps the whole test, which runs on a
// current-thread runtime of its own, from overlapping another; nothing else takes it.
#![allow(clippy::await_holding_lock)]

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use leader_lock::conformance::{
    wait_following, wait_leader, wait_state, Fault, Faulty, SplitBrainChecker,
};
use leader_lock::{
    clock, Attempt, Candidate, Elector, ElectorConfig, Identity, LeaderLock, LeaderState,
    LockError, LockEvent, LockEventStream, LockRecord, MemoryStore, NotLeader, Term, Timing,
    SHUTDOWN_BUDGET,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

fn timing() -> Timing {
    Timing::new(
        Duration::from_millis(1500),
        Duration::from_millis(1000),
        Duration::from_millis(200),
    )
    .expect("valid")
}

const PATIENCE: Duration = Duration::from_secs(30);

fn spawn_with(lock: Arc<dyn LeaderLock>, id: &str, release: bool, timing: Timing) -> Elector {
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

fn spawn(lock: Arc<dyn LeaderLock>, id: &str, release: bool) -> Elector {
    spawn_with(lock, id, release, timing())
}

fn valid_until(s: &LeaderState) -> Instant {
    match s {
        LeaderState::Leader { valid_until, .. } => *valid_until,
        other => panic!("not leading: {other:?}"),
    }
}

/// A lock whose change stream never opens: followers must still take over by polling.
struct NoWatch(Arc<dyn LeaderLock>);

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
struct Counted {
    inner: Arc<dyn LeaderLock>,
    attempts: AtomicUsize,
    watches: AtomicUsize,
}

impl Counted {
    fn new(inner: Arc<dyn LeaderLock>) -> Arc<Self> {
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
enum Answer {
    Lead(u64),
    Follow(u64),
    Fail,
    Refuse,
}

/// A lock that answers attempts from a script (the last answer repeats), each after a delay.
struct Scripted {
    answers: Mutex<VecDeque<(Duration, Answer)>>,
    sent: Mutex<Vec<Instant>>,
    /// How long a release takes, and the terms released.
    release_delay: Duration,
    released: Mutex<Vec<Term>>,
    /// What the first change stream yields (events the test sends); later ones stay silent.
    events: Mutex<Option<mpsc::UnboundedReceiver<LockEvent>>>,
}

impl Scripted {
    fn new(answers: &[(Duration, Answer)]) -> Arc<Self> {
        Self::releasing_in(answers, Duration::ZERO)
    }

    fn releasing_in(answers: &[(Duration, Answer)], release_delay: Duration) -> Arc<Self> {
        Arc::new(Scripted {
            answers: Mutex::new(answers.iter().copied().collect()),
            sent: Mutex::new(Vec::new()),
            release_delay,
            released: Mutex::new(Vec::new()),
            events: Mutex::new(None),
        })
    }

    /// A scripted lock whose change stream yields what the returned sender sends.
    fn with_events(
        answers: &[(Duration, Answer)],
    ) -> (Arc<Self>, mpsc::UnboundedSender<LockEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let lock = Self::new(answers);
        *lock.events.lock().expect("events") = Some(rx);
        (lock, tx)
    }

    fn sends(&self) -> Vec<Instant> {
        self.sent.lock().expect("sent").clone()
    }
}

fn record(holder: &str, term: u64) -> LockRecord {
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
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    // A test that failed while holding it must not fail the others.
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// JSON log lines of the current thread's tasks, for tests that check what is logged.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

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
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
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
    fn with_message(&self, message: &str) -> Vec<serde_json::Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["fields"]["message"] == message)
            .collect()
    }

    fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().expect("logs").clone();
        String::from_utf8(bytes)
            .expect("utf-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn followers_fall_back_to_polling_without_a_watch() {
    let _serial = serial();
    let store = MemoryStore::new();
    let checker = SplitBrainChecker::new();
    let a = spawn(Arc::new(NoWatch(Arc::new(store.lock("l")))), "a", true);
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), PATIENCE, "a").await;
    let b = spawn(Arc::new(NoWatch(Arc::new(store.lock("l")))), "b", true);
    checker.watch(b.leadership());
    wait_following(&b.leadership(), PATIENCE, "b").await;
    let released = Instant::now();
    assert!(a.shutdown().await.expect("release"));
    let t2 = wait_leader(&b.leadership(), PATIENCE, "b by polling").await;
    assert!(t2 > t1);
    let took = released.elapsed();
    assert!(
        took <= timing().retry_period.mul_f64(1.2),
        "the next poll, at most a jittered retry period later: {took:?}"
    );
    b.abort().await;
    checker.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_follower_wakes_on_the_watch_not_on_its_next_poll() {
    let _serial = serial();
    let store = MemoryStore::new();
    let checker = SplitBrainChecker::new();
    let a = spawn(Arc::new(store.lock("w")), "a", true);
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), PATIENCE, "a").await;
    let counted = Counted::new(Arc::new(store.lock("w")));
    let b = spawn(counted.clone(), "b", true);
    checker.watch(b.leadership());
    wait_following(&b.leadership(), PATIENCE, "b").await;
    wait_until(|| counted.watches.load(Ordering::SeqCst) > 0).await;
    let released = Instant::now();
    assert!(a.shutdown().await.expect("release"));
    let t2 = wait_leader(&b.leadership(), PATIENCE, "b").await;
    assert!(t2 > t1);
    assert_eq!(
        released.elapsed(),
        Duration::ZERO,
        "woken by the release event, not by a timer"
    );
    b.abort().await;
    checker.finish().await;
}

#[tokio::test(start_paused = true)]
async fn a_late_reply_counts_validity_from_the_send_instant() {
    let _serial = serial();
    let t = timing();
    let late = Duration::from_millis(150);
    let lock = Scripted::new(&[(late, Answer::Lead(3))]);
    let started = Instant::now();
    let a = spawn(lock.clone(), "a", true);
    let s = wait_state(&a.leadership(), PATIENCE, "a to lead", |s| {
        matches!(s, LeaderState::Leader { .. })
    })
    .await;
    let sent = lock.sent.lock().expect("sent")[0];
    assert_eq!(sent, started, "the first attempt goes out at once");
    assert_eq!(Instant::now(), started + late, "the reply came late");
    assert_eq!(
        valid_until(&s),
        sent + t.renew_deadline,
        "valid until the send instant + renew deadline, not the reply's"
    );
    // Renewals go out a retry period after the previous *send* (the first one may come earlier:
    // the watch's first resync asks for a fresh look), and each counts from its own send.
    let sends = || lock.sent.lock().expect("sent").clone();
    wait_until(|| sends().len() >= 3).await;
    let s = sends();
    assert_eq!(s[2], s[1] + t.retry_period);
    wait_state(&a.leadership(), PATIENCE, "the third renew", |st| {
        matches!(st, LeaderState::Leader { valid_until, .. } if *valid_until == s[2] + t.renew_deadline)
    })
    .await;
    assert_eq!(Instant::now(), s[2] + late);
    a.abort().await;
}

#[tokio::test(start_paused = true)]
async fn a_renew_failing_until_the_deadline_steps_down_exactly_then() {
    let _serial = serial();
    let store = MemoryStore::new();
    let faulty = Faulty::new(Arc::new(store.lock("f")));
    let a = spawn(faulty.clone(), "a", true);
    let l = a.leadership();
    wait_leader(&l, PATIENCE, "a").await;
    faulty.set(Some(Fault::Fail));
    let deadline = valid_until(&l.state());
    // Renewals keep failing; the leadership holds up to its deadline and not a moment longer.
    tokio::time::sleep_until(deadline - Duration::from_millis(1)).await;
    assert!(l.check().is_ok(), "still valid just before the deadline");
    assert!(matches!(l.state(), LeaderState::Leader { .. }));
    wait_state(&l, PATIENCE, "a to step down", |s| {
        matches!(s, LeaderState::Follower { .. })
    })
    .await;
    assert_eq!(Instant::now(), deadline, "stepped down at the deadline");
    assert!(matches!(l.check(), Err(NotLeader::Follower { .. })));
    a.abort().await;
}

#[tokio::test(start_paused = true)]
async fn a_hung_renew_steps_down_at_the_deadline_too() {
    let _serial = serial();
    let store = MemoryStore::new();
    let faulty = Faulty::new(Arc::new(store.lock("h")));
    let a = spawn(faulty.clone(), "a", true);
    let l = a.leadership();
    wait_leader(&l, PATIENCE, "a").await;
    faulty.set(Some(Fault::Hang));
    let deadline = valid_until(&l.state());
    wait_state(&l, PATIENCE, "a to step down", |s| {
        matches!(s, LeaderState::Follower { .. })
    })
    .await;
    assert_eq!(Instant::now(), deadline);
    a.abort().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_finishes_within_its_budget_whatever_hangs() {
    let _serial = serial();
    // A long renew deadline: draining, an attempt in flight and the release could each take it.
    let t = Timing::new(
        Duration::from_secs(60),
        Duration::from_secs(50),
        Duration::from_secs(2),
    )
    .expect("valid");
    let store = MemoryStore::new();
    let faulty = Faulty::new(Arc::new(store.lock("budget")));
    let a = spawn_with(faulty.clone(), "a", true, t);
    let l = a.leadership();
    wait_leader(&l, PATIENCE, "a").await;
    // A write that never finishes, a renew that hangs, and a release that would hang too.
    let permit = l.check().expect("leader");
    faulty.set(Some(Fault::Hang));
    // Past the next renew, which now hangs in flight.
    tokio::time::sleep(t.retry_period + Duration::from_millis(10)).await;
    let started = Instant::now();
    let r = a.shutdown().await;
    let took = started.elapsed();
    assert!(matches!(r, Err(LockError::Timeout(_))), "{r:?}");
    assert!(took <= SHUTDOWN_BUDGET, "took {took:?}");
    assert_eq!(l.state(), LeaderState::Stopped);
    drop(permit);
}

#[tokio::test(start_paused = true)]
async fn a_slow_release_gets_the_rest_of_the_budget() {
    let _serial = serial();
    let lock = Scripted::releasing_in(&[(Duration::ZERO, Answer::Lead(4))], Duration::from_secs(5));
    let a = spawn(lock.clone(), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    let started = Instant::now();
    assert_eq!(a.shutdown().await.ok(), Some(true), "released");
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(*lock.released.lock().expect("released"), vec![Term(4)]);
    // A release slower than the budget is abandoned at its end.
    let lock = Scripted::releasing_in(
        &[(Duration::ZERO, Answer::Lead(4))],
        Duration::from_secs(60),
    );
    let a = spawn(lock.clone(), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    let started = Instant::now();
    let r = a.shutdown_within(Duration::from_secs(8)).await;
    assert!(matches!(r, Err(LockError::Timeout(_))), "{r:?}");
    assert_eq!(started.elapsed(), Duration::from_secs(8));
}

#[tokio::test(start_paused = true)]
async fn the_released_line_carries_the_instant_the_release_returned() {
    let _serial = serial();
    let (logs, _guard) = Logs::capture();
    let lock = Scripted::releasing_in(&[(Duration::ZERO, Answer::Lead(4))], Duration::from_secs(5));
    let a = spawn(lock, "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    let asked = Instant::now();
    assert_eq!(a.shutdown().await.ok(), Some(true), "released");
    // Converted now, as the line was: paused time moves no real clock.
    let (asked, returned) = (
        clock::instant_mono_ms(asked),
        clock::instant_mono_ms(Instant::now()),
    );
    let line = logs.with_message("released leadership");
    let at = line
        .first()
        .and_then(|l| l["fields"]["mono_ms"].as_f64())
        .unwrap_or_else(|| panic!("no released line with mono_ms: {:?}", logs.lines()));
    // The bench times signal → lock released from it: the release's end (5 paused seconds
    // after shutdown began), not the moment shutdown was asked for.
    assert!(at - asked >= 4_999.0, "{at} - {asked}");
    assert!(at <= returned + 1.0, "{at} > {returned}");
}

/// A change stream that counts itself while open.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A lock whose change streams are counted while open.
struct Streams {
    inner: Arc<dyn LeaderLock>,
    open: Arc<AtomicUsize>,
}

#[async_trait]
impl LeaderLock for Streams {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.inner.try_acquire_or_renew(c).await
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let stream = self.inner.watch().await?;
        self.open.fetch_add(1, Ordering::SeqCst);
        let guard = Open(self.open.clone());
        Ok(stream
            .map(move |e| {
                // The guard lives as long as the stream.
                let _open = &guard;
                e
            })
            .boxed())
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_closes_the_change_stream_before_it_returns() {
    let _serial = serial();
    let store = MemoryStore::new();
    let open = Arc::new(AtomicUsize::new(0));
    let lock = Arc::new(Streams {
        inner: Arc::new(store.lock("streams")),
        open: open.clone(),
    });
    let a = spawn(lock, "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    wait_until(|| open.load(Ordering::SeqCst) == 1).await;
    assert!(a.shutdown().await.expect("released"));
    assert_eq!(open.load(Ordering::SeqCst), 0, "the watch is closed");
}

#[tokio::test(start_paused = true)]
async fn abort_stops_at_once_and_releases_nothing() {
    let _serial = serial();
    let store = MemoryStore::new();
    let lock = store.lock("abort");
    let a = spawn(Arc::new(lock.clone()), "a", true);
    let l = a.leadership();
    wait_leader(&l, PATIENCE, "a").await;
    a.abort().await;
    assert_eq!(l.state(), LeaderState::Stopped);
    assert!(matches!(l.check(), Err(NotLeader::ShuttingDown)));
    assert!(lock.get().await.expect("read").is_some(), "not released");
    // Nothing renews it any more: the server expires it.
    tokio::time::sleep(timing().lease_duration).await;
    assert!(lock.get().await.expect("read").is_none(), "left to expire");
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_writes_in_flight_before_releasing() {
    let _serial = serial();
    let store = MemoryStore::new();
    let lock = store.lock("drain");
    let a = spawn(Arc::new(lock.clone()), "a", true);
    let leadership = a.leadership();
    wait_leader(&leadership, PATIENCE, "a").await;
    let permit = leadership.check().expect("leader");
    let stop = tokio::spawn(a.shutdown());
    // New writes are refused at once; the write in flight keeps the lock held.
    wait_until(|| matches!(leadership.check(), Err(NotLeader::ShuttingDown))).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!stop.is_finished(), "release waits for the permit");
    assert!(lock.get().await.expect("read").is_some(), "still held");
    drop(permit);
    let released = tokio::time::timeout(PATIENCE, stop)
        .await
        .expect("shutdown finishes")
        .expect("task")
        .expect("release");
    assert!(released);
    assert!(lock.get().await.expect("read").is_none(), "released");
    assert_eq!(leadership.state(), LeaderState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn release_on_shutdown_off_leaves_the_lease_to_expire() {
    let _serial = serial();
    let store = MemoryStore::new();
    let lock = store.lock("keep");
    let a = spawn(Arc::new(lock.clone()), "a", false);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    assert!(!a.shutdown().await.expect("no release"));
    assert!(
        lock.get().await.expect("read").is_some(),
        "lease left in place"
    );
}

#[tokio::test(start_paused = true)]
async fn a_follower_never_passes_check() {
    let _serial = serial();
    let store = MemoryStore::new();
    let a = spawn(Arc::new(store.lock("f")), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    let b = spawn(Arc::new(store.lock("f")), "b", true);
    let s = wait_state(&b.leadership(), PATIENCE, "b follows", |s| {
        matches!(
            s,
            LeaderState::Follower {
                holder: Some(_),
                ..
            }
        )
    })
    .await;
    let LeaderState::Follower {
        holder: Some(h),
        term,
    } = s
    else {
        unreachable!()
    };
    assert!(h.starts_with("a_"), "the follower knows the holder: {h}");
    assert!(term.is_some());
    assert!(matches!(
        b.leadership().check(),
        Err(NotLeader::Follower { holder: Some(_) })
    ));
    a.abort().await;
    b.abort().await;
}

#[tokio::test(start_paused = true)]
async fn a_term_lower_than_seen_is_logged_as_an_error_and_log_fields_are_typed() {
    let _serial = serial();
    let (logs, _guard) = Logs::capture();
    let step = Duration::from_millis(10);
    let lock = Scripted::new(&[
        (step, Answer::Lead(3)),
        (step, Answer::Fail),
        (step, Answer::Follow(5)),
        (step, Answer::Lead(2)),
    ]);
    let a = spawn(lock.clone(), "a", true);
    wait_state(&a.leadership(), PATIENCE, "a to lead under term 2", |s| {
        s.term() == Some(Term(2))
    })
    .await;
    a.abort().await;
    let lines = logs.lines();
    let regression = lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("term went backwards"))
        })
        .unwrap_or_else(|| panic!("no regression line in {lines:#?}"));
    assert_eq!(regression["level"], "ERROR");
    assert_eq!(regression["fields"]["term"], "2");
    assert_eq!(regression["fields"]["previous_term"], "5");
    let lost = lines
        .iter()
        .find(|l| l["fields"]["message"] == "lost leadership")
        .expect("a lost-leadership line");
    assert_eq!(
        lost["fields"]["holder"], "b_1",
        "a plain holder, not Some(..)"
    );
    for l in &lines {
        for (k, v) in l["fields"].as_object().expect("fields") {
            if k.ends_with("term") {
                assert!(v.is_string(), "{k} must be a string like every term: {l}");
            }
            assert!(
                !v.as_str().is_some_and(|s| s.contains("Some(")),
                "{k} shows an Option's Debug form: {l}"
            );
        }
    }
}

/// A lock whose first change stream (or every one) panics when polled, as a bug in a backend's
/// stream would.
struct PanickyWatch {
    inner: Arc<dyn LeaderLock>,
    opened: AtomicUsize,
    always: bool,
}

#[async_trait]
impl LeaderLock for PanickyWatch {
    fn describe(&self) -> String {
        "panicky".into()
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.inner.try_acquire_or_renew(c).await
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        if self.opened.fetch_add(1, Ordering::SeqCst) == 0 || self.always {
            return Ok(futures::stream::once(async { panic!("bug in the watch stream") }).boxed());
        }
        self.inner.watch().await
    }
}

// The real clock: a spinning loop keeps a paused clock from ever advancing.
#[tokio::test]
async fn a_panicking_watch_task_is_reported_and_restarted() {
    let _serial = serial();
    let (logs, _guard) = Logs::capture();
    let store = MemoryStore::new();
    let lock = Arc::new(PanickyWatch {
        inner: Arc::new(store.lock("p")),
        opened: AtomicUsize::new(0),
        always: false,
    });
    let a = spawn(lock.clone(), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    wait_until(|| lock.opened.load(Ordering::SeqCst) >= 2).await;
    // Back on the watch: a follower wakes on the release event.
    let b = spawn(Arc::new(store.lock("p")), "b", true);
    wait_following(&b.leadership(), PATIENCE, "b").await;
    b.abort().await;
    a.abort().await;
    let lines = logs.lines();
    let failed = lines
        .iter()
        .find(|l| {
            l["fields"]["message"] == "the lock watch task failed; polling until it is restarted"
        })
        .unwrap_or_else(|| panic!("the panic was not reported: {lines:#?}"));
    assert_eq!(failed["level"], "ERROR");
    assert_eq!(
        failed["fields"]["error"],
        "panicked: bug in the watch stream"
    );
}

/// Script for a follower whose watch is up before its first answer: the first attempt and the
/// one the watch's first resync asks for both follow; the next answer comes at the next attempt.
fn following_then(then: Answer) -> Vec<(Duration, Answer)> {
    let settle = Duration::from_millis(10);
    vec![
        (settle, Answer::Follow(1)),
        (Duration::ZERO, Answer::Follow(1)),
        (Duration::ZERO, then),
    ]
}

#[tokio::test(start_paused = true)]
async fn a_release_seen_on_the_watch_is_acted_on_at_once() {
    let _serial = serial();
    let (lock, events) = Scripted::with_events(&following_then(Answer::Lead(2)));
    let a = spawn(lock.clone(), "a", true);
    wait_until(|| lock.sends().len() >= 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    // Kubernetes reports a release as a record with an empty holder.
    events
        .send(LockEvent::Changed(Some(record("", 1))))
        .expect("send");
    wait_leader(&a.leadership(), PATIENCE, "a after the release").await;
    assert_eq!(released.elapsed(), Duration::ZERO, "no waiting for a timer");
    a.abort().await;
}

#[tokio::test(start_paused = true)]
async fn terms_seen_on_the_watch_count_for_the_term_order() {
    let _serial = serial();
    let (logs, _guard) = Logs::capture();
    let (lock, events) = Scripted::with_events(&following_then(Answer::Lead(3)));
    let a = spawn(lock.clone(), "a", true);
    wait_until(|| lock.sends().len() >= 2).await;
    let seen = Instant::now();
    events
        .send(LockEvent::Changed(Some(record("b_1", 7))))
        .expect("send");
    wait_state(&a.leadership(), PATIENCE, "a to follow b at term 7", |s| {
        *s == LeaderState::Follower {
            holder: Some("b_1".into()),
            term: Some(Term(7)),
        }
    })
    .await;
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    // Another holder's record is no reason to look at once: its lease has to run out first.
    let sends = lock.sends();
    assert!(sends[2] - seen >= Duration::from_secs(1), "{sends:?}");
    a.abort().await;
    let regression = logs.with_message(
        "the lock's term went backwards: its backend lost or rewrote the lock's state, so terms no longer order leaderships",
    );
    assert_eq!(regression.len(), 1, "{:#?}", logs.lines());
    assert_eq!(regression[0]["fields"]["previous_term"], "7");
    assert_eq!(regression[0]["fields"]["term"], "3");
}

#[tokio::test(start_paused = true)]
async fn a_follower_logs_each_change_once_and_refusals_as_errors() {
    let _serial = serial();
    let (logs, _guard) = Logs::capture();
    let step = Duration::from_millis(10);
    let lock = Scripted::new(&[
        (step, Answer::Follow(1)),
        (step, Answer::Follow(1)),
        (step, Answer::Follow(1)),
        (step, Answer::Follow(1)),
        (step, Answer::Refuse),
    ]);
    let a = spawn(lock.clone(), "a", true);
    wait_until(|| lock.sends().len() >= 6).await;
    a.abort().await;
    assert_eq!(
        logs.with_message("following").len(),
        1,
        "{:#?}",
        logs.lines()
    );
    let failed = logs.with_message("lock attempt failed");
    assert!(!failed.is_empty());
    assert!(failed.iter().all(|l| l["level"] == "ERROR"), "{failed:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_follower_with_a_watch_does_not_poll() {
    let _serial = serial();
    let store = MemoryStore::new();
    let a = spawn(Arc::new(store.lock("quiet")), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    let counted = Counted::new(Arc::new(store.lock("quiet")));
    let b = spawn(counted.clone(), "b", true);
    wait_following(&b.leadership(), PATIENCE, "b").await;
    // An observation period: ten leases of a renewing leader.
    tokio::time::sleep(timing().lease_duration * 10).await;
    let attempts = counted.attempts.load(Ordering::SeqCst);
    // About one attempt per lease (when it would expire), not one per retry period (75).
    assert!(attempts <= 15, "{attempts} attempts in ten leases");
    a.abort().await;
    b.abort().await;
}

// The real clock: a watch task restarted without pause would keep a paused clock from advancing.
#[tokio::test]
async fn a_watch_that_keeps_failing_is_restarted_with_backoff() {
    let _serial = serial();
    let store = MemoryStore::new();
    let lock = Arc::new(PanickyWatch {
        inner: Arc::new(store.lock("p")),
        opened: AtomicUsize::new(0),
        always: true,
    });
    let a = spawn(lock.clone(), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    // An observation period: with backoff from 100 ms, a handful of restarts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let opened = lock.opened.load(Ordering::SeqCst);
    assert!((2..=8).contains(&opened), "{opened} watch restarts in 1 s");
    assert!(a.leadership().is_leader(), "leading all along, by polling");
    a.abort().await;
}

/// Waits on a condition by polling, for state that has no change notification.
async fn wait_until(f: impl Fn() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("condition within patience");
}

#[tokio::test(start_paused = true)]
async fn a_scripted_leadership_follows_what_is_published() {
    let _serial = serial();
    let (script, leadership) = leader_lock::Leadership::scripted(LeaderState::Starting);
    assert!(
        leadership.check().is_err(),
        "not leading before a publication"
    );
    let valid_until = Instant::now() + Duration::from_secs(5);
    script.publish(LeaderState::Leader {
        term: Term(7),
        valid_until,
    });
    let permit = leadership.check().expect("leading once published");
    assert_eq!(permit.term, Term(7));
    script.publish(LeaderState::Stopped);
    assert!(leadership.check().is_err(), "stopped once published");
}

#[tokio::test(start_paused = true)]
async fn renewals_seen_on_the_watch_put_the_next_look_a_lease_later() {
    let _serial = serial();
    let (lock, events) = Scripted::with_events(&following_then(Answer::Lead(8)));
    let a = spawn(lock.clone(), "a", true);
    wait_until(|| lock.sends().len() >= 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let looks = lock.sends().len();
    // Ten leases of a holder renewing every retry period, each renewal shown by the watch (as a
    // Kubernetes Lease's renewTime and resourceVersion change): nothing to ask the lock.
    let renewals = timing().lease_duration.as_millis() * 10 / timing().retry_period.as_millis();
    for n in 0..renewals {
        let mut rec = record("b_1", 7);
        rec.version = format!("v{n}");
        events.send(LockEvent::Changed(Some(rec))).expect("send");
        tokio::time::sleep(timing().retry_period).await;
    }
    assert_eq!(lock.sends().len(), looks, "no look while the holder renews");
    // The holder stops renewing: the next look is a lease after the last renewal seen, not
    // earlier (nothing to find) and not later (a takeover due).
    let last = Instant::now() - timing().retry_period;
    wait_leader(&a.leadership(), PATIENCE, "a after the holder stopped").await;
    let sends = lock.sends();
    assert_eq!(sends.len(), looks + 1, "{sends:?}");
    assert_eq!(sends[looks] - last, timing().lease_duration, "{sends:?}");
    a.abort().await;
}
