//! ListenerSet rules, one test per reason (upstream v1.5.1 conformance `listenerset-*`).

use std::sync::Arc;

use gateway_api::gateways::GatewayStatusListeners;
use gateway_api::listenersets::ListenerSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{json, Value};

use super::super::fixtures::*;
use super::super::{compute, Served};
use super::*;

/// A ListenerSet in `namespace` on Gateway infra/gw, created at `created` (seconds).
fn set(namespace: &str, name: &str, created: i64, listeners: Value) -> Arc<ListenerSet> {
    let at = Timestamp::from_second(1_700_000_000 + created).expect("valid time");
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
            "metadata": {"namespace": namespace, "name": name, "generation": 3,
                         "creationTimestamp": at.to_string()},
            "spec": {"parentRef": {"name": "gw", "namespace": "infra"}, "listeners": listeners}
        }))
        .expect("a valid ListenerSet"),
    )
}

fn gateway_allowing(from: &str, listeners: Value) -> Arc<gateway_api::gateways::Gateway> {
    gateway_with(
        "infra",
        "gw",
        json!({"gatewayClassName": CLASS, "listeners": listeners,
               "allowedListeners": {"namespaces": {"from": from}}}),
    )
}

fn set_status<'a>(
    out: &'a Out,
    namespace: &str,
    name: &str,
) -> (&'a [Condition], &'a [GatewayStatusListeners]) {
    match out.get(&ObjectKey::namespaced(Kind::ListenerSet, namespace, name)) {
        Some(Desired::ListenerSet {
            conditions,
            listeners,
            ..
        }) => (conditions, listeners),
        other => panic!("no ListenerSet status for {namespace}/{name}: {other:?}"),
    }
}

fn set_conditions(out: &Out, namespace: &str, name: &str) -> Vec<(String, String, String)> {
    summary(set_status(out, namespace, name).0)
}

fn attached_sets(out: &Out) -> Option<i32> {
    match out.get(&ObjectKey::namespaced(Kind::Gateway, "infra", "gw")) {
        Some(Desired::Gateway {
            attached_listener_sets,
            ..
        }) => *attached_listener_sets,
        other => panic!("no Gateway status: {other:?}"),
    }
}

#[test]
fn without_allowed_listeners_a_listener_set_is_not_allowed_and_the_count_is_left_alone() {
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
    w.listener_sets = vec![set("infra", "ls", 0, json!([http("extra", 8080)]))];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        set_conditions(&out, "infra", "ls"),
        [
            tsr("Accepted", "False", "NotAllowed"),
            tsr("Programmed", "False", "NotAllowed")
        ]
    );
    assert_eq!(attached_sets(&out), None);
}

#[test]
fn allowed_listeners_same_admits_only_the_gateways_namespace() {
    let mut w = world();
    w.gateways = vec![gateway_allowing("Same", json!([http("web", 80)]))];
    w.listener_sets = vec![
        set("infra", "here", 0, json!([http("a", 8080)])),
        set("apps", "there", 1, json!([http("b", 8081)])),
    ];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        set_conditions(&out, "infra", "here"),
        [
            tsr("Accepted", "True", "Accepted"),
            tsr("Programmed", "True", "Programmed")
        ]
    );
    assert_eq!(
        set_conditions(&out, "apps", "there")[0],
        tsr("Accepted", "False", "NotAllowed")
    );
    assert_eq!(attached_sets(&out), Some(1));
}

#[test]
fn allowed_listeners_selector_matches_the_listener_sets_namespace_labels() {
    let mut w = world();
    w.gateways = vec![gateway_with(
        "infra",
        "gw",
        json!({"gatewayClassName": CLASS, "listeners": [http("web", 80)],
               "allowedListeners": {"namespaces": {"from": "Selector",
                   "selector": {"matchLabels": {"team": "a"}}}}}),
    )];
    w.namespaces.push(namespace("apps", json!({"team": "a"})));
    w.namespaces.push(namespace("other", json!({"team": "b"})));
    w.listener_sets = vec![
        set("apps", "yes", 0, json!([http("a", 8080)])),
        set("other", "no", 1, json!([http("b", 8081)])),
    ];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        set_conditions(&out, "apps", "yes")[0],
        tsr("Accepted", "True", "Accepted")
    );
    assert_eq!(
        set_conditions(&out, "other", "no")[0],
        tsr("Accepted", "False", "NotAllowed")
    );
}

