//! The redis-server itself fails: killed and restarted empty, or paused past the renew deadline.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leader_lock::conformance::SplitBrainChecker;
use leader_lock::conformance::{patience, wait_state};
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState, Term};
use leader_lock_redis::RedisLock;
use tokio::time::Instant;

async fn contenders(r: &common::Redis, name: &str, n: usize) -> Vec<Elector> {
    let mut v = Vec::new();
    for i in 0..n {
        let lock = RedisLock::connect(common::config(&r.server.url(), &common::timing()), name)
            .await
            .expect("connects");
        v.push(
            Elector::spawn(
                Arc::new(lock),
                ElectorConfig {
                    identity: Identity::new(format!("c{i}")),
                    timing: common::timing(),
                    release_on_shutdown: true,
                },
            )
            .expect("a valid timing"),
        );
    }
    v
}

/// Waits until exactly one of `pool` passes `check()`; returns its index and term.
async fn some_leader(pool: &[Elector], limit: Duration, what: &str) -> (usize, Term) {
    tokio::time::timeout(limit, async {
        loop {
            if let Some(found) = pool
                .iter()
                .enumerate()
                .find_map(|(i, e)| e.leadership().check().ok().map(|p| (i, p.term)))
            {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: nobody led within {limit:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restarted_empty_no_split_brain() {
    let mut r = common::Redis::start().await;
    let timing = common::timing();
    let limit = patience(&timing);
    let checker = SplitBrainChecker::new();
    let pool = contenders(&r, "restart", 3).await;
    for e in &pool {
        checker.watch(e.leadership());
    }
    let (leader, t1) = some_leader(&pool, limit, "before the restart").await;
    // Let a few renewals pass so the old leader is well established.
    tokio::time::sleep(timing.retry_period * 3).await;
    assert!(pool[leader].leadership().check().is_ok());

    let before_restart = Instant::now();
    r.server.kill();
    r.server
        .restart()
        .await
        .expect("restarts empty on the same port");
    eprintln!("redis-server restarted in {:?}", before_restart.elapsed());

    // The old leader steps down at once: its renew finds the key gone (or fails until the
    // renew deadline), it does not keep writing.
    wait_state(
        &pool[leader].leadership(),
        limit,
        "the old leader to step down",
        |s| !matches!(s, LeaderState::Leader { term, .. } if *term == t1),
    )
    .await;

    let (next, t2) = some_leader(&pool, limit, "after the restart").await;
    let led = Instant::now();
    assert!(
        led >= before_restart + timing.lease_duration,
        "a lock that vanished with the restart was taken {:?} after it, before a full lease",
        led - before_restart
    );
    assert!(
        t2 > t1,
        "the term increases across a restart ({t1} -> {t2})"
    );
    eprintln!(
        "after the restart c{next} leads with term {t2} (was c{leader} with {t1}), \
         {:?} after the kill",
        led - before_restart
    );
    for e in pool {
        e.abort().await;
    }
    checker.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_paused_past_renew_deadline() {
    let r = common::Redis::start().await;
    let timing = common::timing();
    let limit = patience(&timing);
    let checker = SplitBrainChecker::new();
    let pool = contenders(&r, "pause", 3).await;
    for e in &pool {
        checker.watch(e.leadership());
    }
    let (leader, t1) = some_leader(&pool, limit, "before the pause").await;
    tokio::time::sleep(timing.retry_period * 2).await;

    r.server.pause().expect("SIGSTOP");
    let paused = Instant::now();
    wait_state(
        &pool[leader].leadership(),
        limit,
        "the leader to stop leading while redis is paused",
        |s| !matches!(s, LeaderState::Leader { .. }),
    )
    .await;
    let stepped = paused.elapsed();
    assert!(
        pool.iter().all(|e| e.leadership().check().is_err()),
        "nobody may pass check() while redis is frozen"
    );
    eprintln!("the leader stopped {stepped:?} after redis froze");
    // Stay frozen past the lease too, so the key expires the moment the server runs again.
    let frozen_for = timing.lease_duration + timing.retry_period;
    tokio::time::sleep(frozen_for.saturating_sub(paused.elapsed())).await;
    assert!(pool.iter().all(|e| e.leadership().check().is_err()));
    r.server.resume().expect("SIGCONT");

    let (next, t2) = some_leader(&pool, limit, "after the resume").await;
    assert!(t2 >= t1, "terms never go back ({t1} -> {t2})");
    if next != leader {
        assert!(t2 > t1, "a new holder has a greater term ({t1} -> {t2})");
    }
    // Leadership holds steady again for a while.
    tokio::time::sleep(timing.lease_duration).await;
    some_leader(&pool, limit, "steady after the resume").await;
    for e in pool {
        e.abort().await;
    }
    checker.finish().await;
}
