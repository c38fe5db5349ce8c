//! A graceful handover in one write (issue 20): the leader's release transaction moves the key
//! onto a live candidate's spare lease under its name, and the candidate leads on that write
//! without one of its own, under a new term (that write's revision). A candidate whose spare
//! lease nobody keeps alive is passed over. Everything is read on the server: the key's history
//! through a watch this test opens, the candidates' registrations and their leases.

mod common;

use std::collections::VecDeque;
use std::time::Duration;

use etcd_client::{EventType, KeyValue, PutOptions, WatchOptions, WatchStream};
use leader_lock::conformance::{
    patience, wait_following, wait_leader, Fault, Faulty, SplitBrainChecker,
};
use leader_lock::{Elector, Identity, LeaderState, Term, Timing};
use leader_lock_etcd::DEFAULT_KEY_PREFIX;
use serde_json::Value;
use testkit::etcd::EtcdServer;
use tokio::time::Instant;

fn key(name: &str) -> String {
    format!("{DEFAULT_KEY_PREFIX}{name}")
}

fn candidacy(name: &str, holder: &str) -> String {
    format!("{}#candidates/{holder}", key(name))
}

/// `holder`'s candidacy as the server holds it, waiting for it within `limit`: a follower
/// registers on its first attempt, which may end after its watch has already shown it the
/// holder (and so after `wait_following` returns).
async fn registered(
    raw: &mut etcd_client::Client,
    name: &str,
    holder: &str,
    limit: Duration,
) -> KeyValue {
    let key = candidacy(name, holder);
    let now = raw
        .get(key.as_str(), None)
        .await
        .expect("get the candidacy");
    if let Some(kv) = now.kvs().first() {
        return kv.clone();
    }
    let rev = now.header().expect("a header").revision();
    let options = WatchOptions::new().with_start_revision(rev + 1);
    let mut stream = raw
        .watch(key.as_str(), Some(options))
        .await
        .expect("watch the candidacy");
    let deadline = Instant::now() + limit;
    loop {
        let msg = tokio::time::timeout_at(deadline, stream.message())
            .await
            .unwrap_or_else(|_| panic!("{holder} did not register as a candidate in time"))
            .expect("the watch works")
            .expect("the watch stays open");
        let put = msg
            .events()
            .iter()
            .filter(|ev| ev.event_type() == EventType::Put)
            .find_map(|ev| ev.kv());
        if let Some(kv) = put {
            return kv.clone();
        }
    }
}

/// One change of the key as the server recorded it.
#[derive(Debug, Clone)]
struct Change {
    put: bool,
    kv: KeyValue,
}

impl Change {
    fn value(&self) -> Value {
        serde_json::from_slice(self.kv.value()).unwrap_or(Value::Null)
    }

    fn holder(&self) -> String {
        self.value()["holder"].as_str().unwrap_or("").to_string()
    }
}

/// The key's changes from a revision on, in order, through a watch of the test's own.
struct History {
    stream: WatchStream,
    pending: VecDeque<Change>,
}

impl History {
    /// Watches `name`'s key from the revision after the server's current one.
    async fn from_now(raw: &mut etcd_client::Client, name: &str) -> Self {
        let now = raw.get(key(name), None).await.expect("get");
        let rev = now.header().expect("a header").revision();
        let options = WatchOptions::new().with_start_revision(rev + 1);
        let stream = raw.watch(key(name), Some(options)).await.expect("watch");
        History {
            stream,
            pending: VecDeque::new(),
        }
    }

    /// The next change, within `limit`.
    async fn next(&mut self, limit: Duration) -> Change {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(c) = self.pending.pop_front() {
                return c;
            }
            let msg = tokio::time::timeout_at(deadline, self.stream.message())
                .await
                .expect("a change of the key within the deadline")
                .expect("the watch works")
                .expect("the watch stays open");
            for ev in msg.events() {
                let kv = ev.kv().expect("an event's key-value").clone();
                self.pending.push_back(Change {
                    put: ev.event_type() == EventType::Put,
                    kv,
                });
            }
        }
    }

    /// The next change that is not a renew by `holder` (renews before the release are no part
    /// of the handover).
    async fn next_not_renewed_by(&mut self, holder: &str, limit: Duration) -> Change {
        loop {
            let c = self.next(limit).await;
            if !(c.put && c.holder() == holder) {
                return c;
            }
        }
    }
}

/// Electors `a`, leading on `name` (its term returned), and `b`, following, both watched by
/// `checker`.
async fn a_leads_b_follows(
    server: &EtcdServer,
    name: &str,
    timing: Timing,
    checker: &SplitBrainChecker,
) -> (Elector, Elector, Term) {
    let a = common::contender_with(server, name, "a", timing).await;
    checker.watch(a.leadership());
    let term = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = common::contender_with(server, name, "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    (a, b, term)
}

fn term_of(e: &Elector) -> Option<Term> {
    match e.leadership().state() {
        LeaderState::Leader { term, .. } => Some(term),
        _ => None,
    }
}

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

/// `a` led and released, and its release handed the key to `b`, who followed (and so
/// registered) before it.
async fn a_releases_with_b_following(server: &EtcdServer, name: &str) -> common::Contenders {
    use leader_lock::backend::Attempt;
    let (la, lb) = common::two_locks(server, name).await;
    let (a, b) = (common::candidate("a"), common::candidate("b"));
    let Ok(Attempt::Leader { term: old, .. }) = la.try_acquire_or_renew(&a).await else {
        panic!("a leads an empty lock");
    };
    assert!(matches!(
        lb.try_acquire_or_renew(&b).await,
        Ok(Attempt::Follower { .. })
    ));
    assert!(la.release(&a, old).await.expect("a releases"), "released");
    common::Contenders {
        la,
        lb,
        a,
        b,
        term: old,
    }
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
