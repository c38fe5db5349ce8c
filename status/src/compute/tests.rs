//! The computation as a whole: every kind together, and a `Computation` that remembers.

use serde_json::json;

use super::fixtures::*;
use super::*;
use crate::key::Kind;
use crate::secret::Content;

/// A class, two Gateways, routes in two namespaces, Services, a grant: a bit of everything.
pub(super) fn busy_world() -> World {
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
        json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                         "namespace": "infra"}],
               "to": [{"group": "", "kind": "Service"}]}),
    )];
    w.http_routes = vec![
        route(
            "infra",
            "a",
            route_spec(
                json!([{"name": "gw"}, {"name": "gw2", "namespace": "apps"}]),
                json!([{"name": "web", "port": 8080},
                       {"name": "api", "namespace": "apps", "port": 80}]),
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

/// What a caller holds after taking in one run.
pub(super) fn take_in(held: &mut BTreeMap<ObjectKey, Desired>, update: Update) {
    for key in &update.removed {
        held.remove(key);
    }
    held.extend(update.desired);
}

/// The route `name` of `w`, replaced by `f`'s new object.
fn replace_route(w: &mut World, name: &str, f: impl FnOnce(&str) -> Arc<StoredHttpRoute>) {
    let at = w
        .http_routes
        .iter()
        .position(|r| r.metadata.name.as_deref() == Some(name))
        .expect("the route exists");
    let namespace = w.http_routes[at]
        .metadata
        .namespace
        .clone()
        .unwrap_or_default();
    w.http_routes[at] = f(&namespace);
}

pub(super) type Step = (&'static str, Box<dyn Fn(&mut World)>);

/// A step that deletes HTTPRoute `name`.
fn delete_route(name: &'static str) -> Box<dyn Fn(&mut World)> {
    Box::new(move |w| {
        w.http_routes
            .retain(|r| r.metadata.name.as_deref() != Some(name))
    })
}

/// Changes of every kind, one after the other, starting from [`busy_world`].
pub(super) fn steps() -> Vec<Step> {
    let policy = |service: &str| -> Arc<BackendTlsPolicy> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
                "metadata": {"namespace": "apps", "name": "tls", "generation": 1},
                "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": service}],
                         "validation": {"wellKnownCACertificates": "System",
                                        "hostname": "api.example.com"}}}))
            .expect("policy"),
        )
    };
    vec![
        ("nothing", Box::new(|_| {})),
        (
            "the grant is deleted",
            Box::new(|w| w.reference_grants.clear()),
        ),
        (
            "a route's backend changes",
            Box::new(|w| {
                replace_route(w, "a", |ns| {
                    route(
                        ns,
                        "a",
                        route_spec(
                            json!([{"name": "gw"}]),
                            json!([{"name": "gone", "port": 1}]),
                        ),
                    )
                })
            }),
        ),
        (
            "a route moves to another Gateway",
            Box::new(|w| {
                replace_route(w, "b", |ns| {
                    route(ns, "b", route_spec(json!([{"name": "gw2"}]), json!([])))
                })
            }),
        ),
        (
            "an identical copy of a route (a status write of someone else's)",
            Box::new(|w| {
                let copy = w_route(w, "a");
                replace_route(w, "a", |_| Arc::new((*copy).clone()));
            }),
        ),
        ("a route is deleted", delete_route("b")),
        (
            "routes are added",
            Box::new(|w| {
                for i in 0..5 {
                    w.http_routes.push(route(
                        "apps",
                        &format!("n{i}"),
                        route_spec(
                            json!([{"name": "gw", "namespace": "infra"}, {"name": "gw2"}]),
                            json!([{"name": "api", "port": 80}]),
                        ),
                    ));
                }
            }),
        ),
        (
            "a route that is no longer ours keeps our stale entry to clear",
            Box::new(|w| {
                w.http_routes.push(route_with_status(
                    "infra",
                    "stale",
                    route_spec(json!([{"name": "their-gw"}]), json!([])),
                    json!({"parents": [{"controllerName": CONTROLLER,
                           "parentRef": {"name": "gw"}, "conditions": []}]}),
                ))
            }),
        ),
        (
            "the stale entry is gone",
            Box::new(|w| {
                replace_route(w, "stale", |ns| {
                    route(
                        ns,
                        "stale",
                        route_spec(json!([{"name": "their-gw"}]), json!([])),
                    )
                })
            }),
        ),
        (
            "the missing Service appears",
            Box::new(|w| w.services.push(service("infra", "gone", &[1]))),
        ),
        (
            "a listener takes routes by namespace label",
            Box::new(|w| {
                w.gateways[1] = gateway(
                    "apps",
                    "gw2",
                    json!([{"name": "web", "port": 80, "protocol": "HTTP",
                            "allowedRoutes": {"namespaces": {"from": "Selector",
                                "selector": {"matchLabels": {"team": "b"}}}}}]),
                );
            }),
        ),
        (
            "the namespaces' labels change",
            Box::new(|w| {
                w.namespaces = vec![
                    namespace("infra", json!({})),
                    namespace("apps", json!({"team": "b"})),
                ];
            }),
        ),
        (
            "a Gateway takes ListenerSets, and a route names one that is not there yet",
            Box::new(|w| {
                w.gateways[0] = gateway_with(
                    "infra",
                    "gw",
                    json!({"gatewayClassName": CLASS,
                           "listeners": [http_from_all("web", 80), http("alt", 8080)],
                           "allowedListeners": {"namespaces": {"from": "All"}}}),
                );
                w.http_routes.push(route(
                    "apps",
                    "via-set",
                    route_spec(json!([{"kind": "ListenerSet", "name": "extra"}]), json!([])),
                ));
            }),
        ),
        (
            "the ListenerSet appears",
            Box::new(|w| {
                w.listener_sets.push(Arc::new(
                    serde_json::from_value(json!({
                        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                        "metadata": {"namespace": "apps", "name": "extra", "generation": 1},
                        "spec": {"parentRef": {"name": "gw", "namespace": "infra"},
                                 "listeners": [{"name": "x", "port": 8081, "protocol": "HTTP"}]}}))
                    .expect("ListenerSet"),
                ))
            }),
        ),
        (
            "a TLS Secret is replaced (a renewal)",
            Box::new(|w| w.secrets = vec![secret("infra", "cert", Content::Usable)]),
        ),
        (
            "a BackendTLSPolicy appears on a reached Service",
            Box::new(move |w| w.backend_tls_policies.push(policy("api"))),
        ),
        (
            "a route reaching the policy's Service is deleted",
            delete_route("n0"),
        ),
        (
            "a Gateway of its own for an HTTPRoute and a GRPCRoute that want one hostname",
            Box::new(|w| {
                w.gateways
                    .push(gateway("solo", "gw3", json!([http("web", 80)])));
                let spec = json!({"parentRefs": [{"name": "gw3"}],
                                  "hostnames": ["c.example.com"]});
                w.http_routes.push(route("solo", "h-c", spec.clone()));
                w.grpc_routes.push(grpc_route("solo", "g-c", spec));
            }),
        ),
        (
            "the GRPCRoute, first by name, goes: the HTTPRoute, unchanged, is admitted",
            Box::new(|w| {
                w.grpc_routes
                    .retain(|r| r.metadata.name.as_deref() != Some("g-c"))
            }),
        ),
        (
            "a GRPCRoute and a TLSRoute appear",
            Box::new(|w| {
                w.grpc_routes.push(grpc_route(
                    "infra",
                    "g",
                    json!({"parentRefs": [{"name": "gw"}]}),
                ));
                w.tls_routes.push(tls_route(
                    "infra",
                    "t",
                    json!({"parentRefs": [{"name": "gw"}], "hostnames": ["a.example.com"],
                           "rules": [{"backendRefs": [{"name": "web", "port": 8080}]}]}),
                ));
            }),
        ),
        (
            "a Gateway is deleted",
            Box::new(|w| {
                w.gateways.remove(0);
            }),
        ),
        (
            "the bundle version changes",
            Box::new(|w| w.bundle_version = Some("v0.1.0".into())),
        ),
        (
            "the class is no longer ours",
            Box::new(|w| w.gateway_classes = vec![class(CLASS, "example.com/other")]),
        ),
        ("everything is deleted", Box::new(|w| *w = World::default())),
    ]
}

