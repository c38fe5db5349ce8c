//! The three ways to run Contour, each judged from the server: its own election, its election
//! off behind proxies (steady state and a graceful handover), and its election answered by the
//! proxies (a graceful handover).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_own_election_only_the_leading_contour_writes_statuses() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("native", Mode::Native).await;
    let a = scene.start_leader(Mode::Native).await;
    wait_leads(&a.contour).await;
    let mut b = scene.start("b", Mode::Native).await;
    scene.wait_correct(Backend::Web).await;

    // A change after the steady state: both replicas rebuild their DAG, the leader writes.
    let rebuilt = b.contour.dag_rebuilds().await.expect("b's metrics");
    scene.move_route(Backend::Nowhere).await;
    scene.wait_correct(Backend::Nowhere).await;
    let until = Instant::now() + PATIENCE;
    while b.contour.dag_rebuilds().await.expect("b's metrics") <= rebuilt {
        assert!(Instant::now() < until, "b did not rebuild its DAG");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !b.contour.leads().await.expect("b's metrics"),
        "b leads too"
    );
    b.contour.ensure_running().expect("b runs");
    let b_metrics = b.contour.metrics().await.expect("b's metrics");
    let b_sent = testkit::metrics::sum(&b_metrics, "contour_status_update_total", None);
    assert_eq!(b_sent, 0.0, "the follower's status writer ran");

    // Judged from the server: every status write came from the leader's credential; the
    // follower wrote no status, and never the Lease.
    let writes = scene.all_written_by(&a.user);
    let lease = scene.lease_requests(CONTOUR_LEASE);
    let b_wrote: Vec<&Request> = lease
        .iter()
        .filter(|w| w.user == b.user && w.verb != "get" && w.code < 300)
        .collect();
    assert!(
        b_wrote.is_empty(),
        "the follower wrote the Lease: {b_wrote:#?}"
    );
    assert!(
        lease
            .iter()
            .any(|w| w.user == a.user && w.verb != "get" && w.code < 300),
        "the leader never wrote the Lease: {lease:#?}"
    );
    assert!(!scene.holder(CONTOUR_LEASE).await.is_empty());
    scene.only_contour_manages_statuses().await;
    eprintln!("native: {writes} status writes, all by {}", a.user);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_election_off_behind_proxies_only_the_leading_proxy_s_writes_land() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("fenced", Mode::Fenced).await;
    // The follower's Contour first, while no status exists: it writes the Gateway and the three
    // routes, and its proxy refuses every write.
    let a = scene.seat("a", Mode::Fenced).await;
    scene.wait_holder(PROXY_LEASE, "proxy-a").await;
    let mut b = scene.start("b", Mode::Fenced).await;
    let b_started = Instant::now();
    blocking(|| b.proxy().replica.wait_for(message::FOLLOWING, PATIENCE));
    let first = b.wait_refusals_counted(4.0).await;
    assert!(
        scene.status_writes().is_empty(),
        "a status write reached the server: {:#?}",
        scene.status_writes()
    );
    let a = scene.start_contour(a).await;
    scene.wait_correct(Backend::Web).await;
    scene.move_route(Backend::Nowhere).await;
    scene.wait_correct(Backend::Nowhere).await;

    let writes = scene.all_written_by(&a.user);
    scene.only_contour_manages_statuses().await;
    let refused = b.wait_refusals_counted(first).await;
    let forwarded = testkit::metrics::sum(
        &b.proxy_metrics(),
        "gateway_leader_proxy_requests_total",
        Some(r#"verb="update",outcome="forwarded""#),
    );
    assert_eq!(forwarded, 0.0, "the follower's proxy forwarded a write");
    eprintln!(
        "fenced: {writes} status writes, all by {}; the follower's proxy refused {first} before \
         the leader's Contour started and {refused} in the {:?} since the follower's Contour \
         started",
        a.user,
        b_started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_handover_between_proxies_gets_the_new_leader_s_contour_writing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("handover", Mode::Fenced).await;
    let (mut a, mut b) = scene.pair(Mode::Fenced).await;
    let before = scene.status_writes().len();

    // SIGTERM to a's proxy and Contour; b's proxy takes the Lease; then a change, which only
    // b's Contour is left to write. Contour writes a status when its DAG changes, and does not
    // retry a refused write: the change must come once b's proxy takes writes (a change that
    // b's Contour wrote before that was refused and stays unwritten until the next one).
    let signal = Instant::now();
    let (led, written, correct) = a
        .terminate_while(async {
            scene.wait_holder(PROXY_LEASE, "proxy-b").await;
            let led = signal.elapsed();
            let changed = Instant::now();
            scene.move_route(Backend::Nowhere).await;
            wait_for(&scene.routes(), "moved", "written by b's Contour", |r| {
                route_correct(r, false).is_ok()
            })
            .await;
            (led, changed.elapsed(), signal.elapsed())
        })
        .await;
    scene
        .check(Backend::Nowhere)
        .await
        .expect("every status correct");

    // Judged from the server: the change was written with b's proxy's credential, and
    // everything before it with a's.
    let writes = scene.status_writes();
    let (old, new) = writes.split_at(before);
    assert!(old.iter().all(|w| w.user == a.user), "{old:#?}");
    assert!(
        new.iter()
            .any(|w| w.user == b.user && w.what == "httproutes/moved" && w.code < 300),
        "b did not write the change: {new:#?}"
    );
    assert!(
        new.iter().all(|w| w.user != a.user || w.code >= 300),
        "a wrote after its SIGTERM: {new:#?}"
    );
    eprintln!(
        "fenced handover: b's proxy held the Lease {led:?} after the SIGTERM; the change was \
         on the server {written:?} after it was made, every status correct {correct:?} after \
         the SIGTERM"
    );
    b.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_election_answered_by_the_proxy_only_the_leader_s_contour_leads_and_hands_over() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("proxy-elected", Mode::ProxyElected).await;
    let (mut a, mut b) = scene.pair(Mode::ProxyElected).await;
    // b's Contour asks its proxy for the Lease on every retry period, and is told it is held.
    tokio::time::sleep(RETRY * 3).await;
    assert!(
        !b.contour.leads().await.expect("b's metrics"),
        "b's Contour leads too"
    );
    b.contour.ensure_running().expect("b's Contour runs");
    scene.all_written_by(&a.user);

    // A change at the SIGTERM, before b leads: b's Contour, elected, writes every status it
    // holds, this one too.
    let signal = Instant::now();
    let ((), led) = a
        .terminate_while(async {
            tokio::join!(scene.move_route(Backend::Nowhere), async {
                wait_leads(&b.contour).await;
                signal.elapsed()
            })
        })
        .await;
    scene.wait_correct(Backend::Nowhere).await;
    let correct = signal.elapsed();
    let writes = scene.status_writes();
    assert!(
        writes
            .iter()
            .any(|w| w.user == b.user && w.what == "httproutes/moved" && w.code < 300),
        "b did not write the change: {writes:#?}"
    );

    // Contour's Lease lived in the proxies only: none of Contour's requests for it reached the
    // apiserver. The proxies list and watch it themselves, for a native election still holding
    // it (a rolling update), and do nothing else with it.
    let requests = scene.lease_requests(CONTOUR_LEASE);
    assert!(
        requests
            .iter()
            .all(|r| r.verb == "list" || r.verb == "watch"),
        "{requests:#?}"
    );
    assert_eq!(
        scene.holder(CONTOUR_LEASE).await,
        "",
        "Contour's Lease is on the server"
    );
    eprintln!(
        "proxy-elected handover: b's Contour led {led:?} after the SIGTERM, every status \
         correct {correct:?} after it"
    );
    b.terminate().await;
}
