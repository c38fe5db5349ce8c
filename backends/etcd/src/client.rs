//! One lock client's shared state: the connection, the key names, what it holds, what it knows
//! of the key, and the request helpers every operation uses.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, GetResponse};

use crate::members::{member_fault, moves, Members};
use leader_lock::LockError;
use tokio::sync::Mutex;

use crate::error::map_error;
use crate::keepalive::{KeepAliveError, LeaseStream};
use crate::knowledge::Knowledge;
use crate::value::StoredValue;

/// What we hold: the key instance (its create revision), our last write, and its lease.
pub(crate) struct Held {
    pub(crate) holder: String,
    pub(crate) term: i64,
    /// The mod revision of our last write; a renew only goes through if it is still current.
    pub(crate) mod_rev: i64,
    pub(crate) value: StoredValue,
    /// The bytes of our last write, and of a renew whose answer we did not get.
    pub(crate) written: Vec<u8>,
    pub(crate) in_flight: Option<Vec<u8>>,
    pub(crate) lease: LeaseStream,
}

/// An acquire whose answer was lost: the key may be ours on this lease.
pub(crate) struct Pending {
    pub(crate) lease: LeaseStream,
    pub(crate) value: Vec<u8>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) held: Option<Held>,
    pub(crate) pending: Option<Pending>,
}

pub(crate) struct Inner {
    /// One client per endpoint; requests go to the current member.
    pub(crate) members: Members,
    pub(crate) key: Vec<u8>,
    pub(crate) marker: Vec<u8>,
    pub(crate) key_text: String,
    pub(crate) endpoints: String,
    pub(crate) timeout: Duration,
    pub(crate) state: Mutex<State>,
    /// Fed by the watch stream too, so it lives in its own lock that is never held across I/O.
    pub(crate) knowledge: Arc<std::sync::Mutex<Knowledge>>,
    /// A lease granted in advance, so a follower takes a released lock in one round trip.
    pub(crate) spare: Mutex<Option<LeaseStream>>,
}

impl Inner {
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
        let e = match tokio::time::timeout(self.timeout, op(client)).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => {
                let fault = member_fault(&e);
                let e = map_error(self.members.url(member), what, e);
                if !fault {
                    return Err(e);
                }
                e
            }
            Err(_) => LockError::Timeout(self.timeout),
        };
        if moves(&e) {
            self.members.failed(member, &e);
        }
        Err(e)
    }

    pub(crate) fn knowledge(&self) -> std::sync::MutexGuard<'_, Knowledge> {
        self.knowledge.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) async fn read(&self) -> Result<GetResponse, LockError> {
        let key = self.key.clone();
        self.call("get", |c| async move { c.kv_client().get(key, None).await })
            .await
    }

    pub(crate) fn keep_alive_error(&self, lease: i64, e: KeepAliveError) -> LockError {
        match e {
            KeepAliveError::Timeout => LockError::Timeout(self.timeout),
            KeepAliveError::Client(e) => self.error(&format!("keep-alive of lease {lease}"), e),
            KeepAliveError::Connect(e) => e,
        }
    }
}
