//! The statuses on the objects, as the table shows them, and the waits for them.

use std::path::Path;

use anyhow::{bail, Context, Result};
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ManagedFieldsEntry, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::wait::await_condition;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::out::Tone;
use crate::sample::Key;
use crate::{CONTROLLER, PATIENCE};

pub fn conditions_text(conditions: &[Condition], indent: &str) -> Vec<(String, Tone)> {
    conditions
        .iter()
        .map(|c| {
            let tone = match c.status.as_str() {
                "True" => Tone::Good,
                "False" => Tone::Bad,
                _ => Tone::Unsure,
            };
            (
                format!("{indent}{}={} ({})", c.type_, c.status, c.reason),
                tone,
            )
        })
        .collect()
}

pub fn our_parents(
    r: &HttpRoute,
) -> impl Iterator<Item = &gateway_api::httproutes::HttpRouteStatusParents> {
    r.status
        .iter()
        .flat_map(|s| s.parents.iter())
        .filter(|p| p.controller_name == CONTROLLER)
}

/// True when our entry on the route has condition `type_` = `status`, observed at `generation`
/// or later (so it is about the route as changed, not as it was).
pub fn route_says(r: &HttpRoute, type_: &str, status: &str, generation: i64) -> bool {
    our_parents(r).any(|p| {
        p.conditions.iter().any(|c| {
            c.type_ == type_
                && c.status == status
                && c.observed_generation.unwrap_or(i64::MIN) >= generation
        })
    })
}

/// The replicas that wrote the object's status, with the time of their managedFields entry.
pub fn status_writers(meta: &ObjectMeta) -> Vec<(String, Option<Timestamp>)> {
    pub fn is_status(m: &ManagedFieldsEntry) -> bool {
        m.subresource.as_deref() == Some("status")
    }
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| is_status(m))
        .filter_map(|m| {
            let name = m.manager.as_deref()?.strip_prefix("gateway-leader/")?;
            Some((name.to_string(), m.time.as_ref().map(|t| t.0)))
        })
        .collect()
}

/// One object's status as the table shows it.
pub struct Status {
    pub lines: Vec<(String, Tone)>,
    pub writers: Vec<(String, Option<Timestamp>)>,
}

pub async fn read_status(client: &Client, key: Key) -> Result<Status> {
    let ns = key.namespace.unwrap_or_default();
    let context = || format!("reading {key}");
    let (lines, meta) = match key.kind {
        "GatewayClass" => {
            let o = Api::<GatewayClass>::all(client.clone())
                .get(key.name)
                .await
                .with_context(context)?;
            let conds = o
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            (conditions_text(&conds, ""), o.metadata)
        }
        "Gateway" => {
            let o = Api::<Gateway>::namespaced(client.clone(), ns)
                .get(key.name)
                .await
                .with_context(context)?;
            let status = o.status.clone().unwrap_or_default();
            let mut lines = conditions_text(&status.conditions.unwrap_or_default(), "");
            for l in status.listeners.unwrap_or_default() {
                lines.push((
                    format!("listener {}: attachedRoutes {}", l.name, l.attached_routes),
                    Tone::Plain,
                ));
                lines.extend(conditions_text(&l.conditions, "  "));
            }
            (lines, o.metadata)
        }
        kind => {
            let o = get_route(client, kind, ns, key.name)
                .await
                .with_context(context)?;
            let mut lines = Vec::new();
            let ours: Vec<_> = our_parents(&o).collect();
            for p in &ours {
                if ours.len() > 1 {
                    lines.push((format!("parent {}:", p.parent_ref.name), Tone::Plain));
                }
                lines.extend(conditions_text(&p.conditions, ""));
            }
            (lines, o.metadata.clone())
        }
    };
    Ok(Status {
        lines,
        writers: status_writers(&meta),
    })
}

/// Waits until a replica has written the object's status. The conditions alone would not
/// tell: the upstream CRDs default them to `Unknown (Pending)` when the object is created.
pub async fn has_status(client: &Client, key: Key, logs: &Path) -> Result<()> {
    pub fn written<K: Resource<DynamicType = ()>>(o: &K) -> bool {
        !status_writers(o.meta()).is_empty()
    }
    let ns = key.namespace.unwrap_or_default();
    let what = "a status from a replica";
    match key.kind {
        "GatewayClass" => {
            await_object(
                Api::<GatewayClass>::all(client.clone()),
                key,
                what,
                logs,
                written,
            )
            .await?;
        }
        "Gateway" => {
            await_object(
                Api::<Gateway>::namespaced(client.clone(), ns),
                key,
                what,
                logs,
                written,
            )
            .await?;
        }
        "GRPCRoute" => {
            await_object(
                Api::<GrpcRoute>::namespaced(client.clone(), ns),
                key,
                what,
                logs,
                written,
            )
            .await?;
        }
        _ => {
            await_object(
                Api::<HttpRoute>::namespaced(client.clone(), ns),
                key,
                what,
                logs,
                written,
            )
            .await?;
        }
    }
    Ok(())
}

/// A route of `kind` read as an HTTPRoute: every route kind's `status.parents` has the same
/// shape, and the table shows only the status.
pub async fn get_route(client: &Client, kind: &str, ns: &str, name: &str) -> Result<HttpRoute> {
    if kind == "GRPCRoute" {
        let o = Api::<GrpcRoute>::namespaced(client.clone(), ns)
            .get(name)
            .await?;
        let mut v = serde_json::to_value(o)?;
        v["spec"] = json!({});
        return Ok(serde_json::from_value(v)?);
    }
    Ok(Api::<HttpRoute>::namespaced(client.clone(), ns)
        .get(name)
        .await?)
}

/// Waits on a watch until the object satisfies `cond`; fails after [`PATIENCE`].
pub async fn await_object<K>(
    api: Api<K>,
    key: Key,
    what: &str,
    logs: &Path,
    cond: impl Fn(&K) -> bool + Send + 'static,
) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let waited = tokio::time::timeout(
        PATIENCE,
        await_condition(api, key.name, move |o: Option<&K>| o.is_some_and(&cond)),
    )
    .await;
    match waited {
        Ok(Ok(Some(o))) => Ok(o),
        Ok(Ok(None)) => bail!("{key} is gone while waiting for {what}"),
        Ok(Err(e)) => Err(e).with_context(|| format!("watching {key} for {what}")),
        Err(_) => bail!(
            "{key} did not get {what} within {PATIENCE:?} (replica logs: {})",
            logs.display()
        ),
    }
}
