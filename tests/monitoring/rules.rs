//! The alert rules: promtool's check and unit tests, a firing and a quiet case for each alert,
//! a runbook section for each, and selection by this project's own series.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::promql::metric_names;
use super::{read, root, rules, rules_file, yaml};

const HOW: &str = "scripts/install-promtool.sh unpacks one from Debian's prometheus package \
    and prints its path (scripts/test.sh runs it): export GATEWAY_LEADER_PROMTOOL=$(scripts/\
    install-promtool.sh | tail -n1), or put a promtool (it comes with Prometheus) on PATH";

/// `GATEWAY_LEADER_PROMTOOL`, else `promtool` on `PATH`; panics saying how to get one.
fn promtool() -> PathBuf {
    let path = std::env::var_os("GATEWAY_LEADER_PROMTOOL")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("promtool"), PathBuf::from);
    match Command::new(&path).arg("--version").output() {
        Ok(o) if o.status.success() => path,
        Ok(o) => panic!(
            "{} --version failed: {}; {HOW}",
            path.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("cannot run {}: {e}; {HOW}", path.display()),
    }
}

/// Runs promtool with `args` in the repository's root; panics with its output on failure.
fn promtool_ok(args: &[&str]) {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(root())
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {}:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_rules_pass_promtools_check_and_their_unit_tests() {
    let file = rules_file();
    promtool_ok(&["check", "rules", file.to_str().expect("UTF-8 path")]);
    promtool_ok(&["test", "rules", "tests/monitoring/alerts.test.yaml"]);
}

#[test]
fn every_alert_has_a_case_that_fires_and_one_that_must_not() {
    let tests = yaml(&root().join("tests/monitoring/alerts.test.yaml"));
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for group in tests["tests"].as_array().expect("tests") {
        for case in group["alert_rule_test"]
            .as_array()
            .expect("alert_rule_test")
        {
            let name = case["alertname"].as_str().expect("alertname").to_string();
            match case["exp_alerts"].as_array() {
                Some(a) if !a.is_empty() => fires.insert(name),
                _ => quiet.insert(name),
            };
        }
    }
    for r in rules() {
        assert!(
            fires.contains(&r.alert),
            "{}: no case where it fires",
            r.alert
        );
        assert!(
            quiet.contains(&r.alert),
            "{}: no case where it must not",
            r.alert
        );
    }
}

/// GitHub's anchor of a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_severity_a_summary_and_a_runbook_section_in_the_docs() {
    let doc = read(&root().join("docs/operations.md"));
    let anchors: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(anchor)
        .collect();
    let page = "https://github.com/gateway-leader/gateway-leader/blob/main/docs/operations.md#";
    for r in rules() {
        let severity = r.labels.get("severity").map(String::as_str);
        assert!(
            matches!(severity, Some("critical" | "warning")),
            "{}: severity {severity:?}",
            r.alert
        );
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                r.annotations.get(key).is_some_and(|v| !v.trim().is_empty()),
                "{}: no {key}",
                r.alert
            );
        }
        let url = &r.annotations["runbook_url"];
        let section = url
            .strip_prefix(page)
            .unwrap_or_else(|| panic!("{}: runbook_url {url} is not in {page}", r.alert));
        assert!(
            anchors.contains(section),
            "{}: docs/operations.md has no heading `### ...` whose anchor is #{section}",
            r.alert
        );
    }
}

#[test]
fn the_rules_read_only_this_projects_series() {
    for r in rules() {
        let names = metric_names(&r.expr);
        assert!(!names.is_empty(), "{}: reads no metric", r.alert);
        for n in &names {
            assert!(
                n.starts_with("gateway_leader_") || n == "leader_election_master_status",
                "{}: reads {n}, not one of gateway-leader's",
                r.alert
            );
        }
        // client-go controllers export leader_election_master_status too: a rule keeps only
        // the replicas that also serve one of our own series.
        if names.contains("leader_election_master_status") {
            assert!(
                r.expr
                    .contains("and on (namespace, job, instance) gateway_leader_"),
                "{}: reads leader_election_master_status without keeping ours alone",
                r.alert
            );
        }
    }
}

#[test]
fn the_charts_schema_names_exactly_the_alerts_of_the_rules() {
    let schema: Value = serde_json::from_str(&read(
        &root().join("deploy/helm/gateway-leader/values.schema.json"),
    ))
    .expect("the schema is JSON");
    let listed: BTreeSet<&str> = schema["properties"]["metrics"]["properties"]["prometheusRule"]
        ["properties"]["alerts"]["propertyNames"]["enum"]
        .as_array()
        .expect("the alerts' names")
        .iter()
        .map(|v| v.as_str().expect("a name"))
        .collect();
    let rules = rules();
    let names: BTreeSet<&str> = rules.iter().map(|r| r.alert.as_str()).collect();
    assert_eq!(listed, names);
}
