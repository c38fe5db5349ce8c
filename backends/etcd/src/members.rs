//! The etcd members the lock talks to: one client per endpoint, one of them current, and the
//! move to the next one when the current one fails.
//!
//! etcd-client balances one channel over every endpoint (tower's power-of-two-choices with a
//! constant load, i.e. a random ready connection per request). A killed member then fails a
//! share of the requests, and a frozen or cut-off one keeps its HTTP/2 connection "ready" while
//! nothing answers: every request, keep-alive stream and watch that lands there hangs until its
//! own timeout or the HTTP/2 ping notices, and the next request may land there again. So the
//! lock keeps one client per endpoint instead and talks to one member at a time: a request that
//! fails or times out moves the lock to another member (the first in turn that answers a status
//! request and knows a Raft leader), the attempt is retried there at once (`lock/attempt.rs`),
//! the lease keep-alive stream reopens there (`keepalive.rs`), and a watch opened on the member
//! left behind ends so the elector reopens it on the new one (`watch.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use leader_lock::backend::LockError;
use leader_lock::clock;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::map_error;
use crate::timeout::RequestTimeout;

/// One endpoint and its client, connected on first use.
struct Member {
    /// Its endpoint, as configured.
    url: String,
    /// Its client once connected; the lock is never held across a request.
    client: Mutex<Option<Client>>,
    /// Its etcd member ID once an answer named it (0: not yet), to recognise it as the Raft
    /// leader other members still name after it died.
    id: AtomicU64,
}

/// How often the members are asked again while they all still name a killed member as their
/// Raft leader: a request sent there would hang for a whole request timeout.
const ELECTION_POLL: Duration = Duration::from_millis(50);

/// How many request timeouts a choice waits for an election at most: an attempt's whole budget
/// (`lock/attempt.rs`), past which a hanging write costs no more than giving up.
const ELECTION_TRIES: u32 = 4;

/// The members and which one is current.
pub(crate) struct Members {
    /// One per endpoint, in the configured order.
    members: Vec<Member>,
    /// How each member is connected (TLS, credentials, timeouts).
    options: ConnectOptions,
    /// The deadline of each request (shared with the lock's `Conn`).
    timeout: RequestTimeout,
    /// The index of the member requests go to.
    current: AtomicUsize,
    /// The current member's index, for the watches that must leave a member the lock left.
    moved: watch::Sender<usize>,
    /// The member that failed last, while the next one is not chosen yet (`usize::MAX`: none).
    left: AtomicUsize,
    /// Whether the member that failed last refused (it is down) rather than timed out (it may
    /// be frozen, or cut off from us but not from the cluster).
    left_down: AtomicBool,
    /// One choice at a time.
    choosing: tokio::sync::Mutex<()>,
}

impl Members {
    /// The members of `endpoints` (at least one), none connected yet; the first is current.
    pub(crate) fn new(
        endpoints: &[String],
        options: ConnectOptions,
        timeout: RequestTimeout,
    ) -> Self {
        Members {
            members: endpoints
                .iter()
                .map(|url| Member {
                    url: url.clone(),
                    client: Mutex::new(None),
                    id: AtomicU64::new(0),
                })
                .collect(),
            options,
            timeout,
            current: AtomicUsize::new(0),
            moved: watch::channel(0).0,
            left: AtomicUsize::new(usize::MAX),
            left_down: AtomicBool::new(false),
            choosing: tokio::sync::Mutex::new(()),
        }
    }

    /// How many endpoints there are.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// The index of the current member.
    pub(crate) fn current(&self) -> usize {
        self.current.load(Ordering::Acquire)
    }

    /// The URL of member `i`.
    pub(crate) fn url(&self, i: usize) -> &str {
        self.members.get(i).map_or("", |m| m.url.as_str())
    }

    /// Changes of the current member (its index), for a stream opened on one member.
    pub(crate) fn subscribe(&self) -> watch::Receiver<usize> {
        self.moved.subscribe()
    }

