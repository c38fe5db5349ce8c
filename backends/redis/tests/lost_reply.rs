//! An acquire whose reply is lost can still be applied by Redis (issue 9, section 3): the
//! candidate must recognise its own incarnation as the holder at once, not a retry period
//! later while the lock is held and nobody leads.

mod common;
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leader_lock::backend::{
    Attempt, Candidate, LeaderLock, LockError, LockEventStream, LockRecord,
};
use leader_lock::conformance::{wait_following, wait_leader};
use leader_lock::{Elector, ElectorConfig, Identity, Term, Timing};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What one attempt did: when it started and ended, and whether it was refused by the spy.
#[derive(Debug, Clone)]
struct Call {
    started: Instant,
    ended: Instant,
    injected: bool,
    ok: bool,
}

/// Wraps a lock: reports every attempt, and can refuse new attempts before they reach Redis.
struct Spy {
    inner: Arc<dyn LeaderLock>,
    refuse: AtomicBool,
    calls: mpsc::UnboundedSender<Call>,
}

#[async_trait]
impl LeaderLock for Spy {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let started = Instant::now();
        let (r, injected) = if self.refuse.load(Ordering::SeqCst) {
            (Err(LockError::unavailable("refused by the test")), true)
        } else {
            (self.inner.try_acquire_or_renew(c).await, false)
        };
        let _ = self.calls.send(Call {
            started,
            ended: Instant::now(),
            injected,
            ok: r.is_ok(),
        });
        r
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        self.inner.watch().await
    }
}

async fn next_call(
    rx: &mut mpsc::UnboundedReceiver<Call>,
    what: &str,
    pred: impl Fn(&Call) -> bool,
) -> Call {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let c = rx.recv().await.expect("the spy lives");
            if pred(&c) {
                return c;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {what} within 60s"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_applied_after_its_reply_timed_out() {
    let r = common::Redis::start().await;
    // A long retry period, so that "at the next retry" and "at once" are far apart.
    let timing = Timing::new(
        Duration::from_millis(4000),
        Duration::from_millis(3000),
        Duration::from_millis(1000),
    )
    .expect("timing");
    let url = r.server.url();
    let connect = || async {
        leader_lock_redis::RedisLock::connect(common::config(&url, &timing), "lost")
            .await
            .expect("connects")
    };
    // b takes the lock and crashes: it never renews.
    let lb = connect().await;
    let b = support::candidate("b", &timing);
    support::acquire(&lb, &b, Duration::from_secs(30)).await;
    let held_by_b = Instant::now();

    let (tx, mut calls) = mpsc::unbounded_channel();
    let spy = Arc::new(Spy {
        inner: Arc::new(connect().await),
        refuse: AtomicBool::new(false),
        calls: tx,
    });
    let a = Elector::spawn(
        spy.clone(),
        ElectorConfig {
            identity: Identity::new("a"),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing");
    wait_following(&a.leadership(), Duration::from_secs(30), "a").await;

    // Freeze redis just before b's lease ends: a's takeover attempt will hang.
    tokio::time::sleep_until(held_by_b + timing.lease_duration - Duration::from_millis(500)).await;
    r.server.pause().expect("SIGSTOP");
    let paused = Instant::now();
    let sent = next_call(&mut calls, "attempt into the frozen server", |c| {
        c.started >= paused && !c.ok
    })
    .await;
    eprintln!(
        "a's attempt into the frozen server failed after {:?}",
        sent.ended - sent.started
    );
    // Keep later attempts away from redis until one has been refused: then the elector's next
    // own attempt is a retry period away.
    spy.refuse.store(true, Ordering::SeqCst);
    next_call(&mut calls, "a refused attempt", |c| c.injected).await;
    spy.refuse.store(false, Ordering::SeqCst);
    r.server.resume().expect("SIGCONT");

    // The frozen attempt is applied now: the lock holds a's record.
    let mut raw = r.raw().await;
    let held = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let v: Option<String> = redis::cmd("GET")
                .arg(lb.holder_key())
                .query_async(&mut raw)
                .await
                .expect("get");
            if v.is_some_and(|v| v.contains("\"a_")) {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the lost acquire was applied when redis thawed");
    wait_leader(&a.leadership(), Duration::from_secs(30), "a").await;
    let gap = held.elapsed();
    eprintln!("the lock was a's for {gap:?} before a led");
    assert!(
        gap < timing.retry_period / 2,
        "the lock was held by a for {gap:?} with nobody leading"
    );
    a.abort().await;
}
