//! `gateway-leader-bench real-controllers`: real Gateway API controllers (Contour, Envoy
//! Gateway; built from their Go modules, run with no Envoy) as two replicas, in three modes side
//! by side, judged from the apiserver (docs/benchmarks.md, "Real controllers, three ways").
//!
//! Modes: `native` (the controller's own election on the apiserver, the anchor), `fenced` (its
//! election off, each replica behind its own `gateway-leader proxy`), `driven` (its election on,
//! answered by the proxy: `--proxy-election-lease`, the controller's retry period at
//! `--controller-retry`).
//!
//! Each round starts both replicas afresh in a namespace of its own (one service account each,
//! so that the apiserver's audit log tells them apart; Envoy Gateway's in a pod network of its
//! own, `testkit::pod`), waits until every status is right, then:
//! - `graceful`: changes a route and sends SIGTERM to the leading replica (its controller and
//!   its proxy, as the kubelet stops a pod); the figure is from the signal until the route's
//!   status is right on the server;
//! - `crash`: SIGKILL to the leading replica, then changes the route; the figures are from the
//!   kill until the other controller leads, and from then until the status is right (`fenced`:
//!   whether it ever is, within a lease and 30 s);
//! - `freeze`: SIGSTOP to the whole leading replica; once the other leads, changes the route;
//!   thaws the frozen one once the change is right; the figure is how many writes (statuses and
//!   the controller's other writes) the apiserver took from the thawed replica afterwards;
//! - `churn`: 40 changes of the route in 4 s, then a graceful stop of the leading replica; the
//!   figures are how far the follower's rebuilds (Contour's `contour_dagrebuild_total`, Envoy
//!   Gateway's `xds_snapshot_create_total`) fell behind the leader's during the churn, and the
//!   stale statuses (for an older generation than the route had) and rewrites the server took
//!   after the stop, from a watch of the route.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use testkit::contour::Contour;
use testkit::envoy_gateway::EnvoyGateway;
use testkit::kube::KubeApiServer;
use testkit::pod::{PodNetwork, Relay};

use crate::args::MAX_ROUNDS;
use crate::controller_handover::Process;
use crate::stats::Summary;
use crate::EXIT_USAGE;

/// How long any one step of a round may take before the round fails.
const PATIENCE: Duration = Duration::from_secs(120);
/// The proxies' Lease in each round's namespace.
const PROXY_LEASE: &str = "proxies";
/// Contour's election Lease (its own, or the one the proxy answers).
const CONTOUR_LEASE: &str = "contour";

/// `gateway-leader-bench real-controllers`'s flags.
#[derive(Debug, Args)]
pub struct RealControllersArgs {
    /// Which controllers, comma-separated: contour, envoy-gateway.
    #[arg(long, default_value = "contour,envoy-gateway", value_name = "LIST")]
    pub controllers: String,
    /// Which modes, comma-separated: native, fenced, driven.
    #[arg(long, default_value = "native,fenced,driven", value_name = "LIST")]
    pub modes: String,
    /// Which scenarios, comma-separated: graceful, crash, freeze, churn.
    #[arg(
        long,
        default_value = "graceful,crash,freeze,churn",
        value_name = "LIST"
    )]
    pub scenarios: String,
    /// Rounds per controller, mode and scenario.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub rounds: usize,
    /// The lease duration of our lock and of the controller's election.
    #[arg(long, default_value = "15s", value_name = "DURATION")]
    pub lease_duration: String,
    /// Their renew deadline.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub renew_deadline: String,
    /// Their retry period (the controller's in native mode).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub retry_period: String,
    /// The controller's retry period in driven mode (docs/sidecar.md recommends 500 ms).
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub controller_retry: String,
    /// The `gateway-leader` binary (default: the one beside this executable).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Where every proxy's lines are kept (`logs/real-controllers/NS-proxy-X.log`).
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
}

/// A controller under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Contour,
    EnvoyGateway,
}

/// How its replicas elect their writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Native,
    Fenced,
    Driven,
}

/// What a round does to the leading replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Graceful,
    Crash,
    Freeze,
    Churn,
}

