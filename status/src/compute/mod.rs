//! Computing each kind's desired status from what the watches see; pure functions, no I/O.
//!
//! Every replica runs this, leader or not, so a new leader has the latest statuses at hand.
//!
//! One pass per kind, each building on the last: GatewayClasses decide which Gateways are ours,
//! Gateways' listeners decide where routes attach, and routes' attachments fill in the
//! listeners' `attachedRoutes`. Gateways, Services, Secrets, ReferenceGrants and namespaces are
//! looked up through hash indexes built once, so a computation visits each object about once (a
//! route's parentRef also visits the listeners of the one Gateway it names). Objects without a
//! name (or a namespace, where one is due) are skipped; a missing `metadata.generation` counts
//! as 0. Nothing here panics on any input.
//!
//! HTTPRoutes, GRPCRoutes and TLSRoutes go through one route engine (`route.rs`); each kind
//! only describes what the engine reads of it. The engine also tells which of our Gateways
//! reach which Services, and BackendTLSPolicies take their ancestors from that (`policy.rs`).
//!
//! ListenerSets (`listenerset.rs`) come between the Gateways and the routes: their listeners
//! are judged after the Gateway's, and routes attach to them through parentRefs of kind
//! ListenerSet.
//!
//! Deliberately not covered: the listener `Conflicted` reason `ListenerConflict` (upstream
//! v1.5.1 `apis/v1/listenerset_types.go` gives it no rule of its own; ProtocolConflict and
//! HostnameConflict are used, as the conformance tests expect), the Gateway-level `tls` block and its
//! `ResolvedRefs` condition, certificate checks beyond parsing (expiry, SANs against the
//! listener's hostname, `OverlappingCertificates`), `OverlappingTLSConfig` on TLS listeners,
//! the validation of route matches and filters (`UnsupportedValue`, `IncompatibleFilters`,
//! `PartiallyInvalid`), and hostname conflicts between a GRPCRoute and an HTTPRoute on one
//! listener.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::listenersets::ListenerSet;
use gateway_api::referencegrants::ReferenceGrant;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::api::core::v1::{Namespace, Service};

use crate::configmap::CaBundle;
use crate::desired::Desired;
use crate::key::ObjectKey;
use crate::secret::TlsSecret;

mod gateway;
mod gatewayclass;
mod hostname;
mod index;
mod listener;
mod listenerset;
mod policy;
mod reason;
mod refs;
mod route;
mod selector;
mod verdict;

#[cfg(test)]
mod fixtures;

/// Everything the computation reads: the watched objects as the reflectors hold them.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// All GatewayClasses (ours are picked by `spec.controllerName`).
    pub gateway_classes: Vec<Arc<GatewayClass>>,
    /// All Gateways.
    pub gateways: Vec<Arc<Gateway>>,
    /// All HTTPRoutes.
    pub http_routes: Vec<Arc<HttpRoute>>,
    /// All GRPCRoutes (none while their CRD is not installed).
    pub grpc_routes: Vec<Arc<GrpcRoute>>,
    /// All TLSRoutes (none while their CRD is not installed).
    pub tls_routes: Vec<Arc<TlsRoute>>,
    /// All Services (backendRefs resolve against them).
    pub services: Vec<Arc<Service>>,
    /// All ListenerSets (none while their CRD is not installed).
    pub listener_sets: Vec<Arc<ListenerSet>>,
    /// All ReferenceGrants (cross-namespace backendRefs and certificateRefs need one).
    pub reference_grants: Vec<Arc<ReferenceGrant>>,
    /// All Namespaces (listeners' `allowedRoutes.namespaces.selector` matches their labels).
    pub namespaces: Vec<Arc<Namespace>>,
    /// All Secrets, reduced to what listeners' certificateRefs need.
    pub secrets: Vec<Arc<TlsSecret>>,
    /// All BackendTLSPolicies (none while their CRD is not installed).
    pub backend_tls_policies: Vec<Arc<BackendTlsPolicy>>,
    /// All ConfigMaps, reduced to what BackendTLSPolicies' caCertificateRefs need.
    pub config_maps: Vec<Arc<CaBundle>>,
    /// The `gateway.networking.k8s.io/bundle-version` annotation of the installed GatewayClass
    /// CRD, when it could be read.
    pub bundle_version: Option<String>,
}

