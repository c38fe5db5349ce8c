//! The spare lease a follower keeps ready, so that taking a released lock is one round trip,
//! and the candidacy registered on it, so that a releasing leader can hand the key over; and
//! when an elector last used the lock, which decides how long they are kept.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::PutOptions;
use leader_lock::backend::LockError;
use tokio::sync::MutexGuard;
use tokio::time::Instant;
use tracing::debug;

use crate::client::Conn;
use crate::keepalive::{LeaseState, LeaseStream};
use crate::keys::Keys;
use crate::value::StoredValue;

/// The spare lease and the candidacy attached to it. Behind its own lock, held across the
/// requests that grant it, register it or keep it alive, so that an attempt never takes it
/// half-made.
#[derive(Default)]
pub(crate) struct Spare(tokio::sync::Mutex<Slot>);

/// The spare lease, if any, which lease our candidacy is attached to, and the candidacy a
/// follower wants.
#[derive(Default)]
pub(crate) struct Slot {
    /// Granted ahead and kept alive a third of its TTL apart.
    lease: Option<LeaseStream>,
    /// The lease our candidacy (`<key>#candidates/<holder>`) is attached to, 0 for none.
    registered: i64,
    /// The identity and TTL of the candidacy a follower asked for, until the spare is taken or
    /// let go: what the keeper grants and registers again when a grant or put failed (a
    /// follower whose watch shows the holder renewing makes no attempt that would).
    wanted: Option<(String, i64)>,
}

impl Slot {
    /// The spare lease, if any.
    pub(crate) fn lease(&self) -> Option<&LeaseStream> {
        self.lease.as_ref()
    }

    /// The spare lease, to keep alive in place.
    pub(crate) fn lease_mut(&mut self) -> Option<&mut LeaseStream> {
        self.lease.as_mut()
    }

    /// Takes the spare lease to lead on it (or to let it go): no candidacy is wanted any more.
    pub(crate) fn take_lease(&mut self) -> Option<LeaseStream> {
        self.wanted = None;
        self.lease.take()
    }

    /// Forgets a spare lease that expired or was revoked; a follower's candidacy is still
    /// wanted, on a new one.
    pub(crate) fn lease_gone(&mut self) {
        self.lease = None;
    }
}

