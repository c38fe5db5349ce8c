//! Gateway API objects for the status writer's tests, and waits on what the replicas write.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::{HttpRoute, HttpRouteStatusParents};
use gateway_api::referencegrants::ReferenceGrant;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ManagedFieldsEntry};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use testkit::kube::KubeApiServer;

/// Generous: replicas, watches and a busy 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// The shared test apiserver with the Gateway API CRDs installed.
pub async fn apiserver() -> &'static KubeApiServer {
    let s = KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    s.install_gateway_api()
        .await
        .expect("the Gateway API CRDs are installed");
    s
}

/// The settings every replica of a test runs with: the Kubernetes lock, short timing.
pub fn replica_args(kubeconfig: &Path, ns: &str, controller: &str) -> Vec<String> {
    [
        "--lock-backend",
        "kubernetes",
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--leader-election-namespace",
        ns,
        "--leader-election-lock-name",
        &format!("{ns}-lock"),
        "--controller-name",
        controller,
        "--lease-duration",
        "3s",
        "--renew-deadline",
        "2s",
        "--retry-period",
        "1s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn from_json<T: DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

/// A GatewayClass for `controller`.
pub fn gateway_class(name: &str, controller: &str) -> GatewayClass {
    from_json(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
        "metadata": {"name": name},
        "spec": {"controllerName": controller}
    }))
}

/// A Gateway of `class` with one HTTP listener `http` on port 80 (routes from its namespace).
pub fn gateway(ns: &str, name: &str, class: &str) -> Gateway {
    from_json(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"gatewayClassName": class,
                 "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}
    }))
}

/// An HTTPRoute in `ns` attached to Gateway `gw` (same namespace), one rule to `backends`
/// given as `(namespace, name, port)`.
pub fn route(ns: &str, name: &str, gw: &str, backends: &[(&str, &str, i32)]) -> HttpRoute {
    let refs: Vec<_> = backends
        .iter()
        .map(|(bns, bname, port)| json!({"name": bname, "namespace": bns, "port": port}))
        .collect();
    from_json(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"name": gw}], "rules": [{"backendRefs": refs}]}
    }))
}

/// A GRPCRoute in `ns` attached to Gateway `gw` (same namespace), one rule to `backends`
/// given as `(namespace, name, port)`.
pub fn grpc_route(ns: &str, name: &str, gw: &str, backends: &[(&str, &str, i32)]) -> GrpcRoute {
    let mut v = serde_json::to_value(route(ns, name, gw, backends)).expect("json");
    v["kind"] = json!("GRPCRoute");
    from_json(v)
}

/// A TLSRoute in `ns` attached to `parent` (a parentRef), for `hostname`, to `backends` given
/// as `(namespace, name, port)`.
pub fn tls_route(
    ns: &str,
    name: &str,
    parent: serde_json::Value,
    hostname: &str,
    backends: &[(&str, &str, i32)],
) -> TlsRoute {
    let refs: Vec<_> = backends
        .iter()
        .map(|(bns, bname, port)| json!({"name": bname, "namespace": bns, "port": port}))
        .collect();
    from_json(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TLSRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [parent], "hostnames": [hostname],
                 "rules": [{"backendRefs": refs}]}
    }))
}

/// True when our `status.parents` entry on a route of any kind has condition `type_` with
/// `status` and `reason` (read through JSON: every route kind has the same status shape).
pub fn any_route_says<K: serde::Serialize>(
    r: &K,
    controller: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> bool {
    let v = serde_json::to_value(r).unwrap_or_default();
    v["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["controllerName"] == controller)
        .flat_map(|p| p["conditions"].as_array().cloned().unwrap_or_default())
        .any(|c| c["type"] == type_ && c["status"] == status && c["reason"] == reason)
}

/// A ClusterIP Service with one port.
pub fn service(ns: &str, name: &str, port: i32) -> Service {
    from_json(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": port}]}
    }))
}

