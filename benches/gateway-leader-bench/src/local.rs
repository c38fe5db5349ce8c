//! `gateway-leader-bench local-apiserver`: a throwaway kube-apiserver (with its own etcd and the
//! Gateway API CRDs) on this machine, to try gateway-leader by hand as docs/operations.md shows
//! ("Try it on this machine"). It is the apiserver the test suite and the bench use.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

use testkit::gateway_api;
use testkit::kube::KubeApiServer;

/// Flags of `gateway-leader-bench local-apiserver`.
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// Where to write `kubeconfig` (cluster-admin) once the apiserver is ready; created if
    /// missing.
    #[arg(long, default_value = ".local", value_name = "DIR")]
    pub dir: PathBuf,
}

/// Runs the apiserver until SIGINT or SIGTERM; returns the exit code.
pub fn main(args: LocalArgs) -> ExitCode {
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gateway-leader-bench local-apiserver: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(&args.dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway-leader-bench local-apiserver: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--dir {}", dir.display()))?;
    let kubeconfig = dir.join("kubeconfig");
    // A kubeconfig left by an earlier run points at a server that is gone.
    let _ = std::fs::remove_file(&kubeconfig);
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let server = KubeApiServer::start_local()
        .await
        .context("starting kube-apiserver (scripts/build-kube-apiserver.sh builds it)")?;
    gateway_api::install(&server.admin_client())
        .await
        .context("installing the Gateway API CRDs")?;
    // Written last, and renamed into place, so that a waiting script sees it only when ready.
    let partial = dir.join(".kubeconfig.partial");
    std::fs::copy(server.kubeconfig_path(), &partial)
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &kubeconfig)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    println!(
        "kube-apiserver {} is ready; cluster-admin kubeconfig: {}\nstop it with Ctrl-C or SIGTERM",
        server.url(),
        kubeconfig.display()
    );
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let _ = std::fs::remove_file(&kubeconfig);
    drop(server);
    Ok(())
}
