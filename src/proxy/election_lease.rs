//! The controller's own leader election, answered here (`--proxy-election-lease`).
//!
//! A controller behind the proxy keeps its client-go or controller-runtime election, pointed at
//! the proxy. The proxy answers that election's Lease itself, from this replica's leadership,
//! and never sends it on (docs/sidecar.md, "The controller's own election"):
//!
//! - while this replica validly leads, a read shows the Lease free and an update that takes it
//!   succeeds: the controller (or one restarted in this pod, under a new identity) leads on its
//!   next request; a read of a follower's controller is held (within the timeout its client
//!   gave) until this replica leads, so it leads sooner still;
//! - otherwise a read shows our lock's holder, renewed at every read, and an update fails as a
//!   lost race does (409): the controller follows quietly, and a leading one stops renewing
//!   from the moment our validity ends;
//! - a controller leads for one span of our validity only: any later leadership of ours, in the
//!   same term or a new one, is a new leadership for it;
//! - a controller that stops asking for its lease duration makes this replica stand aside
//!   ([`Candidacy`]), so a dead or hung controller never holds the other replicas back;
//! - a Lease of the same name on the apiserver that a replica of the controller's native
//!   election still renews (a rolling update into this mode) keeps every controller here a
//!   follower until it expires.

mod native;
mod request;
mod wire;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use leader_lock::leadership::Stamped;
use leader_lock::{Candidacy, LeaderState, Leadership, Term};
use tokio::sync::{mpsc, Notify};
use tokio::time::{sleep_until, timeout_at, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::native::Native;
use self::request::{encoded, go_duration, header_str, query, read_lease_body};
use self::wire::Encoding;
use super::body::{BoxError, ProxyBody};
use super::status::status;
use crate::config::LeaseName;

/// The longest a follower's read is held waiting for this replica to lead, whatever the
/// timeout its client gave.
const MAX_HOLD: Duration = Duration::from_secs(10);
/// The largest Lease body read: an election's Lease is a few hundred bytes.
const MAX_LEASE_BODY: usize = 64 * 1024;
/// The holder a follower's controller is shown while no holder of our lock is known.
const UNKNOWN_HOLDER: &str = "unknown";

/// What a request to the proxy is, for the controller's election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// The election's Lease itself (any version, any subresource): answered here.
    Item,
    /// A create in the Lease's namespace: answered here when it names the Lease.
    Create,
}

/// The controller's election, answered from this replica's leadership.
pub struct ElectionLease {
    target: LeaseName,
    leadership: Leadership,
    candidacy: Option<Candidacy>,
    /// Our own lease duration: what a follower's controller is shown, and how long the
    /// controller may stay silent before its first renew.
    our_lease: Duration,
    state: Mutex<State>,
    /// Woken by every request of the controller, for the watch over its liveness.
    asked: Notify,
    /// The apiserver's Lease of the same name (a native election still running in replicas of
    /// the old kind), `None` until first listed.
    native: Mutex<Option<Native>>,
    stop: CancellationToken,
}

/// The Lease as this proxy shows it.
struct State {
    /// Advances on every change and on every read a follower's controller gets.
    resource_version: u64,
    uid: String,
    created: Timestamp,
    transitions: i32,
    /// The controller's leadership, if it holds the Lease.
    bound: Option<Bound>,
    /// A controller whose leadership ended with a span of ours, and until when it may still
    /// believe it leads (its last renew plus its lease duration): it may not take the Lease
    /// again before, so that its next leadership is a new one, switch-on work and all.
    retired: Option<(String, Instant)>,
    /// The holder a follower's controller was last shown, and since when.
    shown: Option<(String, Timestamp)>,
    spans: Spans,
    /// The controller's last request for the Lease.
    last_asked: Instant,
    /// How long it may stay silent: the lease duration it last sent, else ours.
    patience: Duration,
}

/// An update refused, as the apiserver would word it.
struct Refusal {
    code: StatusCode,
    reason: &'static str,
    message: String,
}

