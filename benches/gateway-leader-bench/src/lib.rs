//! `gateway-leader-bench run`: failover figures and the split-brain proof over real processes.
//!
//! For each backend it starts real `gateway-leader run` replicas (the `gateway-leader` binary,
//! `--binary`) against real servers, stops the leader round after round, and times, on the
//! machine's monotonic clock, the next acquisition and the next status write from the signal.
//! Afterwards the split-brain checker reads every replica's log. See docs/benchmarks.md.
//!
//! The replicas (and the Go peers) are started and read by testkit's replica harness
//! (`testkit::replica`), their lines typed as `gateway-leader-log` declares them.
//!
//! One concept per file: [`args`] (flags and their check), [`scenario`], [`lockserver`] (the
//! lock's server), [`cluster`] (the apiserver and the route), [`lane`] (the replicas of one
//! lock), [`round`] (one failover, and one etcd member fault), [`cost`] (steady state),
//! [`anchor`] (`etcdctl elect` beside etcd × graceful, and in [`etcd_handover`], the
//! `etcd-handover` command: our elector's handover beside it), [`peer_anchor`] (client-go and
//! controller-runtime beside Kubernetes × graceful and × crash), [`floor`] (a bare Lease
//! takeover beside Kubernetes × graceful), [`held`] (what the apiserver held: who wrote under
//! which Lease), [`plot`], [`scale`] and [`scale_plot`] (thousands of routes), [`stats`], [`checker`], [`report`].

pub mod anchor;
pub mod args;
pub mod checker;
pub mod cluster;
pub mod controller_handover;
pub mod cost;
pub mod etcd_handover;
pub mod floor;
pub mod held;
pub mod lane;
pub mod local;
pub mod lockserver;
pub mod peer_anchor;
pub mod plot;
pub mod real_controllers;
pub mod report;
pub mod round;
pub mod scale;
pub mod scale_plot;
pub mod scenario;
pub mod stats;
pub mod topology;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use tempfile::TempDir;

pub use args::{BenchArgs, Plan};

use crate::checker::check;
use crate::cluster::Cluster;
use crate::lane::Lane;
use crate::lockserver::LockServer;
use crate::report::{LaneVerdict, Machine, Report, ScenarioResult};
use crate::round::Sample;
use crate::scenario::Scenario;
use crate::topology::Topology;
use testkit::proxy::BlackholeProxy;

/// Exit code for bad input (flags, or settings the replicas would refuse): nothing was started.
pub const EXIT_USAGE: u8 = 2;

/// Runs a command's `work` on two worker threads, as on the 2-core machines the figures come
/// from; its error is printed under `command`'s name. Exit 0, or 1 (the runtime or the work
/// failed).
pub fn on_two_workers(
    command: &str,
    work: impl std::future::Future<Output = Result<()>>,
) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gateway-leader-bench {command}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway-leader-bench {command}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Exit code when the checker found a violation (the figures are still written).
pub const EXIT_VIOLATIONS: u8 = 3;