/// Parses a comma-separated list of `names`' keys.
fn list<T: Copy>(flag: &str, s: &str, names: &[(&str, T)]) -> Result<Vec<T>, String> {
    s.split(',')
        .map(|x| {
            let x = x.trim();
            names
                .iter()
                .find(|(n, _)| *n == x)
                .map(|(_, v)| *v)
                .ok_or_else(|| {
                    let accepted: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
                    format!("{flag}: {x:?}; accepted: {}", accepted.join(", "))
                })
        })
        .collect()
}

impl Kind {
    const NAMES: [(&'static str, Kind); 2] = [
        ("contour", Kind::Contour),
        ("envoy-gateway", Kind::EnvoyGateway),
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Contour => "contour",
            Kind::EnvoyGateway => "envoy-gateway",
        }
    }
}

impl Mode {
    const NAMES: [(&'static str, Mode); 3] = [
        ("native", Mode::Native),
        ("fenced", Mode::Fenced),
        ("driven", Mode::Driven),
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Fenced => "fenced",
            Mode::Driven => "driven",
        }
    }
}

impl Scenario {
    const NAMES: [(&'static str, Scenario); 4] = [
        ("graceful", Scenario::Graceful),
        ("crash", Scenario::Crash),
        ("freeze", Scenario::Freeze),
        ("churn", Scenario::Churn),
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Graceful => "graceful",
            Scenario::Crash => "crash",
            Scenario::Freeze => "freeze",
            Scenario::Churn => "churn",
        }
    }
}

/// The timings, parsed.
#[derive(Debug, Clone, Copy)]
struct Timing {
    lease: Duration,
    renew: Duration,
    retry: Duration,
    controller_retry: Duration,
}

/// Everything the flags decided.
struct Plan {
    binary: PathBuf,
    kinds: Vec<Kind>,
    modes: Vec<Mode>,
    scenarios: Vec<Scenario>,
    rounds: usize,
    timing: Timing,
    logs: PathBuf,
}

