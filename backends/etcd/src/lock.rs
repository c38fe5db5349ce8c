//! The lock itself: acquire, renew and release, and the follower's answer.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use leader_lock::backend::{
    Attempt, Candidate, ConfigError, LeaderLock, LockError, LockEventStream, LockRecord,
};
use leader_lock::{Term, Timing};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::client::{Held, Inner, Pending, State, Unanswered};
use crate::config::MIN_LEASE;
use crate::handover::{handed_to, Handover};
use crate::keepalive::LeaseState;
use crate::knowledge::{Content, Seen};
use crate::value::{record, revision, term, StoredValue};

/// A follower whose holder's lease is already gone looks again this soon (the delete is near).
const LEASE_GONE_RETRY: Duration = Duration::from_millis(200);

/// An attempt retries for at most this many request timeouts: with the binary's request timeout
/// (a quarter of the renew deadline) that is the renew deadline, which the elector cuts short at
/// the end of a leadership's validity anyway.
const ATTEMPT_TRIES: u32 = 4;

/// The first pause before retrying on the same member; it doubles up to four times this.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A lock on etcd; one per process and lock name.
pub struct EtcdLock {
    pub(crate) inner: Arc<Inner>,
    pub(crate) spare_keeper: JoinHandle<()>,
}

/// How a renew ended.
enum Renewed {
    Yes(Term),
    Lost,
}

/// How an acquire transaction ended.
enum Acquired {
    Yes(Term),
    /// Someone holds the key (as of the revision).
    Taken(i64, KeyValue),
    /// The key is missing but the guard failed; the marker's value, as of the revision.
    Guarded(i64, Option<Vec<u8>>),
}

impl Drop for EtcdLock {
    fn drop(&mut self) {
        self.spare_keeper.abort();
        // A follower going away frees its spare lease at once instead of leaving it to expire.
        // The held lease is left alone: dropping without a release is a crash by design.
        if tokio::runtime::Handle::try_current().is_ok() {
            if let Ok(mut spare) = self.inner.spare.try_lock() {
                if let Some(s) = spare.take() {
                    self.inner.abandon(s);
                }
            }
        }
    }
}

impl EtcdLock {
    /// The full key of the lock (`<prefix><name>`).
    pub fn key(&self) -> &str {
        &self.inner.key_text
    }

    /// The key of the release marker (`<prefix><name>#released`), which holds the last term
    /// released gracefully.
    pub fn release_marker_key(&self) -> String {
        String::from_utf8_lossy(&self.inner.marker).into_owned()
    }

    /// The deadline of each request, as it applies now: the config's
    /// [`request_timeout`](crate::EtcdConfig::request_timeout), else a quarter of the renew
    /// deadline of the timing the elector validated the lock with (before that, of the default
    /// timing's: 2.5 s).
    pub fn request_timeout(&self) -> Duration {
        self.inner.timeout.get()
    }
}

impl Inner {
    /// Follower answer for a key someone else holds.
    async fn follower(&self, kv: &KeyValue, own_lease: Duration) -> Attempt {
        let (holder, term) = match StoredValue::parse(kv.value()) {
            Ok(v) => {
                let t = term(&v, kv.create_revision(), kv.mod_revision());
                (Some(v.holder), Some(Term(revision(t))))
            }
            Err(why) => {
                debug!(key = %self.key_text, %why, "the lock key holds a foreign value; waiting for it to go");
                (None, None)
            }
        };
        let stale_at = self.knowledge().stale_at(own_lease);
        let retry_after = if let Some(at) = stale_at {
            // A record of ours: look again exactly when it would be stale if it stopped changing.
            Some(at.saturating_duration_since(Instant::now()))
        } else if kv.lease() == 0 {
            // A key without a lease never expires; only the watch (a delete) frees it.
            None
        } else {
            let lease = kv.lease();
            let ttl = self
                .call("lease time-to-live", |c| async move {
                    c.lease_client().time_to_live(lease, None).await
                })
                .await;
            match ttl {
                // "Expires in under TTL+1 seconds": wake after TTL; the delete event comes first.
                Ok(r) if r.ttl() > 0 => Some(Duration::from_secs(r.ttl().unsigned_abs())),
                Ok(_) => Some(LEASE_GONE_RETRY),
                Err(_) => None,
            }
        };
        Attempt::Follower {
            holder,
            term,
            retry_after,
        }
    }

