//! ListenerSets on a real kube-apiserver with the upstream CRDs: each ListenerSet reason
//! shows, a route attached through parentRef kind ListenerSet counts in that listener's
//! `attachedRoutes`, the Gateway counts its ListenerSets, and a takeover in the middle of changes
//! to ListenerSets loses none.

mod common;

use common::blocking;
use common::gateway::*;
use common::Replica;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use gateway_api::listenersets::ListenerSet;
use gateway_leader_log::message;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use serde_json::{json, Value};

/// A Gateway `name` with one HTTP listener on port 80 and `allowedListeners.namespaces.from`
/// (none: the field is left out).
fn gateway_allowing(ns: &str, name: &str, from: Option<&str>, extra: Value) -> Gateway {
    let mut spec = json!({"gatewayClassName": ns, "listeners": [
        {"name": "http", "protocol": "HTTP", "port": 80}
    ]});
    if let Some(from) = from {
        spec["allowedListeners"] = json!({"namespaces": {"from": from}});
    }
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": ns}, "spec": spec
    }))
    .expect("gateway")
}

/// A ListenerSet on Gateway `gateway` with these listeners.
fn listener_set(ns: &str, name: &str, gateway: &str, listeners: Value) -> ListenerSet {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRef": {"name": gateway}, "listeners": listeners}
    }))
    .expect("listener set")
}

fn http(name: &str, port: i32) -> Value {
    json!({"name": name, "protocol": "HTTP", "port": port})
}

/// An HTTPRoute attached to listener `section` of ListenerSet `set`.
fn route_to_set(ns: &str, name: &str, set: &str, section: &str) -> HttpRoute {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "ListenerSet",
                                 "name": set, "sectionName": section}],
                 "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}
    }))
    .expect("route")
}

/// A class for `ns`, Service `web`, and the Gateways, ListenerSets and HTTPRoutes of `ns`.
async fn scene(ns: &str, controller: &str) -> (Api<Gateway>, Api<ListenerSet>, Api<HttpRoute>) {
    let client = namespace_with_class(ns, controller).await;
    put(
        &Api::<Service>::namespaced(client.clone(), ns),
        &service(ns, "web", 80),
    )
    .await;
    (
        Api::namespaced(client.clone(), ns),
        Api::namespaced(client.clone(), ns),
        Api::namespaced(client, ns),
    )
}

/// Waits until ListenerSet `name` says `type_`=`status` (`reason`) for its generation.
async fn expect_set(api: &Api<ListenerSet>, name: &str, t: &str, st: &str, reason: &str) {
    let (t2, st2, r2) = (t.to_string(), st.to_string(), reason.to_string());
    wait_for(api, name, &format!("{t}={st} ({reason})"), move |ls| {
        let conditions = ls.status.as_ref().and_then(|s| s.conditions.as_deref());
        condition(conditions.unwrap_or_default(), &t2).is_some_and(|c| {
            c.status == st2 && c.reason == r2 && c.observed_generation == ls.metadata.generation
        })
    })
    .await;
}

/// Waits until listener `listener` of ListenerSet `name` counts `routes` attached routes.
async fn expect_attached(api: &Api<ListenerSet>, name: &str, listener: &str, routes: i32) {
    let l = listener.to_string();
    wait_for(
        api,
        name,
        &format!("{routes} routes on {listener}"),
        move |ls| {
            ls.status
                .as_ref()
                .and_then(|s| s.listeners.as_ref())
                .is_some_and(|ls| {
                    ls.iter()
                        .any(|x| x.name == l && x.attached_routes == routes)
                })
        },
    )
    .await;
}