    /// The current member and its client, connecting it first if needed (with a user, that
    /// authenticates, so it runs under the per-request timeout). A failed connect moves on.
    pub(crate) async fn client(&self) -> Result<(usize, Client), LockError> {
        if self.left.load(Ordering::Acquire) != usize::MAX {
            self.choose().await;
        }
        let i = self.current();
        let member = &self.members[i];
        if let Some(c) = guard(&member.client).clone() {
            return Ok((i, c));
        }
        let connect = Client::connect([member.url.as_str()], Some(self.options.clone()));
        match tokio::time::timeout(self.timeout.get(), connect).await {
            Ok(Ok(c)) => {
                *guard(&member.client) = Some(c.clone());
                Ok((i, c))
            }
            Ok(Err(e)) => {
                let e = map_error(&member.url, "connecting", e);
                if moves(&e) {
                    self.failed(i, &e);
                }
                Err(e)
            }
            Err(_) => {
                let e = LockError::Timeout(self.timeout.get());
                self.failed(i, &e);
                Err(e)
            }
        }
    }

    /// The options every member's client connects with.
    pub(crate) fn options(&self) -> &ConnectOptions {
        &self.options
    }

    /// Keeps `client` as member `i`'s (one connected and checked at startup).
    pub(crate) fn keep(&self, i: usize, client: Client) {
        if let Some(m) = self.members.get(i) {
            *guard(&m.client) = Some(client);
        }
    }

    /// The current member's client if it is connected; never connects.
    pub(crate) fn cached(&self) -> Option<(usize, Client)> {
        let i = self.current();
        guard(&self.members[i].client).clone().map(|c| (i, c))
    }

    /// Member `i` failed a request with `e`: when it is still the current one, the next member
    /// becomes current, and `i`'s connection is dropped so that coming back to it later starts
    /// afresh rather than on a connection that may hang.
    pub(crate) fn failed(&self, i: usize, e: &LockError) {
        let n = self.members.len();
        if n < 2 {
            return;
        }
        let next = (i + 1) % n;
        if self
            .current
            .compare_exchange(i, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            guard(&self.members[i].client).take();
            self.left_down
                .store(!matches!(e, LockError::Timeout(_)), Ordering::Release);
            self.left.store(i, Ordering::Release);
            self.moved.send_replace(next);
            warn!(
                from = %self.members[i].url,
                error = %e,
                "etcd member failed a request; leaving it for another endpoint"
            );
        }
    }

    /// Chooses where to go after a failure: every other member is asked for its status at once
    /// (served locally, no Raft round), and the first in turn that answers and names a Raft
    /// leader other than the member left behind becomes current; else the first that names a
    /// leader at all; else the first that answers; else the next in turn. A frozen or cut-off
    /// member does not answer, a killed one fails at once, so neither is chosen while a healthy
    /// one answers, and coming back round to it does not cost another timeout.
    ///
    /// When the member left behind was the Raft leader and is down (it refused) or frozen, the
    /// others still name it until they elect another one (etcd's election timeout and more),
    /// and a write sent to them meanwhile is forwarded to it and hangs for a whole request
    /// timeout even if the election ends a moment later: at a tight timing, long enough to step
    /// the leading replica down (docs/etcd.md, "A cluster of members"; docs/benchmarks.md,
    /// "Production topologies"). So while every member that answers names the member left
    /// behind or no leader, they are asked again every [`ELECTION_POLL`] (for at most an
    /// attempt's budget; the elector ends the attempt sooner when the leadership's validity
    /// runs out), and the write goes out as soon as one knows the new leader: when the member
    /// left behind refused and does not answer its status (it is down), or when one of the
    /// others names no leader (an election is under way). A member that only timed out, while
    /// the others all still name it, is not waited for: it may be cut off from us only, still
    /// leading them; nor is one that refused a request and then answers its status (a passing
    /// "unavailable" from a live leader).
    async fn choose(&self) {
        let _one = self.choosing.lock().await;
        let left = self.left.swap(usize::MAX, Ordering::AcqRel);
        if left == usize::MAX {
            return;
        }
        let n = self.members.len();
        let limit = (self.timeout.get() / 2).max(Duration::from_millis(100));
        let left_id = self.members[left].id.load(Ordering::Acquire);
        let down = self.left_down.load(Ordering::Acquire);
        let waited = Instant::now();
        let order: Vec<usize> = (1..n).map(|k| (left + k) % n).collect();
        let answers = loop {
            // The member left behind is asked too when it refused: one that answers is alive
            // (it failed with a passing "unavailable", say) and is not waited out even if the
            // others name it. One that timed out is not: it would only time out again.
            let (answers, left_alive) = tokio::join!(
                futures::future::join_all(order.iter().map(|&i| self.status(i, limit))),
                async { down && self.status(left, limit).await.is_some() }
            );
            let dead = down && !left_alive;
            if !electing(&answers, left_id, dead)
                || waited.elapsed() >= self.timeout.get() * ELECTION_TRIES
            {
                break answers;
            }
            tokio::time::sleep(ELECTION_POLL).await;
        };
        if let Some(i) = pick(&answers, left_id).and_then(|k| order.get(k).copied()) {
            if self.current.swap(i, Ordering::AcqRel) != i {
                self.moved.send_replace(i);
            }
        }
        let now = self.current();
        info!(endpoint = %self.url(now), mono_ms = clock::mono_ms(), answered = ?answers,
            waited = ?waited.elapsed(), "using etcd endpoint");
    }

