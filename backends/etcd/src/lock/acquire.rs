//! The acquire transaction, and the adoption of a key whose acquire answer was lost.

use etcd_client::{
    Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use leader_lock::backend::LockError;
use leader_lock::Term;
use tokio::time::Instant;
use tracing::info;

use super::take::handed_to;
use super::Inner;
use crate::error::lease_not_found;
use crate::held::{Held, Holding, Pending};
use crate::keepalive::{KeepAliveError, LeaseState, LeaseStream};
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
        st: &mut Holding,
        me: &str,
        ttl: i64,
        guard: Option<i64>,
    ) -> Result<Acquired, LockError> {
        let (mut lease, fresh) = self.spare.take(&self.conn, ttl).await?;
        let value = StoredValue::new(me.to_string(), ttl.unsigned_abs());
        let bytes = value.encode();
        let txn = self.acquire_txn(lease.id(), &bytes, guard);
        let send = |c: etcd_client::Client| async move { c.kv_client().txn(txn).await };
        // A spare granted earlier is kept alive in the same round trip: the lease then lasts at
        // least a lease beyond this attempt's start, like a fresh grant.
        let (alive, resp) = if fresh {
            (
                Ok(LeaseState::Alive),
                self.conn.call("acquire transaction", send).await,
            )
        } else {
            let lease_ref = &mut lease;
            tokio::join!(
                self.conn.keep_alive(lease_ref),
                self.conn.call("acquire transaction", send)
            )
        };
        let resp = match resp {
            Ok(r) => r,
            Err(e) if lease_not_found(&e) => {
                // The spare expired while we followed: the next attempt grants a new one.
                lease.close();
                return Err(e);
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
        if !resp.succeeded() {
            let gone = matches!(alive, Ok(LeaseState::Gone));
            self.spare.put_back((!gone).then_some(lease)).await;
            return Ok(not_created(resp));
        }
        self.created(st, me, resp, (value, bytes), lease, alive)
    }

    /// The acquire transaction: the key created on `lease` with `bytes` if it is missing (and,
    /// with a guard, the marker names that term); else the key and the marker read.
    fn acquire_txn(&self, lease: i64, bytes: &[u8], guard: Option<i64>) -> Txn {
        let keys = &self.keys;
        let mut when = vec![Compare::create_revision(
            keys.key.clone(),
            CompareOp::Equal,
            0,
        )];
        if let Some(term) = guard {
            when.push(Compare::value(
                keys.marker.clone(),
                CompareOp::Equal,
                term.to_string(),
            ));
        }
        Txn::new()
            .when(when)
            .and_then([TxnOp::put(
                keys.key.clone(),
                bytes.to_vec(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([
                TxnOp::get(keys.key.clone(), None),
                TxnOp::get(keys.marker.clone(), None),
            ])
    }

    /// The acquire created the key (`resp`) with `value` on `lease`: we hold it, and lead if
    /// the lease's keep-alive (`alive`) said it lives.
    fn created(
        &self,
        st: &mut Holding,
        me: &str,
        resp: TxnResponse,
        (value, bytes): (StoredValue, Vec<u8>),
        lease: LeaseStream,
        alive: Result<LeaseState, KeepAliveError>,
    ) -> Result<Acquired, LockError> {
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        if rev <= 0 {
            return Err(LockError::malformed(
                "etcd transaction answer without a revision",
            ));
        }
        let lease_id = lease.id();
        let written = Seen {
            create_rev: rev,
            mod_rev: rev,
            lease: lease_id,
            value: &bytes,
        };
        self.observed
            .lock()
            .present(rev, written.clone(), Instant::now());
        st.held = Some(Held::new(me, written, rev, value, lease));
        match alive {
            Ok(LeaseState::Alive) => Ok(Acquired::Yes(Term(revision(rev)))),
            // The key is ours but its lease may not outlast a renew deadline: no validity from
            // this attempt; the next renew settles it.
            Ok(LeaseState::Gone) => Err(LockError::unavailable(format!(
                "etcd acquire at {}: the spare lease {lease_id} expired meanwhile",
                self.conn.endpoints()
            ))),
            Err(e) => Err(self.conn.keep_alive_error(lease_id, e)),
        }
    }

    /// Adopts the key if an acquire whose answer was lost created it, then renews it.
    pub(super) async fn adopt(
        &self,
        st: &mut Holding,
        me: &str,
    ) -> Result<Option<Term>, LockError> {
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
            self.observed
                .lock()
                .present(rev, Seen::from(kv), Instant::now());
            self.spare.restore(&self.conn, p.lease).await;
            return Ok(None);
        }
        let Some(kv) = on_lease.filter(|kv| kv.value() == p.value) else {
            self.conn.abandon(p.lease);
            return Ok(None);
        };
        let Ok(value) = StoredValue::parse(kv.value()) else {
            self.conn.abandon(p.lease);
            return Ok(None);
        };
        self.observed
            .lock()
            .present(rev, Seen::from(kv), Instant::now());
        let t = term(&value, kv.create_revision(), kv.mod_revision());
        let h = Held::new(me, Seen::from(kv), t, value, p.lease);
        info!(
            key = %self.keys.text,
            term = h.term,
            "adopting the lock key from an acquire whose answer was lost"
        );
        self.renew_adopted(st, h).await
    }
}

/// What an acquire that created nothing found: the key someone holds, or, with the key
/// missing, the release marker that failed the guard.
fn not_created(resp: TxnResponse) -> Acquired {
    let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
    let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
        TxnOpResponse::Get(g) => Some(g),
        _ => None,
    });
    let key = gets.next().and_then(|g| g.kvs().first().cloned());
    let marker = gets
        .next()
        .and_then(|g| g.kvs().first().map(|kv| kv.value().to_vec()));
    match key {
        Some(kv) => Acquired::Taken(rev, kv),
        None => Acquired::Guarded(rev, marker),
    }
}
