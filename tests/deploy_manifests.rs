//! The shipped manifests are valid for a real kube-apiserver, and the Deployment's arguments are
//! valid settings of `gateway-leader run`.

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use serde::Deserialize;

fn manifests() -> Vec<(String, serde_json::Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("deploy/kubernetes exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable manifest");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = serde_json::to_value(serde_yaml::Value::deserialize(doc).expect("valid YAML"))
                .expect("YAML maps to JSON");
            if !v.is_null() {
                out.push((path.display().to_string(), v));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_pass_the_apiservers_validation() {
    let server = testkit::kube::KubeApiServer::start()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    let ns = "deploy-check";
    server.create_namespace(ns).await.expect("namespace");
    let client = server.admin_client();
    let all = manifests();
    assert!(
        all.len() >= 4,
        "the manifests hold a Deployment, its ServiceAccount and RBAC"
    );
    for (file, v) in all {
        let api_version = v["apiVersion"].as_str().expect("apiVersion");
        let kind = v["kind"].as_str().expect("kind");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = pinned_kind(&client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{file}: {api_version} {kind} unknown: {e}"));
        let obj: DynamicObject = serde_json::from_value(v.clone()).expect("an object");
        let api: Api<DynamicObject> = match caps.scope {
            kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
            kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
        };
        let pp = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        api.create(&pp, &obj)
            .await
            .unwrap_or_else(|e| panic!("{file}: the apiserver refuses {kind}: {e}"));
    }
}

#[test]
fn the_deployments_arguments_are_valid_settings() {
    for (file, v) in manifests() {
        if v["kind"] != "Deployment" {
            continue;
        }
        for c in v["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers")
        {
            let args: Vec<&str> = c["args"]
                .as_array()
                .expect("args")
                .iter()
                .map(|a| a.as_str().expect("string arg"))
                .collect();
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_gateway-leader"))
                .args(&args)
                .arg("--print-config")
                .env("POD_NAME", "pod-0")
                .output()
                .expect("runs");
            assert!(
                out.status.success(),
                "{file}: {args:?} are not valid settings: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
