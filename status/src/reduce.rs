//! What the stores keep of each object: the parts the computation and the writer read
//! ([`Trim`]), and one copy of equal route statuses ([`Reducer`]; docs/architecture.md,
//! "Memory").

use std::sync::Arc;

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::listenersets::ListenerSet;
use gateway_api::referencegrants::ReferenceGrant;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::ObjectMeta;
use kube::Resource;

use crate::compute::shared::Shared;
use crate::desired::RouteParentStatus;
use crate::stored::StoredHttpRoute;
use crate::v1_6::{TcpRoute, UdpRoute};

/// What a kind's store can do without: parts of its objects that neither the computation nor
/// the writer reads. The writer sends the stored copy back whole, but to the `status`
/// subresource, which takes nothing but the status from it.
pub trait Trim {
    /// Drops what is not read.
    fn trim(&mut self) {}

    /// Makes parts equal to those of objects `reducer` saw before one copy.
    fn share(&mut self, _reducer: &mut Reducer) {}
}

/// Kinds whose objects are kept whole (but for `managedFields` and the annotations).
macro_rules! keep_whole {
    ($($kind:ty),+ $(,)?) => {$( impl Trim for $kind {} )+};
}

keep_whole!(
    GatewayClass,
    Gateway,
    ReferenceGrant,
    ListenerSet,
    BackendTlsPolicy,
    Service,
    Namespace,
);

/// What no route kind's status depends on in its metadata: its uid (the writer's
/// `resourceVersion` already tells a recreated object apart), labels, owners and finalizers.
/// Routes are the objects a cluster has by the tens of thousands.
fn trim_route_meta(meta: &mut ObjectMeta) {
    meta.uid = None;
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
}

/// A rule's matches decide which requests it serves, which no status says anything about; they
/// are often most of a route (docs/benchmarks.md, "Where the bytes go per route"). Of its filters
/// (rule and backendRef ones), only RequestMirror names a backend that ResolvedRefs checks;
/// its timeouts and name are not read either.
impl Trim for StoredHttpRoute {
    fn trim(&mut self) {
        trim_route_meta(&mut self.metadata);
        for rule in self.spec.rules.iter_mut().flatten() {
            rule.matches = None;
            rule.name = None;
            rule.timeouts = None;
            keep_mirrors(&mut rule.filters, |f| f.request_mirror.is_some());
            for backend in rule.backend_refs.iter_mut().flatten() {
                keep_mirrors(&mut backend.filters, |f| f.request_mirror.is_some());
            }
        }
    }

    /// Routes of a Gateway written in the same second have equal statuses.
    fn share(&mut self, reducer: &mut Reducer) {
        if let Some(status) = &mut self.status {
            reducer.share_parents(&mut status.parents);
        }
    }
}

impl Trim for GrpcRoute {
    fn trim(&mut self) {
        trim_route_meta(&mut self.metadata);
        for rule in self.spec.rules.iter_mut().flatten() {
            rule.matches = None;
            rule.name = None;
            keep_mirrors(&mut rule.filters, |f| f.request_mirror.is_some());
            for backend in rule.backend_refs.iter_mut().flatten() {
                keep_mirrors(&mut backend.filters, |f| f.request_mirror.is_some());
            }
        }
    }
}

/// Keeps the RequestMirror filters of `filters` (`mirror` tells them), the only ones read.
fn keep_mirrors<F>(filters: &mut Option<Vec<F>>, mirror: impl Fn(&F) -> bool) {
    if let Some(list) = filters {
        list.retain(mirror);
        if list.is_empty() {
            *filters = None;
        } else {
            list.shrink_to_fit();
        }
    }
}

/// TLSRoutes, TCPRoutes and UDPRoutes have nothing in their spec that is not read.
macro_rules! trim_route_meta_only {
    ($($kind:ty),+ $(,)?) => {$(
        impl Trim for $kind {
            fn trim(&mut self) {
                trim_route_meta(&mut self.metadata);
            }
        }
    )+};
}

trim_route_meta_only!(TlsRoute, TcpRoute, UdpRoute);

/// Reduces objects to what the stores keep of them: the computation and the writer read
/// neither `managedFields` (often the largest part of an object that many managers write) nor
/// the annotations (kubectl's copy of the last applied object is the big one), nor what
/// [`Trim`] drops; and of equal route statuses one copy is kept (docs/architecture.md,
/// "Memory"). Each watch has its own.
#[derive(Debug, Default)]
pub struct Reducer {
    statuses: Shared,
    /// How many distinct statuses were kept after the last prune.
    kept: usize,
    /// How many statuses were shared since.
    added: usize,
}

