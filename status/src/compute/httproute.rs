//! HTTPRoutes: one `status.parents` entry per parentRef to one of our Gateways, with `Accepted`
//! and `ResolvedRefs`, and the attachments the Gateways' listeners count.
//!
//! `Accepted` for one parentRef, first match wins:
//! 1. the Gateway is not accepted → False/NoMatchingParent (of the spec's reasons the closest:
//!    the Gateway offers nothing to attach to; the message says why);
//! 2. no listener matches `sectionName`/`port` → False/NoMatchingParent;
//! 3. no matching listener allows the route's kind and namespace → False/NotAllowedByListeners;
//! 4. no allowing listener's hostname intersects the route's → False/NoMatchingListenerHostname;
//! 5. True/Accepted, attached to every listener that passed 4.
//!
//! Attachment depends only on the listener's `allowedRoutes`, hostname and the parentRef, not on
//! the listener's own conditions, as the spec's `attachedRoutes` text requires.

use std::collections::{BTreeMap, HashSet};

use gateway_api::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteStatusParents, HttpRouteStatusParentsParentRef,
};

use super::gateway::{GatewayView, Gateways};
use super::hostname;
use super::index::Index;
use super::reason;
use super::refs::{self, non_empty, BackendRef, Problem, GATEWAY_GROUP};
use super::verdict::Verdict;
use super::World;
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};

/// `status.parents` holds at most this many entries.
const MAX_PARENTS: usize = 32;

/// Which problem `ResolvedRefs` reports when backendRefs have several: a kind this controller
/// cannot route to (only the route's author can fix it, and no grant or Service would help),
/// then a missing ReferenceGrant (another namespace's owner must act), then a missing Service
/// or port (often just not created yet). Within a reason, the first in spec order: rules in
/// order; in a rule, each backendRef followed by its own RequestMirror filters, then the rule's
/// RequestMirror filters.
const RESOLVED_REFS_PRECEDENCE: [&str; 3] = [
    reason::INVALID_KIND,
    reason::REF_NOT_PERMITTED,
    reason::BACKEND_NOT_FOUND,
];

/// Adds the desired status of each HTTPRoute related to us to `out`, and counts attachments
/// into `gateways`.
pub(crate) fn compute<'w>(
    world: &'w World,
    controller_name: &str,
    gateways: &mut Gateways<'w>,
    index: &Index<'_>,
    out: &mut BTreeMap<ObjectKey, Desired>,
) {
    for route in &world.http_routes {
        let (Some(namespace), Some(name)) = (
            route.metadata.namespace.as_deref(),
            route.metadata.name.as_deref(),
        ) else {
            continue;
        };
        let generation = route.metadata.generation.unwrap_or(0);
        let mut attachments: Vec<((&'w str, &'w str), usize)> = vec![];
        let parents = parents(
            route,
            namespace,
            controller_name,
            generation,
            gateways,
            index,
            &mut attachments,
        );
        // A route attached to one listener through two parentRefs counts once there.
        attachments.sort_unstable();
        attachments.dedup();
        for (gateway, listener) in attachments {
            if let Some(count) = gateways
                .get_mut(&gateway)
                .and_then(|g| g.attached_routes.get_mut(listener))
            {
                *count = count.saturating_add(1);
            }
        }
        let has_stale_entries = route.status.as_ref().is_some_and(|s| {
            s.parents
                .iter()
                .any(|p| p.controller_name == controller_name)
        });
        if !parents.is_empty() || has_stale_entries {
            out.insert(
                ObjectKey::namespaced(Kind::HttpRoute, namespace, name),
                Desired::HttpRoute {
                    generation,
                    parents,
                },
            );
        }
    }
}