/// Runs the subcommand; 0, 1 (a round failed) or 2 (bad input, nothing started).
pub fn main(args: RealControllersArgs) -> ExitCode {
    let plan = match check(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gateway-leader-bench real-controllers: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    crate::on_two_workers("real-controllers", run(plan))
}

fn check(args: &RealControllersArgs) -> Result<Plan, String> {
    let kinds = list("--controllers", &args.controllers, &Kind::NAMES)?;
    let modes = list("--modes", &args.modes, &Mode::NAMES)?;
    let scenarios = list("--scenarios", &args.scenarios, &Scenario::NAMES)?;
    if !(1..=MAX_ROUNDS).contains(&args.rounds) {
        return Err(format!(
            "--rounds {}: accepted: 1 to {MAX_ROUNDS}",
            args.rounds
        ));
    }
    let mut d = Vec::new();
    for (flag, v) in [
        ("--lease-duration", &args.lease_duration),
        ("--renew-deadline", &args.renew_deadline),
        ("--retry-period", &args.retry_period),
        ("--controller-retry", &args.controller_retry),
    ] {
        d.push(gateway_leader::config::parse_duration(v).map_err(|e| format!("{flag} {v}: {e}"))?);
    }
    leader_lock::Timing::new(d[0], d[1], d[2]).map_err(|e| e.to_string())?;
    leader_lock::Timing::new(d[0], d[1], d[3]).map_err(|e| format!("--controller-retry: {e}"))?;
    let binary = match &args.binary {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find my own executable: {e}"))?
            .with_file_name("gateway-leader"),
    };
    if !binary.is_file() {
        return Err(format!(
            "--binary {}: not a file; build it with `cargo build --release -p gateway-leader` or \
             name it with --binary",
            binary.display()
        ));
    }
    Ok(Plan {
        binary,
        kinds,
        modes,
        scenarios,
        rounds: args.rounds,
        timing: Timing {
            lease: d[0],
            renew: d[1],
            retry: d[2],
            controller_retry: d[3],
        },
        logs: args.out.join("logs").join("real-controllers"),
    })
}

/// One row of the report: what every round of one controller, mode and scenario measured.
struct Row {
    kind: Kind,
    mode: Mode,
    scenario: Scenario,
    /// Milliseconds from the signal until the other controller led (none in fenced mode).
    led: Vec<f64>,
    /// Milliseconds until the route's status was right: from the signal (graceful), from the
    /// other controller leading (crash; from the kill in fenced mode).
    correct: Vec<f64>,
    /// Rounds whose change was never right within the limit.
    lost: usize,
    /// Writes the apiserver took from the thawed replica (freeze).
    landed: Vec<f64>,
    /// Churn: how far the follower's rebuilds fell behind, per round.
    behind: Vec<f64>,
    /// Churn: stale statuses and rewrites after the handover, per round.
    stale: Vec<(usize, usize)>,
}

async fn run(plan: Plan) -> Result<()> {
    std::fs::create_dir_all(&plan.logs)
        .with_context(|| format!("creating {}", plan.logs.display()))?;
    let server = KubeApiServer::start_local_with(testkit::kube::Options {
        audit: true,
        ..testkit::kube::Options::default()
    })
    .await
    .context("starting kube-apiserver with an audit log")?;
    server.install_gateway_api().await?;
    if plan.kinds.contains(&Kind::Contour) {
        testkit::contour::install_crds(&server.admin_client()).await?;
    }
    if plan.kinds.contains(&Kind::EnvoyGateway) {
        testkit::envoy_gateway::install_crds(&server.admin_client()).await?;
    }
    let dir = tempfile::tempdir().context("a directory for the kubeconfigs")?;
    let mut rows = Vec::new();
    let mut n = 0;
    for &kind in &plan.kinds {
        for &mode in &plan.modes {
            for &scenario in &plan.scenarios {
                let mut row = Row {
                    kind,
                    mode,
                    scenario,
                    led: Vec::new(),
                    correct: Vec::new(),
                    lost: 0,
                    landed: Vec::new(),
                    behind: Vec::new(),
                    stale: Vec::new(),
                };
                for round in 0..plan.rounds {
                    n += 1;
                    let scene = Scene::new(&server, &plan, dir.path(), kind, mode, n).await?;
                    let what = format!(
                        "{} {} {} round {}",
                        kind.name(),
                        mode.name(),
                        scenario.name(),
                        round + 1
                    );
                    let out = scene.round(scenario).await.with_context(|| what.clone())?;
                    eprintln!("{what}: {out:?}");
                    if let Some(ms) = out.led {
                        row.led.push(ms);
                    }
                    match out.correct {
                        Some(ms) => row.correct.push(ms),
                        None if matches!(scenario, Scenario::Graceful | Scenario::Crash) => {
                            row.lost += 1
                        }
                        None => {}
                    }
                    row.behind.extend(out.behind);
                    row.stale.extend(out.stale);
                    if let Some(w) = out.landed {
                        row.landed.push(w as f64);
                    }
                }
                rows.push(row);
            }
        }
    }
    report(&plan, &rows);
    Ok(())
}

/// p50 / max of `samples`, or "-".
fn cell(samples: &[f64]) -> String {
    match Summary::of(samples) {
        Some(s) => format!("{:.0} / {:.0}", s.p50, s.max),
        None => "-".to_string(),
    }
}

fn report(plan: &Plan, rows: &[Row]) {
    let ms = |d: Duration| d.as_millis();
    println!(
        "Real controllers, {} rounds each; lease {} ms / renew {} ms / retry {} ms (driven: the \
         controller's retry {} ms). Times in ms, p50 / max.",
        plan.rounds,
        ms(plan.timing.lease),
        ms(plan.timing.renew),
        ms(plan.timing.retry),
        ms(plan.timing.controller_retry)
    );
    println!(
        "| controller | mode | scenario | the other leads | the change right | never right | \
         writes after thaw (total) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows.iter().filter(|r| r.scenario != Scenario::Churn) {
        let landed: f64 = r.landed.iter().sum();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.kind.name(),
            r.mode.name(),
            r.scenario.name(),
            cell(&r.led),
            cell(&r.correct),
            if r.scenario == Scenario::Freeze {
                "-".to_string()
            } else {
                format!("{} of {}", r.lost, r.lost + r.correct.len())
            },
            if r.scenario == Scenario::Freeze {
                format!("{landed:.0} in {} rounds", r.landed.len())
            } else {
                "-".to_string()
            },
        );
    }
    let churn: Vec<&Row> = rows
        .iter()
        .filter(|r| r.scenario == Scenario::Churn)
        .collect();
    if churn.is_empty() {
        return;
    }
    println!();
    println!(
        "Churn (40 changes of one route in 4 s), then a graceful stop of the leading replica:"
    );
    println!(
        "| controller | mode | the follower's rebuilds behind the leader's, max | stale \
         statuses after the stop, total | rewrites after the stop, max |"
    );
    println!("|---|---|---|---|---|");
    for r in churn {
        let behind = r.behind.iter().copied().fold(f64::MIN, f64::max);
        println!(
            "| {} | {} | {} | {} in {} rounds | {} |",
            r.kind.name(),
            r.mode.name(),
            if r.behind.is_empty() {
                "-".to_string()
            } else {
                format!("{behind:.0}")
            },
            r.stale.iter().map(|s| s.0).sum::<usize>(),
            r.stale.len(),
            r.stale.iter().map(|s| s.1).max().unwrap_or(0),
        );
    }
}

