//! The Lease lock: client-go's read-decide-replace cycle with expiry on our own clock.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use kube::Api;
use leader_lock::backend::{
    Attempt, Candidate, ConfigError, FactValue, Inspection, LastHolder, LeaderLock, LockError,
    LockEventStream, LockRecord, ObservedRecord,
};
use leader_lock::{Term, Timing};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tracing::debug;

use crate::error::{bounded, classify, is_conflict, status};
use crate::spec::{self, Clamp};

/// The longest `leaseDurationSeconds` respected by default; a larger value counts as this long.
///
/// It bounds how long a planted or corrupted Lease can block the election, while leaving room
/// for any plausible client-go configuration (client-go's default is 15 s).
pub const DEFAULT_MAX_LEASE_DURATION: Duration = Duration::from_secs(3600);

/// client-go's default lease duration, used until a candidate tells us ours.
const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// The field manager of the lock's Lease writes unless [`LeaseLock::with_field_manager`] says
/// otherwise: the Lease's `managedFields` name it.
pub const DEFAULT_FIELD_MANAGER: &str = "leader-lock";

/// The longest field manager name the apiserver accepts.
const FIELD_MANAGER_MAX: usize = 128;

/// The server ends a watch after this long; we then reopen it from the last resourceVersion.
const WATCH_TIMEOUT_SECS: u32 = 290;

/// A lock on one `coordination.k8s.io/v1` Lease, written exactly as client-go writes it.
///
/// Give it a client of its own, never a gated one ([`gated_client`](crate::gated_client)): the
/// lock's requests must go out while this replica is not (or no longer) leading, or a leader
/// could not renew once its validity lapsed and a follower could never acquire.
///
/// Each API request is bounded by a timeout well inside the renew deadline (see
/// [`with_request_timeout`](Self::with_request_timeout)); the Lease's `managedFields` name the
/// field manager ([`DEFAULT_FIELD_MANAGER`] unless
/// [`with_field_manager`](Self::with_field_manager)).
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use leader_lock::{Elector, ElectorConfig, Identity, Timing};
/// use leader_lock_kubernetes::{client, LeaseLock};
///
/// // A kubeconfig (`KUBECONFIG`, `~/.kube/config`) or the pod's service account.
/// let config = kube::Config::infer().await?;
/// let lock = LeaseLock::new(
///     client(config.clone())?,
///     &config.default_namespace,
///     "my-controller-lock",
/// )
/// .with_field_manager("my-controller");
/// let elector = Elector::spawn(
///     Arc::new(lock),
///     ElectorConfig {
///         identity: Identity::new(std::env::var("POD_NAME")?),
///         timing: Timing::default(),
///         release_on_shutdown: true,
///     },
/// )?; // refuses a timing a Lease cannot express, or a timeout not below the renew deadline
/// let leadership = elector.leadership();
/// # let _ = leadership;
/// elector.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LeaseLock {
    inner: Arc<Inner>,
}

struct Inner {
    api: Api<Lease>,
    namespace: String,
    name: String,
    server: Option<String>,
    max_lease: Duration,
    request_timeout: Option<Duration>,
    field_manager: String,
    state: Mutex<State>,
}

struct State {
    /// The record as last seen by any read or watch event, with the time of its first sighting;
    /// and, after the Lease was deleted under a live holder, until when nobody may take it.
    observed: ObservedRecord,
    /// The Lease our last successful write returned, while we hold it (client-go's fast path).
    own: Option<Lease>,
    /// The running watch, by the number [`LeaderLock::watch`] gave it: only that one's pump
    /// writes or clears [`watched`](Self::watched).
    watching: Option<u64>,
    /// The Lease as the running watch last delivered it (or the list it started from). A
    /// follower's attempt decides from this copy and writes over it without reading first: one
    /// request between a release and the new leader, not two. A stale copy costs a conflict and
    /// a read, never a wrong write: the replace carries the copy's resourceVersion.
    watched: Option<Lease>,
    /// How many watches this lock has started: the next one's number.
    watches: u64,
    /// Our own lease duration (from the last candidate): stands in for a missing recorded one.
    fallback: Duration,
    /// The highest `leaseTransitions` this client has seen. A deleted and recreated Lease starts
    /// again from 0; when we write a new holder we continue above this instead, so our terms
    /// never go back.
    highest: Option<i32>,
    /// The renew deadline of the timing [`LeaderLock::validate`] accepted: the default request
    /// timeout is half of it.
    renew_deadline: Option<Duration>,
    /// When a read or a watch event last showed the Lease there. An answer that it is absent, to
    /// a request sent before then, may predate its creation: two replicas starting together
    /// see the first one's create on a read while their watch's list, sent a moment earlier,
    /// comes back empty. Taken for a deletion, it would hold every follower off a graceful
    /// release for a lease duration.
    present_at: Option<Instant>,
}

