//! Envoy Gateway under churn, a handover after it, and a change made while the leader is dead,
//! with its election answered by the proxies. Judged from a watch that records every version of
//! a route, and from the replicas' xDS snapshot counts.

use super::*;
use testkit::route_versions::{record_versions, Version};

/// The xDS snapshots a replica's Envoy Gateway has built so far.
async fn snapshots(p: &Pod) -> f64 {
    p.eg.snapshots().await.expect("Envoy Gateway's metrics")
}

/// 40 changes of one route in 4 s through two replicas, then a graceful handover: the
/// follower translated as often as the leader, and nothing the server took after the handover
/// is a status for an older generation than the route had, nor a status rewritten without a
/// change of the route. A follower's Envoy Gateway blocks its status updates until it leads
/// (`UpdateWriter.Send` waits for the updater to start), so what it holds then is the question.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_churn_a_handover_writes_nothing_stale_and_the_follower_kept_pace() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("churn", Mode::ProxyElected).await;
    let (mut a, b) = scene.pair(Mode::ProxyElected).await;
    let (a0, b0) = (snapshots(&a).await, snapshots(&b).await);
    for i in 0..40 {
        let to = if i % 2 == 0 {
            Backend::Nowhere
        } else {
            Backend::Web
        };
        scene.move_route(to).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    scene.wait_correct(Backend::Web).await;
    // Both translate every batch of changes; which events a batch holds differs between two
    // processes by one or two.
    let until = Instant::now() + PATIENCE;
    let (led, followed) = loop {
        let (led, followed) = (snapshots(&a).await - a0, snapshots(&b).await - b0);
        if followed + 2.0 >= led || Instant::now() >= until {
            break (led, followed);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "churn: the leader's Envoy Gateway built {led} xDS snapshots, the follower's {followed}"
    );
    assert!(
        followed + 2.0 >= led,
        "the follower fell behind: {followed} snapshots to the leader's {led}"
    );

    let (stop, stopped) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(record_versions(scene.routes(), "moved", stopped));
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::join!(a.terminate(), wait_leads(&b.eg));
    scene.wait_correct(Backend::Web).await;
    // Room for a late write from a queue of old updates, which is what this looks for.
    tokio::time::sleep(RETRY * 3).await;
    let _ = stop.send(());
    let versions = watch.await.expect("the watch");
    let stale: Vec<&Version> = versions.iter().filter(|v| v.is_stale()).collect();
    assert!(
        stale.is_empty(),
        "stale statuses written: {stale:#?} of {versions:#?}"
    );
    let rewrites = versions.iter().filter(|v| v.status_changed).count();
    assert!(
        rewrites <= 1,
        "statuses rewritten after the handover: {versions:#?}"
    );
}

/// The whole leading replica killed, a route changed before our Lease expires (no Envoy
/// Gateway leads then): the next one to lead writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_the_leader_is_dead_is_written_once_the_next_one_leads() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("crash-gap", Mode::ProxyElected).await;
    let (mut a, b) = scene.pair(Mode::ProxyElected).await;
    a.eg.kill();
    if let Some(p) = a.proxy.as_mut() {
        blocking(|| p.replica.kill());
    }
    scene.move_route(Backend::Nowhere).await;
    wait_leads(&b.eg).await;
    let led = Instant::now();
    scene.wait_correct(Backend::Nowhere).await;
    let written = led.elapsed();
    eprintln!("crash gap: the change was on the server {written:?} after b's Envoy Gateway led");
    let writes = scene.status_writes();
    assert!(
        writes
            .iter()
            .any(|w| w.user == b.user && w.what == "httproutes/moved" && w.code < 300),
        "b did not write the change: {writes:#?}"
    );
}
