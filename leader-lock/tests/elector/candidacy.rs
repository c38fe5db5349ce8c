//! A withdrawn candidacy: the leader hands over once its writes are done, a withdrawn replica
//! takes nothing, and a resumed one campaigns at once.

use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::LeaderLock;
use leader_lock::leadership::NotLeader;
use leader_lock::{LeaderState, MemoryStore};

use leader_lock::conformance::wait_leader;

use crate::support::{serial, spawn, timing, wait_until, PATIENCE};

#[tokio::test(start_paused = true)]
async fn a_withdrawn_leader_hands_over_after_its_writes_and_takes_nothing_back() {
    let _serial = serial();
    let store = MemoryStore::new();
    let lock = store.lock("aside");
    let a = spawn(Arc::new(lock.clone()), "a", true);
    let leadership = a.leadership();
    wait_leader(&leadership, PATIENCE, "a").await;
    let b = spawn(Arc::new(lock.clone()), "b", true);
    let permit = leadership.check().expect("a leads");

    a.candidacy().withdraw();
    // No new write from the moment it withdraws; the one in flight keeps the lock held.
    wait_until(|| matches!(leadership.check(), Err(NotLeader::Follower { .. }))).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = lock.get().await.expect("read").expect("held");
    assert!(
        held.holder.starts_with("a"),
        "released before the write ended: {held:?}"
    );
    assert!(!b.leadership().is_leader());

    drop(permit);
    wait_leader(&b.leadership(), PATIENCE, "b").await;
    let taken = lock.get().await.expect("read").expect("held");
    assert!(taken.holder.starts_with("b"), "{taken:?}");

    // b leaves; a, withdrawn, takes nothing, however long it waits.
    assert!(b.shutdown().await.expect("released"));
    tokio::time::sleep(timing().lease_duration * 3).await;
    assert!(!leadership.is_leader());
    assert!(
        lock.get().await.expect("read").is_none(),
        "a took the lock back"
    );
    assert!(matches!(leadership.state(), LeaderState::Follower { .. }));

    a.candidacy().resume();
    assert!(a.candidacy().is_campaigning());
    // At once, not a retry period later.
    tokio::time::timeout(Duration::from_millis(50), leadership.wait_leader())
        .await
        .expect("leads at once")
        .map(drop)
        .expect("leads");
    a.shutdown().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_withdrawn_follower_stays_out_when_the_lock_frees() {
    let _serial = serial();
    let store = MemoryStore::new();
    let lock = store.lock("follower-aside");
    let a = spawn(Arc::new(lock.clone()), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    let b = spawn(Arc::new(lock.clone()), "b", true);
    let follower = b.leadership();
    wait_until(|| {
        matches!(
            follower.state(),
            LeaderState::Follower {
                holder: Some(_),
                ..
            }
        )
    })
    .await;
    b.candidacy().withdraw();
    b.candidacy().withdraw();
    assert!(!b.candidacy().is_campaigning());
    a.shutdown().await.expect("release");
    tokio::time::sleep(timing().lease_duration * 2).await;
    assert!(!follower.is_leader());
    assert!(lock.get().await.expect("read").is_none());
    b.candidacy().resume();
    wait_leader(&follower, PATIENCE, "b").await;
    b.shutdown().await.expect("release");
}
