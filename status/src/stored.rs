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
//!
//! One field of the spec is read that the crate (0.22, Gateway API v1.5.1) does not have: a
//! rule's `retry`, standard since Gateway API v1.7.0. Of it only whether `backoff` is set is kept
//! ([`StoredHttpRoute::retry_backoff`]); the route engine says why (`compute/route.rs`).

use std::borrow::Cow;
use std::sync::Arc;

use gateway_api::httproutes::{HttpRoute, HttpRouteRules, HttpRouteSpec, HttpRouteStatus};
use kube::api::ObjectMeta;
use kube::core::NamespaceResourceScope;
use kube::Resource;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::desired::RouteParentStatus;

/// An HTTPRoute as the status writer's store keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoredHttpRoute {
    /// The route's metadata (what [`crate::Trim`] leaves of it).
    pub metadata: ObjectMeta,
    /// The route's spec.
    pub spec: HttpRouteSpec,
    /// The route's status, shared with the routes whose status is equal.
    pub status: Option<SharedStatus>,
    /// The index of the first rule whose `retry` sets `backoff` (`spec.rules[].retry.backoff`,
    /// Gateway API v1.7.0 standard channel), which the crate's spec type cannot hold. Not sent
    /// back: the writer sends only the status.
    pub retry_backoff: Option<u8>,
}

/// The route as the apiserver sends it: the crate's spec, and of each rule's `retry` what
/// [`StoredHttpRoute::retry_backoff`] keeps. `rules` is read here and the rest of the spec by the
/// crate's type (which then has no rules of its own; they are put back below).
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    metadata: ObjectMeta,
    spec: IncomingSpec,
    #[serde(default)]
    status: Option<SharedStatus>,
}

#[derive(Deserialize)]
struct IncomingSpec {
    #[serde(default)]
    rules: Option<Vec<IncomingRule>>,
    #[serde(flatten)]
    rest: HttpRouteSpec,
}

#[derive(Deserialize)]
struct IncomingRule {
    #[serde(default)]
    retry: Option<IncomingRetry>,
    #[serde(flatten)]
    rest: HttpRouteRules,
}

/// A rule's `retry`: only `backoff` is read (`codes` and `attempts` change no status).
#[derive(Deserialize)]
struct IncomingRetry {
    #[serde(default)]
    backoff: Option<String>,
}

impl<'de> Deserialize<'de> for StoredHttpRoute {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Incoming {
            metadata,
            spec,
            status,
        } = Incoming::deserialize(deserializer)?;
        let mut retry_backoff = None;
        let rules = spec.rules.map(|rules| {
            rules
                .into_iter()
                .enumerate()
                .map(|(i, rule)| {
                    if retry_backoff.is_none() && rule.retry.is_some_and(|r| r.backoff.is_some()) {
                        // The CRD allows 16 rules; a longer list (never served) names the last.
                        retry_backoff = Some(u8::try_from(i).unwrap_or(u8::MAX));
                    }
                    rule.rest
                })
                .collect()
        });
        Ok(StoredHttpRoute {
            metadata,
            spec: HttpRouteSpec { rules, ..spec.rest },
            status,
            retry_backoff,
        })
    }
}

/// An HTTPRoute's `status`, its entries shared.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SharedStatus {
    /// `status.parents`.
    pub parents: Arc<[RouteParentStatus]>,
}

/// The crate's type has no `retry`: the copy has no `retry_backoff`.
impl From<HttpRoute> for StoredHttpRoute {
    fn from(route: HttpRoute) -> Self {
        StoredHttpRoute {
            metadata: route.metadata,
            spec: route.spec,
            status: route.status.map(|s| SharedStatus {
                parents: s.parents.into(),
            }),
            retry_backoff: None,
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
    fn a_rules_retry_backoff_is_kept_and_the_rest_of_the_spec_read_as_the_crate_reads_it() {
        let mut v = route_json();
        v["spec"]["rules"] = json!([
            {"backendRefs": [{"name": "a", "port": 80}], "retry": {"codes": [503], "attempts": 2}},
            {"name": "slow", "backendRefs": [{"name": "b", "port": 80}],
             "retry": {"attempts": 3, "backoff": "100ms"}},
            {"retry": {"backoff": "1s"}}
        ]);
        let stored: StoredHttpRoute = serde_json::from_value(v.clone()).expect("stored");
        assert_eq!(
            stored.retry_backoff,
            Some(1),
            "the first rule that sets backoff"
        );
        let crate_type: HttpRoute = serde_json::from_value(v).expect("route");
        assert_eq!(
            stored.spec, crate_type.spec,
            "nothing else of the spec is lost"
        );
        assert_eq!(stored.spec.rules.as_ref().map(Vec::len), Some(3));

        // Codes and attempts alone, or no retry at all: nothing kept.
        let stored: StoredHttpRoute = serde_json::from_value(route_json()).expect("stored");
        assert_eq!(stored.retry_backoff, None);
        let mut v = route_json();
        v["spec"]["rules"][0]["retry"] = json!({"codes": [500, 502], "attempts": 0});
        let stored: StoredHttpRoute = serde_json::from_value(v).expect("stored");
        assert_eq!(stored.retry_backoff, None);
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
