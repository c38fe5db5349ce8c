//! The watched copy against the real apiserver: a stale copy, or a copy of a Lease deleted
//! since, costs a conflict and a read, never a write over a Lease someone took since.

use std::time::Duration;

use leader_lock::backend::{Attempt, Candidate, LeaderLock};
use leader_lock::Identity;
use testkit::kube::KubeApiServer;

use super::LeaseLock;

fn candidate(name: &str) -> Candidate {
    Candidate {
        identity: Identity::new(name),
        lease_duration: Duration::from_secs(3),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_watched_copy_conflicts_and_the_follower_reads_the_holder() {
    let server = KubeApiServer::shared()
        .await
        .unwrap_or_else(|e| panic!("no kube-apiserver for the tests: {e:#}"));
    let ns = format!("stale-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    server.create_namespace(&ns).await.expect("a namespace");
    let lock = || LeaseLock::new(server.admin_client(), &ns, "l");
    let (a, b, c) = (lock(), lock(), lock());
    let (ca, cb, cc) = (candidate("a"), candidate("b"), candidate("c"));

    let Attempt::Leader { term, .. } = a.try_acquire_or_renew(&ca).await.expect("a") else {
        panic!("a leads a fresh Lease");
    };
    assert!(a.release(&ca, term).await.expect("a releases"));
    let released = a.inner.read().await.expect("read").expect("the Lease");
    let Attempt::Leader { term: taken, .. } = c.try_acquire_or_renew(&cc).await.expect("c") else {
        panic!("c takes the released Lease");
    };

    // b's watch fell behind: its copy still shows the release.
    b.inner.state().watched = Some(released);
    match b.try_acquire_or_renew(&cb).await.expect("b's attempt") {
        Attempt::Follower { holder, term, .. } => {
            assert_eq!(holder, Some(cc.holder()));
            assert_eq!(term, Some(taken));
        }
        other => panic!("b wrote over c's Lease from a stale copy: {other:?}"),
    }
    let held = b.inner.read().await.expect("read").expect("the Lease");
    assert_eq!(super::spec::holder(&held), cc.holder(), "c still holds it");
    assert!(b.inner.state().own.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_copy_of_a_deleted_lease_conflicts_and_the_lease_is_read_again() {
    let server = KubeApiServer::shared()
        .await
        .unwrap_or_else(|e| panic!("no kube-apiserver for the tests: {e:#}"));
    let ns = format!("gone-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    server.create_namespace(&ns).await.expect("a namespace");
    let lock = || LeaseLock::new(server.admin_client(), &ns, "l");
    let (a, b) = (lock(), lock());
    let (ca, cb) = (candidate("a"), candidate("b"));

    let Attempt::Leader { term, .. } = a.try_acquire_or_renew(&ca).await.expect("a") else {
        panic!("a leads a fresh Lease");
    };
    assert!(a.release(&ca, term).await.expect("a releases"));
    let released = a.inner.read().await.expect("read").expect("the Lease");
    kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(server.admin_client(), &ns)
        .delete("l", &Default::default())
        .await
        .expect("deleted by hand");

    // b's watch showed the release but not yet the deletion: its copy is the released Lease.
    b.inner.observe(&released);
    b.inner.state().watched = Some(released);
    // The replace conflicts (the copy's resourceVersion matches nothing); b reads, finds the
    // Lease gone, and, as a released Lease has no live holder, takes it by creating it, its term
    // above the one it saw.
    let Attempt::Leader { term: taken, .. } = b
        .try_acquire_or_renew(&cb)
        .await
        .expect("a copy of a deleted Lease is read again, not an error")
    else {
        panic!("b leads the free Lease");
    };
    assert!(taken > term, "{taken} after {term}");
    let held = b
        .inner
        .read()
        .await
        .expect("read")
        .expect("the recreated Lease");
    assert_eq!(super::spec::holder(&held), cb.holder());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absence_answered_late_is_no_deletion_and_a_release_is_taken_at_once() {
    let server = KubeApiServer::shared()
        .await
        .unwrap_or_else(|e| panic!("no kube-apiserver for the tests: {e:#}"));
    let ns = format!("late-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    server.create_namespace(&ns).await.expect("a namespace");
    let lock = || LeaseLock::new(server.admin_client(), &ns, "l");
    let (a, b) = (lock(), lock());
    let (ca, cb) = (candidate("a"), candidate("b"));

    // Two replicas start together: b asks (its watch's list) before a creates the Lease...
    let asked = tokio::time::Instant::now();
    assert!(b.inner.read().await.expect("read").is_none());
    let Attempt::Leader { term, .. } = a.try_acquire_or_renew(&ca).await.expect("a") else {
        panic!("a leads a fresh Lease");
    };
    // ... b's attempt reads a's Lease, and only then does the list's empty answer arrive.
    assert!(b.inner.read().await.expect("read").is_some());
    b.inner.gone(None, Some(asked));
    assert!(
        b.inner
            .state()
            .observed
            .hold_off(tokio::time::Instant::now())
            .is_none(),
        "a stale absence was taken for a deletion under a live holder"
    );
    // a's graceful release is taken at once, not a lease duration later.
    assert!(a.release(&ca, term).await.expect("a releases"));
    assert!(
        matches!(
            b.try_acquire_or_renew(&cb).await.expect("b"),
            Attempt::Leader { .. }
        ),
        "b did not take the released Lease"
    );
    // An absence asked for after a sighting is a deletion: held off.
    b.inner.gone(None, Some(tokio::time::Instant::now()));
    assert!(b
        .inner
        .state()
        .observed
        .hold_off(tokio::time::Instant::now())
        .is_some());
}
