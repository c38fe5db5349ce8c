//! A follower costs the server next to nothing while its pub/sub watch is up (issue 9,
//! section 3): it learns of renewals, releases and expiry from messages, not by polling.

mod common;
mod support;

use std::collections::HashSet;
use std::time::Duration;

use leader_lock::conformance::{patience, wait_following, wait_leader};
use leader_lock::{Elector, Timing};
use leader_lock_redis::{RedisConfig, SentinelConfig};
use testkit::redis_sentinel::{SentinelTopology, MASTER};

async fn spawn(config: &RedisConfig, id: &str, timing: Timing) -> Elector {
    common::elector(config.clone(), "cost", id, timing).await
}

fn count(seen: &[(String, String)], who: &HashSet<String>) -> Vec<String> {
    seen.iter()
        .filter(|(addr, _)| who.contains(addr))
        .map(|(_, cmd)| cmd.clone())
        .collect()
}

/// A leader `a` and a follower `b` with `config`, each with the connections it opened to the
/// data node at `url` (the primary), counted once its watch has subscribed; fails when either
/// holds more than a command and a pub/sub connection.
async fn two_replicas(
    url: &str,
    config: &RedisConfig,
    timing: Timing,
) -> [(Elector, HashSet<String>); 2] {
    let before = support::client_addrs(url).await;
    let subscribes = support::command_calls(url, "subscribe").await;
    let a = spawn(config, "a", timing).await;
    wait_leader(&a.leadership(), patience(&timing), "a").await;
    // Each watch subscribes twice as it opens: once a's have run, a's connections are all there.
    support::wait_subscribes(url, subscribes + 2, patience(&timing)).await;
    let a_addrs: HashSet<String> = &support::client_addrs(url).await - &before;
    let b = spawn(config, "b", timing).await;
    wait_following(&b.leadership(), patience(&timing), "b").await;
    support::wait_subscribes(url, subscribes + 4, patience(&timing)).await;
    let b_addrs: HashSet<String> = &(&support::client_addrs(url).await - &before) - &a_addrs;
    eprintln!(
        "connections: leader {}, follower {}",
        a_addrs.len(),
        b_addrs.len()
    );
    assert_eq!(
        a_addrs.len(),
        2,
        "a has a command and a pub/sub connection: {a_addrs:?}"
    );
    assert_eq!(
        b_addrs.len(),
        2,
        "b has a command and a pub/sub connection: {b_addrs:?}"
    );
    [(a, a_addrs), (b, b_addrs)]
}

/// Counts the connections each replica holds and the commands a follower and the leader send
/// over three leases, once the follower's watch is up; fails when a replica holds more than a
/// command and a pub/sub connection, or the follower sends more than two commands.
async fn follower_cost(timing: Timing) {
    let r = common::Redis::start().await;
    let url = r.server.url();
    let before = support::client_addrs(&url).await;
    let [(a, a_addrs), (b, b_addrs)] =
        two_replicas(&url, &common::config(&url, &timing), timing).await;
    // Let b's first wake-ups pass.
    tokio::time::sleep(timing.lease_duration).await;

    let mut monitor = support::Monitor::start(r.server.port()).await;
    let window = timing.lease_duration * 3;
    tokio::time::sleep(window).await;
    let seen = monitor.drain();
    let (by_a, by_b) = (count(&seen, &a_addrs), count(&seen, &b_addrs));
    let per_s = |n: usize| n as f64 / window.as_secs_f64();
    eprintln!(
        "over {window:?} (lease {:?}, retry {:?}): leader sent {} commands ({:.2}/s), \
         follower {} ({:.2}/s): {by_b:?}",
        timing.lease_duration,
        timing.retry_period,
        by_a.len(),
        per_s(by_a.len()),
        by_b.len(),
        per_s(by_b.len()),
    );
    assert!(!by_a.is_empty(), "the monitor sees the leader's renewals");
    assert!(b.leadership().check().is_err() && a.leadership().check().is_ok());
    assert!(
        by_b.len() <= 2,
        "a watching follower polls: {} commands in {window:?}: {by_b:?}",
        by_b.len()
    );
    let now: HashSet<String> = &support::client_addrs(&url).await - &before;
    assert_eq!(
        now,
        &a_addrs | &b_addrs,
        "the replicas opened other connections meanwhile"
    );
    a.abort().await;
    b.abort().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_sends_almost_nothing_while_watching() {
    follower_cost(common::timing()).await;
}

/// The timing of the measurement: a 5 s lease, renewed every 0.8 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_sends_almost_nothing_at_a_5s_lease() {
    let timing = Timing::new(
        Duration::from_secs(5),
        Duration::from_secs(4),
        Duration::from_millis(800),
    )
    .expect("timing");
    follower_cost(timing).await;
}

/// Through Sentinel each replica still holds two connections to the primary: asking the
/// Sentinels, and checking that the server they name answers as the primary, leave none open
/// there. (The primary's `CLIENT LIST` also shows two connections per Sentinel,
/// `name=sentinel-…`, and the replica's replication link: seven more with three Sentinels and
/// one replica.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_sentinel_each_replica_holds_two_connections_to_the_primary() {
    common::init_tracing();
    let t = SentinelTopology::start()
        .await
        .expect("Sentinel topology starts");
    let timing = common::timing();
    let port = t
        .primary_port()
        .await
        .expect("the Sentinels name a primary");
    let url = format!("redis://127.0.0.1:{port}");
    // `url` names no server when the Sentinels name the primary.
    let mut config = common::config("", &timing);
    config.sentinel = Some(SentinelConfig {
        addresses: t.sentinel_urls(),
        master: MASTER.to_string(),
        username: None,
        password: None,
    });
    let before = support::client_addrs(&url).await;
    let [(a, a_addrs), (b, b_addrs)] = two_replicas(&url, &config, timing).await;
    tokio::time::sleep(timing.lease_duration * 3).await;
    let now: HashSet<String> = &support::client_addrs(&url).await - &before;
    assert_eq!(
        now,
        &a_addrs | &b_addrs,
        "the replicas opened other connections meanwhile"
    );
    assert!(a.leadership().check().is_ok() && b.leadership().check().is_err());
    a.abort().await;
    b.abort().await;
}
