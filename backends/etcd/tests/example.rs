//! The `etcd_elector` example on a throwaway etcd: it leads and works, and on SIGTERM it exits
//! cleanly with the lock released.

use std::time::Duration;

use leader_lock::backend::LeaderLock;
use leader_lock_etcd::{EtcdConfig, EtcdLock};
use testkit::etcd::EtcdServer;

/// How long any step may take on a busy machine (the first includes building the example).
const PATIENCE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_elector_example_leads_then_releases_on_sigterm() {
    let server = EtcdServer::start().await.expect("starting etcd");
    let lock = EtcdLock::connect(EtcdConfig::new(vec![server.endpoint()]), "etcd-example")
        .await
        .expect("connecting to etcd");
    let lock = &lock;
    testkit::cargo::run_elector_example(
        "leader-lock-etcd",
        "etcd_elector",
        &server.endpoint(),
        PATIENCE,
        |term| async move {
            // The lock agrees with what it says.
            let held = lock.get().await.expect("reading the lock").expect("held");
            assert!(held.holder.starts_with("etcd-example_"), "{held:?}");
            assert_eq!(held.term.to_string(), term);
        },
    )
    .await
    .expect("the example runs and stops cleanly");
    assert_eq!(
        lock.get().await.expect("reading the lock"),
        None,
        "released"
    );
}
