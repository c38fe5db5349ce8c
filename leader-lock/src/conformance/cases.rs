//! The cases of the suite. Every case watches its contenders with a [`SplitBrainChecker`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::checker::SplitBrainChecker;
use super::faulty::{Fault, Faulty};
use super::harness::{patience, Harness, Protect, Tamper};
use super::wait::{wait_any_leader, wait_following, wait_leader, wait_state};
use crate::backend::{
    Attempt, Candidate, ConfigError, LeaderLock, LockError, LockEventStream, LockRecord,
};
use crate::{Elector, ElectorConfig, Identity, LeaderState, Leadership, Term, Timing};

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

fn is_follower(s: &LeaderState) -> bool {
    matches!(s, LeaderState::Follower { .. })
}

fn is_leader(s: &LeaderState) -> bool {
    matches!(s, LeaderState::Leader { .. })
}

fn elector(lock: Arc<dyn LeaderLock>, id: &str, timing: Timing) -> Elector {
    Elector::spawn(
        lock,
        ElectorConfig {
            identity: Identity::new(id),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing")
}

/// A contender on its own client of lock `name`, behind a [`Faulty`] so that it can be crashed
/// (hung) while its elector lives on and keeps telling the truth.
async fn contender<H: Harness + ?Sized>(
    h: &H,
    name: &str,
    id: &str,
    timing: Timing,
) -> (Elector, Arc<Faulty>) {
    let lock = h.lock(name).await.expect("harness gives a lock client");
    let faulty = Faulty::new(lock);
    (elector(faulty.clone(), id, timing), faulty)
}

/// When contender `i` last stopped leading, and the validity deadline it stopped at the latest.
///
/// Returns the instant of the first non-leader state published after `after`, and the
/// `valid_until` of the last leadership published before it.
fn step_down(checker: &SplitBrainChecker, i: usize, after: Instant) -> (Instant, Instant) {
    let history = checker.history(i);
    let mut last_valid = None;
    for (at, state) in &history {
        match state {
            LeaderState::Leader { valid_until, .. } => last_valid = Some(*valid_until),
            _ if *at >= after && last_valid.is_some() => {
                return (*at, last_valid.expect("led before"));
            }
            _ => {}
        }
    }
    panic!("contender {i} did not step down after the fault: {history:?}")
}

/// Five contenders over many rounds: one leader at a time, terms increase, handovers happen.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
pub async fn mutual_exclusion<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    let name = unique("mutex");
    let checker = SplitBrainChecker::new();
    let mut pool = Vec::new();
    for i in 0..5 {
        let (e, faulty) = contender(h, &name, &format!("c{i}"), timing).await;
        checker.watch(e.leadership());
        pool.push((e, faulty));
    }
    let mut crashed = Vec::new();
    let mut terms = Vec::new();
    for round in 0..8 {
        let leaderships: Vec<Leadership> = pool.iter().map(|(e, _)| e.leadership()).collect();
        let term =
            wait_any_leader(&leaderships, patience(&timing), &format!("round {round}")).await;
        terms.push(term.1);
        let (leader, faulty) = pool.remove(term.0);
        // Alternate graceful stops and crashes of the leader. A crashed leader keeps running and
        // believes it leads until its validity ends; nobody else may lead before.
        if round % 2 == 0 {
            leader.shutdown().await.expect("release");
        } else {
            faulty.set(Some(Fault::Hang));
            crashed.push(leader);
        }
        let (e, faulty) = contender(h, &name, &format!("r{round}"), timing).await;
        checker.watch(e.leadership());
        pool.push((e, faulty));
    }
    for e in pool.into_iter().map(|(e, _)| e).chain(crashed) {
        e.abort().await;
    }
    checker.finish().await;
    for w in terms.windows(2) {
        assert!(w[1] > w[0], "terms must strictly increase: {terms:?}");
    }
}

/// A leader keeps its term across many renewals while another contender follows.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
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
    // An observation period, not a synchronisation: many renewals must happen in it.
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
    assert_eq!(checker.finish().await, vec![(0, term)]);
}

/// Counts what a contender's lock did, so a case can act right after it.
struct Probe {
    inner: Arc<dyn LeaderLock>,
    attempts: AtomicUsize,
    watch_answered: AtomicBool,
    changed: Notify,
}

impl Probe {
    fn new(inner: Arc<dyn LeaderLock>) -> Arc<Self> {
        Arc::new(Probe {
            inner,
            attempts: AtomicUsize::new(0),
            watch_answered: AtomicBool::new(false),
            changed: Notify::new(),
        })
    }

