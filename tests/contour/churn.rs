//! Contour under churn, a handover after it, and a change made while the leader is dead: with
//! its election answered by the proxies and with its election off. Judged from a watch that
//! records every version of a route, and from the replicas' rebuild counts.

use super::*;
use testkit::route_versions::{record_versions, Version};

/// The DAG rebuilds of a replica's Contour so far (`contour_dagrebuild_total`).
async fn rebuilds(p: &Pod) -> f64 {
    p.contour.dag_rebuilds().await.expect("Contour's metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_churn_a_handover_writes_nothing_stale_and_the_follower_kept_pace() {
    churn_then_handover("churn", Mode::ProxyElected).await;
}

/// The same with Contour's election off: its follower's status writes are refused, answered at
/// once (docs/sidecar.md, "What a refusal costs the caller"), so its loops keep pace too, and
/// it holds no queue of old writes to flush when it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_election_off_churn_and_a_handover_write_nothing_stale_either() {
    churn_then_handover("churn-fenced", Mode::Fenced).await;
}

/// 40 changes of one route in 4 s through two replicas of `mode`, then a graceful handover:
/// the follower's Contour rebuilt as often as the leader's, and nothing the server took after
/// the handover is a status for an older generation than the route had (a watch records every
/// version), nor a status rewritten without a change of the route.
async fn churn_then_handover(name: &str, mode: Mode) {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new(name, mode).await;
    let (mut a, mut b) = scene.pair(mode).await;
    let (a0, b0) = (rebuilds(&a).await, rebuilds(&b).await);

    // Churn: 40 changes of one route, 100 ms apart, ending where it began.
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
    // Contour batches the events of a burst into one rebuild (100 ms, at most 500 ms apart):
    // the follower's Contour, whose loops nothing held up, rebuilt as the leader's did.
    let (a1, b1) = (rebuilds(&a).await, rebuilds(&b).await);
    let (led_rebuilds, followed_rebuilds) = (a1 - a0, b1 - b0);
    eprintln!(
        "churn: the leader's Contour rebuilt {led_rebuilds} times, the follower's \
         {followed_rebuilds}"
    );
    // Which events a 100 ms window batches differs between two processes by a rebuild or two;
    // a follower held up by its writes (a queue of refused ones) falls behind by dozens.
    assert!(
        followed_rebuilds + 2.0 >= led_rebuilds,
        "the follower's Contour fell behind: {followed_rebuilds} rebuilds to the leader's \
         {led_rebuilds}"
    );

    // Then a graceful handover, watched from the server.
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(record_versions(scene.routes(), "moved", stopped));
    tokio::time::sleep(Duration::from_millis(500)).await;
    if mode == Mode::ProxyElected {
        a.terminate_while(wait_leads(&b.contour)).await;
    } else {
        a.terminate_while(scene.wait_holder(PROXY_LEASE, "proxy-b"))
            .await;
    }
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
    b.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_the_leader_is_dead_is_written_once_the_next_contour_leads() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("crash-gap", Mode::ProxyElected).await;
    let (mut a, mut b) = scene.pair(Mode::ProxyElected).await;

    // The whole leading replica dies; the change comes in the gap before our Lease expires,
    // while no Contour leads and b's is told its replica does not.
    a.contour.kill();
    blocking(|| a.proxy().replica.kill());
    scene.move_route(Backend::Nowhere).await;
    wait_leads(&b.contour).await;
    let led = Instant::now();
    scene.wait_correct(Backend::Nowhere).await;
    let written = led.elapsed();
    eprintln!("crash gap: the change was on the server {written:?} after b's Contour led");
    let writes = scene.status_writes();
    assert!(
        writes
            .iter()
            .any(|w| w.user == b.user && w.what == "httproutes/moved" && w.code < 300),
        "b did not write the change: {writes:#?}"
    );
    b.terminate().await;
}
