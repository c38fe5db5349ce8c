//! What wakes a follower: its watch, its polls, and a watch that fails.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use leader_lock::backend::{
    Attempt, Candidate, LeaderLock, LockError, LockEvent, LockEventStream, LockRecord,
};
use leader_lock::conformance::{wait_following, wait_leader, wait_state, SplitBrainChecker};
use leader_lock::{LeaderState, MemoryStore, Term};
use tokio::time::Instant;

use crate::support::*;

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
        "the lock's term went backwards: its backend lost or rewrote the lock's state, \
         so terms no longer order leaderships",
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

/// After a failed attempt a follower tries again at the retry period, renewals or not: only an
/// answered attempt lets the watch put the next one off. A new follower's first attempt, or the
/// one after a failure, is what registers it with the lock (an etcd follower's candidacy); CI
/// saw etcd followers whose watch showed the holder renewing and that never attempted again.
#[tokio::test(start_paused = true)]
async fn a_failed_attempt_is_retried_though_the_watch_shows_renewals() {
    let _serial = serial();
    let (lock, events) = Scripted::with_events(&[
        (Duration::ZERO, Answer::Fail),
        (Duration::ZERO, Answer::Fail),
        (Duration::ZERO, Answer::Fail),
        (Duration::ZERO, Answer::Follow(7)),
    ]);
    let a = spawn(lock.clone(), "a", true);
    // The first attempt, and the one the watch's opening asks for: both fail.
    wait_until(|| lock.sends().len() >= 2).await;
    let failed = Instant::now();
    // Renewals every half retry period, for three retry periods.
    for n in 0..6 {
        let mut rec = record("b_1", 7);
        rec.version = format!("v{n}");
        events.send(LockEvent::Changed(Some(rec))).expect("send");
        tokio::time::sleep(timing().retry_period / 2).await;
    }
    let sends = lock.sends();
    let after: Vec<Duration> = sends.iter().skip(2).map(|s| *s - failed).collect();
    assert!(
        after.len() >= 2,
        "the failed attempts were not retried at the retry period: {after:?} after the second"
    );
    assert!(
        after[0] <= timing().retry_period.mul_f64(1.2),
        "retried after {:?}, beyond a jittered retry period",
        after[0]
    );
    a.abort().await;
}
