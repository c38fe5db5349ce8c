//! The release in one write, and a stopping follower's withdrawal of its candidacy
//! (docs/etcd.md, "Handover: one write").

use etcd_client::{
    Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use leader_lock::backend::{Candidate, LockError};
use leader_lock::Term;
use tokio::time::Instant;
use tracing::info;

use super::Inner;
use crate::held::Held;
use crate::knowledge::Seen;
use crate::spare::Spare;
use crate::successor::{self, Successor};
use crate::value::{term, StoredValue};

impl Inner {
    /// Releases what we hold: hands the key to a live candidate in the release transaction, or
    /// deletes it and writes the release marker; one write either way.
    pub(super) async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        let Ok(rev) = i64::try_from(term.0) else {
            return Ok(false);
        };
        let mut st = self.holding.lock().await;
        let ours = st
            .held
            .as_ref()
            .is_some_and(|h| h.holder == c.holder() && h.term == rev);
        if !ours {
            return Ok(false);
        }
        let Some(h) = st.held.take() else {
            return Ok(false);
        };
        // Chosen ahead, or now (any failure here only means a plain release).
        let ahead = self.succession.take_fresh(h.lease.ttl(), &h.holder);
        let chosen_ahead = ahead.is_some();
        let successor = match ahead {
            Some(s) => Some(s),
            None => successor::look_up(&self.conn, &self.keys, &h.holder)
                .await
                .ok()
                .flatten(),
        };
        let handed = successor
            .as_ref()
            .map(Successor::handed)
            .unwrap_or_default();
        let txn = self.release_txn(&h, successor.as_ref(), &handed);
        let answer = self
            .conn
            .call("release transaction", |c| async move {
                c.kv_client().txn(txn).await
            })
            .await;
        let outcome = answer.map(|r| match &successor {
            Some(s) if r.succeeded() => {
                self.handed_over(&h, s, &handed, &r, chosen_ahead);
                true
            }
            _ => self.released(&r, successor.is_some(), rev),
        });
        // Released, the lease holds nothing (the key and our candidacy went in the write): it
        // is left to expire, not revoked. A revoke is a raft write, and even sent in the
        // background it lands while the successor's keep-alive and read wait for etcd to apply
        // every committed write (or while a follower's acquire waits for its own fsync), and
        // slows the take (docs/etcd.md, "Handover: one write"). A release that failed revokes
        // the lease, which removes what is left of ours.
        if matches!(outcome, Ok(true)) {
            drop(h.lease);
        } else {
            self.conn.abandon(h.lease);
        }
        outcome
    }

    /// The release transaction of `h`. With a `successor`, the key moves onto its lease under
    /// its name (`handed`: `Successor::handed`), if it is still the version we wrote last and
    /// the candidacy is still the one we read (a candidate whose lease ended has no candidacy
    /// left); else (nested) the plain release: the key deleted and the release marker written.
    ///
    /// Our candidacy goes in the same write, whatever else it does: it is on the lease we let
    /// go after, whose revoke this process may not live to send, and a candidacy that outlives
    /// its process would be handed the lock by the next release.
    fn release_txn(&self, h: &Held, successor: Option<&Successor>, handed: &[u8]) -> Txn {
        let key = &self.keys.key;
        let own = self.keys.candidacy(&h.holder);
        let release = self.marked_release(
            vec![
                Compare::create_revision(key.clone(), CompareOp::Equal, h.create_rev),
                Compare::lease(key.clone(), CompareOp::Equal, h.lease.id()),
            ],
            h.term,
            &own,
        );
        let Some(s) = successor else {
            return release;
        };
        Txn::new()
            .when([
                Compare::create_revision(key.clone(), CompareOp::Equal, h.create_rev),
                Compare::lease(key.clone(), CompareOp::Equal, h.lease.id()),
                Compare::mod_revision(key.clone(), CompareOp::Equal, h.mod_rev),
                Compare::mod_revision(s.key.clone(), CompareOp::Equal, s.mod_rev),
            ])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    handed.to_vec(),
                    Some(PutOptions::new().with_lease(s.lease)),
                ),
                TxnOp::delete(own, None),
            ])
            .or_else([TxnOp::txn(release)])
    }

    /// The release transaction `r` handed `h`'s key to `s`, with the value `handed`.
    fn handed_over(
        &self,
        h: &Held,
        s: &Successor,
        handed: &[u8],
        r: &TxnResponse,
        chosen_ahead: bool,
    ) {
        let at = r.header().map(|x| x.revision()).unwrap_or(0);
        info!(
            key = %self.keys.text,
            term = %h.term,
            successor = %s.value.holder,
            successor_term = %at,
            chosen_ahead,
            "handed the lock over to a live candidate"
        );
        self.observed.lock().present(
            at,
            Seen {
                create_rev: h.create_rev,
                mod_rev: at,
                lease: s.lease,
                value: handed,
            },
            Instant::now(),
        );
    }

    /// Whether the release transaction `r` of `term` deleted the key (its nested plain release,
    /// when it `nested` one); noted if so.
    fn released(&self, r: &TxnResponse, nested: bool, term: i64) -> bool {
        let released = if nested {
            r.op_responses().into_iter().any(|o| match o {
                TxnOpResponse::Txn(t) => t.succeeded(),
                _ => false,
            })
        } else {
            r.succeeded()
        };
        if released {
            let at = r.header().map(|x| x.revision()).unwrap_or(0);
            self.note_released(at, term);
        }
        released
    }

    /// Takes our candidacy back: a follower stopping (`LeaderLock::withdraw`).
    ///
    /// One transaction deletes it unless the key is already on our spare lease (handed to us by
    /// a release that read our candidacy before this); then the key is released as its holder
    /// would release it, so the followers take it at once instead of waiting out a vanished
    /// record. The spare lease is let go either way.
    pub(super) async fn withdraw(&self, me: &str) -> Result<(), LockError> {
        // No attempt under way meanwhile: it could take the spare or the key.
        let _st = self.holding.lock().await;
        let Some(spare) = Spare::withdraw(&mut *self.spare.lock().await) else {
            return Ok(());
        };
        let id = spare.id();
        let own = self.keys.candidacy(me);
        let txn = Txn::new()
            .when([Compare::lease(
                self.keys.key.clone(),
                CompareOp::NotEqual,
                id,
            )])
            .and_then([TxnOp::delete(own.clone(), None)])
            .or_else([TxnOp::get(self.keys.key.clone(), None)]);
        let withdrawn = self
            .conn
            .call("candidacy withdrawal", |c| async move {
                c.kv_client().txn(txn).await
            })
            .await;
        let handed = match &withdrawn {
            Ok(r) if !r.succeeded() => r.op_responses().into_iter().find_map(|o| match o {
                TxnOpResponse::Get(g) => g.kvs().first().cloned(),
                _ => None,
            }),
            _ => None,
        };
        let outcome = match handed {
            Some(kv) => self.release_handed(&kv, own).await,
            None => withdrawn.map(|_| ()),
        };
        self.conn.abandon(spare);
        outcome
    }

    /// Releases a key handed to us that we never took, as a holder releases: deleted with the
    /// release marker naming its term, our candidacy with it.
    async fn release_handed(&self, kv: &KeyValue, own: Vec<u8>) -> Result<(), LockError> {
        let t = StoredValue::parse(kv.value())
            .map(|v| term(&v, kv.create_revision(), kv.mod_revision()))
            .map_err(LockError::malformed)?;
        let key = &self.keys.key;
        let txn = self.marked_release(
            vec![
                Compare::create_revision(key.clone(), CompareOp::Equal, kv.create_revision()),
                Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
                Compare::lease(key.clone(), CompareOp::Equal, kv.lease()),
            ],
            t,
            &own,
        );
        let r = self
            .conn
            .call("release of a key handed to us", |c| async move {
                c.kv_client().txn(txn).await
            })
            .await?;
        if r.succeeded() {
            info!(
                key = %self.keys.text,
                term = %t,
                "released the lock key a release handed to us while we were stopping"
            );
            self.note_released(r.header().map(|x| x.revision()).unwrap_or(0), t);
        }
        Ok(())
    }

    /// The release that deletes the key and writes `term` to the release marker, if `when`
    /// holds; our candidacy `own` goes either way.
    fn marked_release(&self, when: Vec<Compare>, term: i64, own: &[u8]) -> Txn {
        Txn::new()
            .when(when)
            .and_then([
                TxnOp::delete(self.keys.key.clone(), None),
                TxnOp::put(self.keys.marker.clone(), term.to_string(), None),
                TxnOp::delete(own.to_vec(), None),
            ])
            .or_else([TxnOp::delete(own.to_vec(), None)])
    }

    /// What this contender knows after its release of `term` went through at revision `at`.
    fn note_released(&self, at: i64, term: i64) {
        let mut k = self.observed.lock();
        k.deleted(at, None, Instant::now());
        k.released(term);
    }
}
