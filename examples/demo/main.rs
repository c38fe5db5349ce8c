//! The engine of `scripts/demo.sh`: the main job of gateway-leader, live on this machine.
//!
//! It starts a local kube-apiserver (or uses an existing cluster) with the Gateway API CRDs and a small sample (a class, a
//! Gateway with an HTTP listener and an HTTPS listener whose certificate Secret does not exist
//! yet, a Service, three HTTPRoutes: one valid, one to a missing Service, one to another
//! namespace's Service without a ReferenceGrant, and a GRPCRoute), and three `gateway-leader run`
//! replicas that elect a leader on a Kubernetes Lease, etcd or Redis. Every replica computes the statuses; only
//! the leader writes them. The demo prints who leads under which fencing term and the statuses on
//! the objects with the replica and term that wrote each, then stops the leader gracefully
//! (SIGTERM) and crashes the next one (SIGKILL), changing a route each time, and shows how long
//! the next leader took to write.
//!
//! Usage: `demo <path of the gateway-leader binary> [kubernetes|etcd|redis] [--kubeconfig PATH]`;
//! `scripts/demo.sh` builds both and runs it. With `--kubeconfig`, the cluster of that file is
//! used instead of a local apiserver (see `cluster.rs`).

mod cluster;

use std::ffi::OsString;
use std::fmt::Display;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_leader_log::{message, Event};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ManagedFieldsEntry, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client, Resource};
use nix::sys::signal::Signal;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tempfile::TempDir;
use testkit::etcd::EtcdServer;
use testkit::kube::KubeApiServer;
use testkit::redis::RedisServer;
use testkit::replica::{Dialect, Journal, Line, Replica, Snapshot, Transcript};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

const USAGE: &str =
    "usage: demo <gateway-leader binary> [kubernetes|etcd|redis] [--kubeconfig <existing cluster>]";

const REPLICAS: [&str; 3] = ["replica-a", "replica-b", "replica-c"];
/// `--controller-name`'s default: the replicas run without the flag, so the class names it.
const CONTROLLER: &str = "gateway-leader.dev/gateway-controller";
/// Names of its own, so that on an existing cluster nothing of the user's is touched.
const NS: &str = "gateway-leader-demo";
const OTHER_NS: &str = "gateway-leader-demo-other";
/// The label on what the demo creates at the top level (namespaces, the class): on an existing
/// cluster, what carries it is removed after the run, and before it when a run was cut short.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "gateway-leader-demo");
/// A Service name that never exists.
const MISSING_SERVICE: &str = "no-such-service";
/// The Secret the HTTPS listener names: missing at first, created once the statuses show it.
const TLS_SECRET: &str = "web-tls";

/// Short timing so that the crash case (which waits for the lease to run out) is quick; the
/// defaults are 15s/10s/2s.
const LEASE_DURATION: &str = "5s";
const RENEW_DEADLINE: &str = "3s";
const RETRY_PERIOD: &str = "1s";
/// `LEASE_DURATION` as a duration.
const LEASE: Duration = Duration::from_secs(5);

/// How long any one wait may take: apiserver, watches, three replicas and a lease expiry on a
/// busy 2-core machine stay far below it; reaching it means something is broken.
const PATIENCE: Duration = Duration::from_secs(120);

// === objects ===

/// One object of the sample whose status the demo shows.
#[derive(Debug, Clone, Copy)]
struct Key {
    /// As the replicas log it (the `kind` of [`message::WRITTEN`]).
    kind: &'static str,
    namespace: Option<&'static str>,
    name: &'static str,
}

const CLASS: Key = Key {
    kind: "GatewayClass",
    namespace: None,
    name: "gateway-leader-demo",
};
const GATEWAY: Key = Key {
    kind: "Gateway",
    namespace: Some(NS),
    name: "web",
};
const VALID: Key = Key {
    kind: "HTTPRoute",
    namespace: Some(NS),
    name: "valid",
};
const MISSING: Key = Key {
    kind: "HTTPRoute",
    namespace: Some(NS),
    name: "missing-backend",
};
const CROSS: Key = Key {
    kind: "HTTPRoute",
    namespace: Some(OTHER_NS),
    name: "cross-namespace",
};
const GRPC: Key = Key {
    kind: "GRPCRoute",
    namespace: Some(NS),
    name: "grpc",
};
const TABLE: [Key; 6] = [CLASS, GATEWAY, VALID, MISSING, CROSS, GRPC];

impl Key {
    fn object(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.to_string(),
        }
    }

    /// A [`message::WRITTEN`] line about this object.
    fn written_by(&self, line: &Line) -> bool {
        matches!(&line.event, Some(Event::Written { object_kind, namespace, name, .. })
            if object_kind == self.kind
                && namespace == self.namespace.unwrap_or_default()
                && name == self.name)
    }
}

impl Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.object())
    }
}

// === output ===

/// How a piece of output is coloured (only on a terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tone {
    Plain,
    Bold,
    Dim,
    Good,
    Bad,
    Unsure,
}

impl Tone {
    fn code(self) -> &'static str {
        match self {
            Tone::Plain => "",
            Tone::Bold => "1",
            Tone::Dim => "2",
            Tone::Good => "32",
            Tone::Bad => "31",
            Tone::Unsure => "33",
        }
    }
}

struct Out {
    color: bool,
}

