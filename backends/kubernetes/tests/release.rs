//! What a release sends: the Lease the holder last wrote, written back without reading it
//! first (client-go's release), so a waiting follower waits for one request, not two. Counted
//! on the apiserver's own `apiserver_request_total`; this file is its own test binary, so the
//! apiserver serves nobody else meanwhile.

mod common;

use std::time::Duration;

use leader_lock::backend::{Attempt, Candidate, LeaderLock};
use leader_lock::Identity;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_writes_back_the_lease_it_last_wrote_without_reading_it() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "release").await;
    let lock = common::lock(s, &ns, "l");
    let c = Candidate {
        identity: Identity::new("a"),
        lease_duration: Duration::from_secs(3),
    };
    let term = match lock.try_acquire_or_renew(&c).await.expect("acquire") {
        Attempt::Leader { term, .. } => term,
        other => panic!("expected to lead, got {other:?}"),
    };
    // A renew, as a leader's loop sends: the copy the release starts from is its reply.
    lock.try_acquire_or_renew(&c).await.expect("renew");
    let held = common::get_raw(s, &ns, "l").await;

    let before = common::lease_requests(s).await;
    assert!(lock.release(&c, term).await.expect("release"), "released");
    assert_eq!(
        common::lease_requests(s).await.since(&before),
        (0.0, 1.0),
        "a release is one PUT and no GET"
    );

    // What the server holds: client-go's released record, the transitions (our term) kept.
    let released = common::get_raw(s, &ns, "l").await;
    let spec = &released["spec"];
    assert_eq!(
        spec["holderIdentity"].as_str().unwrap_or(""),
        "",
        "{released}"
    );
    assert_eq!(spec["leaseDurationSeconds"], 1, "{released}");
    assert_eq!(spec["leaseTransitions"], held["spec"]["leaseTransitions"]);
    assert_ne!(
        released["metadata"]["resourceVersion"],
        held["metadata"]["resourceVersion"]
    );

    // A write by someone else that leaves the Lease ours (an operator's edit): the copy
    // conflicts, the release reads the Lease again, and still releases it.
    let term = match lock.try_acquire_or_renew(&c).await.expect("acquire again") {
        Attempt::Leader { term, .. } => term,
        other => panic!("expected to lead again, got {other:?}"),
    };
    let mut spec = common::get_raw(s, &ns, "l").await["spec"].clone();
    spec["renewTime"] = "2026-01-01T00:00:00.000000Z".into();
    common::put_raw(s, &ns, "l", serde_json::json!({ "spec": spec }))
        .await
        .expect("an edit");
    assert!(
        lock.release(&c, term).await.expect("release"),
        "still ours: released"
    );
    let released = common::get_raw(s, &ns, "l").await;
    assert_eq!(
        released["spec"]["holderIdentity"].as_str().unwrap_or(""),
        ""
    );

    // Someone else's write that took it: the release reads, finds the Lease not ours, and
    // leaves it.
    let term = match lock
        .try_acquire_or_renew(&c)
        .await
        .expect("acquire once more")
    {
        Attempt::Leader { term, .. } => term,
        other => panic!("expected to lead again, got {other:?}"),
    };
    let mut spec = common::get_raw(s, &ns, "l").await["spec"].clone();
    spec["holderIdentity"] = "b".into();
    common::put_raw(s, &ns, "l", serde_json::json!({ "spec": spec }))
        .await
        .expect("b takes the Lease");
    assert!(!lock.release(&c, term).await.expect("release"), "not ours");
    assert_eq!(
        common::get_raw(s, &ns, "l").await["spec"]["holderIdentity"],
        "b",
        "left to its holder"
    );
}