/// Every status this controller wants, keyed by object.
pub fn compute(world: &World, controller_name: &str) -> BTreeMap<ObjectKey, Desired> {
    let mut out = BTreeMap::new();
    let index = index::Index::new(world);
    let classes = gatewayclass::compute(world, controller_name, &mut out);
    let prepared = listenerset::prepare(world);
    let mut gateways = gateway::analyse(world, &classes, &index);
    let mut sets = listenerset::analyse(&prepared, &mut gateways, &index);
    let reach = route::compute(
        world,
        controller_name,
        &mut gateways,
        &mut sets,
        &index,
        &mut out,
    );
    policy::compute(world, controller_name, &reach, &index, &mut out);
    gateway::emit(gateways, &mut out);
    listenerset::emit(sets, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::fixtures::*;
    use super::*;
    use crate::key::Kind;

    /// A class, two Gateways, routes in two namespaces, Services, a grant: a bit of everything.
    fn busy_world() -> World {
        let mut w = world();
        w.gateway_classes.push(class("theirs", "example.com/other"));
        w.gateways = vec![
            gateway(
                "infra",
                "gw",
                json!([http_from_all("web", 80), http("alt", 8080)]),
            ),
            gateway("apps", "gw2", json!([http("web", 80)])),
            gateway_with(
                "infra",
                "their-gw",
                json!({"gatewayClassName": "theirs", "listeners": [http("web", 80)]}),
            ),
        ];
        w.services = vec![
            service("infra", "web", &[8080]),
            service("apps", "api", &[80]),
        ];
        w.reference_grants = vec![grant(
            "apps",
            "allow",
            json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "infra"}],
                   "to": [{"group": "", "kind": "Service"}]}),
        )];
        w.http_routes = vec![
            route(
                "infra",
                "a",
                route_spec(
                    json!([{"name": "gw"}, {"name": "gw2", "namespace": "apps"}]),
                    json!([{"name": "web", "port": 8080}, {"name": "api", "namespace": "apps", "port": 80}]),
                ),
            ),
            route(
                "apps",
                "b",
                route_spec(
                    json!([{"name": "gw", "namespace": "infra"}, {"name": "gw2"}]),
                    json!([{"name": "nope", "port": 1}]),
                ),
            ),
            route(
                "infra",
                "c",
                route_spec(json!([{"name": "their-gw"}]), json!([])),
            ),
        ];
        w
    }

    #[test]
    fn a_class_gateway_and_route_of_ours_produce_exactly_their_statuses() {
        let mut w = world();
        w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
        w.services = vec![service("infra", "web", &[8080])];
        w.http_routes = vec![route(
            "infra",
            "r",
            route_spec(
                json!([{"name": "gw"}]),
                json!([{"name": "web", "port": 8080}]),
            ),
        )];
        let out = compute(&w, CONTROLLER);
        let keys: Vec<ObjectKey> = out.keys().cloned().collect();
        assert_eq!(
            keys,
            vec![
                ObjectKey::cluster(Kind::GatewayClass, CLASS),
                ObjectKey::namespaced(Kind::Gateway, "infra", "gw"),
                ObjectKey::namespaced(Kind::HttpRoute, "infra", "r"),
            ]
        );
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Accepted"),
            tsr("Accepted", "True", "Accepted")
        );
        assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 1);
        assert_eq!(
            route_condition(&out, "infra", "r", "Accepted"),
            sr("True", "Accepted")
        );
        assert_eq!(
            route_condition(&out, "infra", "r", "ResolvedRefs"),
            sr("True", "ResolvedRefs")
        );
    }

    #[test]
    fn a_busy_world_gets_the_statuses_each_object_deserves() {
        let out = compute(&busy_world(), CONTROLLER);
        let a = route_parents(&out, "infra", "a");
        assert_eq!(a.len(), 2);
        // gw admits routes from all namespaces; gw2 (in apps) only from apps.
        assert_eq!(
            summary(&a[0].conditions)[0],
            tsr("Accepted", "True", "Accepted")
        );
        assert_eq!(
            summary(&a[1].conditions)[0],
            tsr("Accepted", "False", "NotAllowedByListeners")
        );
        assert_eq!(
            summary(&a[0].conditions)[1],
            tsr("ResolvedRefs", "True", "ResolvedRefs")
        );
        let b = route_parents(&out, "apps", "b");
        assert_eq!(
            summary(&b[0].conditions)[0],
            tsr("Accepted", "True", "Accepted")
        );
        assert_eq!(
            summary(&b[1].conditions)[0],
            tsr("Accepted", "True", "Accepted")
        );
        assert_eq!(
            summary(&b[1].conditions)[1],
            tsr("ResolvedRefs", "False", "BackendNotFound")
        );
        assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 2);
        // `alt` admits only routes from infra.
        assert_eq!(listener(&out, "infra", "gw", "alt").attached_routes, 1);
        assert_eq!(listener(&out, "apps", "gw2", "web").attached_routes, 1);
        assert!(!out.contains_key(&ObjectKey::namespaced(Kind::HttpRoute, "infra", "c")));
        assert!(!out.contains_key(&ObjectKey::namespaced(Kind::Gateway, "infra", "their-gw")));
    }

    #[test]
    fn the_output_does_not_depend_on_the_order_of_the_inputs() {
        let w = busy_world();
        let mut reversed = w.clone();
        reversed.gateway_classes.reverse();
        reversed.gateways.reverse();
        reversed.http_routes.reverse();
        reversed.services.reverse();
        reversed.reference_grants.reverse();
        reversed.namespaces.reverse();
        let out = compute(&w, CONTROLLER);
        assert_eq!(out, compute(&reversed, CONTROLLER));
        assert_eq!(out, compute(&w, CONTROLLER));
    }

    #[test]
    fn objects_lacking_names_namespaces_or_generations_do_not_panic() {
        use std::sync::Arc;

        let mut w = world();
        let nameless_class = {
            let mut c = (*class("x", CONTROLLER)).clone();
            c.metadata.name = None;
            c.metadata.generation = None;
            Arc::new(c)
        };
        w.gateway_classes.push(nameless_class);
        let mut no_generation = (*gateway("infra", "gw", json!([
            http("web", 0),
            {"name": "", "port": -1, "protocol": ""},
            {"name": "odd", "port": 70000, "protocol": "HTTP", "hostname": "*",
             "allowedRoutes": {"namespaces": {"from": "Selector"}, "kinds": []}},
            {"name": "tls", "port": 443, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": ""}]}},
        ])))
        .clone();
        no_generation.metadata.generation = None;
        let mut no_namespace = (*gateway("infra", "lost", json!([]))).clone();
        no_namespace.metadata.namespace = None;
        w.gateways = vec![Arc::new(no_generation), Arc::new(no_namespace)];
        let mut nameless_route =
            (*route("infra", "x", json!({"parentRefs": [{"name": "gw"}]}))).clone();
        nameless_route.metadata.name = None;
        let mut route_without_generation = (*route(
            "infra",
            "r",
            json!({"parentRefs": [{"name": "gw", "sectionName": ""}, {"name": ""}, {"name": "gw", "namespace": ""}],
                   "hostnames": ["", "*"],
                   "rules": [{"backendRefs": [{"name": "", "port": 0}]}, {}]}),
        ))
        .clone();
        route_without_generation.metadata.generation = None;
        w.http_routes = vec![
            Arc::new(nameless_route),
            Arc::new(route_without_generation),
            route("infra", "empty", json!({})),
        ];
        let mut nameless_namespace = (*namespace("x", json!({}))).clone();
        nameless_namespace.metadata.name = None;
        w.namespaces.push(Arc::new(nameless_namespace));
        let mut homeless_service = (*service("infra", "web", &[80])).clone();
        homeless_service.metadata.namespace = None;
        w.services = vec![Arc::new(homeless_service)];
        let mut homeless_grant = (*grant("apps", "g", json!({"from": [], "to": []}))).clone();
        homeless_grant.metadata.namespace = None;
        w.reference_grants = vec![Arc::new(homeless_grant)];

        let out = compute(&w, CONTROLLER);
        let keys: Vec<String> = out.keys().map(ToString::to_string).collect();
        assert_eq!(
            keys,
            ["GatewayClass ours", "Gateway infra/gw", "HTTPRoute infra/r"]
        );
        assert_eq!(
            out[&ObjectKey::namespaced(Kind::Gateway, "infra", "gw")].generation(),
            0
        );
        let r = &out[&ObjectKey::namespaced(Kind::HttpRoute, "infra", "r")];
        assert_eq!(r.generation(), 0);
        let Desired::Route { parents, .. } = r else {
            panic!("not a route: {r:?}");
        };
        assert!(parents
            .iter()
            .flat_map(|p| &p.conditions)
            .all(|c| c.observed_generation == Some(0)));
    }

    #[test]
    fn many_routes_on_one_gateway_are_all_counted() {
        let mut w = world();
        w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
        w.services = (0..100)
            .map(|i| service("infra", &format!("s{i}"), &[80]))
            .collect();
        w.http_routes = (0..3000)
            .map(|i| {
                route(
                    "infra",
                    &format!("r{i}"),
                    route_spec(
                        json!([{"name": "gw"}]),
                        json!([{"name": format!("s{}", i % 100), "port": 80}]),
                    ),
                )
            })
            .collect();
        let out = compute(&w, CONTROLLER);
        assert_eq!(out.len(), 3002);
        assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 3000);
    }
}
