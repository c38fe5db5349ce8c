//! The guarded writer: writes dirty statuses while, and only while, this replica validly leads.
//!
//! Invariants:
//! - Every request goes out inside [`Leadership::run`]: it starts only while leadership is valid,
//!   is abandoned at the validity deadline, and checks leadership again right before it is sent.
//! - Every write is a read-modify-write of `/status` carrying the object's `resourceVersion`, so
//!   a concurrent change makes it fail with a conflict instead of overwriting; conflicts and
//!   server errors re-read and retry with backoff.
//! - A new leadership (a new term) re-checks every cached status at once.
//! - Nothing is dropped: a write that could not be made is requeued (at once when leadership
//!   ended, after a delay when the server kept failing) and reported in the log.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::listenersets::ListenerSet;
use gateway_api::tlsroutes::TlsRoute;
use gateway_leader_log::{field, message};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client, Resource};
use leader_lock::leadership::{GuardedError, NotLeader};
use leader_lock::{Leadership, Term};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::cache::StatusCache;
use crate::compute::AddressService;
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};
use crate::merge::{Merge, StatusObject};
use crate::metrics::{KindLabel, StatusMetrics};
use crate::observed::{self, Watched};
use crate::stored::StoredHttpRoute;
use crate::v1_6::{TcpRoute, UdpRoute};
use crate::watch::Stores;

/// The Gateway API `controllerName` the status writer serves unless told otherwise.
pub const DEFAULT_CONTROLLER_NAME: &str = "gateway-leader.dev/gateway-controller";

/// How the status writer runs: a plain struct with a [`Default`] and one `with_*` setter per
/// field.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use gateway_leader_status::WriterConfig;
///
/// let config = WriterConfig::default()
///     .with_controller_name("example.net/gateway-controller")
///     .with_field_manager("my-controller/pod-a")
///     .with_identity("pod-a")
///     .with_concurrency(8)
///     .with_shutdown_grace(Duration::from_secs(5));
/// assert_eq!(config.controller_name, "example.net/gateway-controller");
/// assert_eq!(config.concurrency, 8);
/// ```
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Our Gateway API `controllerName`: only objects of GatewayClasses with it are ours, and
    /// only `status.parents` entries with it are touched [default: [`DEFAULT_CONTROLLER_NAME`]].
    pub controller_name: String,
    /// The Service whose addresses are the Gateways' addresses (`status.addresses`, and what
    /// `spec.addresses` may ask for) [default: none: no addresses are reported, and a Gateway
    /// that asks for some is not accepted].
    pub addresses_from: Option<AddressService>,
    /// The field manager of every write; it names the writer in `managedFields`
    /// [default: `gateway-leader`].
    pub field_manager: String,
    /// This replica's identity, for the log lines of writes [default: empty].
    pub identity: String,
    /// How many writes may be in flight at once [default: 32: about where more no longer raise
    /// the apiserver's throughput, and a writer that keeps only as many writes in flight as the
    /// client changing the routes does writes their statuses only about as fast as the changes
    /// arrive, finishing well after them (docs/benchmarks.md, "The curve")].
    pub concurrency: usize,
    /// Delay before a write that kept failing on the server is tried again [default: 5 s].
    pub requeue_after: Duration,
    /// On shutdown, how long writes in flight may take to finish before they are abandoned
    /// [default: 5 s].
    pub shutdown_grace: Duration,
    /// Where writes, failures and refusals are counted [default: metrics served nowhere; see
    /// [`StatusMetrics::register`]].
    pub metrics: Arc<StatusMetrics>,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            controller_name: DEFAULT_CONTROLLER_NAME.to_string(),
            addresses_from: None,
            field_manager: "gateway-leader".to_string(),
            identity: String::new(),
            concurrency: 32,
            requeue_after: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
            metrics: Arc::default(),
        }
    }
}

impl WriterConfig {
    /// Sets [`WriterConfig::controller_name`].
    #[must_use]
    pub fn with_controller_name(mut self, name: impl Into<String>) -> Self {
        self.controller_name = name.into();
        self
    }

    /// Sets [`WriterConfig::addresses_from`].
    #[must_use]
    pub fn with_addresses_from(mut self, service: Option<AddressService>) -> Self {
        self.addresses_from = service;
        self
    }