/// Our `status.parents` entries for one route, recording its attachments.
fn parents<'w>(
    route: &'w HttpRoute,
    namespace: &'w str,
    controller_name: &str,
    generation: i64,
    gateways: &Gateways<'w>,
    index: &Index<'_>,
    attachments: &mut Vec<((&'w str, &'w str), usize)>,
) -> Vec<HttpRouteStatusParents> {
    let hostnames = route.spec.hostnames.as_deref().unwrap_or_default();
    let mut seen = HashSet::new();
    let mut resolved_refs: Option<Verdict> = None;
    let mut parents = vec![];
    for parent_ref in route.spec.parent_refs.iter().flatten() {
        if parents.len() == MAX_PARENTS {
            break;
        }
        let Some(target) = gateway_target(parent_ref, namespace) else {
            continue;
        };
        let Some(gateway) = gateways.get(&target) else {
            continue;
        };
        let section = non_empty(parent_ref.section_name.as_deref());
        if !seen.insert((target, section, parent_ref.port)) {
            continue;
        }
        let accepted = match attach(gateway, parent_ref, namespace, hostnames, index) {
            Ok(listeners) => {
                let names: Vec<&str> = listeners
                    .iter()
                    .map(|&i| gateway.listeners[i].spec.name.as_str())
                    .collect();
                attachments.extend(listeners.into_iter().map(|i| (target, i)));
                Verdict::yes(
                    reason::ACCEPTED,
                    format!("accepted by listeners: {}", names.join(", ")),
                )
            }
            Err(verdict) => verdict,
        };
        let resolved = resolved_refs.get_or_insert_with(|| resolve_refs(route, namespace, index));
        parents.push(HttpRouteStatusParents {
            conditions: vec![
                accepted.condition(reason::ACCEPTED, generation),
                resolved.condition(reason::RESOLVED_REFS, generation),
            ],
            controller_name: controller_name.to_string(),
            parent_ref: HttpRouteStatusParentsParentRef {
                group: parent_ref.group.clone(),
                kind: parent_ref.kind.clone(),
                name: parent_ref.name.clone(),
                namespace: parent_ref.namespace.clone(),
                port: parent_ref.port,
                section_name: parent_ref.section_name.clone(),
            },
        });
    }
    parents
}

/// The Gateway a parentRef names, as (namespace, name); `None` for other kinds of parent.
fn gateway_target<'w>(
    parent_ref: &'w HttpRouteParentRefs,
    route_namespace: &'w str,
) -> Option<(&'w str, &'w str)> {
    let group = parent_ref.group.as_deref().unwrap_or(GATEWAY_GROUP);
    let kind = parent_ref.kind.as_deref().unwrap_or("Gateway");
    (group == GATEWAY_GROUP && kind == "Gateway").then(|| {
        (
            non_empty(parent_ref.namespace.as_deref()).unwrap_or(route_namespace),
            parent_ref.name.as_str(),
        )
    })
}

