use serde_json::{json, Value};

use super::super::fixtures::*;
use super::super::{compute, World};
use super::*;

/// Gateway `infra/gw` (listener `web`, port 80, routes from `infra`) and Service
/// `infra/web` on port 8080.
fn base() -> World {
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
    w.services = vec![service("infra", "web", &[8080])];
    w
}

fn to_gw() -> Value {
    json!([{"name": "gw"}])
}

fn with_route(mut w: World, namespace: &str, spec: Value) -> Out {
    w.http_routes = vec![route(namespace, "r", spec)];
    compute(&w, CONTROLLER)
}

#[test]
fn a_valid_route_is_accepted_with_resolved_refs_and_its_parent_ref_as_written() {
    let out = with_route(
        base(),
        "infra",
        route_spec(to_gw(), json!([{"name": "web", "port": 8080}])),
    );
    let Some(Desired::Route {
        generation,
        parents,
    }) = out.get(&ObjectKey::namespaced(Kind::HttpRoute, "infra", "r"))
    else {
        panic!("no HTTPRoute status: {out:?}");
    };
    assert_eq!(*generation, ROUTE_GENERATION);
    assert_eq!(parents.len(), 1);
    let p = &parents[0];
    assert_eq!(p.controller_name, CONTROLLER);
    assert_eq!(
        p.parent_ref,
        HttpRouteStatusParentsParentRef {
            name: "gw".into(),
            ..Default::default()
        }
    );
    assert_eq!(
        summary(&p.conditions),
        vec![
            tsr("Accepted", "True", "Accepted"),
            tsr("ResolvedRefs", "True", "ResolvedRefs"),
        ]
    );
    assert!(p
        .conditions
        .iter()
        .all(|c| c.observed_generation == Some(ROUTE_GENERATION)));
}

#[test]
fn a_route_from_a_namespace_the_listener_does_not_allow_is_not_allowed_by_listeners() {
    let out = with_route(
        base(),
        "apps",
        route_spec(json!([{"name": "gw", "namespace": "infra"}]), json!([])),
    );
    assert_eq!(
        route_condition(&out, "apps", "r", "Accepted"),
        sr("False", "NotAllowedByListeners")
    );
    assert!(route_message(&out, "apps", "r", "Accepted").contains("namespace apps"));
}

#[test]
fn a_listener_that_admits_no_http_routes_is_not_allowed_by_listeners() {
    let mut w = base();
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([
            http("web", 80),
            {"name": "tls", "port": 443, "protocol": "TLS", "tls": {"mode": "Passthrough"},
             "allowedRoutes": {"kinds": [{"kind": "TLSRoute"}]}},
            {"name": "grpc", "port": 81, "protocol": "HTTP",
             "allowedRoutes": {"kinds": [{"kind": "GRPCRoute"}]}},
        ]),
    )];
    for section in ["tls", "grpc"] {
        let out = with_route(
            w.clone(),
            "infra",
            route_spec(json!([{"name": "gw", "sectionName": section}]), json!([])),
        );
        assert_eq!(
            route_condition(&out, "infra", "r", "Accepted"),
            sr("False", "NotAllowedByListeners"),
            "{section}"
        );
        assert_eq!(
            route_message(&out, "infra", "r", "Accepted"),
            "no matching listener allows HTTPRoutes"
        );
        assert_eq!(listener(&out, "infra", "gw", section).attached_routes, 0);
    }
}

#[test]
fn a_gateway_that_is_not_accepted_accepts_no_route() {
    let mut w = base();
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([{"name": "udp", "port": 53, "protocol": "UDP"}]),
    )];
    let out = with_route(w, "infra", route_spec(to_gw(), json!([])));
    assert_eq!(
        route_condition(&out, "infra", "r", "Accepted"),
        sr("False", "NoMatchingParent")
    );
    assert_eq!(
        route_message(&out, "infra", "r", "Accepted"),
        "Gateway infra/gw is not accepted"
    );
}

#[test]
fn a_namespace_selector_admits_exactly_the_matching_namespaces() {
    let mut w = base();
    w.namespaces.push(namespace("other", json!({"team": "b"})));
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([{"name": "web", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {
            "from": "Selector",
            "selector": {"matchLabels": {"team": "a"},
                         "matchExpressions": [{"key": "team", "operator": "Exists"}]}}}}]),
    )];
    let spec = route_spec(json!([{"name": "gw", "namespace": "infra"}]), json!([]));
    w.http_routes = vec![
        route("apps", "r", spec.clone()),
        route("other", "r", spec.clone()),
        route("infra", "r", spec.clone()),
        route("unknown", "r", spec),
    ];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        route_condition(&out, "apps", "r", "Accepted"),
        sr("True", "Accepted")
    );
    for ns in ["other", "infra", "unknown"] {
        assert_eq!(
            route_condition(&out, ns, "r", "Accepted"),
            sr("False", "NotAllowedByListeners"),
            "{ns}"
        );
    }
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 1);
}

