//! Builders for the computation's tests: objects as a cluster would hold them, written as JSON
//! so they read like the manifests they stand for.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::{Gateway, GatewayStatusListeners};
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRouteStatusParents;
use gateway_api::referencegrants::ReferenceGrant;
use gateway_api::tlsroutes::TlsRoute;

use crate::stored::StoredHttpRoute;
use crate::v1_6::{TcpRoute, UdpRoute};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::World;
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};
use crate::secret::{Content, TlsSecret};

/// Our controllerName.
pub(crate) const CONTROLLER: &str = "example.com/gateway-leader";
/// The name of our GatewayClass in [`world`].
pub(crate) const CLASS: &str = "ours";
/// Generation of every Gateway built here.
pub(crate) const GATEWAY_GENERATION: i64 = 2;
/// Generation of every HTTPRoute built here.
pub(crate) const ROUTE_GENERATION: i64 = 4;

/// Everything computed, by key.
pub(crate) type Out = BTreeMap<ObjectKey, Desired>;

fn from<T: DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("test object deserializes"))
}

/// A world with our GatewayClass, namespaces `infra` and `apps` (label `team: a`), a usable
/// TLS Secret `infra/cert`, and the supported bundle version.
pub(crate) fn world() -> World {
    World {
        gateway_classes: vec![class(CLASS, CONTROLLER)],
        namespaces: vec![
            namespace("infra", json!({})),
            namespace("apps", json!({"team": "a"})),
        ],
        secrets: vec![secret("infra", "cert", Content::Usable)],
        bundle_version: Some("v1.5.1".into()),
        ..World::default()
    }
}

/// A GatewayClass of `controller`.
pub(crate) fn class(name: &str, controller: &str) -> Arc<GatewayClass> {
    from(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": {"name": name, "generation": 3},
        "spec": {"controllerName": controller},
    }))
}

/// A Gateway of class [`CLASS`] with these listeners.
pub(crate) fn gateway(namespace: &str, name: &str, listeners: Value) -> Arc<Gateway> {
    gateway_with(
        namespace,
        name,
        json!({"gatewayClassName": CLASS, "listeners": listeners}),
    )
}

/// A Gateway with this spec.
pub(crate) fn gateway_with(namespace: &str, name: &str, spec: Value) -> Arc<Gateway> {
    from(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"namespace": namespace, "name": name, "generation": GATEWAY_GENERATION},
        "spec": spec,
    }))
}

/// An HTTP listener without hostname; routes from the Gateway's namespace.
pub(crate) fn http(name: &str, port: i32) -> Value {
    json!({"name": name, "port": port, "protocol": "HTTP"})
}

/// An HTTP listener admitting routes from every namespace.
pub(crate) fn http_from_all(name: &str, port: i32) -> Value {
    json!({"name": name, "port": port, "protocol": "HTTP",
           "allowedRoutes": {"namespaces": {"from": "All"}}})
}

/// An HTTPRoute with this spec.
pub(crate) fn route(namespace: &str, name: &str, spec: Value) -> Arc<StoredHttpRoute> {
    route_with_status(namespace, name, spec, Value::Null)
}

/// An HTTPRoute with this spec and status.
pub(crate) fn route_with_status(
    namespace: &str,
    name: &str,
    spec: Value,
    status: Value,
) -> Arc<StoredHttpRoute> {
    from(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"namespace": namespace, "name": name, "generation": ROUTE_GENERATION},
        "spec": spec,
        "status": status,
    }))
}

/// A GRPCRoute with this spec.
pub(crate) fn grpc_route(namespace: &str, name: &str, spec: Value) -> Arc<GrpcRoute> {
    from(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GRPCRoute",
        "metadata": {"namespace": namespace, "name": name, "generation": ROUTE_GENERATION},
        "spec": spec,
    }))
}

/// A TLSRoute with this spec.
pub(crate) fn tls_route(namespace: &str, name: &str, spec: Value) -> Arc<TlsRoute> {
    from(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "TLSRoute",
        "metadata": {"namespace": namespace, "name": name, "generation": ROUTE_GENERATION},
        "spec": spec,
    }))
}

/// A TCPRoute with this spec.
pub(crate) fn tcp_route(namespace: &str, name: &str, spec: Value) -> Arc<TcpRoute> {
    from(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "TCPRoute",
        "metadata": {"namespace": namespace, "name": name, "generation": ROUTE_GENERATION},
        "spec": spec,
    }))
}

/// A UDPRoute with this spec.
pub(crate) fn udp_route(namespace: &str, name: &str, spec: Value) -> Arc<UdpRoute> {
    from(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "UDPRoute",
        "metadata": {"namespace": namespace, "name": name, "generation": ROUTE_GENERATION},
        "spec": spec,
    }))
}

/// A TLS Passthrough listener (TLSRoutes from its namespace).
pub(crate) fn tls_passthrough(name: &str, port: i32, hostname: &str) -> Value {
    json!({"name": name, "port": port, "protocol": "TLS", "hostname": hostname,
           "tls": {"mode": "Passthrough"}})
}

/// A route spec with these parentRefs and one rule forwarding to these backendRefs.
pub(crate) fn route_spec(parent_refs: Value, backend_refs: Value) -> Value {
    json!({"parentRefs": parent_refs, "rules": [{"backendRefs": backend_refs}]})
}

/// A Service with these ports.
pub(crate) fn service(namespace: &str, name: &str, ports: &[i32]) -> Arc<Service> {
    let ports: Vec<Value> = ports.iter().map(|p| json!({"port": p})).collect();
    from(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"ports": ports},
    }))
}

