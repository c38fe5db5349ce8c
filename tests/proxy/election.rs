//! A controller's own election driven by our lock (`--proxy-election-lease`): client-go's
//! `leaderelection` (testkit/peers' client-go-elector, ReleaseOnCancel, writing a ConfigMap
//! while it leads) keeps its election on, pointed at its replica's proxy. Judged from what the
//! apiserver holds (our Lease, the controller's ConfigMaps, the absence of its Lease) and from
//! the elector's own lines.

use std::os::unix::process::ExitStatusExt;

use k8s_openapi::api::coordination::v1::Lease;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use super::*;

const NS: &str = "proxy-election";

/// Environment variables of a controller.
type Env<'a> = [(&'a str, &'a str)];

/// The controller's timing: a short retry period costs nothing, as the proxy answers it.
const CONTROLLER_TIMING: [&str; 3] = [
    "--lease-duration=4s",
    "--renew-deadline=3s",
    "--retry-period=500ms",
];

/// A client-go elector behind one proxy.
struct Controller {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<Value>,
}

impl Controller {
    /// Starts client-go-elector as `name` behind `proxy`, electing on `lease` and writing the
    /// ConfigMap `<lease>-by-<name>` while it leads.
    fn start(proxy_kubeconfig: &Path, name: &str, lease: &str, extra: &[&str]) -> Controller {
        Self::start_with(proxy_kubeconfig, name, lease, extra, &[])
    }

