//! The monitoring kit of docs/operations.md ("Alerts", "Dashboard"): the alert rules
//! (deploy/helm/gateway-leader/files/gateway-leader.rules.yaml) run through `promtool test rules`
//! on series that reproduce each situation; the chart and deploy/components/monitoring/ carry the
//! same rules and dashboard; the dashboard's JSON holds together; and every metric name that a
//! rule or a panel reads is served by replicas running `run`, `proxy` and `exec`.

#[path = "../common/mod.rs"]
mod common;

mod dashboard;
mod names;
mod packaging;
mod promql;
mod rules;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The alert rules file, the source of the chart's and the component's rules.
fn rules_file() -> PathBuf {
    root().join("deploy/helm/gateway-leader/files/gateway-leader.rules.yaml")
}

/// The dashboard as the chart ships it (the component keeps a copy).
fn dashboard_file() -> PathBuf {
    root().join("deploy/helm/gateway-leader/files/gateway-leader.json")
}

/// `path` read; panics naming it.
fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The YAML file at `path` as JSON values.
fn yaml(path: &Path) -> Value {
    let doc: serde_yaml::Value = serde_yaml::from_str(&read(path))
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
    serde_json::to_value(doc).expect("YAML maps to JSON")
}

/// One alerting rule of the rules file.
#[derive(Debug, Deserialize)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// Every alerting rule of the rules file, in its order.
fn rules() -> Vec<Rule> {
    let file = yaml(&rules_file());
    let groups = file["groups"].as_array().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .map(|r| serde_json::from_value(r.clone()).expect("an alerting rule"))
        .collect()
}

/// Every PromQL expression of the dashboard's panels, with the panel's title.
fn dashboard_exprs() -> Vec<(String, String)> {
    let d: Value = serde_json::from_str(&read(&dashboard_file())).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_default().to_string();
            out.push((p["title"].as_str().unwrap_or_default().to_string(), expr));
        }
    }
    for v in d["templating"]["list"].as_array().expect("variables") {
        if let Some(q) = v["query"]["query"].as_str() {
            // label_values(metric{...}, label): the metric is what the variable reads.
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.rsplit_once(','))
                .map_or(q, |(m, _)| m);
            out.push((format!("variable {}", v["name"]), inner.to_string()));
        }
    }
    out
}
