//! Watching what the statuses are computed from: one kube-runtime reflector per kind; the
//! Gateway API kinds only while their CRDs are installed (see the `installed` module).

use std::collections::HashSet;
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
use kube::core::Status;
use kube::runtime::reflector::{self, Lookup, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinSet};
use tracing::{debug, warn};

use crate::compute::{Changed, Changes, RouteChanges, Served, World};
use crate::configmap::CaBundle;
use crate::key::Crd;
use crate::reduce::{Reducer, Trim};
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

/// The store of a kind that is watched only while its CRD is installed; empty otherwise. A
/// route kind's slot also notes which of its objects changed since the computation last asked
/// ([`Slot::changes`]), so that a change of one route costs the computation that route.
pub(crate) struct Slot<K: Resource + 'static>(Arc<Mutex<SlotState<K>>>)
where
    K::DynamicType: Eq + Hash + Clone;

struct SlotState<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    running: Option<Running<K>>,
    /// What changed since the computation last asked; `None` for the kinds it reads whole.
    journal: Option<Journal<K>>,
}

/// The objects of a kind that changed since the computation last asked.
struct Journal<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// Anything may have changed: the kind was listed (again), started or stopped.
    whole: bool,
    /// Objects applied or deleted since; each at most once, so it holds no more entries than
    /// the kind has objects.
    changed: HashSet<ObjectRef<K>>,
}

impl<K: Resource + 'static> Journal<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn whole() -> Self {
        Journal {
            whole: true,
            changed: HashSet::new(),
        }
    }
}

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
        Slot(Arc::new(Mutex::new(SlotState {
            running: None,
            journal: None,
        })))
    }

    /// A slot that notes what changed, for [`Slot::changes`].
    fn journaled() -> Self {
        Slot(Arc::new(Mutex::new(SlotState {
            running: None,
            journal: Some(Journal::whole()),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState<K>> {
        // A panic while holding it leaves consistent state behind: each change is one
        // assignment or one insertion.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn start(&self, api: Api<K>, wake: &Wake, tasks: &mut JoinSet<()>) -> AbortHandle {
        let state = Arc::new(WatchState::default());
        let slot = self.clone();
        let note = move |event: &watcher::Event<K>| slot.note(event);
        let (store, handle) = reflect(api, wake, state.clone(), note, tasks);
        let mut s = self.lock();
        s.running = Some((store, state));
        if let Some(j) = &mut s.journal {
            *j = Journal::whole();
        }
        handle
    }

    fn stop(&self) {
        let mut s = self.lock();
        s.running = None;
        if let Some(j) = &mut s.journal {
            *j = Journal::whole();
        }
    }

    /// Notes what a watch event changed (after the store took it in).
    fn note(&self, event: &watcher::Event<K>) {
        let mut s = self.lock();
        let Some(j) = &mut s.journal else { return };
        match event {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) if !j.whole => {
                // Name and namespace only: `from_obj` would also copy the resourceVersion and
                // uid, two more allocations per event that the lookup does not use.
                let meta = o.meta();
                if let Some(name) = &meta.name {
                    let r = ObjectRef::new(name);
                    j.changed.insert(match &meta.namespace {
                        Some(ns) => r.within(ns),
                        None => r,
                    });
                }
            }
            // A (re)list may have dropped objects whose deletion no event told.
            watcher::Event::InitDone => *j = Journal::whole(),
            _ => {}
        }
    }

    /// The kind's objects once its first list is in; nothing before (or without its CRD).
    fn snapshot(&self) -> Vec<Arc<K>> {
        match &self.lock().running {
            Some((store, state)) if state.synced.load(Ordering::Acquire) => store.state(),
            _ => vec![],
        }
    }

    /// What changed since the last call, for a journaled slot: every object after a (re)list,
    /// a start or a stop (none before the first list is in), else each object applied or
    /// deleted since, as the store holds it now. A slot without a journal gives every object.
    pub(crate) fn changes(&self) -> Changes<K> {
        let mut s = self.lock();
        let SlotState { running, journal } = &mut *s;
        let store = running
            .as_ref()
            .filter(|(_, state)| state.synced.load(Ordering::Acquire))
            .map(|(store, _)| store);
        let all = || Changes::All(store.map_or_else(Vec::new, Store::state));
        let Some(j) = journal else {
            return all();
        };
        if std::mem::take(&mut j.whole) {
            j.changed = HashSet::new();
            return all();
        }
        let changed = std::mem::take(&mut j.changed);
        let Some(store) = store else {
            return Changes::Only(vec![]);
        };
        let changed = changed.into_iter().filter_map(|r| {
            let object = store.get(&r);
            Some(Changed {
                namespace: r.namespace?,
                name: r.name,
                object,
            })
        });
        Changes::Only(changed.collect())
    }

    /// The watched copy of one object, if the kind is watched and the store holds it (also
    /// before the first list is complete: a write from it carries its `resourceVersion`).
    pub(crate) fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        let s = self.lock();
        s.running.as_ref().and_then(|(store, _)| store.get(key))
    }

    /// Whether the kind is watched (its CRD is served).
    fn is_watched(&self) -> bool {
        self.lock().running.is_some()
    }

    /// The watch's state, if it runs.
    fn state(&self) -> Option<Arc<WatchState>> {
        self.lock().running.as_ref().map(|(_, s)| s.clone())
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
    /// A snapshot for one computation of everything but the routes (the `World`'s route lists
    /// are empty), and what changed among the routes since the last call.
    pub(crate) fn world(&self, bundle_version: Option<String>) -> (World, RouteChanges) {
        let changes = RouteChanges {
            http_routes: self.http_routes.changes(),
            grpc_routes: self.grpc_routes.changes(),
            tls_routes: self.tls_routes.changes(),
            tcp_routes: self.tcp_routes.changes(),
            udp_routes: self.udp_routes.changes(),
        };
        let world = World {
            gateway_classes: self.gateway_classes.snapshot(),
            gateways: self.gateways.snapshot(),
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
            ..World::default()
        };
        (world, changes)
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
        http_routes: Slot::journaled(),
        grpc_routes: Slot::journaled(),
        tls_routes: Slot::journaled(),
        tcp_routes: Slot::journaled(),
        udp_routes: Slot::journaled(),
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
    let (store, _) = reflect(api, wake, state.clone(), |_| {}, tasks);
    (store, state)
}

/// How many Secrets (or ConfigMaps) one page of their watch's initial list holds.
///
/// Each object arrives whole (up to 1 MiB) and is reduced at once, so a page is the most such
/// data held at a time: 50 objects, at most 50 MiB, against 500 MiB at kube-runtime's 500.
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
        |_| {},
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

/// A reflector of `api`'s kind on `tasks`; `note` sees each event after the store took it in.
fn reflect<K>(
    api: Api<K>,
    wake: &Wake,
    state: Arc<WatchState>,
    note: impl FnMut(&watcher::Event<K>) + Send + 'static,
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
    let handle = drive(kind, stream, wake, state, note, tasks);
    (reader, handle)
}

/// Runs a reflector's stream on `tasks`: every event is shown to `note` and wakes the
/// computation, and the watch's progress (first list, failure) is reported in `state`.
fn drive<K>(
    kind: String,
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    wake: &Wake,
    state: Arc<WatchState>,
    mut note: impl FnMut(&watcher::Event<K>) + Send + 'static,
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
                    note(&event);
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
mod tests;
