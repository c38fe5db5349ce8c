//! Records that vanish or move without a release (issue 9, sections 1 to 3), on a real etcd.
//!
//! - A leader whose lock hangs (its elector alive, `check()` truthful) while its key is deleted
//!   or its lease revoked underneath: nobody may lead while it could still believe it leads.
//! - A leader whose record vanishes steps down at once and nobody recreates it early.
//! - A record moved onto another lease: the leader steps down, and followers take it over after
//!   a lease, not after the foreign lease's hour.
//! - A graceful release is seen on the watch: the handover beats the retry period.

mod common;

use std::time::Duration;

use etcd_client::PutOptions;
use leader_lock::conformance::{
    patience, wait_following, wait_leader, wait_state, Fault, Faulty, SplitBrainChecker,
};
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState, Timing};
use leader_lock_etcd::DEFAULT_KEY_PREFIX;
use testkit::etcd::EtcdServer;
use tokio::time::Instant;

/// How the record disappears.
#[derive(Debug, Clone, Copy)]
enum Vanish {
    /// `etcdctl del <key>`: the lease stays.
    Delete,
    /// `etcdctl lease revoke <lease>`: the key goes with it.
    Revoke,
}

fn key(name: &str) -> String {
    format!("{DEFAULT_KEY_PREFIX}{name}")
}

async fn vanish(server: &EtcdServer, name: &str, how: Vanish) {
    let mut raw = common::raw_client(server).await;
    match how {
        Vanish::Delete => {
            let r = raw.delete(key(name), None).await.expect("delete");
            assert_eq!(r.deleted(), 1, "the key was there");
        }
        Vanish::Revoke => {
            let r = raw.get(key(name), None).await.expect("get");
            let lease = r.kvs().first().expect("the key is there").lease();
            raw.lease_revoke(lease).await.expect("revoke");
        }
    }
}

/// The leader's state must say it leads; returns the end of its validity.
fn valid_until(e: &Elector, who: &str) -> Instant {
    match e.leadership().state() {
        LeaderState::Leader { valid_until, .. } => valid_until,
        other => panic!("{who} should lead, but is {other:?}"),
    }
}