impl Out {
    fn new() -> Out {
        Out {
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(&self, tone: Tone, text: &str) -> String {
        if self.color && tone != Tone::Plain {
            format!("\x1b[{}m{text}\x1b[0m", tone.code())
        } else {
            text.to_string()
        }
    }

    fn step(&self, msg: impl Display) {
        println!("{} {msg}", self.paint(Tone::Bold, "[demo]"));
    }

    fn note(&self, msg: impl Display) {
        let msg = format!("note: {msg}");
        println!(
            "{} {}",
            self.paint(Tone::Bold, "[demo]"),
            self.paint(Tone::Unsure, &msg)
        );
    }

    fn heading(&self, msg: impl Display) {
        println!("\n{}", self.paint(Tone::Bold, &msg.to_string()));
    }
}

/// `31 ms`, `4.2 ms`, `5.31 s`.
fn human(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// "a", "a and b", "a, b and c".
fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

// === the replicas ===

/// A replica that leads, from its [`message::LEADING`] line.
#[derive(Debug, Clone)]
struct Leading {
    replica: String,
    term: u64,
    /// The replica's own timestamp of the line.
    at: SystemTime,
}

/// The fencing term a line names, if it is a declared event that names one.
fn term_of(line: &Line) -> Option<u64> {
    line.event.as_ref().and_then(Event::term)
}

/// The object a write line is about: a first write's `object`, a write's kind and
/// `namespace/name`.
fn written_object(line: &Line) -> String {
    match &line.event {
        Some(Event::FirstWrite { object, .. }) => object.clone(),
        Some(Event::Written {
            object_kind,
            namespace,
            name,
            ..
        }) => match namespace.as_str() {
            "" => format!("{object_kind} {name}"),
            ns => format!("{object_kind} {ns}/{name}"),
        },
        _ => String::new(),
    }
}

/// The index of replica `name` in the fleet's journal (they join it in [`REPLICAS`]' order).
fn index(name: &str) -> Option<usize> {
    REPLICAS.iter().position(|n| *n == name)
}

/// The lines of replica `name` after `mark` ([`Journal::mark`]; 0 for all of them).
fn since<'a>(
    s: &Snapshot<'a>,
    name: &str,
    mark: usize,
) -> impl DoubleEndedIterator<Item = &'a Line> {
    let index = index(name);
    s.since(mark)
        .iter()
        .filter(move |l| Some(l.process) == index)
}

/// The newest leadership among `among` logged after `mark`, if any.
fn leader_in(s: &Snapshot<'_>, among: &[&str], mark: usize) -> Option<Leading> {
    s.since(mark)
        .iter()
        .filter_map(|l| match l.event {
            Some(Event::Leading { term, .. }) => Some(Leading {
                replica: s.name(l.process).to_string(),
                term,
                at: l.at,
            }),
            _ => None,
        })
        .filter(|l| among.contains(&l.replica.as_str()))
        .max_by_key(|l| l.at)
}

/// The three `gateway-leader run` replicas (`testkit::replica`), their lines in one journal;
/// each is killed when this is dropped.
struct Fleet {
    /// In [`REPLICAS`]' order.
    replicas: Vec<Mutex<Replica>>,
    journal: Journal,
    dir: PathBuf,
}

impl Fleet {
    /// Starts each of [`REPLICAS`] with `run <args>`, its log in `dir`.
    fn start(bin: &Path, args: &[String], dir: &Path) -> Result<Fleet> {
        let journal = Journal::new();
        let mut replicas = Vec::new();
        for name in REPLICAS {
            // JSON logs, the identity, a free health port each (three replicas on one machine)
            // and none of the caller's settings: the flags say everything.
            let mut cmd = Replica::run_command(bin, name, args);
            // The demo reads the info lines; a RUST_LOG of the caller's shell must not hide them.
            cmd.env("RUST_LOG", "info");
            let log = Transcript::File(dir.join(format!("{name}.log")));
            let replica = Replica::spawn(cmd, name, Dialect::GatewayLeader, &journal, log)?;
            replicas.push(Mutex::new(replica));
        }
        Ok(Fleet {
            replicas,
            journal,
            dir: dir.to_path_buf(),
        })
    }

    /// How many lines the replicas have logged: waits given it look only at what came after.
    fn mark(&self) -> usize {
        self.journal.mark()
    }

    /// Sends `sig` to a replica; returns the wall-clock instant just before, which the
    /// replicas' log timestamps are compared with.
    fn signal(&self, name: &str, sig: Signal) -> Result<SystemTime> {
        let replica = index(name)
            .and_then(|i| self.replicas.get(i))
            .ok_or_else(|| anyhow!("{name} is not running"))?;
        // A panic while holding the lock leaves the process as it was.
        let mut replica = replica.lock().unwrap_or_else(|p| p.into_inner());
        Ok(replica.signal(sig)?.at)
    }

    /// The last lines of a replica's log file, for an error message.
    fn tail(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        testkit::tail(&text, 12)
    }

