//! Watching what the statuses are computed from: one kube-runtime reflector per kind.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::compute::World;

/// The annotation on Gateway API CRDs that names their bundle version.
pub const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";
/// The CRD whose bundle version decides `SupportedVersion`.
pub const GATEWAY_CLASS_CRD: &str = "gatewayclasses.gateway.networking.k8s.io";

/// The annotation in which `kubectl apply` keeps the whole object it applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The reflectors' stores: a consistent-enough view of everything the computation reads.
#[derive(Clone)]
pub struct Stores {
    pub(crate) gateway_classes: Store<GatewayClass>,
    pub(crate) gateways: Store<Gateway>,
    pub(crate) http_routes: Store<HttpRoute>,
    pub(crate) services: Store<Service>,
    pub(crate) reference_grants: Store<ReferenceGrant>,
    pub(crate) namespaces: Store<Namespace>,
}

impl Stores {
    /// Waits until every store has its initial list.
    pub async fn wait_synced(&self) {
        // Only fails when a writer is dropped, which ends the watches anyway.
        let _ = self.gateway_classes.wait_until_ready().await;
        let _ = self.gateways.wait_until_ready().await;
        let _ = self.http_routes.wait_until_ready().await;
        let _ = self.services.wait_until_ready().await;
        let _ = self.reference_grants.wait_until_ready().await;
        let _ = self.namespaces.wait_until_ready().await;
    }

    /// A snapshot for one computation.
    pub fn world(&self, bundle_version: Option<String>) -> World {
        World {
            gateway_classes: self.gateway_classes.state(),
            gateways: self.gateways.state(),
            http_routes: self.http_routes.state(),
            services: self.services.state(),
            reference_grants: self.reference_grants.state(),
            namespaces: self.namespaces.state(),
            bundle_version,
        }
    }
}

/// Starts one reflector per kind on `tasks`; `changed` is notified on every change seen.
pub fn spawn(client: &Client, changed: Arc<Notify>, tasks: &mut JoinSet<()>) -> Stores {
    Stores {
        gateway_classes: reflect(Api::all(client.clone()), &changed, tasks),
        gateways: reflect(Api::all(client.clone()), &changed, tasks),
        http_routes: reflect(Api::all(client.clone()), &changed, tasks),
        services: reflect(Api::all(client.clone()), &changed, tasks),
        reference_grants: reflect(Api::all(client.clone()), &changed, tasks),
        namespaces: reflect(Api::all(client.clone()), &changed, tasks),
    }
}

/// How a failed watch retries: from 250 ms, doubling, jittered, at most 2 s apart.
///
/// kube-runtime's default (client-go's reflector: up to 30 s) is kind to a struggling apiserver,
/// but after an apiserver restart of a few seconds it leaves a new leader blind to changes for up
/// to 15 s more (measured with `gateway-leader-bench run --scenario backend-restart`). Six watches
/// per replica retrying every 2 s at worst is still a light load.
fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

fn reflect<K>(api: Api<K>, changed: &Arc<Notify>, tasks: &mut JoinSet<()>) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let (reader, writer) = reflector::store();
    // The stores keep what the computation and the writer read: `managedFields` (often the
    // largest part of an object that many managers write) and kubectl's copy of the last applied
    // object are dropped before an object is stored (docs/architecture.md, "Memory").
    let stream = watcher(api, watcher::Config::default())
        .modify(|obj| {
            let meta = obj.meta_mut();
            meta.managed_fields = None;
            if let Some(a) = meta.annotations.as_mut() {
                a.remove(LAST_APPLIED);
            }
        })
        .backoff(watch_backoff());
    let stream = reflector::reflector(writer, stream);
    let changed = changed.clone();
    tasks.spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.notify_one(),
                // The watcher relists with backoff by itself; an RBAC gap shows here.
                Err(e) => warn!(%kind, error = %e, "watch failed; retrying with backoff"),
            }
        }
        debug!(%kind, "watch ended");
    });
    reader
}

/// Reads the installed Gateway API bundle version from the GatewayClass CRD, if allowed.
pub async fn bundle_version(client: &Client) -> Option<String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    match api.get_metadata(GATEWAY_CLASS_CRD).await {
        Ok(crd) => crd
            .metadata
            .annotations
            .and_then(|a| a.get(BUNDLE_VERSION_ANNOTATION).cloned()),
        Err(e) => {
            warn!(crd = GATEWAY_CLASS_CRD, error = %e,
                "cannot read the Gateway API bundle version; SupportedVersion will say so");
            None
        }
    }
}
