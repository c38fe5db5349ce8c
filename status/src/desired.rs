//! The status this controller wants an object to have: its own part only.
//!
//! A desired status carries the generation it was computed from and our conditions with
//! `observedGeneration` set to it. Its conditions' `lastTransitionTime` is a placeholder
//! ([`placeholder_time`]): the merge keeps the object's time when a condition's status did not
//! change and stamps the write time when it did, so two computations of the same spec compare
//! equal.

use std::sync::Arc;

use gateway_api::gatewayclasses::GatewayClassStatusSupportedFeatures;
use gateway_api::gateways::{GatewayStatusAddresses, GatewayStatusListeners};
use gateway_api::httproutes::HttpRouteStatusParents;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// What we want one object's status to say.
#[derive(Debug, Clone, PartialEq)]
pub enum Desired {
    /// A GatewayClass whose `controllerName` is ours: Accepted, SupportedVersion and the
    /// supported features.
    GatewayClass {
        /// `metadata.generation` the conditions were computed from.
        generation: i64,
        /// Our conditions, merged by type into `status.conditions`.
        conditions: Vec<Condition>,
        /// `status.supportedFeatures`, sorted by name; replaces the field (a class has one
        /// controller, so the whole list is ours).
        supported_features: Vec<GatewayClassStatusSupportedFeatures>,
    },
    /// A Gateway of one of our classes.
    Gateway {
        /// `metadata.generation` the status was computed from.
        generation: i64,
        /// Accepted and Programmed, merged by type into `status.conditions`.
        conditions: Vec<Condition>,
        /// One entry per listener of the spec, in spec order; replaces `status.listeners`.
        listeners: Vec<GatewayStatusListeners>,
        /// `status.attachedListenerSets`; `None` leaves the field as it is (set only on a
        /// Gateway with `spec.allowedListeners`, whose CRD therefore knows the field).
        attached_listener_sets: Option<i32>,
        /// `status.addresses`, replacing the field (emptied when empty); `None` leaves it as it
        /// is (no Service gives Gateways their addresses, so none are ours to say).
        addresses: Option<Vec<GatewayStatusAddresses>>,
    },
    /// A ListenerSet whose parent is one of our Gateways.
    ListenerSet {
        /// `metadata.generation` the status was computed from.
        generation: i64,
        /// Accepted and Programmed, merged by type into `status.conditions`.
        conditions: Vec<Condition>,
        /// One entry per listener of the spec, in spec order; replaces `status.listeners`
        /// (a ListenerSet's listener status has the Gateway listener's shape).
        listeners: Vec<GatewayStatusListeners>,
    },
    /// A route (HTTPRoute, GRPCRoute or TLSRoute: the key says which) that names one of our
    /// Gateways, or still carries an entry of ours.
    Route {
        /// `metadata.generation` the entries were computed from.
        generation: i64,
        /// Our `status.parents` entries (each with our `controllerName`), in spec order. Entries
        /// of ours not listed here are removed; other controllers' entries are never touched.
        ///
        /// Shared: routes whose entries are the same (most routes of a Gateway, whose
        /// conditions say the same at the same generation) hold one copy
        /// ([`crate::compute::Computation`] shares them).
        parents: Arc<[RouteParentStatus]>,
    },
    /// A BackendTLSPolicy that reaches one of our Gateways, or still carries an entry of ours.
    Policy {
        /// `metadata.generation` the entries were computed from.
        generation: i64,
        /// Our `status.ancestors` entries (each with our `controllerName`), one per Gateway.
        /// Entries of ours not listed here are removed; other controllers' entries are never
        /// touched.
        ancestors: Vec<PolicyAncestorStatus>,
    },
}

impl Desired {
    /// The generation this status was computed from.
    pub fn generation(&self) -> i64 {
        match self {
            Desired::GatewayClass { generation, .. }
            | Desired::Gateway { generation, .. }
            | Desired::ListenerSet { generation, .. }
            | Desired::Route { generation, .. }
            | Desired::Policy { generation, .. } => *generation,
        }
    }
}

/// One `status.parents` entry of any route kind. Upstream has one type for every route kind
/// (`RouteParentStatus`, `apis/v1/shared_types.go`); the gateway-api crate generates a copy per
/// kind, all alike, and the HTTPRoute one stands for all here.
pub(crate) type RouteParentStatus = HttpRouteStatusParents;

/// One `status.ancestors` entry of a policy. Upstream's `PolicyAncestorStatus`
/// (`apis/v1/policy_types.go`) has the same fields as `RouteParentStatus`: its `ancestorRef` is
/// a `ParentReference`, its conditions and `controllerName` alike; so one shape, and one merge,
/// serves both.
pub(crate) type PolicyAncestorStatus = RouteParentStatus;

/// The `lastTransitionTime` of a computed condition before the merge sets the real one.
pub(crate) fn placeholder_time() -> Time {
    Time(Timestamp::UNIX_EPOCH)
}

/// A computed condition: `observedGeneration` set, time left to the merge.
pub(crate) fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: i64,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time: placeholder_time(),
    }
}