    /// Renews what we hold: keep-alive on the lease's stream and the rewrite, together.
    async fn renew(&self, h: &mut Held) -> Result<Renewed, LockError> {
        let value = h.value.renewed();
        let bytes = value.encode();
        let txn = Txn::new()
            .when([
                Compare::create_revision(self.key.clone(), CompareOp::Equal, h.create_rev),
                Compare::lease(self.key.clone(), CompareOp::Equal, h.lease.id()),
                Compare::mod_revision(self.key.clone(), CompareOp::Equal, h.mod_rev),
            ])
            .and_then([TxnOp::put(
                self.key.clone(),
                bytes.clone(),
                Some(PutOptions::new().with_lease(h.lease.id())),
            )])
            .or_else([TxnOp::get(self.key.clone(), None)]);
        // A renew whose answer we never get may still be applied; remember its bytes.
        h.unanswered.sent(&bytes);
        let (alive, written) = tokio::join!(
            h.lease.keep_alive(&self.members, self.timeout.get()),
            self.call("renew transaction", |c| async move {
                c.kv_client().txn(txn).await
            })
        );
        let lease = h.lease.id();
        if let Ok(LeaseState::Gone) = alive {
            warn!(key = %self.key_text, term = h.term, lease, "our etcd lease expired or was revoked; stepping down");
            return Ok(Renewed::Lost);
        }
        let resp = written?;
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        if resp.succeeded() {
            h.mod_rev = rev;
            h.value = value;
            h.written = bytes;
            h.unanswered.clear();
            self.knowledge().present(
                rev,
                Seen {
                    create_rev: h.create_rev,
                    mod_rev: rev,
                    lease: h.lease.id(),
                    value: &h.written,
                },
                Instant::now(),
            );
            // Both halves are needed: the write shows followers we live, the keep-alive keeps
            // the lease (and so the key) at least a lease beyond this renew's start.
            alive.map_err(|e| self.keep_alive_error(lease, e))?;
            return Ok(Renewed::Yes(Term(revision(h.term))));
        }
        let current = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        let Some(kv) = current else {
            warn!(key = %self.key_text, term = h.term, "our lock record vanished without a release (deleted or its lease revoked); stepping down, not recreating it");
            return Ok(Renewed::Lost);
        };
        self.knowledge()
            .present(rev, Seen::from(&kv), Instant::now());
        let ours = kv.create_revision() == h.create_rev && kv.lease() == lease;
        if ours && (h.unanswered.contains(kv.value()) || kv.value() == h.written) {
            // Our own earlier renew whose answer was lost went through: catch up, renew next time.
            h.mod_rev = kv.mod_revision();
            h.written = kv.value().to_vec();
            h.unanswered.clear();
            return Err(LockError::unavailable(format!(
                "etcd renew at {}: an earlier renew's answer was lost; retrying",
                self.endpoints
            )));
        }
        if kv.create_revision() == h.create_rev && kv.lease() != lease {
            warn!(key = %self.key_text, term = h.term, our_lease = lease, lease = kv.lease(), "our lock record was moved onto another lease; stepping down");
        } else {
            warn!(key = %self.key_text, term = h.term, create_revision = kv.create_revision(), "our lock record was replaced or rewritten by someone else; stepping down");
        }
        Ok(Renewed::Lost)
    }

    /// Deletes a stale record of ours if it is still the version we saw go stale.
    async fn delete_stale(&self, kv: &KeyValue) -> Result<(), LockError> {
        let txn = Txn::new()
            .when([
                Compare::create_revision(self.key.clone(), CompareOp::Equal, kv.create_revision()),
                Compare::mod_revision(self.key.clone(), CompareOp::Equal, kv.mod_revision()),
            ])
            .and_then([TxnOp::delete(self.key.clone(), None)]);
        let resp = self
            .call("stale record delete", |c| async move {
                c.kv_client().txn(txn).await
            })
            .await?;
        if resp.succeeded() {
            let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
            let term = StoredValue::parse(kv.value()).map_or(kv.create_revision(), |v| {
                term(&v, kv.create_revision(), kv.mod_revision())
            });
            warn!(key = %self.key_text, term, lease = kv.lease(), "the lock record stopped changing for a lease (its holder no longer renews it); deleted it to take over");
            let mut k = self.knowledge();
            k.deleted(rev, Some(Seen::from(kv)), Instant::now());
            k.forget_holder();
        }
        Ok(())
    }