#[test]
fn a_listener_set_of_a_gateway_that_is_not_accepted_is_parent_not_accepted() {
    let mut w = world();
    w.gateways = vec![gateway_with(
        "infra",
        "gw",
        json!({"gatewayClassName": CLASS, "listeners": [http("web", 80)],
               "addresses": [{"type": "IPAddress", "value": "10.0.0.1"}],
               "allowedListeners": {"namespaces": {"from": "All"}}}),
    )];
    w.listener_sets = vec![set("apps", "ls", 0, json!([http("a", 8080)]))];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        set_conditions(&out, "apps", "ls"),
        [
            tsr("Accepted", "False", "ParentNotAccepted"),
            tsr("Programmed", "False", "ParentNotAccepted")
        ]
    );
    assert_eq!(attached_sets(&out), Some(0));
}

#[test]
fn conflicts_give_the_gateway_then_the_older_listener_set_precedence() {
    let mut w = world();
    w.gateways = vec![gateway_allowing("All", json!([http("web", 80)]))];
    w.listener_sets = vec![
        // Newer, but its only listener conflicts with the older set's: ListenersNotValid.
        set("apps", "new", 5, json!([http("b", 8080)])),
        // A protocol conflict with the Gateway's listener, and a listener of its own.
        set(
            "apps",
            "old",
            1,
            json!([{"name": "tls", "port": 80, "protocol": "TLS",
                    "tls": {"mode": "Passthrough"}}, http("a", 8080)]),
        ),
    ];
    let out = compute(&w, CONTROLLER);
    let (conditions, listeners) = set_status(&out, "apps", "old");
    assert_eq!(
        summary(conditions)[0],
        tsr("Accepted", "True", "ListenersNotValid")
    );
    assert_eq!(
        summary(&listeners[0].conditions)[3],
        tsr("Conflicted", "True", "ProtocolConflict")
    );
    assert_eq!(
        summary(&listeners[1].conditions)[3],
        tsr("Conflicted", "False", "NoConflicts")
    );
    let (conditions, listeners) = set_status(&out, "apps", "new");
    assert_eq!(
        summary(conditions),
        [
            tsr("Accepted", "False", "ListenersNotValid"),
            tsr("Programmed", "False", "ListenersNotValid")
        ]
    );
    assert_eq!(
        summary(&listeners[0].conditions)[3],
        tsr("Conflicted", "True", "HostnameConflict")
    );
    // The Gateway's own listener stays as it was.
    assert_eq!(
        listener_condition(&out, "infra", "gw", "web", "Conflicted"),
        tsr("Conflicted", "False", "NoConflicts")
    );
    assert_eq!(attached_sets(&out), Some(1));
}

#[test]
fn routes_attach_to_a_listener_set_only_through_parent_ref_kind_listener_set() {
    let mut w = world();
    w.gateways = vec![gateway_allowing("All", json!([http("web", 80)]))];
    w.listener_sets = vec![set(
        "apps",
        "ls",
        0,
        json!([{"name": "extra", "port": 8080, "protocol": "HTTP",
                "allowedRoutes": {"namespaces": {"from": "All"}}}]),
    )];
    w.http_routes = vec![
        route(
            "apps",
            "via-set",
            route_spec(
                json!([{"kind": "ListenerSet", "name": "ls", "sectionName": "extra"}]),
                json!([]),
            ),
        ),
        route(
            "infra",
            "via-gateway",
            route_spec(json!([{"name": "gw"}]), json!([])),
        ),
        route(
            "apps",
            "wrong-section",
            route_spec(
                json!([{"kind": "ListenerSet", "name": "ls", "sectionName": "web"}]),
                json!([]),
            ),
        ),
    ];
    let out = compute(&w, CONTROLLER);
    let (_, listeners) = set_status(&out, "apps", "ls");
    assert_eq!(listeners[0].attached_routes, 1);
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 1);
    assert_eq!(
        route_condition(&out, "apps", "via-set", "Accepted"),
        sr("True", "Accepted")
    );
    assert_eq!(
        route_parents(&out, "apps", "via-set")[0]
            .parent_ref
            .kind
            .as_deref(),
        Some("ListenerSet")
    );
    assert_eq!(
        route_condition(&out, "apps", "wrong-section", "Accepted"),
        sr("False", "NoMatchingParent")
    );
}

#[test]
fn a_listener_set_of_someone_elses_gateway_gets_nothing() {
    let mut w = world();
    w.gateway_classes.push(class("theirs", "example.com/other"));
    w.gateways = vec![gateway_with(
        "infra",
        "gw",
        json!({"gatewayClassName": "theirs", "listeners": [http("web", 80)],
               "allowedListeners": {"namespaces": {"from": "All"}}}),
    )];
    w.listener_sets = vec![set("apps", "ls", 0, json!([http("a", 8080)]))];
    let out = compute(&w, CONTROLLER);
    assert!(!out.keys().any(|k| k.kind == Kind::ListenerSet), "{out:?}");
}

