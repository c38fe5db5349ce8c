//! One `LeaseKeepAlive` stream per lease (issue 9, section 3), proved with etcd's own counters.
//!
//! etcd counts every gRPC call it starts and ends in `/metrics` on the client URL
//! (`grpc_server_started_total`, `grpc_server_handled_total` by `grpc_code`). A leader that
//! opened a stream per renew would start one `LeaseKeepAlive` call per renew and end each with a
//! non-OK code (the `Unavailable` alerts on real clusters).

mod common;

use std::time::Duration;

use common::{calls, Calls};
use testkit::etcd::EtcdServer;

/// Unary KV requests started (a renew sends one: a transaction, or a read before issue 9).
fn requests(port: u16) -> f64 {
    calls(port, "Txn").started + calls(port, "Range").started
}

fn not_ok(c: &Calls) -> f64 {
    c.handled
        .iter()
        .filter(|(code, _)| code.as_str() != "OK")
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_share_one_keep_alive_stream() {
    common::init_tracing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let port = server.client_port();
    let timing = common::timing();
    let (a, b) = common::leader_and_follower(&server, "streams").await;

    let keep_before = tokio::task::spawn_blocking(move || calls(port, "LeaseKeepAlive"))
        .await
        .expect("metrics");
    let txn_before = tokio::task::spawn_blocking(move || requests(port))
        .await
        .expect("metrics");
    // About twenty renewals (one every retry period), and the follower's spare kept alive.
    tokio::time::sleep(timing.retry_period * 20).await;
    let keep_after = tokio::task::spawn_blocking(move || calls(port, "LeaseKeepAlive"))
        .await
        .expect("metrics");
    let txn_after = tokio::task::spawn_blocking(move || requests(port))
        .await
        .expect("metrics");
    assert!(
        a.leadership().check().is_ok(),
        "a kept leading while we counted"
    );

    let renews = txn_after - txn_before;
    let streams = keep_after.started - keep_before.started;
    let failed = not_ok(&keep_after) - not_ok(&keep_before);
    eprintln!(
        "{renews} KV requests; LeaseKeepAlive streams started {streams}, ended not OK {failed}; \
         before {keep_before:?}, after {keep_after:?}"
    );
    assert!(renews >= 10.0, "the leader renewed ({renews} KV requests)");
    assert_eq!(streams, 0.0, "no keep-alive stream opened per renew");
    assert_eq!(failed, 0.0, "no keep-alive stream ended with an error code");
    let open = keep_after.started - keep_after.handled.values().sum::<f64>();
    assert_eq!(
        open, 2.0,
        "one open stream per lease: the leader's and the follower's spare"
    );

    // A graceful stop ends the streams cleanly.
    a.shutdown().await.expect("release");
    b.shutdown().await.expect("stop");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let keep_end = tokio::task::spawn_blocking(move || calls(port, "LeaseKeepAlive"))
        .await
        .expect("metrics");
    eprintln!("after shutdown: {keep_end:?}");
}
