//! [`StatusController`]: the watches, the computation and the guarded writer, started and
//! stopped together.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use leader_lock::readiness::Readiness;
use leader_lock::Leadership;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::cache::StatusCache;
use crate::installed;
use crate::writer::{StatusWriter, WriterConfig};
use crate::{compute, observed, watch};

/// The running status writer: watches, the computation and the guarded writer.
pub struct StatusController {
    cache: Arc<StatusCache>,
    cancel: CancellationToken,
    background: JoinSet<()>,
    writer: Option<JoinHandle<()>>,
}

impl StatusController {
    /// Starts watching, computing and (while `leadership` is valid) writing.
    ///
    /// `client` must be allowed to list and watch the Gateway API objects, Services,
    /// Namespaces, Secrets (the listeners' certificates; see
    /// [`TlsSecret`](crate::compute::TlsSecret)) and ConfigMaps (the BackendTLSPolicies' CA
    /// certificates; see [`CaBundle`](crate::compute::CaBundle)), and to update the
    /// Gateway API objects' status; the writes are guarded here already, so it need not be a
    /// gated client. `readiness` turns [`Readiness::Ready`] once every required Gateway API kind
    /// is served and its watch has its initial list; until then it says what is missing (a
    /// `/readyz` answer). Kinds whose CRDs are not installed are skipped and picked up when they
    /// appear.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(kube: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use gateway_leader_status::{StatusController, WriterConfig};
    /// use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
    ///
    /// // Any lock: a Lease (leader-lock-kubernetes) in production.
    /// let elector = Elector::spawn(
    ///     Arc::new(MemoryStore::new().lock("statuses")),
    ///     ElectorConfig {
    ///         identity: Identity::new("pod-a"),
    ///         timing: Timing::default(),
    ///         release_on_shutdown: true,
    ///     },
    /// )?;
    /// let config = WriterConfig::default().with_controller_name("example.net/gateway-controller");
    /// let (readiness, _ready) = tokio::sync::watch::channel(Default::default());
    /// let status = StatusController::start(kube, elector.leadership(), config, readiness);
    /// // ... until a shutdown signal: stop writing while the elector drains and releases the
    /// // lock, then tear the watches down.
    /// let mut status = status;
    /// let ((), released) = tokio::join!(status.stop_writing(), elector.shutdown());
    /// status.stop().await;
    /// released?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn start(
        client: Client,
        leadership: Leadership,
        config: WriterConfig,
        readiness: tokio::sync::watch::Sender<Readiness>,
    ) -> Self {
        let cache = Arc::new(StatusCache::new());
        let cancel = CancellationToken::new();
        let changed = Arc::new(Notify::new());
        let mut background = JoinSet::new();
        let stores = watch::spawn(&client, changed.clone(), &mut background);
        let looked = Arc::new(Notify::new());
        readiness.send_replace(installed::not_synced());
        let ready = readiness.subscribe();
        background.spawn(installed::supervise(
            client.clone(),
            stores.clone(),
            readiness,
            looked.clone(),
        ));
        background.spawn(compute_loop(
            client.clone(),
            stores.clone(),
            Wakes { changed, looked },
            cache.clone(),
            compute::Computation::new(config.controller_name.as_str())
                .with_addresses_from(config.addresses_from.clone()),
            ready,
            cancel.child_token(),
        ));
        let writer =
            StatusWriter::new(client, cache.clone(), leadership, config).with_watched(stores);
        let writer = Some(tokio::spawn(writer.run(cancel.child_token())));
        StatusController {
            cache,
            cancel,
            background,
            writer,
        }
    }

    /// The desired statuses as this replica computes them.
    pub fn cache(&self) -> &Arc<StatusCache> {
        &self.cache
    }

    /// Stops writing: no new writes; writes in flight finish within the writer's shutdown
    /// grace. The computation stops too (nobody is left to compute for, and a computation must
    /// not take the CPU from the release that follows); the watches go on until
    /// [`stop`](Self::stop), so a caller can release its lock between the two and leave the
    /// teardown for after (docs/architecture.md, "Leadership changes and shutdown").
    pub async fn stop_writing(&mut self) {
        self.cancel.cancel();
        if let Some(writer) = self.writer.take() {
            let _ = writer.await;
        }
    }

    /// Stops: no new writes; writes in flight finish within the writer's shutdown grace; then
    /// the watches and the computation end.
    pub async fn stop(mut self) {
        self.stop_writing().await;
        self.background.shutdown().await;
    }
}

/// What wakes the computation: a change seen by a watch, or a change of the installed kinds.
struct Wakes {
    changed: Arc<Notify>,
    looked: Arc<Notify>,
}

/// Computes the statuses again whenever a watch saw a change, only for what changed; changes
/// arriving meanwhile fold into the next run, so a burst costs one computation, not one per
/// event. The bundle version is read again whenever the installed kinds change.
async fn compute_loop(
    client: Client,
    stores: watch::Stores,
    wakes: Wakes,
    cache: Arc<StatusCache>,
    mut computation: compute::Computation,
    mut readiness: tokio::sync::watch::Receiver<Readiness>,
    cancel: CancellationToken,
) {
    tokio::select! {
        _ = cancel.cancelled() => return,
        r = readiness.wait_for(|r| *r == Readiness::Ready) => if r.is_err() { return },
    }
    let mut bundle_version = watch::bundle_version(&client).await;
    info!(
        bundle_version = bundle_version.as_deref().unwrap_or("unknown"),
        "watches synced; computing statuses"
    );
    let controller_name = computation.controller_name().to_string();
    let mut first = true;
    let mut drift = observed::Drift::default();
    loop {
        let began = Instant::now();
        // Only what changed is computed again (routes whose object changed, or every route when
        // anything else did), and only that is compared and cached; the watches tell which
        // routes changed, so an unchanged route costs nothing at all.
        let (world, changes) = stores.world(bundle_version.clone());
        let update = computation.run_changes(&world, &changes);
        drop((world, changes));
        let computed = began.elapsed();
        // A watched copy that no longer shows its desired status (written by someone else, or
        // seen late) is a change to write, like a new desired status.
        let found = drift.check(&stores, &update.desired, &controller_name);
        drift.forget(&update.removed);
        let checked = began.elapsed();
        let routes = update.routes_computed;
        let marked =
            cache.apply(update.desired, &update.removed) + cache.mark_dirty(&found.drifted);
        // What the copies show needs no check from a new leader (until either side changes).
        cache.mark_shown(&found.shown);
        // Where a cycle's time goes (the scale bench reads it at 10,000 routes).
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (compute_ms, drift_ms) = (ms(computed), ms(checked - computed));
        let cache_ms = ms(began.elapsed() - checked);
        if first {
            info!(
                objects = cache.len(),
                routes, compute_ms, drift_ms, cache_ms, "first statuses computed"
            );
            first = false;
        } else {
            debug!(
                changed = marked,
                objects = cache.len(),
                routes,
                compute_ms,
                drift_ms,
                cache_ms,
                "statuses computed"
            );
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = wakes.changed.notified() => {}
            _ = wakes.looked.notified() => {
                bundle_version = watch::bundle_version(&client).await;
            }
        }
    }
}
