//! GRPCRoute and TLSRoute through the shared engine: where each kind may attach, the
//! ReferenceGrants each needs, and that every kind counts in the same `attachedRoutes`.

use serde_json::json;

use super::super::fixtures::*;
use super::super::{compute, World};
use crate::key::Kind;

/// Gateway `infra/gw`: HTTP listener `web` (port 80) and TLS Passthrough listener `tls`
/// (port 443, `*.example.com`); Service `infra/web` on 8080 and `apps/api` on 443.
fn base() -> World {
    let mut w = world();
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([
            http("web", 80),
            tls_passthrough("tls", 443, "*.example.com")
        ]),
    )];
    w.services = vec![
        service("infra", "web", &[8080]),
        service("apps", "api", &[443]),
    ];
    w
}

fn grpc_spec(parent_refs: serde_json::Value, backend_refs: serde_json::Value) -> serde_json::Value {
    route_spec(parent_refs, backend_refs)
}

fn tls_spec(hostnames: serde_json::Value, backend_refs: serde_json::Value) -> serde_json::Value {
    json!({"parentRefs": [{"name": "gw"}], "hostnames": hostnames,
           "rules": [{"backendRefs": backend_refs}]})
}

#[test]
fn grpc_and_tls_routes_attach_where_their_listeners_take_them_and_all_kinds_count() {
    let mut w = base();
    // Distinct hostnames: an HTTPRoute and a GRPCRoute sharing one would contest the listener.
    let mut h = route_spec(json!([{"name": "gw", "sectionName": "web"}]), json!([]));
    h["hostnames"] = json!(["h.example.com"]);
    w.http_routes = vec![route("infra", "h", h)];
    let mut g = grpc_spec(
        json!([{"name": "gw", "sectionName": "web"}]),
        json!([{"name": "web", "port": 8080}]),
    );
    g["hostnames"] = json!(["g.example.com"]);
    w.grpc_routes = vec![grpc_route("infra", "g", g)];
    w.tls_routes = vec![tls_route(
        "infra",
        "t",
        tls_spec(
            json!(["a.example.com"]),
            json!([{"name": "web", "port": 8080}]),
        ),
    )];
    let out = compute(&w, CONTROLLER);
    for (kind, name) in [(Kind::GrpcRoute, "g"), (Kind::TlsRoute, "t")] {
        assert_eq!(
            condition_on(&out, kind, "infra", name, "Accepted"),
            sr("True", "Accepted"),
            "{kind}"
        );
        assert_eq!(
            condition_on(&out, kind, "infra", name, "ResolvedRefs"),
            sr("True", "ResolvedRefs"),
            "{kind}"
        );
    }
    // The HTTP listener counts the HTTPRoute and the GRPCRoute; the TLS listener the TLSRoute.
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 2);
    assert_eq!(listener(&out, "infra", "gw", "tls").attached_routes, 1);
    let kinds = |name| -> Vec<String> {
        listener(&out, "infra", "gw", name)
            .supported_kinds
            .iter()
            .flatten()
            .map(|k| k.kind.clone())
            .collect()
    };
    assert_eq!(kinds("web"), ["HTTPRoute", "GRPCRoute"]);
    assert_eq!(kinds("tls"), ["TLSRoute"]);
}

#[test]
fn a_route_kind_its_listener_does_not_take_is_not_allowed_by_listeners() {
    let mut w = base();
    // A TLSRoute on the HTTP listener; a GRPCRoute on the TLS listener.
    w.tls_routes = vec![tls_route(
        "infra",
        "t",
        json!({"parentRefs": [{"name": "gw", "sectionName": "web"}], "hostnames": ["a.example.com"],
               "rules": [{"backendRefs": []}]}),
    )];
    w.grpc_routes = vec![grpc_route(
        "infra",
        "g",
        grpc_spec(json!([{"name": "gw", "sectionName": "tls"}]), json!([])),
    )];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        condition_on(&out, Kind::TlsRoute, "infra", "t", "Accepted"),
        sr("False", "NotAllowedByListeners")
    );
    assert_eq!(
        condition_on(&out, Kind::GrpcRoute, "infra", "g", "Accepted"),
        sr("False", "NotAllowedByListeners")
    );
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 0);
    assert_eq!(listener(&out, "infra", "gw", "tls").attached_routes, 0);
}

#[test]
fn a_tls_route_whose_hostnames_miss_the_listener_is_no_matching_listener_hostname() {
    let mut w = base();
    w.tls_routes = vec![tls_route(
        "infra",
        "t",
        tls_spec(
            json!(["a.example.org"]),
            json!([{"name": "web", "port": 8080}]),
        ),
    )];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        condition_on(&out, Kind::TlsRoute, "infra", "t", "Accepted"),
        sr("False", "NoMatchingListenerHostname")
    );
}

