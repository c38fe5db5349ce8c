//! A renew: the keep-alive and the guarded rewrite of our own record, together.

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use leader_lock::{LockError, Term};
use tokio::time::Instant;
use tracing::warn;

use crate::client::{Held, Inner};
use crate::keepalive::LeaseState;
use crate::knowledge::Seen;
use crate::value::revision;

/// How a renew ended.
pub(super) enum Renewed {
    Yes(Term),
    Lost,
}

impl Inner {
    /// Renews what we hold: keep-alive on the lease's stream and the rewrite, together.
    pub(super) async fn renew(&self, h: &mut Held) -> Result<Renewed, LockError> {
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
}
