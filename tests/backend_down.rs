//! A lock backend that is down at startup is waited for with backoff, on every backend, and a
//! replica that is still waiting stops cleanly on SIGTERM; one that refuses our credentials is
//! not waited for: the process ends, naming the setting to fix.

mod common;

use gateway_leader_log::message;
use std::time::Duration;

use common::Replica;

const PATIENCE: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_that_comes_up_later_is_waited_for() {
    let mut server = testkit::etcd::EtcdServer::start()
        .await
        .expect("etcd starts");
    server.kill();
    let mut args = common::gateway::kubeconfig_args().await;
    args.extend([
        "--lock-backend".into(),
        "etcd".into(),
        "--etcd-endpoints".into(),
        server.endpoint(),
    ]);
    let mut r = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut r = Replica::start("late-etcd", &args);
        r.wait_for("lock backend unreachable; retrying", PATIENCE);
        r
    })
    .await
    .expect("replica");
    server
        .restart()
        .await
        .expect("etcd restarts on the same port");
    tokio::task::spawn_blocking(move || {
        r.wait_for(message::LEADING, PATIENCE);
        r.terminate();
        assert_eq!(r.wait_exit(PATIENCE), Some(0));
    })
    .await
    .expect("leads once etcd is up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waiting_for_redis_stops_cleanly_on_sigterm() {
    let port = testkit::free_port().expect("a free port");
    let mut args = common::gateway::kubeconfig_args().await;
    args.extend([
        "--lock-backend".into(),
        "redis".into(),
        "--redis-url".into(),
        format!("redis://127.0.0.1:{port}"),
    ]);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut r = Replica::start("no-redis", &args);
        r.wait_for("lock backend unreachable; retrying", PATIENCE);
        r.terminate();
        assert_eq!(r.wait_exit(PATIENCE), Some(0), "a clean stop while waiting");
        r.wait_for("stopped before the lock backend could be reached", PATIENCE);
    })
    .await
    .expect("scenario");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_sentinel_password_ends_the_process_naming_the_setting() {
    use testkit::redis_sentinel::{SentinelTopology, DATA_USER, MASTER, SENTINEL_USER};
    let t = SentinelTopology::builder()
        .acl()
        .start()
        .await
        .expect("the topology with ACL users starts");
    let mut args = common::gateway::kubeconfig_args().await;
    args.extend([
        "--lock-backend".into(),
        "redis".into(),
        "--redis-sentinel".into(),
        t.sentinel_urls().join(","),
        "--redis-sentinel-master".into(),
        MASTER.into(),
        "--redis-sentinel-username".into(),
        SENTINEL_USER.name.into(),
        "--redis-username".into(),
        DATA_USER.name.into(),
    ]);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env = [
            ("RUST_LOG", "info"),
            ("GATEWAY_LEADER_REDIS_PASSWORD", DATA_USER.password),
            ("GATEWAY_LEADER_REDIS_SENTINEL_PASSWORD", "not-the-password"),
        ];
        let mut r = Replica::start_with_env("wrong-sentinel-password", &args, &env);
        let code = r.wait_exit(PATIENCE);
        assert!(
            code.is_some_and(|c| c != 0),
            "a refusal ends the process with a failure: {code:?}"
        );
        let failed = r
            .wait_for("gateway-leader failed", PATIENCE)
            .json
            .to_string();
        assert!(
            failed.contains("redis-sentinel-password") && failed.contains("rejected"),
            "{failed}"
        );
        assert!(!failed.contains("not-the-password"), "{failed}");
        assert!(
            !r.lines()
                .iter()
                .any(|l| l.message().contains("unreachable; retrying")),
            "a refusal is not retried"
        );
    })
    .await
    .expect("scenario");
}
