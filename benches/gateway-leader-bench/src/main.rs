//! The `gateway-leader-bench` command: `run` measures failover on each lock backend with real
//! `gateway-leader` replicas and servers and checks their logs for split brain
//! (docs/benchmarks.md); `etcd-handover` times our etcd elector's graceful handover beside
//! `etcdctl elect`'s (docs/etcd.md); `local-apiserver` starts a throwaway kube-apiserver to try
//! gateway-leader by hand (docs/operations.md).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gateway_leader_bench::etcd_handover::EtcdHandoverArgs;
use gateway_leader_bench::local::LocalArgs;
use gateway_leader_bench::scale_plot::PlotScaleArgs;
use gateway_leader_bench::{BenchArgs, EXIT_USAGE};

/// Failover benchmark and split-brain checker for gateway-leader, and a local kube-apiserver.
#[derive(Debug, Parser)]
#[command(name = "gateway-leader-bench", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure failover on each lock backend with real replicas and servers, and check the
    /// replicas' logs for split brain (see docs/benchmarks.md).
    Run(Box<BenchArgs>),
    /// Time our etcd elector's graceful handover beside `etcdctl elect`'s on one throwaway etcd,
    /// rounds alternating (see docs/etcd.md, "Graceful handover beside `etcdctl elect`").
    EtcdHandover(EtcdHandoverArgs),
    /// Time a controller's own election handing over, natively and driven by our lock through
    /// `gateway-leader proxy --proxy-election-lease` (see docs/benchmarks.md, "A controller's own
    /// election, driven by ours").
    ControllerHandover(gateway_leader_bench::controller_handover::ControllerHandoverArgs),
    /// Run real Gateway API controllers (Contour, Envoy Gateway) as two replicas in three modes
    /// (native election, election off behind the proxy, election driven by ours) and judge
    /// handovers, crashes and freezes from the apiserver (see docs/benchmarks.md, "Real
    /// controllers, three ways").
    RealControllers(gateway_leader_bench::real_controllers::RealControllersArgs),
    /// Start a throwaway kube-apiserver with the Gateway API CRDs on this machine and keep it up
    /// until Ctrl-C, to try gateway-leader by hand (see docs/operations.md).
    LocalApiserver(LocalArgs),
    /// Plot the `scale` scenario's figures at several sizes (the `scale.json` of each run) as
    /// one SVG (see docs/benchmarks.md, "Scale: thousands of routes").
    PlotScale(PlotScaleArgs),
}

fn main() -> ExitCode {
    // The program picks rustls' crypto provider for the process, as the gateway-leader binary
    // does: the bench's kube and redis clients build their TLS configs from the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE));
        }
    };
    match cli.command {
        Command::Run(args) => gateway_leader_bench::main(*args),
        Command::EtcdHandover(args) => gateway_leader_bench::etcd_handover::main(args),
        Command::ControllerHandover(args) => gateway_leader_bench::controller_handover::main(args),
        Command::RealControllers(args) => gateway_leader_bench::real_controllers::main(args),
        Command::LocalApiserver(args) => gateway_leader_bench::local::main(args),
        Command::PlotScale(args) => gateway_leader_bench::scale_plot::main(args),
    }
}