    /// Remembers member `i`'s etcd member ID, from the header of one of its answers.
    pub(crate) fn learn(&self, i: usize, id: u64) {
        if let Some(m) = self.members.get(i) {
            m.id.store(id, Ordering::Release);
        }
    }

    /// Member `i`'s status within `limit`: the Raft leader it knows (0: none), or `None` when it
    /// does not answer.
    async fn status(&self, i: usize, limit: Duration) -> Option<u64> {
        let member = &self.members[i];
        let cached = guard(&member.client).clone();
        let probe = async {
            let client = match cached {
                Some(c) => c,
                None => {
                    let c = Client::connect([member.url.as_str()], Some(self.options.clone()))
                        .await
                        .ok()?;
                    *guard(&member.client) = Some(c.clone());
                    c
                }
            };
            let status = client.maintenance_client().status().await.ok()?;
            if let Some(h) = status.header() {
                member.id.store(h.member_id(), Ordering::Release);
            }
            Some(status.leader())
        };
        tokio::time::timeout(limit, probe).await.ok().flatten()
    }

    /// Makes member `i` current without a failure (the member connect tries next).
    pub(crate) fn settle(&self, i: usize) {
        self.left.store(usize::MAX, Ordering::Release);
        if self.current.swap(i, Ordering::AcqRel) != i {
            self.moved.send_replace(i);
        }
    }

    /// Logs the current member, as [`choose`](Self::choose) does after each move: which member
    /// a replica talks to is what an operator needs to know when one fails, and the bench reads
    /// it (`mono_ms`, `CLOCK_MONOTONIC`) to fault the very member under the leading replica.
    pub(crate) fn announce(&self) {
        info!(
            endpoint = %self.url(self.current()),
            mono_ms = clock::mono_ms(),
            "using etcd endpoint"
        );
    }
}

/// Whether a choice should ask the members again: some member answered (`answers`: the Raft
/// leader each names, 0 for none; `None` for no answer), every one that answered names the
/// member left behind (`left`, its member ID; 0 when unknown) or no leader, so a write sent to
/// any of them now would be forwarded to it or refused, and the election that will replace it
/// is sure to come: that member is `dead` (it refused and does not answer its status), or one
/// of the others already names no leader.
fn electing(answers: &[Option<u64>], left: u64, dead: bool) -> bool {
    answers.iter().any(Option::is_some)
        && answers.iter().flatten().all(|&l| l == 0 || l == left)
        && ((dead && left != 0) || answers.iter().flatten().any(|&l| l == 0))
}