/// What to do after reading the Lease.
enum Plan {
    Follow(Attempt),
    Create(Lease, Term),
    Replace(Lease, Term),
}

impl LeaseLock {
    /// A lock on Lease `name` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> LeaseLock {
        LeaseLock {
            inner: Arc::new(Inner {
                api: Api::namespaced(client, namespace),
                namespace: namespace.to_string(),
                name: name.to_string(),
                server: None,
                max_lease: DEFAULT_MAX_LEASE_DURATION,
                request_timeout: None,
                field_manager: DEFAULT_FIELD_MANAGER.to_string(),
                state: Mutex::new(State {
                    observed: ObservedRecord::default(),
                    own: None,
                    watching: None,
                    watched: None,
                    watches: 0,
                    fallback: DEFAULT_LEASE,
                    highest: None,
                    renew_deadline: None,
                    present_at: None,
                }),
            }),
        }
    }

    /// The checks [`LeaderLock::validate`] runs (and so [`Elector::spawn`]), for a program that
    /// checks its settings before it has a client: the timing fits Leases (`lease_duration` a
    /// whole number of seconds, at least 1 s), and `request_timeout`, when set (see
    /// [`with_request_timeout`](Self::with_request_timeout)), ends before the renew deadline: a
    /// request that hangs must not use up the leader's whole validity.
    ///
    /// # Errors
    /// The [`ConfigError`] naming the setting that cannot work.
    ///
    /// [`Elector::spawn`]: leader_lock::Elector::spawn
    pub fn check_timing(
        timing: &Timing,
        request_timeout: Option<Duration>,
    ) -> Result<(), ConfigError> {
        timing.validate()?;
        if let Some(t) = request_timeout {
            timing.check_request_timeout("kubernetes", t)?;
        }
        timing.require_whole_seconds(Duration::from_secs(1))?;
        if timing.lease_duration.as_secs() > i32::MAX as u64 {
            return Err(ConfigError::invalid(
                "lease-duration",
                format!(
                    "{:?} does not fit a Lease's leaseDurationSeconds (int32)",
                    timing.lease_duration
                ),
            ));
        }
        Ok(())
    }

    /// Caps the recorded lease duration we respect (default [`DEFAULT_MAX_LEASE_DURATION`]).
    #[must_use]
    pub fn with_max_lease_duration(self, max: Duration) -> Self {
        self.rebuild(|i| i.max_lease = max.max(Duration::from_secs(1)))
    }

    /// Sets the deadline of each API request. It must be below the renew deadline:
    /// [`Elector::spawn`](leader_lock::Elector::spawn) refuses it otherwise.
    ///
    /// By default it is half the renew deadline of the timing the elector validated the lock
    /// with ([`LeaderLock::validate`]); before that, for a lock used without an elector, a
    /// quarter of the candidate's lease duration, clamped to 250 ms – 5 s.
    #[must_use]
    pub fn with_request_timeout(self, timeout: Duration) -> Self {
        self.rebuild(|i| i.request_timeout = Some(timeout))
    }

    /// The deadline of each API request, as it applies now.
    pub fn request_timeout(&self) -> Duration {
        self.inner.timeout()
    }

    /// Sets the field manager of the Lease writes (default [`DEFAULT_FIELD_MANAGER`]): the
    /// Lease's `managedFields` name it, so an operator sees which program holds the lock.
    #[must_use]
    pub fn with_field_manager(self, manager: impl Into<String>) -> Self {
        let manager = manager.into();
        self.rebuild(|i| i.field_manager = manager)
    }

    /// Names the apiserver in error messages (the client does not expose its URL).
    #[must_use]
    pub fn with_server(self, url: impl Into<String>) -> Self {
        let url = url.into();
        self.rebuild(|i| i.server = Some(url))
    }

    fn rebuild(self, f: impl FnOnce(&mut Inner)) -> Self {
        let inner = match Arc::try_unwrap(self.inner) {
            Ok(mut i) => {
                f(&mut i);
                i
            }
            Err(shared) => {
                let s = shared.state();
                let mut i = Inner {
                    api: shared.api.clone(),
                    namespace: shared.namespace.clone(),
                    name: shared.name.clone(),
                    server: shared.server.clone(),
                    max_lease: shared.max_lease,
                    request_timeout: shared.request_timeout,
                    field_manager: shared.field_manager.clone(),
                    state: Mutex::new(State {
                        observed: s.observed.clone(),
                        own: s.own.clone(),
                        // A copy's watch belongs to the lock it was started on.
                        watching: None,
                        watched: None,
                        watches: s.watches,
                        fallback: s.fallback,
                        highest: s.highest,
                        renew_deadline: s.renew_deadline,
                        present_at: s.present_at,
                    }),
                };
                drop(s);
                f(&mut i);
                i
            }
        };
        LeaseLock {
            inner: Arc::new(inner),
        }
    }
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not poison the lock for the elector.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn what(&self, op: &str) -> String {
        match &self.server {
            Some(s) => format!("{op} Lease {}/{} on {s}", self.namespace, self.name),
            None => format!("{op} Lease {}/{}", self.namespace, self.name),
        }
    }

    fn clamp(&self) -> Clamp {
        Clamp {
            fallback: self.state().fallback,
            max: self.max_lease,
        }
    }

    fn timeout(&self) -> Duration {
        self.request_timeout.unwrap_or_else(|| {
            let s = self.state();
            match s.renew_deadline {
                // Well inside the deadline: a hung request leaves time for the next attempt.
                Some(renew) => renew / 2,
                None => (s.fallback / 4).clamp(Duration::from_millis(250), Duration::from_secs(5)),
            }
        })
    }

    /// The parameters of every write: our field manager names us in the Lease's managedFields.
    fn post_params(&self) -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: Some(self.field_manager.clone()),
        }
    }

    async fn read(&self) -> Result<Option<Lease>, LockError> {
        let asked = Instant::now();
        let r = bounded(self.timeout(), self.api.get_opt(&self.name)).await?;
        let lease = r.map_err(|e| classify(&self.what("get"), e))?;
        match &lease {
            Some(l) => {
                self.observe(l);
            }
            None => self.gone(None, Some(asked)),
        }
        Ok(lease)
    }

    /// When a vanished Lease may be taken, while that is still ahead: the answer for a free one.
    fn held_off(&self, me: &str) -> Option<Plan> {
        let now = Instant::now();
        let s = self.state();
        let (rec, until) = s.observed.hold_off(now)?;
        Some(Plan::Follow(Attempt::Follower {
            // Report who may still lead; a leader whose own Lease vanished follows nobody.
            holder: (rec.holder != me).then(|| rec.holder.clone()),
            term: Some(rec.term),
            retry_after: Some(until - now),
        }))
    }

    /// Decides, as client-go's tryAcquireOrRenew does, from a freshly read Lease.
    fn plan(&self, current: Option<Lease>, c: &Candidate, me: &str) -> Result<Plan, LockError> {
        let lease_seconds = i32::try_from(c.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let now = spec::now();
        let Some(mut lease) = current else {
            if let Some(wait) = self.held_off(me) {
                return Ok(wait);
            }
            let transitions = self.next_transitions(0)?;
            let fresh = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec::spec(me, lease_seconds, now.clone(), now, transitions)),
            };
            return Ok(Plan::Create(fresh, term_of(transitions)));
        };
        let holder = spec::holder(&lease).to_string();
        let transitions = spec::transitions(&lease);
        if holder == me {
            // Renew: keep acquireTime and leaseTransitions.
            let acquire = lease
                .spec
                .as_ref()
                .and_then(|s| s.acquire_time.clone())
                .unwrap_or_else(|| now.clone());
            lease.spec = Some(spec::spec(me, lease_seconds, acquire, now, transitions));
            return Ok(Plan::Replace(lease, term_of(transitions)));
        }
        self.state().own = None;
        if holder.is_empty() {
            // Free, but a live holder's Lease vanished before it: that holder may still lead.
            if let Some(wait) = self.held_off(me) {
                return Ok(wait);
            }
        } else {
            let (expires, rec) = {
                let s = self.state();
                (
                    s.observed.expires_at(s.fallback),
                    s.observed.record().cloned(),
                )
            };
            let t = Instant::now();
            match expires {
                Some(at) if at > t => {
                    return Ok(Plan::Follow(Attempt::Follower {
                        holder: Some(holder),
                        term: rec.map(|r| r.term),
                        retry_after: Some(at - t),
                    }));
                }
                Some(_) => {
                    debug!(
                        %holder,
                        lease = %self.name,
                        "lease unchanged for its duration; taking it over"
                    )
                }
                // Unreachable after read() observed it; never steal on a missing observation.
                None => {
                    return Ok(Plan::Follow(Attempt::Follower {
                        holder: Some(holder),
                        term: None,
                        retry_after: None,
                    }))
                }
            }
        }
        let next = self.next_transitions(transitions)?;
        lease.spec = Some(spec::spec(me, lease_seconds, now.clone(), now, next));
        Ok(Plan::Replace(lease, term_of(next)))
    }

    /// Records a Lease we just wrote as ours.
    fn won(&self, lease: Lease) {
        self.observe(&lease);
        self.state().own = Some(lease);
    }

    /// client-go's fast path: the holder updates the Lease it last wrote without reading first.
    async fn fast_renew(&self, c: &Candidate, me: &str) -> Result<Option<Term>, LockError> {
        let Some(mut lease) = self.state().own.clone() else {
            return Ok(None);
        };
        if spec::holder(&lease) != me {
            return Ok(None);
        }
        let transitions = spec::transitions(&lease);
        let lease_seconds = i32::try_from(c.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let acquire = lease
            .spec
            .as_ref()
            .and_then(|s| s.acquire_time.clone())
            .unwrap_or_else(spec::now);
        lease.spec = Some(spec::spec(
            me,
            lease_seconds,
            acquire,
            spec::now(),
            transitions,
        ));
        let r = bounded(
            self.timeout(),
            self.api.replace(&self.name, &self.post_params(), &lease),
        )
        .await?;
        match r {
            Ok(l) => {
                self.won(l);
                Ok(Some(term_of(transitions)))
            }
            Err(e) if is_conflict(&e) || status(&e) == Some(404) => {
                // Someone wrote in between (or deleted it): fall back to reading it.
                self.state().own = None;
                Ok(None)
            }
            Err(e) => Err(classify(&self.what("renew"), e)),
        }
    }

    async fn acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.state().fallback = c.lease_duration;
        let me = c.holder();
        if let Some(term) = self.fast_renew(c, &me).await? {
            return Ok(Attempt::leader(term));
        }
        // The watch's copy first (no request unless we write); a lost race re-reads once: the
        // winner's record decides (or our own retried write).
        let mut copy = self.state().watched.clone();
        let tries = if copy.is_some() { 3 } else { 2 };
        for _ in 0..tries {
            let from_copy = copy.is_some();
            let current = match copy.take() {
                Some(lease) => Some(lease),
                None => self.read().await?,
            };
            let (result, op) = match self.plan(current, c, &me)? {
                Plan::Follow(a) => return Ok(a),
                Plan::Create(lease, term) => (
                    bounded(self.timeout(), self.api.create(&self.post_params(), &lease))
                        .await?
                        .map(|l| (l, term)),
                    "create",
                ),
                Plan::Replace(lease, term) => (
                    bounded(
                        self.timeout(),
                        self.api.replace(&self.name, &self.post_params(), &lease),
                    )
                    .await?
                    .map(|l| (l, term)),
                    "update",
                ),
            };
            match result {
                Ok((lease, term)) => {
                    self.won(lease);
                    return Ok(Attempt::leader(term));
                }
                // A copy of a Lease deleted since conflicts too: the apiserver creates Leases
                // on update, so the copy's resourceVersion precondition is what fails.
                Err(e) if is_conflict(&e) => {
                    debug!(lease = %self.name, from_copy, "{op} lost a race; reading the winner");
                    continue;
                }
                Err(e) => return Err(classify(&self.what(op), e)),
            }
        }
        let s = self.state();
        let rec = s.observed.record().cloned();
        Ok(Attempt::Follower {
            holder: rec.as_ref().map(|r| r.holder.clone()),
            term: rec.map(|r| r.term),
            retry_after: s
                .observed
                .expires_at(s.fallback)
                .map(|at| at.saturating_duration_since(Instant::now())),
        })
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        let me = c.holder();
        // client-go's release writes back the Lease its last write returned, without reading
        // first: one request while a follower waits, not two. A conflict (someone wrote since)
        // reads it once, as a release without such a copy does.
        let mut known = self.state().own.take();
        loop {
            let from_known = known.is_some();
            let lease = match known.take() {
                Some(lease) => lease,
                None => match self.read().await? {
                    Some(lease) => lease,
                    None => return Ok(false),
                },
            };
            let transitions = spec::transitions(&lease);
            if spec::holder(&lease) != me || term_of(transitions) != term {
                return Ok(false);
            }
            // client-go's release: empty holder, leaseDurationSeconds 1, transitions kept.
            let mut lease = lease;
            let now = spec::now();
            lease.spec = Some(spec::spec("", 1, now.clone(), now, transitions));
            let r = bounded(
                self.timeout(),
                self.api.replace(&self.name, &self.post_params(), &lease),
            )
            .await?;
            return match r {
                Ok(l) => {
                    self.observe(&l);
                    Ok(true)
                }
                Err(e) if from_known && (is_conflict(&e) || status(&e) == Some(404)) => continue,
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(classify(&self.what("release"), e)),
            };
        }
    }
}

