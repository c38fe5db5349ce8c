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

mod scene;
use scene::Scene;

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
