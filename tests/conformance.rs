//! The upstream Gateway API conformance suite (`sigs.k8s.io/gateway-api/conformance`, the
//! release of the newest CRDs), unmodified, against `gateway-leader run`: every test that sends
//! no traffic must pass (docs/conformance.md).
//!
//! The scene is a cluster without a data plane: the test apiserver with the Gateway API CRDs,
//! kube-controller-manager, kube-scheduler and kwok (so the suite's echo Deployments get Pods that
//! are Ready in the API while nothing runs: the suite waits for them), one replica of the binary
//! whose Gateways take their addresses from a ClusterIP Service standing for the data plane's,
//! and our GatewayClass. The suite infers the features from what the GatewayClass claims, runs
//! the conformance profiles of the route kinds we serve, and skips the tests listed in
//! `docs/conformance/excluded-tests.txt` (they send traffic), each with its reason.
//!
//! What is judged is the suite's own verdict (its exit status) and its report: no test failed in
//! any profile. `GATEWAY_LEADER_BLESS=1` writes the report to `docs/conformance/report.yaml`;
//! otherwise the test fails when that file no longer says what the run found (which tests passed
//! and which were skipped, per profile), so the published report never goes stale.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use gateway_leader_log::message;
use k8s_openapi::api::core::v1::Service;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;
use testkit::kube::{KubeApiServer, SimulatedNodes};

use common::{blocking, Replica};

/// Our GatewayClass; the suite's `-gateway-class`.
const CLASS: &str = "gateway-leader";
/// Where the Service standing for the data plane's lives, and the lock.
const NAMESPACE: &str = "gateway-leader-system";
/// The Service standing for the data plane's (`--gateway-addresses-service`).
const DATA_PLANE: &str = "data-plane";
/// An address no Service here has (TEST-NET-1, RFC 5737): the suite's unusable address.
const UNUSABLE_ADDRESS: &str = "192.0.2.1";
/// The conformance profiles of the route kinds the binary serves.
const PROFILES: &str = "GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TLS,GATEWAY-TCP,GATEWAY-UDP";
/// The suite's own deadlines are minutes per test when something is wrong; the whole run takes a
/// few minutes when nothing is.
const SUITE_TIMEOUT: &str = "40m";
/// Generous: the machine is busy.
const PATIENCE: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `docs/conformance/excluded-tests.txt`: test name → why it is skipped.
fn excluded() -> BTreeMap<String, String> {
    let path = repo().join("docs/conformance/excluded-tests.txt");
    let text = std::fs::read_to_string(&path).expect("docs/conformance/excluded-tests.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, why) = l
                .split_once('\t')
                .unwrap_or_else(|| panic!("{}: no tab after the name: {l:?}", path.display()));
            assert!(!why.trim().is_empty(), "{name}: no reason given");
            (name.to_string(), why.to_string())
        })
        .collect()
}

/// The tests each profile's report (core and extended) says failed, by "PROFILE level".
fn failed_by_profile(report: &serde_yaml::Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for profile in report
        .get("profiles")
        .and_then(|p| p.as_sequence())
        .expect("the report has profiles")
    {
        let name = profile
            .get("name")
            .and_then(|n| n.as_str())
            .expect("a profile name");
        for level in ["core", "extended"] {
            let failed: BTreeSet<String> = profile
                .get(level)
                .and_then(|r| r.get("failedTests"))
                .and_then(|l| l.as_sequence())
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
            out.insert(format!("{name} {level}"), failed);
        }
    }
    out
}

/// Each subtest of TestConformance and its verdict (`PASS`, `SKIP` or `FAIL`), from `go test
/// -v` output.
fn verdicts(output: &str) -> BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix("--- ")?;
            let (verdict, rest) = rest.split_once(": ")?;
            let name = rest.split_whitespace().next()?;
            let test = name.strip_prefix("TestConformance/")?;
            // Subtests of subtests (a test's own steps) are the test's business.
            (!test.contains('/')).then(|| (test.to_string(), verdict.to_string()))
        })
        .collect()
}

/// The report without what changes from run to run, for comparison: the date, and the order
/// of the profiles (the suite writes them from a Go map).
fn comparable(report: &str) -> serde_yaml::Value {
    let mut v: serde_yaml::Value = serde_yaml::from_str(report).unwrap_or_default();
    if let Some(m) = v.as_mapping_mut() {
        m.remove("date");
        if let Some(profiles) = m.get_mut("profiles").and_then(|p| p.as_sequence_mut()) {
            profiles.sort_by_key(|p| p.get("name").and_then(|n| n.as_str()).map(str::to_string));
        }
    }
    v
}

async fn data_plane_service(server: &KubeApiServer) -> String {
    server.create_namespace(NAMESPACE).await.expect("namespace");
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": DATA_PLANE, "namespace": NAMESPACE},
        "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80}]},
    }))
    .expect("a Service");
    let created = Api::<Service>::namespaced(server.admin_client(), NAMESPACE)
        .create(&PostParams::default(), &service)
        .await
        .expect("creating the data plane's Service");
    created
        .spec
        .and_then(|s| s.cluster_ip)
        .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())
        .expect("the apiserver gave the Service a cluster IP")
}

