//! A graceful handover in one write (issue 20): the leader's release transaction moves the key
//! onto a live candidate's spare lease under its name, and the candidate leads on that write
//! without one of its own, under a new term (that write's revision). A candidate whose spare
//! lease nobody keeps alive is passed over. Everything is read on the server: the key's history
//! through a watch this test opens, the candidates' registrations and their leases.

mod common;

use std::time::Duration;

use etcd_client::PutOptions;
use leader_lock::conformance::{
    patience, wait_following, wait_leader, Fault, Faulty, SplitBrainChecker,
};
use leader_lock::{LeaderState, Term, Timing};
use serde_json::Value;
use testkit::etcd::EtcdServer;
use tokio::time::Instant;

use common::handover::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_key_to_the_follower_in_one_write() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    // A long retry period: the successor's first renew comes seconds after it leads, so the
    // key read right after it leads shows whether it wrote anything to lead.
    let timing = Timing::new(
        Duration::from_secs(10),
        Duration::from_secs(8),
        Duration::from_secs(6),
    )
    .expect("valid timing");
    let name = "handover";
    let checker = SplitBrainChecker::new();
    let (a, b, old) = a_leads_b_follows(&server, name, timing, &checker).await;
    let (a_holder, b_holder) = (a.candidate().holder(), b.candidate().holder());

    let mut raw = common::raw_client(&server).await;
    // b registered as a candidate on its spare lease while it followed.
    let spare = registered(&mut raw, name, &b_holder, patience(&timing))
        .await
        .lease();
    assert_ne!(spare, 0, "the candidacy is attached to b's spare lease");
    let before = raw.get(key(name), None).await.expect("get the key");
    let created = before
        .kvs()
        .first()
        .expect("a holds the key")
        .create_revision();

    let mut history = History::from_now(&mut raw, name).await;
    assert!(a.shutdown().await.expect("a releases"), "a released");
    let new = wait_leader(&b.leadership(), patience(&timing), "b after a's release").await;
    let at_lead = raw.get(key(name), None).await.expect("get the key");

    let handover = history
        .next_not_renewed_by(&a_holder, patience(&timing))
        .await;
    assert!(
        handover.put,
        "the first change after the release is no deletion: {handover:?}"
    );
    assert_eq!(handover.holder(), b_holder, "the key names the successor");
    assert_eq!(handover.kv.lease(), spare, "on the successor's spare lease");
    assert_eq!(
        handover.value()["handover"],
        Value::Bool(true),
        "marked as a handover"
    );
    assert_eq!(
        handover.kv.create_revision(),
        created,
        "the key was never deleted"
    );
    assert_eq!(
        new,
        Term(handover.kv.mod_revision().unsigned_abs()),
        "the successor's term is the handover write's revision"
    );
    assert!(new > old, "the term goes up ({old} -> {new})");
    let kv = at_lead.kvs().first().expect("the key is there");
    assert_eq!(
        kv.mod_revision(),
        handover.kv.mod_revision(),
        "the successor led on the handover write, without a write of its own"
    );

    // The successor's first renew keeps its term, now in the value.
    let renew = history.next(patience(&timing)).await;
    assert!(renew.put, "b renews: {renew:?}");
    assert_eq!(renew.holder(), b_holder);
    assert_eq!(renew.kv.create_revision(), created);
    assert_eq!(
        renew.value()["term"].as_u64(),
        Some(new.0),
        "the renew carries the term"
    );
    assert!(renew.value()["renewTime"].is_string());
    assert_eq!(
        term_of(&b),
        Some(new),
        "b still leads under the handover term"
    );
    b.abort().await;
    checker.finish().await;
}

