//! TCPRoute and UDPRoute (Gateway API v1.6 standard channel) on a real kube-apiserver with the
//! upstream CRDs of v1.6 or later (v1.7.0, as scripts/test.sh installs them): attachment to TCP
//! and UDP listeners, the kinds each listener takes,
//! `ResolvedRefs`, and the GatewayClass's `SupportedVersion` and features for that bundle.
//! The cases follow v1.6.1 `conformance/tests/tcproute-*` and `udproute-*`.
//!
//! These kinds exist only in v1.6 and later: on a server with older CRDs each test fails at once,
//! saying how to run it (it never passes by skipping). scripts/test.sh installs v1.7.0 beside the
//! newest apiserver; the oldest-apiserver run of .ci/run (v1.5.1) leaves this file out.

mod common;

use common::gateway::*;
use common::Replica;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_leader_log::message;
use gateway_leader_status::v1_6::{TcpRoute, UdpRoute};
use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client};
use serde_json::json;

/// A class for `controller`, a Gateway `gw` with HTTP `web` (80), TCP `tcp` (9000), UDP `udp`
/// (53) and UDP `dns` on port 80 beside the HTTP one, and Services `echo` (9000) and `dns` (53).
async fn scene(ns: &str, controller: &str) -> Client {
    let client = namespace_with_class(ns, controller).await;
    testkit::gateway_api::require_v1_6(&client)
        .await
        .expect("the Gateway API v1.6 CRDs");
    let gw: Gateway = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": ns},
        "spec": {"gatewayClassName": ns, "listeners": [
            {"name": "web", "protocol": "HTTP", "port": 80},
            {"name": "tcp", "protocol": "TCP", "port": 9000},
            {"name": "udp", "protocol": "UDP", "port": 53},
            {"name": "dns", "protocol": "UDP", "port": 80}
        ]}
    }))
    .expect("gateway");
    put(&Api::<Gateway>::namespaced(client.clone(), ns), &gw).await;
    let services = Api::<Service>::namespaced(client.clone(), ns);
    put(&services, &service(ns, "echo", 9000)).await;
    put(&services, &service(ns, "dns", 53)).await;
    client
}

fn l4_route<K: serde::de::DeserializeOwned>(
    kind: &str,
    ns: &str,
    name: &str,
    section: Option<&str>,
    backend: (&str, Option<&str>, i32),
) -> K {
    let mut parent = json!({"name": "gw"});
    if let Some(s) = section {
        parent["sectionName"] = json!(s);
    }
    let mut b = json!({"name": backend.0, "port": backend.2});
    if let Some(bns) = backend.1 {
        b["namespace"] = json!(bns);
    }
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [parent], "rules": [{"backendRefs": [b]}]}
    }))
    .expect("a route")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_udp_routes_get_the_spec_reasons_on_the_v1_6_crds() {
    let (ns, controller) = ("l4-reasons", "gateway-leader.dev/l4-reasons");
    let client = scene(ns, controller).await;
    let s = apiserver().await;
    let args = replica_args(s.kubeconfig_path(), ns, controller);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut r = Replica::start("l4-a", &args);
    common::blocking(|| r.wait_for(message::LEADING, PATIENCE));

    let tcp = Api::<TcpRoute>::namespaced(client.clone(), ns);
    let udp = Api::<UdpRoute>::namespaced(client.clone(), ns);
    // Attached and resolved (tcproute-parentref-port-and-section-name, udproute-simple).
    put(
        &tcp,
        &l4_route("TCPRoute", ns, "t", Some("tcp"), ("echo", None, 9000)),
    )
    .await;
    put(
        &udp,
        &l4_route("UDPRoute", ns, "u", None, ("dns", None, 53)),
    )
    .await;
    // On a listener of another protocol (tcproute-invalid-non-tcp-listener).
    put(
        &tcp,
        &l4_route("TCPRoute", ns, "on-http", Some("web"), ("echo", None, 9000)),
    )
    .await;
    // Attached, with a backend that does not exist or is not granted
    // (tcproute-invalid-backendref-nonexistent, udproute-invalid-cross-namespace-backend-ref).
    put(
        &tcp,
        &l4_route("TCPRoute", ns, "gone", Some("tcp"), ("nope", None, 1)),
    )
    .await;
    put(
        &udp,
        &l4_route(
            "UDPRoute",
            ns,
            "far",
            Some("udp"),
            ("x", Some("default"), 1),
        ),
    )
    .await;

    for (name, t, st, reason) in [
        ("t", "Accepted", "True", "Accepted"),
        ("t", "ResolvedRefs", "True", "ResolvedRefs"),
        ("on-http", "Accepted", "False", "NotAllowedByListeners"),
        ("gone", "Accepted", "True", "Accepted"),
        ("gone", "ResolvedRefs", "False", "BackendNotFound"),
    ] {
        let c = controller.to_string();
        wait_for(
            &tcp,
            name,
            &format!("{name}: {t}={st} ({reason})"),
            move |r| any_route_says(r, &c, t, st, reason),
        )
        .await;
    }
    for (name, t, st, reason) in [
        ("u", "Accepted", "True", "Accepted"),
        ("u", "ResolvedRefs", "True", "ResolvedRefs"),
        ("far", "ResolvedRefs", "False", "RefNotPermitted"),
    ] {
        let c = controller.to_string();
        wait_for(
            &udp,
            name,
            &format!("{name}: {t}={st} ({reason})"),
            move |r| any_route_says(r, &c, t, st, reason),
        )
        .await;
    }
    // The listeners count what attached: tcp "t" and "gone"; udp "u" (no sectionName: every
    // UDP listener) and "far"; dns "u"; the HTTP listener nothing.
    let gateways = Api::<Gateway>::namespaced(client.clone(), ns);
    wait_for(&gateways, "gw", "routes counted per listener", |g| {
        let listeners = g
            .status
            .as_ref()
            .and_then(|s| s.listeners.clone())
            .unwrap_or_default();
        let count = |n: &str| {
            listeners
                .iter()
                .find(|l| l.name == n)
                .map(|l| l.attached_routes)
        };
        let kinds = |n: &str| -> Vec<String> {
            listeners
                .iter()
                .find(|l| l.name == n)
                .and_then(|l| l.supported_kinds.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|k| k.kind)
                .collect()
        };
        [count("web"), count("tcp"), count("udp"), count("dns")]
            == [Some(0), Some(2), Some(2), Some(1)]
            && kinds("tcp") == ["TCPRoute"]
            && kinds("udp") == ["UDPRoute"]
    })
    .await;
    // The class: the installed bundle (v1.6 or later) is a supported version, and the new kinds
    // are features.
    let bundle = testkit::gateway_api::installed_bundle_version(&client)
        .await
        .expect("the bundle version");
    let classes = Api::<GatewayClass>::all(client);
    wait_for(
        &classes,
        ns,
        "SupportedVersion True with TCPRoute and UDPRoute",
        |gc| {
            let Some(s) = gc.status.as_ref() else {
                return false;
            };
            let supported = s
                .conditions
                .as_deref()
                .and_then(|c| condition(c, "SupportedVersion"))
                .is_some_and(|c| c.status == "True" && c.message.contains(&bundle));
            let features: Vec<&str> = s
                .supported_features
                .iter()
                .flatten()
                .map(|f| f.name.as_str())
                .collect();
            supported && features.contains(&"TCPRoute") && features.contains(&"UDPRoute")
        },
    )
    .await;
}
