//! `/healthz`, `/readyz` and `/metrics` over HTTP against running replicas.

mod common;

use gateway_leader_log::message;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::gateway::*;
use common::Replica;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
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

/// A class for `controller`, Gateway `gw`, Service `web` and HTTPRoute `route` in `ns`.
async fn sample(client: &kube::Client, ns: &str, controller: &str) {
    put(
        &Api::<GatewayClass>::all(client.clone()),
        &gateway_class(ns, controller),
    )
    .await;
    gateway_and_route(client, ns, 80).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_and_a_follower_answer_health_readiness_and_metrics() {
    let s = apiserver().await;
    let ns = "health";
    s.create_namespace(ns).await.expect("namespace");
    let client = s.admin_client();
    let controller = "gateway-leader.dev/health";
    sample(&client, ns, controller).await;
    let args = replica_args(s.kubeconfig_path(), ns, controller);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut a = Replica::start("health-a", &args);
        a.wait_for(message::LEADING, PATIENCE);
        let mut b = Replica::start("health-b", &args);
        b.wait_for(message::FOLLOWING, PATIENCE);
        let (la, lb) = (a.health_addr(PATIENCE), b.health_addr(PATIENCE));
        for addr in [la, lb] {
            assert_eq!(get(addr, "/healthz"), (200, "ok\n".into()));
            eventually(addr, "/readyz", |c, _| c == 200);
        }
        let lock = format!("leader_election_master_status{{name=\"{ns}-lock\"}}");
        // Every kind's series is there from the start, at 0: wait for a write.
        let leader = eventually(la, "/metrics", |_, m| {
            testkit::metrics::sum(
                m,
                "gateway_leader_status_writes_total",
                Some("kind=\"HTTPRoute\""),
            ) >= 1.0
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
            follower.contains("gateway_leader_status_writes_total{kind=\"HTTPRoute\"} 0\n")
                && testkit::metrics::sum(&follower, "gateway_leader_status_writes_total", None)
                    == 0.0,
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

/// The messages of `r`'s log lines that say a CRD is not installed, by kind.
fn not_installed(r: &mut Replica) -> Vec<String> {
    r.lines()
        .iter()
        .filter(|l| l.message().starts_with("Gateway API CRD not installed"))
        .map(|l| l.json["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_crds_are_named_once_hold_readiness_back_and_are_picked_up_when_installed() {
    // A cluster of its own: it starts without any Gateway API CRD.
    let s = testkit::kube::KubeApiServer::start_local()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    let client = s.admin_client();
    let ns = "discovery";
    s.create_namespace(ns).await.expect("namespace");
    let controller = "gateway-leader.dev/discovery";
    let mut args = replica_args(s.kubeconfig_path(), ns, controller);
    args.push("--leader-election-disable".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut r = Replica::start("discovery-a", &args);
    let addr = tokio::task::block_in_place(|| {
        r.wait_for(message::SERVING, PATIENCE);
        r.health_addr(PATIENCE)
    });

    // 1. Nothing installed: one WARN per kind naming its CRD and the install command; not ready,
    //    and /readyz says which required CRDs are missing.
    let warned = tokio::task::block_in_place(|| {
        r.wait_match("a WARN per missing kind", PATIENCE, |l| {
            l.message().starts_with("Gateway API CRD not installed")
                && l.json["kind"] == "ReferenceGrant"
        })
    });
    assert_eq!(
        warned.json["crd"], "referencegrants.gateway.networking.k8s.io",
        "{:?}",
        warned.json
    );
    assert!(
        warned.json["install"]
            .as_str()
            .is_some_and(|i| i.contains("standard-install.yaml")),
        "{:?}",
        warned.json
    );
    let why = tokio::task::block_in_place(|| {
        eventually(addr, "/readyz", |c, b| {
            c == 503 && b.contains("httproutes.gateway.networking.k8s.io")
        })
    });
    assert!(
        why.contains("gatewayclasses.gateway.networking.k8s.io")
            && why.contains("gateways.gateway.networking.k8s.io"),
        "{why}"
    );

    // 2. The required kinds (and ReferenceGrant) appear: picked up without a restart, ready,
    //    and statuses flow while GRPCRoute, TLSRoute and ListenerSet are still missing.
    testkit::gateway_api::install_some(&client, |name| {
        !name.starts_with("grpcroutes.")
            && !name.starts_with("tlsroutes.")
            && !name.starts_with("listenersets.")
    })
    .await
    .expect("the required CRDs");
    sample(&client, ns, controller).await;
    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), ns);
    wait_for(&routes, "route", "accepted", |rt| {
        route_says(rt, controller, "Accepted", "True", "Accepted")
    })
    .await;
    tokio::task::block_in_place(|| eventually(addr, "/readyz", |c, _| c == 200));
    // BackendTLSPolicy, optional too, came with them: picked up like any other.
    tokio::task::block_in_place(|| {
        r.wait_match("BackendTLSPolicy picked up", PATIENCE, |l| {
            l.message() == "CRD installed; watching it now" && l.json["kind"] == "BackendTLSPolicy"
        })
    });

    // 3. GRPCRoute and ListenerSet are installed later: picked up without a restart.
    testkit::gateway_api::install_some(&client, |name| {
        name.starts_with("grpcroutes.") || name.starts_with("listenersets.")
    })
    .await
    .expect("the GRPCRoute and ListenerSet CRDs");
    for (kind, crd) in [
        ("GRPCRoute", "grpcroutes.gateway.networking.k8s.io"),
        ("ListenerSet", "listenersets.gateway.networking.k8s.io"),
    ] {
        let picked = tokio::task::block_in_place(|| {
            r.wait_match(&format!("{kind} picked up"), PATIENCE, |l| {
                l.message() == "CRD installed; watching it now" && l.json["kind"] == kind
            })
        });
        assert_eq!(picked.json["crd"], crd);
    }

    // 4. It is deleted again: named once more, and its watch stops without a storm of failures.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("grpcroutes.gateway.networking.k8s.io", &Default::default())
        .await
        .expect("deleting the GRPCRoute CRD");
    tokio::task::block_in_place(|| {
        let deadline = Instant::now() + PATIENCE;
        while not_installed(&mut r)
            .iter()
            .filter(|k| *k == "GRPCRoute")
            .count()
            < 2
        {
            assert!(Instant::now() < deadline, "GRPCRoute not named again");
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    // Still ready: GRPCRoute is optional.
    assert_eq!(get(addr, "/readyz").0, 200);

    let mut named = not_installed(&mut r);
    named.sort();
    assert_eq!(
        named,
        [
            "BackendTLSPolicy",
            "GRPCRoute",
            "GRPCRoute",
            "Gateway",
            "GatewayClass",
            "HTTPRoute",
            "ListenerSet",
            "ReferenceGrant",
            "TCPRoute",
            "TLSRoute",
            "UDPRoute"
        ],
        "each missing kind named once (GRPCRoute twice: it went away again)"
    );
    // No watch ran against a missing CRD, and no retry storm: the only failures logged are
    // the deleted GRPCRoute's, for the moment its CRD is terminating and discovery still lists
    // it (seen once in about a dozen runs: one line), before discovery stops its watch.
    let failures: Vec<String> = r
        .lines()
        .iter()
        .filter(|l| l.message().contains("watch failed"))
        .map(|l| l.json["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        failures.len() <= 3 && failures.iter().all(|k| k == "GRPCRoute"),
        "watch failures beyond the deleted CRD's moment: {failures:?}"
    );
}
