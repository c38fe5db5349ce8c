//! One attempt, in steps (client-go's `tryAcquireOrRenew`):
//!
//! 1. renew what we hold (`renew.rs`);
//! 2. adopt the key an acquire whose answer was lost created (`acquire.rs`);
//! 3. then up to four passes, each of which answers or learns something new (a read, a replay, a
//!    release): with the key believed present, [`look`](Inner::look) at it (take it if it was
//!    handed to us, delete it if it went stale, else follow); with it believed gone,
//!    [`take_free`](Inner::take_free) it, or learn why not.

use std::ops::ControlFlow::{self, Break, Continue};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp};
use leader_lock::backend::{Attempt, Candidate, LockError};
use leader_lock::Term;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::acquire::Acquired;
use super::take::{handed_to, Handover};
use super::{retryable, whole_seconds, Inner};
use crate::held::Holding;
use crate::knowledge::{Content, HolderSeen, Seen};
use crate::value::{revision, term, StoredValue};

/// A follower whose holder's lease is already gone looks again this soon (the delete is near).
const LEASE_GONE_RETRY: Duration = Duration::from_millis(200);

/// An attempt retries for at most this many request timeouts: with the binary's request timeout
/// (a quarter of the renew deadline) that is the renew deadline, which the elector cuts short at
/// the end of a leadership's validity anyway.
const ATTEMPT_TRIES: u32 = 4;

/// The first pause before retrying on the same member; it doubles up to four times this.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How one pass of an attempt ended: with the attempt's answer, or with something learnt.
type Pass = ControlFlow<Attempt>;

