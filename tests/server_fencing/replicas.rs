//! Real replicas with pod-bound tokens under the fence, and what a replica says of it at
//! startup.
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_pod_tokens_lead_and_write_through_the_fence() {
    let _one = ONE_AT_A_TIME.lock().await;
    let f = Fenced::new("replicas").await;
    let controller = format!("fence.dev/{}", f.ns);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut replicas = Vec::new();
    let mut clients = Vec::new();
    for pod in ["replica-a", "replica-b"] {
        let token = f.pod_token(pod).await;
        let kubeconfig = dir.path().join(pod);
        f.server
            .write_token_kubeconfig(&token, &kubeconfig)
            .expect("kubeconfig");
        let args: Vec<String> = [
            "--lock-backend",
            "kubernetes",
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--leader-election-namespace",
            &f.ns,
            "--controller-name",
            &controller,
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        replicas.push(Replica::start(pod, &args));
        clients.push((pod, f.raw_client(&token)));
    }
    // Each says once that the fence is in force (the component's ClusterRole lets it look).
    for r in &mut replicas {
        let line = r.wait_for(FENCE_IN_FORCE, PATIENCE);
        assert_eq!(line.text("binding").as_deref(), Some(f.binding.as_str()));
    }
    // The leader's statuses land: its holder is `<pod>_<incarnation>`, which the policy admits.
    let ctl = controller.clone();
    wait_for(&f.routes, "route", "written by the leader", move |r| {
        route_says(r, &ctl, "ResolvedRefs", "True", "ResolvedRefs")
    })
    .await;
    let holder = testkit::kube::lease_holder(&f.admin, &f.ns, LEASE)
        .await
        .expect("the holder");
    let (leader, follower) = if holder.starts_with("replica-a_") {
        (0, 1)
    } else {
        (1, 0)
    };
    let r = f.routes.get("route").await.expect("route");
    assert!(
        status_managers(&r).contains(&manager_of(clients[leader].0)),
        "the leader wrote: {:?}",
        status_managers(&r)
    );
    // The follower's token cannot write, whatever its process does.
    f.refused(
        &clients[follower].1,
        clients[follower].0,
        &holder,
        "the follower",
    )
    .await;
    // The leader stops; the follower takes over and its writes land.
    replicas[leader].terminate();
    let pod = clients[follower].0;
    put(
        &f.routes,
        &route(&f.ns, "route", "gw", &[(&f.ns, "missing", 80)]),
    )
    .await;
    let ctl = controller.clone();
    wait_for(&f.routes, "route", "written by the new leader", move |r| {
        route_says(r, &ctl, "ResolvedRefs", "False", "BackendNotFound")
    })
    .await;
    let r = f.routes.get("route").await.expect("route");
    assert!(
        status_managers(&r).contains(&manager_of(pod)),
        "the new leader wrote: {:?}",
        status_managers(&r)
    );
    for r in &mut replicas {
        let said = r
            .lines()
            .iter()
            .filter(|l| l.message().starts_with("server-side fencing"))
            .count();
        assert_eq!(said, 1, "{}: said once", r.name);
    }
    drop(replicas);
    f.remove().await;
}

/// What a replica logs when the fence is in force.
const FENCE_IN_FORCE: &str = "server-side fencing: the apiserver admits";
/// What it logs when it is not.
const FENCE_MISSING: &str = "server-side fencing: not in force";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_names_what_the_fence_lacks_once_and_runs_on() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = server().await;
    let ns = "fence-lacking";
    server.create_namespace(ns).await.expect("namespace");
    let token = server.service_account_token(ns, SA).await.expect("token");
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
    for file in ["rbac-leader-election.yaml", "rbac-status-writer.yaml"] {
        testkit::rbac::bind_manifest(server, &base.join(file), ns, SA)
            .await
            .unwrap_or_else(|e| panic!("binding {file}: {e:#}"));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    server
        .write_token_kubeconfig(&token, &kubeconfig)
        .expect("kubeconfig");
    let args = replica_args(&kubeconfig, ns, &format!("fence.dev/{ns}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Without the component's ClusterRole it cannot look, and says so, and leads all the same.
    let mut r = Replica::start("lacking-a", &args);
    let line = r.wait_for(FENCE_MISSING, PATIENCE);
    let missing = line.text("missing").unwrap_or_default();
    assert!(
        missing.contains("cannot list validatingadmissionpolicybindings")
            && missing.contains("gateway-leader-fencing-check"),
        "{missing}"
    );
    r.wait_for(gateway_leader_log::message::LEADING, PATIENCE);
    drop(r);
    // With it, and no binding on this Lease: named too.
    testkit::rbac::bind_manifest(
        server,
        &base.join("../components/server-fencing/rbac-fencing-check.yaml"),
        ns,
        SA,
    )
    .await
    .expect("binding the fencing check's ClusterRole");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let mut r = Replica::start("lacking-b", &args);
        let line = r.wait_for(FENCE_MISSING, PATIENCE);
        let missing = line.text("missing").unwrap_or_default();
        // The new grant may take a moment to reach the authorizer.
        if missing.contains("cannot list") && tokio::time::Instant::now() < deadline {
            continue;
        }
        assert!(missing.contains("this Lease"), "{missing}");
        r.wait_for(gateway_leader_log::message::LEADING, PATIENCE);
        let said = r
            .lines()
            .iter()
            .filter(|l| l.message().starts_with("server-side fencing"))
            .count();
        assert_eq!(said, 1, "said once");
        break;
    }
}
