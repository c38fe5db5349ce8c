//! Builders for the computation's tests: objects as a cluster would hold them, written as JSON
//! so they read like the manifests they stand for.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_api::gatewayclasses::GatewayClass;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::World;
use crate::status::desired::Desired;
use crate::status::key::ObjectKey;

/// Our controllerName.
pub(crate) const CONTROLLER: &str = "example.com/gateway-leader";
/// The name of our GatewayClass in [`world`].
pub(crate) const CLASS: &str = "ours";

/// Everything computed, by key.
pub(crate) type Out = BTreeMap<ObjectKey, Desired>;

fn from<T: DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("test object deserializes"))
}

/// A world with our GatewayClass, namespaces `infra` and `apps` (label `team: a`), and the
/// supported bundle version.
pub(crate) fn world() -> World {
    World {
        gateway_classes: vec![class(CLASS, CONTROLLER)],
        namespaces: vec![
            namespace("infra", json!({})),
            namespace("apps", json!({"team": "a"})),
        ],
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

/// A Namespace with these labels.
pub(crate) fn namespace(name: &str, labels: Value) -> Arc<Namespace> {
    from(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
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
