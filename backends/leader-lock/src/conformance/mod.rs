//! The conformance suite every backend runs against its real server.
//!
//! A backend implements [`Harness`] and calls [`conformance_suite!`](crate::conformance_suite)
//! in an integration test; each case becomes its own `#[tokio::test]`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{
    Attempt, Candidate, Elector, ElectorConfig, Identity, LeaderLock, LeaderState, Leadership,
    LockError, LockEventStream, LockRecord, Term, Timing,
};

/// An error from a harness (server setup, tampering).
pub type HarnessError = Box<dyn std::error::Error + Send + Sync>;

/// A damaged or foreign record a harness plants to check that nothing panics or steals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tamper {
    /// Fields of the wrong type (a string where a number belongs, and so on).
    WrongTypes,
    /// Required fields missing.
    MissingFields,
    /// A negative lease duration.
    NegativeDuration,
    /// An absurdly long lease duration.
    HugeDuration,
    /// A renew time far in the future by the writer's clock.
    RenewInFuture,
    /// An empty holder.
    EmptyHolder,
    /// Bytes that are no record at all.
    Garbage,
}

impl Tamper {
    /// Every case, in a fixed order.
    pub const ALL: [Tamper; 7] = [
        Tamper::WrongTypes,
        Tamper::MissingFields,
        Tamper::NegativeDuration,
        Tamper::HugeDuration,
        Tamper::RenewInFuture,
        Tamper::EmptyHolder,
        Tamper::Garbage,
    ];
}

/// How long a planted record must be respected, from the moment `tamper` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protect {
    /// The record holds nothing; a contender may take the lock at once.
    Nothing,
    /// Nobody may take the lock before this much time has passed; afterwards someone must.
    For(Duration),
}

/// What a backend gives the suite.
#[async_trait]
pub trait Harness: Send + Sync {
    /// Timing for the suite: short, but within the backend's granularity.
    fn timing(&self) -> Timing;
    /// A new client of the lock `name`, as a separate process would have.
    async fn lock(&self, name: &str) -> Result<Arc<dyn LeaderLock>, HarnessError>;
    /// Plants a tampered record in lock `name`, as another writer might.
    async fn tamper(&self, name: &str, case: Tamper) -> Result<Protect, HarnessError>;
}

/// A generous deadline for waits on a busy 2-core machine.
pub fn patience(t: &Timing) -> Duration {
    t.lease_duration * 4 + Duration::from_secs(20)
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// Watches every contender's [`Leadership`] and records any moment at which two pass `check()`.
pub struct SplitBrainChecker {
    stop: Arc<AtomicBool>,
    task: Option<JoinHandle<()>>,
    violations: Arc<Mutex<Vec<String>>>,
    leaders: Arc<Mutex<Vec<(usize, Term)>>>,
    contenders: Arc<Mutex<Vec<Leadership>>>,
}

impl Default for SplitBrainChecker {
    fn default() -> Self {
        Self::new()
    }
}

impl SplitBrainChecker {
    /// Starts sampling every millisecond.
    pub fn new() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let violations = Arc::new(Mutex::new(Vec::new()));
        let leaders: Arc<Mutex<Vec<(usize, Term)>>> = Arc::new(Mutex::new(Vec::new()));
        let contenders: Arc<Mutex<Vec<Leadership>>> = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let (stop, violations, leaders, contenders) = (
                stop.clone(),
                violations.clone(),
                leaders.clone(),
                contenders.clone(),
            );
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(Duration::from_millis(1));
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                while !stop.load(Ordering::Relaxed) {
                    ticker.tick().await;
                    let all = lock(&contenders).clone();
                    let valid: Vec<(usize, Term)> = all
                        .iter()
                        .enumerate()
                        .filter_map(|(i, l)| l.check().ok().map(|p| (i, p.term)))
                        .collect();
                    if valid.len() > 1 {
                        lock(&violations).push(format!("two valid leaders at once: {valid:?}"));
                    }
                    let mut seen = lock(&leaders);
                    for (i, term) in valid {
                        if seen.last() != Some(&(i, term)) {
                            seen.push((i, term));
                        }
                    }
                }
            })
        };
        SplitBrainChecker {
            stop,
            task: Some(task),
            violations,
            leaders,
            contenders,
        }
    }

    /// Adds a contender to watch; returns its index.
    pub fn watch(&self, l: Leadership) -> usize {
        let mut c = lock(&self.contenders);
        c.push(l);
        c.len() - 1
    }

    /// The (contender, term) leaderships seen so far, in order.
    pub fn leaders(&self) -> Vec<(usize, Term)> {
        lock(&self.leaders).clone()
    }

    /// Stops sampling and panics on any overlap or on a term that did not increase.
    pub async fn finish(mut self) -> Vec<(usize, Term)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let v = lock(&self.violations).clone();
        assert!(v.is_empty(), "split brain: {}", v.join("; "));
        let leaders = self.leaders();
        for w in leaders.windows(2) {
            if w[0].0 != w[1].0 {
                assert!(
                    w[1].1 > w[0].1,
                    "the term did not increase on a change of holder: {leaders:?}"
                );
            }
        }
        leaders
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits until `pred` holds for the leadership's state, or panics after `limit`.
pub async fn wait_state(
    l: &Leadership,
    limit: Duration,
    what: &str,
    pred: impl Fn(&LeaderState) -> bool,
) -> LeaderState {
    let mut rx = l.subscribe();
    let r = tokio::time::timeout(limit, async {
        loop {
            let s = rx.borrow_and_update().clone();
            if pred(&s) {
                return s;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().clone();
            }
        }
    })
    .await;
    match r {
        Ok(s) if pred(&s) => s,
        Ok(s) => panic!("elector stopped before {what}; last state {s:?}"),
        Err(_) => panic!(
            "timed out after {limit:?} waiting for {what}; state {:?}",
            l.state()
        ),
    }
}

