//! One lock client's shared state: the connection, the key names, what it holds, what it knows
//! of the key, and the request helpers every operation uses.

use std::sync::Arc;

use etcd_client::{Client, GetResponse};
use tokio::time::Instant;

use crate::members::{member_fault, moves, Members};
use leader_lock::backend::LockError;
use tokio::sync::Mutex;

use crate::error::map_error;
use crate::handover::Successor;
use crate::keepalive::{KeepAliveError, LeaseStream};
use crate::knowledge::Knowledge;
use crate::timeout::RequestTimeout;
use crate::value::StoredValue;

/// What we hold: the key instance (its create revision), our term, our last write, and its lease.
pub(crate) struct Held {
    pub(crate) holder: String,
    /// The key's create revision: what renews and the release compare. A key handed over keeps
    /// the create revision of its first holder, so this is not the term.
    pub(crate) create_rev: i64,
    /// Our term (`value::term`): the create revision, or the revision of the handover write.
    pub(crate) term: i64,
    /// The mod revision of our last write; a renew only goes through if it is still current.
    pub(crate) mod_rev: i64,
    pub(crate) value: StoredValue,
    /// The bytes of our last write.
    pub(crate) written: Vec<u8>,
    /// The renews sent since that write whose answers we did not get.
    pub(crate) unanswered: Unanswered,
    pub(crate) lease: LeaseStream,
}

/// How many unanswered renews a holder remembers; past that, the oldest is forgotten (and, if
/// it was the one etcd applied, the holder steps down: safe, only needless).
const UNANSWERED: usize = 16;

/// The bytes of the renews sent since our last confirmed write. Each compared the same mod
/// revision, so etcd applied at most one of them, and it may be any one: a renew forwarded to a
/// frozen or dying Raft leader can be committed after the retries that followed it timed out
/// too. Remembering only the last one took such a record for someone else's and stepped down.
#[derive(Default)]
pub(crate) struct Unanswered(Vec<Vec<u8>>);

impl Unanswered {
    /// Remembers a renew's bytes before they are sent.
    pub(crate) fn sent(&mut self, bytes: &[u8]) {
        if self.0.len() >= UNANSWERED {
            self.0.remove(0);
        }
        self.0.push(bytes.to_vec());
    }

    /// Whether `value` is one of them.
    pub(crate) fn contains(&self, value: &[u8]) -> bool {
        self.0.iter().any(|b| b == value)
    }

    /// Forgets them all: the mod revision they compared is gone, so none can apply any more.
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
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

/// A live candidate chosen while leading, so that a release hands over without reads first
/// (`handover.rs`).
pub(crate) struct Chosen {
    /// `None`: nobody was alive to hand over to (a release looks again).
    pub(crate) successor: Option<Successor>,
    /// When the look-up that chose it was sent.
    pub(crate) checked: Instant,
}

/// The last choice made ahead, and whether one is under way.
#[derive(Default)]
pub(crate) struct Choice {
    pub(crate) chosen: Option<Chosen>,
    /// A choice under way: no second one starts beside it.
    pub(crate) choosing: bool,
}

pub(crate) struct Inner {
    /// One client per endpoint; requests go to the current member.
    pub(crate) members: Members,
    pub(crate) key: Vec<u8>,
    pub(crate) marker: Vec<u8>,
    /// The prefix of the candidates' registrations, `<key>#candidates/`.
    pub(crate) candidates: Vec<u8>,
    pub(crate) key_text: String,
    pub(crate) endpoints: String,
    /// The deadline of each request (shared with `members`).
    pub(crate) timeout: RequestTimeout,
    pub(crate) state: Mutex<State>,
    /// Fed by the watch stream too, so it lives in its own lock that is never held across I/O.
    pub(crate) knowledge: Arc<std::sync::Mutex<Knowledge>>,
    /// A lease granted in advance, so a follower takes a released lock in one round trip.
    pub(crate) spare: Mutex<Option<LeaseStream>>,
    /// The spare lease our candidacy (`<key>#candidates/<holder>`) is attached to, 0 for none.
    pub(crate) registered: std::sync::Mutex<i64>,
    /// The successor a release would hand the key to, chosen ahead while leading; the watch
    /// feeds it too (a registration it shows is a live candidate).
    pub(crate) choice: Arc<std::sync::Mutex<Choice>>,
    /// When an elector last used this lock (an attempt, or a change its watch delivered): a
    /// candidacy is kept only while someone campaigns with it (`lease::keep_spare`).
    pub(crate) used: Arc<std::sync::Mutex<Instant>>,
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

    /// Notes that an elector uses this lock now.
    pub(crate) fn touch(&self) {
        *self.used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// The key of our candidacy.
    pub(crate) fn candidacy(&self, holder: &str) -> Vec<u8> {
        let mut key = self.candidates.clone();
        key.extend_from_slice(holder.as_bytes());
        key
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
            KeepAliveError::Timeout => LockError::Timeout(self.timeout.get()),
            KeepAliveError::Client(e) => self.error(&format!("keep-alive of lease {lease}"), e),
            KeepAliveError::Connect(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unanswered_renew_is_recognised_not_only_the_last() {
        let mut u = Unanswered::default();
        u.sent(b"renew 1");
        u.sent(b"renew 2");
        u.sent(b"renew 3");
        // etcd applied the first, forwarded to a frozen Raft leader, after the others timed out.
        assert!(u.contains(b"renew 1"));
        assert!(u.contains(b"renew 3"));
        assert!(!u.contains(b"someone else's"));
        u.clear();
        assert!(!u.contains(b"renew 1"));
        for i in 0..UNANSWERED + 1 {
            u.sent(format!("renew {i}").as_bytes());
        }
        assert!(!u.contains(b"renew 0"), "bounded");
        assert!(u.contains(format!("renew {UNANSWERED}").as_bytes()));
    }
}
