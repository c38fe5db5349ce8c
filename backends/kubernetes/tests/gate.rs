//! The write gate on a real kube-apiserver, judged by what the server holds (resourceVersions,
//! data and the managedFields of a field manager per writer), not by our logs.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use leader_lock::conformance::{wait_leader, wait_state};
use leader_lock::gate::GateError;
use leader_lock::leadership::NotLeader;
use leader_lock::{Elector, LeaderState, Timing};
use leader_lock_kubernetes::{client_builder, gated_client, LeaseLock};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use testkit::kube::KubeApiServer;
use testkit::proxy::BlackholeProxy;
use tokio::time::Instant;

/// How long any wait may take on a busy machine before the test gives up.
const PATIENCE: Duration = Duration::from_secs(90);

/// The ConfigMap the gated clients write.
const TARGET: &str = "gated";

/// The field manager of the frozen child's gated writes.
const FROZEN_MANAGER: &str = "gate-frozen";

/// Creates a ConfigMap with the admin client (field manager `test-setup`).
async fn create_config_map(client: Client, ns: &str, name: &str) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm.data = Some([("setup".to_string(), "1".to_string())].into());
    let pp = PostParams {
        field_manager: Some("test-setup".into()),
        ..PostParams::default()
    };
    api.create(&pp, &cm).await.expect("creating the ConfigMap")
}

/// A merge patch of `TARGET` under field manager `manager`.
async fn write(
    client: Client,
    ns: &str,
    manager: &str,
    body: Value,
) -> Result<ConfigMap, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let pp = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    api.patch(TARGET, &pp, &Patch::Merge(body)).await
}

async fn get(client: Client, ns: &str, name: &str) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    api.get(name).await.expect("reading the ConfigMap")
}

/// The managedFields entry of `manager`, if it ever wrote.
fn managed_by<'a>(cm: &'a ConfigMap, manager: &str) -> Option<&'a ManagedFieldsEntry> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|e| e.manager.as_deref() == Some(manager))
}

fn data<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.data.as_ref()?.get(key).map(String::as_str)
}

/// The gate's error inside a kube error, if the gate refused or cancelled the request.
fn gate_error(e: &kube::Error) -> Option<&GateError> {
    match e {
        kube::Error::Service(b) => b.downcast_ref::<GateError>(),
        _ => None,
    }
}

/// Waits on a watch until the ConfigMap satisfies `pred`.
async fn wait_config_map(
    client: Client,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&ConfigMap) -> bool,
) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let cm = api.get(name).await.expect("reading the ConfigMap");
            if pred(&cm) {
                return cm;
            }
            let wp = WatchParams::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(10);
            let rv = cm.resource_version().unwrap_or_default();
            let mut events = api.watch(&wp, &rv).await.expect("watching").boxed();
            // An expired resourceVersion or a closed watch: read again and watch anew.
            while let Ok(Some(event)) = events.try_next().await {
                if let WatchEvent::Added(cm) | WatchEvent::Modified(cm) = event {
                    if pred(&cm) {
                        return cm;
                    }
                }
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{what}: not seen within {PATIENCE:?}"))
}

