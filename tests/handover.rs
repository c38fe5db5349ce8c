//! Two `gateway-leader run` processes on one real backend: a graceful stop of the leader hands
//! over to the follower by watch, long before the 15 s lease could have expired.

mod common;

use std::time::Duration;

use common::graceful_handover;

/// A quarter of the default 2 s retry period: a follower that only polls looks again a whole
/// retry period after its last look, so a handover this fast came from the watch seeing the
/// release (not from a poll, and even less from expiry).
const PROMPT: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_graceful_handover_between_processes() {
    let server = testkit::redis::RedisServer::start()
        .await
        .expect("redis-server starts");
    let mut args = common::gateway::kubeconfig_args().await;
    args.extend([
        "--lock-backend".into(),
        "redis".into(),
        "--redis-url".into(),
        server.url(),
    ]);
    let took = tokio::task::spawn_blocking(move || {
        graceful_handover(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .expect("handover");
    eprintln!("redis: graceful handover between processes took {took:?}");
    assert!(took < PROMPT, "redis handover took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_graceful_handover_between_processes() {
    let server = testkit::etcd::EtcdServer::start()
        .await
        .expect("etcd starts");
    let mut args = common::gateway::kubeconfig_args().await;
    args.extend([
        "--lock-backend".into(),
        "etcd".into(),
        "--etcd-endpoints".into(),
        server.endpoint(),
    ]);
    let took = tokio::task::spawn_blocking(move || {
        graceful_handover(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .expect("handover");
    eprintln!("etcd: graceful handover between processes took {took:?}");
    assert!(took < PROMPT, "etcd handover took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_graceful_handover_between_processes() {
    let server = testkit::kube::KubeApiServer::start()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    server
        .install_gateway_api()
        .await
        .expect("Gateway API CRDs");
    let ns = "handover";
    server.create_namespace(ns).await.expect("namespace");
    let kubeconfig = server.kubeconfig_path().display().to_string();
    let took = tokio::task::spawn_blocking(move || {
        graceful_handover(&[
            "--lock-backend",
            "kubernetes",
            "--kubeconfig",
            &kubeconfig,
            "--leader-election-namespace",
            ns,
        ])
    })
    .await
    .expect("handover");
    eprintln!("kubernetes: graceful handover between processes took {took:?}");
    assert!(took < PROMPT, "kubernetes handover took {took:?}");
}
