//! How the status writer writes conditions, on a real kube-apiserver: the rules gateway-api#4008
//! wrote down in Gateway API v1.5 (read-modify-write; never remove a condition another controller
//! owns, also inside our own `status.parents` entry; one condition per type). The third rule (no
//! write over a status that observed a newer generation) is tested on the writer itself, which
//! can be handed a desired status computed from an older generation:
//! `status/src/writer/apiserver_tests.rs`.

mod common;

use common::gateway::*;
use common::Replica;
use gateway_api::httproutes::HttpRoute;
use gateway_leader_log::message;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

/// A condition type no controller of ours sets.
const THEIRS: &str = "example.net/Inspected";

fn their_condition(generation: i64) -> Condition {
    serde_json::from_value(json!({
        "type": THEIRS, "status": "True", "reason": "Inspected", "message": "by example.net",
        "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"
    }))
    .expect("condition")
}

/// The types of the conditions in our entry, in order.
fn our_types(r: &HttpRoute, controller: &str) -> Vec<String> {
    our_parent(r, controller)
        .map(|p| p.conditions.iter().map(|c| c.type_.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_another_controller_added_to_our_entry_survives_and_ours_merge_by_type() {
    let (ns, controller) = ("cond-rules", "gateway-leader.dev/cond-rules");
    let client = namespace_with_class(ns, controller).await;
    gateway_and_route(&client, ns, 80).await;
    let s = apiserver().await;
    let args = replica_args(s.kubeconfig_path(), ns, controller);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut leader = Replica::start("cr-a", &args);
    common::blocking(|| leader.wait_for(message::LEADING, PATIENCE));
    let routes = Api::<HttpRoute>::namespaced(client.clone(), ns);
    let c = controller.to_string();
    wait_for(&routes, "route", "accepted and resolved", move |r| {
        route_says(r, &c, "Accepted", "True", "Accepted")
            && route_says(r, &c, "ResolvedRefs", "True", "ResolvedRefs")
    })
    .await;

    // Another controller adds a condition of its own type to our entry.
    let mut r = routes.get_status("route").await.expect("route");
    let generation = r.metadata.generation.unwrap_or(1);
    let accepted_since = our_parent(&r, controller)
        .and_then(|p| condition(&p.conditions, "Accepted"))
        .map(|c| c.last_transition_time.clone())
        .expect("our Accepted");
    if let Some(p) = r.status.as_mut().and_then(|s| {
        s.parents
            .iter_mut()
            .find(|p| p.controller_name == controller)
    }) {
        p.conditions.push(their_condition(generation));
    }
    r.metadata.managed_fields = None;
    routes
        .replace_status("route", &PostParams::default(), &r)
        .await
        .expect("their condition added");

    // Our next write (the backend goes away: ResolvedRefs turns False) keeps it.
    put(&routes, &route(ns, "route", "gw", &[(ns, "missing", 80)])).await;
    let c = controller.to_string();
    wait_for(&routes, "route", "ResolvedRefs False", move |r| {
        route_says(r, &c, "ResolvedRefs", "False", "BackendNotFound")
    })
    .await;
    let r = routes.get("route").await.expect("route");
    let entry = our_parent(&r, controller).expect("our entry");
    let theirs = condition(&entry.conditions, THEIRS).expect("their condition survives");
    assert_eq!(
        (theirs.reason.as_str(), theirs.message.as_str()),
        ("Inspected", "by example.net"),
        "as they wrote it"
    );
    // Ours merged by type: one of each, ours updated in place, and Accepted, whose status did
    // not change, keeps its lastTransitionTime.
    assert_eq!(
        our_types(&r, controller),
        ["Accepted", "ResolvedRefs", THEIRS],
        "one condition per type, each where it stood"
    );
    let accepted = condition(&entry.conditions, "Accepted").expect("Accepted");
    assert_eq!(accepted.last_transition_time, accepted_since);
    assert_eq!(
        accepted.observed_generation, r.metadata.generation,
        "observedGeneration follows the spec"
    );

    // And once more (the backend comes back): still one of each, theirs still there.
    put(&routes, &route(ns, "route", "gw", &[(ns, "web", 80)])).await;
    let c = controller.to_string();
    wait_for(&routes, "route", "ResolvedRefs True again", move |r| {
        route_says(r, &c, "ResolvedRefs", "True", "ResolvedRefs")
    })
    .await;
    let r = routes.get("route").await.expect("route");
    assert_eq!(
        our_types(&r, controller),
        ["Accepted", "ResolvedRefs", THEIRS]
    );
}

/// Gateway API v1.7.0 conformance `GatewayNameMaximumLength`: a Gateway whose name has the
/// 253 characters a name may have is reconciled like any other, its conditions observing its
/// latest generation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_with_a_253_character_name_gets_conditions_of_its_latest_generation() {
    use gateway_api::gateways::Gateway;

    let (ns, controller) = ("cond-long", "gateway-leader.dev/cond-long");
    let client = namespace_with_class(ns, controller).await;
    let prefix = "gateway-name-maximum-length-";
    let name = format!("{prefix}{}", "a".repeat(253 - prefix.len()));
    let gateways = Api::<Gateway>::namespaced(client.clone(), ns);
    put(&gateways, &gateway(ns, &name, ns)).await;
    let s = apiserver().await;
    let args = replica_args(s.kubeconfig_path(), ns, controller);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut leader = Replica::start("cl-a", &args);
    common::blocking(|| leader.wait_for(message::LEADING, PATIENCE));
    wait_for(&gateways, &name, "Accepted at its generation", |g| {
        let generation = g.metadata.generation;
        g.status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .and_then(|c| condition(c, "Accepted"))
            .is_some_and(|c| c.status == "True" && c.observed_generation == generation)
    })
    .await;
}