    /// Fails when every replica of `among` has exited, with their last lines.
    fn ensure_alive(&self, s: &Snapshot<'_>, among: &[&str]) -> Result<()> {
        if among.iter().all(|n| index(n).is_some_and(|i| s.ended(i))) {
            let tails: Vec<String> = among
                .iter()
                .map(|n| format!("--- {n}:\n{}", self.tail(n)))
                .collect();
            bail!(
                "{} exited (logs in {}):\n{}",
                list(&among.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
                self.dir.display(),
                tails.join("\n")
            );
        }
        Ok(())
    }

    /// Waits up to [`PATIENCE`] for `probe` to find something in the logs, woken by every new
    /// line; fails naming `what` and the logs, or as soon as `probe` fails.
    async fn wait<T>(
        &self,
        what: &str,
        mut probe: impl FnMut(&Snapshot<'_>) -> Result<Option<T>>,
    ) -> Result<T> {
        match self.journal.wait(PATIENCE, |s| probe(&s).transpose()).await {
            Some(found) => found,
            None => bail!(
                "waited {PATIENCE:?} for {what} in vain (replica logs: {})",
                self.dir.display()
            ),
        }
    }

    /// Waits for a leader among `among` that logged its leadership after `mark`.
    async fn wait_leader(&self, among: &[&str], mark: usize) -> Result<Leading> {
        let what = format!("a leader among {}", among.join(", "));
        self.wait(&what, |s| {
            if let Some(l) = leader_in(s, among, mark) {
                return Ok(Some(l));
            }
            self.ensure_alive(s, among)?;
            Ok(None)
        })
        .await
    }

    /// Waits for a line of `name` after `mark` that `hit` accepts; `what` names it.
    async fn wait_line(
        &self,
        name: &str,
        mark: usize,
        what: &str,
        hit: impl Fn(&Line) -> bool,
    ) -> Result<Line> {
        self.wait(&format!("{what} from {name}"), |s| {
            if let Some(l) = since(s, name, mark).rev().find(|l| hit(l)) {
                return Ok(Some(l.clone()));
            }
            self.ensure_alive(s, &[name])?;
            Ok(None)
        })
        .await
    }
}

// === the lock's server ===

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Kubernetes,
    Etcd,
    Redis,
}

impl Backend {
    fn parse(s: &str) -> Option<Backend> {
        match s {
            "kubernetes" => Some(Backend::Kubernetes),
            "etcd" => Some(Backend::Etcd),
            "redis" => Some(Backend::Redis),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Backend::Kubernetes => "kubernetes",
            Backend::Etcd => "etcd",
            Backend::Redis => "redis",
        }
    }
}

/// Where the lock lives; statuses always go to the apiserver.
enum LockServer {
    Kubernetes,
    Etcd(EtcdServer),
    Redis {
        server: RedisServer,
        /// When it came up: a fresh Redis hands out no lock for one lease after that.
        up_since: Instant,
    },
}

impl LockServer {
    async fn start(backend: Backend) -> Result<LockServer> {
        Ok(match backend {
            Backend::Kubernetes => LockServer::Kubernetes,
            Backend::Etcd => LockServer::Etcd(
                EtcdServer::start()
                    .await
                    .context("starting etcd for the lock")?,
            ),
            Backend::Redis => {
                let server = RedisServer::start()
                    .await
                    .context("starting redis-server for the lock")?;
                LockServer::Redis {
                    server,
                    up_since: Instant::now(),
                }
            }
        })
    }

    fn describe(&self) -> String {
        match self {
            LockServer::Kubernetes => format!("a Lease in namespace {NS} on the apiserver"),
            LockServer::Etcd(s) => format!("a key in a throwaway etcd at {}", s.endpoint()),
            LockServer::Redis { server, .. } => {
                format!("a key in a throwaway Redis at {}", server.url())
            }
        }
    }

    /// `--lock-backend`'s value.
    fn backend(&self) -> &'static str {
        match self {
            LockServer::Kubernetes => "kubernetes",
            LockServer::Etcd(_) => "etcd",
            LockServer::Redis { .. } => "redis",
        }
    }

    /// Where to find the lock: the Lease's namespace, or the server's endpoint.
    fn flags(&self) -> [String; 2] {
        match self {
            LockServer::Kubernetes => ["--leader-election-namespace".into(), NS.into()],
            LockServer::Etcd(s) => ["--etcd-endpoints".into(), s.endpoint()],
            LockServer::Redis { server, .. } => ["--redis-url".into(), server.url()],
        }
    }
}

// === the sample ===

async fn create<K>(api: &Api<K>, value: Value) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let what = format!(
        "{} {}",
        value["kind"].as_str().unwrap_or("object"),
        value["metadata"]["name"].as_str().unwrap_or("?")
    );
    let obj: K = serde_json::from_value(value).with_context(|| format!("the sample's {what}"))?;
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("creating {what}"))?;
    Ok(())
}

fn route(ns: &str, name: &str, parent: Value, backend: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parentRefs": [parent], "rules": [{"backendRefs": [backend]}]}
    })
}

async fn apply_sample(client: &Client) -> Result<()> {
    cluster::create_namespaces(client).await?;
    create(
        &Api::<GatewayClass>::all(client.clone()),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": CLASS.name, "labels": {MANAGED_BY.0: MANAGED_BY.1}},
            "spec": {"controllerName": CONTROLLER}
        }),
    )
    .await?;
    create(
        &Api::<Gateway>::namespaced(client.clone(), NS),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": GATEWAY.name, "namespace": NS},
            "spec": {"gatewayClassName": CLASS.name, "listeners": [{
                "name": "http", "protocol": "HTTP", "port": 80,
                "allowedRoutes": {"namespaces": {"from": "All"}}
            }, {
                "name": "https", "protocol": "HTTPS", "port": 443,
                "allowedRoutes": {"namespaces": {"from": "All"}},
                "tls": {"certificateRefs": [{"name": TLS_SECRET}]}
            }]}
        }),
    )
    .await?;
    create(
        &Api::<Service>::namespaced(client.clone(), NS),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"ports": [{"name": "http", "port": 80}]}
        }),
    )
    .await?;
    let routes = Api::<HttpRoute>::namespaced(client.clone(), NS);
    let parent = json!({"name": GATEWAY.name});
    create(
        &routes,
        route(
            NS,
            VALID.name,
            parent.clone(),
            json!({"name": "web", "port": 80}),
        ),
    )
    .await?;
    create(
        &routes,
        route(
            NS,
            MISSING.name,
            parent,
            json!({"name": MISSING_SERVICE, "port": 80}),
        ),
    )
    .await?;
    // A GRPCRoute to the same Service, through the same route engine and listener.
    let mut grpc = route(
        NS,
        GRPC.name,
        json!({"name": GATEWAY.name}),
        json!({"name": "web", "port": 80}),
    );
    grpc["kind"] = json!("GRPCRoute");
    create(&Api::<GrpcRoute>::namespaced(client.clone(), NS), grpc).await?;
    // Another namespace's Service without a ReferenceGrant: ResolvedRefs False, RefNotPermitted.
    create(
        &Api::<HttpRoute>::namespaced(client.clone(), OTHER_NS),
        route(
            OTHER_NS,
            CROSS.name,
            json!({"name": GATEWAY.name, "namespace": NS}),
            json!({"name": "web", "namespace": NS, "port": 80}),
        ),
    )
    .await?;
    Ok(())
}