/// Two electors on one Lease: `a` leads, `b` follows `a`.
async fn leader_and_follower(
    s: &KubeApiServer,
    ns: &str,
    timing: Timing,
) -> (Elector, Elector, leader_lock::Term) {
    let a = common::elector(common::lock(s, ns, "gate"), "a", timing);
    let term = wait_leader(&a.leadership(), PATIENCE, "a").await;
    let b = common::elector(common::lock(s, ns, "gate"), "b", timing);
    let holder = a.candidate().holder();
    wait_state(
        &b.leadership(),
        PATIENCE,
        "b following a",
        |st| matches!(st, LeaderState::Follower { holder: Some(h), .. } if *h == holder),
    )
    .await;
    (a, b, term)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_s_gated_writes_are_refused_and_not_sent() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "gate-follower").await;
    let (a, b, term) = leader_and_follower(s, &ns, common::timing()).await;
    create_config_map(s.admin_client(), &ns, TARGET).await;
    let gated_a = gated_client(s.config().clone(), a.leadership()).expect("client a");
    let gated_b = gated_client(s.config().clone(), b.leadership()).expect("client b");

    // The leader's gated write lands.
    write(gated_a, &ns, "gate-a", json!({"data": {"by": "a"}}))
        .await
        .expect("the leader's write");
    let before = get(s.admin_client(), &ns, TARGET).await;
    assert!(managed_by(&before, "gate-a").is_some(), "{before:?}");

    // The follower's is refused, typed; a read through the same client passes.
    let e = write(gated_b.clone(), &ns, "gate-b", json!({"data": {"by": "b"}}))
        .await
        .expect_err("a follower's write");
    match gate_error(&e) {
        Some(GateError::NotLeader {
            method,
            reason: NotLeader::Follower { holder: Some(h) },
            ..
        }) => {
            assert_eq!(method, "PATCH");
            assert_eq!(*h, a.candidate().holder());
        }
        other => panic!("not a refusal: {e} ({other:?})"),
    }
    let read = get(gated_b, &ns, TARGET).await;

    // Judged by the server: nothing changed, and b's field manager never wrote.
    let after = get(s.admin_client(), &ns, TARGET).await;
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(read.resource_version(), before.resource_version());
    assert_eq!(
        after.metadata.managed_fields,
        before.metadata.managed_fields
    );
    assert!(managed_by(&after, "gate-b").is_none(), "{after:?}");
    assert_eq!(data(&after, "by"), Some("a"));
    assert!(a.leadership().check().map(|p| p.term) == Ok(term));
    b.shutdown().await.expect("b stops");
    a.shutdown().await.expect("a stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_graceful_handover_the_new_leader_s_gated_writes_land() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "gate-handover").await;
    let (a, b, old_term) = leader_and_follower(s, &ns, common::timing()).await;
    create_config_map(s.admin_client(), &ns, TARGET).await;
    let gated_a = gated_client(s.config().clone(), a.leadership()).expect("client a");
    let gated_b = gated_client(s.config().clone(), b.leadership()).expect("client b");
    let refused = write(gated_b.clone(), &ns, "gate-b", json!({"data": {"by": "b"}}))
        .await
        .expect_err("b follows");
    assert!(gate_error(&refused).is_some(), "{refused}");

    a.shutdown().await.expect("a releases");
    let new_term = wait_leader(&b.leadership(), PATIENCE, "b after a released").await;
    assert!(new_term > old_term);

    // The stopped leader's writes are refused from now on.
    let before = get(s.admin_client(), &ns, TARGET).await;
    let e = write(gated_a, &ns, "gate-a", json!({"data": {"by": "a"}}))
        .await
        .expect_err("a stopped");
    assert!(
        matches!(
            gate_error(&e),
            Some(GateError::NotLeader {
                reason: NotLeader::ShuttingDown,
                ..
            })
        ),
        "{e}"
    );
    assert_eq!(
        get(s.admin_client(), &ns, TARGET).await.resource_version(),
        before.resource_version()
    );

    // The new leader's write lands: a new resourceVersion, its manager in managedFields.
    write(gated_b, &ns, "gate-b", json!({"data": {"by": "b"}}))
        .await
        .expect("the new leader's write");
    let after = get(s.admin_client(), &ns, TARGET).await;
    assert_ne!(after.resource_version(), before.resource_version());
    assert!(managed_by(&after, "gate-b").is_some(), "{after:?}");
    assert!(managed_by(&after, "gate-a").is_none(), "{after:?}");
    assert_eq!(data(&after, "by"), Some("b"));
    b.shutdown().await.expect("b stops");
}

