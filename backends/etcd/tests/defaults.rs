//! `EtcdConfig::new`'s defaults on a real etcd: requests time out at a quarter of the renew
//! deadline the elector validates the lock with, and the key lives under the library's prefix.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::ConfigError;
use leader_lock::conformance::wait_leader;
use leader_lock::timing::TimingError;
use leader_lock::{Elector, ElectorConfig, Identity, Timing};
use leader_lock_etcd::{EtcdConfig, EtcdLock, DEFAULT_KEY_PREFIX};
use testkit::etcd::EtcdServer;

/// How long any wait may take on a busy machine before the test gives up.
const PATIENCE: Duration = Duration::from_secs(60);

fn elector_config(timing: Timing) -> ElectorConfig {
    ElectorConfig {
        identity: Identity::new("defaults"),
        timing,
        release_on_shutdown: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_request_timeout_follows_the_renew_deadline_the_elector_validated() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("starting etcd");
    // A renew deadline below the 5 s a fixed default once was.
    let s = Duration::from_secs;
    let timing = Timing::new(s(6), s(4), s(1)).expect("a valid timing");
    let config = EtcdConfig::new(vec![server.endpoint()]);
    config
        .validate(&timing)
        .expect("the defaults fit the timing");
    let lock = Arc::new(
        EtcdLock::connect(config, "defaults")
            .await
            .expect("connecting to etcd"),
    );
    assert_eq!(lock.key(), format!("{DEFAULT_KEY_PREFIX}defaults"));
    assert_eq!(lock.key(), "/leader-lock/defaults");
    assert_eq!(
        lock.request_timeout(),
        EtcdConfig::request_timeout_for(&Timing::default()),
        "connecting, before any timing is known"
    );

    let elector = Elector::spawn(lock.clone(), elector_config(timing)).expect("a timing it takes");
    assert_eq!(
        lock.request_timeout(),
        s(1),
        "a quarter of the renew deadline"
    );
    let term = wait_leader(&elector.leadership(), PATIENCE, "the elector").await;
    let mut raw = common::raw_client(&server).await;
    let stored = raw
        .get(lock.key(), None)
        .await
        .expect("reading the key")
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
        .expect("the key is held");
    assert!(stored.contains("defaults_"), "{stored}");
    assert!(
        elector.shutdown().await.expect("stops"),
        "released under {term}"
    );

    // A deadline of the config's own is kept, and still refused when it outlasts the renewals.
    let mut slow = EtcdConfig::new(vec![server.endpoint()]);
    slow.request_timeout = Some(s(5));
    let refused = slow
        .validate(&timing)
        .expect_err("5 s against a 4 s renew deadline");
    let slow_lock = EtcdLock::connect(slow, "defaults-slow")
        .await
        .expect("connecting to etcd");
    assert_eq!(slow_lock.request_timeout(), s(5));
    let e = Elector::spawn(Arc::new(slow_lock), elector_config(timing))
        .err()
        .expect("refused at startup");
    assert_eq!(e, refused);
    assert!(
        matches!(
            e,
            ConfigError::Timing {
                source: TimingError::RequestTimeout { .. },
                ..
            }
        ),
        "{e:?}"
    );
}