#[test]
fn a_reference_grant_admits_only_the_route_kind_it_names() {
    let mut w = base();
    // Routes in infra point at apps/api; apps grants HTTPRoutes only (conformance
    // `tlsroute-invalid-reference-grant`, `grpcroute-*` reference grants name the kind).
    w.reference_grants = vec![grant(
        "apps",
        "http-only",
        json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                         "namespace": "infra"}],
               "to": [{"group": "", "kind": "Service"}]}),
    )];
    let cross = json!([{"name": "api", "namespace": "apps", "port": 443}]);
    w.grpc_routes = vec![grpc_route("infra", "g", grpc_spec(to_web(), cross.clone()))];
    w.tls_routes = vec![tls_route(
        "infra",
        "t",
        tls_spec(json!(["a.example.com"]), cross.clone()),
    )];
    let out = compute(&w, CONTROLLER);
    for (kind, name) in [(Kind::GrpcRoute, "g"), (Kind::TlsRoute, "t")] {
        assert_eq!(
            condition_on(&out, kind, "infra", name, "ResolvedRefs"),
            sr("False", "RefNotPermitted"),
            "{kind}"
        );
    }
    w.reference_grants.push(grant(
        "apps",
        "grpc-and-tls",
        json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "GRPCRoute",
                         "namespace": "infra"},
                        {"group": "gateway.networking.k8s.io", "kind": "TLSRoute",
                         "namespace": "infra"}],
               "to": [{"group": "", "kind": "Service"}]}),
    ));
    let out = compute(&w, CONTROLLER);
    for (kind, name) in [(Kind::GrpcRoute, "g"), (Kind::TlsRoute, "t")] {
        assert_eq!(
            condition_on(&out, kind, "infra", name, "ResolvedRefs"),
            sr("True", "ResolvedRefs"),
            "{kind}"
        );
    }
}

fn to_web() -> serde_json::Value {
    json!([{"name": "gw", "sectionName": "web"}])
}

#[test]
fn grpc_backends_and_mirrors_resolve_like_http_ones() {
    let mut w = base();
    w.grpc_routes = vec![grpc_route(
        "infra",
        "g",
        json!({"parentRefs": to_web(), "rules": [{
            "backendRefs": [{"name": "web", "port": 8080}],
            "filters": [{"type": "RequestMirror",
                         "requestMirror": {"backendRef": {"name": "gone", "port": 1}}}]}]}),
    )];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        condition_on(&out, Kind::GrpcRoute, "infra", "g", "ResolvedRefs"),
        sr("False", "BackendNotFound")
    );
}

#[test]
fn a_tls_listener_that_terminates_is_accepted_and_takes_tls_routes() {
    let mut w = world();
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([http("web", 80),
               {"name": "term", "port": 443, "protocol": "TLS", "tls": {"mode": "Terminate",
                "certificateRefs": [{"name": "cert"}]}}]),
    )];
    let out = compute(&w, CONTROLLER);
    // Terminate is served since listeners' certificates are checked (`listener.rs`).
    assert_eq!(
        listener_condition(&out, "infra", "gw", "term", "Accepted"),
        tsr("Accepted", "True", "Accepted")
    );
    assert_eq!(
        listener_condition(&out, "infra", "gw", "term", "ResolvedRefs"),
        tsr("ResolvedRefs", "True", "ResolvedRefs")
    );
}

#[test]
fn allowed_kinds_a_listener_cannot_take_are_invalid_route_kinds() {
    let mut w = world();
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([{"name": "web", "port": 80, "protocol": "HTTP",
                "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}, {"kind": "TLSRoute"}]}}]),
    )];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        listener_condition(&out, "infra", "gw", "web", "ResolvedRefs"),
        tsr("ResolvedRefs", "False", "InvalidRouteKinds")
    );
    let kinds: Vec<String> = listener(&out, "infra", "gw", "web")
        .supported_kinds
        .iter()
        .flatten()
        .map(|k| k.kind.clone())
        .collect();
    assert_eq!(kinds, ["GRPCRoute"]);
}

/// An HTTPRoute or GRPCRoute in `infra` on listener `web`, created at `created` seconds.
fn contender(
    kind: &str,
    name: &str,
    created: u32,
    hostnames: serde_json::Value,
) -> serde_json::Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": kind,
        "metadata": {"namespace": "infra", "name": name, "generation": 1,
                     "creationTimestamp": format!("2026-01-01T00:00:{created:02}Z")},
        "spec": {"parentRefs": [{"name": "gw", "sectionName": "web"}], "hostnames": hostnames,
                 "rules": [{"backendRefs": [{"name": "web", "port": 8080}]}]}
    })
}