#[test]
fn a_route_to_another_namespaces_gateway_attaches_when_the_listener_allows_all() {
    let mut w = base();
    w.gateways = vec![gateway("infra", "gw", json!([http_from_all("web", 80)]))];
    let out = with_route(
        w,
        "apps",
        route_spec(json!([{"name": "gw", "namespace": "infra"}]), json!([])),
    );
    assert_eq!(
        route_condition(&out, "apps", "r", "Accepted"),
        sr("True", "Accepted")
    );
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 1);
}

#[test]
fn a_section_name_or_port_that_matches_no_listener_is_no_matching_parent() {
    for parent in [
        json!({"name": "gw", "sectionName": "nope"}),
        json!({"name": "gw", "port": 8080}),
        json!({"name": "gw", "sectionName": "web", "port": 8080}),
    ] {
        let out = with_route(base(), "infra", route_spec(json!([parent]), json!([])));
        assert_eq!(
            route_condition(&out, "infra", "r", "Accepted"),
            sr("False", "NoMatchingParent"),
            "{parent}"
        );
        assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 0);
    }
    let out = with_route(
        base(),
        "infra",
        route_spec(
            json!([{"name": "gw", "sectionName": "web", "port": 80}]),
            json!([]),
        ),
    );
    assert_eq!(
        route_condition(&out, "infra", "r", "Accepted"),
        sr("True", "Accepted")
    );
}

#[test]
fn hostnames_that_match_no_listener_hostname_are_no_matching_listener_hostname() {
    let mut w = base();
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([{"name": "web", "port": 80, "protocol": "HTTP", "hostname": "*.example.com"}]),
    )];
    let spec = |hostnames: Value| json!({"parentRefs": [{"name": "gw"}], "hostnames": hostnames});
    let out = with_route(
        w.clone(),
        "infra",
        spec(json!(["example.com", "foo.example.net"])),
    );
    assert_eq!(
        route_condition(&out, "infra", "r", "Accepted"),
        sr("False", "NoMatchingListenerHostname")
    );
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 0);
    let out = with_route(w, "infra", spec(json!(["example.com", "a.b.example.com"])));
    assert_eq!(
        route_condition(&out, "infra", "r", "Accepted"),
        sr("True", "Accepted")
    );
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 1);
}

#[test]
fn a_missing_service_or_port_is_backend_not_found() {
    for (backend, needle) in [
        (
            json!({"name": "nope", "port": 8080}),
            "infra/nope: Service not found",
        ),
        (
            json!({"name": "web", "port": 9999}),
            "infra/web: Service has no port 9999",
        ),
        (json!({"name": "web"}), "infra/web: port is required"),
    ] {
        let out = with_route(base(), "infra", route_spec(to_gw(), json!([backend])));
        assert_eq!(
            route_condition(&out, "infra", "r", "ResolvedRefs"),
            sr("False", "BackendNotFound"),
            "{backend}"
        );
        // Unresolved backends do not make the route unaccepted.
        assert_eq!(
            route_condition(&out, "infra", "r", "Accepted"),
            sr("True", "Accepted")
        );
        let message = route_message(&out, "infra", "r", "ResolvedRefs");
        assert!(message.contains(needle), "{message}");
    }
}

#[test]
fn a_cross_namespace_backend_needs_a_reference_grant_to_services() {
    let mut w = base();
    w.services.push(service("apps", "api", &[80]));
    let spec = route_spec(
        to_gw(),
        json!([{"name": "api", "namespace": "apps", "port": 80}]),
    );
    let out = with_route(w.clone(), "infra", spec.clone());
    assert_eq!(
        route_condition(&out, "infra", "r", "ResolvedRefs"),
        sr("False", "RefNotPermitted")
    );
    assert!(route_message(&out, "infra", "r", "ResolvedRefs").contains("apps/api"));

    let from_routes =
        json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "infra"}]);
    // Grants that do not match: another name, another source kind.
    w.reference_grants = vec![
        grant(
            "apps",
            "other-name",
            json!({"from": from_routes,
            "to": [{"group": "", "kind": "Service", "name": "db"}]}),
        ),
        grant(
            "apps",
            "other-kind",
            json!({
            "from": [{"group": "gateway.networking.k8s.io", "kind": "GRPCRoute",
                      "namespace": "infra"}],
            "to": [{"group": "", "kind": "Service"}]}),
        ),
        // The right grant in the wrong namespace.
        grant(
            "infra",
            "wrong-namespace",
            json!({"from": from_routes,
            "to": [{"group": "", "kind": "Service"}]}),
        ),
    ];
    let out = with_route(w.clone(), "infra", spec.clone());
    assert_eq!(
        route_condition(&out, "infra", "r", "ResolvedRefs"),
        sr("False", "RefNotPermitted")
    );

    w.reference_grants.push(grant(
        "apps",
        "allow",
        json!({"from": from_routes, "to": [{"group": "", "kind": "Service"}]}),
    ));
    let out = with_route(w, "infra", spec);
    assert_eq!(
        route_condition(&out, "infra", "r", "ResolvedRefs"),
        sr("True", "ResolvedRefs")
    );
}

