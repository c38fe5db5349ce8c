//! Watching what the statuses are computed from: one kube-runtime reflector per kind; the
//! Gateway API kinds only while their CRDs are installed (see the `installed` module).

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::listenersets::ListenerSet;
use gateway_api::referencegrants::ReferenceGrant;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ObjectMeta;
use kube::core::Status;
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinSet};
use tracing::{debug, warn};

use crate::compute::shared::Shared;
use crate::compute::{Served, World};
use crate::configmap::CaBundle;
use crate::desired::RouteParentStatus;
use crate::key::Crd;
use crate::secret::TlsSecret;
use crate::stored::StoredHttpRoute;
use crate::v1_6::{TcpRoute, UdpRoute};

/// The annotation on Gateway API CRDs that names their bundle version.
pub(crate) const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";
/// The CRD whose bundle version decides `SupportedVersion`.
pub(crate) const GATEWAY_CLASS_CRD: &str = "gatewayclasses.gateway.networking.k8s.io";

/// One watch's progress, as the reflector task reports it to the supervisor
/// (the `installed` module).
#[derive(Debug, Default)]
pub(crate) struct WatchState {
    /// The first list arrived: the store holds the whole kind.
    synced: AtomicBool,
    /// The watch failed (refused by RBAC, or its CRD deleted) and has not recovered yet; it
    /// keeps retrying.
    failed: AtomicBool,
    /// The watch just failed: the supervisor should check whether its CRD is still installed.
    look_again: AtomicBool,
}

/// What wakes whom: the computation on every change, the supervisor on a watch's progress.
#[derive(Clone, Default)]
struct Wake {
    changed: Arc<Notify>,
    progress: Arc<Notify>,
}

/// A running watch: its store and its progress.
type Running<K> = (Store<K>, Arc<WatchState>);

/// The store of a kind that is watched only while its CRD is installed; empty otherwise.
pub(crate) struct Slot<K: Resource + 'static>(Arc<Mutex<Option<Running<K>>>>)
where
    K::DynamicType: Eq + Hash + Clone;

impl<K: Resource + 'static> Clone for Slot<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Slot(self.0.clone())
    }
}

