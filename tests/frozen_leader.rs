//! A leader process frozen whole (SIGSTOP) past its lease, on every backend: the follower takes
//! over under a higher term, and the thawed process steps down without ever leading again under
//! its old term. No write can pass `check()` after the thaw either: validity is measured on the
//! monotonic clock, which kept running while the process was frozen.

mod common;

use gateway_leader_log::{message, Event};
use std::time::{Duration, SystemTime};

use common::Replica;

const TIMING: [&str; 6] = [
    "--lease-duration",
    "3s",
    "--renew-deadline",
    "2s",
    "--retry-period",
    "500ms",
];

fn term_of(l: &common::Line) -> u64 {
    match l.event {
        Some(Event::Leading { term, .. }) => term,
        _ => panic!("not a leadership line: {:?}", l.json),
    }
}

fn frozen_leader(backend_args: Vec<String>) {
    let patience = Duration::from_secs(90);
    let mut args: Vec<&str> = backend_args.iter().map(String::as_str).collect();
    args.extend(TIMING);
    let mut a = Replica::start("frozen-a", &args);
    let led = a.wait_for(message::LEADING, patience);
    let t1 = term_of(&led);
    let mut b = Replica::start("frozen-b", &args);
    b.wait_for(message::FOLLOWING, patience);

    a.pause();
    let frozen_at = SystemTime::now();
    let took_over = b.wait_for_since(message::LEADING, frozen_at, patience);
    let t2 = term_of(&took_over);
    assert!(
        t2 > t1,
        "the new leader's term {t2} must exceed the frozen one's {t1}"
    );
    let gap = took_over.at.duration_since(frozen_at).unwrap_or_default();
    eprintln!("follower led {gap:?} after the leader froze (lease 3s)");

    // Frozen well past its lease, then thawed.
    std::thread::sleep(Duration::from_secs(1));
    let thawed_at = SystemTime::now();
    a.resume();
    // It steps down at once (holder unknown), then learns who leads now.
    a.wait_match("following frozen-b", patience, |l| {
        l.at >= thawed_at
            && matches!(&l.event, Some(Event::Following { holder: Some(h), .. })
                if h.starts_with("frozen-b_"))
    });
    std::thread::sleep(Duration::from_secs(2));
    let relapsed: Vec<_> = a
        .lines()
        .iter()
        .filter(|l| l.at >= thawed_at && l.message() == message::LEADING)
        .map(|l| l.json.clone())
        .collect();
    assert!(
        relapsed.is_empty(),
        "the thawed process led again: {relapsed:?}"
    );
    let lost: Vec<_> = b
        .lines()
        .iter()
        .filter(|l| l.at >= took_over.at && l.message() == message::FOLLOWING)
        .map(|l| l.json.clone())
        .collect();
    assert!(lost.is_empty(), "the new leader kept its lease: {lost:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_leader_steps_down() {
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
    tokio::task::spawn_blocking(move || frozen_leader(args))
        .await
        .expect("scenario");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_frozen_leader_steps_down() {
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
    tokio::task::spawn_blocking(move || frozen_leader(args))
        .await
        .expect("scenario");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_frozen_leader_steps_down() {
    let server = testkit::kube::KubeApiServer::start()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    server
        .install_gateway_api()
        .await
        .expect("Gateway API CRDs");
    server.create_namespace("frozen").await.expect("namespace");
    let args = vec![
        "--lock-backend".into(),
        "kubernetes".into(),
        "--kubeconfig".into(),
        server.kubeconfig_path().display().to_string(),
        "--leader-election-namespace".into(),
        "frozen".into(),
    ];
    tokio::task::spawn_blocking(move || frozen_leader(args))
        .await
        .expect("scenario");
}