impl Reducer {
    /// Reduces `obj`.
    pub fn reduce<K: Resource + Trim>(&mut self, obj: &mut K) {
        let meta = obj.meta_mut();
        meta.managed_fields = None;
        meta.annotations = None;
        obj.trim();
        obj.share(self);
    }

    /// Makes `parents` the copy kept of equal entries, or keeps it as that copy.
    pub(crate) fn share_parents(&mut self, parents: &mut Arc<[RouteParentStatus]>) {
        self.statuses.share_parents(parents);
        self.added += 1;
        // Copies no route holds any more (changed or deleted since) are let go once as many
        // statuses went through as were kept after the last prune: O(1) a status, amortised.
        if self.added > self.kept.max(1024) {
            self.statuses.prune();
            self.kept = self.statuses.len();
            self.added = 0;
        }
    }

    /// How many distinct statuses are kept now.
    #[cfg(test)]
    fn distinct(&self) -> usize {
        self.statuses.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_route_keeps_everything_the_computation_reads() {
        let mut route: StoredHttpRoute = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "ns", "generation": 2, "uid": "u",
                         "creationTimestamp": "2026-12-03T19:00:00Z", "labels": {"a": "b"}},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["a.example.com"],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                "name": "first",
                                "backendRefs": [{"name": "web", "port": 80, "filters": [
                                    {"type": "RequestHeaderModifier",
                                     "requestHeaderModifier": {"set": [{"name": "a",
                                                                        "value": "b"}]}}]}],
                                "filters": [{"type": "RequestMirror",
                                             "requestMirror": {"backendRef": {"name": "m",
                                                                              "port": 80}}},
                                            {"type": "URLRewrite",
                                             "urlRewrite": {"hostname": "b.example.com"}}]}]},
            "status": {"parents": [{"controllerName": "x", "parentRef": {"name": "gw"},
                                    "conditions": []}]}
        }))
        .expect("route");
        let before = serde_json::to_value(&route).expect("json");
        route.trim();
        // The metadata the computation reads (name, namespace, generation, creationTimestamp
        // for precedence), parentRefs, hostnames, backendRefs, mirrors and the status stay.
        let mut expected = before;
        let meta = expected["metadata"].as_object_mut().expect("metadata");
        meta.remove("uid");
        meta.remove("labels");
        let rule = expected["spec"]["rules"][0]
            .as_object_mut()
            .expect("a rule");
        rule.remove("matches");
        rule.remove("name");
        rule["backendRefs"][0]
            .as_object_mut()
            .expect("a backendRef")
            .remove("filters");
        rule["filters"].as_array_mut().expect("filters").pop();
        assert_eq!(serde_json::to_value(&route).expect("json"), expected);
    }

    fn written(name: &str, second: u32) -> StoredHttpRoute {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "generation": 1,
                         "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"parentRefs": [{"name": "gw"}]},
            "status": {"parents": [{"controllerName": "x", "parentRef": {"name": "gw"},
                                    "conditions": [{"type": "Accepted", "status": "True",
                                                    "reason": "Accepted", "message": "",
                                                    "observedGeneration": 1,
                                                    "lastTransitionTime":
                                                        format!("2026-12-05T01:00:{second:02}Z")}]}]}
        }))
        .expect("route")
    }

    fn parents(route: &StoredHttpRoute) -> &Arc<[RouteParentStatus]> {
        &route.status.as_ref().expect("a status").parents
    }

    #[test]
    fn routes_with_equal_statuses_share_one_copy() {
        let mut reducer = Reducer::default();
        let mut routes: Vec<StoredHttpRoute> = vec![written("a", 1), written("b", 1)];
        routes.push(written("c", 2));
        for r in &mut routes {
            reducer.reduce(r);
        }
        assert!(Arc::ptr_eq(parents(&routes[0]), parents(&routes[1])));
        // Written a second later: a status of its own, and still the one it was.
        assert!(!Arc::ptr_eq(parents(&routes[0]), parents(&routes[2])));
        assert_eq!(parents(&routes[2])[..], parents(&written("c", 2))[..]);
        assert_eq!(routes[0].metadata.managed_fields, None);
        assert_eq!(reducer.distinct(), 2);
    }

    #[test]
    fn a_status_no_route_holds_is_let_go() {
        let mut reducer = Reducer::default();
        let mut gone = written("gone", 59);
        reducer.reduce(&mut gone);
        drop(gone);
        // Enough statuses go through to prune: the copy `kept` holds stays, the gone one not.
        let mut kept = written("kept", 1);
        reducer.reduce(&mut kept);
        for _ in 0..1024 {
            reducer.reduce(&mut written("passing", 1));
        }
        assert_eq!(reducer.distinct(), 1);
        assert_eq!(Arc::strong_count(parents(&kept)), 2);
    }
}