    /// One acquire transaction: create the key on the spare lease if it is missing (and, with a
    /// guard, only if the release marker says the last holder released `guard`).
    async fn acquire(
        &self,
        st: &mut State,
        me: &str,
        ttl: i64,
        guard: Option<i64>,
    ) -> Result<Acquired, LockError> {
        let (mut lease, fresh) = self.take_spare(ttl).await?;
        let value = StoredValue::new(me.to_string(), ttl.unsigned_abs());
        let bytes = value.encode();
        let mut when = vec![Compare::create_revision(
            self.key.clone(),
            CompareOp::Equal,
            0,
        )];
        if let Some(term) = guard {
            when.push(Compare::value(
                self.marker.clone(),
                CompareOp::Equal,
                term.to_string(),
            ));
        }
        let txn = Txn::new()
            .when(when)
            .and_then([TxnOp::put(
                self.key.clone(),
                bytes.clone(),
                Some(PutOptions::new().with_lease(lease.id())),
            )])
            .or_else([
                TxnOp::get(self.key.clone(), None),
                TxnOp::get(self.marker.clone(), None),
            ]);
        let send = |c: etcd_client::Client| async move { c.kv_client().txn(txn).await };
        // A spare granted earlier is kept alive in the same round trip: the lease then lasts at
        // least a lease beyond this attempt's start, like a fresh grant.
        let (alive, resp) = if fresh {
            (
                Ok(LeaseState::Alive),
                self.call("acquire transaction", send).await,
            )
        } else {
            let lease_ref = &mut lease;
            tokio::join!(
                lease_ref.keep_alive(&self.members, self.timeout.get()),
                self.call("acquire transaction", send)
            )
        };
        let resp = match resp {
            Ok(r) => r,
            Err(LockError::Unavailable { message, source })
                if message.contains("lease not found") =>
            {
                // The spare expired while we followed: the next attempt grants a new one.
                lease.close();
                return Err(LockError::Unavailable { message, source });
            }
            Err(e) => {
                // Applied or not, we cannot tell: the next attempt adopts the key if it is ours.
                st.pending = Some(Pending {
                    lease,
                    value: bytes,
                });
                return Err(e);
            }
        };
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        if !resp.succeeded() {
            *self.spare.lock().await = match alive {
                Ok(LeaseState::Gone) => None,
                _ => Some(lease),
            };
            let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g),
                _ => None,
            });
            let key = gets.next().and_then(|g| g.kvs().first().cloned());
            let marker = gets
                .next()
                .and_then(|g| g.kvs().first().map(|kv| kv.value().to_vec()));
            return Ok(match key {
                Some(kv) => Acquired::Taken(rev, kv),
                None => Acquired::Guarded(rev, marker),
            });
        }
        if rev <= 0 {
            return Err(LockError::malformed(
                "etcd transaction answer without a revision",
            ));
        }
        let lease_id = lease.id();
        self.knowledge().present(
            rev,
            Seen {
                create_rev: rev,
                mod_rev: rev,
                lease: lease_id,
                value: &bytes,
            },
            Instant::now(),
        );
        st.held = Some(Held {
            holder: me.to_string(),
            create_rev: rev,
            term: rev,
            mod_rev: rev,
            value,
            written: bytes,
            unanswered: Unanswered::default(),
            lease,
        });
        match alive {
            Ok(LeaseState::Alive) => Ok(Acquired::Yes(Term(revision(rev)))),
            // The key is ours but its lease may not outlast a renew deadline: no validity from
            // this attempt; the next renew settles it.
            Ok(LeaseState::Gone) => Err(LockError::unavailable(format!(
                "etcd acquire at {}: the spare lease {lease_id} expired meanwhile",
                self.endpoints
            ))),
            Err(e) => Err(self.keep_alive_error(lease_id, e)),
        }
    }

    /// Adopts the key if an acquire whose answer was lost created it, then renews it.
    async fn adopt(&self, st: &mut State, me: &str) -> Result<Option<Term>, LockError> {
        let Some(p) = st.pending.take() else {
            return Ok(None);
        };
        let current = match self.read().await {
            Ok(r) => r,
            Err(e) => {
                st.pending = Some(p);
                return Err(e);
            }
        };
        let rev = current.header().map(|x| x.revision()).unwrap_or(0);
        let on_lease = current
            .kvs()
            .first()
            .filter(|kv| kv.lease() == p.lease.id());
        if let Some(kv) = on_lease.filter(|kv| kv.value() != p.value && handed_to(kv.value(), me)) {
            // Not our acquire but a release that handed us the key on this lease (our spare
            // before the acquire took it): it is the spare again, for the handover to take.
            self.knowledge()
                .present(rev, Seen::from(kv), Instant::now());
            if let Some(old) = self.spare.lock().await.replace(p.lease) {
                self.abandon(old);
            }
            return Ok(None);
        }
        let Some(kv) = on_lease.filter(|kv| kv.value() == p.value) else {
            self.abandon(p.lease);
            return Ok(None);
        };
        let Ok(value) = StoredValue::parse(kv.value()) else {
            self.abandon(p.lease);
            return Ok(None);
        };
        self.knowledge()
            .present(rev, Seen::from(kv), Instant::now());
        let mut h = Held {
            holder: me.to_string(),
            create_rev: kv.create_revision(),
            term: term(&value, kv.create_revision(), kv.mod_revision()),
            mod_rev: kv.mod_revision(),
            value,
            written: p.value.clone(),
            unanswered: Unanswered::default(),
            lease: p.lease,
        };
        info!(key = %self.key_text, term = h.term, "adopting the lock key from an acquire whose answer was lost");
        // Followers time us from our writes, so the lost write must be followed by a fresh one
        // before this attempt counts.
        let renewed = self.renew(&mut h).await;
        match renewed {
            Ok(Renewed::Yes(term)) => {
                st.held = Some(h);
                Ok(Some(term))
            }
            Ok(Renewed::Lost) => {
                self.abandon(h.lease);
                Ok(None)
            }
            Err(e) => {
                st.held = Some(h);
                Err(e)
            }
        }
    }

    /// One attempt, retried on the next member while it fails in a way another member may not
    /// (down, frozen, cut off, or without a Raft leader during an election), within
    /// [`ATTEMPT_TRIES`] request timeouts. The elector stops it sooner when a leadership's
    /// validity ends. Each retry starts from the lock's own state, so a request whose answer was
    /// lost is settled by the next pass (a renew catches up on its own write; an acquire adopts
    /// its key) exactly as a later attempt would settle it.
    pub(crate) async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let started = Instant::now();
        let budget = self.timeout.get() * ATTEMPT_TRIES;
        let mut pause = Duration::ZERO;
        loop {
            let member = self.members.current();
            match self.attempt(c).await {
                Err(e) if retryable(&e) && started.elapsed() + pause < budget => {
                    debug!(key = %self.key_text, error = %e, "lock attempt failed; trying again");
                    // Straight on to a member we moved to; a member that stayed current (the
                    // only one, or an answer that was not its fault) gets a growing pause.
                    if self.members.current() == member {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).clamp(RETRY_PAUSE, RETRY_PAUSE * 4);
                    }
                }
                r => return r,
            }
        }
    }

    async fn attempt(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let me = c.holder();
        let ttl = whole_seconds(c.lease_duration)?;
        let own = c.lease_duration;
        self.touch();
        let mut st = self.state.lock().await;
        // Renewed in place, not taken out and put back: an attempt dropped mid-renew (the
        // elector stops an attempt under way when it shuts down) must leave the record known as
        // ours, or the release that follows finds nothing to release and the followers wait a
        // whole lease instead of milliseconds.
        if let Some(h) = st.held.as_mut().filter(|h| h.holder == me) {
            match self.renew(h).await {
                Ok(Renewed::Yes(term)) => return Ok(Attempt::leader(term)),
                Ok(Renewed::Lost) => {
                    if let Some(h) = st.held.take() {
                        self.abandon(h.lease);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(term) = self.adopt(&mut st, &me).await? {
            return Ok(Attempt::leader(term));
        }

        // Each pass either answers or learns something new (a read, a replay, a release).
        for _ in 0..4 {
            let now = Instant::now();
            let (present, free_at, holder) = {
                let k = self.knowledge();
                (
                    k.current().is_some(),
                    k.free_at(own, now),
                    k.holder().cloned(),
                )
            };
            if present {
                // A key the watch shows naming us, while we hold nothing: a leader's release
                // handed it to us. Taken with the read that any other key gets.
                let handed = self.knowledge().names(&me);
                let resp = if handed {
                    match self.take_handover(&mut st, &me, ttl).await? {
                        Handover::Taken { term, held_from } => {
                            return Ok(Attempt::Leader { term, held_from })
                        }
                        Handover::Not(resp) => resp,
                    }
                } else {
                    self.read().await?
                };
                let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
                let Some(kv) = resp.kvs().first() else {
                    let from = self.knowledge().absent(rev);
                    if let Some(from) = from {
                        self.replay(from, rev).await?;
                    }
                    continue;
                };
                let now = Instant::now();
                if !handed && handed_to(kv.value(), &me) {
                    // Handed to us before the watch told us: the next pass takes it.
                    self.knowledge().present(rev, Seen::from(kv), now);
                    continue;
                }
                let stale = {
                    let mut k = self.knowledge();
                    k.present(rev, Seen::from(kv), now);
                    k.current().is_some_and(|v| {
                        v.content == Content::Heartbeat && v.mod_rev == kv.mod_revision()
                    }) && k.stale_at(own).is_some_and(|at| at <= now)
                };
                if stale {
                    self.delete_stale(kv).await?;
                    continue;
                }
                self.prepare_spare(ttl, &me).await;
                return Ok(self.follower(kv, own).await);
            }
            let free_at = free_at.unwrap_or(now);
            let guard = holder.as_ref().map(|h| h.term).filter(|_| free_at > now);
            match self.acquire(&mut st, &me, ttl, guard).await? {
                Acquired::Yes(term) => return Ok(Attempt::leader(term)),
                Acquired::Taken(rev, kv) => {
                    self.knowledge()
                        .present(rev, Seen::from(&kv), Instant::now());
                    if handed_to(kv.value(), &me) {
                        // Handed to us meanwhile: the next pass takes it.
                        continue;
                    }
                    self.prepare_spare(ttl, &me).await;
                    return Ok(self.follower(&kv, own).await);
                }
                Acquired::Guarded(rev, marker) => {
                    let Some(h) = holder else { continue };
                    if marker.as_deref() == Some(h.term.to_string().as_bytes()) {
                        debug!(key = %self.key_text, term = h.term, "the last holder released the lock");
                        self.knowledge().released(h.term);
                        continue;
                    }
                    let from = self.knowledge().absent(rev);
                    if let Some(from) = from {
                        self.replay(from, rev).await?;
                    }
                    let now = Instant::now();
                    let Some(at) = self.knowledge().free_at(own, now) else {
                        continue;
                    };
                    if at <= now {
                        continue;
                    }
                    info!(key = %self.key_text, term = h.term, holder = %h.holder, wait_ms = (at - now).as_millis() as u64, "the lock record vanished without a release; waiting out its holder's lease before taking it");
                    return Ok(Attempt::Follower {
                        holder: Some(h.holder),
                        term: Some(Term(revision(h.term))),
                        retry_after: Some(at - now),
                    });
                }
            }
        }
        // Still changing under us: look again soon.
        Ok(Attempt::Follower {
            holder: None,
            term: None,
            retry_after: Some(LEASE_GONE_RETRY),
        })
    }

    pub(crate) async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let current = self.read().await?;
        match current.kvs().first() {
            None => Ok(None),
            Some(kv) => record(kv).map(Some).map_err(LockError::malformed),
        }
    }
}

#[async_trait]
impl LeaderLock for EtcdLock {
    fn describe(&self) -> String {
        format!(
            "etcd key {} at {}",
            self.inner.key_text, self.inner.endpoints
        )
    }

    /// The timing rules of [`EtcdConfig::validate`](crate::EtcdConfig::validate), with the
    /// config's request timeout or, when it gave none, a quarter of `timing`'s renew deadline,
    /// which the lock's requests time out at from then on.
    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        let timeout = &self.inner.timeout;
        crate::config::check_timing(timing, timeout.under(timing))?;
        timeout.adopt(timing);
        Ok(())
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let attempt = self.inner.try_acquire_or_renew(c).await;
        if let (Ok(Attempt::Leader { .. }), Ok(ttl)) = (&attempt, whole_seconds(c.lease_duration)) {
            // Off the attempt's path, so that its reads never delay its answer; from the
            // attempt that made us leader on, so that even a short leadership hands over at once.
            let holder = c.holder();
            if self.inner.choice_due(ttl, &holder) {
                let inner = Arc::clone(&self.inner);
                tokio::spawn(async move { inner.choose_ahead(&holder).await });
            }
        }
        attempt
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }

    async fn withdraw(&self, c: &Candidate) -> Result<(), LockError> {
        self.inner.withdraw(&c.holder()).await
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        self.inner.watch().await
    }
}

/// Failures another try may not meet: a member's fault, a timeout, or the lock's own "try again".
fn retryable(e: &LockError) -> bool {
    matches!(e, LockError::Unavailable { .. } | LockError::Timeout(_))
}

fn whole_seconds(d: Duration) -> Result<i64, LockError> {
    if d.subsec_nanos() != 0 || d < MIN_LEASE {
        return Err(LockError::refused(format!(
            "lease-duration {d:?} must be a whole number of seconds, at least {MIN_LEASE:?}, for etcd"
        )));
    }
    i64::try_from(d.as_secs())
        .map_err(|_| LockError::refused(format!("lease-duration {d:?} is too long for etcd")))
}
