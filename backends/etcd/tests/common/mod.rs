//! Shared test helpers: short timing, lock configs and a plain etcd client.
#![allow(dead_code)]

pub mod handover;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::{Candidate, ConfigError, LeaderLock, LockError};
use leader_lock::{Elector, ElectorConfig, Identity, Term, Timing};
use leader_lock_etcd::{EtcdConfig, EtcdLock};
use testkit::etcd::EtcdServer;

/// Short, whole-second lease timing for tests.
pub fn timing() -> Timing {
    Timing::new(
        Duration::from_secs(3),
        Duration::from_millis(2000),
        Duration::from_millis(300),
    )
    .expect("valid timing")
}

/// A config for `server` with a per-request timeout under the test renew deadline.
pub fn config(server: &EtcdServer) -> EtcdConfig {
    let mut c = EtcdConfig::new(vec![server.endpoint()]);
    c.request_timeout = Some(Duration::from_millis(1000));
    c
}

/// A lock client on `server`, as a separate process would have.
pub async fn lock(server: &EtcdServer, name: &str) -> Arc<dyn LeaderLock> {
    Arc::new(
        EtcdLock::connect(config(server), name)
            .await
            .expect("connects to etcd"),
    )
}

/// Two lock clients on `name`, as two processes would have, for tests that drive locks alone
/// (no elector, so no watch acts for them).
pub async fn two_locks(
    server: &EtcdServer,
    name: &str,
) -> (Arc<dyn LeaderLock>, Arc<dyn LeaderLock>) {
    (lock(server, name).await, lock(server, name).await)
}

/// Two contenders on locks alone (no elector, so no watch acts for them): `a` took the lock
/// under `term` (and what became of it since is the test's), `b` beside it.
pub struct Contenders {
    pub la: Arc<dyn LeaderLock>,
    pub lb: Arc<dyn LeaderLock>,
    pub a: Candidate,
    pub b: Candidate,
    /// a's term.
    pub term: Term,
}

/// A candidate `id` with the tests' lease.
pub fn candidate(id: &str) -> Candidate {
    Candidate {
        identity: Identity::new(id),
        lease_duration: timing().lease_duration,
    }
}

/// An elector for `id` on lock `name`.
pub async fn contender(server: &EtcdServer, name: &str, id: &str) -> Elector {
    contender_with(server, name, id, timing()).await
}

/// An elector for `id` on lock `name` with its own `timing`.
pub async fn contender_with(server: &EtcdServer, name: &str, id: &str, timing: Timing) -> Elector {
    elector(lock(server, name).await, id, timing)
}

/// An elector for `id` on `lock`, releasing on shutdown.
pub fn elector(lock: Arc<dyn LeaderLock>, id: &str, timing: Timing) -> Elector {
    Elector::spawn(
        lock,
        ElectorConfig {
            identity: Identity::new(id),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing")
}

/// Contenders `a` (leading) and `b` (following) on the lock `name`, a lease after both settled:
/// past b's first look, its watch's opening read and the first keep-alive of its spare lease, so
/// what the server counts from here on is the steady state.
pub async fn leader_and_follower(server: &EtcdServer, name: &str) -> (Elector, Elector) {
    use leader_lock::conformance::{patience, wait_following, wait_leader};
    let timing = timing();
    let a = contender(server, name, "a").await;
    wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = contender(server, name, "b").await;
    wait_following(&b.leadership(), patience(&timing), "b").await;
    tokio::time::sleep(timing.lease_duration).await;
    (a, b)
}

/// A plain etcd client, for planting values and administration.
pub async fn raw_client(server: &EtcdServer) -> etcd_client::Client {
    etcd_client::Client::connect([server.endpoint()], None)
        .await
        .expect("plain client connects")
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The setting named by the configuration error a refusal keeps as its source.
pub fn refused_setting(err: &LockError) -> Option<&'static str> {
    std::error::Error::source(err)
        .and_then(|s| s.downcast_ref::<ConfigError>())
        .and_then(ConfigError::setting)
}

/// The gRPC counters of one method: calls started, and calls ended by code.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Calls {
    /// Calls started.
    pub started: f64,
    /// Calls ended, by gRPC code.
    pub handled: BTreeMap<String, f64>,
    /// Messages received from clients (one per unary call; one per keep-alive on a stream).
    pub received: f64,
}

fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

/// Reads `/metrics` from the client URL and sums the counters of `method`.
pub fn calls(port: u16, method: &str) -> Calls {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("sends");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("reads metrics");
    let mut out = Calls::default();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        if label(labels, "grpc_method") != Some(method) {
            continue;
        }
        let value: f64 = value.parse().unwrap_or(0.0);
        match name {
            "grpc_server_started_total" => out.started += value,
            "grpc_server_msg_received_total" => out.received += value,
            "grpc_server_handled_total" => {
                let code = label(labels, "grpc_code").unwrap_or("?").to_string();
                *out.handled.entry(code).or_default() += value;
            }
            _ => {}
        }
    }
    out
}
