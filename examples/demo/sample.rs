//! The sample: the objects whose statuses the demo shows, and the changes it makes to them.

use std::fmt::Display;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_leader_log::Event;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use testkit::replica::Line;

use crate::status::await_object;
use crate::{CONTROLLER, MANAGED_BY, MISSING_SERVICE, NS, OTHER_NS, TLS_SECRET};

/// One object of the sample whose status the demo shows.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// As the replicas log it (the `kind` of
    /// [`message::WRITTEN`](gateway_leader_log::message::WRITTEN)).
    pub kind: &'static str,
    pub namespace: Option<&'static str>,
    pub name: &'static str,
}

pub const CLASS: Key = Key {
    kind: "GatewayClass",
    namespace: None,
    name: "gateway-leader-demo",
};
pub const GATEWAY: Key = Key {
    kind: "Gateway",
    namespace: Some(NS),
    name: "web",
};
pub const VALID: Key = Key {
    kind: "HTTPRoute",
    namespace: Some(NS),
    name: "valid",
};
pub const MISSING: Key = Key {
    kind: "HTTPRoute",
    namespace: Some(NS),
    name: "missing-backend",
};
pub const CROSS: Key = Key {
    kind: "HTTPRoute",
    namespace: Some(OTHER_NS),
    name: "cross-namespace",
};
pub const GRPC: Key = Key {
    kind: "GRPCRoute",
    namespace: Some(NS),
    name: "grpc",
};
pub const TABLE: [Key; 6] = [CLASS, GATEWAY, VALID, MISSING, CROSS, GRPC];

impl Key {
    pub fn object(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.to_string(),
        }
    }

    /// A [`message::WRITTEN`](gateway_leader_log::message::WRITTEN) line about this object.
    pub fn written_by(&self, line: &Line) -> bool {
        matches!(&line.event, Some(Event::Written { object_kind, namespace, name, .. })
            if object_kind == self.kind
                && namespace == self.namespace.unwrap_or_default()
                && name == self.name)
    }
}

impl Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.object())
    }
}

pub async fn create<K>(api: &Api<K>, value: Value) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let what = format!(
        "{} {}",
        value["kind"].as_str().unwrap_or("object"),
        value["metadata"]["name"].as_str().unwrap_or("?")
    );
    let obj: K = serde_json::from_value(value).with_context(|| format!("the sample's {what}"))?;
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("creating {what}"))?;
    Ok(())
}

/// An HTTPRoute for host `web.demo.example`: a GRPCRoute on the same listener must not share
/// its hostnames (the older of the two would win, the Gateway API's rule).
pub fn route(ns: &str, name: &str, parent: Value, backend: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [parent], "hostnames": ["web.demo.example"],
                 "rules": [{"backendRefs": [backend]}]}
    })
}

pub async fn apply_sample(client: &Client) -> Result<()> {
    crate::cluster::create_namespaces(client).await?;
    create(
        &Api::<GatewayClass>::all(client.clone()),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": CLASS.name, "labels": {MANAGED_BY.0: MANAGED_BY.1}},
            "spec": {"controllerName": CONTROLLER}
        }),
    )
    .await?;
    create(
        &Api::<Gateway>::namespaced(client.clone(), NS),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": GATEWAY.name, "namespace": NS},
            "spec": {"gatewayClassName": CLASS.name, "listeners": [{
                "name": "http", "protocol": "HTTP", "port": 80,
                "allowedRoutes": {"namespaces": {"from": "All"}}
            }, {
                "name": "https", "protocol": "HTTPS", "port": 443,
                "allowedRoutes": {"namespaces": {"from": "All"}},
                "tls": {"certificateRefs": [{"name": TLS_SECRET}]}
            }]}
        }),
    )
    .await?;
    create(
        &Api::<Service>::namespaced(client.clone(), NS),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"ports": [{"name": "http", "port": 80}]}
        }),
    )
    .await?;
    let routes = Api::<HttpRoute>::namespaced(client.clone(), NS);
    let parent = json!({"name": GATEWAY.name});
    create(
        &routes,
        route(
            NS,
            VALID.name,
            parent.clone(),
            json!({"name": "web", "port": 80}),
        ),
    )
    .await?;
    create(
        &routes,
        route(
            NS,
            MISSING.name,
            parent,
            json!({"name": MISSING_SERVICE, "port": 80}),
        ),
    )
    .await?;
    // A GRPCRoute to the same Service, through the same route engine and listener.
    let mut grpc = route(
        NS,
        GRPC.name,
        json!({"name": GATEWAY.name}),
        json!({"name": "web", "port": 80}),
    );
    grpc["kind"] = json!("GRPCRoute");
    grpc["spec"]["hostnames"] = json!(["grpc.demo.example"]);
    create(&Api::<GrpcRoute>::namespaced(client.clone(), NS), grpc).await?;
    // Another namespace's Service without a ReferenceGrant: ResolvedRefs False, RefNotPermitted.
    create(
        &Api::<HttpRoute>::namespaced(client.clone(), OTHER_NS),
        route(
            OTHER_NS,
            CROSS.name,
            json!({"name": GATEWAY.name, "namespace": NS}),
            json!({"name": "web", "namespace": NS, "port": 80}),
        ),
    )
    .await?;
    Ok(())
}

/// Creates the HTTPS listener's Secret (a self-signed certificate) and waits until the leader
/// reports the listener resolved and programmed.
pub async fn create_tls_secret(client: &Client, logs: &Path) -> Result<()> {
    let cert = rcgen::generate_simple_self_signed(vec!["web.demo.example".to_string()])
        .context("making a self-signed certificate")?;
    create(
        &Api::<Secret>::namespaced(client.clone(), NS),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": TLS_SECRET, "namespace": NS},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert.cert.pem(), "tls.key": cert.signing_key.serialize_pem()}
        }),
    )
    .await?;
    await_object(
        Api::<Gateway>::namespaced(client.clone(), NS),
        GATEWAY,
        "listener https ResolvedRefs=True",
        logs,
        |g| {
            g.status
                .iter()
                .flat_map(|s| s.listeners.iter().flatten())
                .filter(|l| l.name == "https")
                .flat_map(|l| l.conditions.iter())
                .any(|c| c.type_ == "ResolvedRefs" && c.status == "True")
        },
    )
    .await?;
    Ok(())
}

/// Points a route's only rule at `service`:80; returns the generation the change made.
pub async fn point_route(client: &Client, key: Key, service: &str) -> Result<i64> {
    let api = Api::<HttpRoute>::namespaced(client.clone(), key.namespace.unwrap_or(NS));
    let patch = json!({"spec": {"rules": [{"backendRefs": [{"name": service, "port": 80}]}]}});
    let r = api
        .patch(key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("changing {key}"))?;
    r.metadata
        .generation
        .ok_or_else(|| anyhow!("{key} has no metadata.generation"))
}