impl<K> Slot<K>
where
    K: Resource + Trim + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    fn new() -> Self {
        Slot(Arc::new(Mutex::new(None)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Running<K>>> {
        // A panic while holding it leaves a plain Option behind: still consistent.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn start(&self, api: Api<K>, wake: &Wake, tasks: &mut JoinSet<()>) -> AbortHandle {
        let state = Arc::new(WatchState::default());
        let (store, handle) = reflect(api, wake, state.clone(), tasks);
        *self.lock() = Some((store, state));
        handle
    }

    fn stop(&self) {
        *self.lock() = None;
    }

    /// The kind's objects once its first list is in; nothing before (or without its CRD).
    fn snapshot(&self) -> Vec<Arc<K>> {
        match &*self.lock() {
            Some((store, state)) if state.synced.load(Ordering::Acquire) => store.state(),
            _ => vec![],
        }
    }

    /// The watched copy of one object, if the kind is watched and the store holds it (also
    /// before the first list is complete: a write from it carries its `resourceVersion`).
    pub(crate) fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.lock().as_ref().and_then(|(store, _)| store.get(key))
    }

    /// Whether the kind is watched (its CRD is served).
    fn is_watched(&self) -> bool {
        self.lock().is_some()
    }

    /// The watch's state, if it runs.
    fn state(&self) -> Option<Arc<WatchState>> {
        self.lock().as_ref().map(|(_, s)| s.clone())
    }
}

/// The reflectors' stores: a consistent-enough view of everything the computation reads.
#[derive(Clone)]
pub(crate) struct Stores {
    pub(crate) gateway_classes: Slot<GatewayClass>,
    pub(crate) gateways: Slot<Gateway>,
    pub(crate) http_routes: Slot<StoredHttpRoute>,
    pub(crate) grpc_routes: Slot<GrpcRoute>,
    pub(crate) tls_routes: Slot<TlsRoute>,
    pub(crate) tcp_routes: Slot<TcpRoute>,
    pub(crate) udp_routes: Slot<UdpRoute>,
    reference_grants: Slot<ReferenceGrant>,
    pub(crate) listener_sets: Slot<ListenerSet>,
    pub(crate) backend_tls_policies: Slot<BackendTlsPolicy>,
    services: Running<Service>,
    namespaces: Running<Namespace>,
    secrets: Running<TlsSecret>,
    config_maps: Running<CaBundle>,
    wake: Wake,
}

impl Stores {
    /// A snapshot for one computation.
    pub(crate) fn world(&self, bundle_version: Option<String>) -> World {
        World {
            gateway_classes: self.gateway_classes.snapshot(),
            gateways: self.gateways.snapshot(),
            http_routes: self.http_routes.snapshot(),
            grpc_routes: self.grpc_routes.snapshot(),
            tls_routes: self.tls_routes.snapshot(),
            tcp_routes: self.tcp_routes.snapshot(),
            udp_routes: self.udp_routes.snapshot(),
            served: Served {
                tcp_route: self.tcp_routes.is_watched(),
                udp_route: self.udp_routes.is_watched(),
            },
            services: self.services.0.state(),
            reference_grants: self.reference_grants.snapshot(),
            listener_sets: self.listener_sets.snapshot(),
            namespaces: self.namespaces.0.state(),
            secrets: self.secrets.0.state(),
            backend_tls_policies: self.backend_tls_policies.snapshot(),
            config_maps: self.config_maps.0.state(),
            bundle_version,
        }
    }

    /// Starts watching `crd`'s kind on `tasks`.
    pub(crate) fn start(&self, crd: Crd, client: &Client, tasks: &mut JoinSet<()>) -> AbortHandle {
        let w = &self.wake;
        let c = || client.clone();
        match crd {
            Crd::GatewayClass => self.gateway_classes.start(Api::all(c()), w, tasks),
            Crd::Gateway => self.gateways.start(Api::all(c()), w, tasks),
            Crd::HttpRoute => self.http_routes.start(Api::all(c()), w, tasks),
            Crd::GrpcRoute => self.grpc_routes.start(Api::all(c()), w, tasks),
            Crd::TlsRoute => self.tls_routes.start(Api::all(c()), w, tasks),
            Crd::TcpRoute => self.tcp_routes.start(Api::all(c()), w, tasks),
            Crd::UdpRoute => self.udp_routes.start(Api::all(c()), w, tasks),
            Crd::ReferenceGrant => self.reference_grants.start(Api::all(c()), w, tasks),
            Crd::ListenerSet => self.listener_sets.start(Api::all(c()), w, tasks),
            Crd::BackendTlsPolicy => self.backend_tls_policies.start(Api::all(c()), w, tasks),
        }
    }

    /// Forgets `crd`'s kind (its watch is aborted by the caller); the computation runs again.
    pub(crate) fn stop(&self, crd: Crd) {
        match crd {
            Crd::GatewayClass => self.gateway_classes.stop(),
            Crd::Gateway => self.gateways.stop(),
            Crd::HttpRoute => self.http_routes.stop(),
            Crd::GrpcRoute => self.grpc_routes.stop(),
            Crd::TlsRoute => self.tls_routes.stop(),
            Crd::TcpRoute => self.tcp_routes.stop(),
            Crd::UdpRoute => self.udp_routes.stop(),
            Crd::ReferenceGrant => self.reference_grants.stop(),
            Crd::ListenerSet => self.listener_sets.stop(),
            Crd::BackendTlsPolicy => self.backend_tls_policies.stop(),
        }
        self.wake.changed.notify_one();
    }

    fn state(&self, crd: Crd) -> Option<Arc<WatchState>> {
        match crd {
            Crd::GatewayClass => self.gateway_classes.state(),
            Crd::Gateway => self.gateways.state(),
            Crd::HttpRoute => self.http_routes.state(),
            Crd::GrpcRoute => self.grpc_routes.state(),
            Crd::TlsRoute => self.tls_routes.state(),
            Crd::TcpRoute => self.tcp_routes.state(),
            Crd::UdpRoute => self.udp_routes.state(),
            Crd::ReferenceGrant => self.reference_grants.state(),
            Crd::ListenerSet => self.listener_sets.state(),
            Crd::BackendTlsPolicy => self.backend_tls_policies.state(),
        }
    }

    /// Whether the required kinds and the core kinds have their first lists and, with
    /// `optional`, every other running watch has its first list or has failed (a watch refused
    /// by RBAC must not hold the other kinds back).
    pub(crate) fn first_lists_done(&self, optional: bool) -> bool {
        let synced = |s: &WatchState| s.synced.load(Ordering::Acquire);
        let settled = |s: &WatchState| synced(s) || s.failed.load(Ordering::Acquire);
        synced(&self.services.1)
            && synced(&self.namespaces.1)
            // Without the Secrets, every HTTPS listener would look invalid for a moment.
            && synced(&self.secrets.1)
            // Likewise every BackendTLSPolicy's CA reference.
            && synced(&self.config_maps.1)
            && Crd::ALL.into_iter().all(|crd| match self.state(crd) {
                Some(s) if crd.required() => synced(&s),
                Some(s) => !optional || settled(&s),
                None => !crd.required(),
            })
    }

    /// Waits until a watch reports progress; true when one just failed, so that discovery
    /// should tell whether its CRD is still installed (the flag is cleared).
    pub(crate) async fn watch_state_changed(&self) -> bool {
        self.wake.progress.notified().await;
        let mut look = false;
        for crd in Crd::ALL {
            if let Some(s) = self.state(crd) {
                look |= s.look_again.swap(false, Ordering::AcqRel);
            }
        }
        look
    }
}

/// The core kinds' watches (always served), and empty slots for the Gateway API kinds, which
/// the `installed` module's `supervise` fills as discovery finds them. `changed` is notified on
/// every change seen.
pub(crate) fn spawn(client: &Client, changed: Arc<Notify>, tasks: &mut JoinSet<()>) -> Stores {
    let wake = Wake {
        changed,
        progress: Arc::new(Notify::new()),
    };
    let services = core_watch(Api::all(client.clone()), &wake, tasks);
    let namespaces = core_watch(Api::all(client.clone()), &wake, tasks);
    let secrets = reduced_watch(Api::all(client.clone()), TlsSecret::map_event, &wake, tasks);
    let config_maps = reduced_watch(Api::all(client.clone()), CaBundle::map_event, &wake, tasks);
    Stores {
        gateway_classes: Slot::new(),
        gateways: Slot::new(),
        http_routes: Slot::new(),
        grpc_routes: Slot::new(),
        tls_routes: Slot::new(),
        tcp_routes: Slot::new(),
        udp_routes: Slot::new(),
        reference_grants: Slot::new(),
        listener_sets: Slot::new(),
        backend_tls_policies: Slot::new(),
        services,
        namespaces,
        secrets,
        config_maps,
        wake,
    }
}

/// A watch on a kind every cluster serves.
fn core_watch<K>(api: Api<K>, wake: &Wake, tasks: &mut JoinSet<()>) -> Running<K>
where
    K: Resource + Trim + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let state = Arc::new(WatchState::default());
    let (store, _) = reflect(api, wake, state.clone(), tasks);
    (store, state)
}