/// Creates the HTTPS listener's Secret (a self-signed certificate) and waits until the leader
/// reports the listener resolved and programmed.
async fn create_tls_secret(client: &Client, logs: &Path) -> Result<()> {
    let cert = rcgen::generate_simple_self_signed(vec!["web.demo.example".to_string()])
        .context("making a self-signed certificate")?;
    create(
        &Api::<Secret>::namespaced(client.clone(), NS),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": TLS_SECRET, "namespace": NS},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": cert.cert.pem(), "tls.key": cert.signing_key.serialize_pem()}
        }),
    )
    .await?;
    await_object(
        Api::<Gateway>::namespaced(client.clone(), NS),
        GATEWAY,
        "listener https ResolvedRefs=True",
        logs,
        |g| {
            g.status
                .iter()
                .flat_map(|s| s.listeners.iter().flatten())
                .filter(|l| l.name == "https")
                .flat_map(|l| l.conditions.iter())
                .any(|c| c.type_ == "ResolvedRefs" && c.status == "True")
        },
    )
    .await?;
    Ok(())
}

/// Points a route's only rule at `service`:80; returns the generation the change made.
async fn point_route(client: &Client, key: Key, service: &str) -> Result<i64> {
    let api = Api::<HttpRoute>::namespaced(client.clone(), key.namespace.unwrap_or(NS));
    let patch = json!({"spec": {"rules": [{"backendRefs": [{"name": service, "port": 80}]}]}});
    let r = api
        .patch(key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("changing {key}"))?;
    r.metadata
        .generation
        .ok_or_else(|| anyhow!("{key} has no metadata.generation"))
}

// === statuses on the objects ===

fn conditions_text(conditions: &[Condition], indent: &str) -> Vec<(String, Tone)> {
    conditions
        .iter()
        .map(|c| {
            let tone = match c.status.as_str() {
                "True" => Tone::Good,
                "False" => Tone::Bad,
                _ => Tone::Unsure,
            };
            (
                format!("{indent}{}={} ({})", c.type_, c.status, c.reason),
                tone,
            )
        })
        .collect()
}

fn our_parents(
    r: &HttpRoute,
) -> impl Iterator<Item = &gateway_api::httproutes::HttpRouteStatusParents> {
    r.status
        .iter()
        .flat_map(|s| s.parents.iter())
        .filter(|p| p.controller_name == CONTROLLER)
}

/// True when our entry on the route has condition `type_` = `status`, observed at `generation`
/// or later (so it is about the route as changed, not as it was).
fn route_says(r: &HttpRoute, type_: &str, status: &str, generation: i64) -> bool {
    our_parents(r).any(|p| {
        p.conditions.iter().any(|c| {
            c.type_ == type_
                && c.status == status
                && c.observed_generation.unwrap_or(i64::MIN) >= generation
        })
    })
}

/// The replicas that wrote the object's status, with the time of their managedFields entry.
fn status_writers(meta: &ObjectMeta) -> Vec<(String, Option<Timestamp>)> {
    fn is_status(m: &ManagedFieldsEntry) -> bool {
        m.subresource.as_deref() == Some("status")
    }
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| is_status(m))
        .filter_map(|m| {
            let name = m.manager.as_deref()?.strip_prefix("gateway-leader/")?;
            Some((name.to_string(), m.time.as_ref().map(|t| t.0)))
        })
        .collect()
}

/// One object's status as the table shows it.
struct Status {
    lines: Vec<(String, Tone)>,
    writers: Vec<(String, Option<Timestamp>)>,
}

async fn read_status(client: &Client, key: Key) -> Result<Status> {
    let ns = key.namespace.unwrap_or_default();
    let context = || format!("reading {key}");
    let (lines, meta) = match key.kind {
        "GatewayClass" => {
            let o = Api::<GatewayClass>::all(client.clone())
                .get(key.name)
                .await
                .with_context(context)?;
            let conds = o
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            (conditions_text(&conds, ""), o.metadata)
        }
        "Gateway" => {
            let o = Api::<Gateway>::namespaced(client.clone(), ns)
                .get(key.name)
                .await
                .with_context(context)?;
            let status = o.status.clone().unwrap_or_default();
            let mut lines = conditions_text(&status.conditions.unwrap_or_default(), "");
            for l in status.listeners.unwrap_or_default() {
                lines.push((
                    format!("listener {}: attachedRoutes {}", l.name, l.attached_routes),
                    Tone::Plain,
                ));
                lines.extend(conditions_text(&l.conditions, "  "));
            }
            (lines, o.metadata)
        }
        kind => {
            let o = get_route(client, kind, ns, key.name)
                .await
                .with_context(context)?;
            let mut lines = Vec::new();
            let ours: Vec<_> = our_parents(&o).collect();
            for p in &ours {
                if ours.len() > 1 {
                    lines.push((format!("parent {}:", p.parent_ref.name), Tone::Plain));
                }
                lines.extend(conditions_text(&p.conditions, ""));
            }
            (lines, o.metadata.clone())
        }
    };
    Ok(Status {
        lines,
        writers: status_writers(&meta),
    })
}