#[test]
fn an_http_and_a_grpc_route_with_a_common_hostname_on_one_listener_admit_only_the_older() {
    use std::sync::Arc;
    let mut w = base();
    let http = |name, created, hosts| {
        Arc::new(serde_json::from_value(contender("HTTPRoute", name, created, hosts)).expect("r"))
    };
    let grpc = |name, created, hosts| {
        Arc::new(serde_json::from_value(contender("GRPCRoute", name, created, hosts)).expect("r"))
    };
    w.http_routes = vec![
        // Older than the GRPCRoute on the same host: it wins.
        http("h-old", 1, json!(["a.example.com"])),
        // Newer, and its wildcard meets the GRPCRoute's host... but that one lost: no contest.
        http("h-new", 5, json!(["*.example.com"])),
        // Another host: no contest at all.
        http("h-other", 9, json!(["other.test"])),
    ];
    w.grpc_routes = vec![
        grpc("g", 3, json!(["a.example.com"])),
        // Same age as h-same, first by name ("g-same" < "h-same"): it wins.
        grpc("g-same", 7, json!(["same.test"])),
    ];
    w.http_routes.push(http("h-same", 7, json!(["same.test"])));
    let out = compute(&w, CONTROLLER);
    let accepted = |kind, name| condition_on(&out, kind, "infra", name, "Accepted");
    assert_eq!(accepted(Kind::HttpRoute, "h-old"), sr("True", "Accepted"));
    assert_eq!(
        accepted(Kind::GrpcRoute, "g"),
        sr("False", "NotAllowedByListeners")
    );
    assert_eq!(accepted(Kind::HttpRoute, "h-new"), sr("True", "Accepted"));
    assert_eq!(accepted(Kind::HttpRoute, "h-other"), sr("True", "Accepted"));
    assert_eq!(accepted(Kind::GrpcRoute, "g-same"), sr("True", "Accepted"));
    assert_eq!(
        accepted(Kind::HttpRoute, "h-same"),
        sr("False", "NotAllowedByListeners")
    );
    // The listener counts the admitted ones only: h-old, h-new, h-other, g-same.
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 4);
}

#[test]
fn an_http_route_refused_for_an_unsupported_value_keeps_no_grpc_route_from_its_listener() {
    use std::sync::Arc;
    let mut w = base();
    let mut older = contender("HTTPRoute", "h", 1, json!(["a.example.com"]));
    older["spec"]["rules"][0]["retry"] = json!({"backoff": "1s"});
    w.http_routes = vec![Arc::new(serde_json::from_value(older).expect("r"))];
    w.grpc_routes = vec![Arc::new(
        serde_json::from_value(contender("GRPCRoute", "g", 2, json!(["a.example.com"])))
            .expect("r"),
    )];
    let out = compute(&w, CONTROLLER);
    let accepted = |kind, name| condition_on(&out, kind, "infra", name, "Accepted");
    // Exactly one of the two is accepted: the HTTPRoute is refused whatever happens.
    assert_eq!(
        accepted(Kind::HttpRoute, "h"),
        sr("False", "UnsupportedValue")
    );
    assert_eq!(accepted(Kind::GrpcRoute, "g"), sr("True", "Accepted"));
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 2);
}

#[test]
fn a_contest_is_decided_again_when_the_winner_goes() {
    use std::sync::Arc;
    let mut w = base();
    let h = Arc::new(
        serde_json::from_value(contender("HTTPRoute", "h", 1, json!(["a.example.com"])))
            .expect("r"),
    );
    let g = Arc::new(
        serde_json::from_value(contender("GRPCRoute", "g", 2, json!(["a.example.com"])))
            .expect("r"),
    );
    w.http_routes = vec![h];
    w.grpc_routes = vec![g];
    let mut c = super::super::Computation::new(CONTROLLER);
    let first = c.run(&w);
    let status = |u: &super::super::Update| match u.desired.get(&crate::key::ObjectKey::namespaced(
        Kind::GrpcRoute,
        "infra",
        "g",
    )) {
        Some(crate::desired::Desired::Route { parents, .. }) => {
            summary(&parents[0].conditions)[0].clone()
        }
        other => panic!("no GRPCRoute status: {other:?}"),
    };
    assert_eq!(
        status(&first),
        tsr("Accepted", "False", "NotAllowedByListeners")
    );
    // The HTTPRoute goes: the GRPCRoute, unchanged itself, is admitted and written again.
    w.http_routes.clear();
    let second = c.run(&w);
    assert_eq!(status(&second), tsr("Accepted", "True", "Accepted"));
    let gw = second.desired.get(&crate::key::ObjectKey::namespaced(
        Kind::Gateway,
        "infra",
        "gw",
    ));
    match gw {
        Some(crate::desired::Desired::Gateway { listeners, .. }) => {
            assert_eq!(listeners[0].attached_routes, 1, "the GRPCRoute counts now");
        }
        other => panic!("no Gateway status: {other:?}"),
    }
}
