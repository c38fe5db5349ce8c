//! The Helm chart's values (deploy/helm/gateway-leader): its `values.schema.json` refuses a
//! wrong value at `helm template` and `helm install`, naming it, before anything is created; and
//! docs/operations.md's table lists every value with its default. tests/helm_chart.rs checks
//! what the chart renders.

mod common;

use std::path::Path;

use common::helm::{chart_dir, run, template_as, NAMESPACE};
use serde_json::{json, Value};

#[test]
fn the_schema_refuses_bad_values() {
    // (what, values, words of helm's error)
    let cases = [
        (
            "an unknown backend",
            json!({"leaderElection": {"backend": "consul"}}),
            "value must be one of 'kubernetes', 'etcd', 'redis'",
        ),
        (
            "a duration without a unit",
            json!({"leaderElection": {"leaseDuration": "15"}}),
            "/leaderElection/leaseDuration",
        ),
        (
            "a duration as a number",
            json!({"leaderElection": {"retryPeriod": 2}}),
            "/leaderElection/retryPeriod",
        ),
        (
            "a fraction of a second for a Lease",
            json!({"leaderElection": {"leaseDuration": "1500ms"}}),
            "/leaderElection/leaseDuration",
        ),
        (
            "a port out of range",
            json!({"metrics": {"port": 70000}}),
            "/metrics/port",
        ),
        (
            "port zero",
            json!({"metrics": {"port": 0}}),
            "/metrics/port",
        ),
        (
            "an alert setting for no alert of the rules",
            json!({"metrics": {"prometheusRule": {"alerts": {"GatewayLeaderNoLeder": {"for": "2m"}}}}}),
            "GatewayLeaderNoLeder",
        ),
        (
            "an alert's `for` without a unit",
            json!({"metrics": {"prometheusRule": {"alerts": {"GatewayLeaderNoLeader": {"for": "90"}}}}}),
            "/metrics/prometheusRule/alerts/GatewayLeaderNoLeader/for",
        ),
        (
            "no leadership change allowed in an hour",
            json!({"metrics": {"prometheusRule": {"leaderChangesPerHour": 0}}}),
            "/metrics/prometheusRule/leaderChangesPerHour",
        ),
        (
            "a misspelt value",
            json!({"leaderElection": {"lockname": "x"}}),
            "additional properties 'lockname' not allowed",
        ),
        (
            "a lock name that is no DNS subdomain",
            json!({"leaderElection": {"lockName": "My_Lock"}}),
            "/leaderElection/lockName",
        ),
        (
            "etcd without endpoints",
            json!({"leaderElection": {"backend": "etcd", "etcd": {"endpoints": []}}}),
            "/leaderElection/etcd/endpoints",
        ),
        (
            "an etcd password without a user",
            json!({"leaderElection": {"backend": "etcd", "etcd": {"username": ""}}}),
            "/leaderElection/etcd/username",
        ),
        (
            "an etcd endpoint with user info",
            json!({"leaderElection": {"backend": "etcd",
                   "etcd": {"endpoints": ["https://u:p@etcd:2379"]}}}),
            "/leaderElection/etcd/endpoints/0",
        ),
        (
            "a Redis URL with a password",
            json!({"leaderElection": {"backend": "redis",
                   "redis": {"url": "rediss://:secret@redis:6379"}}}),
            "/leaderElection/redis/url",
        ),
        (
            "Redis with neither a URL nor Sentinels",
            json!({"leaderElection": {"backend": "redis", "redis": {"url": ""}}}),
            "/leaderElection/redis",
        ),
        (
            "Sentinels without a master name",
            json!({"leaderElection": {"backend": "redis", "redis": {"url": "",
                   "sentinel": {"urls": ["redis://s:26379"]}}}}),
            "/leaderElection/redis",
        ),
        (
            "two replicas without leader election",
            json!({"leaderElection": {"enable": false}}),
            "/replicaCount",
        ),
        (
            "an unknown log format",
            json!({"logFormat": "xml"}),
            "/logFormat",
        ),
        // What the schema cannot say, the templates refuse with the setting's name.
        (
            "a lease no longer than the renew deadline",
            json!({"leaderElection": {"leaseDuration": "10s"}}),
            "leaderElection.leaseDuration (10000ms) must be longer than \
             leaderElection.renewDeadline (10000ms)",
        ),
        (
            "a renew deadline within 1.2 retry periods",
            json!({"leaderElection": {"renewDeadline": "10s", "retryPeriod": "9s"}}),
            "must be longer than 1.2 x leaderElection.retryPeriod",
        ),
        (
            "a grace period shorter than a graceful stop",
            json!({"terminationGracePeriodSeconds": 20}),
            "terminationGracePeriodSeconds (20) must be longer than a graceful stop",
        ),
        (
            "a ServiceMonitor without the Service",
            json!({"metrics": {"service": {"enabled": false},
                   "serviceMonitor": {"enabled": true}}}),
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
    ];
    let mut wrong = Vec::new();
    for (what, values, words) in cases {
        match template_as("gateway-leader", NAMESPACE, &values) {
            Ok(_) => wrong.push(format!("{what}: {values} is accepted")),
            Err(e) if !e.contains(words) => wrong.push(format!(
                "{what}: {values} is refused without {words:?}: {e}"
            )),
            Err(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // And at install, which validates the same way before it would talk to a cluster.
    let out = run(
        &[
            "install",
            "gateway-leader",
            chart_dir().to_str().expect("UTF-8"),
            "--dry-run=client",
            "--namespace",
            NAMESPACE,
        ],
        &json!({"leaderElection": {"backend": "zookeeper"}}),
    );
    assert!(!out.status.success(), "helm install takes a bad backend");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/leaderElection/backend"),
        "helm install names the value: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_grace_period_check_is_the_binarys_stop_budget() {
    // Both sides of the 25 s cap: below it the budget grows with the renew deadline, above it
    // a 30 s grace period covers any renew deadline.
    let mut wrong = Vec::new();
    for renew in [5u64, 10, 11, 12, 40] {
        let budget =
            gateway_leader::shutdown::graceful_stop_budget(std::time::Duration::from_secs(renew));
        let budget = budget.as_secs();
        for (grace, ok) in [(budget, false), (budget + 1, true)] {
            let values = json!({
                "leaderElection": {"leaseDuration": format!("{}s", renew * 2),
                                   "renewDeadline": format!("{renew}s")},
                "terminationGracePeriodSeconds": grace,
            });
            match (template_as("gateway-leader", NAMESPACE, &values), ok) {
                (Ok(_), false) => wrong.push(format!("renew {renew}s: grace {grace}s accepted")),
                (Err(e), true) => wrong.push(format!("renew {renew}s: grace {grace}s: {e}")),
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The leaves of `values.yaml` that the schema describes, with their defaults: a key whose
/// schema lists properties is descended into, any other is a leaf.
fn leaves(schema: &Value, values: &Value, at: &str, out: &mut Vec<(String, Value)>) {
    let props = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (k, s) in props {
        let key = if at.is_empty() {
            k.clone()
        } else {
            format!("{at}.{k}")
        };
        let Some(v) = values.get(&k) else {
            assert_eq!(
                k, "global",
                "values.yaml has {key}, which the schema describes"
            );
            continue;
        };
        if s["properties"].is_object() {
            leaves(&s, v, &key, out);
        } else {
            out.push((key, v.clone()));
        }
    }
    if let Some(m) = values.as_object() {
        for k in m.keys() {
            assert!(
                schema["properties"].get(k).is_some(),
                "the schema describes {at}.{k} of values.yaml"
            );
        }
    }
}

/// A default as docs/operations.md writes it: strings bare (`""` when empty), the rest as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) if s.is_empty() => "\"\"".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn docs_operations_md_lists_every_value_with_its_default() {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    let schema: Value = serde_json::from_str(&read(&chart_dir().join("values.schema.json")))
        .expect("the schema is JSON");
    let values: Value =
        serde_yaml::from_str(&read(&chart_dir().join("values.yaml"))).expect("values.yaml is YAML");
    let mut want = Vec::new();
    leaves(&schema, &values, "", &mut want);
    let doc = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"));
    let start = doc
        .find("<!-- BEGIN VALUES")
        .expect("docs/operations.md's values table");
    let end = start + doc[start..].find("<!-- END VALUES -->").expect("its end");
    let mut got = Vec::new();
    for row in doc[start..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        assert!(cells.len() >= 3, "a row of value, default, meaning: {row}");
        let key = cells[0]
            .trim_start_matches("| ")
            .trim_matches('`')
            .to_string();
        let default = cells[1].trim_matches('`').to_string();
        got.push((key, default));
    }
    let want: Vec<(String, String)> = want.iter().map(|(k, v)| (k.clone(), shown(v))).collect();
    let missing: Vec<_> = want.iter().filter(|w| !got.contains(w)).collect();
    let extra: Vec<_> = got.iter().filter(|g| !want.contains(g)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/operations.md's values table is not values.yaml's: missing or with another \
         default {missing:#?}; not in values.yaml {extra:#?}. Rows are | `key` | `default` | \
         what it does |; this prints the rows it wants:\n{}",
        want.iter()
            .map(|(k, v)| format!("| `{k}` | `{v}` | |"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
