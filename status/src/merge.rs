//! Merging a desired status into the object's current one, by the Gateway API's rules.
//!
//! - Conditions merge by type: ours replace theirs of the same type, other types stay, and
//!   `lastTransitionTime` is kept when a condition's status did not change.
//! - In a route's `status.parents` (HTTPRoute, GRPCRoute, TLSRoute alike) and a
//!   BackendTLSPolicy's `status.ancestors`, only entries whose `controllerName` is ours are
//!   touched; ours that are no longer wanted are removed, the rest keep their place.
//! - A desired status computed from an older generation than a condition in the part of the
//!   status we write already observed (ours, or one another controller added beside ours) is
//!   stale and not written: `observedGeneration` never goes backwards, and a replica whose watch
//!   is behind waits for it (gateway-api#4008). An `observedGeneration` above the object's own
//!   `metadata.generation` cannot come from a newer spec and is not believed, so a faulty writer
//!   elsewhere cannot stop ours.
//! - When the merge changes nothing, there is nothing to send.

use gateway_api::gatewayclasses::{GatewayClass, GatewayClassStatus};
use gateway_api::gateways::{Gateway, GatewayStatus, GatewayStatusListeners};
use gateway_api::grpcroutes::{
    GrpcRoute, GrpcRouteStatus, GrpcRouteStatusParents, GrpcRouteStatusParentsParentRef,
};
use gateway_api::httproutes::HttpRouteStatusParentsParentRef;
use gateway_api::tlsroutes::{
    TlsRoute, TlsRouteStatus, TlsRouteStatusParents, TlsRouteStatusParentsParentRef,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource;

use crate::desired::{Desired, RouteParentStatus};
use crate::stored::{SharedStatus, StoredHttpRoute};
use crate::v1_6::{self, TcpRoute, UdpRoute};

mod listener_set;
mod policy;

/// The most `status.parents` entries an HTTPRoute may hold (the CRD's `maxItems`).
pub(crate) const MAX_PARENTS: usize = 32;
/// The most `status.ancestors` entries a BackendTLSPolicy may hold (the CRD's `maxItems`;
/// `apis/v1/policy_types.go`, `PolicyStatus`: "A maximum of 16 ancestors").
pub(crate) const MAX_ANCESTORS: usize = 16;

/// What the merge decided for one object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Merge<K> {
    /// The object already says what we want: send nothing.
    Unchanged,
    /// Our conditions already observed a newer generation than the desired status was computed
    /// from; a newer computation is on its way.
    Stale {
        /// The newest `observedGeneration` among our conditions on the object.
        observed: i64,
    },
    /// The desired status is for another kind than the object (never written).
    WrongKind,
    /// Send this object (its status merged) to `/status`.
    Write(Box<K>),
}

/// An object whose status this controller writes.
pub(crate) trait StatusObject: Sized + Clone {
    /// Merges `desired` into a copy of `self`; `now` stamps conditions whose status changed.
    fn merge(&self, desired: &Desired, controller_name: &str, now: &Time) -> Merge<Self>;
}

/// Merges `desired` into `current` by type; returns the list to store.
pub(crate) fn merge_conditions(
    current: &[Condition],
    desired: &[Condition],
    now: &Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = current.to_vec();
    for want in desired {
        let mut c = want.clone();
        match out.iter_mut().find(|have| have.type_ == want.type_) {
            Some(have) => {
                c.last_transition_time = if have.status == want.status {
                    have.last_transition_time.clone()
                } else {
                    now.clone()
                };
                *have = c;
            }
            None => {
                c.last_transition_time = now.clone();
                out.push(c);
            }
        }
    }
    out
}

/// The newest `observedGeneration` among `current` conditions: those of the part of a status
/// we write, whoever wrote them.
fn observed<'a>(current: impl IntoIterator<Item = &'a Condition>) -> i64 {
    current
        .into_iter()
        .filter_map(|c| c.observed_generation)
        .max()
        .unwrap_or(i64::MIN)
}

fn decide<K: Clone + Resource>(
    current: &K,
    generation: i64,
    observed: i64,
    update: impl FnOnce(&mut K),
    same: impl FnOnce(&K, &K) -> bool,
) -> Merge<K> {
    let believable = current
        .meta()
        .generation
        .map_or(observed, |g| observed.min(g));
    if believable > generation {
        return Merge::Stale {
            observed: believable,
        };
    }
    let mut next = current.clone();
    update(&mut next);
    if same(current, &next) {
        Merge::Unchanged
    } else {
        Merge::Write(Box::new(next))
    }
}

// === impl GatewayClass ===