/// How many Secrets (or ConfigMaps) one page of their watch's initial list holds.
///
/// Each object arrives whole (up to 1 MiB) and is reduced at once, so a page is the most such
/// data held at a time: 50 pages of at most 50 MiB, instead of kube-runtime's 500.
pub(crate) const SECRET_PAGE_SIZE: u32 = 50;

/// The watch of a core kind whose objects are reduced before they enter the store (Secrets to
/// [`TlsSecret`], ConfigMaps to [`CaBundle`]), so the store never holds their data.
fn reduced_watch<K, R>(
    api: Api<K>,
    reduce: fn(watcher::Event<K>) -> watcher::Event<R>,
    wake: &Wake,
    tasks: &mut JoinSet<()>,
) -> Running<R>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
    R: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let state = Arc::new(WatchState::default());
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().page_size(SECRET_PAGE_SIZE);
    let reduced = list_and_watch(api, config).map_ok(reduce);
    let stream = reflector::reflector(writer, reduced).backoff(watch_backoff());
    drive(
        R::kind(&()).into_owned(),
        stream,
        wake,
        state.clone(),
        tasks,
    );
    (reader, state)
}

/// How many objects one page of a paginated initial list holds (where the apiserver does not
/// stream it): a list of 50,000 routes never comes back as one response.
pub(crate) const PAGE_SIZE: u32 = 500;

