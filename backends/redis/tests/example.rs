//! The `redis_elector` example on a throwaway redis-server: it leads and works, and on SIGTERM it exits
//! cleanly with the lock released.

use std::time::Duration;

use leader_lock::LeaderLock;
use leader_lock_redis::{RedisConfig, RedisLock};
use nix::sys::signal::Signal;
use testkit::cargo::{workspace_example, Running};
use testkit::redis::RedisServer;

/// How long any step may take on a busy machine (the first includes building the example).
const PATIENCE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_elector_example_leads_then_releases_on_sigterm() {
    let server = RedisServer::start().await.expect("starting redis-server");
    let exe = workspace_example("leader-lock-redis", "redis_elector").expect("building it");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg(server.url());
    let mut example = Running::spawn(cmd).expect("starting it");
    let leading = example
        .wait_for_line(PATIENCE, "leading", |l| {
            l.starts_with("leading under term ")
        })
        .await
        .expect("it leads");

    // The lock agrees, and the guarded work runs.
    let lock = RedisLock::connect(RedisConfig::new(server.url()), "redis-example")
        .await
        .expect("connecting to redis");
    let held = lock.get().await.expect("reading the lock").expect("held");
    assert!(held.holder.starts_with("redis-example_"), "{held:?}");
    assert_eq!(leading, format!("leading under term {}", held.term));
    example
        .wait_for_line(PATIENCE, "working", |l| {
            l.starts_with("working under term ")
        })
        .await
        .expect("it works under its leadership");

    let (status, out) = example
        .stop(Signal::SIGTERM, PATIENCE)
        .await
        .expect("it exits");
    assert!(status.success(), "{status}; it printed {out:?}");
    assert_eq!(out.last().map(String::as_str), Some("released: true"));
    assert_eq!(
        lock.get().await.expect("reading the lock"),
        None,
        "released"
    );
}
