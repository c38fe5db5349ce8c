//! A record that vanishes without a release is not free (issue 9, section 1).
//!
//! The leader's lock hangs (a paused link: its elector lives on and `check()` stays truthful)
//! while its record disappears underneath: deleted, flushed, or evicted. No second leader may
//! pass `check()` while the first still could, and someone must lead in the end.

mod common;
mod support;

use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::{Attempt, LeaderLock};
use leader_lock::conformance::SplitBrainChecker;
use leader_lock::conformance::{patience, wait_following, wait_leader, wait_state, Fault, Faulty};
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState};
use leader_lock_redis::RedisLock;
use testkit::redis::RedisServer;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
enum Vanish {
    /// `DEL` of the holder key.
    Del,
    /// `FLUSHALL`: every key of the lock, the term counter included.
    FlushAll,
    /// Evicted under `maxmemory-policy volatile-ttl` (the holder key has the shortest TTL).
    Evicted,
}

async fn server(keyspace_events: bool) -> common::Redis {
    common::init_tracing();
    let mut opts = RedisServer::builder();
    if keyspace_events {
        // del, expired and evicted events: a follower hears of the vanish at once.
        opts = opts.arg("--notify-keyspace-events").arg("Kgxe");
    }
    common::Redis {
        server: opts.start().await.expect("redis-server starts"),
    }
}

async fn vanish(r: &common::Redis, lock: &RedisLock, how: Vanish) {
    let url = r.server.url();
    match how {
        Vanish::Del => {
            let n: i64 = support::raw(&url, &["DEL", lock.holder_key()]).await;
            assert_eq!(n, 1, "the holder key was there");
        }
        Vanish::FlushAll => {
            let _: () = support::raw(&url, &["FLUSHALL"]).await;
        }
        Vanish::Evicted => {
            let mut conn = r.raw().await;
            let used: String = redis::cmd("INFO")
                .arg("memory")
                .query_async(&mut conn)
                .await
                .expect("info");
            let used: u64 = used
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("used_memory");
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg("volatile-ttl")
                .arg("maxmemory")
                .arg(used + 256 * 1024)
                .query_async(&mut conn)
                .await
                .expect("config set");
            // Keys that outlive the lease by far: the holder key goes first.
            let filler = "x".repeat(4096);
            let mut evicted = false;
            for i in 0..10_000 {
                let _: () = redis::cmd("SET")
                    .arg(format!("filler:{i}"))
                    .arg(&filler)
                    .arg("EX")
                    .arg(3600)
                    .query_async(&mut conn)
                    .await
                    .expect("filler");
                let exists: i64 = redis::cmd("EXISTS")
                    .arg(lock.holder_key())
                    .query_async(&mut conn)
                    .await
                    .expect("exists");
                if exists == 0 {
                    evicted = true;
                    break;
                }
            }
            assert!(evicted, "the holder key was never evicted");
            // No more evictions: the next holder's key must stay.
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory")
                .arg(0)
                .query_async(&mut conn)
                .await
                .expect("config set");
        }
    }
}

