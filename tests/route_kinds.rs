//! GRPCRoute and TLSRoute on a real kube-apiserver with the upstream CRDs: each reason of the
//! shared route engine shows on the new kinds, Gateways count them in `attachedRoutes`, and a
//! takeover in the middle of changes to them loses none (and a status someone else overwrote is
//! seen on the watch and written back).

mod common;

use common::blocking;
use common::gateway::*;
use common::Replica;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::referencegrants::ReferenceGrant;
use gateway_api::tlsroutes::TlsRoute;
use gateway_leader_log::message;
use k8s_openapi::api::core::v1::Service;
use kube::api::PostParams;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::json;

/// A class, a Gateway with an HTTP listener `http` (port 80), a TLS Passthrough listener `tls`
/// (port 443, `*.example.com`) and a TLS Terminate one `term` (port 8443), and Service `web`.
async fn scene(ns: &str, controller: &str) -> Client {
    let client = namespace_with_class(ns, controller).await;
    let gw: Gateway = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": ns},
        "spec": {"gatewayClassName": ns, "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 80},
            {"name": "tls", "protocol": "TLS", "port": 443, "hostname": "*.example.com",
             "tls": {"mode": "Passthrough"}},
            {"name": "term", "protocol": "TLS", "port": 8443,
             "tls": {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]}}
        ]}
    }))
    .expect("gateway");
    put(&Api::<Gateway>::namespaced(client.clone(), ns), &gw).await;
    put(
        &Api::<Service>::namespaced(client.clone(), ns),
        &service(ns, "web", 80),
    )
    .await;
    client
}

