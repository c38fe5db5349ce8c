//! BackendTLSPolicy ancestors and their conditions, one spec rule per test.

use std::sync::Arc;

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use serde_json::{json, Value};

use super::super::fixtures::*;
use super::super::{compute, World};
use crate::configmap::CaBundle;
use crate::desired::{Desired, PolicyAncestorStatus};
use crate::key::{Kind, ObjectKey};

/// A BackendTLSPolicy in `apps`, created at `created` (seconds past 2026-01-01T00:00:00Z).
fn policy(name: &str, created: u32, spec: Value) -> Arc<BackendTlsPolicy> {
    policy_with_status(name, created, spec, Value::Null)
}

fn policy_with_status(
    name: &str,
    created: u32,
    spec: Value,
    status: Value,
) -> Arc<BackendTlsPolicy> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "BackendTLSPolicy",
            "metadata": {"namespace": "apps", "name": name, "generation": 5,
                         "creationTimestamp": format!("2026-01-01T00:00:{created:02}Z")},
            "spec": spec,
            "status": status,
        }))
        .expect("policy"),
    )
}

/// A policy spec targeting Service `apps/<service>` (with a sectionName if given), validated
/// by the ConfigMap `ca`.
fn spec(service: &str, section: Option<&str>) -> Value {
    spec_with(
        service,
        section,
        json!({"caCertificateRefs": [
        {"group": "", "kind": "ConfigMap", "name": "ca"}], "hostname": "abc.example.com"}),
    )
}

fn spec_with(service: &str, section: Option<&str>, validation: Value) -> Value {
    let mut target = json!({"group": "", "kind": "Service", "name": service});
    if let Some(s) = section {
        target["sectionName"] = json!(s);
    }
    json!({"targetRefs": [target], "validation": validation})
}

fn ca(name: &str, problem: Option<&'static str>) -> Arc<CaBundle> {
    Arc::new(CaBundle {
        namespace: Some("apps".into()),
        name: Some(name.into()),
        resource_version: Some("1".into()),
        uid: None,
        problem,
    })
}

/// Our Gateways `infra/gw` and `apps/gw2`; an HTTPRoute in `apps` on `infra/gw` to both ports
/// of Service `apps/web` (`a` 443, `b` 444), and one on both to `apps/api`; a usable ConfigMap
/// `apps/ca`.
fn base() -> World {
    let mut w = world();
    w.gateways = vec![
        gateway("infra", "gw", json!([http_from_all("web", 80)])),
        gateway("apps", "gw2", json!([http("web", 80)])),
    ];
    w.services = vec![
        named_service("apps", "web", &[("a", 443), ("b", 444)]),
        service("apps", "api", &[443]),
    ];
    w.http_routes = vec![
        route(
            "apps",
            "to-web",
            route_spec(
                json!([{"name": "gw", "namespace": "infra"}]),
                json!([{"name": "web", "port": 443}, {"name": "web", "port": 444}]),
            ),
        ),
        route(
            "apps",
            "to-api",
            route_spec(
                json!([{"name": "gw", "namespace": "infra"}, {"name": "gw2"}]),
                json!([{"name": "api", "port": 443}]),
            ),
        ),
    ];
    w.config_maps = vec![ca("ca", None)];
    w
}

fn ancestors<'a>(out: &'a Out, name: &str) -> &'a [PolicyAncestorStatus] {
    match out.get(&ObjectKey::namespaced(Kind::BackendTlsPolicy, "apps", name)) {
        Some(Desired::Policy { ancestors, .. }) => ancestors,
        other => panic!("no policy status for {name}: {other:?}"),
    }
}

/// (type, status, reason) of the conditions on the policy's only ancestor.
fn only(out: &Out, name: &str) -> Vec<(String, String, String)> {
    let a = ancestors(out, name);
    assert_eq!(a.len(), 1, "one ancestor expected: {a:?}");
    summary(&a[0].conditions)
}

fn accepted_and_resolved() -> Vec<(String, String, String)> {
    vec![
        tsr("Accepted", "True", "Accepted"),
        tsr("ResolvedRefs", "True", "ResolvedRefs"),
    ]
}