/// The controller's hold on the Lease, tied to one span of our validity.
#[derive(Debug, Clone)]
struct Bound {
    holder: String,
    term: Term,
    span: u64,
    /// Its last take or renew, and the lease duration it sent then.
    renewed_at: Instant,
    lease_duration: Duration,
}

impl Bound {
    fn retire(self) -> (String, Instant) {
        let until = self.renewed_at + self.lease_duration;
        (self.holder, until)
    }
}

/// The spans of our validity: a leadership counted from its start until its validity lapses
/// or its term changes.
struct Spans {
    published: mpsc::UnboundedReceiver<Stamped>,
    current: Option<(Term, Instant)>,
    count: u64,
}

impl Spans {
    fn new(leadership: &Leadership) -> Spans {
        let (now, published) = leadership.record();
        let mut spans = Spans {
            published,
            current: None,
            count: 0,
        };
        spans.see(now);
        spans
    }

    /// The span a leadership under `term` belongs to now, once every publication is seen.
    fn of(&mut self, term: Term) -> Option<u64> {
        while let Ok(stamped) = self.published.try_recv() {
            self.see(stamped);
        }
        match self.current {
            Some((t, _)) if t == term => Some(self.count),
            _ => None,
        }
    }

    fn see(&mut self, (at, state): Stamped) {
        match state {
            LeaderState::Leader { term, valid_until } => {
                let continues = matches!(self.current, Some((t, until)) if t == term && at < until);
                if !continues {
                    self.count += 1;
                }
                self.current = Some((term, valid_until));
            }
            _ => self.current = None,
        }
    }
}

impl ElectionLease {
    /// Answers `target` from `leadership`; withdraws `candidacy` (none: leader election
    /// disabled) while the controller is silent; watches the apiserver's Lease of the same name
    /// with `client` (none: there is no native election to wait for).
    pub fn start(
        target: LeaseName,
        leadership: Leadership,
        candidacy: Option<Candidacy>,
        our_lease: Duration,
        client: Option<kube::Client>,
    ) -> Arc<ElectionLease> {
        let now = Timestamp::now();
        let election = Arc::new(ElectionLease {
            state: Mutex::new(State {
                // Advances across restarts of the proxy too: a controller's update that carries
                // a version from before one is refused, never taken for current.
                resource_version: u64::try_from(now.as_microsecond()).unwrap_or(1),
                uid: uid(&target, now),
                created: now,
                transitions: 0,
                bound: None,
                retired: None,
                shown: None,
                spans: Spans::new(&leadership),
                last_asked: Instant::now(),
                patience: our_lease,
            }),
            target,
            leadership,
            candidacy,
            our_lease,
            asked: Notify::new(),
            native: Mutex::new(client.is_none().then_some(Native {
                lease: None,
                changed: None,
            })),
            stop: CancellationToken::new(),
        });
        tokio::spawn(election.clone().watch_liveness());
        if let Some(client) = client {
            tokio::spawn(election.clone().watch_native(client));
        }
        election
    }

    /// Stops its tasks.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Whether a request is for the election's Lease.
    pub(super) fn route(&self, method: &Method, path: &str) -> Option<Route> {
        let rest = path.strip_prefix("/apis/coordination.k8s.io/")?;
        let (_version, rest) = rest.split_once('/')?;
        // The old watch path names the Lease too.
        let rest = rest.strip_prefix("watch/").unwrap_or(rest);
        let rest = rest.strip_prefix("namespaces/")?;
        let (namespace, rest) = rest.split_once('/')?;
        if namespace != self.target.namespace {
            return None;
        }
        let rest = rest.trim_end_matches('/');
        if rest == "leases" {
            return (method == Method::POST).then_some(Route::Create);
        }
        let name = rest.strip_prefix("leases/")?;
        let name = name.split('/').next().unwrap_or(name);
        (name == self.target.name).then_some(Route::Item)
    }