    /// Sets [`WriterConfig::field_manager`].
    #[must_use]
    pub fn with_field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = manager.into();
        self
    }

    /// Sets [`WriterConfig::identity`].
    #[must_use]
    pub fn with_identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// Sets [`WriterConfig::concurrency`] (at least 1).
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Sets [`WriterConfig::requeue_after`].
    #[must_use]
    pub fn with_requeue_after(mut self, delay: Duration) -> Self {
        self.requeue_after = delay;
        self
    }

    /// Sets [`WriterConfig::shutdown_grace`].
    #[must_use]
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Sets [`WriterConfig::metrics`].
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<StatusMetrics>) -> Self {
        self.metrics = metrics;
        self
    }
}

/// What one write found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Written {
    /// The status was written under `term`.
    Sent {
        /// The term the write carried.
        term: Term,
    },
    /// The object already said what we want: nothing sent.
    Unchanged,
    /// Our conditions already observed a newer generation: nothing sent.
    Stale,
    /// The object is gone: nothing to write.
    Gone,
}

/// Why one write failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    /// This replica may not write (any more): the next leader writes it.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The write was abandoned at the validity deadline of its term.
    #[error("abandoned at the validity deadline of term {0}")]
    Deadline(Term),
    /// The apiserver refused or failed the request.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The desired status does not fit the object's kind (a bug, never sent).
    #[error("the desired status is for another kind")]
    WrongKind,
}

impl WriteError {
    /// Worth retrying at once with backoff: conflicts, throttling, server and transport errors.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            WriteError::Kube(kube::Error::Api(s)) => {
                s.code == 409 || s.code == 429 || s.code >= 500
            }
            WriteError::Kube(_) => true,
            _ => false,
        }
    }

    /// Leadership ended: not the write's fault, and not for this replica to retry.
    pub(crate) fn is_leadership(&self) -> bool {
        matches!(self, WriteError::NotLeader(_) | WriteError::Deadline(_))
    }
}

impl From<GuardedError<WriteError>> for WriteError {
    fn from(e: GuardedError<WriteError>) -> Self {
        match e {
            GuardedError::NotLeader(n) => WriteError::NotLeader(n),
            GuardedError::Deadline { term } => WriteError::Deadline(term),
            GuardedError::Write(w) => w,
            // A variant added to leader-lock later: treat it as a leadership stop, the safe side.
            _ => WriteError::NotLeader(NotLeader::ShuttingDown),
        }
    }
}

/// Writes dirty statuses from the cache while this replica leads.
pub(crate) struct StatusWriter {
    client: Client,
    cache: Arc<StatusCache>,
    leadership: Leadership,
    config: Arc<WriterConfig>,
    watched: Option<Stores>,
}

impl StatusWriter {
    /// A writer over `cache`, guarded by `leadership`.
    pub(crate) fn new(
        client: Client,
        cache: Arc<StatusCache>,
        leadership: Leadership,
        config: WriterConfig,
    ) -> Self {
        StatusWriter {
            client,
            cache,
            leadership,
            config: Arc::new(config),
            watched: None,
        }
    }

    /// Writes from the watched copies in `stores`: a write merges into the copy the watch holds
    /// and sends it with that copy's `resourceVersion`, re-reading only on a conflict, and a
    /// status that is already right costs no request. Without it every write reads first.
    #[must_use]
    pub(crate) fn with_watched(mut self, stores: Stores) -> Self {
        self.watched = Some(stores);
        self
    }

