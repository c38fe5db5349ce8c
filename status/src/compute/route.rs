//! The route engine HTTPRoute, GRPCRoute, TLSRoute, TCPRoute and UDPRoute share: one
//! `status.parents` entry per parentRef to one of our Gateways, with `Accepted` and
//! `ResolvedRefs` (`resolved.rs`), and the attachments the Gateways' listeners count.
//!
//! Each kind only says what the engine reads of it ([`Route::view`]): parentRefs, hostnames,
//! backendRefs (with RequestMirror targets where the kind has them) and which controllers have
//! entries in its status. The rules below are the same for all five (upstream
//! `apis/v1/shared_types.go`, `RouteConditionType`/`RouteConditionReason`; conformance
//! `httproute-*`, `grpcroute-*`, `tlsroute-*`).
//!
//! `Accepted` for one parentRef, first match wins:
//! 1. the Gateway is not accepted → False/NoMatchingParent (of the spec's reasons the closest:
//!    the Gateway offers nothing to attach to; the message says why);
//! 2. no listener matches `sectionName`/`port` → False/NoMatchingParent;
//! 3. no matching listener allows the route's kind and namespace → False/NotAllowedByListeners
//!    (a listener allows a kind through its `supportedKinds`: HTTPRoute and GRPCRoute on HTTP
//!    and HTTPS, TLSRoute on TLS, TCPRoute on TCP, UDPRoute on UDP; conformance `tlsroute-*`,
//!    v1.6.1 `tcproute-invalid-non-tcp-listener`, `udproute-not-allowed-by-listeners`);
//! 4. no allowing listener's hostname intersects the route's → False/NoMatchingListenerHostname
//!    (`tlsroute-hostname-intersection`, `grpcroute-listener-hostname-matching`);
//! 5. every listener that passed 4 is taken by a route of the other kind among HTTPRoute and
//!    GRPCRoute with a common hostname that takes precedence → False/NotAllowedByListeners
//!    (upstream `apis/v1/grpcroute_types.go`, `GRPCRouteSpec.Hostnames`: up to v1.6 "the
//!    implementation MUST accept exactly one of these two routes", from v1.7.0 "MAY reject one
//!    of the two routes. An implementation that does so MUST accept exactly one of them ... The
//!    rejected Route MUST raise an 'Accepted' condition with a status of 'False'"; this one still
//!    rejects, so a route's status is the same on every bundle; the spec names no reason, and
//!    the listener is what refuses it; see `contest.rs`);
//! 6. the route asks for something this controller does not support → False/UnsupportedValue,
//!    still attached to every listener that passed 5 (attachment depends only on the listener
//!    and the parentRef, see below). One case today: an HTTPRoute rule's `retry.backoff`
//!    (standard since v1.7.0; upstream `apis/v1/httproute_types.go`, `HTTPRouteRetry.Backoff`:
//!    "Implementations which retry immediately with no backoff MUST NOT advertise support for
//!    this field and MUST set the Accepted Condition for the Route to `status: False` with a
//!    Reason of `UnsupportedValue` when this field is set"). Retries are the data plane's,
//!    which this controller cannot vouch for, so it claims none of the retry features
//!    (`gatewayclass.rs`); `retry.codes` and `retry.attempts` are Extended with no status rule
//!    for an implementation without them, so they change nothing here. Such a route takes no
//!    part in the contest of 5 (`contest.rs`): it is refused anyway;
//! 7. True/Accepted, attached to every listener that passed 5.
//!
//! A parent is a Gateway or a ListenerSet (parentRef kind `ListenerSet`, upstream v1.5.1
//! `apis/v1/listenerset_types.go`): a ListenerSet's listeners are reached only through it, never
//! through its Gateway, and are judged by the same rules (`listenerset.rs`).
//!
//! Attachment depends only on the listener's `allowedRoutes`, hostname and the parentRef, not on
//! the listener's own conditions, as the spec's `attachedRoutes` text requires; every kind counts
//! in the same `attachedRoutes`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRouteStatusParentsParentRef;
use gateway_api::tlsroutes::TlsRoute;
use kube::api::ObjectMeta;