#[test]
fn a_backend_of_another_kind_or_group_is_invalid_kind() {
    for backend in [
        json!({"kind": "ServiceImport", "group": "multicluster.x-k8s.io", "name": "web",
               "port": 8080}),
        json!({"kind": "Pod", "name": "web", "port": 8080}),
        json!({"group": "core", "name": "web", "port": 8080}),
    ] {
        let out = with_route(base(), "infra", route_spec(to_gw(), json!([backend])));
        assert_eq!(
            route_condition(&out, "infra", "r", "ResolvedRefs"),
            sr("False", "InvalidKind"),
            "{backend}"
        );
    }
}

#[test]
fn invalid_kind_outranks_other_problems_whatever_their_order() {
    let spec = json!({"parentRefs": [{"name": "gw"}], "rules": [
        {"backendRefs": [{"name": "missing", "port": 80}]},
        {"backendRefs": [{"name": "api", "namespace": "apps", "port": 80},
                         {"kind": "Pod", "name": "p1"}, {"kind": "Pod", "name": "p2"}]},
    ]});
    let out = with_route(base(), "infra", spec);
    assert_eq!(
        route_condition(&out, "infra", "r", "ResolvedRefs"),
        sr("False", "InvalidKind")
    );
    let message = route_message(&out, "infra", "r", "ResolvedRefs");
    assert!(
        message.starts_with("backendRef infra/p1: Pod is not supported"),
        "{message}"
    );
    assert!(message.ends_with("(and 3 more problems)"), "{message}");
}

#[test]
fn request_mirror_backends_are_resolved_too() {
    let spec = json!({"parentRefs": [{"name": "gw"}], "rules": [{
        "backendRefs": [{"name": "web", "port": 8080}],
        "filters": [{"type": "RequestMirror",
                     "requestMirror": {"backendRef": {"name": "shadow", "port": 80}}}]}]});
    let out = with_route(base(), "infra", spec);
    assert_eq!(
        route_condition(&out, "infra", "r", "ResolvedRefs"),
        sr("False", "BackendNotFound")
    );
    assert!(route_message(&out, "infra", "r", "ResolvedRefs").contains("infra/shadow"));
}

#[test]
fn a_route_that_no_longer_targets_our_gateways_gets_its_entries_of_ours_removed() {
    let mut w = base();
    let entry = |controller: &str| {
        json!({"controllerName": controller, "parentRef": {"name": "gw"},
               "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                               "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}]})
    };
    let elsewhere = json!({"parentRefs": [{"name": "not-ours"}]});
    w.http_routes = vec![
        route_with_status(
            "infra",
            "stale",
            elsewhere.clone(),
            json!({"parents": [entry(CONTROLLER), entry("example.com/other")]}),
        ),
        route_with_status(
            "infra",
            "theirs",
            elsewhere.clone(),
            json!({"parents": [entry("example.com/other")]}),
        ),
        route("infra", "unrelated", elsewhere),
    ];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        out.get(&ObjectKey::namespaced(Kind::HttpRoute, "infra", "stale")),
        Some(&Desired::Route {
            generation: ROUTE_GENERATION,
            parents: vec![].into()
        })
    );
    assert!(!out.contains_key(&ObjectKey::namespaced(Kind::HttpRoute, "infra", "theirs")));
    assert!(!out.contains_key(&ObjectKey::namespaced(
        Kind::HttpRoute,
        "infra",
        "unrelated"
    )));
}

