//! The writer's read-modify-write against a real kube-apiserver with the upstream CRDs: a status
//! that already observed a newer generation than the one a desired status was computed from is
//! not overwritten (gateway-api#4008); the write waits for a computation from the newer spec.

use std::sync::Arc;

use gateway_api::httproutes::{HttpRoute, HttpRouteStatus, HttpRouteStatusParentsParentRef};
use kube::api::{Patch, PatchParams, PostParams};
use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
use serde_json::json;

use super::*;
use crate::desired::{condition, RouteParentStatus};

const NS: &str = "writer-stale";
const CONTROLLER: &str = "gateway-leader.dev/writer-stale";

/// Our `status.parents` entry for Gateway `gw`, its Accepted condition as given.
fn entry(accepted: bool, reason: &str, generation: i64) -> RouteParentStatus {
    RouteParentStatus {
        conditions: vec![condition("Accepted", accepted, reason, reason, generation)],
        controller_name: CONTROLLER.into(),
        parent_ref: HttpRouteStatusParentsParentRef {
            name: "gw".into(),
            ..Default::default()
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_that_observed_a_newer_generation_is_not_overwritten() {
    let s = testkit::kube::KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    s.install_gateway_api()
        .await
        .expect("the Gateway API CRDs are installed");
    s.create_namespace(NS).await.expect("namespace");
    let client = s.admin_client();
    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), NS);
    let route: HttpRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "r", "namespace": NS},
        "spec": {"parentRefs": [{"name": "gw"}]}
    }))
    .expect("route");
    routes
        .create(&PostParams::default(), &route)
        .await
        .expect("created");
    // Generation 2, and a status that observed it (another replica of ours, whose watch is
    // ahead of this one's).
    let moved = routes
        .patch(
            "r",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hostnames": ["a.example.com"]}})),
        )
        .await
        .expect("spec changed");
    assert_eq!(moved.metadata.generation, Some(2));
    let mut newer = moved;
    newer.status = Some(HttpRouteStatus {
        parents: vec![entry(true, "Accepted", 2)],
    });
    newer.metadata.managed_fields = None;
    let newer = routes
        .replace_status("r", &PostParams::default(), &newer)
        .await
        .expect("the newer status");

    let elector = Elector::spawn(
        Arc::new(MemoryStore::new().lock("writer-stale")),
        ElectorConfig {
            identity: Identity::new("writer-stale"),
            timing: Timing::default(),
            release_on_shutdown: true,
        },
    )
    .expect("elector");
    let leadership = elector.leadership();
    drop(leadership.wait_leader().await.expect("leads"));
    let job = Job {
        client,
        leadership,
        config: Arc::new(WriterConfig::default().with_controller_name(CONTROLLER)),
        watched: None,
    };
    let key = ObjectKey::namespaced(Kind::HttpRoute, NS, "r");

    // Computed from generation 1 (a cache behind the server): not written.
    let stale = Desired::Route {
        generation: 1,
        parents: vec![entry(false, "NoMatchingParent", 1)].into(),
    };
    assert!(matches!(job.write(&key, &stale).await, Ok(Written::Stale)));
    let after = routes.get("r").await.expect("route");
    assert_eq!(
        after.metadata.resource_version, newer.metadata.resource_version,
        "nothing was sent"
    );
    // Computed from generation 2 once the cache caught up: written.
    let caught_up = Desired::Route {
        generation: 2,
        parents: vec![entry(false, "NoMatchingParent", 2)].into(),
    };
    assert!(matches!(
        job.write(&key, &caught_up).await,
        Ok(Written::Sent { .. })
    ));
    let after = routes.get("r").await.expect("route");
    let parents = after.status.expect("status").parents;
    assert_eq!(parents[0].conditions[0].reason, "NoMatchingParent");
    elector.shutdown().await.expect("released");
}