impl Spare {
    /// The slot, for a caller that decides on the lease and uses it under the same lock.
    pub(crate) async fn lock(&self) -> MutexGuard<'_, Slot> {
        self.0.lock().await
    }

    /// Grants the spare lease while following and registers `me` as a candidate on it
    /// (`<key>#candidates/<me>`, attached to the spare, so it goes when the spare goes). One
    /// write per spare lease; a grant or put that fails is tried again by the keeper
    /// ([`tend`](Self::tend)).
    pub(crate) async fn prepare(&self, conn: &Conn, keys: &Keys, ttl: i64, me: &str) {
        let mut slot = self.0.lock().await;
        slot.wanted = Some((me.to_string(), ttl));
        register(&mut slot, conn, keys).await;
    }

    /// Takes the spare lease of `ttl` for an acquire, granting one if there is none; returns it
    /// and whether it was just granted.
    pub(crate) async fn take(
        &self,
        conn: &Conn,
        ttl: i64,
    ) -> Result<(LeaseStream, bool), LockError> {
        let spare = self.0.lock().await.take_lease();
        match spare {
            Some(s) if s.ttl() == ttl => Ok((s, false)),
            other => {
                if let Some(s) = other {
                    conn.abandon(s);
                }
                Ok((conn.grant(ttl).await?, true))
            }
        }
    }

    /// Puts back what an acquire that did not take the key leaves of the spare (`None`: the
    /// lease is gone).
    pub(crate) async fn put_back(&self, lease: Option<LeaseStream>) {
        self.0.lock().await.lease = lease;
    }

    /// Makes `lease` the spare again (a key handed to us on it is for the handover to take),
    /// letting go of any other.
    pub(crate) async fn restore(&self, conn: &Conn, lease: LeaseStream) {
        if let Some(old) = self.0.lock().await.lease.replace(lease) {
            conn.abandon(old);
        }
    }

    /// Takes the spare and forgets its candidacy: a follower withdrawing.
    pub(crate) fn withdraw(slot: &mut Slot) -> Option<LeaseStream> {
        slot.registered = 0;
        slot.take_lease()
    }

    /// Lets the spare go at once if nobody else holds its lock: the lock dropped.
    pub(crate) fn let_go(&self, conn: &Conn) {
        if let Ok(mut slot) = self.0.try_lock() {
            if let Some(s) = slot.take_lease() {
                conn.abandon(s);
            }
        }
    }

    /// How long the keeper sleeps before its next turn: a third of the spare's TTL (a second
    /// while there is none).
    pub(crate) async fn period(&self) -> Duration {
        self.0
            .lock()
            .await
            .lease
            .as_ref()
            .map_or(Duration::from_secs(1), |s| {
                Duration::from_secs(s.ttl().unsigned_abs()) / 3
            })
    }

    /// One turn of the keeper: the spare is let go (its candidacy with it) once nobody has
    /// used the lock (`usage`) for two of its TTLs, else kept alive, and a candidacy a follower
    /// wants but did not get (a grant or put that failed) is tried again.
    ///
    /// A live elector uses its lock at least once a lease (an attempt, or a change its watch
    /// delivers: a holder rewrites the key every retry period). A lock that outlives its
    /// elector must not stay a candidate: a leader's release would hand it the key, which
    /// nobody would take, and which followers wait for until etcd deletes it (docs/etcd.md,
    /// "Handover"). Letting the spare go revokes it, which removes the candidacy, and the key
    /// too if it was handed to us.
    pub(crate) async fn tend(&self, conn: &Conn, keys: &Keys, usage: &Usage) {
        let mut slot = self.0.lock().await;
        let idle = usage.idle();
        let unused = |ttl: i64| idle > Duration::from_secs(ttl.unsigned_abs()) * 2;
        if slot.lease.as_ref().is_some_and(|s| unused(s.ttl())) {
            if let Some(s) = slot.take_lease() {
                debug!(
                    lease = s.id(),
                    ?idle,
                    "nobody campaigns with this lock; letting its spare lease and candidacy go"
                );
                conn.abandon(s);
            }
        }
        if slot.wanted.as_ref().is_some_and(|(_, ttl)| unused(*ttl)) {
            slot.wanted = None;
        }
        if let Some(s) = slot.lease.as_mut() {
            match conn.keep_alive(s).await {
                Ok(LeaseState::Alive) => {}
                Ok(LeaseState::Gone) => slot.lease = None,
                // Kept: the stream reopens next time, and the acquire checks the lease anyway.
                Err(e) => debug!(lease = s.id(), error = ?e, "spare lease keep-alive failed"),
            }
        }
        register(&mut slot, conn, keys).await;
    }
}

/// Grants the spare lease the wanted candidacy needs, if missing or of another TTL, and
/// registers the candidacy on it, unless it is already; a failure is logged and left to the
/// next call.
async fn register(slot: &mut Slot, conn: &Conn, keys: &Keys) {
    let Some((me, ttl)) = slot.wanted.clone() else {
        return;
    };
    if slot.lease.as_ref().is_none_or(|s| s.ttl() != ttl) {
        match conn.grant(ttl).await {
            Ok(s) => {
                if let Some(old) = slot.lease.replace(s) {
                    conn.abandon(old);
                }
            }
            Err(e) => {
                debug!(error = %e, "granting a spare lease failed; trying again later");
                return;
            }
        }
    }
    let Some(id) = slot.lease.as_ref().map(|s| s.id()) else {
        return;
    };
    if slot.registered == id {
        return;
    }
    let key = keys.candidacy(&me);
    let value = StoredValue::candidate(me, ttl.unsigned_abs()).encode();
    let put = conn
        .call("candidacy put", |c| async move {
            c.kv_client()
                .put(key, value, Some(PutOptions::new().with_lease(id)))
                .await
        })
        .await;
    match put {
        Ok(_) => slot.registered = id,
        Err(e) => debug!(
            error = %e,
            lease = id,
            "registering as a candidate failed; trying again later"
        ),
    }
}

/// When an elector last used the lock (an attempt, or a change its watch delivered): the
/// spare and its candidacy are kept only while someone campaigns (`Spare::tend`). Its own lock,
/// never held across a request; shared with the watch.
#[derive(Clone)]
pub(crate) struct Usage(Arc<Mutex<Instant>>);

impl Usage {
    /// Used now.
    pub(crate) fn new() -> Self {
        Usage(Arc::new(Mutex::new(Instant::now())))
    }

    /// Notes that an elector uses the lock now.
    pub(crate) fn touch(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// How long since an elector last used the lock.
    pub(crate) fn idle(&self) -> Duration {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
    }
}