/// Runs `gateway-leader-bench run`; returns the exit code: 0, 1 (a failure at run time, such as a
/// server that cannot start), 2 (bad input, nothing started), 3 (split-brain violations).
pub fn main(args: BenchArgs) -> ExitCode {
    let checked = args.binary().and_then(|exe| {
        let plan = args.plan()?;
        args.check_replica_settings(&plan, &exe)?;
        // Before anything starts: a run that would stop at the anchor names the package now.
        let etcdctl = if wants_anchor(&plan) {
            Some(anchor::etcdctl().map_err(|e| format!("{e:#}"))?)
        } else {
            None
        };
        let peers = if peer_anchor::wanted(&plan) {
            Some(testkit::built::peers().map_err(|e| format!("{e:#}"))?)
        } else {
            None
        };
        Ok((
            plan,
            Programs {
                exe,
                etcdctl,
                peers,
            },
        ))
    });
    let (plan, programs) = match checked {
        Ok(x) => x,
        Err(e) => {
            eprintln!("gateway-leader-bench: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&plan.out) {
        eprintln!(
            "gateway-leader-bench: --out {}: cannot create it: {e}",
            plan.out.display()
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gateway-leader-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if plan.scenarios == [Scenario::Scale] {
        return scale::main(&rt, &plan, &programs.exe);
    }
    let report = match rt.block_on(run_until_signal(&plan, &programs)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gateway-leader-bench: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", report.tables());
    match report.write_json(&plan.out) {
        Ok(p) => println!("every sample: {}", p.display()),
        Err(e) => {
            eprintln!("gateway-leader-bench: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    match plot::draw(&report, &plan.out) {
        Ok(p) => println!("plot: {}", p.display()),
        // The figures are out already; a plot that cannot be drawn is no reason to fail.
        Err(e) => eprintln!("gateway-leader-bench: no plot: {e:#}"),
    }
    let violations = report.violations();
    println!("violations: {violations}");
    if violations > 0 {
        return ExitCode::from(EXIT_VIOLATIONS);
    }
    ExitCode::SUCCESS
}

/// The programs a run starts besides the servers.
struct Programs {
    /// `gateway-leader` (`--binary`).
    exe: PathBuf,
    /// `etcdctl`, when the plan has the anchor ([`wants_anchor`]).
    etcdctl: Option<PathBuf>,
    /// The Go peers' folder, when the plan has their anchors ([`peer_anchor::wanted`]).
    peers: Option<PathBuf>,
}

/// Whether the plan runs the `etcdctl elect` anchor: the single etcd with `graceful`.
fn wants_anchor(plan: &Plan) -> bool {
    plan.backends.contains(&Topology::Etcd) && plan.scenarios.contains(&Scenario::Graceful)
}

/// A line above the bar, or on stderr when there is no terminal to draw the bar on.
fn say(pb: &ProgressBar, line: String) {
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.println(line);
    }
}

fn progress(plan: &Plan) -> ProgressBar {
    let total = plan.backends.len() * plan.wakeups.len() * plan.scenarios.len() * plan.rounds;
    let pb = ProgressBar::new(total as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} rounds  {msg}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// [`run`], ended early by SIGINT or SIGTERM: dropping it stops (SIGKILL) every replica and
/// server it started, so none outlives the bench, whoever signalled it.
async fn run_until_signal(plan: &Plan, programs: &Programs) -> Result<Report> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    tokio::select! {
        r = run(plan, programs) => r,
        _ = term.recv() => Err(anyhow::anyhow!(
            "stopped by SIGTERM; every replica and server it started is stopped"
        )),
        _ = int.recv() => Err(anyhow::anyhow!(
            "stopped by SIGINT; every replica and server it started is stopped"
        )),
    }
}

/// Starts the servers and runs every lane; the figures and the checker's verdicts.
async fn run(plan: &Plan, programs: &Programs) -> Result<Report> {
    let exe = programs.exe.as_path();
    let pb = progress(plan);
    if plan.scenarios.contains(&Scenario::Chaos) {
        say(
            &pb,
            format!("chaos seed: {} (replay with --seed)", plan.seed),
        );
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(plan.seed);
    pb.set_message("starting the apiserver");
    let mut cluster = Cluster::start(plan.kubeconfig.as_deref()).await?;
    let mut results = Vec::new();
    let mut verdicts = Vec::new();
    let mut costs = Vec::new();
    let mut anchors = Vec::new();
    for &backend in &plan.backends {
        pb.set_message(format!("starting the {backend} server"));
        let mut server = LockServer::start(backend, &plan.endpoints).await?;
        for &wakeup in &plan.wakeups {
            let label = format!("{backend}-{wakeup}");
            let ns = format!("bench-{label}");
            let controller = format!("gateway-leader.dev/bench-{label}");
            let route = cluster.lane(&ns, &controller).await?;
            let common = lane_args(plan, &ns, controller, wakeup);
            let logs: PathBuf = plan.out.join("logs").join(&label);
            pb.set_message(format!("{label}: starting {} replicas", plan.replicas));
            let lock = format!("{ns}-lock");
            let (args, proxies, files) = slot_args(plan, &server, &cluster, &ns, &common).await?;
            let mut lane = Lane::new(
                &label,
                exe.to_path_buf(),
                args,
                logs,
                route,
                (&ns, &lock),
                (proxies, files),
            )?;
            if !plan.steady.is_zero() {
                pb.set_message(format!("{label}: steady state for {:?}", plan.steady));
                let window = (plan.steady, plan.leader_patience());
                if let Some(mut c) =
                    cost::of_lane(&mut lane, (&server, &cluster), window.0, window.1).await?
                {
                    c.wakeup = wakeup.to_string();
                    costs.push(c);
                }
            }
            // The Kubernetes floor's rounds go beside this lane's graceful ones, each right
            // before ours on the same settled lane: both meet the machine of the same minute.
            let mut floor = None;
            let mut floor_samples = Vec::new();
            if backend == Topology::Kubernetes
                && wakeup == plan.wakeups[0]
                && plan.scenarios.contains(&Scenario::Graceful)
            {
                pb.set_message(format!("{label}: starting the {} anchor", floor::TOOL));
                match floor::Floor::start(&cluster).await {
                    Ok(f) => floor = Some(f),
                    Err(e) => {
                        say(&pb, format!("{backend} {} anchor: {e:#}", floor::TOOL));
                        floor_samples.push(Sample::failed(0, Scenario::Graceful, format!("{e:#}")));
                    }
                }
            }
            for &scenario in &plan.scenarios {
                let mut samples: Vec<Sample> = Vec::new();
                let mut deck: Vec<Scenario> = Vec::new();
                let mut failed_in_a_row = 0;
                for round in 0..plan.rounds {
                    let this = match scenario {
                        // Dealt from a shuffled deck: a random order, and every scenario once
                        // in each run of six rounds.
                        Scenario::Chaos => {
                            if deck.is_empty() {
                                deck = Scenario::ALL.to_vec();
                                deck.shuffle(&mut rng);
                            }
                            deck.pop().unwrap_or(Scenario::Crash)
                        }
                        s => s,
                    };
                    pb.set_message(format!("{label} {scenario} round {} ({this})", round + 1));
                    if let (Scenario::Graceful, Some(f)) = (scenario, floor.as_mut()) {
                        // A lane that does not settle fails in our round, reported there.
                        if lane.settle(plan.leader_patience()).await.is_ok() {
                            let s = f.round().await;
                            if let Some(e) = &s.error {
                                say(&pb, format!("{backend} {} anchor: {e}", floor::TOOL));
                                floor = None;
                            }
                            floor_samples.push(s);
                        }
                    }
                    let sample =
                        round::run(&mut lane, plan, this, round, (&mut server, &mut cluster))
                            .await
                            .with_context(|| format!("{label} {this} round {}", round + 1));
                    // A round that could not run (say the lane never settled) is reported and
                    // the run goes on, so that a long chaos run keeps what it measured; three
                    // in a row end it.
                    let sample = match sample {
                        Ok(s) => {
                            failed_in_a_row = 0;
                            s
                        }
                        Err(e) if failed_in_a_row < 2 => {
                            failed_in_a_row += 1;
                            Sample::failed(round, this, format!("{e:#}"))
                        }
                        Err(e) => return Err(e),
                    };
                    if let Some(e) = &sample.error {
                        say(&pb, format!("{label} {this} round {}: {e}", round + 1));
                    }
                    samples.push(sample);
                    // Without a terminal the bar is hidden: a line now and then instead, for a
                    // long run under nohup or in CI.
                    if pb.is_hidden() && (round + 1) % 50 == 0 {
                        eprintln!(
                            "{:>6.0} s  {label} {scenario}: {} of {} rounds",
                            pb.elapsed().as_secs_f64(),
                            round + 1,
                            plan.rounds
                        );
                    }
                    pb.inc(1);
                }
                // Chaos reports each drawn scenario on its own, as `chaos: <scenario>`.
                let groups: Vec<(String, Vec<Sample>)> = if scenario == Scenario::Chaos {
                    Scenario::ALL
                        .iter()
                        .map(|&d| {
                            let drawn = samples.iter().filter(|s| s.scenario == d).cloned();
                            (format!("chaos: {d}"), drawn.collect())
                        })
                        .filter(|(_, v): &(String, Vec<Sample>)| !v.is_empty())
                        .collect()
                } else {
                    vec![(scenario.to_string(), samples)]
                };
                for (name, samples) in groups {
                    results.push(ScenarioResult {
                        backend: backend.to_string(),
                        wakeup: wakeup.to_string(),
                        scenario: name,
                        samples,
                    });
                }
            }
            pb.set_message(format!("{label}: checking the route's final status"));
            let unsettled = lane.route.settled(plan.leader_patience()).await?;
            pb.set_message(format!("{label}: stopping"));
            lane.stop(plan.timing.renew_deadline + Duration::from_secs(10))
                .await;
            let mut verdict = check(&lane.events, &lane.killed);
            if let Some(problem) = unsettled {
                verdict.violations.push(format!(
                    "the route's status was still wrong {:?} after the last round: {problem}",
                    plan.leader_patience()
                ));
            }
            verdicts.push(LaneVerdict {
                backend: backend.to_string(),
                wakeup: wakeup.to_string(),
                verdict,
            });
            if !floor_samples.is_empty() {
                anchors.push(anchor::Anchor {
                    backend: backend.to_string(),
                    scenario: Scenario::Graceful.to_string(),
                    tool: floor::TOOL.to_string(),
                    from: anchor::Start::ReleaseSent,
                    samples: floor_samples,
                });
            }
        }
        // `etcdctl elect`: after the lanes, on the same server with nothing else on it.
        if let (Some(etcdctl), Topology::Etcd, LockServer::Etcd { endpoints, .. }) =
            (&programs.etcdctl, backend, &server)
        {
            pb.set_message(format!("{backend}: the {} anchor", anchor::TOOL));
            let logs = plan.out.join("logs").join("etcd-anchor");
            let samples = anchor::run(etcdctl, endpoints, plan.rounds, &logs)
                .await
                .unwrap_or_else(|e| vec![Sample::failed(0, Scenario::Graceful, format!("{e:#}"))]);
            for s in samples.iter().filter_map(|s| s.error.as_ref()) {
                say(&pb, format!("{backend} {} anchor: {s}", anchor::TOOL));
            }
            anchors.push(anchor::Anchor {
                backend: backend.to_string(),
                scenario: Scenario::Graceful.to_string(),
                tool: anchor::TOOL.to_string(),
                from: anchor::Start::Signal,
                samples,
            });
        }
        // client-go and controller-runtime: after our Kubernetes lanes, on the same apiserver.
        if let (Some(peers), Topology::Kubernetes) = (&programs.peers, backend) {
            pb.set_message("the client-go and controller-runtime anchors");
            let m = peer_anchor::run(plan, (peers, exe), &mut server, &mut cluster, &|line| {
                say(&pb, line)
            })
            .await?;
            anchors.extend(m.anchors);
            costs.extend(m.costs);
            verdicts.extend(m.verdicts);
        }
    }
    pb.finish_and_clear();
    let apiserver = cluster
        .client()
        .apiserver_version()
        .await
        .ok()
        .map(|v| v.git_version);
    Ok(Report {
        machine: Machine::read(),
        apiserver,
        replicas: plan.replicas,
        timing: plan.timing_args.clone(),
        seed: plan
            .scenarios
            .contains(&Scenario::Chaos)
            .then_some(plan.seed),
        results,
        anchors,
        verdicts,
        costs,
    })
}

/// The `run` flags every replica of a lane shares: its lock (named after the lane's namespace
/// `ns`), its controller name, the plan's timing and the wake-up mode.
pub(crate) fn lane_args(plan: &Plan, ns: &str, controller: String, wakeup: &str) -> Vec<String> {
    let mut common = vec![
        "--leader-election-lock-name".to_string(),
        format!("{ns}-lock"),
        "--controller-name".into(),
        controller,
    ];
    common.extend(plan.timing_args.iter().cloned());
    common.extend(["--wakeup".to_string(), wakeup.to_string()]);
    common
}

/// Each slot's flags for a lane: `common`, plus where the slot reaches the lock's server and
/// the apiserver. With partitions planned each slot gets its own proxies to the lock's server
/// (for the Kubernetes lock, to the apiserver, through a kubeconfig of its own).
pub(crate) async fn slot_args(
    plan: &Plan,
    server: &LockServer,
    cluster: &Cluster,
    ns: &str,
    common: &[String],
) -> Result<(Vec<Vec<String>>, Vec<Vec<BlackholeProxy>>, Option<TempDir>)> {
    let upstreams = if plan.needs_proxy() {
        server.upstreams(cluster)?
    } else {
        Vec::new()
    };
    let files = if upstreams.is_empty() {
        None
    } else {
        Some(tempfile::tempdir().context("a dir for the slots' kubeconfigs")?)
    };
    let mut args = Vec::new();
    let mut proxies = Vec::new();
    for slot in 0..plan.replicas {
        let mut mine = Vec::new();
        for u in &upstreams {
            mine.push(BlackholeProxy::start(*u).await?);
        }
        let via: Vec<_> = mine.iter().map(BlackholeProxy::addr).collect();
        let mut a = server.replica_args(ns, &via);
        let kubeconfig = match (&files, server.backend(), via.first()) {
            (Some(dir), Topology::Kubernetes, Some(addr)) => {
                let path = dir.path().join(format!("kubeconfig-{slot}"));
                cluster.write_kubeconfig_via(*addr, &path)?;
                path
            }
            _ => cluster.kubeconfig().to_path_buf(),
        };
        a.extend(["--kubeconfig".to_string(), kubeconfig.display().to_string()]);
        a.extend(common.iter().cloned());
        args.push(a);
        proxies.push(mine);
    }
    Ok((args, proxies, files))
}
