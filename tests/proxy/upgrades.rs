//! Upgraded streams: refused by a follower, relayed by the leader (a real 101 from an echo
//! server the apiserver proxies to), cut when its leadership ends.

use super::*;

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
    let timing = SHORT_TIMING;
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