    /// Runs until `cancel`; then lets writes in flight finish within the shutdown grace.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut states = self.leadership.subscribe();
        let mut leading: Option<Term> = None;
        let mut sweep = Sweep::default();
        let mut tasks: JoinSet<(ObjectKey, Result<Written, WriteError>)> = JoinSet::new();
        let mut busy: HashSet<ObjectKey> = HashSet::new();
        let limit = self.config.concurrency.max(1);
        loop {
            // 1. Who are we now? A permit is only a question here; it is dropped at once.
            let now_leading = self.leadership.check().ok().map(|p| p.term);
            if now_leading != leading {
                match now_leading {
                    Some(term) => {
                        sweep = Sweep::start(term, self.cache.mark_all_dirty());
                        info!({ field::TERM } = %term, { field::IDENTITY } = %self.config.identity,
                            { field::STATUSES } = sweep.left.len(), "{}", message::SWEEP_STARTED);
                        sweep.finish_check(&self.config.identity);
                    }
                    None => {
                        info!(identity = %self.config.identity, "not leading: no status writes")
                    }
                }
                leading = now_leading;
            }
            // 2. Start what is dirty, within the concurrency limit.
            if leading.is_some() && tasks.len() < limit {
                for (key, desired) in self.cache.take_dirty(limit - tasks.len(), &busy) {
                    busy.insert(key.clone());
                    let job = Job {
                        client: self.client.clone(),
                        leadership: self.leadership.clone(),
                        config: self.config.clone(),
                        watched: self.watched.clone(),
                    };
                    tasks.spawn(async move {
                        let r = job.write(&key, &desired).await;
                        (key, r)
                    });
                }
            }
            // 3. Wait for anything that can change the picture.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                Some(done) = tasks.join_next() => {
                    if let Ok((key, result)) = done {
                        busy.remove(&key);
                        self.settle(&key, result, &mut sweep);
                    }
                }
                r = states.changed() => {
                    if r.is_err() {
                        // The elector is gone; nothing can be written any more.
                        break;
                    }
                }
                _ = self.cache.changed() => {}
            }
        }
        self.finish(tasks, &mut sweep).await;
    }

    /// Lets writes in flight finish (their leadership may still be valid), then abandons them.
    async fn finish(
        &self,
        mut tasks: JoinSet<(ObjectKey, Result<Written, WriteError>)>,
        sweep: &mut Sweep,
    ) {
        let drained = tokio::time::timeout(self.config.shutdown_grace, async {
            while let Some(done) = tasks.join_next().await {
                if let Ok((key, result)) = done {
                    self.settle(&key, result, sweep);
                }
            }
        })
        .await;
        if drained.is_err() {
            warn!(
                abandoned = tasks.len(),
                "status writes still in flight at shutdown; abandoning them"
            );
            tasks.shutdown().await;
        }
    }

    /// Logs one finished write and requeues what did not happen.
    fn settle(&self, key: &ObjectKey, result: Result<Written, WriteError>, sweep: &mut Sweep) {
        let identity = &self.config.identity;
        let metrics = &self.config.metrics;
        if let Some(after) = sweep.settled(key, &result, identity) {
            metrics.first_write_seconds.observe(after.as_secs_f64());
        }
        let kind = KindLabel {
            kind: key.kind.as_str(),
        };
        match &result {
            Ok(Written::Sent { .. }) => metrics.status_writes.get_or_create(&kind).inc(),
            Err(e) if e.is_leadership() => metrics.status_writes_not_leader.inc(),
            Err(_) => metrics.status_write_errors.get_or_create(&kind).inc(),
            Ok(_) => 0,
        };
        match result {
            Ok(Written::Sent { term }) => {
                // A line machines read (gateway-leader-log): `mono_ms` (CLOCK_MONOTONIC) orders
                // writes across replicas for the bench's checker.
                info!({ field::TERM } = %term, { field::IDENTITY } = %identity,
                    { field::KIND } = %key.kind,
                    { field::NAMESPACE } = key.namespace.as_deref().unwrap_or(""),
                    { field::NAME } = %key.name, { field::MONO_MS } = leader_lock::clock::mono_ms(),
                    "{}", message::WRITTEN);
            }
            Ok(Written::Unchanged) => debug!(object = %key, "status already right; nothing sent"),
            Ok(Written::Stale) => {
                debug!(object = %key, "computed from an older generation; a newer one follows")
            }
            Ok(Written::Gone) => debug!(object = %key, "object gone; nothing to write"),
            Err(e) if e.is_leadership() => {
                debug!(
                    object = %key,
                    error = %e,
                    "write not made: leadership ended; left to the next leader"
                );
                self.cache.requeue(key);
            }
            Err(e) => {
                if e.is_transient() {
                    warn!(object = %key, error = %e, retry_in = ?self.config.requeue_after,
                        "status write kept failing; trying again later");
                } else {
                    error!(object = %key, error = %e, retry_in = ?self.config.requeue_after,
                        "status write refused by the apiserver; trying again later");
                }
                let cache = self.cache.clone();
                let key = key.clone();
                let delay = self.config.requeue_after;
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    cache.requeue(&key);
                });
            }
        }
    }
}