/// The listeners (indices) of `gateway` that accept the route through `parent_ref`, or the
/// `Accepted` False verdict.
fn attach(
    gateway: &GatewayView<'_>,
    parent_ref: &HttpRouteParentRefs,
    route_namespace: &str,
    hostnames: &[String],
    index: &Index<'_>,
) -> Result<Vec<usize>, Verdict> {
    if !gateway.accepted.ok {
        return Err(Verdict::no(
            reason::NO_MATCHING_PARENT,
            format!(
                "Gateway {}/{} is not accepted",
                gateway.namespace, gateway.name
            ),
        ));
    }
    let section = non_empty(parent_ref.section_name.as_deref());
    let port = parent_ref.port;
    let selected: Vec<usize> = (0..gateway.listeners.len())
        .filter(|&i| {
            let spec = gateway.listeners[i].spec;
            section.is_none_or(|s| spec.name == s) && port.is_none_or(|p| spec.port == p)
        })
        .collect();
    if selected.is_empty() {
        let message = match (section, port) {
            (Some(s), Some(p)) => format!("no listener named {s} on port {p}"),
            (Some(s), None) => format!("no listener named {s}"),
            (None, Some(p)) => format!("no listener on port {p}"),
            (None, None) => "the Gateway has no listeners".to_string(),
        };
        return Err(Verdict::no(reason::NO_MATCHING_PARENT, message));
    }
    let allowing: Vec<usize> = selected
        .iter()
        .copied()
        .filter(|&i| {
            let l = &gateway.listeners[i];
            l.admits_http_routes() && l.allows_namespace(gateway.namespace, route_namespace, index)
        })
        .collect();
    if allowing.is_empty() {
        let message = if selected
            .iter()
            .any(|&i| gateway.listeners[i].admits_http_routes())
        {
            format!("no matching listener allows routes from namespace {route_namespace}")
        } else {
            "no matching listener allows HTTPRoutes".to_string()
        };
        return Err(Verdict::no(reason::NOT_ALLOWED_BY_LISTENERS, message));
    }
    let matching: Vec<usize> = allowing
        .into_iter()
        .filter(|&i| {
            hostname::listener_admits(gateway.listeners[i].spec.hostname.as_deref(), hostnames)
        })
        .collect();
    if matching.is_empty() {
        return Err(Verdict::no(
            reason::NO_MATCHING_LISTENER_HOSTNAME,
            "no allowing listener's hostname matches the route's hostnames",
        ));
    }
    Ok(matching)
}

/// The route's `ResolvedRefs`, over every backendRef and RequestMirror backendRef.
fn resolve_refs(route: &HttpRoute, namespace: &str, index: &Index<'_>) -> Verdict {
    let mut problems: Vec<Problem> = vec![];
    let mut check = |r: BackendRef<'_>| {
        if let Err(p) = refs::check_backend(index, namespace, &r) {
            problems.push(p);
        }
    };
    for rule in route.spec.rules.iter().flatten() {
        for b in rule.backend_refs.iter().flatten() {
            check(BackendRef {
                group: b.group.as_deref(),
                kind: b.kind.as_deref(),
                name: &b.name,
                namespace: b.namespace.as_deref(),
                port: b.port,
            });
            for m in b
                .filters
                .iter()
                .flatten()
                .filter_map(|f| f.request_mirror.as_ref())
            {
                let m = &m.backend_ref;
                check(BackendRef {
                    group: m.group.as_deref(),
                    kind: m.kind.as_deref(),
                    name: &m.name,
                    namespace: m.namespace.as_deref(),
                    port: m.port,
                });
            }
        }
        for m in rule
            .filters
            .iter()
            .flatten()
            .filter_map(|f| f.request_mirror.as_ref())
        {
            let m = &m.backend_ref;
            check(BackendRef {
                group: m.group.as_deref(),
                kind: m.kind.as_deref(),
                name: &m.name,
                namespace: m.namespace.as_deref(),
                port: m.port,
            });
        }
    }
    match refs::most_important(&problems, &RESOLVED_REFS_PRECEDENCE) {
        Some(p) => Verdict::no(p.reason, p.message),
        None => Verdict::yes(reason::RESOLVED_REFS, "all references resolved"),
    }
}

#[cfg(test)]
mod tests {
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
        let Some(Desired::HttpRoute {
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
            json!([{"name": "tls", "port": 443, "protocol": "TLS", "tls": {"mode": "Passthrough"}}]),
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
        let spec =
            |hostnames: Value| json!({"parentRefs": [{"name": "gw"}], "hostnames": hostnames});
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

        let from_routes = json!([{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "infra"}]);
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
                "from": [{"group": "gateway.networking.k8s.io", "kind": "GRPCRoute", "namespace": "infra"}],
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
            json!({"kind": "ServiceImport", "group": "multicluster.x-k8s.io", "name": "web", "port": 8080}),
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
            Some(&Desired::HttpRoute {
                generation: ROUTE_GENERATION,
                parents: vec![]
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
}
