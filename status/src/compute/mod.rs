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

use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// Every status this controller wants, keyed by object: one whole computation.
///
/// A controller that computes again on every change should keep a [`Computation`] instead,
/// which computes again only what changed.
///
/// ```
/// use gateway_leader_status::compute::{compute, World};
///
/// // Nothing watched yet: nothing to write.
/// assert!(compute(&World::default(), "example.com/gateway-controller").is_empty());
/// ```
pub fn compute(world: &World, controller_name: &str) -> BTreeMap<ObjectKey, Desired> {
    Computation::new(controller_name).run(world).desired
}

/// A computation that remembers what each route contributed, so that computing again costs
/// what changed rather than what exists (docs/architecture.md, "Computing what changed").
///
/// A route's status, and what it adds to its parents' `attachedRoutes` and to
/// BackendTLSPolicies' ancestors, depend only on the route itself and on the objects that are
/// not routes that routes read (GatewayClasses, Gateways, ListenerSets, Services, ReferenceGrants,
/// Namespaces, BackendTLSPolicies). So a run computes again only
/// the routes whose object changed, unless one of those other objects changed, in which case
/// it computes every route again. Objects are compared by identity: a watch's store hands out
/// the same `Arc` for an object until the object changes, and the computation holds on to the
/// `Arc`s it compared, so an address is never reused while it is remembered. Everything that
/// is not a route (a few objects, next to the routes) is computed on every run.
///
/// ```
/// use gateway_leader_status::compute::{Computation, World};
///
/// let mut computation = Computation::new("example.com/gateway-controller");
/// let world = World::default();
/// let first = computation.run(&world);
/// assert!(first.desired.is_empty() && first.removed.is_empty());
/// // The same world again: no route is computed again.
/// assert_eq!(computation.run(&world).routes_computed, 0);
/// ```
#[derive(Debug)]
pub struct Computation {
    controller_name: String,
    /// What the remembered contributions were computed under.
    context: Option<Context>,
    http_routes: Memos<HttpRoute>,
    grpc_routes: Memos<GrpcRoute>,
    tls_routes: Memos<TlsRoute>,
    /// Routes per listener, added up from the remembered contributions.
    counts: Counts,
    /// Runs so far.
    runs: u64,
    /// Objects other than routes that got a status on the last run.
    others: BTreeSet<ObjectKey>,
}

/// What one [`Computation::run`] found.
#[derive(Debug, Default)]
pub struct Update {
    /// The desired statuses computed on this run: every object other than a route, and the
    /// routes computed again (new or changed ones, or all after a change of anything else).
    /// An object whose status is not here and not in `removed` keeps the one it had.
    pub desired: BTreeMap<ObjectKey, Desired>,
    /// Objects that had a desired status and no longer have one (deleted, or no longer ours).
    pub removed: Vec<ObjectKey>,
    /// How many routes were computed on this run.
    pub routes_computed: usize,
}

/// The objects that are not routes, as a run saw them: the same `Arc`s on the next run mean
/// every remembered route contribution still holds.
#[derive(Debug)]
struct Context {
    /// The addresses of each kind's objects, sorted.
    addresses: Vec<Vec<usize>>,
    /// The objects themselves, held so that their addresses stay theirs.
    _held: World,
}

impl Context {
    fn of(world: &World) -> Context {
        // Destructured so that a new kind in `World` cannot be forgotten here.
        let World {
            gateway_classes,
            gateways,
            http_routes: _,
            grpc_routes: _,
            tls_routes: _,
            services,
            listener_sets,
            reference_grants,
            namespaces,
            backend_tls_policies,
            // Not read by routes, only by what is computed on every run: Secrets by listeners'
            // ResolvedRefs (not their acceptance, which is all a route reads of a listener),
            // ConfigMaps by BackendTLSPolicies, the bundle version by GatewayClasses. So a
            // certificate's renewal does not cost a computation of every route.
            secrets: _,
            config_maps: _,
            bundle_version: _,
        } = world;
        let addresses = vec![
            addresses(gateway_classes),
            addresses(gateways),
            addresses(services),
            addresses(listener_sets),
            addresses(reference_grants),
            addresses(namespaces),
            addresses(backend_tls_policies),
        ];
        let _held = World {
            gateway_classes: gateway_classes.clone(),
            gateways: gateways.clone(),
            services: services.clone(),
            listener_sets: listener_sets.clone(),
            reference_grants: reference_grants.clone(),
            namespaces: namespaces.clone(),
            backend_tls_policies: backend_tls_policies.clone(),
            ..World::default()
        };
        Context { addresses, _held }
    }