mod seen;
mod watch;

#[cfg(test)]
mod tests;

fn term_of(transitions: i32) -> Term {
    Term(u64::from(transitions.max(0).unsigned_abs()))
}

#[async_trait]
impl LeaderLock for LeaseLock {
    fn describe(&self) -> String {
        format!(
            "kubernetes Lease {}/{}",
            self.inner.namespace, self.inner.name
        )
    }

    /// [`LeaseLock::check_timing`] with this lock's request timeout; from then on, unless
    /// [`LeaseLock::with_request_timeout`] set one, requests time out at half the renew deadline.
    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        LeaseLock::check_timing(timing, self.inner.request_timeout)?;
        let manager = &self.inner.field_manager;
        if manager.is_empty() || manager.len() > FIELD_MANAGER_MAX {
            return Err(ConfigError::invalid(
                "field-manager",
                format!("{manager:?} must be 1 to {FIELD_MANAGER_MAX} bytes"),
            ));
        }
        self.inner.state().renew_deadline = Some(timing.renew_deadline);
        Ok(())
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.inner.acquire_or_renew(c).await
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let lease = self.inner.read().await?;
        Ok(lease
            .map(|l| spec::record(&l, self.inner.clamp()))
            .filter(|r| !r.is_free()))
    }

    /// The record, with the Lease's history as it keeps it: `leaseTransitions` (the term, also
    /// after a release, which empties the holder but keeps the count), `acquireTime` and the
    /// `resourceVersion`. A released Lease is a `last_holder` that released (its name is gone
    /// with the release). A Lease keeps no clock of its own (no `server_ttl`) and nothing once
    /// deleted (no `last_holder`: a deleted Lease reads as one never created).
    async fn inspect(&self) -> Result<Inspection, LockError> {
        let Some(lease) = self.inner.read().await? else {
            return Ok(Inspection::of_record(None));
        };
        let record = spec::record(&lease, self.inner.clamp());
        let mut i = Inspection::of_record(None).with_fact(
            "leaseTransitions",
            FactValue::Number(u64::from(spec::transitions(&lease).unsigned_abs())),
        );
        if let Some(t) = record.acquire_time {
            i = i.with_fact("acquireTime", FactValue::Time(t));
        }
        i = i.with_fact("resourceVersion", FactValue::Text(record.version.clone()));
        if record.is_free() {
            return Ok(i.with_last_holder(Some(LastHolder {
                holder: String::new(),
                term: record.term,
                released: true,
                held_off_for: None,
            })));
        }
        i.record = Some(record);
        Ok(i)
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let inner = &self.inner;
        // A list (not a get) gives a resourceVersion to watch from even when the Lease is absent.
        let lp = ListParams::default().fields(&format!("metadata.name={}", inner.name));
        let asked = Instant::now();
        let r = bounded(inner.timeout(), inner.api.list(&lp)).await?;
        let list = r.map_err(|e| classify(&inner.what("list"), e))?;
        match list.items.first() {
            Some(l) => {
                inner.observe(l);
            }
            None => inner.gone(None, Some(asked)),
        }
        let version = list.metadata.resource_version.unwrap_or_default();
        let stream = inner.open_watch(&version).await?;
        let number = {
            let mut s = inner.state();
            s.watches += 1;
            s.watching = Some(s.watches);
            s.watched = list.items.into_iter().next();
            s.watches
        };
        let (tx, rx) = mpsc::channel(32);
        tokio::spawn(watch::pump(self.inner.clone(), number, stream, version, tx));
        Ok(ReceiverStream::new(rx).boxed())
    }
}