/// Timing of the frozen-leader test: a short lease so the takeover comes quickly.
fn short_timing() -> Timing {
    Timing::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(500),
    )
    .expect("valid timing")
}

/// The frozen leader: the `gated_writer` example, elected on the Lease `gate-frozen` with
/// [`short_timing`], writing its attempt number to `TARGET` (key `frozen`) through the gated
/// client as fast as it can, and recording every attempt (and its outcome) in the ConfigMap
/// `attempts` through an ungated client, so the parent can see it run after the thaw.
fn frozen_leader(s: &KubeApiServer, ns: &str) -> Command {
    let exe = testkit::cargo::workspace_example("leader-lock-kubernetes", "gated_writer")
        .expect("building the gated_writer example");
    let t = short_timing();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--namespace",
        ns,
        "--lease",
        "gate-frozen",
        "--identity",
        "frozen",
    ])
    .args(["--target", TARGET, "--attempts", "attempts"])
    .args(["--field-manager", FROZEN_MANAGER, "--interval", "0s"])
    .arg(format!(
        "--lease-duration={}ms",
        t.lease_duration.as_millis()
    ))
    .arg(format!(
        "--renew-deadline={}ms",
        t.renew_deadline.as_millis()
    ))
    .arg(format!("--retry-period={}ms", t.retry_period.as_millis()))
    .env("KUBECONFIG", s.kubeconfig_path())
    .env("RUST_LOG", "error")
    .stdout(Stdio::null());
    cmd
}

/// Kills the child process when the test ends, however it ends.
struct ChildGuard(Child);