#[test]
fn same_in_a_listener_sets_allowed_routes_means_the_listener_sets_namespace() {
    let mut w = world();
    w.gateways = vec![gateway_allowing("All", json!([http("web", 80)]))];
    w.listener_sets = vec![set("apps", "ls", 0, json!([http("extra", 8080)]))];
    let to_set = json!([{"kind": "ListenerSet", "name": "ls", "namespace": "apps"}]);
    w.http_routes = vec![
        route("apps", "local", route_spec(to_set.clone(), json!([]))),
        route("infra", "from-gateway-ns", route_spec(to_set, json!([]))),
    ];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        route_condition(&out, "apps", "local", "Accepted"),
        sr("True", "Accepted")
    );
    assert_eq!(
        route_condition(&out, "infra", "from-gateway-ns", "Accepted"),
        sr("False", "NotAllowedByListeners")
    );
    assert_eq!(set_status(&out, "apps", "ls").1[0].attached_routes, 1);
}

#[test]
fn messages_about_a_listener_set_parent_name_the_listener_set() {
    let mut w = world();
    // Not allowed (the Gateway has no allowedListeners): the set is not accepted.
    w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
    w.listener_sets = vec![set("infra", "ls", 0, json!([http("extra", 8080)]))];
    w.http_routes = vec![route(
        "infra",
        "r",
        route_spec(json!([{"kind": "ListenerSet", "name": "ls"}]), json!([])),
    )];
    let out = compute(&w, CONTROLLER);
    let message = route_message(&out, "infra", "r", "Accepted");
    assert!(
        message.contains("ListenerSet infra/ls is not accepted"),
        "{message}"
    );
    let programmed = set_status(&out, "infra", "ls").1[0]
        .conditions
        .iter()
        .find(|c| c.type_ == "Programmed")
        .expect("Programmed")
        .message
        .clone();
    assert!(
        programmed.contains("the ListenerSet is not accepted"),
        "{programmed}"
    );
}

#[test]
fn a_listener_the_gateway_knocks_out_leaves_its_siblings_on_that_port_alone() {
    // Upstream v1.7.0 conformance, ListenerSetProtocolConflict: a TCP listener on the Gateway's
    // HTTP port is conflicted by the Gateway's listener, and takes no part in its HTTP siblings'
    // conflicts on the same port.
    let mut w = world();
    w.served = Served {
        tcp_route: true,
        udp_route: true,
    };
    w.gateways = vec![gateway_allowing(
        "All",
        json!([{"name": "web", "port": 80, "protocol": "HTTP", "hostname": "gw.example.com"}]),
    )];
    w.listener_sets = vec![set(
        "apps",
        "mixed",
        1,
        json!([
            {"name": "a", "port": 80, "protocol": "HTTP", "hostname": "a.example.com"},
            {"name": "tcp", "port": 80, "protocol": "TCP"},
            {"name": "c", "port": 80, "protocol": "HTTP", "hostname": "c.example.com"},
        ]),
    )];
    let out = compute(&w, CONTROLLER);
    let (conditions, listeners) = set_status(&out, "apps", "mixed");
    assert_eq!(summary(conditions)[0].1, "True", "{conditions:?}");
    for (i, want) in [
        (0, "NoConflicts"),
        (2, "NoConflicts"),
        (1, "ProtocolConflict"),
    ] {
        let c = summary(&listeners[i].conditions);
        assert_eq!(c[3].2, want, "{}: {c:?}", listeners[i].name);
    }
    // A conflicted listener's Programmed says its conflict.
    assert_eq!(
        summary(&listeners[1].conditions)[1],
        tsr("Programmed", "False", "ProtocolConflict")
    );
    assert_eq!(attached_sets(&out), Some(1));
}

#[test]
fn a_listener_set_whose_only_listener_is_not_valid_is_not_accepted() {
    // Upstream v1.7.0 conformance, ListenerSetReferenceGrant: a certificate in another namespace
    // with no ReferenceGrant.
    let mut w = world();
    w.gateways = vec![gateway_allowing("All", json!([http("web", 80)]))];
    w.listener_sets = vec![set(
        "apps",
        "no-grant",
        1,
        json!([{"name": "https", "port": 443, "protocol": "HTTPS",
                "tls": {"certificateRefs": [{"name": "cert", "namespace": "infra"}]}}]),
    )];
    let out = compute(&w, CONTROLLER);
    let (conditions, listeners) = set_status(&out, "apps", "no-grant");
    assert_eq!(
        summary(conditions),
        [
            tsr("Accepted", "False", "ListenersNotValid"),
            tsr("Programmed", "False", "ListenersNotValid")
        ]
    );
    assert_eq!(
        summary(&listeners[0].conditions)[2],
        tsr("ResolvedRefs", "False", "RefNotPermitted")
    );
    assert_eq!(attached_sets(&out), Some(0));
}
