//! The test kube-apiserver accepts what real clusters accept in Gateway API objects: the
//! upstream CRDs unmodified, empty strings (a ReferenceGrant to the core group, an empty
//! condition message) and zero counts, while `null` and wrong types are still refused.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use testkit::gateway_api::{crd_dir, read_dir, CRDS_ENV};
use testkit::kube::KubeApiServer;

/// The shared apiserver with the upstream CRDs: these tests are about those exact files.
async fn server() -> &'static KubeApiServer {
    assert!(
        crd_dir().is_some(),
        "{CRDS_ENV} must name the upstream Gateway API v1.5.1 CRD folder (scripts/test.sh sets \
         it); these tests check the apiserver against those files as they are"
    );
    let s = KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    s.install_gateway_api().await.expect("Gateway API CRDs");
    s
}

/// An API for raw JSON objects, so a test can send what typed clients never would.
fn dynamic(
    s: &KubeApiServer,
    ns: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "gateway.networking.k8s.io".into(),
        version: version.into(),
        api_version: format!("gateway.networking.k8s.io/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(s.admin_client(), ns, &ar)
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a valid object")
}

fn gateway(ns: &str, name: &str) -> DynamicObject {
    object(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "gatewayClassName": "crd-test",
            "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]
        }
    }))
}

fn status(message: Value) -> Value {
    json!({
        "conditions": [{
            "type": "Accepted", "status": "True", "reason": "Accepted", "message": message,
            "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"
        }],
        "listeners": [{
            "name": "http", "attachedRoutes": 0, "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
            "conditions": [{
                "type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]
        }]
    })
}

fn strip_cel(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("x-kubernetes-validations");
            m.values_mut().for_each(strip_cel);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_cel),
        _ => {}
    }
}

/// Counts `default: ""` in a schema, the lines that once had to be stripped.
fn empty_defaults(v: &Value) -> usize {
    match v {
        Value::Object(m) => {
            usize::from(m.get("default") == Some(&json!("")))
                + m.values().map(empty_defaults).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(empty_defaults).sum(),
        _ => 0,
    }
}

#[tokio::test]
async fn the_upstream_crds_are_created_unmodified() {
    let s = server().await;
    let files = read_dir(&crd_dir().expect("checked")).expect("CRD files");
    let api: Api<CustomResourceDefinition> = Api::all(s.admin_client());
    let mut created = BTreeSet::new();
    for want in &files {
        let name = want.metadata.name.clone().expect("named");
        let have = api.get(&name).await.expect("created");
        assert_eq!(have.spec.versions.len(), want.spec.versions.len(), "{name}");
        for (h, w) in have.spec.versions.iter().zip(&want.spec.versions) {
            // Stored as written (defaults such as `default: ""` included), but for the CEL rules
            // that v1.20 does not know and drops.
            let mut want = serde_json::to_value(&w.schema).expect("json");
            strip_cel(&mut want);
            let have = serde_json::to_value(&h.schema).expect("json");
            assert!(
                have == want,
                "{name} {}: the schema was not stored as written",
                w.name
            );
        }
        created.insert(name);
    }
    assert_eq!(created.len(), 8, "all eight v1.5.1 CRDs: {created:?}");
    let defaults: usize = files
        .iter()
        .map(|c| empty_defaults(&serde_json::to_value(&c.spec).expect("json")))
        .sum();
    assert!(
        defaults > 0,
        "the upstream files carry `default: \"\"` lines, kept as they are"
    );
}

#[tokio::test]
async fn a_reference_grant_to_core_services_is_created() {
    let s = server().await;
    s.create_namespace("crd-grants").await.expect("namespace");
    let api = dynamic(
        s,
        "crd-grants",
        "v1beta1",
        "ReferenceGrant",
        "referencegrants",
    );
    let grant = object(json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "to-services", "namespace": "crd-grants"},
        "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "other"}],
            "to": [{"group": "", "kind": "Service"}]
        }
    }));
    api.create(&PostParams::default(), &grant)
        .await
        .expect("a ReferenceGrant to the core group (group: \"\") is accepted");
    let read = api.get("to-services").await.expect("read back");
    assert_eq!(read.data["spec"]["to"][0]["group"], json!(""));
}

#[tokio::test]
async fn an_empty_message_and_a_zero_count_are_written_and_read_back_unchanged() {
    let s = server().await;
    s.create_namespace("crd-status").await.expect("namespace");
    let api = dynamic(s, "crd-status", "v1", "Gateway", "gateways");
    let mut gw = api
        .create(
            &PostParams::default(),
            &gateway("crd-status", "empty-message"),
        )
        .await
        .expect("gateway");
    gw.data["status"] = status(json!(""));
    let written = api
        .replace_status("empty-message", &PostParams::default(), &gw)
        .await
        .expect("a status with message \"\" and attachedRoutes 0 is accepted");
    assert_eq!(written.data["status"], status(json!("")));
    let read = api.get_status("empty-message").await.expect("read back");
    assert_eq!(read.data["status"], status(json!("")), "stored unchanged");
}

#[tokio::test]
async fn null_and_wrong_types_are_still_refused() {
    let s = server().await;
    s.create_namespace("crd-refused").await.expect("namespace");
    let api = dynamic(s, "crd-refused", "v1", "Gateway", "gateways");
    let gw = api
        .create(
            &PostParams::default(),
            &gateway("crd-refused", "bad-status"),
        )
        .await
        .expect("gateway");
    for bad in [Value::Null, json!(5), json!(false)] {
        let mut obj = gw.clone();
        obj.data["status"] = status(bad.clone());
        match api
            .replace_status("bad-status", &PostParams::default(), &obj)
            .await
        {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 422, "message {bad}: {e:?}");
                assert!(
                    e.message.contains("message"),
                    "names the field: {}",
                    e.message
                );
            }
            other => panic!("message {bad} must be refused with 422, got {other:?}"),
        }
    }
    let unchanged = api.get_status("bad-status").await.expect("read");
    assert_eq!(
        unchanged.data["status"], gw.data["status"],
        "nothing refused was stored"
    );
}
