//! The `configmap_controller` example on a real kube-apiserver, judged by what the server holds:
//! it annotates a labelled ConfigMap while it leads, and on SIGTERM it exits cleanly with its
//! Lease released.

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use nix::sys::signal::Signal;
use testkit::cargo::{workspace_example, Running};

/// How long any step may take on a busy machine (the first includes building the example).
const PATIENCE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configmap_controller_example_annotates_while_leading_and_releases_on_sigterm() {
    let s = common::server().await;
    // The example works in its kubeconfig's namespace, `default`.
    let configmaps: Api<ConfigMap> = Api::namespaced(s.admin_client(), "default");
    let name = format!(
        "example-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.clone());
    cm.metadata.labels =
        Some([("example.gateway-leader.dev/managed".into(), "true".into())].into());
    cm.data = Some([("a".to_string(), "1".to_string())].into());
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("creating the ConfigMap");

    let exe = workspace_example("leader-lock-kubernetes", "configmap_controller")
        .expect("building the example");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("example-test")
        .env("KUBECONFIG", s.kubeconfig_path());
    let example = Running::spawn(cmd).expect("starting the example");

    let annotated = |cm: Option<&ConfigMap>| {
        cm.is_some_and(|cm| {
            let a = cm.annotations();
            a.get("example.gateway-leader.dev/keys").map(String::as_str) == Some("1")
                && a.get("example.gateway-leader.dev/written-by")
                    .is_some_and(|w| w.starts_with("example-test_"))
        })
    };
    let written = tokio::time::timeout(PATIENCE, await_condition(configmaps, &name, annotated))
        .await
        .expect("annotated in time")
        .expect("watching the ConfigMap")
        .expect("the ConfigMap");
    // The term it stamped is the Lease's: the term the write gate checked.
    let lease = Api::<Lease>::namespaced(s.admin_client(), "default")
        .get("configmap-controller")
        .await
        .expect("reading the Lease");
    let transitions = lease.spec.and_then(|s| s.lease_transitions);
    let stamped = written.annotations().get("example.gateway-leader.dev/term");
    assert_eq!(
        stamped.and_then(|t| t.parse::<i32>().ok()),
        transitions,
        "the stamped term {stamped:?} is the Lease's leaseTransitions"
    );

    let (status, out) = example
        .stop(Signal::SIGTERM, PATIENCE)
        .await
        .expect("it exits");
    assert!(status.success(), "{status}; it printed {out:?}");
    let holder = testkit::kube::lease_holder(&s.admin_client(), "default", "configmap-controller")
        .await
        .expect("reading the Lease");
    assert_eq!(holder, "", "the Lease is released");
}
