//! A renew: the keep-alive and the guarded rewrite of our own record, together.

use etcd_client::{KeyValue, TxnOpResponse};
use leader_lock::backend::LockError;
use leader_lock::Term;
use tokio::time::Instant;
use tracing::warn;

use super::Inner;
use crate::held::{Held, Holding};
use crate::keepalive::LeaseState;
use crate::knowledge::Seen;
use crate::value::revision;

/// How a renew ended.
enum Renewed {
    Yes(Term),
    Lost,
}

impl Inner {
    /// Renews what `me` holds, if anything: the term it leads under, or `None` when it holds
    /// nothing (any more: a record lost is let go, its lease with it).
    ///
    /// Renewed in place, not taken out and put back: an attempt dropped mid-renew (the elector
    /// stops an attempt under way when it shuts down) must leave the record known as ours, or
    /// the release that follows finds nothing to release and the followers wait a whole lease
    /// instead of milliseconds.
    pub(super) async fn renew_held(
        &self,
        st: &mut Holding,
        me: &str,
    ) -> Result<Option<Term>, LockError> {
        let Some(h) = st.held.as_mut().filter(|h| h.holder == me) else {
            return Ok(None);
        };
        match self.renew(h).await? {
            Renewed::Yes(term) => Ok(Some(term)),
            Renewed::Lost => {
                if let Some(h) = st.held.take() {
                    self.conn.abandon(h.lease);
                }
                Ok(None)
            }
        }
    }

    /// Adopts `h` (the key an acquire whose answer was lost created) with a renew: followers
    /// time us from our writes, so the lost write must be followed by a fresh one before this
    /// attempt counts. The term when it went through; `h` back when the renew failed.
    pub(super) async fn renew_adopted(
        &self,
        st: &mut Holding,
        mut h: Held,
    ) -> Result<Option<Term>, LockError> {
        match self.renew(&mut h).await {
            Ok(Renewed::Yes(term)) => {
                st.held = Some(h);
                Ok(Some(term))
            }
            Ok(Renewed::Lost) => {
                self.conn.abandon(h.lease);
                Ok(None)
            }
            Err(e) => {
                st.held = Some(h);
                Err(e)
            }
        }
    }

    /// Renews what we hold: keep-alive on the lease's stream and the rewrite, together.
    async fn renew(&self, h: &mut Held) -> Result<Renewed, LockError> {
        let (value, bytes, txn) = h.renewal(&self.keys);
        let (alive, written) = tokio::join!(
            self.conn.keep_alive(&mut h.lease),
            self.conn.call("renew transaction", |c| async move {
                c.kv_client().txn(txn).await
            })
        );
        let lease = h.lease.id();
        if let Ok(LeaseState::Gone) = alive {
            warn!(
                key = %self.keys.text,
                term = h.term,
                lease,
                "our etcd lease expired or was revoked; stepping down"
            );
            return Ok(Renewed::Lost);
        }
        let resp = written?;
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        if resp.succeeded() {
            h.wrote(rev, value, bytes);
            self.observed.lock().present(rev, h.seen(), Instant::now());
            // Both halves are needed: the write shows followers we live, the keep-alive keeps
            // the lease (and so the key) at least a lease beyond this renew's start.
            alive.map_err(|e| self.conn.keep_alive_error(lease, e))?;
            return Ok(Renewed::Yes(Term(revision(h.term))));
        }
        let current = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        let Some(kv) = current else {
            warn!(
                key = %self.keys.text,
                term = h.term,
                "our lock record vanished without a release (deleted or its lease revoked); \
                 stepping down, not recreating it"
            );
            return Ok(Renewed::Lost);
        };
        self.observed
            .lock()
            .present(rev, Seen::from(&kv), Instant::now());
        self.found_instead(h, &kv)
    }

    /// The renew's guard failed and the key holds `kv`: our own earlier renew whose answer was
    /// lost (caught up on; the next renew goes through), or someone else's record (lost).
    fn found_instead(&self, h: &mut Held, kv: &KeyValue) -> Result<Renewed, LockError> {
        if h.is_own_write(kv) {
            h.catch_up(kv);
            return Err(LockError::unavailable(format!(
                "etcd renew at {}: an earlier renew's answer was lost; retrying",
                self.conn.endpoints()
            )));
        }
        let lease = h.lease.id();
        if kv.create_revision() == h.create_rev && kv.lease() != lease {
            warn!(
                key = %self.keys.text,
                term = h.term,
                our_lease = lease,
                lease = kv.lease(),
                "our lock record was moved onto another lease; stepping down"
            );
        } else {
            warn!(
                key = %self.keys.text,
                term = h.term,
                create_revision = kv.create_revision(),
                "our lock record was replaced or rewritten by someone else; stepping down"
            );
        }
        Ok(Renewed::Lost)
    }
}
