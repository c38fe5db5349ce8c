//! A kube-runtime [`Controller`] whose writes only the leader sends.
//!
//! It reconciles the ConfigMaps labelled `example.gateway-leader.dev/managed=true` in the
//! kubeconfig's namespace: it annotates each with how many data keys it holds
//! (`example.gateway-leader.dev/keys`), which replica wrote that
//! (`example.gateway-leader.dev/written-by`) and under which fencing term
//! (`example.gateway-leader.dev/term`, the Lease's `leaseTransitions`). Every replica watches and
//! reconciles; each write runs under [`Leadership::run`] through [`permit_client`], so it is
//! sent only while its permit's leadership holds, and the term it stamps is the term the gate
//! checked. A follower's writes are refused unsent; it does not requeue them, because becoming
//! leader reconciles everything again at once ([`Leadership::changes`]).
//!
//! Both clients come from one `kube::Config`: the Lease (`configmap-controller`) is held through
//! the ungated [`client`], since the lock must be able to renew and acquire whatever the gate
//! says; the controller reads and writes through the [`gated_client`]. Ctrl-C or SIGTERM stops
//! the controller (reconciles in flight finish) and then releases the Lease, so the other
//! replica takes over at once.
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
use kube::{Api, Client, ResourceExt};
use leader_lock::leadership::GuardedError;
use leader_lock::{Elector, ElectorConfig, Identity, Leadership, LeadershipChange, Timing};
use leader_lock_kubernetes::{client, gated_client, permit_client, ClientOptions, LeaseLock};
use serde_json::json;
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;

const SELECTOR: &str = "example.gateway-leader.dev/managed=true";
const KEYS: &str = "example.gateway-leader.dev/keys";
const WRITTEN_BY: &str = "example.gateway-leader.dev/written-by";
const TERM: &str = "example.gateway-leader.dev/term";
const LEASE: &str = "configmap-controller";
const FIELD_MANAGER: &str = "configmap-controller";

/// What the reconciler needs: the gated client, the leadership and who we are.
struct Context {
    writes: Client,
    namespace: String,
    leadership: Leadership,
    holder: String,
}

/// Annotates one ConfigMap with its number of keys and the term it is written under.
async fn reconcile(
    cm: Arc<ConfigMap>,
    ctx: Arc<Context>,
) -> Result<Action, GuardedError<kube::Error>> {
    let keys = cm.data.as_ref().map_or(0, |d| d.len()).to_string();
    if cm.annotations().get(KEYS) == Some(&keys) {
        return Ok(Action::await_change());
    }
    let name = cm.name_any();
    let written = ctx
        .leadership
        .run(|permit| {
            // The gate checks this permit, so the term written is the term checked.
            let api: Api<ConfigMap> =
                Api::namespaced(permit_client(&ctx.writes, &permit), &ctx.namespace);
            let annotations =
                json!({ KEYS: keys, WRITTEN_BY: ctx.holder, TERM: permit.term.to_string() });
            let patch = Patch::Merge(json!({ "metadata": { "annotations": annotations } }));
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            let name = name.clone();
            async move { api.patch(&name, &pp, &patch).await }
        })
        .await;
    match written {
        Ok(_) => {
            info!(configmap = %name, %keys, "annotated");
            Ok(Action::await_change())
        }
        // Not leading (or no longer): nothing was sent, or the write was cut at its deadline.
        // Nothing to requeue: a new leadership reconciles everything at once (see `main`).
        Err(GuardedError::NotLeader(reason)) => {
            info!(configmap = %name, %reason, "not leading: not written");
            Ok(Action::await_change())
        }
        Err(GuardedError::Deadline { term }) => {
            info!(configmap = %name, %term, "leadership ended during the write");
            Ok(Action::await_change())
        }
        Err(e) => Err(e),
    }
}

/// A write that failed on the server (the failure is logged with the controller's output).
fn error_policy(_: Arc<ConfigMap>, _: &GuardedError<kube::Error>, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let name = std::env::args().nth(1);
    let identity = Identity::new(name.as_deref().unwrap_or("configmap-controller"));
    let config = ClientOptions::default()
        .with_user_agent(format!("configmap-controller ({identity})"))
        .load()
        .await
        .context("no Kubernetes configuration")?;
    let ns = config.default_namespace.clone();

    // One config, two clients: the Lease's without the gate, the controller's behind it.
    let lock = LeaseLock::new(client(config.clone())?, &ns, LEASE);
    let elector = Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity,
            timing: Timing::default(),
            release_on_shutdown: true,
        },
    )?;
    let leadership = elector.leadership();
    let writes = gated_client(config, leadership.clone())?;

    // Reads and watches pass the gate.
    let configmaps: Api<ConfigMap> = Api::namespaced(writes.clone(), &ns);
    let ctx = Arc::new(Context {
        writes,
        namespace: ns.clone(),
        leadership: leadership.clone(),
        holder: elector.candidate().holder(),
    });
    // Once per new term: a new leader catches up with what changed while it followed.
    let new_terms = leadership.changes().filter_map(|change| {
        future::ready(matches!(change, LeadershipChange::StartedLeading { .. }).then_some(()))
    });

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
