//! The `redis_elector` example on a throwaway redis-server: it leads and works, and on SIGTERM it
//! exits cleanly with the lock released.

use std::time::Duration;

use leader_lock::backend::LeaderLock;
use leader_lock_redis::{RedisConfig, RedisLock};
use testkit::redis::RedisServer;

/// How long any step may take on a busy machine: building the example, and the lease a fresh
/// Redis waits before it hands out a lock (15 s).
const PATIENCE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_elector_example_leads_then_releases_on_sigterm() {
    let server = RedisServer::start().await.expect("starting redis-server");
    let lock = RedisLock::connect(RedisConfig::new(server.url()), "redis-example")
        .await
        .expect("connecting to redis");
    let lock = &lock;
    testkit::cargo::run_elector_example(
        "leader-lock-redis",
        "redis_elector",
        &server.url(),
        PATIENCE,
        |term| async move {
            let held = lock.get().await.expect("reading the lock").expect("held");
            assert!(held.holder.starts_with("redis-example_"), "{held:?}");
            assert_eq!(held.term.to_string(), term);
        },
    )
    .await
    .expect("the example runs and stops cleanly");
    assert_eq!(
        lock.get().await.expect("reading the lock"),
        None,
        "released"
    );
}