use super::gateway::{GatewayView, Gateways};
use super::hostname;
use super::index::Index;
use super::listenerset::ListenerSets;
use super::reason;
use super::refs::{self, non_empty, BackendRef, Problem, GATEWAY_GROUP};
use super::verdict::Verdict;
use crate::desired::{Desired, RouteParentStatus};
use crate::key::{Kind, ObjectKey};
use crate::stored::StoredHttpRoute;
use crate::v1_6::{TcpRoute, UdpRoute};

mod resolved;
use resolved::resolve_refs;

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

/// A parentRef as every route kind writes it.
pub(crate) struct ParentRef<'w> {
    pub group: Option<&'w str>,
    pub kind: Option<&'w str>,
    pub name: &'w str,
    pub namespace: Option<&'w str>,
    pub port: Option<i32>,
    pub section_name: Option<&'w str>,
}

/// What the engine reads of one route, whatever its kind.
pub(crate) struct RouteView<'w> {
    /// The parentRefs, in spec order.
    pub parent_refs: Vec<ParentRef<'w>>,
    /// `spec.hostnames` (none: any).
    pub hostnames: &'w [String],
    /// Every backendRef, RequestMirror targets included, in the order ResolvedRefs reports them.
    pub backend_refs: Vec<BackendRef<'w>>,
    /// The `controllerName` of each entry of `status.parents`.
    pub status_controllers: Vec<&'w str>,
}

/// A route kind: what the engine reads of it.
pub(crate) trait Route {
    /// The kind, as in the object key and a ReferenceGrant's `from`.
    const KIND: Kind;
    /// Whether a BackendTLSPolicy applies to the connections this kind's backends get (upstream
    /// v1.6.1 `apis/v1/backendtlspolicy_types.go`, `TargetRefs`: "HTTPRoute, GRPCRoute, TLSRoute
    /// with termination"); a TCPRoute or UDPRoute makes no Gateway a policy's ancestor.
    const BACKEND_TLS: bool = true;
    /// The object's metadata.
    fn meta(&self) -> &ObjectMeta;
    /// What the engine reads of it.
    fn view(&self) -> RouteView<'_>;
    /// `spec.hostnames` (none: any).
    fn hostnames(&self) -> &[String] {
        self.view().hostnames
    }
    /// Why the route is not accepted wherever it attaches (rule 6 above): something it asks
    /// for that this controller does not support. `None` for most routes and kinds.
    fn unsupported_value(&self) -> Option<String> {
        None
    }
}

/// Which of our Gateways each Service is reached from: Service (namespace, name) to the
/// Gateways (namespace, name) that accepted a route (HTTPRoute, GRPCRoute, TLSRoute) with a
/// backendRef to it, each with the Service port the backendRef names (`None`: no port given).
/// BackendTLSPolicies' ancestors follow from it (`policy.rs`), narrowed to a port by a
/// targetRef's `sectionName`.
pub(crate) type Reach<'w> =
    BTreeMap<(&'w str, &'w str), BTreeSet<((&'w str, &'w str), Option<i32>)>>;

/// The parents routes attach to (our Gateways and ListenerSets), each with an id: its place in
/// the sorted list of parents, so that what was computed for a route under the same Gateways
/// and ListenerSets names the same parents (see [`super::Computation`]).
pub(crate) struct Parents<'p, 'w> {
    gateways: &'p Gateways<'w>,
    sets: &'p ListenerSets<'w>,
    table: Vec<Target<'w>>,
    ids: HashMap<Target<'w>, ParentId>,
}

/// A parent's place in [`Parents`]'s table.
pub(crate) type ParentId = u32;

impl<'p, 'w> Parents<'p, 'w> {
    pub(crate) fn new(gateways: &'p Gateways<'w>, sets: &'p ListenerSets<'w>) -> Self {
        let mut table: Vec<Target<'w>> = gateways
            .keys()
            .map(|k| (ParentKind::Gateway, *k))
            .chain(sets.keys().map(|k| (ParentKind::ListenerSet, *k)))
            .collect();
        table.sort_unstable();
        let ids = (0..)
            .zip(&table)
            .map(|(id, target)| (*target, id))
            .collect();
        Parents {
            gateways,
            sets,
            table,
            ids,
        }
    }

    /// The parent `target` names, if it is one of ours.
    fn get(&self, (kind, key): Target<'w>) -> Option<&'p GatewayView<'w>> {
        match kind {
            ParentKind::Gateway => self.gateways.get(&key),
            ParentKind::ListenerSet => self.sets.get(&key),
        }
    }

