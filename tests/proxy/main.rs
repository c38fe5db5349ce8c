//! `gateway-leader proxy` on the real test apiserver: kubectl through two proxies (a follower's
//! writes refused and absent on the server, the leader's landing, a handover moving them, a
//! follower's watch streaming across it), a leader frozen with a write's body half sent, bad
//! input, and upgraded streams (refused by a follower, relayed by the leader, cut when its
//! leadership ends), each judged from what the server holds.

#[path = "../common/mod.rs"]
mod common;

mod answers;
mod bad_input;
mod client_go;
mod election;
mod upgrades;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::{blocking, Replica};
use gateway_leader_log::message;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use testkit::kube::KubeApiServer;

/// What a wait on a process or the server may take on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(90);

/// kubectl through a proxy.
impl Proxy {
    /// `kubectl ARGS` through this proxy.
    fn kubectl(&self, args: &[&str]) -> std::process::Output {
        Command::new(common::deploy::kubectl())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs")
    }

    /// `kubectl ARGS` through this proxy, which must succeed.
    fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} through {}: {}",
            self.replica.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl ARGS` through this proxy, which must be refused with the proxy's 503 naming the
    /// holder (kubectl shows the `Status`'s message).
    fn kubectl_refused(&self, args: &[&str]) {
        let out = self.kubectl(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "kubectl {args:?} through the follower {} succeeded",
            self.replica.name
        );
        assert!(
            stderr.contains("may not write now") && stderr.contains("proxy-a"),
            "kubectl {args:?} through {}: {stderr}",
            self.replica.name
        );
    }
}

/// A config map named `name` in `ns`, as the server holds it.
async fn server_config_map(server: &KubeApiServer, ns: &str, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(server.admin_client(), ns)
        .get_opt(name)
        .await
        .expect("the apiserver answers")
}

/// The lines a child prints, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits for a line containing `needle`; panics after [`PATIENCE`].
fn wait_line(rx: &mpsc::Receiver<String>, needle: &str) {
    let until = Instant::now() + PATIENCE;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return,
            Ok(_) => {}
            Err(e) => panic!("no line with {needle:?}: {e}"),
        }
    }
}

/// The shared test apiserver with namespace `ns`, and a directory for the proxies' kubeconfigs.
async fn setup(ns: &str) -> (&'static KubeApiServer, tempfile::TempDir) {
    let server = KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    server.create_namespace(ns).await.expect("namespace");
    (server, tempfile::tempdir().expect("a temporary directory"))
}

/// `ConfigMap` JSON of `len` bytes or a little more.
fn config_map_json(ns: &str, name: &str, len: usize) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"{ns}"}},"data":{{"k":"{}"}}}}"#,
        "x".repeat(len)
    )
    .into_bytes()
}

/// Reads an HTTP response's status code from `s` (what came before the connection closed).
fn status_code(s: &mut TcpStream) -> Option<u16> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(2).any(|w| w == b"\r\n") {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&buf);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// The body of `GET path` from `addr` (HTTP/1.0: the server closes when done).
fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = connect(addr);
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out
}

/// A connection to `addr` that has sent the head of a ConfigMap create in `ns` with a body of
/// `len` bytes still to come; `close` asks the server to close once it has answered.
fn post_config_map_head(addr: SocketAddr, ns: &str, len: u64, close: bool) -> TcpStream {
    let mut s = connect(addr);
    let close = if close { "Connection: close\r\n" } else { "" };
    write!(
        s,
        "POST /api/v1/namespaces/{ns}/configmaps HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {len}\r\n{close}\r\n"
    )
    .expect("head");
    s
}

/// Timings short enough for a follower to take over a few seconds after the leader stopped.
const SHORT_TIMING: [&str; 6] = [
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "1s",
];

/// A raw connection to `addr` with generous timeouts.
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connects to the proxy");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s.set_write_timeout(Some(PATIENCE)).expect("timeout");
    s
}

/// `GET /version` through the proxy answers 200.
fn still_serves(addr: SocketAddr) {
    let mut s = connect(addr);
    s.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    assert_eq!(status_code(&mut s), Some(200), "the proxy stopped serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_only_through_the_leader_s_proxy_and_move_with_the_leadership() {
    let ns = "proxy-handover";
    let (server, dir) = setup(ns).await;
    let mut a = blocking(|| Proxy::start(server, "proxy-a", ns, dir.path(), &[]));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    let mut b = blocking(|| Proxy::start(server, "proxy-b", ns, dir.path(), &[]));
    blocking(|| b.replica.wait_for(message::FOLLOWING, PATIENCE));

    // A watch through the follower, before anything happens.
    let mut watch = Command::new(common::deploy::kubectl())
        .arg("--kubeconfig")
        .arg(&b.kubeconfig)
        .args(["get", "configmaps", "-n", ns, "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kubectl get -w");
    let watched = lines_of(&mut watch);

    // The leader's create lands; reads pass on the follower.
    blocking(|| {
        a.kubectl_ok(&[
            "create",
            "configmap",
            "kept",
            "-n",
            ns,
            "--from-literal=k=v",
        ])
    });
    let kept = server_config_map(server, ns, "kept")
        .await
        .expect("the leader's create landed");
    blocking(|| wait_line(&watched, "configmap/kept"));
    let listed = blocking(|| b.kubectl_ok(&["get", "configmap", "kept", "-n", ns, "-o", "name"]));
    assert_eq!(listed.trim(), "configmap/kept");

    // The follower's writes are refused, each answered at once: kubectl gives up on the first
    // answer, as a 503 without `Retry-After` asks.
    let refused: Vec<Vec<&str>> = vec![
        vec!["create", "configmap", "refused", "-n", ns],
        vec!["annotate", "configmap", "kept", "-n", ns, "by=follower"],
        vec!["label", "configmap", "kept", "-n", ns, "by=follower"],
        vec![
            "patch",
            "configmap",
            "kept",
            "-n",
            ns,
            "-p",
            r#"{"data":{"k":"follower"}}"#,
        ],
        vec!["delete", "configmap", "kept", "-n", ns],
    ];
    blocking(|| {
        std::thread::scope(|s| {
            for args in &refused {
                let b = &b;
                s.spawn(move || b.kubectl_refused(args));
            }
        })
    });
    // Counted as refused, by verb, on the follower's /metrics: each write reached the proxy
    // once (annotate, label and patch are one PATCH each). A refusal with `Retry-After` is
    // sent again by client-go ten times, a second apart: 11, 33 and 11.
    let health = blocking(|| b.replica.health_addr(PATIENCE));
    let metrics = blocking(|| http_get(health, "/metrics"));
    for (verb, sent) in [("create", 1), ("patch", 3), ("delete", 1)] {
        let line = format!(
            "gateway_leader_proxy_requests_total{{verb=\"{verb}\",outcome=\"refused\"}} {sent}\n"
        );
        assert!(
            metrics.contains(&line),
            "{verb}: not refused exactly {sent} times: {metrics}"
        );
    }
    // Judged from the server: nothing of them is there.
    assert!(server_config_map(server, ns, "refused").await.is_none());
    let after = server_config_map(server, ns, "kept")
        .await
        .expect("the follower's delete did not land");
    assert_eq!(
        after.metadata.resource_version, kept.metadata.resource_version,
        "the follower's writes changed the object: {after:?}"
    );

    // The leader's annotate, patch and delete land.
    blocking(|| a.kubectl_ok(&["annotate", "configmap", "kept", "-n", ns, "by=leader"]));
    blocking(|| {
        a.kubectl_ok(&[
            "patch",
            "configmap",
            "kept",
            "-n",
            ns,
            "-p",
            r#"{"data":{"k":"leader"}}"#,
        ])
    });
    let patched = server_config_map(server, ns, "kept").await.expect("kept");
    assert_eq!(
        patched
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("by")),
        Some(&"leader".to_string())
    );
    assert_eq!(
        patched.data.as_ref().and_then(|d| d.get("k")),
        Some(&"leader".to_string())
    );
    blocking(|| a.kubectl_ok(&["delete", "configmap", "kept", "-n", ns]));
    assert!(server_config_map(server, ns, "kept").await.is_none());

    // SIGTERM to the leader: the follower leads and its proxy takes writes.
    a.replica.terminate();
    blocking(|| {
        a.replica.wait_for(message::RELEASED, PATIENCE);
        assert_eq!(a.replica.wait_exit(PATIENCE), Some(0), "a exits cleanly");
        b.replica.wait_for(message::LEADING, PATIENCE);
    });
    blocking(|| b.kubectl_ok(&["create", "configmap", "after", "-n", ns]));
    assert!(server_config_map(server, ns, "after").await.is_some());
    // The watch through b kept streaming across the handover.
    blocking(|| wait_line(&watched, "configmap/after"));
    assert!(
        watch.try_wait().expect("kubectl's state").is_none(),
        "kubectl get -w through the follower ended at the handover"
    );
    let _ = watch.kill();
    let _ = watch.wait();
    b.replica.terminate();
    assert_eq!(blocking(|| b.replica.wait_exit(PATIENCE)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_half_sent_to_a_leader_that_froze_never_reaches_the_server() {
    let ns = "proxy-frozen";
    let (server, dir) = setup(ns).await;
    let timing = SHORT_TIMING;
    let mut a = blocking(|| Proxy::start(server, "frozen-a", ns, dir.path(), &timing));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    let mut b = blocking(|| Proxy::start(server, "frozen-b", ns, dir.path(), &timing));
    blocking(|| b.replica.wait_for(message::FOLLOWING, PATIENCE));

    // The leader's proxy works: a whole write lands.
    let whole = config_map_json(ns, "whole", 10);
    let mut s = post_config_map_head(a.addr, ns, whole.len() as u64, true);
    s.write_all(&whole).expect("body");
    assert_eq!(status_code(&mut s), Some(201));
    assert!(server_config_map(server, ns, "whole").await.is_some());

    // Half a write's body, then the leader freezes until the follower leads.
    let body = config_map_json(ns, "half-sent", 64 * 1024);
    let mut s = post_config_map_head(a.addr, ns, body.len() as u64, false);
    let (first, rest) = body.split_at(body.len() / 2);
    s.write_all(first).expect("the first half");
    s.flush().expect("sent");
    // The proxy has the head and took its permit long before this (no assert on it: a slow
    // machine only makes this a refusal, which the check below also accepts).
    std::thread::sleep(Duration::from_millis(500));
    a.replica.pause();
    blocking(|| b.replica.wait_for(message::LEADING, PATIENCE));
    a.replica.resume();
    // The rest arrives after the thaw (it may find the connection closed already).
    let _ = s.write_all(rest);
    let code = status_code(&mut s);
    assert!(
        matches!(code, None | Some(503) | Some(504)),
        "the half-sent write after the thaw was answered {code:?}"
    );
    // Never there: give the apiserver time to show what it would have stored.
    let api = Api::<ConfigMap>::namespaced(server.admin_client(), ns);
    for _ in 0..10 {
        assert!(
            api.get_opt("half-sent")
                .await
                .expect("the apiserver answers")
                .is_none(),
            "the write half-sent before the freeze reached the server"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The thawed replica follows and refuses; the new leader's proxy takes the write.
    blocking(|| a.replica.wait_for(message::FOLLOWING, PATIENCE));
    let mut s = post_config_map_head(b.addr, ns, body.len() as u64, true);
    s.write_all(&body).expect("body");
    assert_eq!(status_code(&mut s), Some(201));
    assert!(server_config_map(server, ns, "half-sent").await.is_some());
    for p in [&mut a, &mut b] {
        p.replica.terminate();
        assert_eq!(blocking(|| p.replica.wait_exit(PATIENCE)), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leader_election_disabled_the_proxy_passes_writes() {
    let ns = "proxy-disabled";
    let (server, dir) = setup(ns).await;
    let mut p = blocking(|| {
        Proxy::start(
            server,
            "disabled",
            ns,
            dir.path(),
            &["--leader-election-disable"],
        )
    });
    blocking(|| p.kubectl_ok(&["create", "configmap", "free", "-n", ns]));
    assert!(server_config_map(server, ns, "free").await.is_some());
    p.replica.terminate();
    assert_eq!(blocking(|| p.replica.wait_exit(PATIENCE)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_flight_at_sigterm_lands_before_the_lock_is_released() {
    let ns = "proxy-sigterm";
    let (server, dir) = setup(ns).await;
    let mut a = blocking(|| Proxy::start(server, "sigterm-a", ns, dir.path(), &[]));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    // A write whose body is half sent when SIGTERM arrives.
    let body = config_map_json(ns, "in-flight", 64 * 1024);
    let mut s = post_config_map_head(a.addr, ns, body.len() as u64, false);
    let (first, rest) = body.split_at(body.len() / 2);
    s.write_all(first).expect("the first half");
    // A request the proxy has answered on the same kind of connection: the write above has
    // its head read and its permit by now.
    still_serves(a.addr);
    a.replica.terminate();
    blocking(|| a.replica.wait_for(message::PROXY_CLOSED, PATIENCE));
    // Draining: no new connections, and the lock is still held for the write in flight.
    assert!(
        TcpStream::connect(a.addr).is_err() || {
            let mut probe = connect(a.addr);
            let _ = probe.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n");
            status_code(&mut probe).is_none()
        },
        "a draining proxy took a new connection"
    );
    assert!(
        !a.replica
            .lines()
            .iter()
            .any(|l| l.message().contains(message::RELEASED)),
        "released while a write was in flight"
    );
    s.write_all(rest).expect("the rest");
    assert_eq!(status_code(&mut s), Some(201), "the write in flight");
    assert!(server_config_map(server, ns, "in-flight").await.is_some());
    blocking(|| {
        a.replica.wait_for(message::RELEASED, PATIENCE);
        assert_eq!(a.replica.wait_exit(PATIENCE), Some(0));
    });
}