    fn start_with(
        kubeconfig: &Path,
        name: &str,
        lease: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Controller {
        let peers =
            testkit::built::peers().expect("the Go peers are built (scripts/build-peers.sh)");
        let mut child = Command::new(peers.join(testkit::built::CLIENT_GO_ELECTOR))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--namespace={NS}"))
            .arg(format!("--lease={lease}"))
            .arg(format!("--identity={name}"))
            .arg(format!("--write-configmap={lease}-by-{name}"))
            .arg("--write-every=200ms")
            .args(CONTROLLER_TIMING)
            .args(extra)
            .envs(env.iter().copied())
            .env_remove("KUBECONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("client-go-elector starts");
        let lines = lines_of(&mut child);
        Controller {
            name: name.to_string(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Takes the lines printed so far.
    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            if let Ok(v) = serde_json::from_str(&l) {
                self.seen.push(v);
            }
        }
    }

    /// The first line of `event` (printed already, or within [`PATIENCE`]) that `hit` accepts.
    fn wait_event(&mut self, event: &str, hit: impl Fn(&Value) -> bool) -> Value {
        self.drain();
        if let Some(v) = self.seen.iter().find(|v| v["event"] == event && hit(v)) {
            return v.clone();
        }
        let until = Instant::now() + PATIENCE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(l) => l,
                Err(e) => {
                    let last = &self.seen[self.seen.len().saturating_sub(12)..];
                    panic!(
                        "{}: no {event:?} line: {e}; the last it printed: {last:?}",
                        self.name
                    )
                }
            };
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            self.seen.push(v.clone());
            if v["event"] == event && hit(&v) {
                return v;
            }
        }
    }

    /// Whether it printed `event` so far.
    fn saw(&mut self, event: &str) -> bool {
        self.drain();
        self.seen.iter().any(|v| v["event"] == event)
    }

    fn signal(&self, s: Signal) {
        let pid = i32::try_from(self.child.id()).expect("a pid");
        kill(Pid::from_raw(pid), s).expect("signalled");
    }

    /// Waits for it to exit; its code (or 128 + the signal).
    fn wait_exit(&mut self) -> i32 {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(s) = self.child.try_wait().expect("waits") {
                return s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0));
            }
            assert!(Instant::now() < until, "{} did not exit", self.name);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A proxy replica answering the election Lease `lease` itself; our lock is the Lease
/// [`lock_of`]`(lease)`, one per test.
fn proxy(server: &KubeApiServer, name: &str, lease: &str, dir: &Path) -> Proxy {
    proxy_on(server, name, lease, dir, &[])
}

/// [`proxy`] with `backend`'s flags (`--lock-backend etcd --etcd-endpoints ...`; none: the
/// Lease lock), our lock named [`lock_of`]`(lease)` there.
fn proxy_on(
    server: &KubeApiServer,
    name: &str,
    lease: &str,
    dir: &Path,
    backend: &[&str],
) -> Proxy {
    let lock = lock_of(lease);
    let lease = format!("{NS}/{lease}");
    let mut extra = vec![
        "--proxy-election-lease",
        lease.as_str(),
        "--leader-election-lock-name",
        lock.as_str(),
    ];
    extra.extend(SHORT_TIMING);
    extra.extend(backend);
    Proxy::start(server, name, NS, dir, &extra)
}

/// The name of our lock for the tests of the election Lease `lease`.
fn lock_of(lease: &str) -> String {
    format!("{lease}-lock")
}

/// The controller's Lease as the apiserver holds it: never there, unless a native election
/// made it.
async fn server_lease(server: &KubeApiServer, name: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(server.admin_client(), NS)
        .get_opt(name)
        .await
        .expect("the apiserver answers")
}

/// Two replicas on the election Lease `lease`: proxy-a leading, its controller ctl-a leading and
/// writing; proxy-b following, its controller ctl-b following ctl-a's replica.
struct Pair {
    a: Proxy,
    b: Proxy,
    ca: Controller,
    cb: Controller,
}

fn pair(server: &KubeApiServer, dir: &Path, lease: &str) -> Pair {
    pair_on(server, dir, lease, &[])
}

/// [`pair`] with our lock on `backend` ([`proxy_on`]).
fn pair_on(server: &KubeApiServer, dir: &Path, lease: &str, backend: &[&str]) -> Pair {
    let mut a = proxy_on(server, "proxy-a", lease, dir, backend);
    a.replica.wait_for(message::LEADING, PATIENCE);
    let mut b = proxy_on(server, "proxy-b", lease, dir, backend);
    b.replica.wait_for(message::FOLLOWING, PATIENCE);
    let mut ca = Controller::start(&a.kubeconfig, "ctl-a", lease, &[]);
    let mut cb = Controller::start(&b.kubeconfig, "ctl-b", lease, &[]);
    ca.wait_event("started leading", |_| true);
    ca.wait_event("wrote", |_| true);
    cb.wait_event("following", holder_starts_with("proxy-a"));
    Pair { a, b, ca, cb }
}

/// The resourceVersion of the ConfigMap controller `name` writes while it leads, if any.
async fn written_by(server: &KubeApiServer, lease: &str, name: &str) -> Option<String> {
    server_config_map(server, NS, &format!("{lease}-by-{name}"))
        .await
        .and_then(|c| c.metadata.resource_version)
}

fn holder_starts_with(prefix: &'static str) -> impl Fn(&Value) -> bool {
    move |v: &Value| v["holder"].as_str().is_some_and(|h| h.starts_with(prefix))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_leads_only_behind_the_leading_replica_and_follows_it_at_a_handover() {
    let (server, dir) = setup(NS).await;
    let lease = "ctl-handover";
    // The follower's controller sees the leading replica as the holder, and stays quiet.
    let Pair {
        mut a,
        mut b,
        mut ca,
        mut cb,
    } = blocking(|| pair(server, dir.path(), lease));
    assert!(written_by(server, lease, "ctl-a").await.is_some());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !cb.saw("started leading"),
        "two controllers lead: {:?}",
        cb.seen
    );
    assert!(server_config_map(server, NS, &format!("{lease}-by-ctl-b"))
        .await
        .is_none());
    let metrics = http_get(b.replica.health_addr(PATIENCE), "/metrics");
    assert!(
        metrics.contains(r#"verb="get",outcome="election"}"#),
        "{metrics}"
    );
    // The refused series are there from the start, at 0.
    assert_eq!(
        testkit::metrics::sum(
            &metrics,
            "gateway_leader_proxy_requests_total",
            Some(r#"outcome="refused""#)
        ),
        0.0,
        "the follower's controller wrote: {metrics}"
    );
    assert!(
        server_lease(server, lease).await.is_none(),
        "the Lease reached the apiserver"
    );

    // A handover: the leading replica stops; the other's controller leads, and writes.
    a.replica.terminate();
    blocking(|| cb.wait_event("started leading", |_| true));
    blocking(|| cb.wait_event("wrote", |_| true));
    assert!(server_config_map(server, NS, &format!("{lease}-by-ctl-b"))
        .await
        .is_some());
    // The deposed controller stops leading (the peer exits then); none of its writes landed
    // once the new one's could.
    blocking(|| ca.wait_event("stopped leading", |_| true));
    let b_first = cb.wait_event("wrote", |_| true);
    let a_last = ca
        .seen
        .iter()
        .rev()
        .find(|v| v["event"] == "wrote")
        .cloned();
    if let Some(a_last) = a_last {
        assert!(
            a_last["mono_ms"].as_f64() < b_first["mono_ms"].as_f64(),
            "ctl-a wrote after ctl-b: {a_last} {b_first}"
        );
    }
    assert_eq!(blocking(|| a.replica.wait_exit(PATIENCE)), Some(0));
    assert!(
        server_lease(server, lease).await.is_none(),
        "the Lease reached the apiserver"
    );
    b.replica.terminate();
    assert_eq!(blocking(|| b.replica.wait_exit(PATIENCE)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_controller_gives_the_lock_up_and_writes_nothing_once_thawed() {
    let (server, dir) = setup(NS).await;
    let lease = "ctl-frozen";
    let Pair {
        mut a,
        mut b,
        mut ca,
        mut cb,
    } = blocking(|| pair(server, dir.path(), lease));

    // Frozen: it stops renewing; after its lease duration its replica stands aside, and the
    // other replica (whose controller asks) leads with its controller.
    ca.signal(Signal::SIGSTOP);
    blocking(|| b.replica.wait_for(message::LEADING, PATIENCE));
    blocking(|| cb.wait_event("started leading", |_| true));
    let holder = testkit::kube::lease_holder(&server.admin_client(), NS, &lock_of(lease))
        .await
        .expect("our Lease");
    assert!(holder.starts_with("proxy-b"), "{holder}");

    // Thawed: its renew is refused, it stops leading and none of its writes lands (any write it
    // sent before the freeze has long landed).
    let frozen = written_by(server, lease, "ctl-a").await;
    ca.signal(Signal::SIGCONT);
    blocking(|| ca.wait_event("stopped leading", |_| true));
    ca.wait_exit();
    let thawed = written_by(server, lease, "ctl-a").await;
    assert_eq!(thawed, frozen, "the thawed controller wrote");
    // Its replica campaigns again once a controller asks, and follows.
    let mut ca2 = Controller::start(&a.kubeconfig, "ctl-a2", lease, &[]);
    blocking(|| ca2.wait_event("following", holder_starts_with("proxy-b")));
    for p in [&mut a, &mut b] {
        p.replica.terminate();
        assert_eq!(blocking(|| p.replica.wait_exit(PATIENCE)), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_leads_at_once_in_every_encoding_client_go_sends() {
    let (server, dir) = setup(NS).await;
    let lease = "ctl-restart";
    let mut a = blocking(|| proxy(server, "proxy-a", lease, dir.path()));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    // A long lease: a restart that waited for it would take 30 s.
    let long = ["--lease-duration=30s", "--renew-deadline=20s"];
    let cbor = [
        ("KUBE_FEATURE_ClientsAllowCBOR", "true"),
        ("KUBE_FEATURE_ClientsPreferCBOR", "true"),
    ];
    let encodings: [(&str, &str, &Env); 3] = [
        ("application/json", "json", &[]),
        ("application/vnd.kubernetes.protobuf", "protobuf", &[]),
        ("application/cbor", "cbor", &cbor),
    ];
    let mut killed: Option<Instant> = None;
    for (content_type, name, env) in encodings {
        let name = format!("ctl-{name}");
        let flag = format!("--content-type={content_type}");
        let mut args = long.to_vec();
        args.push(&flag);
        let mut c = Controller::start_with(&a.kubeconfig, &name, lease, &args, env);
        blocking(|| c.wait_event("started leading", |_| true));
        if let Some(at) = killed {
            assert!(
                at.elapsed() < Duration::from_secs(30),
                "{name} waited out its predecessor's lease"
            );
        }
        // It sent its take in its own encoding, which the proxy read.
        blocking(|| {
            a.replica
                .wait_match("a take in the encoding", PATIENCE, |l| {
                    l.json["message"] == "the controller leads, under this replica's leadership"
                        && l.json["holder"]
                            .as_str()
                            .is_some_and(|h| h.starts_with(&name))
                        && l.json["content_type"] == content_type
                })
        });
        if content_type != "application/cbor" {
            // The test apiserver serves no CBOR: its writes are refused with a 415 there.
            blocking(|| c.wait_event("wrote", |_| true));
        }
        c.signal(Signal::SIGKILL);
        c.wait_exit();
        killed = Some(Instant::now());
    }
    assert!(server_lease(server, lease).await.is_none());
    a.replica.terminate();
    assert_eq!(blocking(|| a.replica.wait_exit(PATIENCE)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_controller_here_leads_while_a_native_election_still_renews_the_lease() {
    let (server, dir) = setup(NS).await;
    let lease = "ctl-rolling";
    // A replica of the old kind: its election on the apiserver itself.
    let mut native = Controller::start(server.kubeconfig_path(), "native", lease, &[]);
    blocking(|| native.wait_event("started leading", |_| true));
    let mut a = blocking(|| proxy(server, "proxy-a", lease, dir.path()));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    let mut ca = Controller::start(&a.kubeconfig, "ctl-a", lease, &[]);
    blocking(|| ca.wait_event("following", holder_starts_with("native")));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!ca.saw("started leading"), "two leaders: {:?}", ca.seen);
    // The old replica goes (and releases, as ReleaseOnCancel does): the new one leads.
    native.signal(Signal::SIGTERM);
    blocking(|| native.wait_event("released", |_| true));
    blocking(|| ca.wait_event("started leading", |_| true));
    let held = server_lease(server, lease).await.expect("the native Lease");
    let holder = held
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert_eq!(holder, "", "the proxy wrote the apiserver's Lease");
    a.replica.terminate();
    assert_eq!(blocking(|| a.replica.wait_exit(PATIENCE)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_etcd_and_redis_the_controller_follows_our_lock_the_same_way() {
    let (server, dir) = setup(NS).await;
    let etcd = testkit::etcd::EtcdServer::start()
        .await
        .expect("etcd starts (scripts/build-etcd.sh builds it)");
    let redis = testkit::redis::RedisServer::start()
        .await
        .expect("redis-server starts (scripts/packages.sh installs it)");
    let (etcd_url, redis_url) = (etcd.endpoint(), redis.url());
    for (lease, backend) in [
        (
            "ctl-etcd",
            [
                "--lock-backend",
                "etcd",
                "--etcd-endpoints",
                etcd_url.as_str(),
            ],
        ),
        (
            "ctl-redis",
            ["--lock-backend", "redis", "--redis-url", redis_url.as_str()],
        ),
    ] {
        let Pair {
            mut a,
            mut b,
            ca: _ca,
            mut cb,
        } = blocking(|| pair_on(server, dir.path(), lease, &backend));
        a.replica.terminate();
        blocking(|| cb.wait_event("started leading", |_| true));
        blocking(|| cb.wait_event("wrote", |_| true));
        assert!(
            server_lease(server, lease).await.is_none(),
            "{lease} reached the apiserver"
        );
        assert_eq!(blocking(|| a.replica.wait_exit(PATIENCE)), Some(0));
        b.replica.terminate();
        assert_eq!(blocking(|| b.replica.wait_exit(PATIENCE)), Some(0));
    }
}

/// `exec` with a proxy and the controller's election Lease: the command (a client-go elector,
/// its kubeconfig the `KUBECONFIG` exec gives it) runs only while its replica leads, and its own
/// election, through the proxy, leads at once then; at a graceful handover the other replica's
/// command leads and writes, the first one's writes stop before, and the Lease never reaches
/// the apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_exec_the_command_leads_its_own_election_while_its_replica_leads() {
    let (server, _dir) = setup(NS).await;
    let lease = "ctl-exec";
    let elector = testkit::built::peers()
        .expect("the Go peers are built (scripts/build-peers.sh)")
        .join(testkit::built::CLIENT_GO_ELECTOR);
    let start = |name: &str| {
        let port = testkit::process::free_port().expect("a free port");
        let script = format!(
            "exec {} --kubeconfig=\"$KUBECONFIG\" --namespace={NS} --lease={lease} \
             --identity=ctl-{name} --write-configmap={lease}-by-ctl-{name} --write-every=200ms \
             {}",
            elector.display(),
            CONTROLLER_TIMING.join(" ")
        );
        let (listen, election, lock) = (
            format!("127.0.0.1:{port}"),
            format!("{NS}/{lease}"),
            lock_of(lease),
        );
        let mut args = vec![
            "--lock-backend",
            "kubernetes",
            "--kubeconfig",
            server.kubeconfig_path().to_str().expect("a UTF-8 path"),
            "--leader-election-namespace",
            NS,
            "--leader-election-lock-name",
            &lock,
            "--proxy-listen",
            &listen,
            "--proxy-election-lease",
            &election,
        ];
        args.extend(SHORT_TIMING);
        let exe = Path::new(env!("CARGO_BIN_EXE_gateway-leader"));
        let mut cmd =
            testkit::replica::Replica::command(exe, "exec", &format!("exec-{name}"), &args);
        cmd.args(["--", "sh", "-c", &script])
            .env("RUST_LOG", "info");
        Replica::spawn(&format!("exec-{name}"), cmd)
    };
    let wait_written = |name: &'static str| async move {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(rv) = written_by(server, lease, name).await {
                return rv;
            }
            assert!(
                Instant::now() < until,
                "{name} wrote nothing within {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };

    let mut a = start("a");
    blocking(|| a.wait_for(message::LEADING, PATIENCE));
    wait_written("ctl-a").await;
    let mut b = start("b");
    blocking(|| b.wait_for(message::FOLLOWING, PATIENCE));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        written_by(server, lease, "ctl-b").await.is_none(),
        "the follower's command ran and wrote"
    );
    assert!(
        server_lease(server, lease).await.is_none(),
        "the Lease reached the apiserver"
    );

    a.terminate();
    assert_eq!(blocking(|| a.wait_exit(PATIENCE)), Some(0));
    let a_last = written_by(server, lease, "ctl-a").await;
    wait_written("ctl-b").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        written_by(server, lease, "ctl-a").await,
        a_last,
        "ctl-a wrote after its replica stopped"
    );
    assert!(
        server_lease(server, lease).await.is_none(),
        "the Lease reached the apiserver"
    );
    b.terminate();
    assert_eq!(blocking(|| b.wait_exit(PATIENCE)), Some(0));
}