/// The watch of `api`'s kind, its initial list streamed where the apiserver offers it
/// (watch-list: a watch with `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan` and
/// bookmarks, Kubernetes' `WatchList` feature, on by default since 1.32), so that neither a
/// whole list response nor a page of whole objects is held at once: each object is reduced as
/// it arrives. An apiserver that refuses such a watch (`WatchList` off: 422, or 400 from one that
/// does not know the parameters) gets `config`'s paginated list instead, from then on.
pub(crate) fn list_and_watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let streaming = with_init(watcher(api.clone(), config.clone().streaming_lists())).boxed();
    // Until the first event that is not an error, a refusal of the watch-list decides: the
    // first attempt may also fail for another reason (the apiserver not up yet).
    let fallback = Some((api, config));
    futures::stream::unfold(
        (streaming, false, fallback),
        |(mut stream, mut decided, mut fallback)| async move {
            loop {
                let item = stream.next().await?;
                if !decided {
                    if let Some(status) = refusal(&item) {
                        if let Some((api, config)) = fallback.take() {
                            let kind = K::kind(&K::DynamicType::default()).into_owned();
                            debug!(%kind, reason = %status.message,
                                "the apiserver does not stream initial lists; listing in pages");
                            stream = watcher(api, config).boxed();
                            decided = true;
                            continue;
                        }
                    }
                    decided = item.is_ok();
                }
                return Some((item, (stream, decided, fallback)));
            }
        },
    )
}

/// The apiserver's answer when it refuses a watch-list: the request is invalid (422; 400 from
/// one that does not know its parameters), as the watch's start or as its first event.
fn refusal<K>(item: &watcher::Result<watcher::Event<K>>) -> Option<&Status> {
    let status = match item {
        Err(
            watcher::Error::WatchStartFailed(kube::Error::Api(status))
            | watcher::Error::WatchFailed(kube::Error::Api(status))
            | watcher::Error::WatchError(status),
        ) => status,
        _ => return None,
    };
    matches!(status.code, 400 | 422).then_some(&**status)
}

/// Adds the `Init` that kube-runtime's watcher does not send before a streamed initial list: a
/// store starts each initial list from an empty buffer on `Init`, and a list that failed half
/// way (its watch could not start again, or expired) must not leave the objects it had brought
/// so far in the next one.
fn with_init<K: Send + 'static>(
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send {
    let mut listing = false;
    stream.flat_map(move |item| {
        let starts = matches!(
            item,
            Ok(watcher::Event::InitApply(_) | watcher::Event::InitDone)
        ) && !listing;
        match &item {
            Ok(watcher::Event::InitApply(_)) => listing = true,
            Ok(watcher::Event::InitDone) | Err(watcher::Error::WatchStartFailed(_)) => {
                listing = false;
            }
            Err(watcher::Error::WatchError(status)) if status.code == 410 => listing = false,
            _ => {}
        }
        let init = starts.then_some(Ok(watcher::Event::Init));
        futures::stream::iter(init.into_iter().chain(std::iter::once(item)))
    })
}