/// Runs the suite to the end; returns its exit status, its output and its report.
fn run_suite(
    kubeconfig: &Path,
    usable: &str,
    skip: &[String],
    out: &Path,
) -> (bool, String, String) {
    let suite = testkit::built::conformance().expect("the conformance suite is built");
    let report = out.join("report.yaml");
    let log = out.join("suite.log");
    let log_file = std::fs::File::create(&log).expect("the suite's log");
    let version = env!("CARGO_PKG_VERSION");
    let status = Command::new(&suite)
        .args([
            "-test.run=^TestConformance$",
            "-test.v",
            &format!("-test.timeout={SUITE_TIMEOUT}"),
            &format!("-gateway-class={CLASS}"),
            &format!("-conformance-profiles={PROFILES}"),
            &format!("-skip-tests={}", skip.join(",")),
            &format!("-usable-address={usable}"),
            &format!("-unusable-address={UNUSABLE_ADDRESS}"),
            &format!("-report-output={}", report.display()),
            "-organization=gateway-leader",
            "-project=gateway-leader",
            "-url=https://github.com/gateway-leader/gateway-leader",
            &format!("-version=v{version}"),
            "-contact=https://github.com/gateway-leader/gateway-leader/issues",
            "-mode=default",
        ])
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("log"))
        .stderr(log_file)
        .status()
        .expect("the conformance suite runs");
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let report = std::fs::read_to_string(&report).unwrap_or_default();
    (status.success(), output, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_suite_passes_every_test_that_sends_no_traffic() {
    let excluded = excluded();
    let server = KubeApiServer::start_local_with(SimulatedNodes::apiserver_options())
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    server
        .install_gateway_api()
        .await
        .expect("the Gateway API CRDs are installed");
    let _nodes = SimulatedNodes::start(&server)
        .await
        .expect("kube-controller-manager, kube-scheduler and kwok start");
    let usable = data_plane_service(&server).await;
    let kubeconfig = server.kubeconfig_path().to_path_buf();
    let classes: Api<gateway_api::gatewayclasses::GatewayClass> = Api::all(server.admin_client());
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": CLASS},
                "spec": {"controllerName": gateway_leader::config::DEFAULT_CONTROLLER_NAME},
            }))
            .expect("a GatewayClass"),
        )
        .await
        .expect("creating our GatewayClass");

    let kubeconfig_arg = kubeconfig.display().to_string();
    let addresses = format!("{NAMESPACE}/{DATA_PLANE}");
    let mut replica = Replica::start(
        "conformance",
        &[
            "--lock-backend",
            "kubernetes",
            "--kubeconfig",
            &kubeconfig_arg,
            "--leader-election-namespace",
            NAMESPACE,
            "--gateway-addresses-service",
            &addresses,
        ],
    );
    blocking(|| replica.wait_for(message::LEADING, PATIENCE));
    // The suite reads the features off the class once, at its start.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let class = classes.get(CLASS).await.expect("reading our GatewayClass");
        let claimed = class
            .status
            .and_then(|s| s.supported_features)
            .is_some_and(|f| !f.is_empty());
        if claimed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "our GatewayClass has no supportedFeatures after {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Kept after the run (target/tmp/conformance/): the suite's log is what to read on failure.
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).expect("target/tmp/conformance");
    let skip: Vec<String> = excluded.keys().cloned().collect();
    let log = out_dir.join("suite.log");
    let (ok, output, report) =
        tokio::task::spawn_blocking(move || run_suite(&kubeconfig, &usable, &skip, &out_dir))
            .await
            .expect("the suite's runner");
    let ran = verdicts(&output);
    let tail: String = output
        .lines()
        .filter(|l| l.contains("--- FAIL") || l.contains("Error Trace") || l.contains("Error:"))
        .take(60)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        ok,
        "the conformance suite failed (its log: {}):\n{tail}",
        log.display()
    );
    let failed: Vec<&String> = ran
        .iter()
        .filter(|(_, v)| *v == "FAIL")
        .map(|(n, _)| n)
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}\n{tail}");
    // The list stays true to the suite: every name in it is a test of the suite, and skipped.
    let unknown: Vec<&String> = excluded.keys().filter(|n| !ran.contains_key(*n)).collect();
    assert!(
        unknown.is_empty(),
        "docs/conformance/excluded-tests.txt names tests this suite does not have: {unknown:?}"
    );
    for name in excluded.keys() {
        assert_eq!(ran.get(name).map(String::as_str), Some("SKIP"), "{name}");
    }
    let parsed: serde_yaml::Value = serde_yaml::from_str(&report).expect("the report is YAML");
    for (profile, failed) in failed_by_profile(&parsed) {
        assert!(failed.is_empty(), "{profile}: failed {failed:?}");
    }
    // The report counts the tests that passed but does not name them; the suite's output does.
    let passed: &BTreeSet<String> = &ran
        .iter()
        .filter(|(_, verdict)| *verdict == "PASS")
        .map(|(name, _)| name.clone())
        .collect();
    assert!(
        passed.len() >= 20,
        "too few tests passed for a meaningful run: {passed:?}"
    );

    let published = repo().join("docs/conformance/report.yaml");
    if std::env::var_os("GATEWAY_LEADER_BLESS").is_some() {
        std::fs::write(&published, &report).expect("writing docs/conformance/report.yaml");
        let list: String = passed.iter().map(|n| format!("{n}\n")).collect();
        std::fs::write(repo().join("docs/conformance/passed-tests.txt"), list)
            .expect("writing docs/conformance/passed-tests.txt");
        return;
    }
    let old = std::fs::read_to_string(&published).unwrap_or_default();
    let old_passed: BTreeSet<String> =
        std::fs::read_to_string(repo().join("docs/conformance/passed-tests.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
    assert!(
        comparable(&old) == comparable(&report) && old_passed == *passed,
        "docs/conformance/report.yaml or passed-tests.txt is stale: the suite now says \
         otherwise. Regenerate them with\n  GATEWAY_LEADER_BLESS=1 cargo test --test conformance\n\
         The new report:\n{report}"
    );
}
