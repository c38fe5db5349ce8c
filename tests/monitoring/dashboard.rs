//! The Grafana dashboard's structure, checked as a dashboard linter would (no linter is served
//! from a registry this project can use; docs/operations.md, "Dashboard"): it imports anywhere
//! (a data source variable, no fixed data source), its panels have unique ids, titles,
//! descriptions and non-overlapping places on the 24-column grid, every query filters by the
//! namespace and job variables and uses `$__rate_interval` for its rates, and the docs describe
//! every panel.

use std::collections::BTreeSet;

use serde_json::Value;

use super::promql::metric_names;
use super::{dashboard_file, read, root};

fn dashboard() -> Value {
    serde_json::from_str(&read(&dashboard_file())).expect("the dashboard is JSON")
}

fn panels(d: &Value) -> &Vec<Value> {
    d["panels"].as_array().expect("panels")
}

#[test]
fn it_has_a_uid_a_title_and_a_prometheus_data_source_variable() {
    let d = dashboard();
    for key in ["uid", "title", "description"] {
        assert!(d[key].as_str().is_some_and(|s| !s.is_empty()), "{key}");
    }
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let vars = d["templating"]["list"].as_array().expect("variables");
    let names: Vec<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    assert_eq!(names, ["datasource", "namespace", "job"]);
    assert_eq!(vars[0]["type"], "datasource");
    assert_eq!(vars[0]["query"], "prometheus");
    for v in &vars[1..] {
        assert_eq!(v["datasource"]["uid"], "${datasource}", "{}", v["name"]);
    }
}

#[test]
fn panels_have_unique_ids_titles_descriptions_and_the_variable_data_source() {
    let d = dashboard();
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for p in panels(&d) {
        let id = p["id"].as_u64().expect("an id");
        assert!(ids.insert(id), "panel id {id} twice");
        let title = p["title"].as_str().expect("a title");
        assert!(titles.insert(title), "title {title} twice");
        if p["type"] == "row" {
            continue;
        }
        assert!(
            p["description"].as_str().is_some_and(|s| s.len() > 20),
            "{title}: a description says what it shows"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(t["refId"].as_str().expect("refId")),
                "{title}: refId twice"
            );
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                "{title}: a target without expr"
            );
        }
    }
}

#[test]
fn panels_fill_the_grid_without_overlapping() {
    let d = dashboard();
    let mut boxes: Vec<(&str, u64, u64, u64, u64)> = Vec::new();
    for p in panels(&d) {
        let title = p["title"].as_str().unwrap_or("?");
        let g = &p["gridPos"];
        let get = |k: &str| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        };
        let (x, y, w, h) = (get("x"), get("y"), get("w"), get("h"));
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: {g}");
        for (other, ox, oy, ow, oh) in &boxes {
            let apart = x + w <= *ox || ox + ow <= x || y + h <= *oy || oy + oh <= y;
            assert!(apart, "{title} overlaps {other}");
        }
        boxes.push((title, x, y, w, h));
    }
}

#[test]
fn every_query_filters_by_namespace_and_job_and_rates_over_the_rate_interval() {
    let d = dashboard();
    for p in panels(&d).iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap_or("?");
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_default();
            let names = metric_names(expr);
            // Each selector: `name{namespace=~"$namespace", job=~"$job"...}`.
            for n in &names {
                for (at, _) in expr.match_indices(n.as_str()) {
                    let rest = &expr[at + n.len()..];
                    if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                        continue;
                    }
                    assert!(
                        rest.starts_with("{namespace=~\"$namespace\", job=~\"$job\""),
                        "{title}: {n} not filtered by the variables in {expr}"
                    );
                }
            }
            if expr.contains("rate(") {
                assert!(
                    expr.contains("[$__rate_interval]"),
                    "{title}: rate over $__rate_interval: {expr}"
                );
            }
        }
    }
}

#[test]
fn the_docs_describe_every_panel() {
    let doc = read(&root().join("docs/operations.md"));
    let start = doc
        .find("## Dashboard")
        .expect("docs/operations.md's Dashboard section");
    let section = &doc[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let d = dashboard();
    for p in panels(&d).iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().unwrap_or("?");
        assert!(
            section.contains(&format!("**{title}**")),
            "docs/operations.md's Dashboard section has no **{title}**"
        );
    }
}
