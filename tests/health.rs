//! `/healthz`, `/readyz` and `/metrics` over HTTP against running replicas.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::gateway::*;
use common::Replica;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Service;
use kube::Api;

/// One plain HTTP/1.1 GET: (status code, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let code = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {raw:?}"));
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// Polls `path` until `ok` holds for its answer; panics with the last answer after `PATIENCE`.
fn eventually(addr: SocketAddr, path: &str, ok: impl Fn(u16, &str) -> bool) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (code, body) = get(addr, path);
        if ok(code, &body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{path}: still {code} {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_and_a_follower_answer_health_readiness_and_metrics() {
    let s = apiserver().await;
    let ns = "health";
    s.create_namespace(ns).await.expect("namespace");
    let client = s.admin_client();
    let controller = "gateway-leader.dev/health";
    put(
        &Api::<GatewayClass>::all(client.clone()),
        &gateway_class(ns, controller),
    )
    .await;
    put(
        &Api::<Gateway>::namespaced(client.clone(), ns),
        &gateway(ns, "gw", ns),
    )
    .await;
    put(
        &Api::<Service>::namespaced(client.clone(), ns),
        &service(ns, "web", 80),
    )
    .await;
    put(
        &Api::<HttpRoute>::namespaced(client, ns),
        &route(ns, "route", "gw", &[(ns, "web", 80)]),
    )
    .await;
    let args = replica_args(s.kubeconfig_path(), ns, controller);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut a = Replica::start("health-a", &args);
        a.wait_for("leadership: leading", PATIENCE);
        let mut b = Replica::start("health-b", &args);
        b.wait_for("leadership: following", PATIENCE);
        let (la, lb) = (a.health_addr(PATIENCE), b.health_addr(PATIENCE));
        for addr in [la, lb] {
            assert_eq!(get(addr, "/healthz"), (200, "ok\n".into()));
            eventually(addr, "/readyz", |c, _| c == 200);
        }
        let lock = format!("leader_election_master_status{{name=\"{ns}-lock\"}}");
        let leader = eventually(la, "/metrics", |_, m| {
            m.contains("gateway_leader_status_writes_total{kind=\"HTTPRoute\"}")
        });
        assert!(leader.contains(&format!("{lock} 1")), "{leader}");
        assert!(
            leader.contains("gateway_leader_leadership_transitions_total 1"),
            "{leader}"
        );
        assert!(
            leader.contains("gateway_leader_first_status_write_seconds_count 1"),
            "{leader}"
        );
        assert!(
            leader.contains(
                "gateway_leader_lock_request_seconds_count{op=\"acquire_or_renew\",outcome=\"ok\"}"
            ),
            "{leader}"
        );
        let follower = get(lb, "/metrics").1;
        assert!(follower.contains(&format!("{lock} 0")), "{follower}");
        assert!(
            !follower.contains("gateway_leader_status_writes_total{"),
            "{follower}"
        );
        assert_eq!(get(la, "/nope").0, 404);
    })
    .await
    .expect("scenario");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_lock_backend_is_down_is_alive_but_not_ready() {
    let port = testkit::free_port().expect("a free port");
    let mut args = kubeconfig_args().await;
    args.extend([
        "--lock-backend".into(),
        "etcd".into(),
        "--etcd-endpoints".into(),
        format!("http://127.0.0.1:{port}"),
    ]);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut r = Replica::start("health-down", &args);
        let addr = r.health_addr(PATIENCE);
        r.wait_for("lock backend unreachable; retrying", PATIENCE);
        assert_eq!(
            get(addr, "/healthz").0,
            200,
            "alive: restarting would not help"
        );
        let (code, why) = get(addr, "/readyz");
        assert_eq!(code, 503);
        assert!(why.contains("lock backend"), "{why}");
    })
    .await
    .expect("scenario");
}