    fn same(&self, other: &Context) -> bool {
        self.addresses == other.addresses
    }
}

/// Where each object lives, sorted: equal lists mean the same objects, unchanged.
fn addresses<T>(objects: &[Arc<T>]) -> Vec<usize> {
    let mut out: Vec<usize> = objects.iter().map(|o| Arc::as_ptr(o) as usize).collect();
    out.sort_unstable();
    out
}

/// The remembered contributions of one route kind, by the address of the route's `Arc`.
#[derive(Debug)]
struct Memos<R>(HashMap<usize, Memo<R>>);

impl<R> Default for Memos<R> {
    fn default() -> Self {
        Memos(HashMap::new())
    }
}

#[derive(Debug)]
struct Memo<R> {
    /// Held so that the address stays this route's.
    _route: Arc<R>,
    contribution: route::Contribution,
    /// The last run that saw the route.
    seen: u64,
}

impl<R: route::Route> Memos<R> {
    /// Brings the memos up to `routes`: keeps those of unchanged routes (none when `fresh`),
    /// computes the others into `update`, keeps `counts` (routes per listener, by parent id) in
    /// step, and returns the keys of forgotten routes that had a desired status.
    ///
    /// An unchanged route costs one lookup: nothing is moved or counted again.
    fn refresh(
        &mut self,
        routes: &[Arc<R>],
        run: Run,
        compute: impl Fn(&R) -> (route::Contribution, Option<Desired>),
        counts: &mut Counts,
        update: &mut Update,
    ) -> Vec<ObjectKey> {
        let mut gone = vec![];
        if run.fresh {
            gone.extend(
                self.0
                    .drain()
                    .filter_map(|(_, m)| m.contribution.ours_key()),
            );
        }
        let before = self.0.len();
        let mut kept = 0;
        for r in routes {
            let address = Arc::as_ptr(r) as usize;
            if let Some(m) = self.0.get_mut(&address) {
                // Also a route listed twice (never from a store) counts once.
                kept += usize::from(m.seen != run.stamp);
                m.seen = run.stamp;
                continue;
            }
            let (contribution, desired) = compute(r);
            update.routes_computed += 1;
            if let (Some(key), Some(desired)) = (&contribution.key, desired) {
                update.desired.insert(key.clone(), desired);
            }
            counts.add(&contribution, 1);
            let memo = Memo {
                _route: r.clone(),
                contribution,
                seen: run.stamp,
            };
            self.0.insert(address, memo);
        }
        if kept < before {
            self.0.retain(|_, m| {
                if m.seen == run.stamp {
                    return true;
                }
                counts.add(&m.contribution, -1);
                gone.extend(m.contribution.ours_key());
                false
            });
        }
        gone
    }

    fn contributions(&self) -> impl Iterator<Item = &route::Contribution> {
        self.0.values().map(|m| &m.contribution)
    }
}

/// One run, as the memos see it.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// Nothing remembered holds (something routes read changed): every route is computed.
    fresh: bool,
    /// Which run this is.
    stamp: u64,
}

/// Routes attached to each listener of each parent, by parent id (see `route::Parents`), kept
/// up to date as routes come, change and go.
#[derive(Debug, Default)]
struct Counts(Vec<Vec<i32>>);

impl Counts {
    /// Adds (`sign` 1) or takes away (-1) what `c` attached.
    fn add(&mut self, c: &route::Contribution, sign: i32) {
        for &(id, listener) in c.attachments() {
            let slot = usize::try_from(id).ok().and_then(|i| self.0.get_mut(i));
            if let Some(count) = slot.and_then(|l| l.get_mut(listener)) {
                *count = count.saturating_add(sign);
            }
        }
    }
}

impl Computation {
    /// A computation for the controller named `controller_name` that remembers nothing yet.
    pub fn new(controller_name: impl Into<String>) -> Self {
        Computation {
            controller_name: controller_name.into(),
            context: None,
            http_routes: Memos::default(),
            grpc_routes: Memos::default(),
            tls_routes: Memos::default(),
            counts: Counts::default(),
            runs: 0,
            others: BTreeSet::new(),
        }
    }

