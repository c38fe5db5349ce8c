use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::record::{Candidate, LockRecord, Term};

/// Why a lock operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The backend could not be reached or answered with an error; worth retrying.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The backend refused us for good (authentication, authorization, bad configuration).
    #[error("backend refused the request: {0}")]
    Refused(String),
    /// The stored record is not one this library wrote, or is damaged.
    #[error("malformed lock record: {0}")]
    Malformed(String),
    /// The operation did not finish in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

/// The outcome of one acquire-or-renew attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lock now, under this term.
    Leader {
        /// The fencing term of our leadership.
        term: Term,
    },
    /// Someone else holds the lock (or it cannot be taken yet).
    Follower {
        /// The holder, when known (`None` for a foreign or unreadable record).
        holder: Option<String>,
        /// The holder's term, when known.
        term: Option<Term>,
        /// When the lock can be taken at the earliest, if the backend knows (expiry, PTTL).
        retry_after: Option<Duration>,
    },
}

/// A change of the lock seen on the backend's change stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockEvent {
    /// The record changed; `None` means it is gone or was released.
    Changed(Option<LockRecord>),
    /// The stream (re)connected; state before it may have been missed.
    Resynced,
}

/// A stream of lock changes; it ends or yields an error when the watch breaks.
pub type LockEventStream = BoxStream<'static, Result<LockEvent, LockError>>;

/// The one thing a backend implements: a lock with a holder, a fencing term and a change stream.
///
/// Backends decide expiry by their own rules: a server-side TTL (etcd, Redis) or a record seen
/// unchanged for the lease duration on the follower's own monotonic clock (Kubernetes).
#[async_trait]
pub trait LeaderLock: Send + Sync {
    /// A short description for logs, e.g. `redis lease gateway-leader-lock`.
    fn describe(&self) -> String;

    /// Acquires the lock if free or expired, renews it if the candidate holds it.
    ///
    /// Must be atomic: two candidates never both get [`Attempt::Leader`] for overlapping leases.
    async fn try_acquire_or_renew(&self, candidate: &Candidate) -> Result<Attempt, LockError>;

    /// Releases the lock if the candidate still holds it under `term`; returns whether it did.
    async fn release(&self, candidate: &Candidate, term: Term) -> Result<bool, LockError>;

    /// Reads the current record (`None` when nobody holds the lock).
    async fn get(&self) -> Result<Option<LockRecord>, LockError>;

    /// Opens a change stream on the lock. The elector reopens it with backoff when it breaks and
    /// polls every retry period meanwhile.
    async fn watch(&self) -> Result<LockEventStream, LockError>;
}
