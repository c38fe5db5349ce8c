//! Two replicas of this crate on a real kube-apiserver: the first leads, stamps its term and hands
//! over on shutdown; the second's writes are refused until it leads.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::ResourceExt;
use leader_lock::leadership::GuardedError;
use leader_lock::{LeaderState, LeadershipChange};
use testkit::kube::KubeApiServer;

use downstream::{built_for_latest, status_writer_config, Replica, TERM};

/// How long any wait may take on a busy machine before the test gives up.
const PATIENCE: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elector_runs_on_the_library_crates_built_for_the_latest_kubernetes() {
    assert!(
        built_for_latest(),
        "k8s-openapi is built with `latest` here"
    );
    let server = KubeApiServer::start()
        .await
        .unwrap_or_else(|e| panic!("no kube-apiserver for the test: {e:#}"));
    // A namespace of its own, also on an existing cluster (GATEWAY_LEADER_TEST_KUBECONFIG).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let ns = format!("downstream-{}-{nanos}", std::process::id());
    server.create_namespace(&ns).await.expect("a namespace");
    let mut config = server.config().clone();
    config.default_namespace = ns.clone();
    let target: Api<ConfigMap> = Api::namespaced(server.admin_client(), &ns);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("stamped".to_string());
    target
        .create(&PostParams::default(), &cm)
        .await
        .expect("creating the ConfigMap");
    assert!(status_writer_config()
        .controller_name
        .starts_with("example.dev/"));

    // 1. a leads; renewals are no changes.
    let a = Replica::start(config.clone(), "downstream", "a").expect("replica a");
    let mut changes = a.leadership().changes();
    let started = tokio::time::timeout(PATIENCE, changes.next()).await;
    let Ok(Some(LeadershipChange::StartedLeading { term })) = started else {
        panic!("a did not start leading: {started:?}");
    };
    let renewals = tokio::time::timeout(Duration::from_secs(2), changes.next()).await;
    assert!(
        renewals.is_err(),
        "a renewal came as a change: {renewals:?}"
    );

    // 2. Its write carries the term it ran under.
    let written = a.stamp("stamped").await.expect("the leader's write");
    assert_eq!(written.annotations().get(TERM), Some(&term.to_string()));

    // 3. b follows, and its write is refused, unsent.
    let b = Replica::start(config, "downstream", "b").expect("replica b");
    let mut states = b.leadership().subscribe();
    tokio::time::timeout(
        PATIENCE,
        states.wait_for(|s| {
            matches!(
                s,
                LeaderState::Follower {
                    holder: Some(_),
                    ..
                }
            )
        }),
    )
    .await
    .expect("b follows in time")
    .expect("b's elector runs");
    let refused = b.stamp("stamped").await;
    assert!(
        matches!(refused, Err(GuardedError::NotLeader(_))),
        "{refused:?}"
    );
    let unchanged = target.get("stamped").await.expect("reading the ConfigMap");
    assert_eq!(unchanged.resource_version(), written.resource_version());

    // 4. a hands over on shutdown; b leads under a newer term and writes.
    assert!(a.elector.shutdown().await.expect("a stops"), "a released");
    let stopped = tokio::time::timeout(PATIENCE, changes.next()).await;
    assert_eq!(
        stopped.ok().flatten(),
        Some(LeadershipChange::StoppedLeading { term })
    );
    let next = tokio::time::timeout(PATIENCE, b.leadership().wait_leader())
        .await
        .expect("b leads in time")
        .expect("b's elector runs")
        .term;
    assert!(next > term, "{next} after {term}");
    let written = b.stamp("stamped").await.expect("the new leader's write");
    assert_eq!(written.annotations().get(TERM), Some(&next.to_string()));
    b.elector.shutdown().await.expect("b stops");
}