async fn hung_leader_loses_its_record(how: Vanish, keyspace_events: bool) {
    let r = server(keyspace_events).await;
    let timing = common::timing();
    let limit = patience(&timing);
    let name = "vanish";
    let checker = SplitBrainChecker::new();
    let faulty = Faulty::new(Arc::new(r.connect(name).await));
    let a = Elector::spawn(
        faulty.clone(),
        ElectorConfig {
            identity: Identity::new("a"),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing");
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), limit, "a").await;
    let b = Elector::spawn(
        Arc::new(r.connect(name).await),
        ElectorConfig {
            identity: Identity::new("b"),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing");
    checker.watch(b.leadership());
    wait_following(&b.leadership(), limit, "b").await;
    // Let b's watch settle and a renew a few times.
    tokio::time::sleep(timing.retry_period * 3).await;

    faulty.set(Some(Fault::Hang));
    // A renew already past the gate may still land; wait it out before reading a's validity.
    tokio::time::sleep(timing.renew_deadline / 4).await;
    let LeaderState::Leader { valid_until, .. } = a.leadership().state() else {
        panic!("a still leads while its calls hang");
    };
    let probe = r.connect(name).await;
    vanish(&r, &probe, how).await;
    let vanished = Instant::now();

    let t2 = wait_leader(&b.leadership(), limit, "b after a's record vanished").await;
    let led = Instant::now();
    eprintln!(
        "{how:?} (keyspace events: {keyspace_events}): b led {:?} after the vanish, \
         {:?} after a's validity ended",
        led - vanished,
        led.saturating_duration_since(valid_until)
    );
    assert!(
        led >= valid_until,
        "{how:?}: b led {:?} before a's validity ended",
        valid_until - led
    );
    assert!(t2 > t1, "a new holder has a greater term ({t1} -> {t2})");
    // a stepped down on its own clock, and after the hang it follows b.
    assert!(a.leadership().check().is_err());
    faulty.set(None);
    wait_state(
        &a.leadership(),
        limit,
        "a to follow b",
        |s| matches!(s, LeaderState::Follower { holder: Some(h), .. } if h.starts_with("b_")),
    )
    .await;
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_leader_key_deleted_with_keyspace_events() {
    hung_leader_loses_its_record(Vanish::Del, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_leader_key_deleted() {
    hung_leader_loses_its_record(Vanish::Del, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_leader_flushall() {
    hung_leader_loses_its_record(Vanish::FlushAll, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_leader_key_evicted() {
    hung_leader_loses_its_record(Vanish::Evicted, true).await;
}

/// One call at a time: a release is told apart from a vanish even by a client that heard no
/// release message, and a vanish is waited out for a lease, not forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_is_free_vanished_waits_one_lease() {
    let r = server(false).await;
    let timing = common::timing();
    let lease = timing.lease_duration;
    let (la, lb) = (r.connect("marker").await, r.connect("marker").await);
    let a = support::candidate("a", &timing);
    let b = support::candidate("b", &timing);
    let ta = support::acquire(&la, &a, Duration::from_secs(30)).await;
    // b's client sees a hold the lock (no watch: it hears no messages).
    assert!(matches!(
        lb.try_acquire_or_renew(&b).await.expect("attempt"),
        Attempt::Follower { holder: Some(h), .. } if h == a.holder()
    ));
    // A release is free at once, message or not.
    assert!(la.release(&a, ta).await.expect("release"));
    let tb = match lb.try_acquire_or_renew(&b).await.expect("attempt") {
        Attempt::Leader { term, .. } => term,
        other => panic!("a released lock is free at once: {other:?}"),
    };
    assert!(tb > ta);

    // b's record deleted: a client that never saw b still waits out b's lease (the server keeps
    // the time of b's last renew), and is told exactly when to come back.
    let renewed = Instant::now();
    assert_eq!(
        lb.try_acquire_or_renew(&b).await.expect("renew"),
        Attempt::leader(tb)
    );
    let _: i64 = support::raw(&r.server.url(), &["DEL", lb.holder_key()]).await;
    let fresh = r.connect("marker").await;
    let c = support::candidate("c", &timing);
    match fresh.try_acquire_or_renew(&c).await.expect("attempt") {
        Attempt::Follower {
            retry_after: Some(wait),
            ..
        } => assert!(
            wait <= lease && Instant::now() + wait >= renewed + lease - Duration::from_millis(5),
            "wait {wait:?} does not end a lease after b's last renew"
        ),
        other => panic!("a deleted record is not free: {other:?}"),
    }
    let tc = support::acquire(&fresh, &c, Duration::from_secs(30)).await;
    assert!(Instant::now() >= renewed + lease - Duration::from_millis(5));
    assert!(tc > tb);

    // Everything flushed: a client that saw c alive waits a lease from when it found the lock
    // gone (it cannot know how long c renewed unseen), and then takes it: bounded, not forever.
    assert!(matches!(
        la.try_acquire_or_renew(&a).await.expect("attempt"),
        Attempt::Follower { holder: Some(h), .. } if h == c.holder()
    ));
    let _: () = support::raw(&r.server.url(), &["FLUSHALL"]).await;
    let found = Instant::now();
    match la.try_acquire_or_renew(&a).await.expect("attempt") {
        Attempt::Follower {
            retry_after: Some(wait),
            ..
        } => assert!(
            wait > lease / 2 && wait <= lease,
            "a vanished lock is waited out for about a lease ({wait:?})"
        ),
        other => panic!("a flushed lock is not free for a client that saw it held: {other:?}"),
    }
    support::acquire(&la, &a, Duration::from_secs(30)).await;
    let took = found.elapsed();
    assert!(
        took + Duration::from_millis(5) >= lease && took < lease * 2,
        "took a flushed lock after {took:?}"
    );
}
