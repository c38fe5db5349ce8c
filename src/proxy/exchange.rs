//! What the exchanges of one proxy share: the client they send with, the gate, the count of
//! gated exchanges a drain waits for, their accounting, and the headers that never cross the
//! proxy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderName};
use http::Request;
use leader_lock::leadership::NotLeader;
use leader_lock::Leadership;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use super::classify::Verb;
use super::election_lease::ElectionLease;
use super::relay::RelayClient;
use crate::metrics::{Metrics, ProxyOutcome};

/// At most one refusal is logged per this long; the others are counted in the next line.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);
/// The headers that concern one connection only (RFC 9110 section 7.6.1), never forwarded.
const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
];

/// What every request of one proxy shares.
pub(super) struct Shared {
    /// The replica's own credentials, ungated (the gate is here) and without retries (the
    /// caller's client retries).
    pub client: RelayClient,
    /// This replica's leadership: the gate.
    pub leadership: Leadership,
    /// This replica's identity, named in refusals.
    pub identity: String,
    /// Where every exchange is counted.
    pub metrics: Arc<Metrics>,
    /// One token per gated exchange in flight: the drain waits for them.
    pub gated: TaskTracker,
    /// The latest deadline of a permit a gated exchange took: none but an upgraded stream runs
    /// past it, so the drain waits no longer (a client that stops reading a write's answer
    /// holds its token) and then cuts the streams.
    pub latest_deadline: Mutex<Option<Instant>>,
    /// The refusals, logged at most once a second.
    pub refusals: RefusalLog,
    /// Cancelled when the drain ends: the upgraded streams still open are cut.
    pub cut_streams: CancellationToken,
    /// The controller's own election, answered here (`--proxy-election-lease`).
    pub election: Option<Arc<ElectionLease>>,
}

// === impl Shared ===

impl Shared {
    /// Counts an exchange of `verb` that ended with `outcome`.
    pub(super) fn count(&self, verb: Verb, outcome: ProxyOutcome) {
        self.metrics.proxy_request(verb.as_str(), outcome);
    }
}

/// Logs refused writes at info, at most one line per [`REFUSAL_LOG_EVERY`].
#[derive(Default)]
pub(super) struct RefusalLog {
    last: Mutex<Option<Instant>>,
    suppressed: AtomicU64,
}

// === impl RefusalLog ===

impl RefusalLog {
    /// Logs this refusal, or counts it in the next line.
    pub(super) fn note<B>(&self, req: &Request<B>, verb: Verb, reason: &NotLeader) {
        let now = Instant::now();
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_EVERY) {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            *last = Some(now);
        }
        let also = self.suppressed.swap(0, Ordering::Relaxed);
        info!(verb = verb.as_str(), method = %req.method(), path = req.uri().path(),
            %reason, refused_since_last_line = also, "write refused: not the leader");
    }
}

/// Counts a gated exchange when it ends, with how it ended.
pub(super) struct Recorder {
    /// Where it is counted.
    pub metrics: Arc<Metrics>,
    /// The exchange's verb.
    pub verb: Verb,
    /// How it ended, as far as is known now.
    pub outcome: ProxyOutcome,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.metrics.proxy_request(self.verb.as_str(), self.outcome);
    }
}

/// Removes the hop-by-hop headers, those `Connection` names included.
pub(super) fn strip_hop_by_hop(h: &mut HeaderMap) {
    let named: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named.iter().chain(HOP_BY_HOP) {
        h.remove(n);
    }
    h.remove("keep-alive");
    h.remove("proxy-connection");
}