/// A follower whose candidacy is lost while its watch shows the holder renewing (it makes no
/// attempt then) registers again from its spare keeper, and the next release hands it the key:
/// revoking its spare lease by hand stands for a grant or a put that failed (CI once saw a
/// follower with no candidacy after a slow start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_spare_lease_is_revoked_registers_again() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "handover";
    let checker = SplitBrainChecker::new();
    let (a, b, _) = a_leads_b_follows(&server, name, timing, &checker).await;
    let (a_holder, b_holder) = (a.candidate().holder(), b.candidate().holder());

    let mut raw = common::raw_client(&server).await;
    let first = registered(&mut raw, name, &b_holder, patience(&timing))
        .await
        .lease();
    raw.lease_revoke(first)
        .await
        .expect("revoke b's spare lease");
    let gone = raw
        .get(candidacy(name, &b_holder), None)
        .await
        .expect("get the candidacy");
    assert!(gone.kvs().is_empty(), "the candidacy went with its lease");
    let again = registered(&mut raw, name, &b_holder, patience(&timing))
        .await
        .lease();
    assert_ne!(again, first, "registered again, on a new spare lease");
    assert!(
        matches!(b.leadership().state(), LeaderState::Follower { .. }),
        "b still follows"
    );

    let mut history = History::from_now(&mut raw, name).await;
    assert!(a.shutdown().await.expect("a releases"), "a released");
    wait_leader(&b.leadership(), patience(&timing), "b after a's release").await;
    let handover = history
        .next_not_renewed_by(&a_holder, patience(&timing))
        .await;
    assert!(handover.put, "a handover, not a deletion: {handover:?}");
    assert_eq!(handover.holder(), b_holder, "handed to b");
    assert_eq!(handover.kv.lease(), again, "on b's new spare lease");
    b.abort().await;
    checker.finish().await;
}