/// How a failed watch retries: from 250 ms, doubling, jittered, at most 2 s apart.
///
/// kube-runtime's default (client-go's reflector: up to 30 s) is kind to a struggling apiserver,
/// but after an apiserver restart of a few seconds it leaves a new leader blind to changes long
/// after the apiserver is back (`gateway-leader-bench run --scenario backend-restart` shows it;
/// docs/benchmarks.md). Twelve watches per replica retrying every 2 s at worst is still a light
/// load.
fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// What a kind's store can do without: parts of its objects that neither the computation nor
/// the writer reads. The writer sends the stored copy back whole, but to the `status`
/// subresource, which takes nothing but the status from it.
pub trait Trim {
    /// Drops what is not read.
    fn trim(&mut self) {}

    /// Makes parts equal to those of objects `reducer` saw before one copy.
    fn share(&mut self, _reducer: &mut Reducer) {}
}

/// Kinds whose objects are kept whole (but for `managedFields` and the annotations).
macro_rules! keep_whole {
    ($($kind:ty),+ $(,)?) => {$( impl Trim for $kind {} )+};
}

keep_whole!(
    GatewayClass,
    Gateway,
    ReferenceGrant,
    ListenerSet,
    BackendTlsPolicy,
    Service,
    Namespace,
);

/// What no route kind's status depends on in its metadata: its uid (the writer's
/// `resourceVersion` already tells a recreated object apart), labels, owners and finalizers.
/// Routes are the objects a cluster has by the tens of thousands.
fn trim_route_meta(meta: &mut ObjectMeta) {
    meta.uid = None;
    meta.labels = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
}

/// A rule's matches decide which requests it serves, which no status says anything about; they
/// are often most of a route (10,000 routes of one match each: about 2 MiB). Of its filters
/// (rule and backendRef ones), only RequestMirror names a backend that ResolvedRefs checks;
/// its timeouts and name are not read either.
impl Trim for StoredHttpRoute {
    fn share(&mut self, reducer: &mut Reducer) {
        if let Some(status) = &mut self.status {
            reducer.share_parents(&mut status.parents);
        }
    }

    fn trim(&mut self) {
        trim_route_meta(&mut self.metadata);
        for rule in self.spec.rules.iter_mut().flatten() {
            rule.matches = None;
            rule.name = None;
            rule.timeouts = None;
            keep_mirrors(&mut rule.filters, |f| f.request_mirror.is_some());
            for backend in rule.backend_refs.iter_mut().flatten() {
                keep_mirrors(&mut backend.filters, |f| f.request_mirror.is_some());
            }
        }
    }
}

impl Trim for GrpcRoute {
    fn trim(&mut self) {
        trim_route_meta(&mut self.metadata);
        for rule in self.spec.rules.iter_mut().flatten() {
            rule.matches = None;
            rule.name = None;
            keep_mirrors(&mut rule.filters, |f| f.request_mirror.is_some());
            for backend in rule.backend_refs.iter_mut().flatten() {
                keep_mirrors(&mut backend.filters, |f| f.request_mirror.is_some());
            }
        }
    }
}

/// Keeps the RequestMirror filters of `filters` (`mirror` tells them), the only ones read.
fn keep_mirrors<F>(filters: &mut Option<Vec<F>>, mirror: impl Fn(&F) -> bool) {
    if let Some(list) = filters {
        list.retain(mirror);
        if list.is_empty() {
            *filters = None;
        } else {
            list.shrink_to_fit();
        }
    }
}

/// TLSRoutes, TCPRoutes and UDPRoutes have nothing in their spec that is not read.
macro_rules! trim_route_meta_only {
    ($($kind:ty),+ $(,)?) => {$(
        impl Trim for $kind {
            fn trim(&mut self) {
                trim_route_meta(&mut self.metadata);
            }
        }
    )+};
}