/// The first pass of a leadership over every cached status: when it began, what is left, and
/// what it found, so that the log tells when a new leader has caught up and how fast.
#[derive(Debug, Default)]
struct Sweep {
    term: Option<Term>,
    began: Option<Instant>,
    first_write: bool,
    /// Still going through the statuses cached when the leadership began.
    checking: bool,
    left: HashSet<ObjectKey>,
    written: usize,
    unchanged: usize,
    other: usize,
}

impl Sweep {
    fn start(term: Term, keys: HashSet<ObjectKey>) -> Self {
        Sweep {
            term: Some(term),
            began: Some(Instant::now()),
            checking: true,
            left: keys,
            ..Sweep::default()
        }
    }

    /// Counts one finished write; returns the time from leading to it when it is the first
    /// write of the leadership.
    fn settled(
        &mut self,
        key: &ObjectKey,
        result: &Result<Written, WriteError>,
        identity: &str,
    ) -> Option<Duration> {
        let (Some(term), Some(began)) = (self.term, self.began) else {
            return None;
        };
        let mut first = None;
        if let Ok(Written::Sent { term: t }) = result {
            if !self.first_write && *t == term {
                self.first_write = true;
                let after = began.elapsed();
                info!({ field::TERM } = %term, { field::IDENTITY } = %identity,
                    { field::OBJECT } = %key, { field::AFTER_MS } = after.as_secs_f64() * 1e3,
                    "{}", message::FIRST_WRITE);
                first = Some(after);
            }
        }
        if !self.checking || !self.left.remove(key) {
            return first;
        }
        match result {
            Ok(Written::Sent { .. }) => self.written += 1,
            Ok(Written::Unchanged) => self.unchanged += 1,
            _ => self.other += 1,
        }
        self.finish_check(identity);
        first
    }

    /// Logs the end of the first pass once nothing of it is left (at once when nothing was
    /// cached); the first write of the leadership may still come later.
    fn finish_check(&mut self, identity: &str) {
        let (Some(term), Some(began)) = (self.term, self.began) else {
            return;
        };
        if self.checking && self.left.is_empty() {
            info!({ field::TERM } = %term, { field::IDENTITY } = %identity,
                { field::WRITTEN } = self.written, { field::UNCHANGED } = self.unchanged,
                { field::OTHER } = self.other,
                { field::TOOK_MS } = began.elapsed().as_secs_f64() * 1e3,
                { field::MONO_MS } = leader_lock::clock::mono_ms(), "{}", message::SWEEP_DONE);
            self.checking = false;
        }
    }
}

/// What one write task needs.
struct Job {
    client: Client,
    leadership: Leadership,
    config: Arc<WriterConfig>,
    watched: Option<Stores>,
}

