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
//! HTTPRoutes, GRPCRoutes, TLSRoutes, TCPRoutes and UDPRoutes go through one route engine (`route.rs`); each kind
//! only describes what the engine reads of it. The engine also tells which of our Gateways
//! reach which Services, and BackendTLSPolicies take their ancestors from that (`policy.rs`).
//!
//! ListenerSets (`listenerset.rs`) come between the Gateways and the routes: their listeners
//! are judged after the Gateway's, and routes attach to them through parentRefs of kind
//! ListenerSet.
//!
//! Deliberately not covered: the listener `Conflicted` reason `ListenerConflict` (upstream
//! v1.5.1 `apis/v1/listenerset_types.go` gives it no rule of its own; ProtocolConflict and
//! HostnameConflict are used, as the conformance tests expect), the Gateway-level `tls` block and
//! its `ResolvedRefs` condition, certificate checks beyond parsing (expiry, SANs against the
//! listener's hostname, `OverlappingCertificates`), `OverlappingTLSConfig` on TLS listeners, the
//! validation of route matches and filters (`UnsupportedValue`, `IncompatibleFilters`,
//! `PartiallyInvalid`; the one `UnsupportedValue` given is an HTTPRoute rule's `retry.backoff`,
//! `route.rs`, rule 6), and the Gateway condition `AddressesAssigned` (v1.7.0; whoever assigns
//! the addresses sets it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::listenersets::ListenerSet;
use gateway_api::referencegrants::ReferenceGrant;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::api::core::v1::{Namespace, Service};

use crate::desired::Desired;
use crate::key::ObjectKey;
use crate::stored::StoredHttpRoute;
use crate::v1_6::{TcpRoute, UdpRoute};

// What `World` holds of Secrets and ConfigMaps: reduced before they enter a watch's store, and
// reduced the same way by whoever builds a `World` of their own.
pub use crate::configmap::CaBundle;
pub use crate::secret::{Content, TlsSecret};
pub use address::AddressService;
pub use memos::{Changed, Changes, RouteChanges};

use memos::{Memos, Routes};

mod address;
mod contest;
mod gateway;
mod gatewayclass;
mod hostname;
mod index;
mod listener;
mod listenerset;
mod memos;
mod policy;
mod reason;
mod refs;
mod route;
mod selector;
pub(crate) mod shared;
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
    pub http_routes: Vec<Arc<StoredHttpRoute>>,
    /// All GRPCRoutes (none while their CRD is not installed).
    pub grpc_routes: Vec<Arc<GrpcRoute>>,
    /// All TLSRoutes (none while their CRD is not installed).
    pub tls_routes: Vec<Arc<TlsRoute>>,
    /// All TCPRoutes (none while their CRD is not installed: Gateway API v1.6 and later).
    pub tcp_routes: Vec<Arc<TcpRoute>>,
    /// All UDPRoutes (none while their CRD is not installed: Gateway API v1.6 and later).
    pub udp_routes: Vec<Arc<UdpRoute>>,
    /// Which of the kinds that only some Gateway API releases have the cluster serves: a TCP or
    /// UDP listener is served only where its route kind exists.
    pub served: Served,
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

/// The route kinds that decide whether a listener protocol can be served, as discovery found
/// them: without the TCPRoute CRD (Gateway API v1.5 and older) nothing can attach to a TCP
/// listener, so it is not accepted (`UnsupportedProtocol`), as the spec says of an
/// implementation without TCP support.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// The TCPRoute CRD (`gateway.networking.k8s.io/v1`) is served.
    pub tcp_route: bool,
    /// The UDPRoute CRD (`gateway.networking.k8s.io/v1`) is served.
    pub udp_route: bool,
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
/// [`Self::run`] looks every route of the `World` up; a caller whose watches tell which routes
/// changed gives only those to [`Self::run_changes`], and an unchanged route costs nothing.
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
    /// The Service that gives Gateways their addresses, if any.
    addresses_from: Option<AddressService>,
    /// What the remembered contributions were computed under.
    context: Option<Context>,
    http_routes: Memos<StoredHttpRoute>,
    grpc_routes: Memos<GrpcRoute>,
    tls_routes: Memos<TlsRoute>,
    tcp_routes: Memos<TcpRoute>,
    udp_routes: Memos<UdpRoute>,
    /// Routes per listener, added up from the remembered contributions.
    counts: Counts,
    /// Runs so far.
    runs: u64,
    /// Objects other than routes that got a status on the last run.
    others: BTreeSet<ObjectKey>,
    /// One copy of each distinct route status handed out.
    shared: shared::Shared,
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
    /// Which protocols' route kinds exist (it decides which listeners are accepted).
    served: Served,
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
            tcp_routes: _,
            udp_routes: _,
            served,
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
        Context {
            addresses,
            served: *served,
            _held,
        }
    }

    fn same(&self, other: &Context) -> bool {
        self.addresses == other.addresses && self.served == other.served
    }
}

