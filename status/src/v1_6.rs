//! The Gateway API v1.6 kinds the `gateway-api` crate does not have yet: TCPRoute and UDPRoute
//! at `gateway.networking.k8s.io/v1` (standard channel since v1.6.0; the crate's 0.22 release
//! follows v1.5.1 and has them only at `v1alpha2`, experimental).
//!
//! Only what the status writer reads and writes is modelled: parentRefs, the rules' backendRefs
//! and `status.parents`, whose entries have upstream's one `RouteParentStatus` shape (the crate's
//! HTTPRoute copy stands for it, as for every route kind here). Fields not modelled are never
//! lost: a write goes to the `status` subresource, which takes only the status. The shapes
//! follow upstream v1.6.1 `apis/v1/tcproute_types.go` and `udproute_types.go`
//! (`CommonRouteSpec`, `BackendRef` in `shared_types.go`).
//!
//! When the crate catches up, this module goes and its users import the crate's types.

use gateway_api::httproutes::HttpRouteStatusParents;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// A `ParentReference` (upstream `apis/v1/shared_types.go`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// The referent's API group (default `gateway.networking.k8s.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The referent's kind (default `Gateway`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The referent's name.
    pub name: String,
    /// The referent's namespace (default: the route's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The listener port the route attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// The listener the route attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// A `BackendRef` (upstream `apis/v1/shared_types.go`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    /// The referent's API group (default: core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The referent's kind (default `Service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The referent's name.
    pub name: String,
    /// The referent's namespace (default: the route's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The destination port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// The share of traffic this backend gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// A rule of a TCPRoute or UDPRoute: a name and its backends.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct L4RouteRule {
    /// The rule's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where the traffic goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_refs: Option<Vec<BackendRef>>,
}

/// A route's `status` (upstream `RouteStatus`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// One entry per parent and controller.
    #[serde(default)]
    pub parents: Vec<HttpRouteStatusParents>,
}

/// A spec of TCPRoute or UDPRoute (upstream `TCPRouteSpec`, `UDPRouteSpec`: the same fields),
/// with the kind's root type.
macro_rules! l4_route {
    ($spec:ident, $root:literal, $kind:literal, $plural:literal, $what:literal) => {
        #[doc = concat!("The spec of a ", $kind, " (`gateway.networking.k8s.io/v1`).")]
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
        #[kube(group = "gateway.networking.k8s.io", version = "v1", kind = $kind, root = $root)]
        #[kube(plural = $plural, namespaced, status = "RouteStatus", schema = "disabled")]
        #[kube(derive = "Default", derive = "PartialEq")]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            /// The Gateways (or ListenerSets) the route attaches to.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub parent_refs: Option<Vec<ParentReference>>,
            #[doc = concat!("The rules: where the ", $what, " goes.")]
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub rules: Option<Vec<L4RouteRule>>,
        }
    };
}

l4_route!(
    TcpRouteSpec,
    "TcpRoute",
    "TCPRoute",
    "tcproutes",
    "TCP traffic"
);
l4_route!(
    UdpRouteSpec,
    "UdpRoute",
    "UDPRoute",
    "udproutes",
    "UDP traffic"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_tcp_route_reads_and_keeps_its_parents_status() {
        let v = serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"parentRefs": [{"name": "gw", "sectionName": "tcp", "port": 9000}],
                     "rules": [{"name": "a", "backendRefs": [{"name": "b", "port": 80}]}],
                     "useDefaultGateways": "All"},
            "status": {"parents": [{"controllerName": "x", "parentRef": {"name": "gw"},
                                    "conditions": []}]}
        });
        let r: TcpRoute = serde_json::from_value(v).expect("a TCPRoute");
        let p = &r.spec.parent_refs.as_deref().expect("parentRefs")[0];
        assert_eq!(
            (p.section_name.as_deref(), p.port),
            (Some("tcp"), Some(9000))
        );
        assert_eq!(r.status.expect("status").parents[0].controller_name, "x");
        let u: UdpRoute = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "UDPRoute",
            "metadata": {"name": "u", "namespace": "ns"}, "spec": {}
        }))
        .expect("a UDPRoute without parents");
        assert!(u.spec.parent_refs.is_none() && u.status.is_none());
    }
}
