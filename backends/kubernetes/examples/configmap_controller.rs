//! A kube-runtime [`Controller`] whose writes only the leader sends.
//!
//! It reconciles the ConfigMaps labelled `example.gateway-leader.dev/managed=true` in the
//! kubeconfig's namespace: it annotates each with how many data keys it holds
//! (`example.gateway-leader.dev/keys`) and which replica wrote that
//! (`example.gateway-leader.dev/written-by`). Every replica watches and reconciles; the
//! reconciler's client is [`gated_client`], so only the valid leader's patches are sent. A
//! follower's, or a leader's after it stepped down, are refused unsent: the reconciler logs
//! that and requeues. Becoming leader reconciles everything again at once.
//!
//! The Lease (`configmap-controller`) is held through a separate, ungated client: the lock must
//! be able to renew and acquire whatever the gate says. Ctrl-C or SIGTERM stops the controller
//! (reconciles in flight finish) and then releases the Lease, so the other replica takes over at
//! once.
//!
//! Against `gateway-leader-bench local-apiserver` (a throwaway kube-apiserver; from the checkout):
//!
//! ```sh
//! cargo run -p gateway-leader-bench -- local-apiserver --dir .local &
//! export KUBECONFIG=$PWD/.local/kubeconfig     # once it exists
//! kubectl create configmap hello --from-literal=a=1
//! kubectl label configmap hello example.gateway-leader.dev/managed=true
//! cargo run -p leader-lock-kubernetes --example configmap_controller -- one &
//! cargo run -p leader-lock-kubernetes --example configmap_controller -- two &
//! kubectl get lease configmap-controller -o jsonpath='{.spec.holderIdentity}{"\n"}'
//! kubectl get configmap hello -o jsonpath='{.metadata.annotations}{"\n"}'
//! kill %2          # if `one` leads (else kill %3); it releases the Lease on its way out
//! kubectl patch configmap hello -p '{"data":{"b":"2"}}'
//! kubectl get configmap hello -o jsonpath='{.metadata.annotations}{"\n"}'   # written by the other
//! ```
//!
//! The follower's log shows its refused writes ("not leading"); `kill -9` instead of `kill`
//! leaves the Lease to expire (15 s) before the other takes over. `tests/examples.rs` runs it
//! against a throwaway kube-apiserver.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::{future, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, Config, ResourceExt};
use leader_lock::{Elector, ElectorConfig, GateError, Identity, LeaderState, Timing};
use leader_lock_kubernetes::{gated_client, install_crypto_provider, LeaseLock};
use serde_json::json;
use tokio_stream::wrappers::WatchStream;
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;

const SELECTOR: &str = "example.gateway-leader.dev/managed=true";
const KEYS: &str = "example.gateway-leader.dev/keys";
const WRITTEN_BY: &str = "example.gateway-leader.dev/written-by";
const LEASE: &str = "configmap-controller";
const FIELD_MANAGER: &str = "configmap-controller";

/// What the reconciler needs: the gated API and who we are.
struct Context {
    configmaps: Api<ConfigMap>,
    holder: String,
}

/// Annotates one ConfigMap with its number of keys, through the write gate.
async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let keys = cm.data.as_ref().map_or(0, |d| d.len()).to_string();
    if cm.annotations().get(KEYS) == Some(&keys) {
        return Ok(Action::await_change());
    }
    let name = cm.name_any();
    let patch = json!({ "metadata": { "annotations": { KEYS: keys, WRITTEN_BY: ctx.holder } } });
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    match ctx.configmaps.patch(&name, &pp, &Patch::Merge(patch)).await {
        Ok(_) => {
            info!(configmap = %name, %keys, "annotated");
            Ok(Action::await_change())
        }
        // Not leading (or no longer): the gate refused, nothing was sent. Try again later; a
        // new leadership also reconciles everything at once (see `main`).
        Err(kube::Error::Service(e)) if e.downcast_ref::<GateError>().is_some() => {
            info!(configmap = %name, reason = %e, "not leading: not written, requeued");
            Ok(Action::requeue(Duration::from_secs(30)))
        }
        Err(e) => Err(e),
    }
}

/// A write that failed on the server (the failure is logged with the controller's output).
fn error_policy(_: Arc<ConfigMap>, _: &kube::Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let name = std::env::args().nth(1);
    let identity = Identity::new(name.as_deref().unwrap_or("configmap-controller"));
    install_crypto_provider();
    let config = Config::infer()
        .await
        .context("no Kubernetes configuration")?;
    let ns = config.default_namespace.clone();

    // The Lease gets its own client, without the gate.
    let lock = LeaseLock::new(Client::try_from(config.clone())?, &ns, LEASE);
    let elector = Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity,
            timing: Timing::default(),
            release_on_shutdown: true,
        },
    )?;
    let leadership = elector.leadership();

    // Everything the controller sends goes through the gate; its reads and watches pass.
    let configmaps: Api<ConfigMap> =
        Api::namespaced(gated_client(config, leadership.clone())?, &ns);
    let ctx = Arc::new(Context {
        configmaps: configmaps.clone(),
        holder: elector.candidate().holder(),
    });
    // Once per new term: a new leader catches up with what changed while it followed.
    let new_terms = WatchStream::new(leadership.subscribe())
        .scan(None, |last, state: LeaderState| {
            let new = state.term().is_some_and(|t| *last != Some(t));
            *last = state.term();
            future::ready(Some(new.then_some(())))
        })
        .filter_map(future::ready);

    info!(holder = %ctx.holder, namespace = %ns, selector = SELECTOR, "starting");
    Controller::new(configmaps, watcher::Config::default().labels(SELECTOR))
        .reconcile_all_on(new_terms)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|outcome| {
            if let Err(error) = outcome {
                warn!(%error, "controller");
            }
            future::ready(())
        })
        .await;

    // Reconciles in flight have finished: release, so the other replica takes over at once.
    let released = elector.shutdown().await?;
    info!(released, "stopped");
    Ok(())
}