/// Waits until a replica has written the object's status. The conditions alone would not
/// tell: the upstream CRDs default them to `Unknown (Pending)` when the object is created.
async fn has_status(client: &Client, key: Key, logs: &Path) -> Result<()> {
    fn written<K: Resource<DynamicType = ()>>(o: &K) -> bool {
        !status_writers(o.meta()).is_empty()
    }
    let ns = key.namespace.unwrap_or_default();
    let what = "a status from a replica";
    match key.kind {
        "GatewayClass" => {
            await_object(
                Api::<GatewayClass>::all(client.clone()),
                key,
                what,
                logs,
                written,
            )
            .await?;
        }
        "Gateway" => {
            await_object(
                Api::<Gateway>::namespaced(client.clone(), ns),
                key,
                what,
                logs,
                written,
            )
            .await?;
        }
        "GRPCRoute" => {
            await_object(
                Api::<GrpcRoute>::namespaced(client.clone(), ns),
                key,
                what,
                logs,
                written,
            )
            .await?;
        }
        _ => {
            await_object(
                Api::<HttpRoute>::namespaced(client.clone(), ns),
                key,
                what,
                logs,
                written,
            )
            .await?;
        }
    }
    Ok(())
}

/// A route of `kind` read as an HTTPRoute: every route kind's `status.parents` has the same
/// shape, and the table shows only the status.
async fn get_route(client: &Client, kind: &str, ns: &str, name: &str) -> Result<HttpRoute> {
    if kind == "GRPCRoute" {
        let o = Api::<GrpcRoute>::namespaced(client.clone(), ns)
            .get(name)
            .await?;
        let mut v = serde_json::to_value(o)?;
        v["spec"] = json!({});
        return Ok(serde_json::from_value(v)?);
    }
    Ok(Api::<HttpRoute>::namespaced(client.clone(), ns)
        .get(name)
        .await?)
}

/// Waits on a watch until the object satisfies `cond`; fails after [`PATIENCE`].
async fn await_object<K>(
    api: Api<K>,
    key: Key,
    what: &str,
    logs: &Path,
    cond: impl Fn(&K) -> bool + Send + 'static,
) -> Result<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let waited = tokio::time::timeout(
        PATIENCE,
        await_condition(api, key.name, move |o: Option<&K>| o.is_some_and(&cond)),
    )
    .await;
    match waited {
        Ok(Ok(Some(o))) => Ok(o),
        Ok(Ok(None)) => bail!("{key} is gone while waiting for {what}"),
        Ok(Err(e)) => Err(e).with_context(|| format!("watching {key} for {what}")),
        Err(_) => bail!(
            "{key} did not get {what} within {PATIENCE:?} (replica logs: {})",
            logs.display()
        ),
    }
}

// === the demo ===

/// The route change made during a handover, and what its ResolvedRefs must turn to.
struct Change {
    route: Key,
    service: &'static str,
    resolved: &'static str,
}

/// One handover: the new leader, and its first status write when there was one.
struct Handover {
    leader: Leading,
    led_after: Duration,
    first_write: Option<Duration>,
}

struct Demo<'a> {
    out: &'a Out,
    client: Client,
    fleet: Fleet,
    lock: LockServer,
}