trim_route_meta_only!(TlsRoute, TcpRoute, UdpRoute);

/// Reduces objects to what the stores keep of them: the computation and the writer read
/// neither `managedFields` (often the largest part of an object that many managers write) nor
/// the annotations (kubectl's copy of the last applied object is the big one), nor what
/// [`Trim`] drops; and of equal route statuses one copy is kept (docs/architecture.md,
/// "Memory"). Each watch has its own.
#[derive(Debug, Default)]
pub struct Reducer {
    statuses: Shared,
    /// How many distinct statuses were kept after the last prune.
    kept: usize,
    /// How many statuses were shared since.
    added: usize,
}

impl Reducer {
    /// Reduces `obj`.
    pub fn reduce<K: Resource + Trim>(&mut self, obj: &mut K) {
        let meta = obj.meta_mut();
        meta.managed_fields = None;
        meta.annotations = None;
        obj.trim();
        obj.share(self);
    }

    /// Makes `parents` the copy kept of equal entries, or keeps it as that copy.
    pub(crate) fn share_parents(&mut self, parents: &mut Arc<[RouteParentStatus]>) {
        self.statuses.share_parents(parents);
        self.added += 1;
        // Copies no route holds any more (changed or deleted since) are let go once as many
        // statuses went through as were kept after the last prune: O(1) a status, amortised.
        if self.added > self.kept.max(1024) {
            self.statuses.prune();
            self.kept = self.statuses.len();
            self.added = 0;
        }
    }

    /// How many distinct statuses are kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.statuses.len()
    }
}

fn reflect<K>(
    api: Api<K>,
    wake: &Wake,
    state: Arc<WatchState>,
    tasks: &mut JoinSet<()>,
) -> (Store<K>, AbortHandle)
where
    K: Resource + Trim + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let (reader, writer) = reflector::store();
    // The writer sends its copy to the status subresource, which takes only the status from it,
    // so the stores can keep less than the whole object.
    let config = watcher::Config::default().page_size(PAGE_SIZE);
    let mut reducer = Reducer::default();
    let stream = list_and_watch(api, config)
        .modify(move |obj| reducer.reduce(obj))
        .backoff(watch_backoff());
    let stream = reflector::reflector(writer, stream);
    let handle = drive(kind, stream, wake, state, tasks);
    (reader, handle)
}

/// Runs a reflector's stream on `tasks`: every event wakes the computation, and the watch's
/// progress (first list, failure) is reported in `state`.
fn drive<K>(
    kind: String,
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    wake: &Wake,
    state: Arc<WatchState>,
    tasks: &mut JoinSet<()>,
) -> AbortHandle
where
    K: Send + 'static,
{
    let wake = wake.clone();
    tasks.spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    // `Init` starts every (re)list, also one that will fail again: only what
                    // follows it shows the watch works.
                    if !matches!(event, watcher::Event::Init) {
                        state.failed.store(false, Ordering::Release);
                    }
                    if matches!(event, watcher::Event::InitDone)
                        && !state.synced.swap(true, Ordering::AcqRel)
                    {
                        wake.progress.notify_one();
                    }
                    wake.changed.notify_one();
                }
                // A first failure may be a deleted CRD (its watch then fails with a bare 404
                // body): discovery is asked first, and stops this watch if so, rather than
                // logging a failure every retry.
                Err(e) if !state.failed.swap(true, Ordering::AcqRel) => {
                    debug!(
                        %kind,
                        error = %e,
                        "watch failed; checking that its kind is still served"
                    );
                    state.look_again.store(true, Ordering::Release);
                    wake.progress.notify_one();
                }
                // The watcher relists with backoff by itself; an RBAC gap shows here.
                Err(e) => warn!(%kind, error = %e, "watch failed; retrying with backoff"),
            }
        }
        debug!(%kind, "watch ended");
    })
}