#[test]
fn a_policy_on_a_reached_service_has_each_reaching_gateway_as_an_ancestor() {
    let mut w = base();
    w.backend_tls_policies = vec![
        policy("p-web", 1, spec("web", None)),
        policy("p-api", 1, spec("api", None)),
    ];
    let out = compute(&w, CONTROLLER);
    assert_eq!(only(&out, "p-web"), accepted_and_resolved());
    let web = &ancestors(&out, "p-web")[0];
    assert_eq!(web.controller_name, CONTROLLER);
    assert_eq!(
        web.parent_ref.group.as_deref(),
        Some("gateway.networking.k8s.io")
    );
    assert_eq!(web.parent_ref.kind.as_deref(), Some("Gateway"));
    assert_eq!(web.parent_ref.namespace.as_deref(), Some("infra"));
    assert_eq!(web.parent_ref.name, "gw");
    assert!(web
        .conditions
        .iter()
        .all(|c| c.observed_generation == Some(5)));
    let api: Vec<(&str, &str)> = ancestors(&out, "p-api")
        .iter()
        .map(|a| {
            (
                a.parent_ref.namespace.as_deref().unwrap_or(""),
                a.parent_ref.name.as_str(),
            )
        })
        .collect();
    assert_eq!(api, [("apps", "gw2"), ("infra", "gw")]);
}

#[test]
fn a_policy_no_gateway_of_ours_reaches_gets_no_status_unless_it_has_our_entries() {
    let mut w = base();
    let theirs = json!({"ancestors": [{"ancestorRef": {"name": "x"},
                                       "controllerName": "example.com/other",
                                       "conditions": []}]});
    let ours = json!({"ancestors": [{"ancestorRef": {"name": "gw"}, "controllerName": CONTROLLER,
                                    "conditions": []}]});
    w.backend_tls_policies = vec![
        policy("nobody", 1, spec("unreached", None)),
        policy_with_status("theirs", 1, spec("unreached", None), theirs),
        policy_with_status("stale", 1, spec("unreached", None), ours),
        // Not a Service: nothing this controller reaches.
        policy(
            "not-a-service",
            1,
            json!({"targetRefs": [{"group": "example.com", "kind": "Backend", "name": "web"}],
                   "validation": {"wellKnownCACertificates": "System", "hostname": "a"}}),
        ),
    ];
    let out = compute(&w, CONTROLLER);
    let key = |n| ObjectKey::namespaced(Kind::BackendTlsPolicy, "apps", n);
    assert!(!out.contains_key(&key("nobody")));
    assert!(!out.contains_key(&key("theirs")));
    assert!(!out.contains_key(&key("not-a-service")));
    assert!(
        ancestors(&out, "stale").is_empty(),
        "our stale entry is to be removed"
    );
}

#[test]
fn a_missing_or_malformed_ca_config_map_is_invalid_ca_certificate_ref() {
    let mut w = base();
    w.config_maps.push(ca(
        "bad",
        Some("the ConfigMap has no ca.crt, or it is empty"),
    ));
    let refs = |name: &str| {
        json!({"caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": name}],
                                   "hostname": "abc.example.com"})
    };
    w.backend_tls_policies = vec![
        policy("missing", 1, spec_with("web", Some("a"), refs("nope"))),
        policy("malformed", 1, spec_with("web", Some("b"), refs("bad"))),
    ];
    let out = compute(&w, CONTROLLER);
    for name in ["missing", "malformed"] {
        assert_eq!(
            only(&out, name),
            [
                tsr("Accepted", "False", "NoValidCACertificate"),
                tsr("ResolvedRefs", "False", "InvalidCACertificateRef"),
            ],
            "{name}"
        );
    }
    let message = &ancestors(&out, "malformed")[0].conditions[1].message;
    assert!(
        message.contains("apps/bad") && message.contains("ca.crt"),
        "{message}"
    );
}

#[test]
fn a_ca_reference_of_another_kind_is_invalid_kind_and_outranks_a_missing_config_map() {
    let mut w = base();
    let validation = json!({"caCertificateRefs": [
        {"group": "", "kind": "ConfigMap", "name": "nope"},
        {"group": "", "kind": "Secret", "name": "ca"}], "hostname": "abc.example.com"});
    let one_good = json!({"caCertificateRefs": [
        {"group": "", "kind": "ConfigMap", "name": "ca"},
        {"group": "example.com", "kind": "Bundle", "name": "x"}], "hostname": "abc.example.com"});
    w.backend_tls_policies = vec![
        policy("kinds", 1, spec_with("web", Some("a"), validation)),
        policy("one-good", 1, spec_with("web", Some("b"), one_good)),
    ];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        only(&out, "kinds"),
        [
            tsr("Accepted", "False", "NoValidCACertificate"),
            tsr("ResolvedRefs", "False", "InvalidKind"),
        ]
    );
    // One usable reference keeps the policy accepted; ResolvedRefs still says what is wrong.
    assert_eq!(
        only(&out, "one-good"),
        [
            tsr("Accepted", "True", "Accepted"),
            tsr("ResolvedRefs", "False", "InvalidKind"),
        ]
    );
}

