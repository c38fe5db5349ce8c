//! A writer elected on a Lease that patches a ConfigMap only while it leads: every write goes
//! through [`gated_client`], so a replica that is not (or no longer) a valid leader sends nothing,
//! even one that was frozen (SIGSTOP, a VM pause, a long GC) past its validity and wakes up
//! believing it still leads.
//!
//! Each attempt writes `data.<identity>: <attempt number>` to the ConfigMap `--target`; with
//! `--attempts CM` it also records every attempt and its outcome in that ConfigMap through an
//! ungated client, so you can watch a follower keep trying while nothing of it lands. The Lease
//! gets the ungated client too: a lock behind the gate could never renew or acquire.
//!
//! Against `gateway-leader-bench local-apiserver` (a throwaway kube-apiserver; from the checkout):
//!
//! ```sh
//! cargo run -p gateway-leader-bench -- local-apiserver --dir .local &
//! export KUBECONFIG=$PWD/.local/kubeconfig     # once it exists
//! kubectl create configmap gated-writer
//! kubectl create configmap gated-writer-attempts
//! cargo run -p leader-lock-kubernetes --example gated_writer -- --identity a \
//!     --attempts gated-writer-attempts &
//! cargo run -p leader-lock-kubernetes --example gated_writer -- --identity b &
//! kubectl get configmap gated-writer -o jsonpath='{.data}'   # only the leader's key moves
//! kill -STOP %2    # freeze the leader (or SIGTERM it: it releases the Lease at once)
//! ```
//!
//! After a freeze the other writer takes over once the lease has run out; `kill -CONT %2` and
//! the thawed one's gated writes are refused (see its log and `gated-writer-attempts`). Ctrl-C
//! or SIGTERM stops a writer and releases the Lease. `tests/gate.rs` runs this program as its
//! frozen leader.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::Api;
use leader_lock::{Elector, ElectorConfig, Identity, Timing};
use leader_lock_kubernetes::{client, gated_client, ClientOptions, LeaseLock};
use serde_json::json;
use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;

/// Patches a ConfigMap only while leading, through the write gate.
#[derive(Debug, Parser)]
struct Args {
    /// The kubeconfig [default: KUBECONFIG, else ~/.kube/config, else the pod's service account].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context [default: its current one].
    #[arg(long)]
    context: Option<String>,
    /// Namespace of the Lease and the ConfigMaps [default: the kubeconfig's].
    #[arg(long)]
    namespace: Option<String>,
    /// Name of the Lease to elect on.
    #[arg(long, default_value = "gated-writer")]
    lease: String,
    /// This writer's name (the Lease holder is `<identity>_<random>`).
    #[arg(long, default_value = "gated-writer")]
    identity: String,
    /// The ConfigMap the gated writes patch; it must exist.
    #[arg(long, default_value = "gated-writer")]
    target: String,
    /// A ConfigMap to record every attempt and its outcome in (ungated); it must exist.
    #[arg(long)]
    attempts: Option<String>,
    /// Field manager of the gated writes (the attempts' is `<this>-attempts`).
    #[arg(long, default_value = "gated-writer")]
    field_manager: String,
    /// Pause after a write that landed (`0s`: write again at once).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Lease duration (whole seconds).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,
    /// Renew deadline: how long a leader may go without renewing before it steps down.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    renew_deadline: Duration,
    /// Retry period of renewals and attempts.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    retry_period: Duration,
}

/// How long to wait after a refused or failed write before the next attempt.
const AFTER_FAILURE: Duration = Duration::from_millis(50);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let timing = Timing::new(args.lease_duration, args.renew_deadline, args.retry_period)?;
    let mut options =
        ClientOptions::default().with_user_agent(format!("gated-writer ({})", args.identity));
    options.kubeconfig = args.kubeconfig.clone();
    options.context = args.context.clone();
    let config = options
        .load()
        .await
        .context("no Kubernetes configuration")?;
    let ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());

    // One config, two clients: the lock and the attempt records get the ungated one.
    let ungated = client(config.clone())?;
    let elector = Elector::spawn(
        Arc::new(LeaseLock::new(ungated.clone(), &ns, &args.lease)),
        ElectorConfig {
            identity: Identity::new(&args.identity),
            timing,
            release_on_shutdown: true,
        },
    )?;
    let gated: Api<ConfigMap> = Api::namespaced(gated_client(config, elector.leadership())?, &ns);
    let records: Api<ConfigMap> = Api::namespaced(ungated, &ns);

    let mut term = signal(SignalKind::terminate())?;
    let write = async {
        for n in 1u64.. {
            let patch = Patch::Merge(json!({ "data": { &args.identity: n.to_string() } }));
            let pp = PatchParams {
                field_manager: Some(args.field_manager.clone()),
                ..PatchParams::default()
            };
            let written = gated.patch(&args.target, &pp, &patch).await;
            let outcome = match &written {
                Ok(_) => "written".to_string(),
                // A refusal of the gate (not leading), or the server's own error.
                Err(e) => e.to_string(),
            };
            match &written {
                Ok(_) => info!(attempt = n, "written"),
                Err(e) => warn!(attempt = n, error = %e, "not written"),
            }
            if let Some(attempts) = &args.attempts {
                let record = json!({ "data": { "attempt": n.to_string(), "outcome": outcome } });
                let pp = PatchParams {
                    field_manager: Some(format!("{}-attempts", args.field_manager)),
                    ..PatchParams::default()
                };
                // Best effort: a record that failed is followed by the next one.
                if let Err(e) = records.patch(attempts, &pp, &Patch::Merge(record)).await {
                    warn!(error = %e, "recording the attempt");
                }
            }
            let pause = match written {
                Ok(_) => args.interval,
                Err(_) => args.interval.max(AFTER_FAILURE),
            };
            tokio::time::sleep(pause).await;
        }
    };
    tokio::select! {
        _ = write => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let released = elector.shutdown().await?;
    info!(released, "stopped");
    Ok(())
}