impl ChildGuard {
    fn signal(&self, signal: Signal) {
        let pid = i32::try_from(self.0.id()).expect("a pid fits an i32");
        kill(Pid::from_raw(pid), signal).expect("signalling the child");
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn attempt(cm: &ConfigMap) -> u64 {
    data(cm, "attempt")
        .and_then(|a| a.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_past_its_validity_sends_nothing_after_the_thaw() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "gate-frozen").await;
    create_config_map(s.admin_client(), &ns, TARGET).await;
    create_config_map(s.admin_client(), &ns, "attempts").await;

    let child = frozen_leader(s, &ns)
        .spawn()
        .expect("starting the frozen leader");
    let child = ChildGuard(child);

    // 1. The child leads and its gated writes land.
    wait_config_map(s.admin_client(), &ns, TARGET, "the child's writes", |cm| {
        data(cm, "frozen").is_some()
    })
    .await;
    let lock = LeaseLock::new(s.admin_client(), &ns, "gate-frozen").with_server(s.url());
    let taker = common::elector(lock, "taker", short_timing());
    wait_state(
        &taker.leadership(),
        PATIENCE,
        "taker following",
        |st| matches!(st, LeaderState::Follower { holder: Some(h), .. } if h.starts_with("frozen")),
    )
    .await;

    // 2. Frozen well past its renew deadline: the taker takes over and writes.
    child.signal(Signal::SIGSTOP);
    wait_leader(&taker.leadership(), PATIENCE, "taker after the freeze").await;
    let gated = gated_client(s.config().clone(), taker.leadership()).expect("taker's client");
    write(
        gated.clone(),
        &ns,
        "gate-taker",
        json!({"data": {"taker": "1"}}),
    )
    .await
    .expect("the new leader's first write");
    // At least lease_duration after the freeze: whatever the child had sent before it landed.
    let frozen = get(s.admin_client(), &ns, TARGET).await;
    let frozen_value = data(&frozen, "frozen").map(str::to_owned);
    let frozen_entry = managed_by(&frozen, FROZEN_MANAGER).cloned();
    assert!(
        frozen_value.is_some() && frozen_entry.is_some(),
        "{frozen:?}"
    );
    let attempts_at_freeze = attempt(&get(s.admin_client(), &ns, "attempts").await);

    // 3. Thawed: it runs on (its attempts are recorded), but no gated write of it lands.
    child.signal(Signal::SIGCONT);
    let attempts = wait_config_map(
        s.admin_client(),
        &ns,
        "attempts",
        "the child's attempts after the thaw",
        |cm| attempt(cm) >= attempts_at_freeze + 3,
    )
    .await;
    write(gated, &ns, "gate-taker", json!({"data": {"taker": "2"}}))
        .await
        .expect("the new leader's write after the thaw");

    let after = get(s.admin_client(), &ns, TARGET).await;
    assert_eq!(
        data(&after, "frozen").map(str::to_owned),
        frozen_value,
        "a gated write of the frozen leader landed after the thaw; its last attempt: {:?}",
        attempts.data
    );
    assert_eq!(
        managed_by(&after, FROZEN_MANAGER).cloned(),
        frozen_entry,
        "the frozen leader's field manager wrote after the thaw"
    );
    assert_eq!(
        data(&after, "taker"),
        Some("2"),
        "the new leader's writes land"
    );
    drop(child);
    taker.shutdown().await.expect("taker stops");
}

/// The apiserver's address, for the proxy to forward to.
async fn upstream(s: &KubeApiServer) -> SocketAddr {
    let url = &s.config().cluster_url;
    let host = url.host().expect("the apiserver URL has a host");
    let port = url.port_u16().unwrap_or(443);
    tokio::net::lookup_host((host, port))
        .await
        .expect("resolving the apiserver")
        .next()
        .expect("an address for the apiserver")
}

/// A proxy to the apiserver (healed; `cut` holds every byte), and the server's config through it.
async fn via_proxy(s: &KubeApiServer) -> (BlackholeProxy, kube::Config) {
    let proxy = BlackholeProxy::start(upstream(s).await)
        .await
        .expect("the proxy");
    let mut config = s.config().clone();
    config.cluster_url = format!("https://{}", proxy.addr())
        .parse()
        .expect("the proxy's URL");
    (proxy, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_outlives_the_validity_is_cancelled_at_the_deadline_and_fenced() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "gate-blackhole").await;
    let timing = common::timing();
    let a = common::elector(common::lock(s, &ns, "gate"), "a", timing);
    let term = wait_leader(&a.leadership(), PATIENCE, "a").await;
    create_config_map(s.admin_client(), &ns, TARGET).await;

    // Only the gated client goes through the proxy; the lock keeps renewing directly.
    let (proxy, config) = via_proxy(s).await;
    let gated = gated_client(config, a.leadership()).expect("the gated client");
    // A read through the proxy opens the connection the write will use.
    let seen = get(gated.clone(), &ns, TARGET).await;
    let rv = seen.resource_version().expect("a resourceVersion");

    // The write leaves while the route is cut: it is in flight until the permit's deadline.
    proxy.cut();
    let started = Instant::now();
    let body = json!({"metadata": {"resourceVersion": rv}, "data": {"late": "1"}});
    let r = tokio::time::timeout(PATIENCE, write(gated.clone(), &ns, "gate-late", body))
        .await
        .expect("the gated call returned");
    let took = started.elapsed();
    let e = r.expect_err("the write could not reach the server");
    match gate_error(&e) {
        Some(GateError::Deadline {
            term: t, method, ..
        }) => {
            assert_eq!(*t, term);
            assert_eq!(method, "PATCH");
        }
        other => panic!("not cancelled at the deadline: {e} ({other:?})"),
    }
    // Taken at most renew_deadline before it was due; generous slack for a busy machine.
    assert!(
        took <= timing.renew_deadline + Duration::from_secs(10),
        "cancelled after {took:?}"
    );

    // The proxy still holds the request's bytes and delivers them once it heals, as TCP would:
    // the server must fence the late request. The patch carries the resourceVersion it was
    // based on; another write moves it on meanwhile (as a new leader would), so it cannot land.
    let moved = write(
        s.admin_client(),
        &ns,
        "test-fence",
        json!({"data": {"moved": "1"}}),
    )
    .await
    .expect("moving the ConfigMap on");
    proxy.heal();
    // A write through the healed proxy, on a new connection, after the held bytes were let go.
    write(
        gated.clone(),
        &ns,
        "gate-after",
        json!({"data": {"after": "1"}}),
    )
    .await
    .expect("a write through the healed proxy");
    let marker = get(s.admin_client(), &ns, TARGET).await;
    // The late request, if delivered at all, was handled by now; give a busy server a moment.
    tokio::time::sleep(timing.retry_period * 5).await;
    let after = get(s.admin_client(), &ns, TARGET).await;
    assert_eq!(after.resource_version(), marker.resource_version());
    assert!(managed_by(&after, "gate-late").is_none(), "{after:?}");
    assert_eq!(data(&after, "late"), None);
    assert_eq!(data(&after, "moved"), Some("1"));
    assert_ne!(moved.resource_version().as_deref(), Some(rv.as_str()));
    a.shutdown().await.expect("a stops");
}

/// The gate's error anywhere in `e`'s chain of causes (a body that refused to be read comes
/// back through hyper's error).
fn deadline_in_chain<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a GateError> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(g) = c.downcast_ref::<GateError>() {
            return Some(g);
        }
        cause = c.source();
    }
    None
}