/// Waits until Gateway `name` counts `sets` attached ListenerSets.
async fn expect_attached_sets(api: &Api<Gateway>, name: &str, sets: i32) {
    wait_for(api, name, &format!("{sets} ListenerSets"), move |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.attached_listener_sets == Some(sets))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_sets_get_the_spec_reasons() {
    let ns = "lset-reasons";
    let controller = "gateway-leader.dev/lset-reasons";
    let (gateways, sets, routes) = scene(ns, controller).await;
    put(
        &gateways,
        &gateway_allowing(ns, "open", Some("Same"), json!({})),
    )
    .await;
    put(&gateways, &gateway_allowing(ns, "closed", None, json!({}))).await;
    put(
        &gateways,
        &gateway_allowing(
            ns,
            "broken",
            Some("All"),
            json!({"addresses": [{"type": "IPAddress", "value": "10.0.0.1"}]}),
        ),
    )
    .await;
    put(
        &sets,
        &listener_set(ns, "ok", "open", json!([http("extra", 8080)])),
    )
    .await;
    // Port 80 is the Gateway's own HTTP listener's: a TLS listener there conflicts with it.
    put(
        &sets,
        &listener_set(
            ns,
            "conflict",
            "open",
            json!([{"name": "tls", "protocol": "TLS", "port": 80,
                    "tls": {"mode": "Passthrough"}}]),
        ),
    )
    .await;
    put(
        &sets,
        &listener_set(ns, "denied", "closed", json!([http("a", 8081)])),
    )
    .await;
    put(
        &sets,
        &listener_set(ns, "orphan", "broken", json!([http("a", 8081)])),
    )
    .await;
    put(&routes, &route_to_set(ns, "via-set", "ok", "extra")).await;

    let mut args = replica_args(apiserver().await.kubeconfig_path(), ns, controller);
    args.push("--leader-election-disable".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _replica = Replica::start("lset-reasons-a", &args);

    expect_set(&sets, "ok", "Accepted", "True", "Accepted").await;
    expect_set(&sets, "ok", "Programmed", "True", "Programmed").await;
    expect_set(&sets, "denied", "Accepted", "False", "NotAllowed").await;
    expect_set(&sets, "denied", "Programmed", "False", "NotAllowed").await;
    expect_set(&sets, "orphan", "Accepted", "False", "ParentNotAccepted").await;
    expect_set(&sets, "conflict", "Accepted", "False", "ListenersNotValid").await;
    wait_for(&sets, "conflict", "a ProtocolConflict", |ls| {
        ls.status
            .as_ref()
            .and_then(|s| s.listeners.as_ref())
            .and_then(|l| l.first())
            .and_then(|l| condition(&l.conditions, "Conflicted"))
            .is_some_and(|c| c.status == "True" && c.reason == "ProtocolConflict")
    })
    .await;
    expect_attached(&sets, "ok", "extra", 1).await;
    wait_for(
        &routes,
        "via-set",
        "Accepted through the ListenerSet",
        |r| any_route_says(r, controller, "Accepted", "True", "Accepted"),
    )
    .await;
    expect_attached_sets(&gateways, "open", 1).await;
    expect_attached_sets(&gateways, "broken", 0).await;
    // Without allowedListeners the count is not ours to set.
    let closed = gateways.get("closed").await.expect("closed gateway");
    assert_eq!(
        closed.status.and_then(|s| s.attached_listener_sets),
        None,
        "a Gateway without allowedListeners gets no attachedListenerSets"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_in_the_middle_of_changes_to_listener_sets_loses_none() {
    let ns = "lset-takeover";
    let controller = "gateway-leader.dev/lset-takeover";
    let (gateways, sets, routes) = scene(ns, controller).await;
    put(
        &gateways,
        &gateway_allowing(ns, "gw", Some("Same"), json!({})),
    )
    .await;
    put(
        &sets,
        &listener_set(ns, "a", "gw", json!([http("one", 8080)])),
    )
    .await;
    put(
        &sets,
        &listener_set(ns, "b", "gw", json!([http("two", 8081)])),
    )
    .await;
    put(&routes, &route_to_set(ns, "r", "a", "one")).await;

    let args = replica_args(apiserver().await.kubeconfig_path(), ns, controller);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = Replica::start("lset-a", &args);
    blocking(|| first.wait_for(message::LEADING, PATIENCE));
    let mut second = Replica::start("lset-b", &args);
    blocking(|| second.wait_for(message::FOLLOWING, PATIENCE));
    expect_attached(&sets, "a", "one", 1).await;
    expect_set(&sets, "b", "Accepted", "True", "Accepted").await;
    expect_attached_sets(&gateways, "gw", 2).await;

    // Crash the leader and change the ListenerSets while nobody may write (the lease runs
    // 3 s): `b` moves to a Gateway that does not allow it, `a` gets a second listener and the
    // route moves there; then once more while the follower takes over.
    drop(first);
    put(&gateways, &gateway_allowing(ns, "closed", None, json!({}))).await;
    put(
        &sets,
        &listener_set(ns, "b", "closed", json!([http("two", 8081)])),
    )
    .await;
    put(
        &sets,
        &listener_set(
            ns,
            "a",
            "gw",
            json!([http("one", 8080), http("more", 8082)]),
        ),
    )
    .await;
    put(&routes, &route_to_set(ns, "r", "a", "more")).await;
    blocking(|| second.wait_for(message::LEADING, PATIENCE));
    put(
        &sets,
        &listener_set(ns, "c", "gw", json!([http("three", 8083)])),
    )
    .await;

    expect_set(&sets, "b", "Accepted", "False", "NotAllowed").await;
    expect_set(&sets, "a", "Accepted", "True", "Accepted").await;
    expect_attached(&sets, "a", "more", 1).await;
    expect_attached(&sets, "a", "one", 0).await;
    expect_set(&sets, "c", "Accepted", "True", "Accepted").await;
    expect_attached_sets(&gateways, "gw", 2).await;
    for name in ["a", "b", "c"] {
        let managers = status_managers(&sets.get(name).await.expect("listener set"));
        assert!(
            managers.contains(&manager_of("lset-b")),
            "{name}: the new leader wrote it: {managers:?}"
        );
    }
}
