//! `gateway-leader proxy` on the real test apiserver: kubectl through two proxies (a follower's
//! writes refused and absent on the server, the leader's landing, a handover moving them, a
//! follower's watch streaming across it), a leader frozen with a write's body half sent, bad
//! input, and upgraded streams (refused by a follower, relayed by the leader, cut when its
//! leadership ends), each judged from what the server holds.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{blocking, Replica};
use gateway_leader_log::message;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use testkit::kube::KubeApiServer;

/// What a wait on a process or the server may take on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(90);

/// One proxy replica on the Lease `ns` holds.
struct Proxy {
    replica: Replica,
    addr: SocketAddr,
    kubeconfig: PathBuf,
}

impl Proxy {
    /// Starts `gateway-leader proxy` as `name` on a free loopback port, electing on the Lease in
    /// `ns`; waits until it serves.
    fn start(server: &KubeApiServer, name: &str, ns: &str, dir: &Path, extra: &[&str]) -> Proxy {
        let port = testkit::process::free_port().expect("a free port");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let exe = Path::new(env!("CARGO_BIN_EXE_gateway-leader"));
        let mut cmd = Command::new(exe);
        cmd.arg("proxy")
            .args(["--lock-backend", "kubernetes", "--kubeconfig"])
            .arg(server.kubeconfig_path())
            .args(["--leader-election-namespace", ns])
            .args(["--proxy-listen", &addr.to_string()])
            .args(["--health-addr", "127.0.0.1:0", "--log-format", "json"])
            .args(["--leader-election-identity", name])
            .args(extra)
            .env("RUST_LOG", "info");
        testkit::replica::clear_settings(&mut cmd);
        let mut replica = Replica::spawn(name, cmd);
        replica.wait_for(message::PROXY_SERVING, PATIENCE);
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&kubeconfig, gateway_leader::proxy::kubeconfig(addr))
            .expect("the proxy's kubeconfig");
        Proxy {
            replica,
            addr,
            kubeconfig,
        }
    }

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

    // The follower's writes are refused (each retried by kubectl while the 503 says to).
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
    // Counted as refused, by verb, on the follower's /metrics.
    let health = blocking(|| b.replica.health_addr(PATIENCE));
    let metrics = blocking(|| http_get(health, "/metrics"));
    for verb in ["create", "patch", "delete"] {
        assert!(
            metrics.contains(&format!(
                "gateway_leader_proxy_requests_total{{verb=\"{verb}\",outcome=\"refused\"}}"
            )),
            "{verb} refusals are not counted: {metrics}"
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

/// A raw connection to `addr` with generous timeouts.
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connects to the proxy");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s.set_write_timeout(Some(PATIENCE)).expect("timeout");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_half_sent_to_a_leader_that_froze_never_reaches_the_server() {
    let ns = "proxy-frozen";
    let (server, dir) = setup(ns).await;
    // Short timings: the follower takes over a few seconds after the leader froze.
    let timing = [
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "1s",
    ];
    let mut a = blocking(|| Proxy::start(server, "frozen-a", ns, dir.path(), &timing));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    let mut b = blocking(|| Proxy::start(server, "frozen-b", ns, dir.path(), &timing));
    blocking(|| b.replica.wait_for(message::FOLLOWING, PATIENCE));

    // The leader's proxy works: a whole write lands.
    let whole = config_map_json(ns, "whole", 10);
    let mut s = connect(a.addr);
    write!(
        s,
        "POST /api/v1/namespaces/{ns}/configmaps HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        whole.len()
    )
    .expect("head");
    s.write_all(&whole).expect("body");
    assert_eq!(status_code(&mut s), Some(201));
    assert!(server_config_map(server, ns, "whole").await.is_some());

    // Half a write's body, then the leader freezes until the follower leads.
    let body = config_map_json(ns, "half-sent", 64 * 1024);
    let mut s = connect(a.addr);
    write!(
        s,
        "POST /api/v1/namespaces/{ns}/configmaps HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .expect("head");
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
    let mut s = connect(b.addr);
    write!(
        s,
        "POST /api/v1/namespaces/{ns}/configmaps HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .expect("head");
    s.write_all(&body).expect("body");
    assert_eq!(status_code(&mut s), Some(201));
    assert!(server_config_map(server, ns, "half-sent").await.is_some());
    for p in [&mut a, &mut b] {
        p.replica.terminate();
        assert_eq!(blocking(|| p.replica.wait_exit(PATIENCE)), Some(0));
    }
}

/// The resident set of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// `GET /version` through the proxy answers 200.
fn still_serves(addr: SocketAddr) {
    let mut s = connect(addr);
    s.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("request");
    assert_eq!(status_code(&mut s), Some(200), "the proxy stopped serving");
}

/// What the proxy's resident set may grow by under the bad input below: hyper's buffers for
/// 2,000 connections and a watch's backlog, far below what buffering any of them would take.
const RSS_GROWTH: u64 = 96 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_an_error_while_the_proxy_keeps_serving_in_bounded_memory() {
    let ns = "proxy-bad-input";
    let (server, dir) = setup(ns).await;
    let mut a = blocking(|| Proxy::start(server, "bad-a", ns, dir.path(), &[]));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    let mut b = blocking(|| Proxy::start(server, "bad-b", ns, dir.path(), &[]));
    blocking(|| b.replica.wait_for(message::FOLLOWING, PATIENCE));
    let addr = b.addr;
    let pid = b.replica.pid();
    still_serves(addr);
    let before = rss(pid);

    blocking(|| {
        // Garbage.
        let mut s = connect(addr);
        s.write_all(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
            .expect("garbage");
        assert_eq!(status_code(&mut s), Some(400), "garbage HTTP");
        still_serves(addr);
        // A request line of 1 MB, then headers of 1 MB.
        let long = "a".repeat(1024 * 1024);
        for head in [
            format!("GET /api/v1/{long} HTTP/1.1\r\nHost: x\r\n\r\n"),
            format!("GET /version HTTP/1.1\r\nHost: x\r\nX-Big: {long}\r\n\r\n"),
        ] {
            let mut s = connect(addr);
            // The proxy may answer and close before it has read it all.
            let _ = s.write_all(head.as_bytes());
            let code = status_code(&mut s);
            assert!(
                code.is_some_and(|c| (400..500).contains(&c)),
                "a 1 MB head was answered {code:?}"
            );
            still_serves(addr);
        }
        // A 1 GB body to the follower: refused at once, not read.
        let gb: u64 = 1 << 30;
        let mut s = connect(addr);
        write!(
            s,
            "POST /api/v1/namespaces/{ns}/configmaps HTTP/1.1\r\nHost: x\r\n\
             Content-Type: application/json\r\nContent-Length: {gb}\r\n\r\n"
        )
        .expect("head");
        let mut reader = s.try_clone().expect("a second handle");
        let answer = std::thread::spawn(move || status_code(&mut reader));
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0u64;
        while sent < gb && !answer.is_finished() {
            match s.write_all(&chunk) {
                Ok(()) => sent += chunk.len() as u64,
                Err(_) => break,
            }
        }
        assert_eq!(answer.join().expect("the reader"), Some(503));
        assert!(
            sent < gb / 4,
            "the follower read {sent} bytes of a refused body"
        );
        still_serves(addr);
    });

    // 2,000 idle connections.
    let idle: Vec<TcpStream> = (0..2000).map(|_| connect(addr)).collect();
    blocking(|| still_serves(addr));
    let with_idle = rss(pid);
    assert!(
        with_idle < before + RSS_GROWTH,
        "2,000 idle connections: RSS {before} -> {with_idle}"
    );
    drop(idle);

    // A watch that is never read, on objects worth 20 MB.
    let api = Api::<ConfigMap>::namespaced(server.admin_client(), ns);
    for i in 0..40 {
        let cm: ConfigMap =
            serde_json::from_slice(&config_map_json(ns, &format!("big-{i}"), 512 * 1024))
                .expect("a config map");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("created directly");
    }
    let mut unread = connect(addr);
    write!(
        unread,
        "GET /api/v1/namespaces/{ns}/configmaps?watch=true HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .expect("the watch");
    // More changes while it is not read.
    for i in 0..40 {
        let mut cm = api.get(&format!("big-{i}")).await.expect("there");
        cm.metadata.labels = Some([("round".to_string(), "2".to_string())].into());
        api.replace(&format!("big-{i}"), &PostParams::default(), &cm)
            .await
            .expect("replaced directly");
    }
    blocking(|| still_serves(addr));
    let with_watch = rss(pid);
    assert!(
        with_watch < before + RSS_GROWTH,
        "an unread watch of 40 MB of events: RSS {before} -> {with_watch}"
    );
    eprintln!(
        "proxy RSS: {} MiB at rest, {} MiB with 2,000 idle connections, {} MiB with an unread \
         watch",
        before >> 20,
        with_idle >> 20,
        with_watch >> 20
    );
    drop(unread);
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

/// The watches of many callers share a few connections to the apiserver (HTTP/2, as many
/// streams on each as the apiserver allows: 100 by default) instead of a TLS connection each,
/// and those past the first connection's limit stream as well; counted from the kernel's table
/// of the proxy's connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watches_share_a_few_connections_to_the_apiserver() {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    const WATCHES: usize = 250;
    let ns = "proxy-watches";
    let (server, dir) = setup(ns).await;
    let mut p = blocking(|| {
        Proxy::start(
            server,
            "watches",
            ns,
            dir.path(),
            &["--leader-election-disable"],
        )
    });
    let one = serde_json::from_slice(&config_map_json(ns, "one", 8)).expect("a config map");
    Api::<ConfigMap>::namespaced(server.admin_client(), ns)
        .create(&PostParams::default(), &one)
        .await
        .expect("created");
    let url = format!("http://{}", p.addr).parse().expect("a URL");
    let through = kube::Client::try_from(kube::Config::new(url)).expect("a client");
    let api = Api::<ConfigMap>::namespaced(through, ns);
    let params = WatchParams::default();
    let mut open = Vec::new();
    for i in 0..WATCHES {
        let watch = tokio::time::timeout(PATIENCE, api.watch(&params, "0"))
            .await
            .unwrap_or_else(|_| panic!("watch {i} of {WATCHES} was not answered"))
            .expect("a watch");
        open.push(Box::pin(watch));
    }
    for (i, w) in open.iter_mut().enumerate() {
        match tokio::time::timeout(PATIENCE, w.next()).await {
            Ok(Some(Ok(WatchEvent::Added(cm)))) => {
                assert_eq!(cm.metadata.name.as_deref(), Some("one"))
            }
            other => panic!("watch {i} of {WATCHES} did not stream: {other:?}"),
        }
    }
    let port = server
        .url()
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| u.port_u16())
        .expect("the apiserver's URL has a port");
    let connections =
        testkit::process::tcp_connections_to(p.replica.pid(), port).expect("the proxy's sockets");
    // The watches' connections, and one of the replica's own client.
    let most = WATCHES.div_ceil(100) + 1;
    assert!(
        (1..=most).contains(&connections),
        "{connections} connections to the apiserver for {WATCHES} watches (at most {most} with \
         100 streams on each, kube-apiserver's --http2-max-streams-per-connection default)"
    );
    drop(open);
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
    let mut s = connect(a.addr);
    write!(
        s,
        "POST /api/v1/namespaces/{ns}/configmaps HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .expect("head");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_proxy_is_private_serves_and_is_removed_on_exit() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    use std::os::unix::net::UnixStream;
    let server = KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let socket = dir.path().join("proxy.sock");
    let exe = Path::new(env!("CARGO_BIN_EXE_gateway-leader"));
    let mut cmd = Command::new(exe);
    cmd.arg("proxy")
        .arg("--kubeconfig")
        .arg(server.kubeconfig_path())
        .arg("--proxy-listen")
        .arg(format!("unix:{}", socket.display()))
        .args(["--leader-election-disable", "--health-addr", "127.0.0.1:0"])
        .args(["--log-format", "json", "--leader-election-identity", "unix"])
        .env("RUST_LOG", "info");
    testkit::replica::clear_settings(&mut cmd);
    let mut p = Replica::spawn("unix", cmd);
    blocking(|| p.wait_for(message::PROXY_SERVING, PATIENCE));
    let meta = std::fs::symlink_metadata(&socket).expect("the socket");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o600, "only its owner may connect");
    let mut s = UnixStream::connect(&socket).expect("connects");
    s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    s.write_all(b"GET /version HTTP/1.0\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    assert!(out.starts_with("HTTP/1.0 200"), "{out}");
    assert!(out.contains("gitVersion"), "{out}");
    p.terminate();
    assert_eq!(blocking(|| p.wait_exit(PATIENCE)), Some(0));
    assert!(!socket.exists(), "the socket is removed on exit");
}

/// This machine's address the apiserver may proxy to: not loopback or link-local (the apiserver
/// refuses those), found by asking the routing table which source address a datagram would
/// take (a UDP `connect` sends nothing).
fn proxyable_address() -> std::net::IpAddr {
    for target in [
        "10.255.255.1:9",
        "192.0.2.1:9",
        "172.16.255.1:9",
        "192.168.255.1:9",
    ] {
        let Ok(s) = std::net::UdpSocket::bind("0.0.0.0:0") else {
            continue;
        };
        if s.connect(target).is_err() {
            continue;
        }
        if let Ok(local) = s.local_addr() {
            let ip = local.ip();
            if let std::net::IpAddr::V4(v4) = ip {
                if !v4.is_loopback() && !v4.is_link_local() && !v4.is_unspecified() {
                    return ip;
                }
            }
        }
    }
    panic!(
        "this machine has no IPv4 address other than loopback or link-local, and the apiserver \
         proxies only to such an address: give it one (e.g. `ip addr add 192.0.2.2/24 dev eth0`)"
    );
}

/// A tiny upgrade server on `ip`: answers each request `101 Switching Protocols`, then echoes
/// what it gets. Counts the connections it took.
fn echo_upgrades(
    ip: std::net::IpAddr,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind((ip, 0)).expect("binds the echo server");
    let addr = listener.local_addr().expect("its address");
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match conn.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let _ = conn.write_all(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                      Connection: Upgrade\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n",
                );
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Sends an upgrade request for `path` on `s`; returns the response's head.
fn ask_upgrade(s: &mut TcpStream, path: &str) -> String {
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
    )
    .expect("the upgrade request");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!("the response's head ended early ({other:?}): {head:?}"),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_go_only_through_the_leader_and_are_cut_when_its_leadership_ends() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    use kube::api::{DeleteParams, Patch, PatchParams};
    use std::io::ErrorKind;
    let ns = "proxy-upgrade";
    let (server, dir) = setup(ns).await;
    // A pod whose address is the echo server's, for the apiserver's pods/proxy (no kubelet
    // runs it: its status is written here).
    let (echo, connections) = echo_upgrades(proxyable_address());
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}}))
            .expect("a ServiceAccount");
    // No controller manager makes it in the test apiserver; admission wants it.
    Api::<ServiceAccount>::namespaced(server.admin_client(), ns)
        .create(&PostParams::default(), &account)
        .await
        .expect("the default ServiceAccount");
    let pods = Api::<Pod>::namespaced(server.admin_client(), ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "echo", "namespace": ns},
        "spec": {"containers": [{"name": "echo", "image": "echo"}],
            "automountServiceAccountToken": false},
    }))
    .expect("a Pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the Pod");
    let ip = echo.ip().to_string();
    pods.patch_status(
        "echo",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({
            "status": {"podIP": ip, "podIPs": [{"ip": ip}]},
        })),
    )
    .await
    .expect("the Pod's address");
    let path = format!(
        "/api/v1/namespaces/{ns}/pods/http:echo:{}/proxy/",
        echo.port()
    );

    let timing = [
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "1s",
    ];
    let mut a = blocking(|| Proxy::start(server, "upgrade-a", ns, dir.path(), &timing));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    let mut b = blocking(|| Proxy::start(server, "upgrade-b", ns, dir.path(), &timing));
    blocking(|| b.replica.wait_for(message::FOLLOWING, PATIENCE));

    // The follower refuses with its Status, and nothing reaches the apiserver's backend.
    let mut s = connect(b.addr);
    let head = ask_upgrade(&mut s, &path);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let mut body = vec![0u8; 4096];
    let n = s.read(&mut body).expect("the refusal's body");
    let status: serde_json::Value = serde_json::from_slice(&body[..n]).expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "ServiceUnavailable");
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 0);

    // The leader gives the apiserver's own answers: its 404 for an exec in no pod, and the
    // backend's 101, then a stream both ways.
    for target in [
        format!("/api/v1/namespaces/{ns}/pods/none/exec?command=sh"),
        format!("/api/v1/namespaces/{ns}/pods/none/portforward?ports=80"),
        format!("/api/v1/namespaces/{ns}/services/none:80/proxy/"),
    ] {
        let mut s = connect(a.addr);
        let head = ask_upgrade(&mut s, &target);
        assert!(head.starts_with("HTTP/1.1 404"), "{target}: {head}");
    }
    let mut s = connect(a.addr);
    let head = ask_upgrade(&mut s, &path);
    assert!(
        head.starts_with("HTTP/1.1 101"),
        "{head}; the echo server took {} connections",
        connections.load(std::sync::atomic::Ordering::SeqCst)
    );
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("upgrade: websocket"), "{head}");
    assert!(
        lower.contains("sec-websocket-protocol: v5.channel.k8s.io"),
        "{head}"
    );
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
    for word in ["ping", "pong"] {
        s.write_all(word.as_bytes()).expect("sent");
        let mut got = [0u8; 4];
        s.read_exact(&mut got).expect("echoed");
        assert_eq!(&got, word.as_bytes());
    }

    // The leader's Lease vanishes: its leadership ends, and so does the stream.
    Api::<Lease>::namespaced(server.admin_client(), ns)
        .delete(
            gateway_leader::config::DEFAULT_LOCK_NAME,
            &DeleteParams::default(),
        )
        .await
        .expect("the Lease deleted");
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            panic!("the stream stayed open after the leadership ended")
        }
        // A close, or a reset: the proxy dropped both ends.
        _ => assert!(rest.is_empty(), "bytes after the end: {rest:?}"),
    }
    // The stream is counted as cut, on the leader that held it (once its task has ended).
    let health = a.replica.health_addr(PATIENCE);
    let until = Instant::now() + PATIENCE;
    loop {
        let metrics = http_get(health, "/metrics");
        if metrics.contains(r#"verb="connect",outcome="upgrade_cut"} 1"#) {
            break;
        }
        assert!(Instant::now() < until, "{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Either may have taken the new Lease; with the first one gone, the other leads. A stream
    // open through it when it is told to stop does not hold its release: cut at the drain's
    // deadline, then the lock is released.
    a.replica.terminate();
    assert_eq!(blocking(|| a.replica.wait_exit(PATIENCE)), Some(0));
    blocking(|| b.replica.wait_for(message::LEADING, PATIENCE));
    let mut s = connect(b.addr);
    let head = ask_upgrade(&mut s, &path);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(b"ping").expect("sent");
    let mut got = [0u8; 4];
    s.read_exact(&mut got).expect("echoed");
    b.replica.terminate();
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            panic!("the stream stayed open after SIGTERM")
        }
        _ => assert!(rest.is_empty(), "bytes after the end: {rest:?}"),
    }
    blocking(|| {
        b.replica.wait_for(message::RELEASED, PATIENCE);
        assert_eq!(b.replica.wait_exit(PATIENCE), Some(0));
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_syncs_through_a_follower_and_its_writes_land_only_through_the_leader() {
    let peers = testkit::built::peers().expect("the Go peers are built (scripts/build-peers.sh)");
    let ns = "proxy-client-go";
    let (server, dir) = setup(ns).await;
    let mut a = blocking(|| Proxy::start(server, "proxy-a", ns, dir.path(), &[]));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    let mut b = blocking(|| Proxy::start(server, "client-go-b", ns, dir.path(), &[]));
    blocking(|| b.replica.wait_for(message::FOLLOWING, PATIENCE));

    // The informer's first list finds what was there before it.
    let before: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "before"}}))
            .expect("a ConfigMap");
    Api::<ConfigMap>::namespaced(server.admin_client(), ns)
        .create(&PostParams::default(), &before)
        .await
        .expect("created");
    let program = peers.join(testkit::built::CLIENT_GO_PROXY_CLIENT);
    let out = blocking(|| {
        Command::new(&program)
            .arg("--follower-kubeconfig")
            .arg(&b.kubeconfig)
            .arg("--leader-kubeconfig")
            .arg(&a.kubeconfig)
            .args(["--namespace", ns, "--prefix", "cg", "--count", "3"])
            .output()
            .expect("client-go-proxy-client runs")
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client-go-proxy-client: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("client-go-proxy-client's report");

    // client-go saw each write through the follower fail with the proxy's Status.
    let refused = report["refused"].as_array().expect("refusals");
    let mut ops: Vec<&str> = refused.iter().filter_map(|r| r["op"].as_str()).collect();
    ops.sort_unstable();
    assert_eq!(ops, ["create", "patch", "update"], "{report}");
    for r in refused {
        assert_eq!(r["code"], 503, "{r}");
        assert_eq!(r["reason"], "ServiceUnavailable", "{r}");
        let message = r["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("may not write now") && message.contains("proxy-a"),
            "{r}"
        );
    }
    // The server holds the leader's writes, at the resourceVersions client-go got back, which
    // the informer fed by the follower's proxy reached too; nothing of the follower's.
    assert!(server_config_map(server, ns, "cg-through-follower")
        .await
        .is_none());
    let written = report["written"].as_object().expect("written");
    assert_eq!(written.len(), 3, "{report}");
    for (name, rv) in written {
        let held = server_config_map(server, ns, name)
            .await
            .unwrap_or_else(|| panic!("{name} is not on the server"));
        assert_eq!(
            held.metadata.resource_version.as_deref(),
            rv.as_str(),
            "{name}"
        );
        assert_eq!(report["seen"][name], *rv, "the informer's {name}");
        let step = held.data.as_ref().and_then(|d| d.get("step"));
        assert_eq!(step.map(String::as_str), Some("patched"), "{name}");
    }
    // The informer did sync through the follower (client-go's informers list with a watch:
    // `sendInitialEvents`).
    let metrics = http_get(b.replica.health_addr(PATIENCE), "/metrics");
    let needle = r#"verb="watch",outcome="forwarded"}"#;
    assert!(metrics.contains(needle), "{needle} not in {metrics}");
    for p in [&mut a, &mut b] {
        p.replica.terminate();
        assert_eq!(blocking(|| p.replica.wait_exit(PATIENCE)), Some(0));
    }
}