/// A write queued on a connection that opens only after its permit's deadline is not sent: the
/// connection's task cannot read its body by then (`DeadlineBody`, under every client
/// `client_builder` makes). Nothing else cancels it here, as nothing does in a process frozen
/// with a request queued and thawed after the deadline: no gate or `run` drops its future; the
/// request only carries the permit in its extensions, as a gate further out leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_queued_past_its_permit_s_deadline_is_not_sent() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "gate-queued").await;
    let a = common::elector(common::lock(s, &ns, "gate"), "a", common::timing());
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    create_config_map(s.admin_client(), &ns, TARGET).await;
    let before = get(s.admin_client(), &ns, TARGET).await;

    // A client with no connection yet, through a proxy that holds every byte while cut: the
    // write waits there for its connection (the TLS handshake) until after its deadline.
    let (proxy, config) = via_proxy(s).await;
    let client = client_builder(config).expect("a client").build();
    proxy.cut();
    let permit = a.leadership().check().expect("a leads");
    let (until, term) = (permit.valid_until, permit.term);
    let body = serde_json::to_vec(&json!({"data": {"queued": "1"}})).expect("JSON");
    let mut req = http::Request::patch(format!(
        "/api/v1/namespaces/{ns}/configmaps/{TARGET}?fieldManager=gate-queued"
    ))
    .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
    .body(kube::client::Body::from(body))
    .expect("a request");
    req.extensions_mut().insert(permit);
    let sending = tokio::spawn(async move { client.send(req).await });
    tokio::time::sleep_until(until + Duration::from_millis(300)).await;
    proxy.heal();

    let r = tokio::time::timeout(PATIENCE, sending)
        .await
        .expect("the send returned once the route healed")
        .expect("the sending task");
    let e = r.expect_err("a write queued past its permit's deadline is not sent");
    assert!(
        matches!(
            deadline_in_chain(&e),
            Some(GateError::Deadline { term: t, method, .. }) if *t == term && method == "PATCH"
        ),
        "not refused by its body's deadline: {e:?}"
    );
    // What the server holds: the ConfigMap as it was, once a late request would have landed.
    tokio::time::sleep(common::timing().retry_period * 5).await;
    let after = get(s.admin_client(), &ns, TARGET).await;
    assert_eq!(after.resource_version(), before.resource_version());
    assert_eq!(data(&after, "queued"), None, "{after:?}");
    assert!(managed_by(&after, "gate-queued").is_none(), "{after:?}");
    a.shutdown().await.expect("a stops");
}
