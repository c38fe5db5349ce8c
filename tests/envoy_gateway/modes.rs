//! The three modes, each judged from the server.

use super::*;

/// Its election driven by our lock: only the replica whose proxy leads sees its Envoy Gateway
/// lead, so only it writes statuses and creates the Envoy infrastructure; its Lease never
/// reaches the apiserver; a graceful stop hands over to the other, whose first writes are the
/// latest statuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driven_by_our_lock_one_replica_writes_and_a_graceful_stop_hands_over() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("driven", Mode::ProxyElected).await;
    let (mut a, b) = scene.pair(Mode::ProxyElected).await;
    assert!(
        !b.eg.leads().await.expect("b's metrics"),
        "b's Envoy Gateway leads while a's proxy holds the lock"
    );
    let written = scene.landed_from(&a.user);
    assert!(written > 0, "no status write from a at all");
    assert_eq!(
        scene.landed_from(&b.user),
        0,
        "{:#?}",
        scene.status_writes()
    );
    let infra = scene.infrastructure_writes();
    assert!(
        !infra.is_empty() && infra.iter().all(|w| w.user == a.user),
        "the Envoy infrastructure is written by a alone: {infra:#?}"
    );

    scene.move_route(Backend::Nowhere).await;
    let stop = Instant::now();
    let (led, correct) = handover(&scene, &mut a, &b).await;
    eprintln!(
        "driven: {written} status writes by a alone; after SIGTERM b's Envoy Gateway led in \
         {led:?}, every status right in {correct:?} ({:?} since the stop)",
        stop.elapsed()
    );
    // The change may have been written by a before it stopped; the next one is b's.
    scene.move_route(Backend::Web).await;
    scene.wait_correct(Backend::Web).await;
    assert!(
        scene.landed_from(&b.user) > 0,
        "b wrote nothing after the handover: {:#?}",
        scene.status_writes()
    );
    // Writes never interleave: once b's land, a's are over.
    let writes = scene.status_writes();
    let first_b = writes
        .iter()
        .position(|w| w.code < 300 && w.user == b.user)
        .expect("a write from b");
    let late_a: Vec<&Request> = writes[first_b..]
        .iter()
        .filter(|w| w.code < 300 && w.user == a.user)
        .collect();
    assert!(late_a.is_empty(), "a wrote after b did: {late_a:#?}");
    // The proxies list and watch it (a native election still renewing it would keep their
    // controllers following); nothing reads it by name or writes it.
    let leaked: Vec<Request> = scene
        .lease_requests(LEASE_NAME)
        .into_iter()
        .filter(|r| r.verb != "list" && r.verb != "watch")
        .collect();
    assert!(
        leaked.is_empty(),
        "Envoy Gateway's Lease reached the apiserver: {leaked:#?}"
    );
}

/// A whole replica (proxy and Envoy Gateway) frozen past the lease: the other takes over and
/// writes what changed meanwhile; the thawed one lands nothing, whatever it still believes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driven_by_our_lock_a_thawed_replica_lands_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("frozen", Mode::ProxyElected).await;
    let (mut a, b) = scene.pair(Mode::ProxyElected).await;
    a.freeze();
    wait_leads(&b.eg).await;
    scene.move_route(Backend::Nowhere).await;
    scene.wait_correct(Backend::Nowhere).await;
    let before = scene.landed_from(&a.user);
    let infra_before = scene
        .infrastructure_writes()
        .iter()
        .filter(|w| w.user == a.user)
        .count();
    a.thaw();
    // Whatever a does once thawed, it has seen its loss by the time it no longer leads (or has
    // exited, as controller-runtime does on a lost election); b then writes a change again.
    let until = Instant::now() + PATIENCE;
    while a.eg.leads().await.unwrap_or(false) {
        assert!(
            Instant::now() < until,
            "a still leads {PATIENCE:?} after thaw"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    scene.move_route(Backend::Web).await;
    scene.wait_correct(Backend::Web).await;
    assert_eq!(
        scene.landed_from(&a.user),
        before,
        "the thawed replica landed status writes: {:#?}",
        scene.status_writes()
    );
    assert_eq!(
        scene
            .infrastructure_writes()
            .iter()
            .filter(|w| w.user == a.user)
            .count(),
        infra_before,
        "the thawed replica wrote the Envoy infrastructure"
    );
    drop(b);
}

/// Its election off, behind the proxies: both replicas translate every change and try every
/// write; the follower's are refused at once (no `Retry-After`), so it keeps pace with the
/// leader, and only the leader's land.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_off_behind_the_proxies_only_the_leader_writes_and_the_follower_keeps_pace() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("fenced", Mode::Fenced).await;
    let (a, b) = scene.pair(Mode::Fenced).await;
    let (a0, b0) = (
        a.eg.snapshots().await.expect("a's metrics"),
        b.eg.snapshots().await.expect("b's metrics"),
    );
    for i in 0..10 {
        let to = if i % 2 == 0 {
            Backend::Nowhere
        } else {
            Backend::Web
        };
        scene.move_route(to).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    scene.wait_correct(Backend::Web).await;
    // Both translated the changes: as many new snapshots each, give or take one (a change
    // that lands while a translation runs may be folded into the next).
    let until = Instant::now() + PATIENCE;
    loop {
        let (la, lb) = (
            a.eg.snapshots().await.expect("a's metrics") - a0,
            b.eg.snapshots().await.expect("b's metrics") - b0,
        );
        if la > 0.0 && (la - lb).abs() <= 1.0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "the follower's xDS snapshots ({lb}) do not keep pace with the leader's ({la})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        scene.landed_from(&b.user),
        0,
        "{:#?}",
        scene.status_writes()
    );
    let reached: Vec<Request> = scene
        .status_writes()
        .into_iter()
        .filter(|w| w.user == b.user)
        .collect();
    assert!(
        reached.is_empty(),
        "the follower's writes reached the apiserver: {reached:#?}"
    );
    let mut b = b;
    assert!(
        b.refused_writes() > 0.0,
        "the follower tried no write: its election is not off"
    );
}

/// The anchor: Envoy Gateway's own election on the apiserver's Lease, no proxy; the leader
/// writes, and a graceful stop hands over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_election_the_anchor() {
    let _one = ONE_AT_A_TIME.lock().await;
    let scene = Scene::new("native", Mode::Native).await;
    let (mut a, b) = scene.pair(Mode::Native).await;
    assert!(scene.landed_from(&a.user) > 0);
    assert_eq!(scene.landed_from(&b.user), 0);
    assert!(!scene.lease_requests(LEASE_NAME).is_empty());
    scene.move_route(Backend::Nowhere).await;
    let (led, correct) = handover(&scene, &mut a, &b).await;
    eprintln!(
        "native: after SIGTERM b's Envoy Gateway led in {led:?}, every status right in \
         {correct:?}"
    );
    scene.move_route(Backend::Web).await;
    scene.wait_correct(Backend::Web).await;
    assert!(scene.landed_from(&b.user) > 0);
}

/// SIGTERM to replica `a` (the change to route `moved` just made), and how long until `b`'s
/// Envoy Gateway leads and until every status is right, both from the SIGTERM. The statuses
/// are watched from the SIGTERM on, so a's last writes count too.
async fn handover(scene: &Scene, a: &mut Pod, b: &Pod) -> (Duration, Duration) {
    let start = Instant::now();
    let ((), led, correct) = tokio::join!(
        a.terminate(),
        async {
            wait_leads(&b.eg).await;
            start.elapsed()
        },
        async {
            scene.wait_correct(Backend::Nowhere).await;
            start.elapsed()
        }
    );
    (led, correct)
}