/// What one round measured.
#[derive(Debug, Default)]
struct Outcome {
    led: Option<f64>,
    correct: Option<f64>,
    landed: Option<usize>,
    /// What those writes were.
    landed_what: Vec<String>,
    /// Churn: the leader's rebuilds less the follower's.
    behind: Option<f64>,
    /// Churn: stale statuses and rewrites after the handover.
    stale: Option<(usize, usize)>,
}

/// One round's namespace, objects and replicas.
struct Scene<'a> {
    server: &'a KubeApiServer,
    plan: &'a Plan,
    dir: &'a Path,
    kind: Kind,
    mode: Mode,
    ns: String,
    admin: Client,
    pods: Vec<Pod>,
}

/// One replica: its controller, its proxy unless native, and its pod network (Envoy Gateway).
/// Fields drop in order: processes before the relay and network they use.
struct Pod {
    user: String,
    controller: Controller,
    proxy: Option<Process>,
    _relay: Option<Relay>,
    _net: Option<PodNetwork>,
}

enum Controller {
    Contour(Contour),
    EnvoyGateway(EnvoyGateway),
}

impl Controller {
    fn pid(&self) -> Option<u32> {
        match self {
            Controller::Contour(c) => c.pid(),
            Controller::EnvoyGateway(e) => e.pid(),
        }
    }

    /// Its rebuilds of what it serves so far, leader or not.
    async fn rebuilds(&self) -> Result<f64> {
        match self {
            Controller::Contour(c) => c.dag_rebuilds().await,
            Controller::EnvoyGateway(e) => e.snapshots().await,
        }
    }

    async fn leads(&self) -> bool {
        match self {
            Controller::Contour(c) => c.leads().await.unwrap_or(false),
            Controller::EnvoyGateway(e) => e.leads().await.unwrap_or(false),
        }
    }
}

impl Pod {
    /// Sends `s` to the whole replica: its controller and its proxy.
    fn signal(&self, s: Signal) {
        let mut pids: Vec<u32> = self.controller.pid().into_iter().collect();
        if let Some(p) = &self.proxy {
            pids.push(p.id());
        }
        for pid in pids {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = kill(Pid::from_raw(pid), s);
            }
        }
    }
}