/// A ReferenceGrant in `ns` letting HTTPRoutes of `from_ns` reference its Services.
pub fn grant_services(ns: &str, name: &str, from_ns: &str) -> ReferenceGrant {
    from_json(json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                           "namespace": from_ns}],
                 "to": [{"group": "", "kind": "Service"}]}
    }))
}

/// Creates `obj` (or replaces its spec when it exists) through `api`.
pub async fn put<K>(api: &Api<K>, obj: &K)
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj.meta().name.clone().expect("named");
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let mut body = serde_json::to_value(obj).expect("json");
            if let Some(m) = body.as_object_mut() {
                m.remove("status");
                m.remove("metadata");
            }
            api.patch(&name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .unwrap_or_else(|e| panic!("updating {name}: {e}"));
        }
        Err(e) => panic!("creating {name}: {e}"),
    }
}

/// A condition of `conditions` by type.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Our `status.parents` entry of a route, if any.
pub fn our_parent<'a>(r: &'a HttpRoute, controller: &str) -> Option<&'a HttpRouteStatusParents> {
    r.status
        .as_ref()?
        .parents
        .iter()
        .find(|p| p.controller_name == controller)
}

/// True when our entry on `r` has condition `type_` with `status` and `reason`.
pub fn route_says(
    r: &HttpRoute,
    controller: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> bool {
    our_parent(r, controller)
        .and_then(|p| condition(&p.conditions, type_))
        .is_some_and(|c| c.status == status && c.reason == reason)
}

/// Waits (on a watch) until `name` satisfies `cond`; panics after [`PATIENCE`].
pub async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, cond: impl Fn(&K) -> bool)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let waited = tokio::time::timeout(
        PATIENCE,
        await_condition(api.clone(), name, move |o: Option<&K>| o.is_some_and(&cond)),
    )
    .await;
    match waited {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("watching {name} for {what}: {e}"),
        Err(_) => {
            let now = api.get(name).await.ok();
            panic!("{name}: not {what} within {PATIENCE:?}; now: {now:#?}")
        }
    }
}

/// The managedFields entries of writes to the object's `/status` subresource that own fields
/// of its status.
fn status_entries<K: Resource>(o: &K) -> impl Iterator<Item = &ManagedFieldsEntry> {
    o.meta()
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.get("f:status").is_some())
        })
}

/// The field managers that wrote the object's status through its `/status` subresource.
pub fn status_managers<K: Resource>(o: &K) -> BTreeSet<String> {
    status_entries(o)
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// When `manager` last wrote the status of `o`: its managedFields entry's time, which the
/// apiserver sets on every write, in whole seconds.
pub fn last_status_write<K: Resource>(o: &K, manager: &str) -> Option<SystemTime> {
    status_entries(o)
        .filter(|m| m.manager.as_deref() == Some(manager))
        .filter_map(|m| m.time.as_ref())
        .filter_map(|t| u64::try_from(t.0.as_second()).ok())
        .map(|secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .max()
}

/// The field manager a replica named `name` writes statuses as.
pub fn manager_of(name: &str) -> String {
    format!("gateway-leader/{name}")
}

/// An admin client on the shared apiserver.
pub fn admin(s: &KubeApiServer) -> Client {
    s.admin_client()
}

/// A new namespace `ns` on the shared apiserver with GatewayClass `ns` for `controller`: the
/// start of every status test's scene, each in a namespace (and with a controller) of its own.
pub async fn namespace_with_class(ns: &str, controller: &str) -> Client {
    let s = apiserver().await;
    s.create_namespace(ns).await.expect("namespace");
    let client = admin(s);
    put(
        &Api::<GatewayClass>::all(client.clone()),
        &gateway_class(ns, controller),
    )
    .await;
    client
}

/// Gateway `gw` of class `ns`, Service `web` on `port` and HTTPRoute `route` on `gw` to it,
/// all in `ns`.
pub async fn gateway_and_route(client: &Client, ns: &str, port: i32) {
    put(
        &Api::<Gateway>::namespaced(client.clone(), ns),
        &gateway(ns, "gw", ns),
    )
    .await;
    put(
        &Api::<Service>::namespaced(client.clone(), ns),
        &service(ns, "web", port),
    )
    .await;
    put(
        &Api::<HttpRoute>::namespaced(client.clone(), ns),
        &route(ns, "route", "gw", &[(ns, "web", port)]),
    )
    .await;
}

/// The resourceVersion of `o`.
pub fn version<K: Resource>(o: &K) -> String {
    o.resource_version().unwrap_or_default()
}

/// `--kubeconfig` of the shared apiserver (with the CRDs): every replica writes statuses to
/// Kubernetes, whichever backend holds its lock.
pub async fn kubeconfig_args() -> Vec<String> {
    let s = apiserver().await;
    vec![
        "--kubeconfig".into(),
        s.kubeconfig_path().display().to_string(),
    ]
}

/// A BackendTLSPolicy in `ns` on Service `service` (and `section`, if any), validated by these
/// `caCertificateRefs` (a JSON list of `{group, kind, name}`).
pub fn backend_tls_policy(
    ns: &str,
    name: &str,
    service: &str,
    section: Option<&str>,
    ca_refs: serde_json::Value,
) -> gateway_api::backendtlspolicies::BackendTlsPolicy {
    let mut target = json!({"group": "", "kind": "Service", "name": service});
    if let Some(s) = section {
        target["sectionName"] = json!(s);
    }
    from_json(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"targetRefs": [target],
                 "validation": {"caCertificateRefs": ca_refs, "hostname": "abc.example.com"}}
    }))
}