/// The keys whose status in `held` differs from a whole computation of `w`'s (the statuses are
/// long).
pub(super) fn differing(held: &BTreeMap<ObjectKey, Desired>, w: &World) -> Vec<String> {
    let whole = compute(w, CONTROLLER);
    let keys: BTreeSet<&ObjectKey> = held.keys().chain(whole.keys()).collect();
    let keys = keys.into_iter().filter(|k| held.get(*k) != whole.get(*k));
    keys.map(ToString::to_string).collect()
}

#[test]
fn a_computation_that_remembers_gives_what_a_whole_one_gives_after_every_change() {
    let mut w = busy_world();
    let mut computation = Computation::new(CONTROLLER);
    let mut held = BTreeMap::new();
    take_in(&mut held, computation.run(&w));
    assert_eq!(differing(&held, &w), Vec::<String>::new(), "at first");
    for (what, step) in steps() {
        step(&mut w);
        take_in(&mut held, computation.run(&w));
        assert_eq!(differing(&held, &w), Vec::<String>::new(), "after: {what}");
    }
    assert!(held.is_empty());
}

fn w_route(w: &World, name: &str) -> Arc<StoredHttpRoute> {
    w.http_routes
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(name))
        .cloned()
        .expect("the route exists")
}

#[test]
fn a_run_computes_again_only_the_routes_whose_object_changed() {
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
    w.services = vec![service("infra", "web", &[80])];
    w.http_routes = (0..100)
        .map(|i| {
            route(
                "infra",
                &format!("r{i}"),
                route_spec(
                    json!([{"name": "gw"}]),
                    json!([{"name": "web", "port": 80}]),
                ),
            )
        })
        .collect();
    let mut computation = Computation::new(CONTROLLER);
    assert_eq!(computation.run(&w).routes_computed, 100);

    let again = computation.run(&w);
    assert_eq!(again.routes_computed, 0);
    assert!(again.removed.is_empty());
    assert!(
        again.desired.keys().all(|k| !k.kind.is_route()),
        "{:?}",
        again.desired.keys()
    );
    assert_eq!(
        listener(&again.desired, "infra", "gw", "web").attached_routes,
        100,
        "routes not computed again still count"
    );

    // A new object for one route (as after a status write): that route only.
    w.http_routes[7] = Arc::new((*w.http_routes[7]).clone());
    let one = computation.run(&w);
    assert_eq!(one.routes_computed, 1);
    let route_keys: Vec<String> = one
        .desired
        .keys()
        .filter(|k| k.kind.is_route())
        .map(ToString::to_string)
        .collect();
    assert_eq!(route_keys, ["HTTPRoute infra/r7"]);

    // Anything a route's status reads changed: every route.
    w.services = vec![service("infra", "web", &[80])];
    assert_eq!(computation.run(&w).routes_computed, 100);
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
    let mut no_generation = (*gateway(
        "infra",
        "gw",
        json!([
            http("web", 0),
            {"name": "", "port": -1, "protocol": ""},
            {"name": "odd", "port": 70000, "protocol": "HTTP", "hostname": "*",
             "allowedRoutes": {"namespaces": {"from": "Selector"}, "kinds": []}},
            {"name": "tls", "port": 443, "protocol": "HTTPS",
             "tls": {"certificateRefs": [{"name": ""}]}},
        ]),
    ))
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
        json!({"parentRefs": [{"name": "gw", "sectionName": ""}, {"name": ""},
                              {"name": "gw", "namespace": ""}],
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

/// The parents of route `infra/name` in `desired`.
fn shared_parents(
    desired: &BTreeMap<ObjectKey, Desired>,
    name: &str,
) -> Arc<[crate::desired::RouteParentStatus]> {
    match desired.get(&ObjectKey::namespaced(Kind::HttpRoute, "infra", name)) {
        Some(Desired::Route { parents, .. }) => parents.clone(),
        other => panic!("route {name}: {other:?}"),
    }
}

#[test]
fn routes_with_equal_statuses_share_one_copy_until_none_holds_it() {
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
    w.services = vec![service("infra", "web", &[80])];
    let ok = route_spec(
        json!([{"name": "gw"}]),
        json!([{"name": "web", "port": 80}]),
    );
    let broken = route_spec(
        json!([{"name": "gw"}]),
        json!([{"name": "none", "port": 80}]),
    );
    w.http_routes = vec![
        route("infra", "a", ok.clone()),
        route("infra", "b", ok.clone()),
        route("infra", "c", broken),
    ];
    let mut computation = Computation::new(CONTROLLER);
    let first = computation.run(&w).desired;
    let (a, b, c) = (
        shared_parents(&first, "a"),
        shared_parents(&first, "b"),
        shared_parents(&first, "c"),
    );
    assert!(Arc::ptr_eq(&a, &b), "equal statuses share one copy");
    assert!(
        !Arc::ptr_eq(&a, &c) && a[..] != c[..],
        "different ones do not"
    );
    // A route added later gets the copy the earlier routes hold.
    w.http_routes.push(route("infra", "d", ok));
    let second = computation.run(&w).desired;
    assert!(Arc::ptr_eq(&a, &shared_parents(&second, "d")));
    // Once nobody holds a status any more, the computation lets go of its copy too.
    drop((first, second, a, b, c));
    w.http_routes.clear();
    computation.run(&w);
    computation.run(&w);
    assert_eq!(computation.shared.len(), 0);
}
