//! Watching what the statuses are computed from: one kube-runtime reflector per kind.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::{Stream, TryStreamExt};
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::compute::World;
use crate::secret::TlsSecret;

/// The annotation on Gateway API CRDs that names their bundle version.
pub const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";
/// The CRD whose bundle version decides `SupportedVersion`.
pub const GATEWAY_CLASS_CRD: &str = "gatewayclasses.gateway.networking.k8s.io";

/// The reflectors' stores: a consistent-enough view of everything the computation reads.
#[derive(Clone)]
pub struct Stores {
    gateway_classes: Store<GatewayClass>,
    gateways: Store<Gateway>,
    http_routes: Store<HttpRoute>,
    services: Store<Service>,
    reference_grants: Store<ReferenceGrant>,
    namespaces: Store<Namespace>,
    secrets: Store<TlsSecret>,
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
        let _ = self.secrets.wait_until_ready().await;
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
            secrets: self.secrets.state(),
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
        secrets: reflect_secrets(Api::all(client.clone()), &changed, tasks),
    }
}

/// How many Secrets one page of the Secret watch's initial list holds.
///
/// Each Secret arrives whole (up to 1 MiB) and is reduced at once, so a page is the most Secret
/// data held at a time: 50 pages of at most 50 MiB, instead of kube-runtime's 500.
pub const SECRET_PAGE_SIZE: u32 = 50;

/// How a failed watch retries: from 250 ms, doubling, jittered, at most 2 s apart.
///
/// kube-runtime's default (client-go's reflector: up to 30 s) is kind to a struggling apiserver,
/// but after an apiserver restart of a few seconds it leaves a new leader blind to changes for up
/// to 15 s more (measured with `gateway-leader-bench run --scenario backend-restart`). Seven watches
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
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .backoff(watch_backoff());
    drive(
        K::kind(&K::DynamicType::default()).into_owned(),
        stream,
        changed,
        tasks,
    );
    reader
}

/// Like [`reflect`], for Secrets: each is reduced to a [`TlsSecret`] before it enters the store,
/// so the store never holds a Secret's data.
fn reflect_secrets(
    api: Api<Secret>,
    changed: &Arc<Notify>,
    tasks: &mut JoinSet<()>,
) -> Store<TlsSecret> {
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().page_size(SECRET_PAGE_SIZE);
    let reduced = watcher(api, config).map_ok(TlsSecret::map_event);
    let stream = reflector::reflector(writer, reduced).backoff(watch_backoff());
    drive(TlsSecret::kind(&()).into_owned(), stream, changed, tasks);
    reader
}

/// Runs a reflector's stream on `tasks`, notifying `changed` on every event.
fn drive<K>(
    kind: String,
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    changed: &Arc<Notify>,
    tasks: &mut JoinSet<()>,
) where
    K: Send + 'static,
{
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
