//! The `status_writer` example on a real kube-apiserver with the Gateway API CRDs, judged by what
//! the server holds: while it leads it writes an accepted status on a GatewayClass of its
//! controller, under its own field manager; on SIGTERM it exits cleanly, with the Lease released
//! and its metrics printed.

use std::time::Duration;

use gateway_api::gatewayclasses::{GatewayClass, GatewayClassSpec};
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use kube::Api;
use nix::sys::signal::Signal;
use testkit::cargo::{workspace_example, Running};
use testkit::kube::KubeApiServer;

/// How long any step may take on a busy machine (the first includes building the example).
const PATIENCE: Duration = Duration::from_secs(180);

/// The controllerName the example serves.
const CONTROLLER: &str = "gateway-leader.dev/gateway-controller";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_writer_example_writes_while_leading_and_releases_on_sigterm() {
    // A server of its own: the example serves every GatewayClass of its controllerName.
    let s = KubeApiServer::start_local()
        .await
        .expect("a kube-apiserver (see testkit's message for how to get one)");
    testkit::gateway_api::install(&s.admin_client())
        .await
        .expect("the Gateway API CRDs");
    let classes: Api<GatewayClass> = Api::all(s.admin_client());
    let class = GatewayClass::new(
        "example",
        GatewayClassSpec {
            controller_name: CONTROLLER.into(),
            ..Default::default()
        },
    );
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("creating the GatewayClass");

    let exe =
        workspace_example("gateway-leader-status", "status_writer").expect("building the example");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.env("KUBECONFIG", s.kubeconfig_path())
        .env("RUST_LOG", "info");
    let example = Running::spawn(cmd).expect("starting the example");

    let accepted_by_the_example = |gc: Option<&GatewayClass>| {
        gc.is_some_and(|gc| {
            let accepted = gc
                .status
                .as_ref()
                .and_then(|st| st.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Accepted" && c.status == "True")
                });
            // managedFields has no `subresource` before Kubernetes 1.22: the fields tell.
            let manager = gc.metadata.managed_fields.iter().flatten().any(|m| {
                m.manager.as_deref() == Some("status-writer-example")
                    && m.fields_v1
                        .as_ref()
                        .is_some_and(|f| f.0.get("f:status").is_some())
            });
            accepted && manager
        })
    };
    let written = tokio::time::timeout(
        PATIENCE,
        await_condition(classes, "example", accepted_by_the_example),
    )
    .await;
    if !matches!(written, Ok(Ok(_))) {
        let said = example.stop(Signal::SIGTERM, PATIENCE).await;
        panic!("no accepted status by the example ({written:?}); it printed {said:?}");
    }

    let (status, out) = example
        .stop(Signal::SIGTERM, PATIENCE)
        .await
        .expect("it exits");
    assert!(status.success(), "{status}; it printed {out:?}");
    assert!(
        out.iter()
            .any(|l| l.starts_with("example_status_writes_total{kind=\"GatewayClass\"}")),
        "its metrics, under its own prefix: {out:?}"
    );
    let holder = testkit::kube::lease_holder(&s.admin_client(), "default", "status-writer-example")
        .await
        .expect("reading the Lease");
    assert_eq!(holder, "", "the Lease is released");
}
