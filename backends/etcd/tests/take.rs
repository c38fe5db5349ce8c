//! What each side of a graceful handover sends (docs/etcd.md, "Handover: one write"): a leader
//! that chose its successor while leading releases with its transaction alone, and a successor
//! whose watch showed the key handed to it takes it without a request, its hold counted from an
//! instant the lease the server keeps outlives by a lease.

mod common;

use std::time::Duration;

use etcd_client::WatchOptions;
use leader_lock::conformance::patience;
use leader_lock::Term;
use leader_lock_etcd::DEFAULT_KEY_PREFIX;
use testkit::etcd::EtcdServer;
use tokio::time::Instant;

/// A successor whose watch showed the handover takes the key without a single request, and
/// its hold counts from a request that made sure of its spare lease before the release: the
/// server's lease outlasts that instant by a lease, and that instant precedes the handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_that_saw_the_handover_takes_it_without_a_request() {
    use futures::StreamExt;
    use leader_lock::backend::{Attempt, LockEvent};
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let name = "handover";
    let (la, lb) = common::two_locks(&server, name).await;
    let (a, b) = (common::candidate("a"), common::candidate("b"));
    let Ok(Attempt::Leader { term: old, .. }) = la.try_acquire_or_renew(&a).await else {
        panic!("a leads an empty lock");
    };
    let mut events = lb.watch().await.expect("b watches");
    let followed = lb.try_acquire_or_renew(&b).await;
    assert!(
        matches!(followed, Ok(Attempt::Follower { .. })),
        "{followed:?}"
    );
    let released = Instant::now();
    assert!(la.release(&a, old).await.expect("a releases"), "released");
    let limit = Instant::now() + patience(&timing);
    loop {
        let event = tokio::time::timeout_at(limit, events.next())
            .await
            .expect("b's watch shows the handover in time")
            .expect("the watch stays open");
        if matches!(&event, Ok(LockEvent::Changed(Some(r))) if r.holder == b.holder()) {
            break;
        }
    }
    let before = requests(server.client_port());
    let Ok(Attempt::Leader {
        term,
        held_from: Some(from),
    }) = lb.try_acquire_or_renew(&b).await
    else {
        panic!("b takes the key from its watch, its hold counted from before the attempt");
    };
    // Leading, b chooses its own successor (one Range: there is no candidate): nothing else.
    let choice = settled(server.client_port(), 0, before[0]).await;
    assert_eq!(
        choice,
        [before[0] + 1.0, before[1], before[2]],
        "b took the key without a request"
    );
    assert!(term > old);
    assert!(
        from < released,
        "the hold counts from before the handover was even sent"
    );
    let kv = handed_key(&server, name).await;
    assert_eq!(Term(kv.mod_revision().unsigned_abs()), term);
    let mut raw = common::raw_client(&server).await;
    let ttl = raw
        .lease_time_to_live(kv.lease(), None)
        .await
        .expect("the key's lease")
        .ttl();
    // The server rounds the TTL left down to whole seconds.
    assert!(
        Duration::from_secs(ttl.unsigned_abs() + 1) + from.elapsed() >= timing.lease_duration,
        "the lease lives at least a lease past the hold's start: {ttl}s left {:?} after it",
        from.elapsed()
    );
}

/// The lock key as the server holds it, after a release that handed it over (not deleted).
async fn handed_key(server: &EtcdServer, name: &str) -> etcd_client::KeyValue {
    let mut raw = common::raw_client(server).await;
    let got = raw
        .get(format!("{DEFAULT_KEY_PREFIX}{name}"), None)
        .await
        .expect("get the key");
    got.kvs()
        .first()
        .cloned()
        .expect("the key was handed over, not deleted")
}

/// The holder a key's value names.
fn holder(kv: &etcd_client::KeyValue) -> String {
    let value: serde_json::Value = serde_json::from_slice(kv.value()).expect("json");
    value["holder"].as_str().unwrap_or_default().to_string()
}

/// `a{round}` leads lock `name`, and its first choice of a successor, made as it leads, has
/// reached the server and found nobody; `b{round}` has a lock of its own beside it.
async fn a_leads(
    server: &EtcdServer,
    name: &str,
    round: impl std::fmt::Display,
) -> common::Contenders {
    let (la, lb) = common::two_locks(server, name).await;
    let (a, b) = (
        common::candidate(&format!("a{round}")),
        common::candidate(&format!("b{round}")),
    );
    let port = server.client_port();
    let ranges = requests(port)[0];
    let Ok(leader_lock::backend::Attempt::Leader { term, .. }) = la.try_acquire_or_renew(&a).await
    else {
        panic!("a leads");
    };
    settled(port, 0, ranges).await;
    common::Contenders { la, lb, a, b, term }
}

/// `Range`s, `Txn`s and `LeaseTimeToLive`s the server received.
fn requests(port: u16) -> [f64; 3] {
    ["Range", "Txn", "LeaseTimeToLive"].map(|m| common::calls(port, m).received)
}