/// Which of `answers` (its position) a choice moves to: the first that names a Raft leader
/// other than the member left behind (`left`), else the first that names a leader at all,
/// else the first that answered; `None` when none did.
fn pick(answers: &[Option<u64>], left: u64) -> Option<usize> {
    answers
        .iter()
        .position(|a| a.is_some_and(|l| l != 0 && l != left))
        .or_else(|| answers.iter().position(|a| a.is_some_and(|l| l != 0)))
        .or_else(|| answers.iter().position(Option::is_some))
}

/// Whether an error may be the member's own (down, frozen, cut off, without a leader), so that
/// another member may do better: everything but a refusal or a malformed answer.
pub(crate) fn moves(e: &LockError) -> bool {
    matches!(e, LockError::Unavailable { .. } | LockError::Timeout(_))
}

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether another member might answer where this one failed: transport failures and the
/// server's "unavailable", "deadline exceeded", "no leader"-like codes; not an answer about the
/// request itself (a missing lease, a refused user, a bad argument).
pub(crate) fn member_fault(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Unknown
                | Code::Internal
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted
        ),
        etcd_client::Error::InvalidArgs(_)
        | etcd_client::Error::InvalidUri(_)
        | etcd_client::Error::InvalidMetadataValue(_)
        | etcd_client::Error::Utf8Error(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The member ID of the Raft leader that failed under us.
    const LEFT: u64 = 7;
    /// The member ID of the Raft leader the others elect after it.
    const NEW: u64 = 9;

    #[test]
    fn a_choice_waits_while_every_answer_still_names_the_dead_raft_leader() {
        // The election under way: the survivors still name the dead leader, or none yet.
        for answers in [
            [Some(LEFT), Some(LEFT)],
            [Some(LEFT), Some(0)],
            [Some(0), Some(0)],
            [None, Some(LEFT)],
        ] {
            assert!(electing(&answers, LEFT, true), "{answers:?}");
        }
        // One names the new leader: the write goes there at once.
        let answers = [Some(LEFT), Some(NEW)];
        assert!(!electing(&answers, LEFT, true));
        assert_eq!(pick(&answers, LEFT), Some(1));
        let answers = [Some(NEW), Some(0)];
        assert!(!electing(&answers, LEFT, true));
        assert_eq!(pick(&answers, LEFT), Some(0));
    }

    #[test]
    fn a_choice_waits_for_the_election_that_replaces_a_frozen_raft_leader() {
        // It timed out (frozen, or cut off from us only). Once a member names no leader, an
        // election is under way: wait for it rather than be forwarded to the frozen one.
        for answers in [[Some(0), Some(LEFT)], [Some(0), Some(0)], [None, Some(0)]] {
            assert!(electing(&answers, LEFT, false), "{answers:?}");
        }
        // One names the new leader (the thawed old one may still name itself): go there.
        let answers = [Some(LEFT), Some(NEW)];
        assert!(!electing(&answers, LEFT, false));
        assert_eq!(pick(&answers, LEFT), Some(1));
    }

    #[test]
    fn a_choice_does_not_wait_for_a_member_that_may_be_alive_or_for_silence() {
        // Every other member still names the member that timed out: it may be cut off from us
        // only, leading them; a write through them reaches it.
        let answers = [Some(LEFT), Some(LEFT)];
        assert!(!electing(&answers, LEFT, false));
        assert_eq!(pick(&answers, LEFT), Some(0));
        // Nobody answers: nothing to wait for; the choice stays where it is.
        let answers = [None, None];
        assert!(!electing(&answers, LEFT, true));
        assert_eq!(pick(&answers, LEFT), None);
        // A member whose ID we never learnt is not waited for when it refused.
        assert!(!electing(&[Some(LEFT), Some(LEFT)], 0, true));
        // Out of patience in an election: one that names a leader, else one that answered.
        assert_eq!(pick(&[Some(0), Some(LEFT)], LEFT), Some(1));
        assert_eq!(pick(&[None, Some(0)], LEFT), Some(1));
        assert_eq!(pick(&[Some(0), Some(NEW)], LEFT), Some(1));
    }
}