    fn by_id(&self, id: ParentId) -> Option<&'p GatewayView<'w>> {
        let target = *self.table.get(usize::try_from(id).ok()?)?;
        self.get(target)
    }

    /// A count of 0 for each listener of each parent, by parent id.
    pub(crate) fn zero_counts(&self) -> Vec<Vec<i32>> {
        let listeners = |t: &Target<'w>| self.get(*t).map_or(0, |g| g.attached_routes.len());
        self.table.iter().map(|t| vec![0; listeners(t)]).collect()
    }

    /// Which Gateways reach which Services, from what `routes` contributed.
    pub(crate) fn reach<'a>(&self, routes: impl IntoIterator<Item = &'a Contribution>) -> Reach<'a>
    where
        'w: 'a,
    {
        let mut reach = Reach::new();
        for c in routes {
            for (namespace, name, port) in &c.services {
                // A route attached through a ListenerSet reaches its Services from the parent
                // Gateway.
                let gateways = c.attachments.iter().filter_map(|&(id, _)| self.by_id(id));
                reach
                    .entry((namespace.as_str(), name.as_str()))
                    .or_default()
                    .extend(gateways.map(|g| (g.gateway, *port)));
            }
        }
        reach
    }

    /// The parents, in id order: where counts by parent id go.
    pub(crate) fn targets(&self) -> Vec<Target<'w>> {
        self.table.clone()
    }
}

/// Adds `counts` (by parent id, the order of `targets`) to the parents' `attachedRoutes`.
pub(crate) fn count_into<'w>(
    targets: &[Target<'w>],
    counts: &[Vec<i32>],
    gateways: &mut Gateways<'w>,
    sets: &mut ListenerSets<'w>,
) {
    for ((kind, key), counts) in targets.iter().zip(counts) {
        let view = match kind {
            ParentKind::Gateway => gateways.get_mut(key),
            ParentKind::ListenerSet => sets.get_mut(key),
        };
        if let Some(view) = view {
            for (attached, n) in view.attached_routes.iter_mut().zip(counts) {
                *attached = attached.saturating_add(*n);
            }
        }
    }
}

/// What a parentRef names: a Gateway or a ListenerSet (upstream v1.5.1
/// `apis/v1/listenerset_types.go`: routes attach to a ListenerSet's listeners through
/// parentRef kind ListenerSet only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ParentKind {
    Gateway,
    ListenerSet,
}

/// A parent: its kind and (namespace, name).
pub(crate) type Target<'w> = (ParentKind, (&'w str, &'w str));

/// What one route adds to a computation: its desired status, and what the parents' statuses
/// and BackendTLSPolicies' ancestors count of it. A route's contribution depends only on the
/// route and on everything that is not a route, which is what lets [`super::Computation`] keep
/// it while neither changes.
#[derive(Debug, Default)]
pub(crate) struct Contribution {
    /// The route's object key; `None` for a route without a name or namespace.
    pub key: Option<ObjectKey>,
    /// Whether the route has a desired status (it is related to us).
    pub ours: bool,
    /// The listeners the route is attached to, as (parent, listener index), each once.
    attachments: Vec<(ParentId, usize)>,
    /// Listeners the route would attach to but may not: an HTTPRoute or GRPCRoute whose
    /// hostnames another kind's route took there first (see `contest.rs`).
    blocked: Vec<(ParentId, usize)>,
    /// The core Services (namespace, name, port) its backendRefs name and may name, when the
    /// route is attached somewhere and reach was asked for.
    services: Vec<(String, String, Option<i32>)>,
}

impl Contribution {
    /// The route's key, if it has a desired status.
    pub(crate) fn ours_key(&self) -> Option<ObjectKey> {
        self.key.clone().filter(|_| self.ours)
    }

    /// The listeners the route is attached to, as (parent, listener index), each once.
    pub(crate) fn attachments(&self) -> &[(ParentId, usize)] {
        &self.attachments
    }

    /// The listeners it was kept from ([`contribute`]'s `blocked`).
    pub(crate) fn blocked(&self) -> &[(ParentId, usize)] {
        &self.blocked
    }

    /// Every listener it attaches to or would attach to but for `blocked`.
    pub(crate) fn candidates(&self) -> impl Iterator<Item = &(ParentId, usize)> {
        self.attachments.iter().chain(&self.blocked)
    }
}