impl Demo<'_> {
    /// Which replica wrote the object's status, under which term.
    ///
    /// managedFields names the replicas that own fields of the status; the newest entry wins,
    /// and within its one-second resolution the newest "status written" line. That replica's
    /// last such line for the object carries the term (waited for: the line follows the write).
    async fn attribute(
        &self,
        key: Key,
        writers: &[(String, Option<Timestamp>)],
    ) -> Result<Option<(String, String)>> {
        let last_line = |name: &str| -> Option<SystemTime> {
            self.fleet.journal.read(|s| {
                since(&s, name, 0)
                    .rev()
                    .find(|l| key.written_by(l))
                    .map(|l| l.at)
            })
        };
        let Some((writer, _)) = writers
            .iter()
            .max_by_key(|(name, time)| (*time, last_line(name)))
        else {
            return Ok(None);
        };
        if !REPLICAS.contains(&writer.as_str()) {
            return Ok(Some((writer.clone(), "?".into())));
        }
        let line = self
            .fleet
            .wait_line(
                writer,
                0,
                &format!("a {:?} line for {key}", message::WRITTEN),
                |l| key.written_by(l),
            )
            .await?;
        Ok(Some((
            writer.clone(),
            term_of(&line).map_or_else(|| "?".into(), |t| t.to_string()),
        )))
    }

    async fn table(&self) -> Result<()> {
        struct Row {
            key: Key,
            lines: Vec<(String, Tone)>,
            writer: String,
            term: String,
        }
        let mut rows = Vec::new();
        for key in TABLE {
            let status = read_status(&self.client, key).await?;
            let (writer, term) = self
                .attribute(key, &status.writers)
                .await?
                .unwrap_or_else(|| ("-".into(), "-".into()));
            let lines = if status.lines.is_empty() {
                vec![("(no status)".to_string(), Tone::Dim)]
            } else {
                status.lines
            };
            rows.push(Row {
                key,
                lines,
                writer,
                term,
            });
        }
        let header = ["KIND", "OBJECT", "STATUS", "WRITTEN BY", "TERM"];
        let width = |i: usize, f: &dyn Fn(&Row) -> usize| {
            rows.iter().map(f).max().unwrap_or(0).max(header[i].len())
        };
        let w = [
            width(0, &|r| r.key.kind.len()),
            width(1, &|r| r.key.object().len()),
            width(2, &|r| {
                r.lines.iter().map(|(t, _)| t.len()).max().unwrap_or(0)
            }),
            width(3, &|r| r.writer.len()),
        ];
        let out = self.out;
        let cell =
            |text: &str, width: usize, tone: Tone| out.paint(tone, &format!("{text:<width$}"));
        println!(
            "{}  {}  {}  {}  {}",
            cell(header[0], w[0], Tone::Bold),
            cell(header[1], w[1], Tone::Bold),
            cell(header[2], w[2], Tone::Bold),
            cell(header[3], w[3], Tone::Bold),
            out.paint(Tone::Bold, header[4])
        );
        for row in &rows {
            for (i, (text, tone)) in row.lines.iter().enumerate() {
                let (kind, object, writer, term) = if i == 0 {
                    (
                        row.key.kind.to_string(),
                        row.key.object(),
                        row.writer.as_str(),
                        row.term.as_str(),
                    )
                } else {
                    (String::new(), String::new(), "", "")
                };
                let line = format!(
                    "{}  {}  {}  {}  {}",
                    cell(&kind, w[0], Tone::Plain),
                    cell(&object, w[1], Tone::Plain),
                    cell(text, w[2], *tone),
                    cell(writer, w[3], Tone::Plain),
                    term
                );
                println!("{}", line.trim_end());
            }
        }
        Ok(())
    }

    /// The first leader, with a word on Redis's restart guard when it holds everyone back.
    async fn first_leader(&self) -> Result<Leading> {
        let mut told = false;
        let redis_up = match &self.lock {
            LockServer::Redis { up_since, .. } => Some(*up_since),
            _ => None,
        };
        self.fleet
            .wait("a first leader", |s| {
                if let Some(l) = leader_in(s, &REPLICAS, 0) {
                    return Ok(Some(l));
                }
                // A follower that sees no holder on a fresh Redis is held back by the guard.
                let guarded = REPLICAS.iter().any(|n| {
                    since(s, n, 0)
                        .any(|l| matches!(l.event, Some(Event::Following { holder: None, .. })))
                });
                if let (Some(up), true, false) = (redis_up, guarded, told) {
                    told = true;
                    let left = (LEASE + Duration::from_secs(1)).saturating_sub(up.elapsed());
                    self.out.note(format!(
                        "a fresh Redis hands out no lock until it has been up for one lease \
                         (restart guard, docs/redis.md): nobody leads for about {}",
                        human(left)
                    ));
                }
                self.fleet.ensure_alive(s, &REPLICAS)?;
                Ok(None)
            })
            .await
    }

    /// Phase 1: who leads, and the statuses it wrote.
    async fn start(&self) -> Result<Leading> {
        let leader = self.first_leader().await?;
        let others: Vec<&str> = REPLICAS
            .iter()
            .copied()
            .filter(|n| *n != leader.replica)
            .collect();
        for name in &others {
            self.fleet
                .wait_line(name, 0, &format!("{:?}", message::FOLLOWING), |l| {
                    matches!(l.event, Some(Event::Following { .. }))
                })
                .await?;
        }
        self.out.step(format!(
            "{} leads with term {}; {} follow",
            leader.replica,
            leader.term,
            list(&others.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        ));
        for key in TABLE {
            has_status(&self.client, key, &self.fleet.dir).await?;
        }
        self.out.heading(format!(
            "Statuses, computed by every replica, written by the leader only ({CONTROLLER})"
        ));
        self.table().await?;
        Ok(leader)
    }

    /// The line of `leader`'s first status write after `mark`.
    ///
    /// [`message::FIRST_WRITE`] says so, but only while the new leader is still checking its
    /// cached statuses; a write after that check (a change that reached it later) has only its
    /// [`message::WRITTEN`] line. Both come from the same moment of the same write, the first
    /// just before the second, so waiting for the second finds the first if there is one.
    async fn first_write(&self, leader: &Leading, mark: usize) -> Result<Line> {
        let of_term = |l: &Line| term_of(l) == Some(leader.term);
        let write = |l: &Line| matches!(l.event, Some(Event::Written { .. })) && of_term(l);
        let written = self
            .fleet
            .wait_line(&leader.replica, mark, "a status write", write)
            .await?;
        let first = self.fleet.journal.read(|s| {
            since(&s, &leader.replica, mark)
                .find(|l| matches!(l.event, Some(Event::FirstWrite { .. })) && of_term(l))
                .or_else(|| since(&s, &leader.replica, mark).find(|l| write(l)))
                .cloned()
        });
        Ok(first.unwrap_or(written))
    }

    /// Stops or kills `leader`, changes `route`, and waits for the next leader to write it.
    async fn handover(
        &self,
        leader: &Leading,
        sig: Signal,
        among: &[&str],
        change: Change,
    ) -> Result<Handover> {
        let Change {
            route,
            service,
            resolved,
        } = change;
        let mark = self.fleet.mark();
        let sent = self.fleet.signal(&leader.replica, sig)?;
        let signame = if sig == Signal::SIGKILL {
            "SIGKILL"
        } else {
            "SIGTERM"
        };
        self.out.step(format!(
            "{signame} to {} (term {})",
            leader.replica, leader.term
        ));
        // At once, so the change lands while the lock changes hands.
        let generation = point_route(&self.client, route, service).await?;
        self.out.step(format!(
            "{route} now points at {service}:80, so its ResolvedRefs must turn {resolved}"
        ));
        let next = self.fleet.wait_leader(among, mark).await?;
        let led_after = next.at.duration_since(sent).unwrap_or_default();
        self.out.step(format!(
            "{} leads with term {}, {} after the {signame}",
            next.replica,
            next.term,
            human(led_after)
        ));
        // The writer's own account of its new leadership: how many statuses it holds.
        let what = format!("{:?}", message::SWEEP_STARTED);
        let sweep_start = self
            .fleet
            .wait_line(
                &next.replica,
                mark,
                &what,
                |l| matches!(l.event, Some(Event::SweepStarted { term, .. }) if term == next.term),
            )
            .await?;
        let cached = match sweep_start.event {
            Some(Event::SweepStarted { statuses, .. }) => statuses,
            _ => 0,
        };
        let api = Api::<HttpRoute>::namespaced(self.client.clone(), route.namespace.unwrap_or(NS));
        let what = format!("ResolvedRefs {resolved} from a replica");
        let r = await_object(api, route, &what, &self.fleet.dir, move |r| {
            route_says(r, "ResolvedRefs", resolved, generation)
        })
        .await?;
        let writer = self.attribute(route, &status_writers(&r.metadata)).await?;
        let mut first_write = None;
        match writer {
            Some((w, _)) if w == next.replica => {
                let first = self.first_write(&next, mark).await?;
                let after = first.at.duration_since(sent).unwrap_or_default();
                first_write = Some(after);
                self.out.step(format!(
                    "{}'s first status write ({}): {} after the {signame}",
                    next.replica,
                    written_object(&first),
                    human(after)
                ));
                // Only a leadership that began with cached statuses checks them all and says so.
                if cached > 0 {
                    let what = format!("{:?}", message::SWEEP_DONE);
                    let done = self
                        .fleet
                        .wait_line(&next.replica, mark, &what, |l| {
                            matches!(l.event, Some(Event::SweepDone { term, .. }) if term == next.term)
                        })
                        .await?;
                    if let Some(Event::SweepDone {
                        written,
                        unchanged,
                        other,
                        took_ms,
                        ..
                    }) = done.event
                    {
                        let took = Duration::try_from_secs_f64(took_ms / 1e3).unwrap_or_default();
                        self.out.step(format!(
                            "{} checked its {cached} cached statuses in {}: {written} written, \
                             {unchanged} unchanged, {other} other",
                            next.replica,
                            human(took),
                        ));
                    }
                }
            }
            Some((w, term)) if w == leader.replica => self.out.note(format!(
                "{route} was written by {w} under term {term}, just before it stepped down"
            )),
            Some((w, term)) => self
                .out
                .note(format!("{route} names {w} (term {term}) as its writer")),
            None => self
                .out
                .note(format!("no replica is named as the writer of {route}")),
        }
        Ok(Handover {
            leader: next,
            led_after,
            first_write,
        })
    }
}

