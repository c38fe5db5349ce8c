//! One attempt: renew what we hold, or look at the key and take it when it is free.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp};
use leader_lock::{Attempt, Candidate, LockError, Term};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::acquire::Acquired;
use super::renew::Renewed;
use super::take::{handed_to, Handover};
use super::{retryable, whole_seconds};
use crate::client::Inner;
use crate::knowledge::{Content, Seen};
use crate::value::{revision, term, StoredValue};

/// A follower whose holder's lease is already gone looks again this soon (the delete is near).
const LEASE_GONE_RETRY: Duration = Duration::from_millis(200);

/// An attempt retries for at most this many request timeouts: with the binary's request timeout
/// (a quarter of the renew deadline) that is the renew deadline, which the elector cuts short at
/// the end of a leadership's validity anyway.
const ATTEMPT_TRIES: u32 = 4;

/// The first pause before retrying on the same member; it doubles up to four times this.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

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
}
