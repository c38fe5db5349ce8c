//! Bad input while the proxy keeps serving in bounded memory, many watches on a few
//! connections to the apiserver, and the private Unix socket.

use super::*;

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
        let mut s = post_config_map_head(addr, ns, gb, false);
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
