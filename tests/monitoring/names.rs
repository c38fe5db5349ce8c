//! Every metric name a rule or a panel reads is served by a running replica: `run`, `proxy`
//! (answering a controller's election, so that every family has a sample to show) and `exec`
//! are started against the test apiserver and scraped, and a name no mode serves fails the test.
//! A rename in src/metrics.rs that leaves the rules or the dashboard behind is caught here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use gateway_leader_log::message;

use super::common::gateway::{apiserver, replica_args, PATIENCE};
use super::common::proxy::Proxy;
use super::common::{blocking, Replica};
use super::promql::metric_names;
use super::{dashboard_exprs, rules};

/// The series names an exposition serves: its samples' names, and its families' with the
/// suffixes of their types (prometheus-client leaves out a family that has no sample yet).
fn served(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// `gateway-leader exec` electing on the Lease `lock` in `ns`, running `sleep` while it leads.
fn exec(kubeconfig: &Path, ns: &str, lock: &str) -> Replica {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gateway-leader"));
    cmd.arg("exec")
        .args(["--lock-backend", "kubernetes", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--leader-election-namespace", ns])
        .args(["--leader-election-lock-name", lock])
        .args(["--leader-election-identity", "mon-exec"])
        .args(["--health-addr", "127.0.0.1:0", "--log-format", "json"])
        .args(["--", "sleep", "600"])
        .env("RUST_LOG", "info");
    testkit::replica::clear_settings(&mut cmd);
    Replica::spawn("mon-exec", cmd)
}

#[test]
fn the_exposition_parser_expands_families_by_type() {
    let text = "# TYPE a counter\n# TYPE b histogram\n# TYPE c gauge\nc 1\nd_total{x=\"y\"} 2\n";
    let got: Vec<String> = served(text).into_iter().collect();
    assert_eq!(
        got,
        ["a_total", "b_bucket", "b_count", "b_sum", "c", "d_total"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_name_the_rules_and_the_dashboard_read_is_served_by_some_mode() {
    let s = apiserver().await;
    let ns = "monitoring-names";
    s.create_namespace(ns).await.expect("namespace");
    let kubeconfig = s.kubeconfig_path().to_path_buf();
    let args = replica_args(&kubeconfig, ns, "gateway-leader.dev/monitoring");
    let dir = tempfile::tempdir().expect("temp dir");
    let by_mode = blocking(|| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut run = Replica::start("mon-run", &args);
        let mut proxy = Proxy::start(
            s,
            "mon-proxy",
            ns,
            dir.path(),
            &[
                "--leader-election-lock-name",
                "mon-proxy-lock",
                "--proxy-election-lease",
                &format!("{ns}/controller"),
            ],
        );
        let mut exec = exec(&kubeconfig, ns, "mon-exec-lock");
        let mut by_mode = BTreeMap::new();
        for (mode, r) in [
            ("run", &mut run),
            ("proxy", &mut proxy.replica),
            ("exec", &mut exec),
        ] {
            r.wait_for(message::LEADING, PATIENCE);
            let addr = r.health_addr(PATIENCE);
            let text = testkit::metrics::get(addr, "/metrics").expect("/metrics answers");
            by_mode.insert(mode, served(&text));
        }
        by_mode
    });
    for (mode, names) in &by_mode {
        assert!(
            names.contains("gateway_leader_term"),
            "{mode} serves the leadership metrics: {names:?}"
        );
    }
    assert!(
        by_mode["proxy"].contains("gateway_leader_proxy_election_lease"),
        "the proxy answering an election says so"
    );
    let mut read = Vec::new();
    for r in rules() {
        read.extend(
            metric_names(&r.expr)
                .into_iter()
                .map(|n| (format!("alert {}", r.alert), n)),
        );
    }
    for (panel, expr) in dashboard_exprs() {
        read.extend(
            metric_names(&expr)
                .into_iter()
                .map(|n| (format!("panel {panel}"), n)),
        );
    }
    assert!(
        read.len() > 20,
        "the rules and the dashboard read metrics: {read:?}"
    );
    let unserved: Vec<&(String, String)> = read
        .iter()
        .filter(|(_, n)| !by_mode.values().any(|names| names.contains(n)))
        .collect();
    assert!(
        unserved.is_empty(),
        "read but served by no mode (run, proxy, exec): {unserved:#?}"
    );
}
