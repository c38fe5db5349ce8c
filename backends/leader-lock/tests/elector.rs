//! Elector behaviour beyond the conformance suite, on the in-memory lock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leader_lock::conformance::{wait_leader, wait_state, SplitBrainChecker};
use leader_lock::{
    Attempt, Candidate, Elector, ElectorConfig, Identity, LeaderLock, LeaderState, LockError,
    LockEventStream, LockRecord, MemoryStore, NotLeader, Term, Timing,
};

fn timing() -> Timing {
    Timing::new(
        Duration::from_millis(1500),
        Duration::from_millis(1000),
        Duration::from_millis(200),
    )
    .expect("valid")
}

const PATIENCE: Duration = Duration::from_secs(30);

fn spawn(lock: Arc<dyn LeaderLock>, id: &str, release: bool) -> Elector {
    Elector::spawn(
        lock,
        ElectorConfig {
            identity: Identity::new(id),
            timing: timing(),
            release_on_shutdown: release,
        },
    )
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
        Err(LockError::Unavailable("watch refused".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_fall_back_to_polling_without_a_watch() {
    let store = MemoryStore::new();
    let checker = SplitBrainChecker::new();
    let a = spawn(Arc::new(NoWatch(Arc::new(store.lock("l")))), "a", true);
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), PATIENCE, "a").await;
    let b = spawn(Arc::new(NoWatch(Arc::new(store.lock("l")))), "b", true);
    checker.watch(b.leadership());
    wait_state(&b.leadership(), PATIENCE, "b follows", |s| {
        matches!(s, LeaderState::Follower { .. })
    })
    .await;
    assert!(a.shutdown().await.expect("release"));
    let t2 = wait_leader(&b.leadership(), PATIENCE, "b by polling").await;
    assert!(t2 > t1);
    b.abort().await;
    checker.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_writes_in_flight_before_releasing() {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_on_shutdown_off_leaves_the_lease_to_expire() {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_never_passes_check() {
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

async fn wait_until(f: impl Fn() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("condition within patience");
}