/// The requests once the count of method `i` rose above `from` (a leader's choice of its
/// successor reached the server) and the choice had time to be kept.
async fn settled(port: u16, i: usize, from: f64) -> [f64; 3] {
    let limit = Instant::now() + Duration::from_secs(10);
    while requests(port)[i] <= from {
        assert!(
            Instant::now() < limit,
            "no choice of a successor reached the server"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The choice is kept when its answer comes back, well within this.
    tokio::time::sleep(Duration::from_millis(200)).await;
    requests(port)
}

/// A leader that renewed with a follower registered hands the key over in its release with no
/// read before its transaction; a choice older than a third of the lease is looked up again.
/// (Its first choice, as it began to lead, found no candidate; a release would look again, and
/// its renew, a sixth of the lease later, chooses again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_chose_while_renewing_releases_without_a_read() {
    use leader_lock::backend::Attempt;
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let timing = common::timing();
    let port = server.client_port();
    let name = "handover";
    for (round, wait) in [(0, Duration::ZERO), (1, timing.lease_duration / 3)] {
        let common::Contenders { la, lb, a, b, term } = a_leads(&server, name, round).await;
        let followed = lb.try_acquire_or_renew(&b).await;
        assert!(
            matches!(followed, Ok(Attempt::Follower { .. })),
            "{followed:?}"
        );
        tokio::time::sleep(timing.lease_duration / 6).await;
        // a renews, with b registered: it chooses b, after the renew (the server sees the
        // choice's look-up of b's lease).
        let looked = requests(port)[2];
        let renewed = la.try_acquire_or_renew(&a).await;
        assert!(matches!(renewed, Ok(Attempt::Leader { .. })), "{renewed:?}");
        // The choice stays fresh for a third of the lease (1 s).
        settled(port, 2, looked).await;
        tokio::time::sleep(wait + Duration::from_millis(100) * round).await;
        let before = requests(port);
        assert!(la.release(&a, term).await.expect("a releases"), "released");
        let [ranges, txns, ttls] = requests(port);
        assert_eq!(txns, before[1] + 1.0, "one transaction");
        if round == 0 {
            assert_eq!([ranges, ttls], [before[0], before[2]], "no read before it");
        } else {
            assert!(
                ranges > before[0] && ttls > before[2],
                "an old choice is looked up again"
            );
        }
        assert_eq!(holder(&handed_key(&server, name).await), b.holder());
        // The next round starts from an empty lock.
        let Ok(Attempt::Leader { term, .. }) = lb.try_acquire_or_renew(&b).await else {
            panic!("b takes the key handed to it");
        };
        assert!(lb.release(&b, term).await.expect("b releases"));
    }
}

/// A leader whose watch shows a candidate register chooses it then: its release, with no renew
/// since, reads nothing before its transaction. When the watch then shows that candidate take
/// its registration back, the release looks again instead (and, with nobody left, deletes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_learns_of_candidates_from_its_watch() {
    use futures::StreamExt;
    use leader_lock::backend::Attempt;
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let port = server.client_port();
    let name = "handover";
    let mut raw = common::raw_client(&server).await;
    let mut registrations = raw
        .watch(
            format!("{DEFAULT_KEY_PREFIX}{name}#candidates/"),
            Some(WatchOptions::new().with_prefix()),
        )
        .await
        .expect("the test watches the registrations");
    for withdrawn in [false, true] {
        let common::Contenders { la, lb, a, b, term } = a_leads(&server, name, withdrawn).await;
        // a's watch, read as an elector reads it.
        let mut changes = la.watch().await.expect("a watches");
        let reader = tokio::spawn(async move { while changes.next().await.is_some() {} });
        let followed = lb.try_acquire_or_renew(&b).await;
        assert!(
            matches!(followed, Ok(Attempt::Follower { .. })),
            "{followed:?}"
        );
        let mut steps: usize = 1;
        if withdrawn {
            lb.withdraw(&b).await.expect("b withdraws");
            steps += 1;
        }
        let limit = Instant::now() + Duration::from_secs(10);
        while steps > 0 {
            let msg = tokio::time::timeout_at(limit, registrations.message())
                .await
                .expect("b's registration changes in time")
                .expect("the watch works")
                .expect("the watch stays open");
            steps = steps.saturating_sub(msg.events().len());
        }
        // a's watch delivers the same writes: well within this.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = requests(port);
        assert!(la.release(&a, term).await.expect("a releases"), "released");
        let after = requests(port);
        if withdrawn {
            assert!(
                after[0] > before[0],
                "a chosen candidate gone is looked up again"
            );
            let mut raw = common::raw_client(&server).await;
            let got = raw.get(format!("{DEFAULT_KEY_PREFIX}{name}"), None).await;
            assert!(
                got.expect("get the key").kvs().is_empty(),
                "nobody to hand to: deleted"
            );
        } else {
            assert_eq!(
                after,
                [before[0], before[1] + 1.0, before[2]],
                "the release sent its transaction alone"
            );
            assert_eq!(holder(&handed_key(&server, name).await), b.holder());
            let Ok(Attempt::Leader { term, .. }) = lb.try_acquire_or_renew(&b).await else {
                panic!("b takes the key handed to it");
            };
            // b's release takes its registration with it: one more event.
            assert!(lb.release(&b, term).await.expect("b releases"));
            let msg = tokio::time::timeout_at(limit, registrations.message())
                .await
                .expect("b's registration goes in time");
            assert!(msg.expect("the watch works").is_some());
        }
        reader.abort();
    }
}
