//! The leases behind the key: a spare lease granted in advance and kept alive while following,
//! fresh grants, and leases let go (revoked in the background).

use std::sync::Weak;
use std::time::Duration;

use etcd_client::PutOptions;
use leader_lock::backend::LockError;
use tokio::time::Instant;
use tracing::debug;

use crate::client::Inner;
use crate::keepalive::{LeaseState, LeaseStream};
use crate::value::StoredValue;

/// Keeps the spare lease alive (a third of its TTL apart) until the lock is dropped, or until
/// nobody has campaigned with the lock for two of its TTLs.
///
/// A live elector uses its lock at least once a lease (an attempt, or a change its watch
/// delivers: a holder rewrites the key every retry period). A lock that outlives its elector
/// must not stay a candidate: a leader's release would hand it the key, which nobody would take,
/// and which followers wait for until etcd deletes it (docs/etcd.md, "Handover"). Letting the
/// spare go revokes it, which removes the candidacy, and the key too if it was handed to us.
pub(crate) async fn keep_spare(inner: Weak<Inner>) {
    loop {
        let interval = match inner.upgrade() {
            None => return,
            Some(i) => i
                .spare
                .lock()
                .await
                .as_ref()
                .map(|s| Duration::from_secs(s.ttl().unsigned_abs()) / 3),
        };
        tokio::time::sleep(interval.unwrap_or(Duration::from_secs(1))).await;
        let Some(i) = inner.upgrade() else { return };
        let mut spare = i.spare.lock().await;
        let idle = i.used.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
        if spare
            .as_ref()
            .is_some_and(|s| idle > Duration::from_secs(s.ttl().unsigned_abs()) * 2)
        {
            if let Some(s) = spare.take() {
                debug!(
                    lease = s.id(),
                    ?idle,
                    "nobody campaigns with this lock; letting its spare lease and candidacy go"
                );
                i.abandon(s);
            }
        }
        if let Some(s) = spare.as_mut() {
            match s.keep_alive(&i.members, i.timeout.get()).await {
                Ok(LeaseState::Alive) => {}
                Ok(LeaseState::Gone) => *spare = None,
                // Kept: the stream reopens next time, and the acquire checks the lease anyway.
                Err(e) => debug!(lease = s.id(), error = ?e, "spare lease keep-alive failed"),
            }
        }
    }
}

impl Inner {
    /// Grants a fresh lease of `ttl` seconds; refuses a TTL the server rounded up to its minimum.
    pub(crate) async fn grant(&self, ttl: i64) -> Result<LeaseStream, LockError> {
        let sent = Instant::now();
        let resp = self
            .call("lease grant", |c| async move {
                c.lease_client().grant(ttl, None).await
            })
            .await?;
        if !resp.error().is_empty() {
            return Err(LockError::unavailable(format!(
                "etcd lease grant at {}: {}",
                self.endpoints,
                resp.error()
            )));
        }
        if resp.ttl() != ttl {
            self.revoke_later(resp.id());
            return Err(LockError::refused(format!(
                "lease-duration {ttl}s is below the etcd server's minimum lease TTL ({}s, \
                 1.5 × its election timeout); raise lease-duration",
                resp.ttl()
            )));
        }
        let rev = resp.header().map_or(0, |h| h.revision());
        Ok(LeaseStream::granted(resp.id(), ttl, sent, rev))
    }

    /// Revokes a lease in the background; it expires on its own if this fails.
    pub(crate) fn revoke_later(&self, lease: i64) {
        let (_, client) = match self.members.cached() {
            Some(c) => c,
            // Not connected: nothing to revoke over; the lease expires on its own.
            None => return,
        };
        let timeout = self.timeout.get();
        tokio::spawn(async move {
            let mut client = client.lease_client();
            if let Ok(Err(e)) = tokio::time::timeout(timeout, client.revoke(lease)).await {
                debug!(lease, error = %e, "revoking an unused etcd lease failed; it will expire");
            }
        });
    }

    /// Lets a lease go: its stream closes cleanly and it is revoked in the background.
    pub(crate) fn abandon(&self, mut lease: LeaseStream) {
        lease.close();
        self.revoke_later(lease.id());
    }

    /// Grants the spare lease while following, so that taking a released lock later is one
    /// round trip, and registers `me` as a candidate on it (`<key>#candidates/<me>`, attached to
    /// the spare, so it goes when the spare goes), so that a releasing leader can hand the key
    /// over in its release. One write per spare lease; a failure only costs that round trip (or
    /// that handover) later.
    pub(crate) async fn prepare_spare(&self, ttl: i64, me: &str) {
        let mut spare = self.spare.lock().await;
        if spare.as_ref().is_none_or(|s| s.ttl() != ttl) {
            match self.grant(ttl).await {
                Ok(s) => {
                    if let Some(old) = spare.replace(s) {
                        self.abandon(old);
                    }
                }
                Err(e) => {
                    debug!(error = %e, "granting a spare lease failed; the acquire will grant one");
                    return;
                }
            }
        }
        let Some(id) = spare.as_ref().map(|s| s.id()) else {
            return;
        };
        if *self.registered.lock().unwrap_or_else(|p| p.into_inner()) == id {
            return;
        }
        let key = self.candidacy(me);
        let value = StoredValue::candidate(me.to_string(), ttl.unsigned_abs()).encode();
        let put = self
            .call("candidacy put", |c| async move {
                c.kv_client()
                    .put(key, value, Some(PutOptions::new().with_lease(id)))
                    .await
            })
            .await;
        match put {
            Ok(_) => *self.registered.lock().unwrap_or_else(|p| p.into_inner()) = id,
            Err(e) => {
                debug!(error = %e, lease = id, "registering as a candidate failed; a release will not hand us the key")
            }
        }
    }

    /// Makes sure a spare lease of `ttl` exists; returns it and whether it was just granted.
    pub(crate) async fn take_spare(&self, ttl: i64) -> Result<(LeaseStream, bool), LockError> {
        let spare = self.spare.lock().await.take();
        match spare {
            Some(s) if s.ttl() == ttl => Ok((s, false)),
            other => {
                if let Some(s) = other {
                    self.abandon(s);
                }
                Ok((self.grant(ttl).await?, true))
            }
        }
    }
}
