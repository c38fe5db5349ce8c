//! Computing each kind's desired status from what the watches see; pure functions, no I/O.
//!
//! Every replica runs this, leader or not, so a new leader has the latest statuses at hand.
//!
//! One pass per kind, each building on the last: GatewayClasses decide which Gateways are ours,
//! then each Gateway's listeners are judged. ReferenceGrants are looked up through an index
//! built once, so a computation visits each object about once. Objects without a name (or a
//! namespace, where one is due) are skipped; a missing `metadata.generation` counts as 0.
//! Nothing here panics on any input.
//!
//! Deliberately not covered: ListenerSets, the Gateway-level `tls` block and its
//! `ResolvedRefs` condition, and route kinds other than HTTPRoute.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{Namespace, Service};

use crate::status::desired::Desired;
use crate::status::key::ObjectKey;

mod gateway;
mod gatewayclass;
mod hostname;
mod index;
mod listener;
mod reason;
mod refs;
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
    /// All Services (backendRefs resolve against them).
    pub services: Vec<Arc<Service>>,
    /// All ReferenceGrants (cross-namespace backendRefs and certificateRefs need one).
    pub reference_grants: Vec<Arc<ReferenceGrant>>,
    /// All Namespaces (listeners' `allowedRoutes.namespaces.selector` matches their labels).
    pub namespaces: Vec<Arc<Namespace>>,
    /// The `gateway.networking.k8s.io/bundle-version` annotation of the installed GatewayClass
    /// CRD, when it could be read.
    pub bundle_version: Option<String>,
}

/// Every status this controller wants, keyed by object.
pub fn compute(world: &World, controller_name: &str) -> BTreeMap<ObjectKey, Desired> {
    let mut out = BTreeMap::new();
    let index = index::Index::new(world);
    let classes = gatewayclass::compute(world, controller_name, &mut out);
    let gateways = gateway::analyse(world, &classes, &index);
    gateway::emit(gateways, &mut out);
    out
}