/// Waits until our entry on `name` says `type_`=`status` (`reason`).
async fn expect<K>(api: &Api<K>, controller: &str, name: &str, t: &str, st: &str, reason: &str)
where
    K: kube::Resource
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + 'static,
{
    let c = controller.to_string();
    let (t2, st2, r2) = (t.to_string(), st.to_string(), reason.to_string());
    wait_for(api, name, &format!("{t}={st} ({reason})"), move |r| {
        any_route_says(r, &c, &t2, &st2, &r2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_tls_routes_get_the_spec_reasons() {
    let ns = "rk-reasons";
    let controller = "gateway-leader.dev/rk-reasons";
    let client = scene(ns, controller).await;
    let other = format!("{ns}-other");
    apiserver()
        .await
        .create_namespace(&other)
        .await
        .expect("namespace");
    let grpc: Api<GrpcRoute> = Api::namespaced(client.clone(), ns);
    let tls: Api<TlsRoute> = Api::namespaced(client.clone(), ns);
    let to = |section: &str| json!({"name": "gw", "sectionName": section});
    put(&grpc, &grpc_route(ns, "ok", "gw", &[(ns, "web", 80)])).await;
    put(
        &grpc,
        &grpc_route(ns, "missing", "gw", &[(ns, "nothing", 80)]),
    )
    .await;
    // (name, listener, hostname, backend namespace): one TLSRoute per reason.
    for (name, section, host, backend_ns) in [
        ("ok", "tls", "a.example.com", ns),
        ("other-host", "tls", "a.example.org", ns),
        ("on-http", "http", "a.example.com", ns),
        ("cross", "tls", "b.example.com", other.as_str()),
    ] {
        let route = tls_route(ns, name, to(section), host, &[(backend_ns, "web", 80)]);
        put(&tls, &route).await;
    }
    let mut args = replica_args(apiserver().await.kubeconfig_path(), ns, controller);
    args.push("--leader-election-disable".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _replica = Replica::start("rk-reasons-a", &args);

    expect(&grpc, controller, "ok", "Accepted", "True", "Accepted").await;
    expect(
        &grpc,
        controller,
        "ok",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    expect(
        &grpc,
        controller,
        "missing",
        "ResolvedRefs",
        "False",
        "BackendNotFound",
    )
    .await;
    expect(&tls, controller, "ok", "Accepted", "True", "Accepted").await;
    expect(
        &tls,
        controller,
        "ok",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    expect(
        &tls,
        controller,
        "other-host",
        "Accepted",
        "False",
        "NoMatchingListenerHostname",
    )
    .await;
    expect(
        &tls,
        controller,
        "on-http",
        "Accepted",
        "False",
        "NotAllowedByListeners",
    )
    .await;
    expect(
        &tls,
        controller,
        "cross",
        "ResolvedRefs",
        "False",
        "RefNotPermitted",
    )
    .await;
    // A grant for TLSRoutes lets the cross-namespace backend in.
    let grant: ReferenceGrant = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": "tls", "namespace": other},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "TLSRoute",
                           "namespace": ns}],
                 "to": [{"group": "", "kind": "Service"}]}
    }))
    .expect("grant");
    put(
        &Api::<Service>::namespaced(client.clone(), &other),
        &service(&other, "web", 80),
    )
    .await;
    put(
        &Api::<ReferenceGrant>::namespaced(client.clone(), &other),
        &grant,
    )
    .await;
    expect(
        &tls,
        controller,
        "cross",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;

    // The Gateway counts each kind on its listeners and lists what each takes; the TLS
    // Terminate listener takes TLSRoutes too, but its certificate Secret does not exist.
    let gateways: Api<Gateway> = Api::namespaced(client, ns);
    wait_for(&gateways, "gw", "routes of every kind counted", |g| {
        let Some(ls) = g.status.as_ref().and_then(|s| s.listeners.as_deref()) else {
            return false;
        };
        let kinds = |i: usize| -> Vec<String> {
            ls[i]
                .supported_kinds
                .iter()
                .flatten()
                .map(|k| k.kind.clone())
                .collect()
        };
        ls.len() == 3
            // Two GRPCRoutes on `http`; `ok` and `cross` on `tls`.
            && ls[0].attached_routes == 2
            && ls[1].attached_routes == 2
            && kinds(0) == ["HTTPRoute", "GRPCRoute"]
            && kinds(1) == ["TLSRoute"]
            && kinds(2) == ["TLSRoute"]
            && condition(&ls[2].conditions, "ResolvedRefs")
                .is_some_and(|c| c.status == "False" && c.reason == "InvalidCertificateRef")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_in_the_middle_of_changes_to_grpc_and_tls_routes_loses_none() {
    let ns = "rk-takeover";
    let controller = "gateway-leader.dev/rk-takeover";
    let client = scene(ns, controller).await;
    let grpc: Api<GrpcRoute> = Api::namespaced(client.clone(), ns);
    let tls: Api<TlsRoute> = Api::namespaced(client, ns);
    let parent = json!({"name": "gw", "sectionName": "tls"});
    put(&grpc, &grpc_route(ns, "g", "gw", &[(ns, "web", 80)])).await;
    put(
        &tls,
        &tls_route(ns, "t", parent.clone(), "a.example.com", &[(ns, "web", 80)]),
    )
    .await;
    let args = replica_args(apiserver().await.kubeconfig_path(), ns, controller);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = Replica::start("rk-a", &args);
    blocking(|| a.wait_for(message::LEADING, PATIENCE));
    let mut b = Replica::start("rk-b", &args);
    blocking(|| b.wait_for(message::FOLLOWING, PATIENCE));
    expect(
        &grpc,
        controller,
        "g",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    expect(
        &tls,
        controller,
        "t",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;

    // Crash the leader and change both routes while nobody may write (the lease runs 3 s),
    // then once more while the follower takes over.
    drop(a);
    put(&grpc, &grpc_route(ns, "g", "gw", &[(ns, "gone", 80)])).await;
    put(
        &tls,
        &tls_route(ns, "t", parent.clone(), "a.example.org", &[(ns, "web", 80)]),
    )
    .await;
    blocking(|| b.wait_for(message::LEADING, PATIENCE));
    put(
        &tls,
        &tls_route(ns, "t", parent, "a.example.org", &[(ns, "gone", 80)]),
    )
    .await;
    expect(
        &grpc,
        controller,
        "g",
        "ResolvedRefs",
        "False",
        "BackendNotFound",
    )
    .await;
    expect(
        &tls,
        controller,
        "t",
        "Accepted",
        "False",
        "NoMatchingListenerHostname",
    )
    .await;
    expect(
        &tls,
        controller,
        "t",
        "ResolvedRefs",
        "False",
        "BackendNotFound",
    )
    .await;
    for (name, r) in [
        (
            "g",
            status_managers(&grpc.get("g").await.expect("grpc route")),
        ),
        (
            "t",
            status_managers(&tls.get("t").await.expect("tls route")),
        ),
    ] {
        assert!(
            r.contains(&manager_of("rk-b")),
            "{name}: the new leader wrote it: {r:?}"
        );
    }

    // Our entry removed by another writer: nothing the statuses are computed from changed, so
    // only the watched copy shows it (docs/architecture.md, "Leadership changes and shutdown").
    let mut g = grpc.get_status("g").await.expect("grpc route");
    g.status = Some(serde_json::from_value(json!({"parents": []})).expect("empty status"));
    g.metadata.managed_fields = None;
    grpc.replace_status("g", &PostParams::default(), &g)
        .await
        .expect("cleared");
    expect(
        &grpc,
        controller,
        "g",
        "ResolvedRefs",
        "False",
        "BackendNotFound",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_and_a_grpc_route_sharing_a_hostname_on_a_listener_admit_only_the_older() {
    // Upstream `apis/v1/grpcroute_types.go`, `GRPCRouteSpec.Hostnames`: exactly one of the two
    // is accepted, the oldest, then the first by {namespace}/{name}.
    let ns = "rk-contest";
    let controller = "gateway-leader.dev/rk-contest";
    let client = scene(ns, controller).await;
    let http: Api<gateway_api::httproutes::HttpRoute> = Api::namespaced(client.clone(), ns);
    let grpc: Api<GrpcRoute> = Api::namespaced(client.clone(), ns);
    let mut h = route(ns, "h", "gw", &[(ns, "web", 80)]);
    h.spec.hostnames = Some(vec!["a.example.com".into()]);
    put(&http, &h).await;
    let older = http.get("h").await.expect("the HTTPRoute");
    // Created a second later at least: the creation time decides, not the name.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut g = grpc_route(ns, "a-grpc", "gw", &[(ns, "web", 80)]);
    g.spec.hostnames = Some(vec!["*.example.com".into()]);
    put(&grpc, &g).await;
    let newer = grpc.get("a-grpc").await.expect("the GRPCRoute");
    assert!(
        newer.metadata.creation_timestamp > older.metadata.creation_timestamp,
        "the GRPCRoute is the newer"
    );
    let mut args = replica_args(apiserver().await.kubeconfig_path(), ns, controller);
    args.push("--leader-election-disable".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _replica = Replica::start("rk-contest-a", &args);
    expect(&http, controller, "h", "Accepted", "True", "Accepted").await;
    expect(
        &grpc,
        controller,
        "a-grpc",
        "Accepted",
        "False",
        "NotAllowedByListeners",
    )
    .await;
    // The HTTPRoute goes: the GRPCRoute, unchanged itself, is admitted.
    http.delete("h", &Default::default())
        .await
        .expect("deleting the HTTPRoute");
    expect(&grpc, controller, "a-grpc", "Accepted", "True", "Accepted").await;
}

/// HTTPRoute retries, standard from Gateway API v1.7.0. This controller claims no retry feature
/// (retries are the data plane's), so a rule that sets `retry.backoff` is refused with
/// `UnsupportedValue`, as upstream `HTTPRouteRetry.Backoff` requires of an implementation without
/// it, and still counts in `attachedRoutes`; `codes` and `attempts` alone change nothing. On older
/// CRDs `retry` is not in the schema: the apiserver drops it, and both routes are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_sets_retry_backoff_is_an_unsupported_value_where_retries_are_standard() {
    use gateway_api::httproutes::HttpRoute;
    use kube::api::{ApiResource, DynamicObject};

    let (ns, controller) = ("rk-retry", "gateway-leader.dev/rk-retry");
    let client = namespace_with_class(ns, controller).await;
    gateway_and_route(&client, ns, 80).await;
    let bundle = testkit::gateway_api::installed_bundle_version(&client)
        .await
        .expect("the bundle version");
    let retries_standard = !(bundle.starts_with("v1.5.") || bundle.starts_with("v1.6."));
    // The crate's HTTPRoute has no `retry` (gateway-api 0.22 follows v1.5.1): sent as JSON.
    let raw: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<HttpRoute>(&()));
    for (name, retry) in [
        ("backoff", json!({"attempts": 2, "backoff": "100ms"})),
        ("codes", json!({"codes": [500, 503], "attempts": 2})),
    ] {
        let route: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parentRefs": [{"name": "gw"}],
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}], "retry": retry}]}
        }))
        .expect("a route");
        raw.create(&PostParams::default(), &route)
            .await
            .expect("created");
    }
    let stored = raw.get("backoff").await.expect("read back");
    assert_eq!(
        stored.data["spec"]["rules"][0]["retry"]["backoff"].as_str(),
        retries_standard.then_some("100ms"),
        "the {bundle} CRD keeps retry.backoff exactly where retries are standard"
    );

    let s = apiserver().await;
    let args = replica_args(s.kubeconfig_path(), ns, controller);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut r = Replica::start("rk-retry-a", &args);
    blocking(|| r.wait_for(message::LEADING, PATIENCE));

    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), ns);
    if retries_standard {
        expect(
            &routes,
            controller,
            "backoff",
            "Accepted",
            "False",
            "UnsupportedValue",
        )
        .await;
    } else {
        expect(
            &routes, controller, "backoff", "Accepted", "True", "Accepted",
        )
        .await;
    }
    expect(
        &routes,
        controller,
        "backoff",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    expect(&routes, controller, "codes", "Accepted", "True", "Accepted").await;
    expect(&routes, controller, "route", "Accepted", "True", "Accepted").await;
    // All three attach: acceptance does not decide attachment.
    let gateways: Api<Gateway> = Api::namespaced(client, ns);
    wait_for(&gateways, "gw", "3 routes attached to http", |g| {
        g.status
            .as_ref()
            .and_then(|s| s.listeners.as_ref())
            .is_some_and(|ls| ls.len() == 1 && ls[0].attached_routes == 3)
    })
    .await;
}