/// A candidate registered on a lease that nobody keeps alive, a lease of `ttl` seconds; returns
/// once its TTL has dropped below what a release takes for alive: a third of it and a second,
/// when a leader chose its successor ahead a third of its own lease before the release.
async fn dead_candidate(raw: &mut etcd_client::Client, name: &str, ttl: i64) -> String {
    let holder = "dead_00000000".to_string();
    let lease = raw.lease_grant(ttl, None).await.expect("grant").id();
    let value = format!(r#"{{"holder":"{holder}","leaseDurationSeconds":{ttl}}}"#);
    raw.put(
        candidacy(name, &holder),
        value,
        Some(PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("register the dead candidate");
    let deadline = Instant::now() + Duration::from_secs(ttl.unsigned_abs() * 4);
    loop {
        let left = raw
            .lease_time_to_live(lease, None)
            .await
            .expect("time to live")
            .ttl();
        assert!(
            left > 0,
            "the dead candidate's lease ran out before the test used it"
        );
        let ahead = common::timing().lease_duration.as_secs() / 3;
        if ttl - left > ttl / 3 + 1 + i64::try_from(ahead).expect("a short lease") {
            return holder;
        }
        assert!(
            Instant::now() < deadline,
            "the dead candidate's TTL never dropped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_candidate_is_passed_over_for_a_live_one() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "handover";
    let checker = SplitBrainChecker::new();
    let mut raw = common::raw_client(&server).await;
    let a = common::contender_with(&server, name, "a", timing).await;
    checker.watch(a.leadership());
    wait_leader(&a.leadership(), patience(&timing), "a").await;
    // Registered before b, so the oldest candidate: the first one a release would look at.
    let dead = dead_candidate(&mut raw, name, 9).await;
    let b = common::contender_with(&server, name, "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    let (a_holder, b_holder) = (a.candidate().holder(), b.candidate().holder());

    let mut history = History::from_now(&mut raw, name).await;
    assert!(a.shutdown().await.expect("a releases"), "a released");
    wait_leader(&b.leadership(), patience(&timing), "b after a's release").await;
    let handover = history
        .next_not_renewed_by(&a_holder, patience(&timing))
        .await;
    assert!(handover.put, "a handover, not a deletion: {handover:?}");
    assert_ne!(
        handover.holder(),
        dead,
        "the dead candidate was handed the key"
    );
    assert_eq!(
        handover.holder(),
        b_holder,
        "the live candidate was handed the key"
    );
    b.abort().await;
    checker.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_only_a_dead_candidate_the_release_deletes_the_key_as_before() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "handover";
    let checker = SplitBrainChecker::new();
    let mut raw = common::raw_client(&server).await;
    let a = common::contender_with(&server, name, "a", timing).await;
    checker.watch(a.leadership());
    let term = wait_leader(&a.leadership(), patience(&timing), "a").await;
    dead_candidate(&mut raw, name, 9).await;

    let mut history = History::from_now(&mut raw, name).await;
    let a_holder = a.candidate().holder();
    assert!(a.shutdown().await.expect("a releases"), "a released");
    let release = history
        .next_not_renewed_by(&a_holder, patience(&timing))
        .await;
    assert!(
        !release.put,
        "the key was deleted, not handed over: {release:?}"
    );
    let marker = raw
        .get(format!("{}#released", key(name)), None)
        .await
        .expect("get the marker");
    let marker = marker.kvs().first().expect("the release marker");
    assert_eq!(marker.value(), term.0.to_string().as_bytes());
    assert_eq!(
        marker.mod_revision(),
        release.kv.mod_revision(),
        "one transaction"
    );

    // The next contender takes the released key at once.
    let c = common::contender_with(&server, name, "c", timing).await;
    checker.watch(c.leadership());
    let next = wait_leader(&c.leadership(), patience(&timing), "c").await;
    assert!(next > term);
    c.abort().await;
    checker.finish().await;
}

/// A key handed to a candidate that never takes it (its lock calls hang; its process, and so its
/// spare's keeper, lives on): the other followers never take it as a stale record, since the
/// successor would lead on it without a write of its own; the hung candidate's keeper lets its
/// spare lease go once nobody campaigns with the lock, which deletes the key; the others then
/// wait a lease from that deletion, as for any key deleted without a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_handed_to_a_candidate_that_never_takes_it_is_freed_by_its_keeper() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "handover";
    let checker = SplitBrainChecker::new();
    let mut raw = common::raw_client(&server).await;
    let a = common::contender(&server, name, "a").await;
    checker.watch(a.leadership());
    wait_leader(&a.leadership(), patience(&timing), "a").await;
    let faulty = Faulty::new(common::lock(&server, name).await);
    let b = common::elector(faulty.clone(), "b", timing);
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    // Registered after b: b is the oldest candidate, the one a release hands the key to.
    let c = common::contender(&server, name, "c").await;
    checker.watch(c.leadership());
    wait_following(&c.leadership(), patience(&timing), "c").await;
    let (a_holder, b_holder) = (a.candidate().holder(), b.candidate().holder());
    faulty.set(Some(Fault::Hang));

    let mut history = History::from_now(&mut raw, name).await;
    assert!(a.shutdown().await.expect("a releases"), "a released");
    let handover = history
        .next_not_renewed_by(&a_holder, patience(&timing))
        .await;
    assert!(handover.put, "a handover: {handover:?}");
    assert_eq!(
        handover.holder(),
        b_holder,
        "handed to the oldest candidate"
    );
    let freed = history.next(patience(&timing)).await;
    let deleted = Instant::now();
    assert!(
        !freed.put,
        "the next change deletes the handed key (no one renewed or took it): {freed:?}"
    );
    assert!(
        c.leadership().check().is_err(),
        "c led on a key handed to someone else"
    );
    let lease = raw
        .lease_time_to_live(handover.kv.lease(), None)
        .await
        .expect("time to live");
    assert!(lease.ttl() <= 0, "b's spare lease was let go: {lease:?}");
    wait_leader(
        &c.leadership(),
        patience(&timing),
        "c after the handed key was freed",
    )
    .await;
    assert!(
        deleted.elapsed() >= timing.lease_duration,
        "c led {:?} after the deletion, less than a lease",
        deleted.elapsed()
    );
    faulty.set(None);
    b.abort().await;
    c.abort().await;
    checker.finish().await;
}

/// Without a watch (the lock alone, no elector), a candidate learns of the handover from its
/// next attempt's read, and takes the key on the pass after it, still without a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_without_a_watch_takes_the_key_on_its_next_attempt() {
    use leader_lock::backend::Attempt;
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let name = "handover";
    let common::Contenders {
        la,
        lb,
        a,
        b,
        term: old,
    } = a_releases_with_b_following(&server, name).await;
    let mut raw = common::raw_client(&server).await;
    let handed = raw.get(key(name), None).await.expect("get the key");
    let handed = handed
        .kvs()
        .first()
        .expect("the key was handed over, not deleted");
    let txns_before = common::calls(server.client_port(), "Txn").started;
    let Ok(Attempt::Leader { term, .. }) = lb.try_acquire_or_renew(&b).await else {
        panic!("b takes the key handed to it");
    };
    assert_eq!(term, Term(handed.mod_revision().unsigned_abs()));
    assert!(term > old);
    let after = raw.get(key(name), None).await.expect("get the key");
    assert_eq!(
        after.kvs().first().map(|kv| kv.mod_revision()),
        Some(handed.mod_revision()),
        "b took the key without writing it"
    );
    assert_eq!(
        common::calls(server.client_port(), "Txn").started,
        txns_before,
        "b sent no transaction to take the key"
    );
    let record = lb.get().await.expect("get").expect("a record");
    assert_eq!((record.holder, record.term), (b.holder(), term));
    // The old leader follows the new one.
    match la.try_acquire_or_renew(&a).await {
        Ok(Attempt::Follower {
            holder, term: t, ..
        }) => {
            assert_eq!((holder, t), (Some(b.holder()), Some(term)));
        }
        other => panic!("a follows b: {other:?}"),
    }
}
