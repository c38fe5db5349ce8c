//! The test kube-apiserver treats Gateway API objects as real clusters do: the upstream CRDs and
//! their admission policy stored as written, their CEL rules enforced, empty strings (a
//! ReferenceGrant to the core group, an empty condition message) and zero counts accepted, `null`
//! and wrong types refused.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;
use serde_json::{json, Value};
use testkit::gateway_api::{crd_dir, read_dir, BUNDLE_VERSIONS, BUNDLE_VERSION_ANNOTATION};
use testkit::kube::KubeApiServer;

/// The shared apiserver with the upstream CRDs: these tests are about those exact files.
async fn server() -> &'static KubeApiServer {
    crd_dir().expect("the upstream Gateway API CRDs: these tests are about those files");
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
            "name": "http", "attachedRoutes": 0,
            "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
            "conditions": [{
                "type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]
        }]
    })
}

/// How many CEL rules (`x-kubernetes-validations` entries) a schema carries.
fn cel_rules(v: &Value) -> usize {
    match v {
        Value::Object(m) => {
            m.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
                + m.values().map(cel_rules).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(cel_rules).sum(),
        _ => 0,
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
    let bundle = read_dir(&crd_dir().expect("checked")).expect("CRD files");
    let api: Api<CustomResourceDefinition> = Api::all(s.admin_client());
    let mut created = BTreeSet::new();
    let mut rules = 0;
    let version = |c: &CustomResourceDefinition| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BUNDLE_VERSION_ANNOTATION))
            .cloned()
    };
    let bundle_version = bundle.crds.first().and_then(version).expect("annotated");
    assert!(
        BUNDLE_VERSIONS.contains(&bundle_version.as_str()),
        "{bundle_version} is one of {BUNDLE_VERSIONS:?}"
    );
    for want in &bundle.crds {
        let name = want.metadata.name.clone().expect("named");
        let have = api.get(&name).await.expect("created");
        assert_eq!(have.spec.versions.len(), want.spec.versions.len(), "{name}");
        for (h, w) in have.spec.versions.iter().zip(&want.spec.versions) {
            // Stored as written: defaults such as `default: ""` and the CEL rules included.
            let want = serde_json::to_value(&w.schema).expect("json");
            let have = serde_json::to_value(&h.schema).expect("json");
            assert!(
                have == want,
                "{name} {}: the schema was not stored as written",
                w.name
            );
            rules += cel_rules(&have);
        }
        assert_eq!(version(&have).as_ref(), Some(&bundle_version), "{name}");
        created.insert(name);
    }
    // v1.6 adds TCPRoute and UDPRoute to v1.5's eight; v1.7 adds no kind.
    let expected = if bundle_version == BUNDLE_VERSIONS[0] {
        8
    } else {
        10
    };
    assert_eq!(
        created.len(),
        expected,
        "all {bundle_version} CRDs: {created:?}"
    );
    assert!(rules > 0, "the stored schemas keep their CEL rules");
    let defaults: usize = bundle
        .crds
        .iter()
        .map(|c| empty_defaults(&serde_json::to_value(&c.spec).expect("json")))
        .sum();
    assert!(
        defaults > 0,
        "the upstream files carry `default: \"\"` lines, kept as they are"
    );
}

#[tokio::test]
async fn the_upstream_admission_policy_is_installed_beside_the_crds() {
    let s = server().await;
    let bundle = read_dir(&crd_dir().expect("checked")).expect("CRD files");
    assert!(
        !bundle.policies.is_empty() && !bundle.bindings.is_empty(),
        "config/crd/standard/ of every release in {BUNDLE_VERSIONS:?} has the safe-upgrades \
         policy and its binding"
    );
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(s.admin_client());
    for p in &bundle.policies {
        let name = p.metadata.name.as_deref().expect("named");
        let have = policies.get(name).await.expect("the policy is created");
        assert_eq!(
            serde_json::to_value(&have.spec).expect("json")["validations"],
            serde_json::to_value(&p.spec).expect("json")["validations"],
            "{name}"
        );
    }
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(s.admin_client());
    for b in &bundle.bindings {
        let name = b.metadata.name.as_deref().expect("named");
        bindings.get(name).await.expect("the binding is created");
    }
}

#[tokio::test]
async fn the_crds_cel_rules_are_enforced() {
    let s = server().await;
    s.create_namespace("crd-cel").await.expect("namespace");
    let api = dynamic(s, "crd-cel", "v1", "Gateway", "gateways");
    let mut twice = gateway("crd-cel", "listener-twice");
    twice.data["spec"]["listeners"] = json!([
        {"name": "http", "protocol": "HTTP", "port": 80},
        {"name": "http", "protocol": "HTTP", "port": 8080}
    ]);
    match api.create(&PostParams::default(), &twice).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            assert!(
                e.message.contains("Listener name must be unique"),
                "the CRD's own rule refuses it: {}",
                e.message
            );
        }
        other => panic!("two listeners named alike must be refused, got {other:?}"),
    }
    assert!(
        api.get_opt("listener-twice").await.expect("read").is_none(),
        "nothing refused was stored"
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
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                      "namespace": "other"}],
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
