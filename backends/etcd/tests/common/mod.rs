//! Shared test helpers: short timing, lock configs and a plain etcd client.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use leader_lock::{ConfigError, Elector, ElectorConfig, Identity, LeaderLock, LockError, Timing};
use leader_lock_etcd::{EtcdConfig, EtcdLock};
use testkit::etcd::EtcdServer;

/// Short, whole-second lease timing for tests.
pub fn timing() -> Timing {
    Timing::new(
        Duration::from_secs(3),
        Duration::from_millis(2000),
        Duration::from_millis(300),
    )
    .expect("valid timing")
}

/// A config for `server` with a per-request timeout under the test renew deadline.
pub fn config(server: &EtcdServer) -> EtcdConfig {
    let mut c = EtcdConfig::new(vec![server.endpoint()]);
    c.request_timeout = Duration::from_millis(1000);
    c
}

/// A lock client on `server`, as a separate process would have.
pub async fn lock(server: &EtcdServer, name: &str) -> Arc<dyn LeaderLock> {
    Arc::new(
        EtcdLock::connect(config(server), name)
            .await
            .expect("connects to etcd"),
    )
}

/// An elector for `id` on lock `name`.
pub async fn contender(server: &EtcdServer, name: &str, id: &str) -> Elector {
    Elector::spawn(
        lock(server, name).await,
        ElectorConfig {
            identity: Identity::new(id),
            timing: timing(),
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing")
}

/// A plain etcd client, for planting values and administration.
pub async fn raw_client(server: &EtcdServer) -> etcd_client::Client {
    etcd_client::Client::connect([server.endpoint()], None)
        .await
        .expect("plain client connects")
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The setting named by the configuration error a refusal keeps as its source.
pub fn refused_setting(err: &LockError) -> Option<&'static str> {
    std::error::Error::source(err)
        .and_then(|s| s.downcast_ref::<ConfigError>())
        .and_then(ConfigError::setting)
}
