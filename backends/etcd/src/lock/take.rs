//! How the candidate a release handed the key to takes it (docs/etcd.md, "Handover: one
//! write"): from its watch without a request, or with its spare's keep-alive and a read.

use std::time::Duration;

use etcd_client::GetResponse;
use leader_lock::backend::LockError;
use leader_lock::Term;
use tokio::sync::MutexGuard;
use tokio::time::Instant;
use tracing::info;

use super::Inner;
use crate::held::{Held, Holding};
use crate::keepalive::{LeaseState, LeaseStream};
use crate::knowledge::{Seen, Version};
use crate::spare::Slot;
use crate::value::{revision, term, StoredValue};

/// How a look for a key handed to us ended.
pub(crate) enum Handover {
    /// It was ours to take: we lead under this term, held from `held_from` when that is
    /// before the attempt (`Attempt::Leader`).
    Taken {
        term: Term,
        held_from: Option<Instant>,
    },
    /// Not ours (or not now): the read, to go on with as with any other.
    Not(GetResponse),
}

impl Inner {
    /// Takes the key when a leader's release handed it to us: it names us, on our spare lease.
    ///
    /// No request at all when the watch showed the handover and a request that made sure of
    /// the spare lease (its grant, a keep-alive) was answered as of a revision before the
    /// handover's, within the spare keeper's period and a second: our hold counts from when
    /// that request was sent (`Attempt::Leader::held_from`). Why that is safe: the lease, and
    /// so the key on it, lives at least a lease past that instant; and that instant came
    /// before the handover was written, so before any deletion of the key, from whose sight
    /// every follower waits a lease (a key deleted without a release). From then on only a
    /// holder's guarded write (ours: the old holder's all compare the mod revision the
    /// handover changed), a deletion, or the lease's end change the key. The handover value
    /// carries no `renewTime`, so no follower deletes it as stale (it was timed by no write of
    /// ours). Our first renew, a retry period after the hold began, writes our term and
    /// `renewTime`, as every renew does.
    ///
    /// Otherwise one round trip, no write: the spare's keep-alive joined with a read of the
    /// key; the hold counts from the attempt, sent before both, as any other.
    ///
    /// A key naming us on any other lease (a stale or duplicate record) is not taken.
    pub(super) async fn take_handover(
        &self,
        st: &mut Holding,
        me: &str,
        ttl: i64,
    ) -> Result<Handover, LockError> {
        let mut slot = self.spare.lock().await;
        let handed = slot
            .lease()
            .filter(|s| s.ttl() == ttl)
            .and_then(|s| self.handed_by_watch(s, me, ttl));
        if let Some((version, from)) = handed {
            if let Some(lease) = slot.take_lease() {
                drop(slot);
                let seen = Seen {
                    create_rev: version.create_rev,
                    mod_rev: version.mod_rev,
                    lease: version.lease,
                    value: &version.value,
                };
                let term = self.lead_handed(st, me, seen, lease, "its watch event")?;
                return Ok(Handover::Taken {
                    term,
                    held_from: Some(from),
                });
            }
        }
        if slot.lease().is_none_or(|s| s.ttl() != ttl) {
            drop(slot);
            return Ok(Handover::Not(self.read().await?));
        }
        self.take_by_read(st, me, slot).await
    }

    /// The round trip of `take_handover` without a watch's word (or a recent sure request):
    /// the spare's keep-alive joined with a read of the key, no write; we lead if the read shows
    /// the key handed to us on the spare, and the spare lives.
    async fn take_by_read(
        &self,
        st: &mut Holding,
        me: &str,
        mut slot: MutexGuard<'_, Slot>,
    ) -> Result<Handover, LockError> {
        let Some(spare) = slot.lease_mut() else {
            drop(slot);
            return Ok(Handover::Not(self.read().await?));
        };
        let spare_id = spare.id();
        let (alive, read) = tokio::join!(self.conn.keep_alive(spare), self.read());
        let resp = read?;
        if let Ok(LeaseState::Gone) = alive {
            // Expired or revoked: the key it carried is gone too, whatever the read said.
            slot.lease_gone();
            return Ok(Handover::Not(resp));
        }
        let Some(kv) = resp
            .kvs()
            .first()
            .filter(|kv| kv.lease() == spare_id && handed_to(kv.value(), me))
            .cloned()
        else {
            return Ok(Handover::Not(resp));
        };
        // Ours, but without a live lease behind it no validity: the next attempt looks again.
        alive.map_err(|e| self.conn.keep_alive_error(spare_id, e))?;
        let Some(lease) = slot.take_lease() else {
            return Ok(Handover::Not(resp));
        };
        drop(slot);
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        self.observed
            .lock()
            .present(rev, Seen::from(&kv), Instant::now());
        let term = self.lead_handed(st, me, Seen::from(&kv), lease, "a read")?;
        Ok(Handover::Taken {
            term,
            held_from: None,
        })
    }

    /// The key as the watch last showed it, when it is handed to `me` on `spare`, and the
    /// instant our hold of it counts from (`take_handover`).
    fn handed_by_watch(
        &self,
        spare: &LeaseStream,
        me: &str,
        ttl: i64,
    ) -> Option<(Version, Instant)> {
        let version = self.observed.lock().current()?.clone();
        if version.lease != spare.id() || !handed_to(&version.value, me) {
            return None;
        }
        let from = spare.sure_before(version.mod_rev)?;
        // Older than the keeper's period and a second: the keeper is failing; the round trip
        // makes sure of the lease again.
        let fresh = Duration::from_secs(ttl.unsigned_abs()) / 3 + Duration::from_secs(1);
        (from.elapsed() <= fresh).then_some((version, from))
    }

    /// Leads on the key a release handed to us, seen as `kv`, on `lease` (our spare).
    fn lead_handed(
        &self,
        st: &mut Holding,
        me: &str,
        kv: Seen<'_>,
        lease: LeaseStream,
        seen_by: &'static str,
    ) -> Result<Term, LockError> {
        let value = StoredValue::parse(kv.value).map_err(LockError::malformed)?;
        let t = term(&value, kv.create_rev, kv.mod_rev);
        info!(
            key = %self.keys.text,
            term = %t,
            seen_by,
            "took the lock key handed over by the last holder's release"
        );
        // Every renew carries the term from now on: the handover write is renewed away.
        let value = StoredValue {
            term: Some(revision(t)),
            ..value
        };
        st.held = Some(Held::new(me, kv, t, value, lease));
        Ok(Term(revision(t)))
    }
}

/// Whether `value` is a key's a release handed to `me`: the handover write, naming us.
pub(crate) fn handed_to(value: &[u8], me: &str) -> bool {
    StoredValue::parse(value).is_ok_and(|v| v.holder == me && v.handover && v.renew_time.is_none())
}
