//! On a test apiserver with [`SimulatedNodes`], a Deployment's Pods are created, bound to the
//! fake Node and Ready in the API (while no container runs), as the upstream Gateway API
//! conformance suite's readiness checks need.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::Api;
use testkit::kube::simulated::NODE_NAME;
use testkit::kube::{KubeApiServer, SimulatedNodes};

const NAMESPACE: &str = "simulated";
const REPLICAS: usize = 2;
/// Generous: the three components start and sync beside the test on a busy 2-core machine.
const LIMIT: Duration = Duration::from_secs(120);

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn a_deployments_pods_are_bound_to_the_fake_node_and_ready() {
    let server = KubeApiServer::start_local_with(SimulatedNodes::apiserver_options())
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    let mut nodes = SimulatedNodes::start(&server)
        .await
        .expect("kube-controller-manager, kube-scheduler and kwok start");
    assert_eq!(nodes.node_name(), NODE_NAME);
    server.create_namespace(NAMESPACE).await.expect("namespace");
    let client = server.admin_client();
    // The conformance suite's echo backends are Deployments like this one; the image is never
    // pulled, since no kubelet runs.
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "backend" },
        "spec": {
            "replicas": REPLICAS,
            "selector": { "matchLabels": { "app": "backend" } },
            "template": {
                "metadata": { "labels": { "app": "backend" } },
                "spec": { "containers": [{
                    "name": "backend",
                    "image": "gcr.io/k8s-staging-gateway-api/echo-basic:v20240412-v1.0.0-394-g40c666fd",
                    "ports": [{ "containerPort": 3000 }],
                }] },
            },
        },
    }))
    .expect("a Deployment");
    let created = Instant::now();
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("creating the Deployment");

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut last;
    let ready = loop {
        nodes
            .ensure_running()
            .expect("the simulated nodes' components keep running");
        match pods.list(&ListParams::default()).await {
            Ok(list) => {
                let pods = list.items.len();
                let ready: Vec<Pod> = list.items.into_iter().filter(is_ready).collect();
                if ready.len() >= REPLICAS {
                    break ready;
                }
                last = format!("{pods} Pods, {} Ready", ready.len());
            }
            Err(e) => last = e.to_string(),
        }
        assert!(
            created.elapsed() < LIMIT,
            "{REPLICAS} Pods were not Ready within {LIMIT:?} (last: {last});\n{}",
            nodes.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let elapsed = created.elapsed();
    eprintln!("Deployment created to {REPLICAS} Pods Ready: {elapsed:?}");

    assert_eq!(ready.len(), REPLICAS, "exactly the Deployment's Pods");
    for pod in &ready {
        let spec = pod.spec.as_ref().expect("a Pod has a spec");
        assert_eq!(
            spec.node_name.as_deref(),
            Some(NODE_NAME),
            "bound to the fake Node by kube-scheduler"
        );
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some("default"),
            "admitted with the namespace's default ServiceAccount"
        );
        let status = pod.status.as_ref().expect("a Ready Pod has a status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(
            pod.metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| o.iter().any(|o| o.kind == "ReplicaSet")),
            "created by the Deployment's ReplicaSet"
        );
    }
    // ServiceAccount admission refuses a Pod whose account does not exist: the
    // serviceaccount controller made it.
    Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .get("default")
        .await
        .expect("the namespace's default ServiceAccount exists");
    // The Node's heartbeat is its Lease: without one, the node-lifecycle controller marks the
    // Node unknown after its grace period and every Pod on it not Ready (the conformance suite
    // then waits for Pods that flap).
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    let renewed = loop {
        if let Some(renew) = leases
            .get_opt(NODE_NAME)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.renew_time)
        {
            break renew;
        }
        assert!(
            created.elapsed() < LIMIT,
            "no Lease kube-node-lease/{NODE_NAME} within {LIMIT:?}: the Node has no heartbeat;\n{}",
            nodes.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("the Node's Lease was renewed at {renewed:?}");
}