async fn hung_leader_loses_its_record(how: Vanish) {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "hung";
    let checker = SplitBrainChecker::new();
    let faulty = Faulty::new(common::lock(&server, name).await);
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
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = common::contender(&server, name, "b").await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    // Let a renew a few times while b watches.
    tokio::time::sleep(timing.retry_period * 3).await;

    // a's process hangs: its elector still runs, so check() stays truthful until valid_until.
    faulty.set(Some(Fault::Hang));
    let a_valid_until = valid_until(&a, "a");
    vanish(&server, name, how).await;
    let vanished = Instant::now();

    let t2 = wait_leader(
        &b.leadership(),
        patience(&timing),
        "b after a's record vanished",
    )
    .await;
    let led = Instant::now();
    assert!(
        led >= a_valid_until,
        "{how:?}: b led {:?} before the hung leader's validity ended",
        a_valid_until - led
    );
    assert!(t2 > t1, "the term increases ({t1} -> {t2})");
    // Not a poll later either: b waits out a lease from a's last renew it saw, then takes it.
    let took = led - vanished;
    assert!(
        took <= timing.lease_duration + Duration::from_secs(1),
        "{how:?}: b took {took:?} after the vanish, more than a lease"
    );
    eprintln!(
        "{how:?}: b led {took:?} after the record vanished (a's validity ended {:?} after)",
        a_valid_until.saturating_duration_since(vanished)
    );
    faulty.set(None);
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_under_a_hung_leader_is_not_taken_while_it_may_lead() {
    hung_leader_loses_its_record(Vanish::Delete).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_under_a_hung_leader_is_not_taken_while_it_may_lead() {
    hung_leader_loses_its_record(Vanish::Revoke).await;
}

/// Polls the key every few milliseconds; returns when it holds a value again.
async fn wait_recreated(server: &EtcdServer, name: &str, limit: Duration) -> Instant {
    let mut raw = common::raw_client(server).await;
    tokio::time::timeout(limit, async {
        loop {
            let r = raw.get(key(name), None).await.expect("get");
            if !r.kvs().is_empty() {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("someone recreates the key")
}

async fn leader_sees_its_record_vanish(how: Vanish) {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "own";
    let checker = SplitBrainChecker::new();
    // A graceful release first, with nobody to hand the key to, so that the release marker
    // holds an older term: a deletion by hand must not pass for that release.
    let z = common::contender(&server, name, "z").await;
    checker.watch(z.leadership());
    wait_leader(&z.leadership(), patience(&timing), "z").await;
    assert!(z.shutdown().await.expect("z releases"), "z released");
    let mut raw = common::raw_client(&server).await;
    let marker = raw
        .get(format!("{}#released", key(name)), None)
        .await
        .expect("get the marker");
    assert!(!marker.kvs().is_empty(), "z's release wrote the marker");
    let a = common::contender(&server, name, "a").await;
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = common::contender(&server, name, "b").await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    tokio::time::sleep(timing.retry_period * 3).await;

    // Every validity a published until it stepped down, so the check below uses its last one.
    let mut states = a.leadership().subscribe();
    let last_valid = tokio::spawn(async move {
        let mut last = None;
        loop {
            match *states.borrow_and_update() {
                LeaderState::Leader { valid_until, .. } => last = last.max(Some(valid_until)),
                _ => return last,
            }
            if states.changed().await.is_err() {
                return last;
            }
        }
    });
    vanish(&server, name, how).await;
    let vanished = Instant::now();
    // The leader finds out on its next renew and stops at once.
    wait_state(
        &a.leadership(),
        timing.retry_period + Duration::from_secs(1),
        "a to step down after its record vanished",
        |s| !matches!(s, LeaderState::Leader { .. }),
    )
    .await;
    let stepped_down = vanished.elapsed();
    // Nobody (the old leader included) recreates it before the holder's validity ended.
    let recreated = wait_recreated(&server, name, patience(&timing)).await;
    let gap = recreated - vanished;
    let a_valid_until = last_valid
        .await
        .expect("tracker")
        .expect("a led before the vanish");
    assert!(
        recreated >= a_valid_until,
        "{how:?}: the key was recreated {gap:?} after it vanished, {:?} before its holder's \
         validity ended",
        a_valid_until - recreated
    );
    // After the wait anyone may take it, the old leader included, under a new term.
    let (_, t2) = leader_lock::conformance::wait_any_leader(
        &[a.leadership(), b.leadership()],
        patience(&timing),
        "someone after the vanish",
    )
    .await;
    assert!(t2 > t1, "the term increases ({t1} -> {t2})");
    eprintln!(
        "{how:?}: a stepped down {stepped_down:?} after the vanish; the key came back {gap:?} \
         after it, {:?} after a's validity ended",
        recreated - a_valid_until
    );
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_whose_key_is_deleted_steps_down_and_nobody_recreates_it_early() {
    leader_sees_its_record_vanish(Vanish::Delete).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_whose_lease_is_revoked_steps_down_and_nobody_recreates_it_early() {
    leader_sees_its_record_vanish(Vanish::Revoke).await;
}

/// The repro: `lease grant 3600`, then `put --lease=<id>` with the same value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_record_makes_the_leader_step_down_and_does_not_hold_followers_hostage() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "moved";
    let checker = SplitBrainChecker::new();
    let a = common::contender(&server, name, "a").await;
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = common::contender(&server, name, "b").await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    tokio::time::sleep(timing.retry_period * 3).await;

    let mut raw = common::raw_client(&server).await;
    let hour = raw.lease_grant(3600, None).await.expect("grant").id();
    let current = raw.get(key(name), None).await.expect("get");
    let value = current.kvs().first().expect("a's record").value().to_vec();
    raw.put(key(name), value, Some(PutOptions::new().with_lease(hour)))
        .await
        .expect("put on the other lease");
    let moved = Instant::now();

    wait_state(
        &a.leadership(),
        timing.retry_period + Duration::from_secs(1),
        "a to step down after its record moved",
        |s| !matches!(s, LeaderState::Leader { .. }),
    )
    .await;
    let stepped_down = moved.elapsed();
    // Then it crashes: nobody renews the moved record.
    a.abort().await;
    let t2 = wait_leader(
        &b.leadership(),
        timing.lease_duration * 3,
        "b after the moved record's holder crashed",
    )
    .await;
    let took = moved.elapsed();
    assert!(t2 > t1, "the term increases ({t1} -> {t2})");
    assert!(
        took >= timing.renew_deadline,
        "b led {took:?} after the move, while a could still lead"
    );
    assert!(
        took <= timing.lease_duration + Duration::from_secs(1),
        "b led {took:?} after the move: more than a lease after the record stopped changing"
    );
    eprintln!("a stepped down {stepped_down:?} after the move; b led {took:?} after it");
    b.abort().await;
    checker.finish().await;
}

/// A graceful release reaches the follower through the watch and the release marker: the
/// handover takes well under a retry period (a follower that only polled would need one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_release_hands_over_within_a_retry_period() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let base = common::timing();
    // A long retry period and lease: neither a poll nor an expiry can pass for a prompt handover.
    let timing = Timing::new(
        Duration::from_secs(10),
        Duration::from_secs(8),
        Duration::from_secs(3),
    )
    .expect("valid timing");
    let name = "handover";
    let checker = SplitBrainChecker::new();
    let spawn = |id: &'static str| {
        let server = &server;
        async move {
            Elector::spawn(
                common::lock(server, name).await,
                ElectorConfig {
                    identity: Identity::new(id),
                    timing,
                    release_on_shutdown: true,
                },
            )
            .expect("a valid timing")
        }
    };
    let mut leader = spawn("c0").await;
    checker.watch(leader.leadership());
    let mut term = wait_leader(&leader.leadership(), patience(&timing), "c0").await;
    for (round, id) in ["c1", "c2", "c3", "c4"].into_iter().enumerate() {
        let next = spawn(id).await;
        checker.watch(next.leadership());
        wait_following(&next.leadership(), patience(&timing), id).await;
        tokio::time::sleep(base.retry_period).await;
        let started = Instant::now();
        assert!(leader.shutdown().await.expect("release"), "released");
        let t = wait_leader(&next.leadership(), timing.retry_period, id).await;
        let took = started.elapsed();
        assert!(t > term, "the term increases ({term} -> {t})");
        assert!(
            took < timing.retry_period / 10,
            "round {round}: the handover took {took:?}"
        );
        eprintln!("round {round}: graceful handover in {took:?}");
        term = t;
        leader = next;
    }
    leader.abort().await;
    checker.finish().await;
}

/// A crash still hands over at the lease's expiry: the vanish rule counts from the last renew
/// the follower saw, which is about when the lease's last keep-alive arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_hands_over_at_lease_expiry_not_a_lease_later() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "crash";
    let checker = SplitBrainChecker::new();
    let a = common::contender(&server, name, "a").await;
    checker.watch(a.leadership());
    let t1 = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = common::contender(&server, name, "b").await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    tokio::time::sleep(timing.retry_period * 3).await;
    a.abort().await;
    let crashed = Instant::now();
    let t2 = wait_leader(&b.leadership(), patience(&timing), "b after a crashed").await;
    let took = crashed.elapsed();
    assert!(t2 > t1, "the term increases ({t1} -> {t2})");
    // The lease runs out at most a lease after the crash; etcd checks expiry every 500 ms.
    assert!(
        took <= timing.lease_duration + Duration::from_millis(1200),
        "b led {took:?} after the crash"
    );
    eprintln!(
        "crash handover after {took:?} (lease {:?})",
        timing.lease_duration
    );
    b.abort().await;
    checker.finish().await;
}

/// Without a watch, a follower that finds the key gone replays its history: renewals it never
/// saw make it wait a lease from now, not from its last read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_without_a_watch_replays_the_history() {
    use leader_lock::backend::Attempt;
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "replay";
    let (la, lb) = common::two_locks(&server, name).await;
    let (a, b) = (common::candidate("a"), common::candidate("b"));
    assert!(matches!(
        la.try_acquire_or_renew(&a).await,
        Ok(Attempt::Leader { .. })
    ));
    assert!(matches!(
        lb.try_acquire_or_renew(&b).await,
        Ok(Attempt::Follower { .. })
    ));
    // Renewals b does not see, spread over more than the wait b would have from its read.
    for _ in 0..4 {
        tokio::time::sleep(timing.lease_duration / 4).await;
        assert!(matches!(
            la.try_acquire_or_renew(&a).await,
            Ok(Attempt::Leader { .. })
        ));
    }
    vanish(&server, name, Vanish::Delete).await;
    match lb.try_acquire_or_renew(&b).await {
        Ok(Attempt::Follower {
            retry_after: Some(wait),
            ..
        }) => assert!(
            wait + Duration::from_millis(200) >= timing.lease_duration,
            "b waits {wait:?}, less than a lease after finding the key gone"
        ),
        other => panic!("b must wait for the vanished record: {other:?}"),
    }
    // The old leader finds its record gone and does not recreate it either.
    match la.try_acquire_or_renew(&a).await {
        Ok(Attempt::Follower {
            retry_after: Some(wait),
            ..
        }) => assert!(wait > timing.lease_duration / 2, "a waits {wait:?}"),
        other => panic!("a must not recreate its vanished record: {other:?}"),
    }

    // When b did see the last version, the replay recognises it: the wait counts from then.
    let name = "replay-seen";
    let (la, lb) = common::two_locks(&server, name).await;
    assert!(matches!(
        la.try_acquire_or_renew(&a).await,
        Ok(Attempt::Leader { .. })
    ));
    assert!(matches!(
        lb.try_acquire_or_renew(&b).await,
        Ok(Attempt::Follower { .. })
    ));
    let seen = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    vanish(&server, name, Vanish::Delete).await;
    match lb.try_acquire_or_renew(&b).await {
        Ok(Attempt::Follower {
            retry_after: Some(wait),
            ..
        }) => {
            let due = seen + timing.lease_duration;
            let at = Instant::now() + wait;
            assert!(
                at <= due + Duration::from_millis(100) && at + Duration::from_millis(500) >= due,
                "b's wait ends {:?} from a lease after it saw the record",
                if at > due { at - due } else { due - at }
            );
        }
        other => panic!("b must wait for the vanished record: {other:?}"),
    }
}
