//! How the status writer's watches get their initial lists, judged by what the apiserver saw (its
//! audit log) and by the status it holds: streamed (watch-list: `sendInitialEvents=true`) where
//! the apiserver offers it, and in pages of 500 where its `WatchList` feature is off; the route's
//! status is written either way.

use std::sync::Arc;
use std::time::Duration;

use gateway_api::httproutes::HttpRoute;
use gateway_leader_status::{StatusController, WriterConfig};
use kube::api::PostParams;
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
use serde_json::{json, Value};
use testkit::kube::{KubeApiServer, Options};

/// How long the route may take to get its status on a busy machine.
const PATIENCE: Duration = Duration::from_secs(180);

const CONTROLLER: &str = "gateway-leader.dev/watch-list";
const NS: &str = "watch-list";

async fn create<K>(api: Api<K>, object: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("creating a test object");
}

/// A class, a Gateway and a route of ours, then a status writer until the route shows our
/// status; returns the (verb, requestURI) of every request on the HTTPRoutes of all namespaces
/// the apiserver saw: the status writer's (the test's own are in its namespace).
async fn routes_requests(feature_gates: &[&str]) -> Vec<(String, String)> {
    let s = KubeApiServer::start_local_with(Options {
        audit: true,
        feature_gates: feature_gates.iter().map(|g| g.to_string()).collect(),
        ..Options::default()
    })
    .await
    .expect("a kube-apiserver (see testkit's message for how to get one)");
    let client: Client = s.admin_client();
    testkit::gateway_api::install(&client)
        .await
        .expect("the Gateway API CRDs");
    s.create_namespace(NS).await.expect("the namespace");
    create(
        Api::<gateway_api::gatewayclasses::GatewayClass>::all(client.clone()),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
               "metadata": {"name": "ours"}, "spec": {"controllerName": CONTROLLER}}),
    )
    .await;
    create(
        Api::<gateway_api::gateways::Gateway>::namespaced(client.clone(), NS),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": NS},
               "spec": {"gatewayClassName": "ours",
                        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}),
    )
    .await;
    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), NS);
    create(
        routes.clone(),
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
               "metadata": {"name": "r", "namespace": NS},
               "spec": {"parentRefs": [{"name": "gw"}]}}),
    )
    .await;

    let elector = Elector::spawn(
        Arc::new(MemoryStore::new().lock("statuses")),
        ElectorConfig {
            identity: Identity::new("replica"),
            timing: Timing::default(),
            release_on_shutdown: true,
        },
    )
    .expect("an elector");
    let config = WriterConfig::default().with_controller_name(CONTROLLER);
    let (readiness, _ready) = tokio::sync::watch::channel(Default::default());
    let status = StatusController::start(client, elector.leadership(), config, readiness);
    let ours_accepted = |r: Option<&HttpRoute>| {
        r.and_then(|r| r.status.as_ref()).is_some_and(|st| {
            st.parents.iter().any(|p| {
                p.controller_name == CONTROLLER
                    && p.conditions
                        .iter()
                        .any(|c| c.type_ == "Accepted" && c.status == "True")
            })
        })
    };
    tokio::time::timeout(PATIENCE, await_condition(routes, "r", ours_accepted))
        .await
        .expect("the route's status written in time")
        .expect("watching the route");
    status.stop().await;
    elector.shutdown().await.expect("the elector stops");

    s.audit_events()
        .expect("the audit log")
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "httproutes")
        .filter(|e| {
            e["requestURI"]
                .as_str()
                .is_some_and(|u| u.starts_with("/apis/gateway.networking.k8s.io/v1/httproutes?"))
        })
        .filter_map(|e| Some((e["verb"].as_str()?.into(), e["requestURI"].as_str()?.into())))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initial_list_is_streamed_where_the_apiserver_offers_it() {
    let seen = routes_requests(&[]).await;
    assert!(
        seen.iter()
            .any(|(verb, uri)| verb == "watch" && uri.contains("sendInitialEvents=true")),
        "a watch-list on HTTPRoutes: {seen:#?}"
    );
    assert!(
        !seen.iter().any(|(verb, _)| verb == "list"),
        "no list of HTTPRoutes: {seen:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watch_list_the_initial_list_comes_in_pages() {
    let seen = routes_requests(&["WatchList=false"]).await;
    assert!(
        seen.iter()
            .any(|(verb, uri)| verb == "list" && uri.contains("limit=500")),
        "a list of HTTPRoutes in pages of 500: {seen:#?}"
    );
}