    /// Waits until an attempt has finished and the first watch request has been answered.
    async fn settled(&self, limit: Duration) {
        let done = tokio::time::timeout(limit, async {
            loop {
                let changed = self.changed.notified();
                if self.attempts.load(Ordering::SeqCst) > 0
                    && self.watch_answered.load(Ordering::SeqCst)
                {
                    return;
                }
                changed.await;
            }
        })
        .await;
        assert!(
            done.is_ok(),
            "the contender did not settle within {limit:?}"
        );
    }
}

#[async_trait]
impl LeaderLock for Probe {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        self.inner.validate(timing)
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let r = self.inner.try_acquire_or_renew(c).await;
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
        r
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let r = self.inner.watch().await;
        self.watch_answered.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
        r
    }
}

/// A graceful release lets a waiting contender lead within half a retry period: the release is
/// seen on the watch. A follower that only polls would wait a retry period, and fails this.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
pub async fn graceful_release_is_prompt<H: Harness + ?Sized>(h: &H) {
    let base = h.timing();
    // A long lease so that taking over by expiry cannot pass for a prompt handover.
    let timing = Timing {
        lease_duration: base.lease_duration * 5,
        ..base
    };
    let bound = base.retry_period / 2;
    let name = unique("release");
    let checker = SplitBrainChecker::new();
    let (mut leader, _) = contender(h, &name, "a", timing).await;
    checker.watch(leader.leadership());
    let mut term = wait_leader(&leader.leadership(), patience(&timing), "a").await;
    for round in 1..=3 {
        let probe = Probe::new(h.lock(&name).await.expect("lock"));
        let next = elector(probe.clone(), &format!("b{round}"), timing);
        checker.watch(next.leadership());
        wait_following(&next.leadership(), patience(&timing), "the next contender").await;
        // Right after its first attempt, and with its watch up: a follower that only polls
        // would now sleep a whole retry period.
        probe.settled(patience(&timing)).await;
        let released_at = Instant::now();
        assert!(leader.shutdown().await.expect("release works"), "released");
        let t2 = wait_leader(
            &next.leadership(),
            base.lease_duration,
            "the follower after a graceful release",
        )
        .await;
        let took = released_at.elapsed();
        assert!(t2 > term, "term increases on handover ({term} -> {t2})");
        eprintln!("graceful handover {round} took {took:?}");
        assert!(
            took < bound,
            "handover {round} took {took:?}, not below half the retry period ({bound:?}): \
             was the release seen on the watch?"
        );
        (leader, term) = (next, t2);
    }
    leader.abort().await;
    checker.finish().await;
}