#[test]
fn the_older_policy_on_a_service_section_wins_then_the_first_by_name() {
    let mut w = base();
    w.backend_tls_policies = vec![
        // Same target, no sectionName: the older one wins, whatever the names say.
        policy("b-older", 1, spec("web", None)),
        policy("a-newer", 2, spec("web", None)),
        // Same target and sectionName, same age: the first by name wins.
        policy("same-1", 3, spec("api", Some("https"))),
        policy("same-2", 3, spec("api", Some("https"))),
        // Another sectionName on the same Service is another target: no conflict.
        policy("other-section", 0, spec("api", Some("admin"))),
    ];
    w.services[1] = named_service("apps", "api", &[("https", 443), ("admin", 8443)]);
    w.http_routes.push(route(
        "apps",
        "to-api-admin",
        route_spec(
            json!([{"name": "gw", "namespace": "infra"}]),
            json!([{"name": "api", "port": 8443}]),
        ),
    ));
    let out = compute(&w, CONTROLLER);
    assert_eq!(only(&out, "b-older"), accepted_and_resolved());
    assert_eq!(
        only(&out, "a-newer")[0],
        tsr("Accepted", "False", "Conflicted")
    );
    let conflicted = &ancestors(&out, "a-newer")[0].conditions[0].message;
    assert!(conflicted.contains("apps/b-older"), "{conflicted}");
    for a in ancestors(&out, "same-1") {
        assert_eq!(summary(&a.conditions), accepted_and_resolved());
    }
    for a in ancestors(&out, "same-2") {
        assert_eq!(
            summary(&a.conditions)[0],
            tsr("Accepted", "False", "Conflicted")
        );
        assert_eq!(
            summary(&a.conditions)[1],
            tsr("ResolvedRefs", "True", "ResolvedRefs")
        );
    }
    for a in ancestors(&out, "other-section") {
        assert_eq!(summary(&a.conditions), accepted_and_resolved());
    }
}

#[test]
fn well_known_system_certificates_are_accepted_and_other_sets_are_invalid() {
    let mut w = base();
    let known = |set: &str| json!({"wellKnownCACertificates": set, "hostname": "abc.example.com"});
    w.backend_tls_policies = vec![
        policy("system", 1, spec_with("web", Some("a"), known("System"))),
        policy(
            "custom",
            1,
            spec_with("web", Some("b"), known("example.com/cas")),
        ),
    ];
    let out = compute(&w, CONTROLLER);
    assert_eq!(only(&out, "system"), accepted_and_resolved());
    assert_eq!(
        only(&out, "custom"),
        [
            tsr("Accepted", "False", "Invalid"),
            tsr("ResolvedRefs", "True", "ResolvedRefs"),
        ]
    );
}

#[test]
fn a_reference_from_another_namespace_reaches_the_service_only_with_a_grant() {
    let mut w = base();
    w.gateways
        .push(gateway("infra", "gw3", json!([http_from_all("web", 80)])));
    w.http_routes.push(route(
        "infra",
        "cross",
        route_spec(
            json!([{"name": "gw3"}]),
            json!([{"name": "web", "namespace": "apps", "port": 443}]),
        ),
    ));
    w.backend_tls_policies = vec![policy("p", 1, spec("web", None))];
    let names = |w: &World| -> Vec<String> {
        ancestors(&compute(w, CONTROLLER), "p")
            .iter()
            .map(|a| a.parent_ref.name.clone())
            .collect()
    };
    assert_eq!(names(&w), ["gw"], "no grant: gw3 does not reach apps/web");
    w.reference_grants = vec![grant(
        "apps",
        "allow",
        json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                         "namespace": "infra"}],
               "to": [{"group": "", "kind": "Service"}]}),
    )];
    assert_eq!(names(&w), ["gw", "gw3"]);
}

