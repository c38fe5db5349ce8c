//! How the lock talks to etcd: every request on the current member under the per-request
//! deadline, a failure that may be the member's own moving it on (`members.rs`), and the
//! leases requests grant, keep alive and let go.

use std::time::Duration;

use etcd_client::{Client, GetResponse};
use leader_lock::backend::LockError;
use tokio::time::Instant;
use tracing::debug;

use crate::error::map_error;
use crate::keepalive::{KeepAliveError, LeaseState, LeaseStream};
use crate::members::{member_fault, moves, Members};
use crate::timeout::RequestTimeout;

/// The lock's connection: its members, which one is current, and the deadline of each request.
/// No lock of its own: [`Members`] keeps the current member in atomics and each member's
/// client behind a lock never held across a request.
pub(crate) struct Conn {
    /// One client per endpoint; requests go to the current member.
    members: Members,
    /// Every endpoint, comma-separated, for messages.
    endpoints: String,
    /// The deadline of each request (shared with `members`).
    timeout: RequestTimeout,
}

impl Conn {
    /// A connection to `members`, whose requests time out at `timeout`.
    pub(crate) fn new(members: Members, endpoints: String, timeout: RequestTimeout) -> Self {
        Conn {
            members,
            endpoints,
            timeout,
        }
    }

    /// The members and which one is current.
    pub(crate) fn members(&self) -> &Members {
        &self.members
    }

    /// Every endpoint, comma-separated.
    pub(crate) fn endpoints(&self) -> &str {
        &self.endpoints
    }

    /// The per-request deadline, which the elector's timing may still set (`RequestTimeout`).
    pub(crate) fn deadline(&self) -> &RequestTimeout {
        &self.timeout
    }

    /// The per-request deadline now.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout.get()
    }

    /// A client error of a request (`what`) as a lock error.
    pub(crate) fn error(&self, what: &str, e: etcd_client::Error) -> LockError {
        map_error(&self.endpoints, what, e)
    }

    /// Runs one request, built by `op` on the current member's client, under the per-request
    /// timeout; a failure that may be the member's own moves the lock to the next member.
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, op: F) -> Result<T, LockError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let (member, client) = self.members.client().await?;
        let e = match tokio::time::timeout(self.timeout.get(), op(client)).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => {
                let fault = member_fault(&e);
                let e = map_error(self.members.url(member), what, e);
                if !fault {
                    return Err(e);
                }
                e
            }
            Err(_) => LockError::Timeout(self.timeout.get()),
        };
        if moves(&e) {
            self.members.failed(member, &e);
        }
        Err(e)
    }

    /// Reads `key`.
    pub(crate) async fn read(&self, key: &[u8]) -> Result<GetResponse, LockError> {
        let key = key.to_vec();
        self.call("get", |c| async move { c.kv_client().get(key, None).await })
            .await
    }

    /// One keep-alive of `lease` on its stream, on the current member.
    pub(crate) async fn keep_alive(
        &self,
        lease: &mut LeaseStream,
    ) -> Result<LeaseState, KeepAliveError> {
        lease.keep_alive(&self.members, self.timeout.get()).await
    }

    /// A failed keep-alive of `lease` as a lock error.
    pub(crate) fn keep_alive_error(&self, lease: i64, e: KeepAliveError) -> LockError {
        match e {
            KeepAliveError::Timeout => LockError::Timeout(self.timeout.get()),
            KeepAliveError::Client(e) => self.error(&format!("keep-alive of lease {lease}"), e),
            KeepAliveError::Connect(e) => e,
        }
    }

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
}