    /// Whether a create's body names the election's Lease.
    pub(super) fn names_it(&self, content_type: Option<&str>, body: &[u8]) -> bool {
        let Some(encoding) = Encoding::of_body(content_type) else {
            return false;
        };
        wire::decode(encoding, body)
            .ok()
            .and_then(|l| l.metadata.name)
            .is_some_and(|n| n == self.target.name)
    }

    /// The answer to a create of the election's Lease: it exists, as far as the controller can
    /// tell, so the create fails as the apiserver's would and the controller reads it instead.
    pub(super) fn already_exists(&self) -> Response<ProxyBody> {
        status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!(
                "leases.coordination.k8s.io {:?} already exists",
                self.target.name
            ),
        )
    }

    /// Answers a request for the election's Lease (`Route::Item`); nothing reaches the
    /// apiserver.
    pub(super) async fn answer<B>(&self, req: Request<B>) -> Response<ProxyBody>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        self.heard();
        let version_ok = req
            .uri()
            .path()
            .starts_with("/apis/coordination.k8s.io/v1/");
        let is_watch = req.uri().path().contains("/watch/")
            || query(req.uri().query(), "watch").is_some_and(|w| w == "true" || w == "1");
        let item = req
            .uri()
            .path()
            .trim_end_matches('/')
            .ends_with(&format!("/leases/{}", self.target.name));
        let answer = Encoding::for_answer(header_str(&req, header::ACCEPT));
        debug!(lease = %self.target, method = %req.method(),
            content_type = header_str(&req, header::CONTENT_TYPE).unwrap_or_default(),
            answer = answer.content_type(), "the controller's election asks");
        if !version_ok || is_watch || !item {
            return self.method_not_allowed(req.method());
        }
        match *req.method() {
            Method::GET => {
                let hold = query(req.uri().query(), "timeout")
                    .and_then(go_duration)
                    .map(|t| (t / 2).min(MAX_HOLD));
                let lease = self.read(hold).await;
                encoded(StatusCode::OK, answer, &lease)
            }
            Method::PUT => {
                let Some(encoding) = Encoding::of_body(header_str(&req, header::CONTENT_TYPE))
                else {
                    return status(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "UnsupportedMediaType",
                        "the election's Lease is updated in JSON, protobuf or CBOR",
                    );
                };
                let body = match read_lease_body(req.into_body()).await {
                    Ok(b) => b,
                    Err(answer) => return answer,
                };
                let lease = match wire::decode(encoding, &body) {
                    Ok(l) => l,
                    Err(m) => return status(StatusCode::BAD_REQUEST, "BadRequest", &m),
                };
                match self.update(lease, encoding) {
                    Ok(lease) => encoded(StatusCode::OK, answer, &lease),
                    Err(r) => status(r.code, r.reason, &r.message),
                }
            }
            _ => self.method_not_allowed(req.method()),
        }
    }

    fn method_not_allowed(&self, method: &Method) -> Response<ProxyBody> {
        status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "gateway-leader proxy answers the election's Lease {} itself: get and update \
                 (coordination.k8s.io/v1) only, not {method}, watch or other versions",
                self.target
            ),
        )
    }

    /// Notes a request of the controller: it is alive; a withdrawn candidacy resumes.
    fn heard(&self) {
        self.lock().last_asked = Instant::now();
        self.asked.notify_one();
        if let Some(c) = &self.candidacy {
            if !c.is_campaigning() {
                info!(lease = %self.target, "the controller asks for its election again; \
                    campaigning");
                c.resume();
            }
        }
    }

    /// A read: the Lease free while this replica may give it, else our lock's holder; held up
    /// to `hold` for a follower, until this replica leads.
    async fn read(&self, hold: Option<Duration>) -> Lease {
        let until = hold.map(|h| Instant::now() + h);
        let mut changes = self.leadership.subscribe();
        loop {
            if let Some(lease) = self.free_view() {
                return lease;
            }
            let campaigning = self
                .candidacy
                .as_ref()
                .is_none_or(Candidacy::is_campaigning);
            match until {
                Some(until) if campaigning && Instant::now() < until => {
                    // Any change of state (a renewal included) looks again; so does the
                    // expiry of the native Lease, within a second.
                    let next = until.min(Instant::now() + Duration::from_secs(1));
                    let _ = timeout_at(next, changes.changed()).await;
                }
                _ => return self.foreign_view(),
            }
        }
    }

    /// The Lease free, for this replica's controller to take, while this replica validly leads
    /// and no native holder stands in the way.
    fn free_view(&self) -> Option<Lease> {
        let permit = self.leadership.check().ok()?;
        if self.native_holder().is_some() {
            return None;
        }
        let mut state = self.lock();
        state.spans.of(permit.term)?;
        let now = Timestamp::now();
        let spec = LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(state.transitions),
            ..LeaseSpec::default()
        };
        Some(self.object(&state, spec))
    }

    /// Our lock's holder (or the native one), renewed at this read.
    fn foreign_view(&self) -> Lease {
        let holder = self
            .native_holder()
            .or_else(|| match self.leadership.state() {
                LeaderState::Follower {
                    holder: Some(h), ..
                } => Some(h),
                _ => None,
            })
            .unwrap_or_else(|| UNKNOWN_HOLDER.to_string());
        let now = Timestamp::now();
        let mut state = self.lock();
        state.resource_version += 1;
        let since = match &state.shown {
            Some((h, since)) if *h == holder => *since,
            _ => now,
        };
        state.shown = Some((holder.clone(), since));
        let seconds = i32::try_from(self.our_lease.as_secs().max(1)).unwrap_or(i32::MAX);
        let spec = LeaseSpec {
            holder_identity: Some(holder),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(MicroTime(since)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(state.transitions),
            ..LeaseSpec::default()
        };
        self.object(&state, spec)
    }

    /// An update: a take or a renew while this replica validly leads, a release at any time;
    /// otherwise a conflict, as a lost race.
    fn update(&self, sent: Lease, encoding: Encoding) -> Result<Lease, Refusal> {
        let name_ok = sent.metadata.name.as_deref() == Some(self.target.name.as_str())
            && sent
                .metadata
                .namespace
                .as_deref()
                .is_none_or(|n| n == self.target.namespace);
        if !name_ok {
            return Err(Refusal {
                code: StatusCode::BAD_REQUEST,
                reason: "BadRequest",
                message: format!("the body is not the Lease {}", self.target),
            });
        }
        let spec = sent.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let permit = self.leadership.check();
        let native = self.native_holder();
        let mut state = self.lock();
        let current = state.resource_version.to_string();
        if sent.metadata.resource_version.as_deref() != Some(current.as_str()) {
            return Err(self.conflict(
                "the object has been modified; please apply your changes \
                to the latest version and try again",
            ));
        }
        if holder.is_empty() {
            // A release (client-go's ReleaseOnCancel): taken whether or not we still lead.
            if let Some(b) = state.bound.take() {
                info!(lease = %self.target, holder = %b.holder, term = %b.term,
                    "the controller released its election");
            }
            state.retired = None;
            return Ok(self.store(&mut state, spec));
        }
        let permit = match permit {
            Ok(p) => p,
            Err(reason) => {
                if let Some(b) = state.bound.take() {
                    info!(lease = %self.target, holder = %b.holder, term = %b.term,
                        reason = %reason, "the controller's election ends with ours");
                    state.retired = Some(b.retire());
                }
                return Err(self.conflict(&format!(
                    "this replica does not lead ({reason}); the controller follows"
                )));
            }
        };
        if let Some(native) = native {
            return Err(self.conflict(&format!(
                "{native} still renews this Lease on the apiserver (the controller's own \
                 election, in a replica not yet behind gateway-leader)"
            )));
        }
        let Some(span) = state.spans.of(permit.term) else {
            return Err(self.conflict("this replica's leadership is changing; try again"));
        };
        let now = Instant::now();
        let current = state
            .bound
            .as_ref()
            .is_some_and(|b| b.term == permit.term && b.span == span);
        if !current {
            if let Some(b) = state.bound.take() {
                info!(lease = %self.target, holder = %b.holder, term = %b.term,
                    "the controller's election ended with a leadership of ours");
                state.retired = Some(b.retire());
            }
        }
        if let Some((retired, until)) = &state.retired {
            if *retired == holder && now < *until {
                return Err(self.conflict(&format!(
                    "{holder} led under a leadership of this replica that has ended; it may \
                     lead again once its own leadership has ended too (in {:.1} s), as a new \
                     one",
                    (*until - now).as_secs_f64()
                )));
            }
        }
        let renew = state.bound.as_ref().is_some_and(|b| b.holder == holder);
        if !renew {
            state.transitions = state.transitions.saturating_add(1);
            info!(lease = %self.target, holder = %holder, term = %permit.term,
                content_type = encoding.content_type(),
                "the controller leads, under this replica's leadership");
        }
        let lease_duration = spec
            .lease_duration_seconds
            .filter(|s| *s > 0)
            .map_or(self.our_lease, |s| {
                Duration::from_secs(s.unsigned_abs().into())
            });
        state.patience = lease_duration;
        state.bound = Some(Bound {
            holder,
            term: permit.term,
            span,
            renewed_at: now,
            lease_duration,
        });
        drop(permit);
        Ok(self.store(&mut state, spec))
    }

    /// Records an accepted update; the Lease as it now stands.
    fn store(&self, state: &mut State, mut spec: LeaseSpec) -> Lease {
        state.resource_version += 1;
        spec.lease_transitions = Some(state.transitions);
        state.shown = None;
        self.object(state, spec)
    }

    fn object(&self, state: &State, spec: LeaseSpec) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.target.name.clone()),
                namespace: Some(self.target.namespace.clone()),
                uid: Some(state.uid.clone()),
                resource_version: Some(state.resource_version.to_string()),
                creation_timestamp: Some(Time(state.created)),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        }
    }

    fn conflict(&self, why: &str) -> Refusal {
        Refusal {
            code: StatusCode::CONFLICT,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on leases.coordination.k8s.io {:?}: {why} \
                 (answered by gateway-leader proxy)",
                self.target.name
            ),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn native_holder(&self) -> Option<String> {
        let native = self.native.lock().unwrap_or_else(|p| p.into_inner());
        match &*native {
            Some(n) => n.live_holder(Instant::now(), Timestamp::now()),
            // Not listed yet: a native leader may be out there.
            None => Some("a replica not yet seen (the apiserver's Lease is not listed yet)".into()),
        }
    }

    /// Withdraws the candidacy once the controller has been silent for its patience, so that a
    /// dead or hung controller never holds the other replicas back.
    async fn watch_liveness(self: Arc<Self>) {
        let Some(candidacy) = self.candidacy.clone() else {
            return;
        };
        loop {
            let due = {
                let mut state = self.lock();
                // Seen here too, so publications never pile up while the controller is quiet.
                if let Some(term) = self.leadership.state().term() {
                    state.spans.of(term);
                }
                state.last_asked + state.patience
            };
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = self.asked.notified() => continue,
                _ = sleep_until(due) => {}
            }
            let silent = {
                let state = self.lock();
                Instant::now() >= state.last_asked + state.patience
            };
            if silent && candidacy.is_campaigning() {
                warn!(lease = %self.target, patience = ?self.lock().patience,
                    "the controller has not asked for its election within its lease duration; \
                     standing aside until it does");
                candidacy.withdraw();
            }
            if silent {
                tokio::select! {
                    _ = self.stop.cancelled() => return,
                    _ = self.asked.notified() => {}
                }
            }
        }
    }
}

impl Drop for ElectionLease {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A uid for the Lease this proxy shows: stable for its life, new with each proxy.
fn uid(target: &LeaseName, at: Timestamp) -> String {
    let micros = at.as_microsecond().unsigned_abs();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in target.to_string().bytes().chain(micros.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        (micros >> 4) & 0xfff,
        micros & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests;
