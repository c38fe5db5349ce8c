//! The Helm chart (`deploy/helm/gateway-leader/`), linted and rendered as an operator's
//! `helm install` would render it, with the helm that `scripts/build-helm.sh` builds from its Go
//! module (or `GATEWAY_LEADER_HELM`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

use super::deploy::deploy_dir;

/// The release name that gives the chart's objects the kustomize base's names.
pub const RELEASE: &str = "gateway-leader";
/// The namespace the kustomize base installs into.
pub const NAMESPACE: &str = "gateway-system";

/// The chart's folder.
pub fn chart_dir() -> PathBuf {
    deploy_dir().join("helm/gateway-leader")
}

/// The helm binary; panics saying how to get one.
pub fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| testkit::built::helm().unwrap_or_else(|e| panic!("{e:#}")))
}

/// Runs helm `args` with the values `values` in a file (`-f`), in an empty helm home so that
/// no repository or plugin of the machine's user changes the outcome.
pub fn run(args: &[&str], values: &Value) -> Output {
    let home = tempfile::tempdir().expect("temp dir");
    let file = home.path().join("values.yaml");
    std::fs::write(&file, serde_json::to_string(values).expect("JSON")).expect("writing values");
    Command::new(helm())
        .args(args)
        .arg("-f")
        .arg(&file)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .env("KUBECONFIG", home.path().join("no-kubeconfig"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm().display()))
}

/// `helm template` of the chart as `release` in `namespace`: its objects in order, or helm's
/// error.
pub fn template_as(release: &str, namespace: &str, values: &Value) -> Result<Vec<Value>, String> {
    let chart = chart_dir();
    let out = run(
        &[
            "template",
            release,
            chart.to_str().expect("a UTF-8 path"),
            "--namespace",
            namespace,
        ],
        values,
    );
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).expect("UTF-8 YAML");
    Ok(super::deploy::objects(&text))
}

/// `helm template` as release `gateway-leader` in `gateway-system`; panics on helm's error.
pub fn template(values: &Value) -> Vec<Value> {
    template_as(RELEASE, NAMESPACE, values).unwrap_or_else(|e| panic!("helm template: {e}"))
}
