//! The acquire transaction, and the adoption of a key whose acquire answer was lost.

use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};
use leader_lock::{LockError, Term};
use tokio::time::Instant;
use tracing::info;

use super::renew::Renewed;
use super::take::handed_to;
use crate::client::{Held, Inner, Pending, State, Unanswered};
use crate::keepalive::LeaseState;
use crate::knowledge::Seen;
use crate::value::{revision, term, StoredValue};

/// How an acquire transaction ended.
pub(super) enum Acquired {
    Yes(Term),
    /// Someone holds the key (as of the revision).
    Taken(i64, KeyValue),
    /// The key is missing but the guard failed; the marker's value, as of the revision.
    Guarded(i64, Option<Vec<u8>>),
}

impl Inner {
    /// One acquire transaction: create the key on the spare lease if it is missing (and, with a
    /// guard, only if the release marker says the last holder released `guard`).
    pub(super) async fn acquire(
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
    pub(super) async fn adopt(&self, st: &mut State, me: &str) -> Result<Option<Term>, LockError> {
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
}