#[test]
fn only_gateways_that_accepted_the_route_are_ancestors() {
    let mut w = base();
    // gw2 admits routes from apps only through sectionName web; this route names a listener
    // it does not have, so gw2 is not reached.
    w.http_routes.push(route(
        "apps",
        "nowhere",
        route_spec(
            json!([{"name": "gw2", "sectionName": "missing"}]),
            json!([{"name": "web", "port": 443}]),
        ),
    ));
    w.backend_tls_policies = vec![policy("p", 1, spec("web", None))];
    let out = compute(&w, CONTROLLER);
    let names: Vec<&str> = ancestors(&out, "p")
        .iter()
        .map(|a| a.parent_ref.name.as_str())
        .collect();
    assert_eq!(names, ["gw"]);
}

#[test]
fn a_route_attached_through_a_listener_set_makes_the_sets_gateway_the_ancestor() {
    let mut w = world();
    w.gateways = vec![gateway_with(
        "infra",
        "gw",
        json!({"gatewayClassName": CLASS, "listeners": [http("web", 80)],
               "allowedListeners": {"namespaces": {"from": "All"}}}),
    )];
    w.listener_sets = vec![Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
            "metadata": {"namespace": "apps", "name": "ls", "generation": 1},
            "spec": {"parentRef": {"name": "gw", "namespace": "infra"},
                     "listeners": [{"name": "extra", "port": 8080, "protocol": "HTTP"}]}
        }))
        .expect("listener set"),
    )];
    w.services = vec![service("apps", "web", &[443])];
    w.http_routes = vec![route(
        "apps",
        "via-set",
        route_spec(
            json!([{"kind": "ListenerSet", "name": "ls", "sectionName": "extra"}]),
            json!([{"name": "web", "port": 443}]),
        ),
    )];
    w.config_maps = vec![ca("ca", None)];
    w.backend_tls_policies = vec![policy("p-web", 1, spec("web", None))];
    let out = compute(&w, CONTROLLER);
    assert_eq!(only(&out, "p-web"), accepted_and_resolved());
    let a = &ancestors(&out, "p-web")[0].parent_ref;
    assert_eq!(
        (a.kind.as_deref(), a.namespace.as_deref(), a.name.as_str()),
        (Some("Gateway"), Some("infra"), "gw"),
        "the ancestor is the ListenerSet's Gateway, not the ListenerSet"
    );
}

#[test]
fn a_section_name_narrows_the_ancestors_to_gateways_whose_routes_use_that_port() {
    let mut w = base();
    // api: https 443 (reached from gw and gw2), admin 8443 (reached from gw2 only).
    w.services[1] = named_service("apps", "api", &[("https", 443), ("admin", 8443)]);
    w.http_routes.push(route(
        "apps",
        "to-api-admin",
        route_spec(
            json!([{"name": "gw2"}]),
            json!([{"name": "api", "port": 8443}]),
        ),
    ));
    w.backend_tls_policies = vec![
        policy("https", 1, spec("api", Some("https"))),
        policy("admin", 1, spec("api", Some("admin"))),
        policy("whole", 1, spec("api", None)),
    ];
    let out = compute(&w, CONTROLLER);
    let names = |p: &str| -> Vec<String> {
        ancestors(&out, p)
            .iter()
            .map(|a| a.parent_ref.name.clone())
            .collect()
    };
    assert_eq!(names("https"), ["gw2", "gw"], "both reach port 443");
    assert_eq!(names("admin"), ["gw2"], "only gw2 reaches port 8443");
    assert_eq!(names("whole"), ["gw2", "gw"]);
    assert_eq!(only(&out, "admin"), accepted_and_resolved());
}

#[test]
fn a_missing_service_or_port_is_target_not_found_on_the_gateways_naming_the_service() {
    let mut w = base();
    // Routes name apps/gone, which does not exist; apps/web has no port named "admin".
    w.http_routes.push(route(
        "apps",
        "to-gone",
        route_spec(
            json!([{"name": "gw", "namespace": "infra"}]),
            json!([{"name": "gone", "port": 443}]),
        ),
    ));
    w.backend_tls_policies = vec![
        policy("gone", 1, spec("gone", None)),
        policy("no-port", 1, spec("web", Some("admin"))),
    ];
    let out = compute(&w, CONTROLLER);
    for (p, what) in [
        ("gone", "apps/gone does not exist"),
        ("no-port", "no port named admin"),
    ] {
        assert_eq!(
            only(&out, p),
            vec![
                tsr("Accepted", "False", "TargetNotFound"),
                tsr("ResolvedRefs", "True", "ResolvedRefs"),
            ],
            "{p}"
        );
        let message = &ancestors(&out, p)[0].conditions[0].message;
        assert!(message.contains(what), "{message}");
    }
}