/// A Service with these named ports.
pub(crate) fn named_service(namespace: &str, name: &str, ports: &[(&str, i32)]) -> Arc<Service> {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| json!({"name": n, "port": p}))
        .collect();
    from(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"ports": ports},
    }))
}

/// A Namespace with these labels.
pub(crate) fn namespace(name: &str, labels: Value) -> Arc<Namespace> {
    from(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }))
}

/// A Secret as the Secret watch reduces it, with this outcome of the certificate check.
pub(crate) fn secret(namespace: &str, name: &str, content: Content) -> Arc<TlsSecret> {
    Arc::new(TlsSecret {
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        resource_version: Some("1".into()),
        uid: None,
        content,
    })
}

/// A ReferenceGrant with this spec.
pub(crate) fn grant(namespace: &str, name: &str, spec: Value) -> Arc<ReferenceGrant> {
    from(json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"namespace": namespace, "name": name},
        "spec": spec,
    }))
}

/// (type, status, reason) of each condition, in order.
pub(crate) fn summary(conditions: &[Condition]) -> Vec<(String, String, String)> {
    conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

/// An owned (type, status, reason).
pub(crate) fn tsr(type_: &str, status: &str, reason: &str) -> (String, String, String) {
    (type_.into(), status.into(), reason.into())
}

/// The condition of `type_` in a GatewayClass's or Gateway's desired conditions.
pub(crate) fn condition_of<'a>(out: &'a Out, key: &ObjectKey, type_: &str) -> &'a Condition {
    let conditions = match out.get(key) {
        Some(Desired::GatewayClass { conditions, .. } | Desired::Gateway { conditions, .. }) => {
            conditions
        }
        other => panic!("no GatewayClass or Gateway status for {key}: {other:?}"),
    };
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("{key} has no {type_} condition"))
}

/// The Gateway's desired conditions and listeners.
pub(crate) fn gateway_status<'a>(
    out: &'a Out,
    namespace: &str,
    name: &str,
) -> (&'a [Condition], &'a [GatewayStatusListeners]) {
    match out.get(&ObjectKey::namespaced(Kind::Gateway, namespace, name)) {
        Some(Desired::Gateway {
            conditions,
            listeners,
            ..
        }) => (conditions, listeners),
        other => panic!("no Gateway status for {namespace}/{name}: {other:?}"),
    }
}

/// The Gateway's (type, status, reason) of `type_`.
pub(crate) fn gateway_condition(
    out: &Out,
    namespace: &str,
    name: &str,
    type_: &str,
) -> (String, String, String) {
    let (conditions, _) = gateway_status(out, namespace, name);
    summary(conditions)
        .into_iter()
        .find(|c| c.0 == type_)
        .unwrap_or_else(|| panic!("Gateway {namespace}/{name} has no {type_}"))
}

/// One listener's status entry.
pub(crate) fn listener<'a>(
    out: &'a Out,
    namespace: &str,
    gateway: &str,
    name: &str,
) -> &'a GatewayStatusListeners {
    gateway_status(out, namespace, gateway)
        .1
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no listener {name} on {namespace}/{gateway}"))
}

/// A listener's (type, status, reason) of `type_`.
pub(crate) fn listener_condition(
    out: &Out,
    namespace: &str,
    gateway: &str,
    name: &str,
    type_: &str,
) -> (String, String, String) {
    summary(&listener(out, namespace, gateway, name).conditions)
        .into_iter()
        .find(|c| c.0 == type_)
        .unwrap_or_else(|| panic!("listener {name} has no {type_}"))
}

/// The HTTPRoute's desired `status.parents` entries of ours.
pub(crate) fn route_parents<'a>(
    out: &'a Out,
    namespace: &str,
    name: &str,
) -> &'a [HttpRouteStatusParents] {
    parents_of(out, Kind::HttpRoute, namespace, name)
}

/// The desired `status.parents` entries of ours of a route of any kind.
pub(crate) fn parents_of<'a>(
    out: &'a Out,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> &'a [HttpRouteStatusParents] {
    match out.get(&ObjectKey::namespaced(kind, namespace, name)) {
        Some(Desired::Route { parents, .. }) => parents,
        other => panic!("no {kind} status for {namespace}/{name}: {other:?}"),
    }
}

/// (status, reason) of `type_` in the only parent entry of a route of any kind.
pub(crate) fn condition_on(
    out: &Out,
    kind: Kind,
    namespace: &str,
    name: &str,
    type_: &str,
) -> (String, String) {
    let parents = parents_of(out, kind, namespace, name);
    assert_eq!(parents.len(), 1, "expected one parent entry: {parents:?}");
    let c = parents[0]
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} on {kind} {namespace}/{name}"));
    (c.status.clone(), c.reason.clone())
}

/// (status, reason) of `type_` in the route's only parent entry.
pub(crate) fn route_condition(
    out: &Out,
    namespace: &str,
    name: &str,
    type_: &str,
) -> (String, String) {
    condition_on(out, Kind::HttpRoute, namespace, name, type_)
}

/// The message of `type_` in the route's only parent entry.
pub(crate) fn route_message(out: &Out, namespace: &str, name: &str, type_: &str) -> String {
    route_parents(out, namespace, name)[0]
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// An owned (status, reason).
pub(crate) fn sr(status: &str, reason: &str) -> (String, String) {
    (status.into(), reason.into())
}
