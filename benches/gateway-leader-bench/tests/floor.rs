//! The Kubernetes floor (`bare Lease takeover`) on a real apiserver: each round hands the Lease
//! to the other client and writes the route's status for its changed spec, as the apiserver
//! holds them afterwards; its instants come in the order of the requests.

use gateway_api::httproutes::HttpRoute;
use gateway_leader_bench::cluster::{Cluster, ROUTE};
use gateway_leader_bench::floor;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_round_hands_the_lease_over_and_writes_the_changed_routes_status() {
    let cluster = Cluster::start(None).await.expect("a local apiserver");
    let ns = "bench-anchor-kubernetes";
    let rounds = 3;
    let samples = floor::run(&cluster, rounds).await.expect("the floor runs");
    assert_eq!(samples.len(), rounds, "{samples:#?}");
    for s in &samples {
        assert!(s.error.is_none(), "{s:#?}");
        let (released, led, wrote) = (
            s.to_released_ms.expect("released"),
            s.to_leader_ms.expect("led"),
            s.to_write_ms.expect("wrote"),
        );
        // The take waits for the release's watch event, the status write for the take.
        assert!(0.0 < released && released <= led && led <= wrote, "{s:#?}");
    }

    let lease = Api::<Lease>::namespaced(cluster.client(), ns)
        .get("floor")
        .await
        .expect("the floor's Lease");
    let spec = lease.spec.expect("a spec");
    // Created and taken by a, then taken back and forth: b after the third round.
    assert_eq!(spec.holder_identity.as_deref(), Some("bench-floor-b"));
    assert_eq!(spec.lease_transitions, Some(1 + rounds as i32));

    let route = Api::<HttpRoute>::namespaced(cluster.client(), ns)
        .get(ROUTE)
        .await
        .expect("the floor's route");
    let generation = route.metadata.generation.expect("a generation");
    let parents = route.status.expect("a status").parents;
    assert_eq!(parents.len(), 1, "{parents:#?}");
    assert_eq!(
        parents[0].controller_name,
        "gateway-leader.dev/bench-anchor-kubernetes"
    );
    // Written for the spec of the last round's change (an odd number of changes: the missing
    // backend).
    for c in &parents[0].conditions {
        assert_eq!(c.observed_generation, Some(generation), "{c:#?}");
    }
    let resolved = parents[0]
        .conditions
        .iter()
        .find(|c| c.type_ == "ResolvedRefs")
        .expect("ResolvedRefs");
    assert_eq!(
        (resolved.status.as_str(), resolved.reason.as_str()),
        ("False", "BackendNotFound")
    );
}
