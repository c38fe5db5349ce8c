//! What a takeover sends: a follower whose watch delivered the released Lease writes over that
//! copy without reading it first, so the new leader leads one request after the release, not
//! two; a follower whose watch shows the holder sends nothing at all; and once that watch ends,
//! its attempts read again (a copy nobody updates would go stale unnoticed). Counted on the
//! apiserver's own `apiserver_request_total`; this file is its own test binary, so the
//! apiserver serves nobody else meanwhile.

mod common;

use std::time::Duration;

use futures::StreamExt;
use leader_lock::backend::{Attempt, Candidate, LeaderLock, LockEvent};
use leader_lock::Identity;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_the_released_lease_from_its_watch_without_reading_it() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "take").await;
    let (a, b) = (common::lock(s, &ns, "l"), common::lock(s, &ns, "l"));
    let candidate = |name: &str| Candidate {
        identity: Identity::new(name),
        lease_duration: Duration::from_secs(3),
    };
    let (ca, cb) = (candidate("a"), candidate("b"));
    let term = match a.try_acquire_or_renew(&ca).await.expect("a acquires") {
        Attempt::Leader { term, .. } => term,
        other => panic!("expected a to lead, got {other:?}"),
    };
    let mut events = b.watch().await.expect("b watches");

    let before = common::lease_requests(s).await;
    match b.try_acquire_or_renew(&cb).await.expect("b's attempt") {
        Attempt::Follower { holder, .. } => assert_eq!(holder, Some(ca.holder())),
        other => panic!("expected b to follow, got {other:?}"),
    }
    assert_eq!(
        common::lease_requests(s).await.since(&before),
        (0.0, 0.0),
        "a follower whose watch shows the holder decides from that copy: no GET, no PUT"
    );

    assert!(a.release(&ca, term).await.expect("a releases"), "released");
    // b's watch delivers the release.
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = events.next().await {
            if let Ok(LockEvent::Changed(Some(rec))) = ev {
                if rec.is_free() {
                    return;
                }
            }
        }
        panic!("b's watch ended before the release");
    })
    .await
    .expect("b's watch shows the release within 30 s");

    let before = common::lease_requests(s).await;
    let taken = match b.try_acquire_or_renew(&cb).await.expect("b takes") {
        Attempt::Leader { term, .. } => term,
        other => panic!("expected b to lead, got {other:?}"),
    };
    assert_eq!(
        common::lease_requests(s).await.since(&before),
        (0.0, 1.0),
        "the takeover is one PUT over the watched copy, no GET"
    );
    // What the server holds: b, one transition on.
    let lease = common::get_raw(s, &ns, "l").await;
    assert_eq!(lease["spec"]["holderIdentity"], cb.holder(), "{lease}");
    assert_eq!(lease["spec"]["leaseTransitions"], taken.0 as i64, "{lease}");
    assert!(taken > term, "{taken} after {term}");

    // A copy is kept only while its watch runs: once the stream is dropped, a follower's
    // attempts read the Lease again.
    let c = common::lock(s, &ns, "l");
    let cc = candidate("c");
    let watching = c.watch().await.expect("c watches");
    let before = common::lease_requests(s).await;
    assert!(matches!(
        c.try_acquire_or_renew(&cc).await.expect("c's attempt"),
        Attempt::Follower { .. }
    ));
    assert_eq!(common::lease_requests(s).await.since(&before).0, 0.0);
    drop(watching);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let before = common::lease_requests(s).await;
        c.try_acquire_or_renew(&cc).await.expect("c's attempt");
        if common::lease_requests(s).await.since(&before).0 == 1.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "30 s after its watch ended, c still decides from the copy without a read"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