    /// Computes the statuses of `world`, again only for what changed since the last run.
    pub fn run(&mut self, world: &World) -> Update {
        let context = Context::of(world);
        let fresh = !self.context.as_ref().is_some_and(|c| c.same(&context));
        let mut update = Update::default();
        let name = self.controller_name.as_str();
        let index = index::Index::new(world);
        let classes = gatewayclass::compute(world, name, &mut update.desired);
        let prepared = listenerset::prepare(world);
        let mut gateways = gateway::analyse(world, &classes, &index);
        let mut sets = listenerset::analyse(&prepared, &mut gateways, &index);
        let reach = !world.backend_tls_policies.is_empty();
        let parents = route::Parents::new(&gateways, &sets);
        self.runs += 1;
        let run = Run {
            fresh,
            stamp: self.runs,
        };
        if fresh {
            self.counts = Counts(parents.zero_counts());
        }
        let counts = &mut self.counts;
        let contribute = |r: &_| route::contribute(r, name, &parents, &index, reach);
        let mut gone =
            self.http_routes
                .refresh(&world.http_routes, run, contribute, counts, &mut update);
        let contribute = |r: &_| route::contribute(r, name, &parents, &index, reach);
        gone.extend(self.grpc_routes.refresh(
            &world.grpc_routes,
            run,
            contribute,
            counts,
            &mut update,
        ));
        let contribute = |r: &_| route::contribute(r, name, &parents, &index, reach);
        gone.extend(self.tls_routes.refresh(
            &world.tls_routes,
            run,
            contribute,
            counts,
            &mut update,
        ));
        // Only BackendTLSPolicies need to know which Gateways reach which Services.
        let reached = if reach {
            let contributions = self
                .http_routes
                .contributions()
                .chain(self.grpc_routes.contributions())
                .chain(self.tls_routes.contributions());
            parents.reach(contributions)
        } else {
            route::Reach::new()
        };
        let targets = parents.targets();
        drop(parents);
        route::count_into(&targets, &self.counts.0, &mut gateways, &mut sets);
        policy::compute(world, name, &reached, &index, &mut update.desired);
        gateway::emit(gateways, &mut update.desired);
        listenerset::emit(sets, &mut update.desired);
        // Routes forgotten this run that were not computed again under the same key.
        update
            .removed
            .extend(gone.into_iter().filter(|k| !update.desired.contains_key(k)));
        let others: BTreeSet<ObjectKey> = update
            .desired
            .keys()
            .filter(|k| !k.kind.is_route())
            .cloned()
            .collect();
        update
            .removed
            .extend(self.others.difference(&others).cloned());
        self.others = others;
        self.context = Some(context);
        update
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::fixtures::*;
    use super::*;
    use crate::key::Kind;
    use crate::secret::Content;

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

    /// What a caller holds after taking in one run.
    fn take_in(held: &mut BTreeMap<ObjectKey, Desired>, update: Update) {
        for key in &update.removed {
            held.remove(key);
        }
        held.extend(update.desired);
    }

    /// The route `name` of `w`, replaced by `f`'s new object.
    fn replace_route(w: &mut World, name: &str, f: impl FnOnce(&str) -> Arc<HttpRoute>) {
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

    type Step = (&'static str, Box<dyn Fn(&mut World)>);

    /// A step that deletes HTTPRoute `name`.
    fn delete_route(name: &'static str) -> Box<dyn Fn(&mut World)> {
        Box::new(move |w| {
            w.http_routes
                .retain(|r| r.metadata.name.as_deref() != Some(name))
        })
    }

    #[test]
    fn a_computation_that_remembers_gives_what_a_whole_one_gives_after_every_change() {
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
        let steps: Vec<Step> = vec![
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
        ];
        let mut w = busy_world();
        let mut computation = Computation::new(CONTROLLER);
        let mut held = BTreeMap::new();
        // The keys whose status differs from a whole computation's (the statuses are long).
        let differing = |held: &BTreeMap<ObjectKey, Desired>, w: &World| -> Vec<String> {
            let whole = compute(w, CONTROLLER);
            let keys: BTreeSet<&ObjectKey> = held.keys().chain(whole.keys()).collect();
            let keys = keys.into_iter().filter(|k| held.get(*k) != whole.get(*k));
            keys.map(ToString::to_string).collect()
        };
        take_in(&mut held, computation.run(&w));
        assert_eq!(differing(&held, &w), Vec::<String>::new(), "at first");
        for (what, step) in steps {
            step(&mut w);
            take_in(&mut held, computation.run(&w));
            assert_eq!(differing(&held, &w), Vec::<String>::new(), "after: {what}");
        }
        assert!(held.is_empty());
    }

    fn w_route(w: &World, name: &str) -> Arc<HttpRoute> {
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