impl<'a> Scene<'a> {
    /// Namespace `rc-N` with a GatewayClass of the scene's own, a Gateway, a Service `web` and
    /// route `moved` to it, one service account per replica bound to the controller's RBAC
    /// (and the proxies' Lease rights), and both replicas running, every status right.
    async fn new(
        server: &'a KubeApiServer,
        plan: &'a Plan,
        dir: &'a Path,
        kind: Kind,
        mode: Mode,
        n: usize,
    ) -> Result<Scene<'a>> {
        let ns = format!("rc-{n}");
        server.create_namespace(&ns).await?;
        let admin = server.admin_client();
        let mut scene = Scene {
            server,
            plan,
            dir,
            kind,
            mode,
            ns,
            admin,
            pods: Vec::new(),
        };
        scene.objects().await?;
        let mut manifests = vec![match kind {
            Kind::Contour => testkit::contour::rbac_manifest()?,
            Kind::EnvoyGateway => testkit::envoy_gateway::rbac_manifest()?,
        }];
        if mode != Mode::Native {
            manifests.push(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../deploy/base/rbac-leader-election.yaml"),
            );
        }
        for file in &manifests {
            testkit::rbac::bind_manifest_to(server, file, &scene.ns, &["a", "b"])
                .await
                .with_context(|| format!("binding {}", file.display()))?;
        }
        for x in ["a", "b"] {
            let pod = scene.start(x).await?;
            scene.pods.push(pod);
            if x == "a" {
                scene.wait_leads(0).await?;
            }
        }
        scene.wait_right("web", PATIENCE).await?;
        if !scene.wait_leads_now(0).await {
            bail!("replica a does not lead once both run");
        }
        Ok(scene)
    }

    fn controller_name(&self) -> String {
        match self.kind {
            Kind::Contour => testkit::contour::CONTROLLER_NAME.to_string(),
            Kind::EnvoyGateway => format!("gateway.envoyproxy.io/{}", self.ns),
        }
    }

    /// The GatewayClass, Gateway, Service and route.
    async fn objects(&self) -> Result<()> {
        let ns = &self.ns;
        let objects = [
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": ns}, "spec": {"controllerName": self.controller_name()}}),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "gw", "namespace": ns},
                "spec": {"gatewayClassName": ns,
                    "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": ns},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "moved", "namespace": ns},
                "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["moved.example.com"],
                    "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
        ];
        let [class, gateway, service, route] = objects;
        let pp = PostParams::default();
        let admin = &self.admin;
        Api::<GatewayClass>::all(admin.clone())
            .create(&pp, &serde_json::from_value(class)?)
            .await?;
        Api::<Gateway>::namespaced(admin.clone(), ns)
            .create(&pp, &serde_json::from_value(gateway)?)
            .await?;
        Api::<Service>::namespaced(admin.clone(), ns)
            .create(&pp, &serde_json::from_value(service)?)
            .await?;
        self.routes()
            .create(&pp, &serde_json::from_value(route)?)
            .await?;
        Ok(())
    }

    /// A kubeconfig for the apiserver with service account `sa`'s token, as reached from
    /// `relay` when given (a pod network's).
    async fn kubeconfig(&self, sa: &str, relay: Option<&Relay>) -> Result<PathBuf> {
        let token = self.server.service_account_token(&self.ns, sa).await?;
        let path = self.dir.join(format!("{}-{sa}.kubeconfig", self.ns));
        self.server.write_token_kubeconfig(&token, &path)?;
        if let Some(relay) = relay {
            let mut kc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
            for c in kc["clusters"].as_array_mut().into_iter().flatten() {
                c["cluster"]["server"] = json!(format!("https://{}", relay.addr()));
                c["cluster"]["tls-server-name"] = json!("kubernetes");
            }
            std::fs::write(&path, serde_json::to_vec_pretty(&kc)?)?;
        }
        Ok(path)
    }

    /// Replica `x`: its network (Envoy Gateway), its proxy, its controller.
    async fn start(&self, x: &str) -> Result<Pod> {
        let t = self.plan.timing;
        let (net, relay) = match self.kind {
            Kind::Contour => (None, None),
            Kind::EnvoyGateway => {
                let net = PodNetwork::new()?;
                let to = self
                    .server
                    .local_addr()
                    .ok_or_else(|| anyhow!("not a local apiserver"))?;
                let relay = Relay::start(net.host_ip(), to)?;
                (Some(net), Some(relay))
            }
        };
        let kubeconfig = self.kubeconfig(x, relay.as_ref()).await?;
        let election_lease = match self.kind {
            Kind::Contour => CONTOUR_LEASE.to_string(),
            Kind::EnvoyGateway => testkit::envoy_gateway::LEASE_NAME.to_string(),
        };
        let (proxy, controller_kubeconfig) = if self.mode == Mode::Native {
            (None, kubeconfig.clone())
        } else {
            let port = testkit::process::free_port()?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let go = |d: Duration| format!("{}ms", d.as_millis());
            let health = net
                .as_ref()
                .map_or("127.0.0.1:0".to_string(), |n| format!("{}:0", n.pod_ip()));
            let mut args: Vec<String> = vec!["proxy".into()];
            for (flag, value) in [
                ("--lock-backend", "kubernetes".to_string()),
                ("--kubeconfig", kubeconfig.display().to_string()),
                ("--leader-election-namespace", self.ns.clone()),
                ("--leader-election-lock-name", PROXY_LEASE.to_string()),
                ("--leader-election-identity", format!("proxy-{x}")),
                ("--lease-duration", go(t.lease)),
                ("--renew-deadline", go(t.renew)),
                ("--retry-period", go(t.retry)),
                ("--proxy-listen", addr.to_string()),
                ("--health-addr", health),
                ("--log-format", "json".to_string()),
            ] {
                args.extend([flag.to_string(), value]);
            }
            if self.mode == Mode::Driven {
                args.extend([
                    "--proxy-election-lease".to_string(),
                    format!("{}/{election_lease}", self.ns),
                ]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut cmd = match &net {
                Some(net) => net.command(&self.plan.binary, &args, &[]),
                None => {
                    let mut c = Command::new(&self.plan.binary);
                    c.args(&args);
                    c
                }
            };
            cmd.env("RUST_LOG", "info");
            testkit::replica::clear_settings(&mut cmd);
            let log = self.plan.logs.join(format!("{}-proxy-{x}.log", self.ns));
            let mut proxy = Process::spawn(cmd, true, &log)?;
            proxy
                .wait(PATIENCE, |v| {
                    v["message"] == gateway_leader_log::message::PROXY_SERVING
                })
                .with_context(|| format!("proxy-{x} serving"))?;
            let path = self.dir.join(format!("{}-{x}-proxy.kubeconfig", self.ns));
            std::fs::write(&path, gateway_leader::proxy::kubeconfig(addr))?;
            if x == "a" {
                self.wait_holder(&format!("proxy-{x}_")).await?;
            }
            (Some(proxy), path)
        };
        let retry = match self.mode {
            Mode::Driven => t.controller_retry,
            _ => t.retry,
        };
        let elects = self.mode != Mode::Fenced;
        let controller = match self.kind {
            Kind::Contour => {
                let mut o = testkit::contour::Options::new(&self.ns, "gw")
                    .with_watch_namespaces(&[&self.ns]);
                if elects {
                    o = o.with_election(
                        testkit::contour::Election::new(&self.ns, CONTOUR_LEASE)
                            .with_timing(t.lease, t.renew, retry),
                    );
                }
                Controller::Contour(
                    Contour::start(&format!("{}-{x}", self.ns), &controller_kubeconfig, &o).await?,
                )
            }
            Kind::EnvoyGateway => {
                let mut o = testkit::envoy_gateway::Options::new(&self.ns, &self.controller_name())
                    .with_watch_namespaces(&[&self.ns]);
                if elects {
                    o = o.with_election(t.lease, t.renew, retry);
                }
                let net = net.as_ref().ok_or_else(|| anyhow!("no pod network"))?;
                Controller::EnvoyGateway(
                    EnvoyGateway::start(
                        &format!("{}-{x}", self.ns),
                        net,
                        &controller_kubeconfig,
                        &o,
                    )
                    .await?,
                )
            }
        };
        Ok(Pod {
            user: format!("system:serviceaccount:{}:{x}", self.ns),
            controller,
            proxy,
            _relay: relay,
            _net: net,
        })
    }

    /// Whether replica `i` leads now: its controller (native, driven) or its proxy (fenced).
    async fn wait_leads_now(&self, i: usize) -> bool {
        match self.mode {
            Mode::Fenced => self
                .holder()
                .await
                .starts_with(&format!("proxy-{}_", ["a", "b"][i])),
            _ => self.pods[i].controller.leads().await,
        }
    }

    /// Waits until replica `i` leads; the time it took.
    async fn wait_leads(&self, i: usize) -> Result<Duration> {
        let start = Instant::now();
        while !self.wait_leads_now(i).await {
            if start.elapsed() > PATIENCE {
                bail!("replica {i} did not lead within {PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(start.elapsed())
    }

    /// Both controllers' rebuilds so far: a's, b's.
    async fn rebuild_counts(&self) -> Result<(f64, f64)> {
        Ok((
            self.pods[0].controller.rebuilds().await?,
            self.pods[1].controller.rebuilds().await?,
        ))
    }

    /// The proxies' Lease holder on the server.
    async fn holder(&self) -> String {
        Api::<Lease>::namespaced(self.admin.clone(), &self.ns)
            .get_opt(PROXY_LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default()
    }

    async fn wait_holder(&self, prefix: &str) -> Result<()> {
        let start = Instant::now();
        while !self.holder().await.starts_with(prefix) {
            if start.elapsed() > PATIENCE {
                bail!("the proxies' Lease not held by {prefix}* within {PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    fn routes(&self) -> Api<HttpRoute> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Points route `moved` at Service `to`.
    async fn move_route(&self, to: &str) -> Result<()> {
        let change = json!({"spec": {"rules": [{"backendRefs": [{"name": to, "port": 80}]}]}});
        self.routes()
            .patch("moved", &PatchParams::default(), &Patch::Merge(&change))
            .await?;
        Ok(())
    }

    /// Waits (on a watch) until route `moved`'s status, by the scene's controller, says its
    /// backend `to` resolves or not, at its generation; false after `limit`.
    async fn wait_right(&self, to: &str, limit: Duration) -> Result<bool> {
        let controller = self.controller_name();
        let resolved = to == "web";
        let cond =
            move |r: Option<&HttpRoute>| r.is_some_and(|r| route_right(r, &controller, resolved));
        match tokio::time::timeout(limit, await_condition(self.routes(), "moved", cond)).await {
            Ok(r) => r.map(|_| true).context("watching route moved"),
            Err(_) => Ok(false),
        }
    }

    /// The writes (statuses and others, as `verb resource[/subresource]/name`) the apiserver
    /// took from `user` in the namespace, but for Leases and Events.
    fn writes_from(&self, user: &str) -> Result<Vec<String>> {
        Ok(self
            .server
            .audit_events()?
            .iter()
            .filter(|e| {
                e["stage"] == "ResponseComplete"
                    && e["user"]["username"] == user
                    && e["objectRef"]["namespace"] == self.ns.as_str()
                    && e["objectRef"]["resource"] != "leases"
                    && matches!(
                        e["verb"].as_str(),
                        Some("create" | "update" | "patch" | "delete")
                    )
                    && e["objectRef"]["resource"] != "events"
                    && e["responseStatus"]["code"].as_i64().unwrap_or(500) < 300
            })
            .map(|e| {
                let o = &e["objectRef"];
                let sub = o["subresource"]
                    .as_str()
                    .map_or(String::new(), |s| format!("/{s}"));
                format!(
                    "{} {}{sub}/{}",
                    e["verb"].as_str().unwrap_or_default(),
                    o["resource"].as_str().unwrap_or_default(),
                    o["name"].as_str().unwrap_or_default()
                )
            })
            .collect())
    }

    async fn round(mut self, scenario: Scenario) -> Result<Outcome> {
        let mut out = Outcome::default();
        let lost_limit = self.plan.timing.lease + Duration::from_secs(30);
        match scenario {
            Scenario::Graceful => {
                self.move_route("nowhere").await?;
                let start = Instant::now();
                self.pods[0].signal(Signal::SIGTERM);
                let (right, led) = tokio::join!(
                    async {
                        let r = self.wait_right("nowhere", lost_limit).await;
                        (r, start.elapsed())
                    },
                    async {
                        if self.mode == Mode::Fenced {
                            None
                        } else {
                            self.wait_leads(1).await.ok().map(|_| start.elapsed())
                        }
                    }
                );
                if right.0? {
                    out.correct = Some(right.1.as_secs_f64() * 1e3);
                }
                out.led = led.map(|d| d.as_secs_f64() * 1e3);
            }
            Scenario::Crash => {
                self.pods[0].signal(Signal::SIGKILL);
                let start = Instant::now();
                self.move_route("nowhere").await?;
                if self.mode == Mode::Fenced {
                    if self.wait_right("nowhere", lost_limit).await? {
                        out.correct = Some(start.elapsed().as_secs_f64() * 1e3);
                    }
                } else {
                    self.wait_leads(1).await?;
                    let led = start.elapsed();
                    out.led = Some(led.as_secs_f64() * 1e3);
                    if self.wait_right("nowhere", lost_limit).await? {
                        out.correct = Some((start.elapsed() - led).as_secs_f64() * 1e3);
                    }
                }
            }
            Scenario::Freeze => {
                self.pods[0].signal(Signal::SIGSTOP);
                self.wait_leads(1).await?;
                self.move_route("nowhere").await?;
                if !self.wait_right("nowhere", PATIENCE).await? {
                    bail!("the change made while a was frozen was not written");
                }
                let user = self.pods[0].user.clone();
                let before = self.writes_from(&user)?;
                self.pods[0].signal(Signal::SIGCONT);
                // What the thawed replica had in flight goes out within its own retry and
                // renew machinery, or not at all.
                tokio::time::sleep(self.plan.timing.renew + self.plan.timing.retry * 2).await;
                let after = self.writes_from(&user)?;
                let landed = after.get(before.len()..).unwrap_or_default().to_vec();
                out.landed = Some(landed.len());
                out.landed_what = landed;
            }
            Scenario::Churn => {
                let (a0, b0) = self.rebuild_counts().await?;
                for i in 0..40 {
                    self.move_route(if i % 2 == 0 { "nowhere" } else { "web" })
                        .await?;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if !self.wait_right("web", PATIENCE).await? {
                    bail!("the churn's last change was not written");
                }
                // Both see the last change within moments; a follower held up falls behind by
                // dozens.
                let until = Instant::now() + Duration::from_secs(10);
                let behind = loop {
                    let (a1, b1) = self.rebuild_counts().await?;
                    let behind = (a1 - a0) - (b1 - b0);
                    if behind <= 0.0 || Instant::now() > until {
                        break behind;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
                out.behind = Some(behind);
                let (stop, stopped) = tokio::sync::oneshot::channel();
                let watch = tokio::spawn(testkit::route_versions::record_versions(
                    self.routes(),
                    "moved",
                    stopped,
                ));
                tokio::time::sleep(Duration::from_millis(500)).await;
                self.pods[0].signal(Signal::SIGTERM);
                self.wait_leads(1).await?;
                if !self.wait_right("web", PATIENCE).await? {
                    bail!("the statuses were not right after the handover");
                }
                // Room for a late write from a queue of old updates, which is what this counts.
                tokio::time::sleep(self.plan.timing.retry * 3).await;
                let _ = stop.send(());
                let versions = watch.await.context("the route's watch")?;
                let stale = versions.iter().filter(|v| v.is_stale()).count();
                let rewrites = versions.iter().filter(|v| v.status_changed).count();
                out.stale = Some((stale, rewrites));
            }
        }
        let pods = std::mem::take(&mut self.pods);
        drop(pods);
        Ok(out)
    }
}

/// Route `moved`'s entry by `controller` says Accepted, and ResolvedRefs `resolved`, at the
/// route's generation.
fn route_right(r: &HttpRoute, controller: &str, resolved: bool) -> bool {
    let Ok(v) = serde_json::to_value(r) else {
        return false;
    };
    let generation = &v["metadata"]["generation"];
    let want = if resolved { "True" } else { "False" };
    v["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["controllerName"] == controller)
        .any(|p| {
            let conditions = p["conditions"].as_array();
            let has = |t: &str, s: &str| {
                conditions.into_iter().flatten().any(|c| {
                    c["type"] == t && c["status"] == s && c["observedGeneration"] == *generation
                })
            };
            has("Accepted", "True") && has("ResolvedRefs", want)
        })
}