/// A ConfigMap with this `ca.crt`.
pub fn ca_config_map(ns: &str, name: &str, ca_crt: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    from_json(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"ca.crt": ca_crt}
    }))
}

/// A self-signed CA certificate, PEM.
pub fn ca_pem() -> String {
    rcgen::generate_simple_self_signed(vec!["ca.example.com".into()])
        .expect("self-signed certificate")
        .cert
        .pem()
}

/// True when our `status.ancestors` entry for Gateway `gateway` on a policy has condition
/// `type_` with `status` and `reason`.
pub fn policy_says(
    p: &gateway_api::backendtlspolicies::BackendTlsPolicy,
    controller: &str,
    gateway: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> bool {
    p.status
        .iter()
        .flat_map(|s| &s.ancestors)
        .filter(|a| a.controller_name == controller && a.ancestor_ref.name == gateway)
        .filter(|a| a.ancestor_ref.kind.as_deref() == Some("Gateway"))
        .flat_map(|a| condition(&a.conditions, type_))
        .any(|c| c.status == status && c.reason == reason)
}

/// Each of `wanted` (type, status, reason) is among `conditions`, observed at `generation`; the
/// first that is not, otherwise.
pub fn has_conditions(
    conditions: &serde_json::Value,
    wanted: &[(&str, &str, &str)],
    generation: &serde_json::Value,
) -> Result<(), String> {
    for (type_, status, reason) in wanted {
        let c = conditions
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == *type_))
            .ok_or_else(|| format!("no {type_} condition in {conditions}"))?;
        if c["status"] != *status
            || c["reason"] != *reason
            || c["observedGeneration"] != *generation
        {
            return Err(format!(
                "{type_} is {} {} at generation {}, not {status} {reason} at {generation}: {c}",
                c["status"], c["reason"], c["observedGeneration"]
            ));
        }
    }
    Ok(())
}

/// The holder of Lease `ns/name` on the server ("" once released or when there is none).
pub async fn lease_holder(client: &Client, ns: &str, name: &str) -> String {
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("the apiserver answers")
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default()
}

/// Waits until the server says Lease `ns/name` is held by the replica whose identity is
/// `identity` (its holder is `<identity>_<incarnation>`); panics after `limit`.
pub async fn wait_lease_holder(
    client: &Client,
    ns: &str,
    name: &str,
    identity: &str,
    limit: Duration,
) {
    let until = std::time::Instant::now() + limit;
    let prefix = format!("{identity}_");
    loop {
        let now = lease_holder(client, ns, name).await;
        if now.starts_with(&prefix) {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "Lease {name} not held by {identity} within {limit:?} (held by {now:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