impl Job {
    /// Writes one status, retrying conflicts and server errors with backoff (backon). The first
    /// try starts from the watched copy when there is one; a retry reads the object again.
    async fn write(&self, key: &ObjectKey, desired: &Desired) -> Result<Written, WriteError> {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(20))
            .with_max_delay(Duration::from_secs(1))
            .with_max_times(6)
            .with_jitter();
        let tries = AtomicUsize::new(0);
        (|| async {
            let first = tries.fetch_add(1, Ordering::Relaxed) == 0;
            self.write_once(key, desired, first).await
        })
        .retry(backoff)
        .when(WriteError::is_transient)
        .notify(
            |e, after| debug!(object = %key, error = %e, ?after, "status write failed; retrying"),
        )
        .await
    }

    async fn write_once(
        &self,
        key: &ObjectKey,
        desired: &Desired,
        first: bool,
    ) -> Result<Written, WriteError> {
        let ns = key.namespace.as_deref().unwrap_or_default();
        let c = || self.client.clone();
        match key.kind {
            Kind::GatewayClass => {
                let api = Api::<GatewayClass>::all(c());
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
            Kind::Gateway => {
                let api = Api::<Gateway>::namespaced(c(), ns);
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
            Kind::HttpRoute => {
                let api = Api::<StoredHttpRoute>::namespaced(c(), ns);
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
            Kind::GrpcRoute => {
                let api = Api::<GrpcRoute>::namespaced(c(), ns);
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
            Kind::TlsRoute => {
                let api = Api::<TlsRoute>::namespaced(c(), ns);
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
            Kind::TcpRoute => {
                let api = Api::<TcpRoute>::namespaced(c(), ns);
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
            Kind::UdpRoute => {
                let api = Api::<UdpRoute>::namespaced(c(), ns);
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
            Kind::ListenerSet => {
                let api = Api::<ListenerSet>::namespaced(c(), ns);
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
            Kind::BackendTlsPolicy => {
                let api = Api::<BackendTlsPolicy>::namespaced(c(), ns);
                self.guarded(api, key, desired, self.copy(key, first)).await
            }
        }
    }

    /// The watched copy to start from: on the first try only, when the watch holds one.
    fn copy<K: Watched>(&self, key: &ObjectKey, first: bool) -> Option<Arc<K>> {
        let stores = self.watched.as_ref().filter(|_| first)?;
        observed::copy(stores, key)
    }

    /// Read, merge, and (only if something changes) write back under a valid leadership.
    async fn guarded<K>(
        &self,
        api: Api<K>,
        key: &ObjectKey,
        desired: &Desired,
        copy: Option<Arc<K>>,
    ) -> Result<Written, WriteError>
    where
        K: StatusObject + Resource + Serialize + DeserializeOwned + Debug + Clone,
    {
        let config = &self.config;
        self.leadership
            .run(|permit| async move {
                let current = match copy {
                    // The watched copy, with its resourceVersion: a stale one gets a conflict.
                    Some(c) => c,
                    None => match api.get_status(&key.name).await {
                        Ok(o) => Arc::new(o),
                        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Written::Gone),
                        Err(e) => return Err(WriteError::Kube(e)),
                    },
                };
                let now = Time(Timestamp::now());
                let mut next = match current.merge(desired, &config.controller_name, &now) {
                    Merge::Unchanged => return Ok(Written::Unchanged),
                    Merge::Stale { .. } => return Ok(Written::Stale),
                    Merge::WrongKind => return Err(WriteError::WrongKind),
                    Merge::Write(next) => next,
                };
                // Sent back, managedFields would be taken as the caller's wish: leave them out.
                next.meta_mut().managed_fields = None;
                let params = PostParams {
                    dry_run: false,
                    field_manager: Some(config.field_manager.clone()),
                };
                // The last moment before the request leaves: leadership must still hold.
                let term = permit.check()?;
                match api.replace_status(&key.name, &params, &*next).await {
                    Ok(_) => Ok(Written::Sent { term }),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(Written::Gone),
                    Err(e) => Err(WriteError::Kube(e)),
                }
            })
            .await
            .map_err(WriteError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced(Kind::HttpRoute, "ns", name)
    }

    #[test]
    fn the_first_write_counts_even_after_the_first_pass_is_over() {
        let mut sweep = Sweep::start(Term(3), [key("a")].into());
        assert_eq!(
            sweep.settled(&key("a"), &Ok(Written::Unchanged), "me"),
            None
        );
        assert!(!sweep.checking, "the pass over what was cached is done");
        let first = sweep.settled(&key("b"), &Ok(Written::Sent { term: Term(3) }), "me");
        assert!(
            first.is_some(),
            "a change that arrived later is still the first write"
        );
        let second = sweep.settled(&key("c"), &Ok(Written::Sent { term: Term(3) }), "me");
        assert_eq!(second, None, "only the first");
    }

    #[test]
    fn a_write_of_an_older_term_is_not_this_leaderships_first() {
        let mut sweep = Sweep::start(Term(4), [key("a")].into());
        let old = sweep.settled(&key("a"), &Ok(Written::Sent { term: Term(3) }), "me");
        assert_eq!(old, None);
        assert_eq!(sweep.written, 1, "it still counts in the pass");
    }

    #[test]
    fn only_conflicts_throttling_and_server_errors_are_retried_at_once() {
        let api = |code: u16| {
            WriteError::Kube(kube::Error::Api(
                kube::core::Status::failure("x", "y")
                    .with_code(code)
                    .boxed(),
            ))
        };
        assert!(api(409).is_transient() && api(429).is_transient() && api(503).is_transient());
        assert!(!api(422).is_transient() && !api(403).is_transient());
        assert!(WriteError::NotLeader(NotLeader::ShuttingDown).is_leadership());
        assert!(WriteError::Deadline(Term(1)).is_leadership());
        assert!(!api(409).is_leadership());
    }
}

#[cfg(test)]
mod apiserver_tests;
