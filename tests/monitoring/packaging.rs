//! The chart (metrics.prometheusRule, metrics.dashboard) and deploy/components/monitoring/ ship
//! the rules file and the dashboard as they are, with the labels prometheus-operator and
//! Grafana's sidecar look for; the chart's settings change what they say they change.

use serde_json::{json, Value};

use super::common::deploy::{deploy_dir, of_kind, one, render, render_component_in};
use super::common::helm::{template, NAMESPACE};
use super::{dashboard_file, read, root, rules, rules_file, yaml};

/// The component's folder.
fn component(file: &str) -> std::path::PathBuf {
    root().join("deploy/components/monitoring").join(file)
}

#[test]
fn the_component_carries_the_rules_file_and_the_dashboard_unchanged() {
    let rule = yaml(&component("prometheusrule.yaml"));
    assert_eq!(
        rule["spec"],
        yaml(&rules_file()),
        "deploy/components/monitoring/prometheusrule.yaml's spec is the rules file's groups: \
         edit both"
    );
    assert_eq!(
        read(&component("gateway-leader.json")),
        read(&dashboard_file()),
        "deploy/components/monitoring/gateway-leader.json is a copy of the chart's \
         files/gateway-leader.json: copy it again"
    );
}

#[test]
fn the_component_renders_a_service_monitor_the_rules_and_the_dashboard_for_the_sidecar() {
    let objects = render_component_in("monitoring", "mon");
    let sm = one(&objects, "ServiceMonitor");
    assert_eq!(sm["metadata"]["namespace"], "mon");
    assert_eq!(
        sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "gateway-leader",
        "the base's Service's label"
    );
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    let rule = one(&objects, "PrometheusRule");
    assert_eq!(rule["spec"], yaml(&rules_file()));
    let cm = one(&objects, "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        cm["data"]["gateway-leader.json"].as_str(),
        Some(read(&dashboard_file()).as_str())
    );
}

#[test]
fn added_to_the_base_its_service_monitor_scrapes_the_bases_metrics_service() {
    // kustomize takes only relative paths: a link to deploy/ beside the kustomization.
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(deploy_dir(), dir.path().join("deploy")).expect("a link to deploy/");
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n  - deploy/base\ncomponents:\n  - deploy/components/monitoring\n",
    )
    .expect("writing the kustomization");
    let objects = render(dir.path());
    let sm = one(&objects, "ServiceMonitor");
    let svc = one(&objects, "Service");
    assert_eq!(sm["metadata"]["namespace"], svc["metadata"]["namespace"]);
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("labels")
    {
        assert_eq!(svc["metadata"]["labels"][k], *v, "the Service has {k}");
    }
    assert_eq!(
        sm["spec"]["endpoints"][0]["port"],
        svc["spec"]["ports"][0]["name"]
    );
    // Without a `namespace:` of the user's, the base's: not the context's default.
    assert_eq!(svc["metadata"]["namespace"], "gateway-system");
    let dashboard = of_kind(&objects, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "gateway-leader-dashboard")
        .expect("the dashboard's ConfigMap");
    for o in [one(&objects, "PrometheusRule"), dashboard] {
        assert_eq!(
            o["metadata"]["namespace"], "gateway-system",
            "{}",
            o["kind"]
        );
    }
}

/// The chart's objects with `metrics` merged over the defaults.
fn chart(metrics: Value) -> Vec<Value> {
    template(&json!({ "metrics": metrics }))
}

#[test]
fn the_chart_renders_the_rules_file_as_it_is_by_default_and_neither_object_unasked() {
    let objects = chart(json!({}));
    assert!(of_kind(&objects, "PrometheusRule").is_empty());
    assert!(of_kind(&objects, "ConfigMap")
        .iter()
        .all(|c| c["metadata"]["labels"]["grafana_dashboard"].is_null()));
    let objects =
        chart(json!({ "prometheusRule": { "enabled": true, "labels": {"release": "kps"} } }));
    let rule = one(&objects, "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], NAMESPACE);
    assert_eq!(rule["metadata"]["labels"]["release"], "kps");
    assert_eq!(rule["spec"], yaml(&rules_file()));
}

#[test]
fn the_charts_alert_settings_change_only_what_they_name() {
    let objects = chart(json!({ "prometheusRule": {
        "enabled": true,
        "namespace": "monitoring",
        "alertLabels": { "team": "gateways", "severity": "ignored" },
        "leaderChangesPerHour": 11,
        "alerts": {
            "GatewayLeaderNoLeader": { "for": "3m" },
            "GatewayLeaderFlapping": { "severity": "critical" },
            "GatewayLeaderProxyCutWrites": { "disabled": true },
        },
    }}));
    let rule = one(&objects, "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "monitoring");
    let got: Vec<&Value> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .collect();
    let want = rules();
    assert_eq!(got.len(), want.len() - 1, "one alert disabled");
    for w in want
        .iter()
        .filter(|w| w.alert != "GatewayLeaderProxyCutWrites")
    {
        let g = got
            .iter()
            .find(|g| g["alert"] == w.alert.as_str())
            .unwrap_or_else(|| panic!("{} rendered", w.alert));
        assert_eq!(g["labels"]["team"], "gateways", "{}", w.alert);
        let severity = if w.alert == "GatewayLeaderFlapping" {
            "critical"
        } else {
            w.labels["severity"].as_str()
        };
        assert_eq!(
            g["labels"]["severity"], severity,
            "{}: its own severity wins",
            w.alert
        );
        match w.alert.as_str() {
            "GatewayLeaderNoLeader" => assert_eq!(g["for"], "3m"),
            "GatewayLeaderFlapping" => {
                let expr = g["expr"].as_str().expect("expr");
                assert!(expr.trim_end().ends_with(") > 11"), "{expr}");
            }
            _ => assert_eq!(g["expr"].as_str(), Some(w.expr.as_str()), "{}", w.alert),
        }
    }
}

#[test]
fn the_chart_puts_the_dashboard_in_a_config_map_the_grafana_sidecar_discovers() {
    let objects = chart(json!({ "dashboard": {
        "enabled": true,
        "namespace": "monitoring",
        "annotations": { "grafana_folder": "Gateways" },
    }}));
    let cm = of_kind(&objects, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("a ConfigMap with the sidecar's label");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Gateways");
    assert_eq!(
        cm["data"]["gateway-leader.json"].as_str(),
        Some(read(&dashboard_file()).trim_end()),
        "the dashboard as it is"
    );
}