impl StatusObject for GatewayClass {
    fn merge(&self, desired: &Desired, _controller_name: &str, now: &Time) -> Merge<Self> {
        let Desired::GatewayClass {
            generation,
            conditions,
            supported_features,
        } = desired
        else {
            return Merge::WrongKind;
        };
        let status = self.status.clone().unwrap_or_default();
        let have = status.conditions.clone().unwrap_or_default();
        decide(
            self,
            *generation,
            observed(&have),
            |next| {
                next.status = Some(GatewayClassStatus {
                    conditions: Some(merge_conditions(&have, conditions, now)),
                    supported_features: Some(supported_features.clone()),
                });
            },
            |a, b| a.status.clone().unwrap_or_default() == b.status.clone().unwrap_or_default(),
        )
    }
}

// === impl Gateway ===

impl StatusObject for Gateway {
    fn merge(&self, desired: &Desired, _controller_name: &str, now: &Time) -> Merge<Self> {
        let Desired::Gateway {
            generation,
            conditions,
            listeners,
            attached_listener_sets,
            addresses,
        } = desired
        else {
            return Merge::WrongKind;
        };
        let status = self.status.clone().unwrap_or_default();
        let have = status.conditions.clone().unwrap_or_default();
        let have_listeners = status.listeners.clone().unwrap_or_default();
        decide(
            self,
            *generation,
            observed_with_listeners(&have, &have_listeners),
            |next| {
                next.status = Some(GatewayStatus {
                    conditions: Some(merge_conditions(&have, conditions, now)),
                    listeners: Some(merge_listeners(&have_listeners, listeners, now)),
                    attached_listener_sets: attached_listener_sets
                        .or(status.attached_listener_sets),
                    addresses: match addresses {
                        Some(a) if a.is_empty() => None,
                        Some(a) => Some(a.clone()),
                        None => status.addresses.clone(),
                    },
                });
            },
            |a, b| a.status.clone().unwrap_or_default() == b.status.clone().unwrap_or_default(),
        )
    }
}

/// The newest `observedGeneration` among our conditions on an object and on its listeners.
fn observed_with_listeners(have: &[Condition], have_listeners: &[GatewayStatusListeners]) -> i64 {
    let listener_conditions = have_listeners.iter().flat_map(|l| l.conditions.iter());
    observed(have).max(observed(listener_conditions))
}

/// The wanted listener entries, each listener's conditions merged (by name) into the ones it
/// has (Gateway and ListenerSet alike).
fn merge_listeners(
    have: &[GatewayStatusListeners],
    want: &[GatewayStatusListeners],
    now: &Time,
) -> Vec<GatewayStatusListeners> {
    want.iter()
        .map(|want| {
            let before = have
                .iter()
                .find(|l| l.name == want.name)
                .map(|l| l.conditions.as_slice())
                .unwrap_or_default();
            GatewayStatusListeners {
                conditions: merge_conditions(before, &want.conditions, now),
                ..want.clone()
            }
        })
        .collect()
}

// === impl Route kinds ===

/// A route kind's `status.parents`, in the shape every route kind shares
/// ([`RouteParentStatus`]).
trait RouteStatus: Sized + Clone + Resource {
    /// The object's `status.parents` (none without a status).
    fn parents(&self) -> Vec<RouteParentStatus>;
    /// Replaces `status.parents`.
    fn set_parents(&mut self, parents: Vec<RouteParentStatus>);
}

impl RouteStatus for StoredHttpRoute {
    fn parents(&self) -> Vec<RouteParentStatus> {
        self.status
            .as_ref()
            .map(|s| s.parents.to_vec())
            .unwrap_or_default()
    }

    fn set_parents(&mut self, parents: Vec<RouteParentStatus>) {
        self.status = Some(SharedStatus {
            parents: parents.into(),
        });
    }
}

/// TCPRoute and UDPRoute (our own types, `v1_6`) hold upstream's `RouteParentStatus` as the
/// HTTPRoute's copy already.
macro_rules! route_status_of_v1_6 {
    ($($route:ty),+) => {$(
        impl RouteStatus for $route {
            fn parents(&self) -> Vec<RouteParentStatus> {
                self.status.clone().unwrap_or_default().parents
            }

            fn set_parents(&mut self, parents: Vec<RouteParentStatus>) {
                self.status = Some(v1_6::RouteStatus { parents });
            }
        }

        impl StatusObject for $route {
            fn merge(&self, desired: &Desired, controller_name: &str, now: &Time) -> Merge<Self> {
                merge_route(self, desired, controller_name, now)
            }
        }
    )+};
}

route_status_of_v1_6!(TcpRoute, UdpRoute);

