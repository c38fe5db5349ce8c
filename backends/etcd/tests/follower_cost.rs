//! A follower costs the etcd server nothing while its watch shows the holder renewing (issue 20):
//! every renew rewrites the key, the watch delivers that write, and the elector puts its next
//! look a lease later on each one, so the follower never reads.
//!
//! Counted on the server: etcd's `grpc_server_started_total` by method on the client URL's
//! `/metrics`, on a server of this test's own, so every counted call is ours. The leader renews
//! with one `Txn` (and a keep-alive on its lease's stream); a follower that looked would send a
//! `Range` (and a `LeaseTimeToLive` for the holder's lease). A follower's one write is its
//! candidacy (a `Put` attached to its spare lease, so that a release can hand it the key): once
//! per spare lease, not per renew it sees nor per keep-alive. The leader's own reads are its
//! choice of a successor, made after its attempts at most once a sixth of the TTL: one `Range` of
//! the candidates and one `LeaseTimeToLive` of the follower's spare each, in pairs.

mod common;

use testkit::etcd::EtcdServer;

/// Calls of `methods`, started so far, each.
async fn started(port: u16, methods: &'static [&'static str]) -> Vec<f64> {
    tokio::task::spawn_blocking(move || {
        methods
            .iter()
            .map(|m| common::calls(port, m).started)
            .collect()
    })
    .await
    .expect("metrics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watching_follower_sends_no_read_over_several_leases() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let port = server.client_port();
    let timing = common::timing();
    let (a, b) = common::leader_and_follower(&server, "cost").await;

    const METHODS: &[&str] = &["Range", "LeaseTimeToLive", "Txn", "LeaseGrant", "Put"];
    // b's candidacy is its one write; a slow server may see it late (its spare keeper tries a
    // failed one again), so the window starts once it is in.
    let deadline = tokio::time::Instant::now() + leader_lock::conformance::patience(&timing);
    let before = loop {
        let now = started(port, METHODS).await;
        if now[4] >= 1.0 {
            break now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "b never registered its candidacy"
        );
        tokio::time::sleep(timing.retry_period).await;
    };
    let keep_before = tokio::task::spawn_blocking(move || common::calls(port, "LeaseKeepAlive"))
        .await
        .expect("metrics");
    let window = timing.lease_duration * 4;
    tokio::time::sleep(window).await;
    let after = started(port, METHODS).await;
    let keep_after = tokio::task::spawn_blocking(move || common::calls(port, "LeaseKeepAlive"))
        .await
        .expect("metrics");
    assert!(a.leadership().check().is_ok(), "a kept leading");
    assert!(b.leadership().check().is_err(), "b kept following");

    let d: Vec<f64> = after.iter().zip(&before).map(|(x, y)| x - y).collect();
    let (reads, ttls, txns, grants, puts) = (d[0], d[1], d[2], d[3], d[4]);
    let keep_alives = keep_after.received - keep_before.received;
    eprintln!(
        "over {window:?} (lease {:?}, retry {:?}): Range {reads}, LeaseTimeToLive {ttls}, \
         Txn {txns}, LeaseGrant {grants}, Put {puts}, LeaseKeepAlive messages {keep_alives}",
        timing.lease_duration, timing.retry_period,
    );
    assert!(txns >= 4.0, "the leader renewed ({txns} transactions)");
    // A look by the follower is a `Range` without a `LeaseTimeToLive`. A choice under way as a
    // count is taken may have one of its pair on each side of it: one either way is that.
    assert!(
        (reads - ttls).abs() <= 1.0,
        "the follower read the key while its watch showed it renewed: {reads} Range, {ttls} \
         LeaseTimeToLive"
    );
    let choices = window.as_secs_f64() / (timing.lease_duration.as_secs_f64() / 6.0) + 1.0;
    assert!(
        reads <= choices,
        "the leader chose its successor more than once a sixth of the TTL: {reads} in {window:?}"
    );
    assert_eq!(grants, 0.0, "nobody granted a lease");
    assert_eq!(puts, 0.0, "the candidacy was written again");
    a.abort().await;
    b.abort().await;
}