/// Waits until any of `contenders` passes `check()`; returns its index and term.
pub async fn wait_any_leader(
    contenders: &[Leadership],
    limit: Duration,
    what: &str,
) -> (usize, Term) {
    let found = tokio::time::timeout(limit, async {
        loop {
            if let Some(hit) = contenders
                .iter()
                .enumerate()
                .find_map(|(i, l)| l.check().ok().map(|p| (i, p.term)))
            {
                return hit;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{what}: nobody led within {limit:?}"))
}

/// Waits until the contender follows a known holder; returns the holder.
pub async fn wait_following(l: &Leadership, limit: Duration, who: &str) -> String {
    let s = wait_state(l, limit, &format!("{who} to follow a known holder"), |s| {
        matches!(
            s,
            LeaderState::Follower {
                holder: Some(_),
                ..
            }
        )
    })
    .await;
    match s {
        LeaderState::Follower {
            holder: Some(h), ..
        } => h,
        other => panic!("{who}: unexpected state {other:?}"),
    }
}

/// Waits until `check()` passes; returns the term.
pub async fn wait_leader(l: &Leadership, limit: Duration, who: &str) -> Term {
    let r = tokio::time::timeout(limit, l.wait_leader()).await;
    match r {
        Ok(Ok(p)) => p.term,
        Ok(Err(e)) => panic!("{who} never led: {e}"),
        Err(_) => panic!("{who} did not lead within {limit:?}; state {:?}", l.state()),
    }
}

fn is_follower(s: &LeaderState) -> bool {
    matches!(s, LeaderState::Follower { .. })
}

async fn contender<H: Harness + ?Sized>(
    h: &H,
    name: &str,
    id: &str,
    timing: Timing,
) -> (Elector, Arc<dyn LeaderLock>) {
    let lock = h.lock(name).await.expect("harness gives a lock client");
    let e = Elector::spawn(
        lock.clone(),
        ElectorConfig {
            identity: Identity::new(id),
            timing,
            release_on_shutdown: true,
        },
    );
    (e, lock)
}

/// Five contenders over many rounds: one leader at a time, terms increase, handovers happen.
pub async fn mutual_exclusion<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    let name = unique("mutex");
    let checker = SplitBrainChecker::new();
    let mut pool = Vec::new();
    for i in 0..5 {
        let (e, _) = contender(h, &name, &format!("c{i}"), timing).await;
        checker.watch(e.leadership());
        pool.push(e);
    }
    let mut terms = Vec::new();
    for round in 0..8 {
        let leaderships: Vec<Leadership> = pool.iter().map(Elector::leadership).collect();
        let term =
            wait_any_leader(&leaderships, patience(&timing), &format!("round {round}")).await;
        terms.push(term.1);
        let leader = pool.remove(term.0);
        // Alternate graceful stops and crashes of the leader.
        if round % 2 == 0 {
            leader.shutdown().await.expect("release");
        } else {
            leader.abort().await;
        }
        let (e, _) = contender(h, &name, &format!("r{round}"), timing).await;
        checker.watch(e.leadership());
        pool.push(e);
    }
    for e in pool {
        e.abort().await;
    }
    checker.finish().await;
    for w in terms.windows(2) {
        assert!(w[1] > w[0], "terms must strictly increase: {terms:?}");
    }
}

/// A leader keeps its term across many renewals while another contender follows.
pub async fn renew_keeps_holder<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    let name = unique("renew");
    let checker = SplitBrainChecker::new();
    let (a, _) = contender(h, &name, "a", timing).await;
    checker.watch(a.leadership());
    let term = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let (b, _) = contender(h, &name, "b", timing).await;
    checker.watch(b.leadership());
    wait_state(
        &b.leadership(),
        patience(&timing),
        "b to follow",
        is_follower,
    )
    .await;
    tokio::time::sleep(timing.lease_duration * 3).await;
    let p = a
        .leadership()
        .check()
        .expect("the leader keeps leading while it renews");
    assert_eq!(p.term, term, "renewals keep the term");
    assert!(b.leadership().check().is_err(), "the follower never leads");
    drop(p);
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

/// A graceful release lets a waiting contender lead long before the lease would have expired.
pub async fn graceful_release_is_prompt<H: Harness + ?Sized>(h: &H) {
    let base = h.timing();
    // A long lease so that taking over by expiry cannot pass for a prompt handover.
    let timing = Timing {
        lease_duration: base.lease_duration * 5,
        ..base
    };
    let name = unique("release");
    let checker = SplitBrainChecker::new();
    let (a, _) = contender(h, &name, "a", timing).await;
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let (b, _) = contender(h, &name, "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    // Let b's watch settle so the release is seen on it.
    tokio::time::sleep(base.retry_period).await;
    let released_at = Instant::now();
    assert!(a.shutdown().await.expect("release works"), "a released");
    let t2 = wait_leader(
        &b.leadership(),
        base.lease_duration,
        "b after a graceful release",
    )
    .await;
    let took = released_at.elapsed();
    assert!(t2 > t1, "term increases on handover ({t1} -> {t2})");
    eprintln!("graceful handover took {took:?}");
    b.abort().await;
    checker.finish().await;
}

/// A crashed leader's lease is taken only after its validity ended, and then promptly.
pub async fn crash_taken_after_expiry<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    let name = unique("crash");
    let checker = SplitBrainChecker::new();
    let (a, _) = contender(h, &name, "a", timing).await;
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let (b, _) = contender(h, &name, "b", timing).await;
    checker.watch(b.leadership());
    wait_state(
        &b.leadership(),
        patience(&timing),
        "b to follow",
        is_follower,
    )
    .await;
    let LeaderState::Leader { valid_until, .. } = a.leadership().state() else {
        panic!("a should lead");
    };
    a.abort().await;
    let crashed = Instant::now();
    let t2 = wait_leader(&b.leadership(), patience(&timing), "b after a crash").await;
    let led = Instant::now();
    assert!(
        led >= valid_until,
        "b led before a's validity ended ({:?} early)",
        valid_until - led
    );
    assert!(t2 > t1, "term increases on takeover ({t1} -> {t2})");
    eprintln!("crash takeover after {:?}", led - crashed);
    b.abort().await;
    checker.finish().await;
}

/// How a [`Faulty`] lock misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Calls hang until the fault is cleared, like a paused process or a dead link.
    Hang,
    /// Calls fail at once, like a partition that refuses connections.
    Fail,
}

/// Wraps a lock so that a test can pause it or cut it off.
pub struct Faulty {
    inner: Arc<dyn LeaderLock>,
    fault: Mutex<Option<Fault>>,
    cleared: Notify,
}

impl Faulty {
    /// Wraps `inner`, working normally.
    pub fn new(inner: Arc<dyn LeaderLock>) -> Arc<Self> {
        Arc::new(Faulty {
            inner,
            fault: Mutex::new(None),
            cleared: Notify::new(),
        })
    }

    /// Sets or clears the fault.
    pub fn set(&self, fault: Option<Fault>) {
        *lock(&self.fault) = fault;
        if fault.is_none() {
            self.cleared.notify_waiters();
        }
    }

    async fn gate(&self) -> Result<(), LockError> {
        loop {
            let notified = self.cleared.notified();
            let f = *lock(&self.fault);
            match f {
                None => return Ok(()),
                Some(Fault::Fail) => return Err(LockError::Unavailable("injected fault".into())),
                Some(Fault::Hang) => notified.await,
            }
        }
    }
}

#[async_trait]
impl LeaderLock for Faulty {
    fn describe(&self) -> String {
        format!("faulty {}", self.inner.describe())
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.gate().await?;
        self.inner.try_acquire_or_renew(c).await
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.gate().await?;
        self.inner.release(c, term).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.gate().await?;
        self.inner.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        self.gate().await?;
        self.inner.watch().await
    }
}

async fn cut_off_leader<H: Harness + ?Sized>(h: &H, fault: Fault) {
    let timing = h.timing();
    let name = unique(if fault == Fault::Hang {
        "pause"
    } else {
        "partition"
    });
    let checker = SplitBrainChecker::new();
    let faulty = Faulty::new(h.lock(&name).await.expect("lock"));
    let a = Elector::spawn(
        faulty.clone(),
        ElectorConfig {
            identity: Identity::new("a"),
            timing,
            release_on_shutdown: true,
        },
    );
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let (b, _) = contender(h, &name, "b", timing).await;
    checker.watch(b.leadership());
    wait_state(
        &b.leadership(),
        patience(&timing),
        "b to follow",
        is_follower,
    )
    .await;
    faulty.set(Some(fault));
    let cut = Instant::now();
    // The leader stops passing check() by its renew deadline, without being told.
    wait_state(&a.leadership(), patience(&timing), "a to step down", |s| {
        !matches!(s, LeaderState::Leader { .. })
    })
    .await;
    assert!(
        a.leadership().check().is_err(),
        "a cut-off leader must not pass check()"
    );
    assert!(
        cut.elapsed() <= timing.renew_deadline + patience(&timing),
        "stepped down late"
    );
    let t2 = wait_leader(
        &b.leadership(),
        patience(&timing),
        "b after a lost its lock",
    )
    .await;
    assert!(t2 > t1);
    faulty.set(None);
    // Back in touch, a sees b's lease and follows; it never passes check() meanwhile.
    wait_state(
        &a.leadership(),
        patience(&timing),
        "a to follow b",
        |s| matches!(s, LeaderState::Follower { holder: Some(h), .. } if !h.starts_with("a_")),
    )
    .await;
    assert!(a.leadership().check().is_err());
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

/// A leader whose lock calls hang (a paused link) stops passing `check()` and does not come back.
pub async fn paused_holder_stops<H: Harness + ?Sized>(h: &H) {
    cut_off_leader(h, Fault::Hang).await
}

/// A leader cut off from the backend stops at its renew deadline; another takes over after expiry.
pub async fn partitioned_holder_stops<H: Harness + ?Sized>(h: &H) {
    cut_off_leader(h, Fault::Fail).await
}

/// Damaged or foreign records never panic and never let a contender steal a valid lease.
pub async fn tampered_records<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    for case in Tamper::ALL {
        let name = unique("tamper");
        let protect = h
            .tamper(&name, case)
            .await
            .expect("harness plants the record");
        let written = Instant::now();
        let (c, lock) = contender(h, &name, "c", timing).await;
        // Reading it must not panic; an error is fine.
        let _ = lock.get().await;
        match protect {
            Protect::Nothing => {
                wait_leader(
                    &c.leadership(),
                    patience(&timing),
                    &format!("contender over {case:?}"),
                )
                .await;
            }
            Protect::For(window) => {
                let limit = window + patience(&timing);
                let l = c.leadership();
                let led = tokio::time::timeout(limit, l.wait_leader()).await;
                let at = Instant::now();
                assert!(
                    matches!(led, Ok(Ok(_))),
                    "{case:?}: the contender never led after the record lapsed ({limit:?})"
                );
                assert!(
                    at >= written + window,
                    "{case:?}: the contender took a lease that was still valid ({:?} early)",
                    (written + window) - at
                );
            }
        }
        c.abort().await;
    }
}

/// Two processes with the same configured identity never both lead.
pub async fn same_identity_never_both_lead<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    let name = unique("twins");
    let checker = SplitBrainChecker::new();
    let (a, _) = contender(h, &name, "twin", timing).await;
    let (b, _) = contender(h, &name, "twin", timing).await;
    checker.watch(a.leadership());
    checker.watch(b.leadership());
    wait_any_leader(
        &[a.leadership(), b.leadership()],
        patience(&timing),
        "the twins",
    )
    .await;
    tokio::time::sleep(timing.lease_duration * 2).await;
    let (la, lb) = (a.leadership().is_leader(), b.leadership().is_leader());
    assert!(la != lb, "exactly one twin leads (a: {la}, b: {lb})");
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

/// Generates one `#[tokio::test]` per conformance case for a harness.
///
/// `$make` is an async function (or closure) returning a value that implements [`Harness`].
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            mutual_exclusion,
            renew_keeps_holder,
            graceful_release_is_prompt,
            crash_taken_after_expiry,
            paused_holder_stops,
            partitioned_holder_stops,
            tampered_records,
            same_identity_never_both_lead
        );
    };
    (@cases $make:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let h = ($make)().await;
                $crate::conformance::$case(&h).await;
            }
        )*
    };
}
