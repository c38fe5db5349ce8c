//! etcd killed and restarted (same data dir and ports) while a leader holds the lock.

mod common;

use std::time::Duration;

use leader_lock::conformance::SplitBrainChecker;
use leader_lock::conformance::{patience, wait_following, wait_leader, wait_state};
use leader_lock::LeaderState;
use testkit::etcd::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_one_leader_and_terms_increase() {
    common::init_tracing();
    let mut server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let checker = SplitBrainChecker::new();
    let a = common::contender(&server, "restart", "a").await;
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = common::contender(&server, "restart", "b").await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;

    server.kill();
    // Down longer than the renew deadline: the leader must stop passing check() on its own.
    wait_state(&a.leadership(), patience(&timing), "a to step down", |s| {
        !matches!(s, LeaderState::Leader { .. })
    })
    .await;
    assert!(a.leadership().check().is_err());
    assert!(b.leadership().check().is_err());
    tokio::time::sleep(timing.lease_duration).await;
    server.restart().await.expect("etcd restarts");

    let limit = patience(&timing);
    let (who, t2) = tokio::time::timeout(limit, async {
        loop {
            for (who, e) in [("a", &a), ("b", &b)] {
                if let Ok(p) = e.leadership().check() {
                    return (who, p.term);
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("someone leads after the restart");
    assert!(t2 >= t1, "terms never go back ({t1} -> {t2})");
    eprintln!("after the restart {who} leads with term {t2} (before: a with {t1})");
    // Leadership stays stable for a while.
    tokio::time::sleep(timing.lease_duration * 2).await;
    a.abort().await;
    b.abort().await;
    let leaders = checker.finish().await;
    assert!(!leaders.is_empty());
}