/// Reads the installed Gateway API bundle version from the GatewayClass CRD, if allowed.
pub(crate) async fn bundle_version(client: &Client) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_route_keeps_everything_the_computation_reads() {
        let mut route: StoredHttpRoute = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "ns", "generation": 2, "uid": "u",
                         "creationTimestamp": "2026-12-03T19:00:00Z", "labels": {"a": "b"}},
            "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["a.example.com"],
                     "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                                "name": "first",
                                "backendRefs": [{"name": "web", "port": 80, "filters": [
                                    {"type": "RequestHeaderModifier",
                                     "requestHeaderModifier": {"set": [{"name": "a",
                                                                        "value": "b"}]}}]}],
                                "filters": [{"type": "RequestMirror",
                                             "requestMirror": {"backendRef": {"name": "m",
                                                                              "port": 80}}},
                                            {"type": "URLRewrite",
                                             "urlRewrite": {"hostname": "b.example.com"}}]}]},
            "status": {"parents": [{"controllerName": "x", "parentRef": {"name": "gw"},
                                    "conditions": []}]}
        }))
        .expect("route");
        let before = serde_json::to_value(&route).expect("json");
        route.trim();
        // The metadata the computation reads (name, namespace, generation, creationTimestamp
        // for precedence), parentRefs, hostnames, backendRefs, mirrors and the status stay.
        let mut expected = before;
        let meta = expected["metadata"].as_object_mut().expect("metadata");
        meta.remove("uid");
        meta.remove("labels");
        let rule = expected["spec"]["rules"][0]
            .as_object_mut()
            .expect("a rule");
        rule.remove("matches");
        rule.remove("name");
        rule["backendRefs"][0]
            .as_object_mut()
            .expect("a backendRef")
            .remove("filters");
        rule["filters"].as_array_mut().expect("filters").pop();
        assert_eq!(serde_json::to_value(&route).expect("json"), expected);
    }

    fn written(name: &str, second: u32) -> StoredHttpRoute {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "generation": 1,
                         "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"parentRefs": [{"name": "gw"}]},
            "status": {"parents": [{"controllerName": "x", "parentRef": {"name": "gw"},
                                    "conditions": [{"type": "Accepted", "status": "True",
                                                    "reason": "Accepted", "message": "",
                                                    "observedGeneration": 1,
                                                    "lastTransitionTime":
                                                        format!("2026-12-05T01:00:{second:02}Z")}]}]}
        }))
        .expect("route")
    }

    fn parents(route: &StoredHttpRoute) -> &Arc<[RouteParentStatus]> {
        &route.status.as_ref().expect("a status").parents
    }

    #[test]
    fn routes_with_equal_statuses_share_one_copy() {
        let mut reducer = Reducer::default();
        let mut routes: Vec<StoredHttpRoute> = vec![written("a", 1), written("b", 1)];
        routes.push(written("c", 2));
        for r in &mut routes {
            reducer.reduce(r);
        }
        assert!(Arc::ptr_eq(parents(&routes[0]), parents(&routes[1])));
        // Written a second later: a status of its own, and still the one it was.
        assert!(!Arc::ptr_eq(parents(&routes[0]), parents(&routes[2])));
        assert_eq!(parents(&routes[2])[..], parents(&written("c", 2))[..]);
        assert_eq!(routes[0].metadata.managed_fields, None);
        assert_eq!(reducer.kept(), 2);
    }

    #[test]
    fn a_status_no_route_holds_is_let_go() {
        let mut reducer = Reducer::default();
        let mut gone = written("gone", 59);
        reducer.reduce(&mut gone);
        drop(gone);
        // Enough statuses go through to prune: the copy `kept` holds stays, the gone one not.
        let mut kept = written("kept", 1);
        reducer.reduce(&mut kept);
        for _ in 0..1024 {
            reducer.reduce(&mut written("passing", 1));
        }
        assert_eq!(reducer.kept(), 1);
        assert_eq!(Arc::strong_count(parents(&kept)), 2);
    }
}
