//! The store's copy of an HTTPRoute: the gateway-api crate's spec, and `status.parents` held
//! once for every route whose entries are equal (docs/architecture.md, "Memory").
//!
//! HTTPRoutes are the objects a cluster has by the tens of thousands, and of a stored route the
//! largest part was its status as this controller wrote it: on every route of a Gateway the same
//! conditions, reasons and messages, apart only by the second each was written in. The watch's
//! [`crate::Reducer`] makes equal statuses one copy as they arrive.
//!
//! The JSON is the HTTPRoute's own (`apiVersion`, `kind`, `metadata`, `spec`, `status`), so the
//! watch reads it and the writer sends it back to the `status` subresource as it would the
//! crate's type.

use std::borrow::Cow;
use std::sync::Arc;

use gateway_api::httproutes::{HttpRoute, HttpRouteSpec, HttpRouteStatus};
use kube::api::ObjectMeta;
use kube::core::NamespaceResourceScope;
use kube::Resource;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use crate::desired::RouteParentStatus;

/// An HTTPRoute as the status writer's store keeps it.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct StoredHttpRoute {
    /// The route's metadata (what [`crate::Trim`] leaves of it).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The route's spec.
    pub spec: HttpRouteSpec,
    /// The route's status, shared with the routes whose status is equal.
    #[serde(default)]
    pub status: Option<SharedStatus>,
}

/// An HTTPRoute's `status`, its entries shared.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SharedStatus {
    /// `status.parents`.
    pub parents: Arc<[RouteParentStatus]>,
}

impl From<HttpRoute> for StoredHttpRoute {
    fn from(route: HttpRoute) -> Self {
        StoredHttpRoute {
            metadata: route.metadata,
            spec: route.spec,
            status: route.status.map(|s| SharedStatus {
                parents: s.parents.into(),
            }),
        }
    }
}

impl From<StoredHttpRoute> for HttpRoute {
    fn from(route: StoredHttpRoute) -> Self {
        HttpRoute {
            metadata: route.metadata,
            spec: route.spec,
            status: route.status.map(|s| HttpRouteStatus {
                parents: s.parents.to_vec(),
            }),
        }
    }
}

impl Serialize for StoredHttpRoute {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = if self.status.is_some() { 5 } else { 4 };
        let mut s = serializer.serialize_struct("HTTPRoute", fields)?;
        s.serialize_field("apiVersion", &Self::api_version(&()))?;
        s.serialize_field("kind", &Self::kind(&()))?;
        s.serialize_field("metadata", &self.metadata)?;
        s.serialize_field("spec", &self.spec)?;
        if let Some(status) = &self.status {
            s.serialize_field("status", status)?;
        }
        s.end()
    }
}

impl Resource for StoredHttpRoute {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        HttpRoute::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        HttpRoute::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        HttpRoute::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        HttpRoute::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route_json() -> serde_json::Value {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"parentRefs": [{"name": "gw"}],
                     "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]},
            "status": {"parents": [{"controllerName": "x", "parentRef": {"name": "gw"},
                                    "conditions": [{"type": "Accepted", "status": "True",
                                                    "reason": "Accepted", "message": "",
                                                    "lastTransitionTime": "2026-12-05T01:00:00Z",
                                                    "observedGeneration": 1}]}]}
        })
    }

    #[test]
    fn the_stored_copy_reads_and_writes_the_routes_own_json() {
        let stored: StoredHttpRoute = serde_json::from_value(route_json()).expect("stored");
        let crate_type: HttpRoute = serde_json::from_value(route_json()).expect("route");
        assert_eq!(
            serde_json::to_value(&stored).expect("json"),
            serde_json::to_value(&crate_type).expect("json")
        );
        assert_eq!(HttpRoute::from(stored.clone()), crate_type);
        assert_eq!(StoredHttpRoute::from(crate_type), stored);
    }

    #[test]
    fn a_route_without_a_status_is_sent_without_one() {
        let mut v = route_json();
        v.as_object_mut().expect("object").remove("status");
        let stored: StoredHttpRoute = serde_json::from_value(v.clone()).expect("stored");
        assert_eq!(stored.status, None);
        assert_eq!(serde_json::to_value(&stored).expect("json"), v);
    }
}