/// Computes one route's [`Contribution`] and desired status (`None` when the route is not
/// related to us); with `reach`, also the Services it reaches (only BackendTLSPolicies need
/// them). The route does not attach to the listeners in `blocked` (sorted).
pub(crate) fn contribute<R: Route>(
    route: &R,
    controller_name: &str,
    parents: &Parents<'_, '_>,
    index: &Index<'_>,
    reach: bool,
    blocked: &[(ParentId, usize)],
) -> (Contribution, Option<Desired>) {
    let meta = route.meta();
    let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return (Contribution::default(), None);
    };
    let generation = meta.generation.unwrap_or(0);
    let view = route.view();
    let unsupported = route.unsupported_value();
    let (statuses, mut attached) = parents_of::<R>(
        &view,
        namespace,
        controller_name,
        generation,
        parents,
        index,
        blocked,
        unsupported.as_deref(),
    );
    // A route attached to one listener through two parentRefs counts once there.
    attached.sort_unstable();
    attached.dedup();
    let attachments: Vec<(ParentId, usize)> = attached
        .iter()
        .filter_map(|(target, listener)| Some((*parents.ids.get(target)?, *listener)))
        .collect();
    let services = if reach && R::BACKEND_TLS && !attachments.is_empty() {
        reached_services::<R>(&view, namespace, index)
    } else {
        vec![]
    };
    let has_stale_entries = view.status_controllers.contains(&controller_name);
    let desired = (!statuses.is_empty() || has_stale_entries).then_some(Desired::Route {
        generation,
        parents: statuses.into(),
    });
    let contribution = Contribution {
        key: Some(ObjectKey::namespaced(R::KIND, namespace, name)),
        ours: desired.is_some(),
        attachments,
        blocked: blocked.to_vec(),
        services,
    };
    (contribution, desired)
}

/// The core Services (and ports) the route's backendRefs name and may name (same namespace, or a
/// ReferenceGrant allows it): the Gateways that accepted the route reach them.
fn reached_services<R: Route>(
    view: &RouteView<'_>,
    namespace: &str,
    index: &Index<'_>,
) -> Vec<(String, String, Option<i32>)> {
    let from = refs::Referrer {
        group: GATEWAY_GROUP,
        kind: R::KIND.as_str(),
        namespace,
    };
    let services = view
        .backend_refs
        .iter()
        .filter(|r| r.group.unwrap_or("").is_empty() && r.kind.unwrap_or("Service") == "Service");
    let mut out = vec![];
    for r in services {
        let service = (non_empty(r.namespace).unwrap_or(namespace), r.name);
        let to = refs::Referent {
            group: "",
            kind: "Service",
            namespace: service.0,
            name: service.1,
        };
        if refs::permitted(index, &from, &to) {
            out.push((service.0.to_string(), service.1.to_string(), r.port));
        }
    }
    out
}

