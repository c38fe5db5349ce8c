//! No candidacy outlives a graceful stop (issue 20's handover): a follower that stops takes its
//! candidacy back, a leader's release deletes its own in the same write, and a follower that
//! stops with the key handed to it releases that key as its holder would. Read on the server:
//! the candidacies' and the key's changes through watches this test opens.

mod common;

use std::time::Duration;

use etcd_client::{EventType, WatchOptions, WatchStream};
use leader_lock::conformance::{patience, wait_following, wait_leader, SplitBrainChecker};
use leader_lock::Identity;
use testkit::etcd::EtcdServer;
use tokio::time::Instant;

use common::handover::*;

/// The candidacies' changes (puts and deletions, with their revisions) from now on.
async fn candidacies_from_now(raw: &mut etcd_client::Client, name: &str) -> WatchStream {
    let now = raw.get(key(name), None).await.expect("get");
    let rev = now.header().expect("a header").revision();
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(rev + 1);
    raw.watch(candidacy(name, ""), Some(options))
        .await
        .expect("watch the candidacies")
}

/// The revision at which `holder`'s candidacy was deleted, from `stream`, within `limit`.
async fn candidacy_deleted(
    stream: &mut WatchStream,
    name: &str,
    holder: &str,
    limit: Duration,
) -> i64 {
    let wanted = candidacy(name, holder).into_bytes();
    let deadline = Instant::now() + limit;
    loop {
        let msg = tokio::time::timeout_at(deadline, stream.message())
            .await
            .unwrap_or_else(|_| panic!("{holder}'s candidacy was not deleted in time"))
            .expect("the watch works")
            .expect("the watch stays open");
        for ev in msg.events() {
            let kv = ev.kv().expect("an event's key-value");
            if ev.event_type() == EventType::Delete && kv.key() == wanted.as_slice() {
                return kv.mod_revision();
            }
        }
    }
}

/// No candidacy outlives a graceful stop, or the next release could hand the lock to a process
/// that is gone (and everyone would wait for its lease and a lease more; the bench saw 7 s): a
/// follower that stops takes its candidacy back before it is gone, and a leader deletes its own
/// in its release's one write. Both locks stay referenced, so nothing but these two can delete
/// them (a lock dropped revokes its spare lease in the background).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_candidacy_outlives_a_graceful_stop() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "handover";
    let checker = SplitBrainChecker::new();
    let mut raw = common::raw_client(&server).await;
    let a = common::contender(&server, name, "a").await;
    checker.watch(a.leadership());
    wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b_lock = common::lock(&server, name).await;
    let b = common::elector(b_lock.clone(), "b", timing);
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    let c_lock = common::lock(&server, name).await;
    let c = common::elector(c_lock.clone(), "c", timing);
    checker.watch(c.leadership());
    wait_following(&c.leadership(), patience(&timing), "c").await;
    let d = common::contender(&server, name, "d").await;
    checker.watch(d.leadership());
    wait_following(&d.leadership(), patience(&timing), "d").await;
    let (a_holder, b_holder, c_holder, d_holder) = (
        a.candidate().holder(),
        b.candidate().holder(),
        c.candidate().holder(),
        d.candidate().holder(),
    );
    for h in [&b_holder, &c_holder, &d_holder] {
        registered(&mut raw, name, h, patience(&timing)).await;
    }

    // b, the oldest candidate, stops while following: its candidacy is gone when it is.
    assert!(!b.shutdown().await.expect("b stops"), "b held nothing");
    let left = raw
        .get(candidacy(name, &b_holder), None)
        .await
        .expect("get");
    assert!(
        left.kvs().is_empty(),
        "b stopped, its candidacy is still there: {:?}",
        left.kvs()
    );

    // a's release hands the key to c, not to b, who is gone.
    let mut history = History::from_now(&mut raw, name).await;
    assert!(a.shutdown().await.expect("a releases"), "a released");
    wait_leader(&c.leadership(), patience(&timing), "c after a's release").await;
    let handover = history
        .next_not_renewed_by(&a_holder, patience(&timing))
        .await;
    assert!(handover.put, "a handover: {handover:?}");
    assert_eq!(handover.holder(), c_holder, "handed to the live candidate");

    // c, leading on the key handed to it, stops: its candidacy goes in its release's write.
    let mut candidacies = candidacies_from_now(&mut raw, name).await;
    assert!(c.shutdown().await.expect("c releases"), "c released");
    wait_leader(&d.leadership(), patience(&timing), "d after c's release").await;
    let to_d = history
        .next_not_renewed_by(&c_holder, patience(&timing))
        .await;
    assert!(to_d.put, "a handover to d: {to_d:?}");
    assert_eq!(to_d.holder(), d_holder);
    let gone_at = candidacy_deleted(&mut candidacies, name, &c_holder, patience(&timing)).await;
    assert_eq!(
        gone_at,
        to_d.kv.mod_revision(),
        "c's candidacy went in the release's own write"
    );
    drop((b_lock, c_lock));
    d.abort().await;
    checker.finish().await;
}

/// A follower that stops after a release handed it the key, but before it took it, releases
/// that key as its holder would: deleted, with the release marker naming the handover's term,
/// so the next candidate takes it at once instead of waiting out a vanished record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_stops_with_the_key_handed_to_it_releases_it() {
    use leader_lock::backend::{Attempt, Candidate};
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let name = "handover";
    let common::Contenders {
        lb, b, term: old, ..
    } = a_releases_with_b_following(&server, name).await;
    let mut raw = common::raw_client(&server).await;
    let handed = raw.get(key(name), None).await.expect("get the key");
    let handed = handed.kvs().first().expect("the key was handed over");
    let handover_term = handed.mod_revision();
    assert!(handover_term.unsigned_abs() > old.0);

    lb.withdraw(&b).await.expect("b withdraws");
    let after = raw.get(key(name), None).await.expect("get the key");
    assert!(
        after.kvs().is_empty(),
        "the handed key is released: {:?}",
        after.kvs()
    );
    let marker = raw
        .get(format!("{}#released", key(name)), None)
        .await
        .expect("get the marker");
    assert_eq!(
        marker.kvs().first().map(|kv| kv.value().to_vec()),
        Some(handover_term.to_string().into_bytes()),
        "the release marker names the handover's term"
    );
    let left = raw
        .get(candidacy(name, &b.holder()), None)
        .await
        .expect("get");
    assert!(left.kvs().is_empty(), "b's candidacy went with it");

    // The next candidate saw the handed key and takes it at once: it was released.
    let lc = common::lock(&server, name).await;
    let c = Candidate {
        identity: Identity::new("c"),
        lease_duration: common::timing().lease_duration,
    };
    match lc.try_acquire_or_renew(&c).await {
        Ok(Attempt::Leader { term, .. }) => assert!(term.0 > handover_term.unsigned_abs()),
        other => panic!("c takes the released key at once: {other:?}"),
    }
}