impl Inner {
    /// One attempt, retried on the next member while it fails in a way another member may not
    /// (down, frozen, cut off, or without a Raft leader during an election), within
    /// [`ATTEMPT_TRIES`] request timeouts. The elector stops it sooner when a leadership's
    /// validity ends. Each retry starts from the lock's own state, so a request whose answer was
    /// lost is settled by the next pass (a renew catches up on its own write; an acquire adopts
    /// its key) exactly as a later attempt would settle it.
    pub(super) async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let started = Instant::now();
        let budget = self.conn.timeout() * ATTEMPT_TRIES;
        let mut pause = Duration::ZERO;
        loop {
            let member = self.conn.members().current();
            match self.attempt(c).await {
                Err(e) if retryable(&e) && started.elapsed() + pause < budget => {
                    debug!(key = %self.keys.text, error = %e, "lock attempt failed; trying again");
                    // Straight on to a member we moved to; a member that stayed current (the
                    // only one, or an answer that was not its fault) gets a growing pause.
                    if self.conn.members().current() == member {
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
        self.usage.touch();
        let mut st = self.holding.lock().await;
        if let Some(term) = self.renew_held(&mut st, &me).await? {
            return Ok(Attempt::leader(term));
        }
        if let Some(term) = self.adopt(&mut st, &me).await? {
            return Ok(Attempt::leader(term));
        }
        for _ in 0..4 {
            let now = Instant::now();
            let (present, free_at, holder) = {
                let k = self.observed.lock();
                (
                    k.current().is_some(),
                    k.free_at(own, now),
                    k.holder().cloned(),
                )
            };
            let pass = if present {
                self.look(&mut st, &me, ttl, own).await?
            } else {
                let free_at = free_at.unwrap_or(now);
                let guard = holder.as_ref().map(|h| h.term).filter(|_| free_at > now);
                self.take_free(&mut st, &me, (ttl, own), holder, guard)
                    .await?
            };
            if let Break(answer) = pass {
                return Ok(answer);
            }
        }
        // Still changing under us: look again soon.
        Ok(Attempt::Follower {
            holder: None,
            term: None,
            retry_after: Some(LEASE_GONE_RETRY),
        })
    }

    /// The key believed present. A key the watch shows naming us, while we hold nothing, was
    /// handed to us by a leader's release: taken (`take.rs`), or else read as any other. A
    /// key read is then deleted if it is a record of ours that stopped changing for a lease,
    /// and followed otherwise.
    async fn look(
        &self,
        st: &mut Holding,
        me: &str,
        ttl: i64,
        own: Duration,
    ) -> Result<Pass, LockError> {
        let handed = self.observed.lock().names(me);
        let resp = if handed {
            match self.take_handover(st, me, ttl).await? {
                Handover::Taken { term, held_from } => {
                    return Ok(Break(Attempt::Leader { term, held_from }))
                }
                Handover::Not(resp) => resp,
            }
        } else {
            self.read().await?
        };
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        let Some(kv) = resp.kvs().first() else {
            self.explain_absence(rev).await?;
            return Ok(Continue(()));
        };
        let now = Instant::now();
        if !handed && handed_to(kv.value(), me) {
            // Handed to us before the watch told us: the next pass takes it.
            self.observed.lock().present(rev, Seen::from(kv), now);
            return Ok(Continue(()));
        }
        if self.went_stale(rev, kv, own, now) {
            self.delete_stale(kv).await?;
            return Ok(Continue(()));
        }
        self.spare.prepare(&self.conn, &self.keys, ttl, me).await;
        Ok(Break(self.follower(kv, own).await))
    }

    /// The key believed gone: the acquire transaction (`acquire.rs`), guarded by the release
    /// marker while `holder`, the last holder we saw, may still have to be waited for.
    async fn take_free(
        &self,
        st: &mut Holding,
        me: &str,
        (ttl, own): (i64, Duration),
        holder: Option<HolderSeen>,
        guard: Option<i64>,
    ) -> Result<Pass, LockError> {
        match self.acquire(st, me, ttl, guard).await? {
            Acquired::Yes(term) => Ok(Break(Attempt::leader(term))),
            Acquired::Taken(rev, kv) => {
                self.observed
                    .lock()
                    .present(rev, Seen::from(&kv), Instant::now());
                if handed_to(kv.value(), me) {
                    // Handed to us meanwhile: the next pass takes it.
                    return Ok(Continue(()));
                }
                self.spare.prepare(&self.conn, &self.keys, ttl, me).await;
                Ok(Break(self.follower(&kv, own).await))
            }
            Acquired::Guarded(rev, marker) => self.guarded(holder, rev, marker, own).await,
        }
    }

    /// The key missing, but the acquire's guard failed (as of `rev`, the marker holding
    /// `marker`): the last holder released it, and the next pass takes it; or it vanished
    /// without a release, and it is free only once its holder's wait is over
    /// (`Knowledge::free_at`).
    async fn guarded(
        &self,
        holder: Option<HolderSeen>,
        rev: i64,
        marker: Option<Vec<u8>>,
        own: Duration,
    ) -> Result<Pass, LockError> {
        let Some(h) = holder else {
            return Ok(Continue(()));
        };
        if marker.as_deref() == Some(h.term.to_string().as_bytes()) {
            debug!(key = %self.keys.text, term = h.term, "the last holder released the lock");
            self.observed.lock().released(h.term);
            return Ok(Continue(()));
        }
        self.explain_absence(rev).await?;
        let now = Instant::now();
        let Some(at) = self.observed.lock().free_at(own, now) else {
            return Ok(Continue(()));
        };
        if at <= now {
            return Ok(Continue(()));
        }
        info!(
            key = %self.keys.text,
            term = h.term,
            holder = %h.holder,
            wait_ms = (at - now).as_millis() as u64,
            "the lock record vanished without a release; waiting out its holder's lease before \
             taking it"
        );
        Ok(Break(Attempt::Follower {
            holder: Some(h.holder),
            term: Some(Term(revision(h.term))),
            retry_after: Some(at - now),
        }))
    }

    /// A read as of `rev` found the key missing: when we believed it present, its history
    /// since the version we saw tells how it went.
    async fn explain_absence(&self, rev: i64) -> Result<(), LockError> {
        let from = self.observed.lock().absent(rev);
        if let Some(from) = from {
            self.replay(from, rev).await?;
        }
        Ok(())
    }

    /// Notes `kv`, read as of `rev` at `now`; whether it is a record of ours that has not
    /// changed for the holder's wait (`Knowledge::stale_at`).
    fn went_stale(&self, rev: i64, kv: &KeyValue, own: Duration, now: Instant) -> bool {
        let mut k = self.observed.lock();
        k.present(rev, Seen::from(kv), now);
        k.current()
            .is_some_and(|v| v.content == Content::Heartbeat && v.mod_rev == kv.mod_revision())
            && k.stale_at(own).is_some_and(|at| at <= now)
    }

    /// Follower answer for a key someone else holds.
    async fn follower(&self, kv: &KeyValue, own_lease: Duration) -> Attempt {
        let (holder, term) = match StoredValue::parse(kv.value()) {
            Ok(v) => {
                let t = term(&v, kv.create_revision(), kv.mod_revision());
                (Some(v.holder), Some(Term(revision(t))))
            }
            Err(why) => {
                debug!(
                    key = %self.keys.text,
                    %why,
                    "the lock key holds a foreign value; waiting for it to go"
                );
                (None, None)
            }
        };
        let stale_at = self.observed.lock().stale_at(own_lease);
        let retry_after = if let Some(at) = stale_at {
            // A record of ours: look again exactly when it would be stale if it stopped changing.
            Some(at.saturating_duration_since(Instant::now()))
        } else if kv.lease() == 0 {
            // A key without a lease never expires; only the watch (a delete) frees it.
            None
        } else {
            let lease = kv.lease();
            let ttl = self
                .conn
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
        let key = &self.keys.key;
        let txn = Txn::new()
            .when([
                Compare::create_revision(key.clone(), CompareOp::Equal, kv.create_revision()),
                Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
            ])
            .and_then([TxnOp::delete(key.clone(), None)]);
        let resp = self
            .conn
            .call("stale record delete", |c| async move {
                c.kv_client().txn(txn).await
            })
            .await?;
        if resp.succeeded() {
            let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
            let term = StoredValue::parse(kv.value()).map_or(kv.create_revision(), |v| {
                term(&v, kv.create_revision(), kv.mod_revision())
            });
            warn!(
                key = %self.keys.text,
                term,
                lease = kv.lease(),
                "the lock record stopped changing for a lease (its holder no longer renews it); \
                 deleted it to take over"
            );
            let mut k = self.observed.lock();
            k.deleted(rev, Some(Seen::from(kv)), Instant::now());
            k.forget_holder();
        }
        Ok(())
    }
}
