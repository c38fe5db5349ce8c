//! The Lease lock's settings against a real kube-apiserver and offline: a client from a loaded
//! kubeconfig, and the timing and request-timeout checks made before anything is sent.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::{ConfigError, LeaderLock, LockError};
use leader_lock::timing::TimingError;
use leader_lock::{Elector, ElectorConfig, Identity};
use leader_lock_kubernetes::{client, ClientOptions, LeaseLock};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_are_built_from_a_loaded_kubeconfig_and_errors_name_the_setting() {
    common::init_tracing();
    let s = common::server().await;
    let options = ClientOptions::default()
        .with_kubeconfig(s.kubeconfig_path())
        .with_user_agent("gateway-leader-test");
    let config = options
        .load()
        .await
        .expect("the kubeconfig's configuration");
    let ns = config.default_namespace.clone();
    assert!(!ns.is_empty());
    assert!(
        config
            .headers
            .iter()
            .any(|(k, v)| k == http::header::USER_AGENT && v == "gateway-leader-test"),
        "{:?}",
        config.headers
    );
    let lock = LeaseLock::new(client(config).expect("a client"), &ns, "from-kubeconfig");
    lock.get().await.expect("a read through that client");

    let missing = std::path::Path::new("/nonexistent/kubeconfig");
    match options.clone().with_kubeconfig(missing).load().await {
        Err(LockError::Refused { message: m, .. }) => {
            assert!(
                m.contains("cannot read kubeconfig /nonexistent/kubeconfig"),
                "{m}"
            )
        }
        other => panic!("expected a refusal, got {:?}", other.map(|c| c.cluster_url)),
    }
    match options.clone().with_context("no-such-context").load().await {
        Err(LockError::Refused { message: m, .. }) => assert!(m.contains("no-such-context"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|c| c.cluster_url)),
    }
    // A CA file with no certificate in it: refused at load, not an unknown issuer later.
    let dir = tempfile::tempdir().expect("a temporary dir");
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, "not a certificate\n").expect("the CA file");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
             clusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:1\", \
             certificate-authority: {}}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n",
            ca.display()
        ),
    )
    .expect("the kubeconfig");
    match options.with_kubeconfig(&kubeconfig).load().await {
        Err(LockError::Refused { message: m, .. }) => {
            assert!(m.contains("holds no PEM certificate"), "{m}")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|c| c.cluster_url)),
    }
}

#[test]
fn timing_must_be_whole_seconds() {
    let ok = leader_lock::Timing::default();
    assert!(LeaseLock::check_timing(&ok, Some(Duration::from_secs(5))).is_ok());
    let frac = leader_lock::Timing::new(
        Duration::from_millis(1500),
        Duration::from_secs(1),
        Duration::from_millis(200),
    )
    .expect("valid");
    let err = LeaseLock::check_timing(&frac, Some(Duration::from_millis(500)))
        .expect_err("fractional lease");
    assert!(
        matches!(
            err,
            ConfigError::Timing {
                source: TimingError::NotWholeSeconds {
                    setting: "lease-duration",
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn requests_must_time_out_before_the_renew_deadline() {
    let t = leader_lock::Timing::new(
        Duration::from_secs(30),
        Duration::from_secs(3),
        Duration::from_secs(2),
    )
    .expect("valid");
    // The old default for a 30 s lease: a quarter of it, capped at 5 s.
    let err = LeaseLock::check_timing(&t, Some(Duration::from_secs(5))).expect_err("5 s > 3 s");
    assert!(
        matches!(
            err,
            ConfigError::Timing {
                source: TimingError::RequestTimeout {
                    backend: "kubernetes",
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(LeaseLock::check_timing(&t, Some(Duration::from_secs(3))).is_err());
    assert!(LeaseLock::check_timing(&t, Some(Duration::from_millis(1500))).is_ok());
}

/// A lock on a client that is never used: these checks send nothing.
fn offline_lock() -> LeaseLock {
    leader_lock_kubernetes::install_crypto_provider();
    let config = kube::Config::new("https://127.0.0.1:1".parse().expect("url"));
    LeaseLock::new(kube::Client::try_from(config).expect("client"), "ns", "l")
}

#[tokio::test]
async fn the_default_request_timeout_is_half_the_renew_deadline_the_elector_validated() {
    let t = leader_lock::Timing::new(
        Duration::from_secs(30),
        Duration::from_secs(3),
        Duration::from_secs(2),
    )
    .expect("valid");
    let lock = offline_lock();
    // Without a timing: a quarter of the (default 15 s) lease, which a 3 s deadline would refuse.
    assert_eq!(lock.request_timeout(), Duration::from_millis(3750));
    lock.validate(&t)
        .expect("no timeout set: the default follows the timing");
    assert_eq!(lock.request_timeout(), Duration::from_millis(1500));

    let set = offline_lock().with_request_timeout(Duration::from_secs(5));
    let err = set
        .validate(&t)
        .expect_err("a set timeout above the renew deadline");
    assert!(
        matches!(
            err,
            ConfigError::Timing {
                source: TimingError::RequestTimeout { .. },
                ..
            }
        ),
        "{err:?}"
    );
    // The elector runs the same check before it sends anything.
    let spawned = Elector::spawn(
        Arc::new(set),
        ElectorConfig {
            identity: Identity::new("a"),
            timing: t,
            release_on_shutdown: true,
        },
    );
    assert!(spawned.is_err(), "an elector on a lock that cannot work");
    let err = offline_lock()
        .with_field_manager("")
        .validate(&t)
        .expect_err("an empty field manager");
    assert_eq!(err.setting(), Some("field-manager"));
}
