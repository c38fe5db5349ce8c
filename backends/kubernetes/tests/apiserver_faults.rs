//! The apiserver itself fails under a leader: restarted, and frozen. Each test starts its own
//! apiserver (the shared one must stay up for other tests), so these need the local binary.

mod common;

use std::sync::Arc;

use leader_lock::conformance::SplitBrainChecker;
use leader_lock::conformance::{patience, wait_any_leader, wait_following, wait_leader};
use leader_lock::{Elector, ElectorConfig, Identity};
use testkit::kube::KubeApiServer;

async fn own_server() -> KubeApiServer {
    // Restarting and freezing need an apiserver of our own, whatever cluster the others use.
    KubeApiServer::start_local()
        .await
        .unwrap_or_else(|e| panic!("no local kube-apiserver for the restart/freeze test: {e:#}"))
}

fn elector(s: &KubeApiServer, ns: &str, name: &str, id: &str) -> Elector {
    Elector::spawn(
        Arc::new(common::lock(s, ns, name)),
        ElectorConfig {
            identity: Identity::new(id),
            timing: common::timing(),
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_and_freeze_of_the_apiserver_never_split_the_brain() {
    common::init_tracing();
    let mut s = own_server().await;
    let timing = common::timing();
    let ns = common::namespace(&s, "faults").await;
    let checker = SplitBrainChecker::new();
    let a = elector(&s, &ns, "lease", "a");
    checker.watch(a.leadership());
    wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = elector(&s, &ns, "lease", "b");
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;

    // Down for longer than the lease: the leader steps down by its renew deadline.
    s.kill().expect("kill");
    tokio::time::sleep(timing.lease_duration * 2).await;
    assert!(
        !a.leadership().is_leader() && !b.leadership().is_leader(),
        "nobody may lead while the apiserver is down"
    );
    s.restart().await.expect("apiserver restarts");
    wait_any_leader(
        &[a.leadership(), b.leadership()],
        patience(&timing),
        "a leader after the restart",
    )
    .await;

    // Frozen (SIGSTOP) past the lease: connections hang instead of failing.
    s.pause().expect("pause");
    tokio::time::sleep(timing.lease_duration * 2).await;
    assert!(
        !a.leadership().is_leader() && !b.leadership().is_leader(),
        "nobody may lead while the apiserver is frozen"
    );
    s.resume().expect("resume");
    wait_any_leader(
        &[a.leadership(), b.leadership()],
        patience(&timing),
        "a leader after the freeze",
    )
    .await;

    a.abort().await;
    b.abort().await;
    let leaders = checker.finish().await;
    eprintln!("leaderships across restart and freeze: {leaders:?}");
}
