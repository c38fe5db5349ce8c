//! Graceful handover over Redis, repeated: release → pub/sub → the follower leads.
//!
//! Prints the figures; the only assertion is that every handover beat the lease (it came from
//! the release message, not from expiry).

mod common;

use std::sync::Arc;

use leader_lock::conformance::SplitBrainChecker;
use leader_lock::conformance::{patience, wait_following, wait_leader};
use leader_lock::{Elector, ElectorConfig, Identity};
use leader_lock_redis::RedisLock;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_handover_figures() {
    let r = common::Redis::start().await;
    let base = common::timing();
    // A long lease, so that an expiry can never pass for a prompt handover.
    let timing = leader_lock::Timing {
        lease_duration: base.lease_duration * 5,
        ..base
    };
    let checker = SplitBrainChecker::new();
    let spawn = |id: String| {
        let url = r.server.url();
        async move {
            let lock = RedisLock::connect(common::config(&url, &timing), "handover")
                .await
                .expect("connects");
            Elector::spawn(
                Arc::new(lock),
                ElectorConfig {
                    identity: Identity::new(id),
                    timing,
                    release_on_shutdown: true,
                },
            )
            .expect("a valid timing")
        }
    };
    let mut leader = spawn("r0".into()).await;
    checker.watch(leader.leadership());
    wait_leader(&leader.leadership(), patience(&timing), "the first leader").await;
    let mut took = Vec::new();
    for round in 1..=15 {
        let next = spawn(format!("r{round}")).await;
        checker.watch(next.leadership());
        wait_following(&next.leadership(), patience(&timing), "to follow").await;
        // Let the follower's subscription settle.
        tokio::time::sleep(base.retry_period).await;
        let released = Instant::now();
        assert!(leader.shutdown().await.expect("release"), "released");
        wait_leader(&next.leadership(), base.lease_duration, "the follower").await;
        took.push(released.elapsed());
        leader = next;
    }
    leader.abort().await;
    checker.finish().await;
    took.sort();
    let pct = |p: f64| took[((took.len() - 1) as f64 * p).round() as usize];
    eprintln!(
        "graceful handover over redis, {} rounds: min {:?}, p50 {:?}, p90 {:?}, max {:?}",
        took.len(),
        took[0],
        pct(0.5),
        pct(0.9),
        took[took.len() - 1]
    );
    assert!(
        took.iter().all(|t| *t < base.retry_period / 2),
        "a handover was not prompt: {took:?}"
    );
}