/// Our `status.parents` entries for one route, and the listeners it attaches to; `unsupported`
/// is [`Route::unsupported_value`].
#[allow(clippy::too_many_arguments)]
fn parents_of<'w, R: Route>(
    view: &RouteView<'w>,
    namespace: &'w str,
    controller_name: &str,
    generation: i64,
    gateways: &Parents<'_, 'w>,
    index: &Index<'_>,
    blocked: &[(ParentId, usize)],
    unsupported: Option<&str>,
) -> (Vec<RouteParentStatus>, Vec<(Target<'w>, usize)>) {
    let mut attachments = vec![];
    let mut seen = HashSet::new();
    let mut resolved_refs: Option<Verdict> = None;
    let mut parents = vec![];
    for parent_ref in &view.parent_refs {
        if parents.len() == MAX_PARENTS {
            break;
        }
        let Some(target) = parent_target(parent_ref, namespace) else {
            continue;
        };
        let Some(gateway) = gateways.get(target) else {
            continue;
        };
        let section = non_empty(parent_ref.section_name);
        if !seen.insert((target, section, parent_ref.port)) {
            continue;
        }
        let id = gateways.ids.get(&target).copied();
        let is_blocked = |i: usize| id.is_some_and(|id| blocked.binary_search(&(id, i)).is_ok());
        let accepted = match attach(
            R::KIND,
            gateway,
            parent_ref,
            namespace,
            view.hostnames,
            index,
            &is_blocked,
        ) {
            Ok(listeners) => {
                let names: Vec<&str> = listeners
                    .iter()
                    .map(|&i| gateway.listeners[i].spec.name.as_str())
                    .collect();
                attachments.extend(listeners.into_iter().map(|i| (target, i)));
                match unsupported {
                    Some(why) => Verdict::no(reason::UNSUPPORTED_VALUE, why),
                    None => Verdict::yes(
                        reason::ACCEPTED,
                        format!("accepted by listeners: {}", names.join(", ")),
                    ),
                }
            }
            Err(verdict) => verdict,
        };
        let resolved = resolved_refs
            .get_or_insert_with(|| resolve_refs(R::KIND, &view.backend_refs, namespace, index));
        let owned = |s: Option<&str>| s.map(str::to_string);
        parents.push(RouteParentStatus {
            conditions: vec![
                accepted.condition(reason::ACCEPTED, generation),
                resolved.condition(reason::RESOLVED_REFS, generation),
            ],
            controller_name: controller_name.to_string(),
            parent_ref: HttpRouteStatusParentsParentRef {
                group: owned(parent_ref.group),
                kind: owned(parent_ref.kind),
                name: parent_ref.name.to_string(),
                namespace: owned(parent_ref.namespace),
                port: parent_ref.port,
                section_name: owned(parent_ref.section_name),
            },
        });
    }
    (parents, attachments)
}

/// The Gateway or ListenerSet a parentRef names; `None` for other kinds of parent.
fn parent_target<'w>(parent_ref: &ParentRef<'w>, route_namespace: &'w str) -> Option<Target<'w>> {
    if parent_ref.group.unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP {
        return None;
    }
    let kind = match parent_ref.kind.unwrap_or("Gateway") {
        "Gateway" => ParentKind::Gateway,
        "ListenerSet" => ParentKind::ListenerSet,
        _ => return None,
    };
    let namespace = non_empty(parent_ref.namespace).unwrap_or(route_namespace);
    Some((kind, (namespace, parent_ref.name)))
}

/// The listeners (indices) of `gateway` that accept a route of `kind` through `parent_ref`, or
/// the `Accepted` False verdict. Listeners `blocked` says are taken are left out.
fn attach(
    kind: Kind,
    gateway: &GatewayView<'_>,
    parent_ref: &ParentRef<'_>,
    route_namespace: &str,
    hostnames: &[String],
    index: &Index<'_>,
    blocked: &dyn Fn(usize) -> bool,
) -> Result<Vec<usize>, Verdict> {
    if !gateway.accepted.ok {
        return Err(Verdict::no(
            reason::NO_MATCHING_PARENT,
            format!(
                "{} {}/{} is not accepted",
                gateway.kind, gateway.namespace, gateway.name
            ),
        ));
    }
    let section = non_empty(parent_ref.section_name);
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
            (None, None) => format!("the {} has no listeners", gateway.kind),
        };
        return Err(Verdict::no(reason::NO_MATCHING_PARENT, message));
    }
    let kind = kind.as_str();
    let allowing: Vec<usize> = selected
        .iter()
        .copied()
        .filter(|&i| {
            let l = &gateway.listeners[i];
            l.admits(kind) && l.allows_namespace(gateway.namespace, route_namespace, index)
        })
        .collect();
    if allowing.is_empty() {
        let message = if selected.iter().any(|&i| gateway.listeners[i].admits(kind)) {
            format!("no matching listener allows routes from namespace {route_namespace}")
        } else {
            format!("no matching listener allows {kind}s")
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
    let (open, taken): (Vec<usize>, Vec<usize>) = matching.into_iter().partition(|&i| !blocked(i));
    if open.is_empty() {
        let names: Vec<&str> = taken
            .iter()
            .map(|&i| gateway.listeners[i].spec.name.as_str())
            .collect();
        let other = if kind == "GRPCRoute" {
            "an HTTPRoute"
        } else {
            "a GRPCRoute"
        };
        return Err(Verdict::no(
            reason::NOT_ALLOWED_BY_LISTENERS,
            format!(
                "{other} that takes precedence (older, or first by namespace/name) has \
                 hostnames in common with this route on listeners: {}",
                names.join(", ")
            ),
        ));
    }
    Ok(open)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod kinds_tests;

#[cfg(test)]
mod l4_tests;