/// Where each object lives, sorted: equal lists mean the same objects, unchanged.
fn addresses<T>(objects: &[Arc<T>]) -> Vec<usize> {
    let mut out: Vec<usize> = objects.iter().map(|o| Arc::as_ptr(o) as usize).collect();
    out.sort_unstable();
    out
}

/// What computing a route reads besides the route, the same for every route of a run.
struct Env<'a, 'p, 'w> {
    /// The controller's name.
    name: &'a str,
    parents: &'a route::Parents<'p, 'w>,
    index: &'a index::Index<'w>,
    /// Whether the Services routes reach are wanted (only BackendTLSPolicies read them).
    reach: bool,
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
            addresses_from: None,
            context: None,
            http_routes: Memos::default(),
            grpc_routes: Memos::default(),
            tls_routes: Memos::default(),
            tcp_routes: Memos::default(),
            udp_routes: Memos::default(),
            counts: Counts::default(),
            runs: 0,
            others: BTreeSet::new(),
            shared: shared::Shared::default(),
        }
    }

    /// The controller name this computation was made for.
    pub fn controller_name(&self) -> &str {
        &self.controller_name
    }

    /// Gateways take their addresses from `service` (`status.addresses`, the
    /// `AddressesAssigned` condition, `spec.addresses`; docs/configuration.md,
    /// `gateway_addresses_service`); `None`, the default, reports no addresses and refuses a
    /// Gateway that asks for some.
    ///
    /// ```
    /// use gateway_leader_status::compute::{AddressService, Computation};
    ///
    /// let computation = Computation::new("example.com/gateway-controller")
    ///     .with_addresses_from(Some(AddressService::new("gateway-system", "data-plane")));
    /// # drop(computation);
    /// ```
    #[must_use]
    pub fn with_addresses_from(mut self, service: Option<AddressService>) -> Self {
        self.addresses_from = service;
        self
    }

    /// Computes the statuses of `world`, again only for what changed since the last run.
    pub fn run(&mut self, world: &World) -> Update {
        let routes = (
            Routes::All(&world.http_routes),
            Routes::All(&world.grpc_routes),
            Routes::All(&world.tls_routes),
            Routes::All(&world.tcp_routes),
            Routes::All(&world.udp_routes),
        );
        self.run_with(world, routes)
    }

    /// Like [`Self::run`], with the routes as `changes` says instead of `world`'s route lists
    /// (which are not read): a run in which only a few routes changed costs those routes, not a
    /// lookup of every route. The first run should give every route ([`Changes::All`]); the
    /// routes are remembered between runs, so a run that must compute every route again (a
    /// Gateway changed) needs no list of them.
    ///
    /// ```
    /// use gateway_leader_status::compute::{Changed, Changes, Computation, RouteChanges, World};
    ///
    /// let mut computation = Computation::new("example.com/gateway-controller");
    /// let world = World::default();
    /// let first = RouteChanges {
    ///     http_routes: Changes::All(vec![]),
    ///     ..RouteChanges::default()
    /// };
    /// computation.run_changes(&world, &first);
    /// // A watch saw one route deleted: only that route is looked at.
    /// let gone = RouteChanges {
    ///     http_routes: Changes::Only(vec![Changed {
    ///         namespace: "apps".into(),
    ///         name: "web".into(),
    ///         object: None,
    ///     }]),
    ///     ..RouteChanges::default()
    /// };
    /// assert_eq!(computation.run_changes(&world, &gone).routes_computed, 0);
    /// ```
    pub fn run_changes(&mut self, world: &World, changes: &RouteChanges) -> Update {
        let routes = (
            changes.http_routes.routes(),
            changes.grpc_routes.routes(),
            changes.tls_routes.routes(),
            changes.tcp_routes.routes(),
            changes.udp_routes.routes(),
        );
        self.run_with(world, routes)
    }
}