/// A crashed leader (hung, its elector alive) is succeeded only after its validity ended, and
/// then promptly.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
pub async fn crash_taken_after_expiry<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    let name = unique("crash");
    let checker = SplitBrainChecker::new();
    let (a, faulty) = contender(h, &name, "a", timing).await;
    let ia = checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let (b, _) = contender(h, &name, "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    faulty.set(Some(Fault::Hang));
    let crashed = Instant::now();
    let t2 = wait_leader(&b.leadership(), patience(&timing), "b after a crash").await;
    let led = Instant::now();
    let (stepped_down, valid_until) = step_down(&checker, ia, crashed);
    assert!(
        led >= valid_until,
        "b led before a's validity ended ({:?} early)",
        valid_until - led
    );
    // a's last renew was sent a renew deadline before its validity ends; its lease runs a lease
    // duration from about then.
    let due = valid_until - timing.renew_deadline + timing.lease_duration;
    assert!(
        led <= due + timing.retry_period,
        "b led {:?} after the lease could be taken",
        led - due
    );
    assert!(t2 > t1, "term increases on takeover ({t1} -> {t2})");
    eprintln!(
        "crash takeover after {:?}; the crashed leader stepped down {:?} after its deadline",
        led - crashed,
        stepped_down.saturating_duration_since(valid_until)
    );
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

async fn cut_off_leader<H: Harness + ?Sized>(h: &H, fault: Fault) {
    let timing = h.timing();
    let name = unique(if fault == Fault::Hang {
        "pause"
    } else {
        "partition"
    });
    let checker = SplitBrainChecker::new();
    let (a, faulty) = contender(h, &name, "a", timing).await;
    let ia = checker.watch(a.leadership());
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
        !is_leader(s)
    })
    .await;
    assert!(
        a.leadership().check().is_err(),
        "a cut-off leader must not pass check()"
    );
    let (stepped_down, valid_until) = step_down(&checker, ia, cut);
    let slack = timing.retry_period / 2;
    assert!(
        stepped_down <= valid_until + slack,
        "a stepped down {:?} after its validity ended (slack {slack:?})",
        stepped_down - valid_until
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

/// A leader whose lock calls hang (a paused link) steps down at its validity deadline and does
/// not come back.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
pub async fn paused_holder_stops<H: Harness + ?Sized>(h: &H) {
    cut_off_leader(h, Fault::Hang).await
}

/// A leader cut off from the backend stops at its renew deadline; another takes over after expiry.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
pub async fn partitioned_holder_stops<H: Harness + ?Sized>(h: &H) {
    cut_off_leader(h, Fault::Fail).await
}

/// Damaged or foreign records never panic and never let a contender steal a valid lease.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
pub async fn tampered_records<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    for case in Tamper::ALL {
        let name = unique("tamper");
        let protect = h
            .tamper(&name, case)
            .await
            .expect("harness plants the record");
        let written = Instant::now();
        let lock = h.lock(&name).await.expect("lock");
        let c = elector(lock.clone(), "c", timing);
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
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
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
    // An observation period: the twins must stay apart through many renewals.
    tokio::time::sleep(timing.lease_duration * 2).await;
    let (la, lb) = (a.leadership().is_leader(), b.leadership().is_leader());
    assert!(la != lb, "exactly one twin leads (a: {la}, b: {lb})");
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

/// A record deleted by hand under a hung leader (its elector alive, `check()` truthful) is not
/// free: nobody leads while the old leader may still believe it is valid, and someone leads
/// afterwards.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
pub async fn vanished_record_is_not_free<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    let name = unique("vanish");
    let checker = SplitBrainChecker::new();
    let (a, faulty) = contender(h, &name, "a", timing).await;
    let ia = checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let (b, _) = contender(h, &name, "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    faulty.set(Some(Fault::Hang));
    let hung = Instant::now();
    h.vanish(&name).await.expect("harness deletes the record");
    let vanished = Instant::now();
    let t2 = wait_leader(
        &b.leadership(),
        patience(&timing) + timing.lease_duration,
        "b after the record vanished",
    )
    .await;
    let led = Instant::now();
    // The hung leader steps down by itself at its deadline; then its whole validity is known.
    wait_state(&a.leadership(), patience(&timing), "a to step down", |s| {
        !is_leader(s)
    })
    .await;
    // The exact check: b's leadership must not overlap a's last validity at all.
    let v = checker.violations();
    assert!(v.is_empty(), "split brain: {}", v.join("; "));
    let (_, valid_until) = step_down(&checker, ia, hung);
    eprintln!(
        "b led {:?} after the record vanished; a's validity ended {:?} after it",
        led - vanished,
        valid_until.saturating_duration_since(vanished)
    );
    assert!(t2 > t1, "the term never goes back ({t1} -> {t2})");
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

/// A leader whose record is deleted by hand stops leading at once (it does not recreate the
/// record on its next renew), and someone leads again later.
///
/// # Cancel safety
/// Run it to its end, as a test does: dropped part-way, its electors campaign on until the
/// runtime stops.
pub async fn vanished_record_ends_leadership<H: Harness + ?Sized>(h: &H) {
    let timing = h.timing();
    let name = unique("vanish-leader");
    let checker = SplitBrainChecker::new();
    let (a, _) = contender(h, &name, "a", timing).await;
    let ia = checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let (b, _) = contender(h, &name, "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    let before = Instant::now();
    h.vanish(&name).await.expect("harness deletes the record");
    // The deletion is seen on the watch, or at the latest by the next renew.
    wait_state(
        &a.leadership(),
        timing.lease_duration,
        "a to stop leading after its record vanished",
        |s| !is_leader(s),
    )
    .await;
    let (stepped_down, valid_until) = step_down(&checker, ia, before);
    let limit = timing.retry_period * 2;
    assert!(
        stepped_down - before <= limit,
        "a stepped down {:?} after its record vanished (limit {limit:?})",
        stepped_down - before
    );
    assert!(stepped_down < valid_until, "not by the validity deadline");
    let (who, t2) = wait_any_leader(
        &[a.leadership(), b.leadership()],
        patience(&timing) + timing.lease_duration,
        "a leader after the record vanished",
    )
    .await;
    eprintln!(
        "a stepped down {:?} after the deletion; contender {who} led {:?} after it",
        stepped_down - before,
        before.elapsed()
    );
    assert!(t2 > t1, "the term never goes back ({t1} -> {t2})");
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}
