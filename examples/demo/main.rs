//! The engine of `scripts/demo.sh`: the main job of gateway-leader, live on this machine.
//!
//! It starts a local kube-apiserver (or uses an existing cluster) with the Gateway API CRDs and
//! a small sample (a class, a Gateway with an HTTP listener and an HTTPS listener whose
//! certificate Secret does not exist yet, a Service, three HTTPRoutes: one valid, one to a
//! missing Service, one to another namespace's Service without a ReferenceGrant, and a
//! GRPCRoute), and three `gateway-leader run` replicas that elect a leader on a Kubernetes
//! Lease, etcd or Redis. Every replica computes the statuses; only the leader writes them. The
//! demo prints who leads under which fencing term and the statuses on the objects with the
//! replica and term that wrote each, then stops the leader gracefully (SIGTERM) and crashes the
//! next one (SIGKILL), changing a route each time, and shows how long the next leader took to
//! write.
//!
//! Usage: `demo <path of the gateway-leader binary> [kubernetes|etcd|redis] [--kubeconfig PATH]`;
//! `scripts/demo.sh` builds both and runs it. With `--kubeconfig`, the cluster of that file is
//! used instead of a local apiserver (see `cluster.rs`).
//!
//! The rooms: `cluster.rs` (the apiserver), `lock.rs` (the lock's server), `sample.rs` (the
//! objects and the changes made to them), `fleet.rs` (the replicas, on `testkit::replica`),
//! `status.rs` (the statuses as the table shows them), `phases.rs` (the story: the first
//! leader, then a handover), `out.rs` (the terminal); this file runs them in order.

mod cluster;
mod fleet;
mod lock;
mod out;
mod phases;
mod sample;
mod status;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, Result};
use nix::sys::signal::Signal;
use tempfile::TempDir;
use testkit::kube::KubeApiServer;
use tokio::signal::unix::{signal, SignalKind};

use crate::fleet::Fleet;
use crate::lock::{parse_backend, Backend, LockServer};
use crate::out::{human, list, Out, Tone};
use crate::phases::{Change, Demo};
use crate::sample::{apply_sample, create_tls_secret, CLASS, CROSS, GATEWAY, MISSING, VALID};

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
        format!(
            "        {GATEWAY} (listener https, port 443, Secret {NS}/{TLS_SECRET} not created yet)"
        ),
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
    let backend = parse_backend(&backend).ok_or_else(|| format!("unknown backend {backend:?}"))?;
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