#[test]
fn a_route_to_another_controllers_gateway_or_a_non_gateway_parent_gets_nothing() {
    let mut w = base();
    w.gateway_classes.push(class("theirs", "example.com/other"));
    w.gateways.push(gateway_with(
        "infra",
        "their-gw",
        json!({"gatewayClassName": "theirs", "listeners": [http("web", 80)]}),
    ));
    w.http_routes = vec![
        route(
            "infra",
            "a",
            route_spec(json!([{"name": "their-gw"}]), json!([])),
        ),
        route(
            "infra",
            "b",
            route_spec(
                json!([{"name": "gw", "kind": "Service", "group": ""}]),
                json!([]),
            ),
        ),
        route(
            "infra",
            "c",
            route_spec(json!([{"name": "gw", "group": "example.com"}]), json!([])),
        ),
    ];
    let out = compute(&w, CONTROLLER);
    for name in ["a", "b", "c"] {
        assert!(
            !out.contains_key(&ObjectKey::namespaced(Kind::HttpRoute, "infra", name)),
            "{name}"
        );
    }
}

#[test]
fn identical_parent_refs_are_reported_once_and_at_most_32_entries() {
    let mut w = base();
    let listeners: Vec<Value> = (0..40).map(|i| http(&format!("l{i}"), 1000 + i)).collect();
    w.gateways = vec![gateway("infra", "gw", json!(listeners))];
    let mut refs = vec![
        json!({"name": "gw", "sectionName": "l0"}),
        json!({"name": "gw", "sectionName": "l0", "namespace": "infra",
               "group": "gateway.networking.k8s.io", "kind": "Gateway"}),
    ];
    refs.extend((1..40).map(|i| json!({"name": "gw", "sectionName": format!("l{i}")})));
    let out = with_route(w, "infra", route_spec(json!(refs), json!([])));
    let parents = route_parents(&out, "infra", "r");
    assert_eq!(parents.len(), 32);
    let sections: Vec<&str> = parents
        .iter()
        .map(|p| p.parent_ref.section_name.as_deref().unwrap_or_default())
        .collect();
    let expected: Vec<String> = (0..32).map(|i| format!("l{i}")).collect();
    assert_eq!(sections, expected);
    // The first spelling is the one reported, with group and kind left as written.
    assert_eq!(parents[0].parent_ref.group, None);
    assert_eq!(listener(&out, "infra", "gw", "l31").attached_routes, 1);
    assert_eq!(listener(&out, "infra", "gw", "l32").attached_routes, 0);
}

#[test]
fn a_rule_that_sets_retry_backoff_is_an_unsupported_value_but_still_attached() {
    // v1.7.0 `apis/v1/httproute_types.go`, `HTTPRouteRetry.Backoff`: an implementation that does
    // not back off "MUST set the Accepted Condition for the Route to `status: False` with a
    // Reason of `UnsupportedValue` when this field is set".
    let mut spec = route_spec(to_gw(), json!([{"name": "web", "port": 8080}]));
    spec["rules"]
        .as_array_mut()
        .expect("rules")
        .push(json!({"backendRefs": [{"name": "web", "port": 8080}],
                     "retry": {"codes": [503], "attempts": 2, "backoff": "100ms"}}));
    let out = with_route(base(), "infra", spec);
    assert_eq!(
        route_condition(&out, "infra", "r", "Accepted"),
        sr("False", "UnsupportedValue")
    );
    let message = route_message(&out, "infra", "r", "Accepted");
    assert!(
        message.contains("rule 1") && message.contains("retry.backoff"),
        "{message}"
    );
    // Refs are judged as ever, and the listener counts the route: attachment depends only on
    // the listener and the parentRef (`ListenerStatus.AttachedRoutes`).
    assert_eq!(
        route_condition(&out, "infra", "r", "ResolvedRefs"),
        sr("True", "ResolvedRefs")
    );
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 1);
}

#[test]
fn retry_codes_and_attempts_alone_leave_the_route_accepted() {
    // Extended, and upstream asks no status of an implementation without them: not claimed
    // (`gatewayclass.rs`), and the route is accepted as any other.
    let mut spec = route_spec(to_gw(), json!([{"name": "web", "port": 8080}]));
    spec["rules"][0]["retry"] = json!({"codes": [500, 502, 503, 504], "attempts": 3});
    let out = with_route(base(), "infra", spec);
    assert_eq!(
        route_condition(&out, "infra", "r", "Accepted"),
        sr("True", "Accepted")
    );
}

#[test]
fn a_route_that_cannot_attach_says_so_before_an_unsupported_value() {
    let mut spec = route_spec(json!([{"name": "gw", "sectionName": "nope"}]), json!([]));
    spec["rules"] = json!([{"retry": {"backoff": "1s"}}]);
    let out = with_route(base(), "infra", spec);
    assert_eq!(
        route_condition(&out, "infra", "r", "Accepted"),
        sr("False", "NoMatchingParent")
    );
}