/// GRPCRoute and TLSRoute: the same fields as HTTPRoute's under other Rust names (kopium's
/// copies of upstream's one `RouteParentStatus`), converted field by field.
macro_rules! route_status_like_http {
    ($route:ty, $status:ident, $parents:ident, $parent_ref:ident) => {
        impl RouteStatus for $route {
            fn parents(&self) -> Vec<RouteParentStatus> {
                let parents = self.status.iter().flat_map(|s| &s.parents);
                parents
                    .map(|p| RouteParentStatus {
                        conditions: p.conditions.clone(),
                        controller_name: p.controller_name.clone(),
                        parent_ref: HttpRouteStatusParentsParentRef {
                            group: p.parent_ref.group.clone(),
                            kind: p.parent_ref.kind.clone(),
                            name: p.parent_ref.name.clone(),
                            namespace: p.parent_ref.namespace.clone(),
                            port: p.parent_ref.port,
                            section_name: p.parent_ref.section_name.clone(),
                        },
                    })
                    .collect()
            }

            fn set_parents(&mut self, parents: Vec<RouteParentStatus>) {
                let parents = parents.into_iter().map(|p| $parents {
                    conditions: p.conditions,
                    controller_name: p.controller_name,
                    parent_ref: $parent_ref {
                        group: p.parent_ref.group,
                        kind: p.parent_ref.kind,
                        name: p.parent_ref.name,
                        namespace: p.parent_ref.namespace,
                        port: p.parent_ref.port,
                        section_name: p.parent_ref.section_name,
                    },
                });
                self.status = Some($status {
                    parents: parents.collect(),
                });
            }
        }
    };
}

route_status_like_http!(
    GrpcRoute,
    GrpcRouteStatus,
    GrpcRouteStatusParents,
    GrpcRouteStatusParentsParentRef
);
route_status_like_http!(
    TlsRoute,
    TlsRouteStatus,
    TlsRouteStatusParents,
    TlsRouteStatusParentsParentRef
);

impl StatusObject for StoredHttpRoute {
    fn merge(&self, desired: &Desired, controller_name: &str, now: &Time) -> Merge<Self> {
        merge_route(self, desired, controller_name, now)
    }
}

impl StatusObject for GrpcRoute {
    fn merge(&self, desired: &Desired, controller_name: &str, now: &Time) -> Merge<Self> {
        merge_route(self, desired, controller_name, now)
    }
}

impl StatusObject for TlsRoute {
    fn merge(&self, desired: &Desired, controller_name: &str, now: &Time) -> Merge<Self> {
        merge_route(self, desired, controller_name, now)
    }
}

/// The one merge of every route kind's `status.parents`.
fn merge_route<R: RouteStatus>(
    route: &R,
    desired: &Desired,
    controller_name: &str,
    now: &Time,
) -> Merge<R> {
    let Desired::Route {
        generation,
        parents,
    } = desired
    else {
        return Merge::WrongKind;
    };
    merge_ours(
        route,
        *generation,
        parents,
        MAX_PARENTS,
        controller_name,
        now,
    )
}

/// Merges our entries (`parents`) into a list of entries keyed by reference and
/// `controllerName`, of which at most `max` fit: a route's `status.parents` or a policy's
/// `status.ancestors` (upstream's `PolicyAncestorStatus` has the `RouteParentStatus` shape).
fn merge_ours<R: RouteStatus>(
    route: &R,
    generation: i64,
    parents: &[RouteParentStatus],
    max: usize,
    controller_name: &str,
    now: &Time,
) -> Merge<R> {
    let have = route.parents();
    let ours = |p: &RouteParentStatus| p.controller_name == controller_name;
    let observed = observed(
        have.iter()
            .filter(|p| ours(p))
            .flat_map(|p| p.conditions.iter()),
    );
    decide(
        route,
        generation,
        observed,
        |next| {
            let others = have.iter().filter(|p| !ours(p)).count();
            let room = max.saturating_sub(others);
            let wanted = &parents[..parents.len().min(room)];
            let mut placed = vec![false; wanted.len()];
            let mut merged = Vec::with_capacity(have.len().max(others + wanted.len()));
            // Keep every entry where it stands: theirs untouched, ours updated or dropped.
            for p in &have {
                if !ours(p) {
                    merged.push(p.clone());
                    continue;
                }
                let Some(i) = wanted
                    .iter()
                    .enumerate()
                    .position(|(i, w)| !placed[i] && w.parent_ref == p.parent_ref)
                else {
                    continue;
                };
                placed[i] = true;
                merged.push(merge_parent(Some(p), &wanted[i], controller_name, now));
            }
            for (w, _) in wanted.iter().zip(&placed).filter(|(_, done)| !**done) {
                merged.push(merge_parent(None, w, controller_name, now));
            }
            next.set_parents(merged);
        },
        |a, b| a.parents() == b.parents(),
    )
}

fn merge_parent(
    before: Option<&RouteParentStatus>,
    want: &RouteParentStatus,
    controller_name: &str,
    now: &Time,
) -> RouteParentStatus {
    RouteParentStatus {
        conditions: merge_conditions(
            before.map(|b| b.conditions.as_slice()).unwrap_or_default(),
            &want.conditions,
            now,
        ),
        controller_name: controller_name.to_string(),
        parent_ref: want.parent_ref.clone(),
    }
}

#[cfg(test)]
mod tests;
