//! Shutting down: within the budget, after the writes in flight, releasing or not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use leader_lock::backend::{
    Attempt, Candidate, LeaderLock, LockError, LockEventStream, LockRecord,
};
use leader_lock::conformance::{wait_leader, Fault, Faulty};
use leader_lock::elector::SHUTDOWN_BUDGET;
use leader_lock::leadership::NotLeader;
use leader_lock::{clock, LeaderState, MemoryStore, Term, Timing};
use tokio::time::Instant;

use crate::support::*;

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
async fn a_dropped_elector_stops_as_abort_does() {
    let _serial = serial();
    let store = MemoryStore::new();
    let lock = store.lock("dropped");
    let a = spawn(Arc::new(lock.clone()), "a", true);
    let l = a.leadership();
    wait_leader(&l, PATIENCE, "a").await;
    drop(a);
    assert_eq!(l.state(), LeaderState::Stopped);
    assert!(l.check().is_err(), "no write starts after the drop");
    // Its loop renews no more: the record expires, and another replica takes the lock.
    tokio::time::sleep(timing().lease_duration).await;
    assert!(lock.get().await.expect("read").is_none(), "left to expire");
    let b = spawn(Arc::new(lock.clone()), "b", true);
    wait_leader(&b.leadership(), PATIENCE, "b").await;
    b.abort().await;
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