async fn run(
    out: &Out,
    bin: &Path,
    backend: Backend,
    kubeconfig: Option<&Path>,
    dir: &Path,
) -> Result<()> {
    println!(
        "{}",
        out.paint(
            Tone::Bold,
            &format!(
                "gateway-leader demo: 3 replicas, lock on {}, lease {LEASE_DURATION}, \
                 renew deadline {RENEW_DEADLINE}, retry {RETRY_PERIOD}",
                backend.name()
            )
        )
    );
    let server = cluster::open(out, kubeconfig).await?;
    cluster::install_crds(out, &server).await?;
    let client = server.admin_client();
    if server.is_external() {
        // What an earlier run that was cut short left.
        cluster::remove_sample(&client, true).await?;
    }
    apply_sample(&client).await?;
    for line in [
        format!("sample: {CLASS} (controllerName {CONTROLLER})"),
        format!("        {GATEWAY} (listener http, port 80, routes from all namespaces)"),
        format!("        {GATEWAY} (listener https, port 443, Secret {NS}/{TLS_SECRET} not created yet)"),
        format!("        Service {NS}/web (port 80)"),
        format!("        {VALID} -> web:80"),
        format!("        {MISSING} -> {MISSING_SERVICE}:80 (no such Service)"),
        format!("        {CROSS} -> {NS}/web:80 (no ReferenceGrant)"),
    ] {
        out.step(line);
    }
    let lock = LockServer::start(backend).await?;
    out.step(format!("the lock: {}", lock.describe()));
    let kubeconfig = server.kubeconfig_path().display().to_string();
    let mut args = vec!["--lock-backend".to_string(), lock.backend().to_string()];
    args.extend(["--kubeconfig".to_string(), kubeconfig]);
    args.extend(lock.flags());
    args.extend(
        [
            "--lease-duration",
            LEASE_DURATION,
            "--renew-deadline",
            RENEW_DEADLINE,
            "--retry-period",
            RETRY_PERIOD,
        ]
        .map(String::from),
    );
    let fleet = Fleet::start(bin, &args, dir)?;
    out.step(format!(
        "started {}; their logs: {}",
        list(&REPLICAS.map(String::from)),
        dir.display()
    ));
    let demo = Demo {
        out,
        client,
        fleet,
        lock,
    };
    let first = demo.start().await?;

    out.heading(format!(
        "The missing certificate: creating Secret {NS}/{TLS_SECRET} (self-signed)"
    ));
    create_tls_secret(&demo.client, dir).await?;
    out.step("listener https: ResolvedRefs=True, Programmed=True once its Secret exists");
    demo.table().await?;

    out.heading("Graceful stop: the leader releases the lock, a follower takes over at once");
    let rest: Vec<&str> = REPLICAS
        .iter()
        .copied()
        .filter(|n| *n != first.replica)
        .collect();
    let graceful = demo
        .handover(
            &first,
            Signal::SIGTERM,
            &rest,
            Change {
                route: MISSING,
                service: "web",
                resolved: "True",
            },
        )
        .await?;
    println!();
    demo.table().await?;

    out.heading(format!(
        "Crash: the last replica must wait for the lease ({LEASE_DURATION}) to run out"
    ));
    let last: Vec<&str> = rest
        .iter()
        .copied()
        .filter(|n| *n != graceful.leader.replica)
        .collect();
    let crash = demo
        .handover(
            &graceful.leader,
            Signal::SIGKILL,
            &last,
            Change {
                route: VALID,
                service: MISSING_SERVICE,
                resolved: "False",
            },
        )
        .await?;
    println!();
    demo.table().await?;

    // The time to the first status write when both handovers had one, else to the new leader.
    let (what, term_ended, crashed) = match (graceful.first_write, crash.first_write) {
        (Some(a), Some(b)) => ("first write", a, b),
        _ => ("new leader", graceful.led_after, crash.led_after),
    };
    println!();
    out.step(format!(
        "summary: terms {} -> {} -> {}; {what} {} after SIGTERM, {} after SIGKILL \
         (lease {LEASE_DURATION})",
        first.term,
        graceful.leader.term,
        crash.leader.term,
        human(term_ended),
        human(crashed),
    ));
    Ok(())
}

