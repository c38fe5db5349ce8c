//! `EtcdLock::connect` fails clearly on unreachable endpoints and bad settings.

mod common;

use std::time::Duration;

use leader_lock::backend::LockError;
use leader_lock_etcd::{EtcdConfig, EtcdLock};
use testkit::free_port;

#[tokio::test]
async fn unreachable_endpoint_names_it() {
    let endpoint = format!("http://127.0.0.1:{}", free_port().expect("port"));
    let mut config = EtcdConfig::new(vec![endpoint.clone()]);
    config.request_timeout = Some(Duration::from_millis(500));
    let err = EtcdLock::connect(config, "lock")
        .await
        .err()
        .expect("no etcd there");
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(matches!(err, LockError::Unavailable { .. }), "{msg}");
    assert!(msg.contains(&endpoint), "{msg}");
    assert!(msg.contains("TCP"), "{msg}");
}

#[tokio::test]
async fn unreadable_tls_files_name_the_setting() {
    let mut config = EtcdConfig::new(vec!["https://127.0.0.1:2379".into()]);
    config.ca_file = Some("/nonexistent/ca.pem".into());
    let err = EtcdLock::connect(config, "lock")
        .await
        .err()
        .expect("no CA file");
    assert!(matches!(err, LockError::Refused { .. }), "{err}");
    assert_eq!(
        common::refused_setting(&err),
        Some("etcd-ca-file"),
        "{err:?}"
    );
}

#[tokio::test]
async fn malformed_endpoint_is_refused() {
    let err = EtcdLock::connect(EtcdConfig::new(vec!["127.0.0.1:2379".into()]), "lock")
        .await
        .err()
        .expect("no scheme");
    assert!(matches!(err, LockError::Refused { .. }), "{err}");
    assert_eq!(
        common::refused_setting(&err),
        Some("etcd-endpoints"),
        "{err:?}"
    );
}

#[tokio::test]
async fn lease_below_the_server_minimum_is_refused() {
    use leader_lock::backend::{Candidate, LeaderLock};
    use leader_lock::Identity;
    use testkit::etcd::{EtcdOptions, EtcdServer};
    // A 3 s election timeout raises etcd's minimum lease TTL to 5 s (1.5 × 3 s, rounded up).
    let server = EtcdServer::start_with(EtcdOptions {
        extra_args: vec![
            "--heartbeat-interval=300".into(),
            "--election-timeout=3000".into(),
        ],
        ..EtcdOptions::default()
    })
    .await
    .expect("etcd starts");
    let lock = EtcdLock::connect(common::config(&server), "short")
        .await
        .expect("connects");
    let candidate = Candidate {
        identity: Identity::new("a"),
        lease_duration: Duration::from_secs(3),
    };
    let err = lock
        .try_acquire_or_renew(&candidate)
        .await
        .expect_err("3 s is below this server's minimum TTL");
    eprintln!("{err}");
    assert!(matches!(err, LockError::Refused { .. }), "{err}");
    assert!(err.to_string().contains("minimum lease TTL (5s"), "{err}");
    assert_eq!(
        lock.get().await.expect("reads"),
        None,
        "nothing was written"
    );
}