/// Each route kind's routes for one run, in the order of [`RouteChanges`]'s fields.
type RoutesOfRun<'a> = (
    Routes<'a, StoredHttpRoute>,
    Routes<'a, GrpcRoute>,
    Routes<'a, TlsRoute>,
    Routes<'a, TcpRoute>,
    Routes<'a, UdpRoute>,
);

impl Computation {
    fn run_with(&mut self, world: &World, routes: RoutesOfRun<'_>) -> Update {
        let (http_routes, grpc_routes, tls_routes, tcp_routes, udp_routes) = routes;
        // What the previous runs handed out is in the caller's cache by now, or gone.
        self.shared.prune();
        let context = Context::of(world);
        let fresh = !self.context.as_ref().is_some_and(|c| c.same(&context));
        let mut update = Update::default();
        let name = self.controller_name.as_str();
        let index = index::Index::new(world);
        let addresses_from = self.addresses_from.as_ref();
        let classes =
            gatewayclass::compute(world, name, addresses_from.is_some(), &mut update.desired);
        let prepared = listenerset::prepare(world);
        let mut gateways = gateway::analyse(world, &classes, &index, addresses_from);
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
        let env = Env {
            name,
            parents: &parents,
            index: &index,
            reach,
        };
        let sink = &mut memos::Sink {
            counts: &mut self.counts,
            update: &mut update,
            shared: &mut self.shared,
        };
        let mut gone = self.http_routes.refresh(http_routes, run, &env, sink);
        gone.extend(self.grpc_routes.refresh(grpc_routes, run, &env, sink));
        gone.extend(self.tls_routes.refresh(tls_routes, run, &env, sink));
        // HTTPRoutes and GRPCRoutes with hostnames in common on a listener: one of each pair.
        let contested = contest::contested(self.grpc_routes.contributions());
        let blocked = if contested.is_empty() {
            contest::Blocked::new()
        } else {
            let mut entrants = vec![];
            self.http_routes.entrants(&contested, &mut entrants);
            self.grpc_routes.entrants(&contested, &mut entrants);
            contest::blocked(&entrants)
        };
        self.http_routes.settle(&blocked, &env, sink);
        self.grpc_routes.settle(&blocked, &env, sink);
        gone.extend(self.tcp_routes.refresh(tcp_routes, run, &env, sink));
        gone.extend(self.udp_routes.refresh(udp_routes, run, &env, sink));
        // Only BackendTLSPolicies need to know which Gateways reach which Services.
        let reached = if reach {
            let contributions = self
                .http_routes
                .contributions()
                .chain(self.grpc_routes.contributions())
                .chain(self.tls_routes.contributions())
                .chain(self.tcp_routes.contributions())
                .chain(self.udp_routes.contributions());
            parents.reach(contributions)
        } else {
            route::Reach::new()
        };
        let targets = parents.targets();
        drop(parents);
        route::count_into(&targets, &self.counts.0, &mut gateways, &mut sets);
        policy::compute(world, name, &reached, &index, &mut update.desired);
        let offered = addresses_from.map(|from| {
            (
                from,
                address::offered(from, index.service(&from.namespace, &from.name)),
            )
        });
        gateway::emit(
            gateways,
            offered.as_ref().map(|(from, offered)| (*from, offered)),
            &mut update.desired,
        );
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
mod address_tests;
#[cfg(test)]
mod changes_tests;
#[cfg(test)]
mod tests;