/// Removes the sample from the existing cluster of `kubeconfig`.
async fn remove_from(kubeconfig: &Path) -> Result<()> {
    let server = KubeApiServer::connect(kubeconfig).await?;
    cluster::remove_sample(&server.admin_client(), false).await
}

/// Resolves on Ctrl-C or SIGTERM; the children go when the demo's future is dropped.
async fn stop_signal() -> &'static str {
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without handlers the default action ends the demo, and its children with the group.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
    }
}

/// The replicas' log files: removed after a successful run, kept (and named) otherwise.
struct LogDir(Option<TempDir>);

impl LogDir {
    fn path(&self) -> &Path {
        self.0
            .as_ref()
            .map(TempDir::path)
            .expect("the log dir lives until finish or drop")
    }

    fn finish(mut self) {
        if let Some(d) = self.0.take() {
            let _ = d.close();
        }
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            eprintln!("replica logs kept in {}", d.keep().display());
        }
    }
}

/// What the command line asks for.
struct Args {
    bin: PathBuf,
    backend: Backend,
    /// An existing cluster's kubeconfig, instead of a local apiserver.
    kubeconfig: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut rest: Vec<OsString> = Vec::new();
    let mut kubeconfig = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        if a == "--kubeconfig" {
            let path = args.next().ok_or("--kubeconfig needs a path")?;
            kubeconfig = Some(PathBuf::from(path));
        } else {
            rest.push(a);
        }
    }
    let (bin, backend) = match rest.as_slice() {
        [bin] => (bin, "kubernetes".to_string()),
        [bin, b] => (bin, b.to_string_lossy().into_owned()),
        _ => return Err("expected the binary's path and at most a backend".into()),
    };
    let backend = Backend::parse(&backend).ok_or_else(|| format!("unknown backend {backend:?}"))?;
    let bin = PathBuf::from(bin);
    if !bin.is_file() {
        return Err(format!("{} is not a file", bin.display()));
    }
    if let Some(k) = &kubeconfig {
        if !k.is_file() {
            return Err(format!("--kubeconfig {}: no such file", k.display()));
        }
    }
    Ok(Args {
        bin,
        backend,
        kubeconfig,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let dir = match tempfile::Builder::new()
        .prefix("gateway-leader-demo-")
        .tempdir()
    {
        Ok(d) => LogDir(Some(d)),
        Err(e) => {
            eprintln!("demo failed: creating a temporary dir: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("demo failed: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = Out::new();
    let kubeconfig = args.kubeconfig.as_deref();
    let result = runtime.block_on(async {
        let result = tokio::select! {
            biased;
            sig = stop_signal() => Err(anyhow!("interrupted ({sig})")),
            r = run(&out, &args.bin, args.backend, kubeconfig, dir.path()) => r,
        };
        // The replicas are gone with `run`'s future; on someone's cluster the sample goes too.
        if let Some(path) = kubeconfig {
            if let Err(e) = remove_from(path).await {
                eprintln!("the demo's sample is still on the cluster: {e:#}");
            }
        }
        result
    });
    // The replicas and servers went with the demo's future; their readers go with the runtime.
    drop(runtime);
    match result {
        Ok(()) => {
            dir.finish();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("demo failed: {e:#}");
            drop(dir);
            ExitCode::FAILURE
        }
    }
}
