use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::time::Instant;

use crate::config::ConfigError;
use crate::inspect::Inspection;
use crate::record::{Candidate, LockRecord, Term};
use crate::timing::Timing;

/// Why a lock operation failed.
///
/// The message says what failed (the operation, the object) and what to check; `source` keeps
/// the backend client's own error (`kube::Error`, or the apiserver's `kube::core::Status` for
/// its answer; `etcd_client::Error`, `redis::RedisError`) or the [`ConfigError`] behind a
/// refusal, for [`std::error::Error::source`]. The message does not repeat the source: log
/// [`chain`](LockError::chain) to show both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The backend could not be reached or answered with an error; worth retrying.
    #[error("backend unavailable: {message}")]
    Unavailable {
        /// What failed and where.
        message: String,
        /// The backend's own error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// The backend refused us for good (authentication, authorization, bad configuration).
    #[error("backend refused the request: {message}")]
    Refused {
        /// What was refused and what to fix.
        message: String,
        /// The backend's own error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// The stored record is not one this library wrote, or is damaged.
    #[error("malformed lock record: {message}")]
    Malformed {
        /// Which record and what is wrong with it.
        message: String,
        /// The backend's own error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// The operation did not finish in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

// === impl LockError ===

impl LockError {
    /// [`LockError::Unavailable`] without a cause.
    pub fn unavailable(message: impl Into<String>) -> Self {
        LockError::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// [`LockError::Unavailable`] caused by `source`, the backend's own error.
    pub fn unavailable_from(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        LockError::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// [`LockError::Refused`] without a cause.
    pub fn refused(message: impl Into<String>) -> Self {
        LockError::Refused {
            message: message.into(),
            source: None,
        }
    }

    /// [`LockError::Refused`] caused by `source`, the backend's own error.
    pub fn refused_from(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        LockError::Refused {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// [`LockError::Malformed`] without a cause.
    pub fn malformed(message: impl Into<String>) -> Self {
        LockError::Malformed {
            message: message.into(),
            source: None,
        }
    }

    /// [`LockError::Malformed`] caused by `source`, the backend's own error.
    pub fn malformed_from(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        LockError::Malformed {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// This error and each of its causes, `: `-separated (as anyhow's `{:#}` shows a chain),
    /// for a log line: the message says what failed, and its cause is only in
    /// [`source`](std::error::Error::source), so a line showing the message alone would lose it.
    ///
    /// # Examples
    ///
    /// ```
    /// use leader_lock::backend::LockError;
    ///
    /// let e = LockError::unavailable_from("get key k", std::io::Error::other("reset by peer"));
    /// assert_eq!(e.chain().to_string(), "backend unavailable: get key k: reset by peer");
    /// ```
    pub fn chain(&self) -> impl std::fmt::Display + '_ {
        Chain(self)
    }
}

/// An error and its causes, as [`LockError::chain`] shows them.
struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

/// A setting that cannot work is a refusal for good: retrying does not fix it.
impl From<ConfigError> for LockError {
    fn from(e: ConfigError) -> Self {
        // The settings' error is the source, whole: not also the message, or a chain of
        // errors (`{e:#}`) would print it twice.
        LockError::refused_from("invalid settings", e)
    }
}

/// The outcome of one acquire-or-renew attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lock now, under this term.
    Leader {
        /// The fencing term of our leadership.
        term: Term,
        /// The instant the backend's hold counts from, when that is before the attempt was
        /// sent; `None` (as [`Attempt::leader`] gives) counts it from the sending, as usual.
        ///
        /// For a backend that learns it holds the lock without asking the server: etcd's
        /// successor takes a key handed to it from its watch, on a lease whose last keep-alive
        /// went out before the handover (docs/etcd.md, "Handover: one write"). The elector
        /// counts validity from the earlier of the two instants, so such a leadership ends a
        /// renew deadline after that keep-alive, however late the backend says it.
        held_from: Option<Instant>,
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

impl Attempt {
    /// We hold the lock under `term`, counted from the attempt's sending.
    pub fn leader(term: Term) -> Self {
        Attempt::Leader {
            term,
            held_from: None,
        }
    }
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
///
/// [`Elector::spawn`](crate::Elector::spawn) calls [`validate`](Self::validate) once before it
/// sends anything; a wrapper around another lock must forward it.
///
/// # Cancel safety
/// The elector drops these futures part-way: an attempt that outlasts its limit, a release or a
/// withdrawal at the end of the shutdown budget, whatever is under way when it is cancelled. A
/// request may have reached the server by then, so no method can promise that nothing happened;
/// each says what a backend must guarantee instead. Common to all: the server holds the whole
/// of a write or none of it (one atomic request: a transaction, a script, an update
/// conditioned on the version read), and the lock's own state stays usable, so the next call
/// works without assuming either outcome of the dropped one. A wrapper only forwards the drop.
///
/// # Examples
///
/// A skeleton of a backend (here one that delegates to the in-memory lock); a real one talks to
/// its server in each method.
///
/// ```
/// use async_trait::async_trait;
/// use leader_lock::{Term, Timing};
/// use leader_lock::backend::{
///     Attempt, Candidate, ConfigError, LeaderLock, LockError, LockEventStream, LockRecord,
/// };
/// use leader_lock::memory::MemoryLock;
/// use leader_lock::timing::TimingError;
///
/// struct MyLock {
///     inner: MemoryLock,
/// }
///
/// #[async_trait]
/// impl LeaderLock for MyLock {
///     fn describe(&self) -> String {
///         "my lock".to_string()
///     }
///     // Optional: refuse a timing this backend cannot honour.
///     fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
///         if timing.lease_duration.subsec_nanos() != 0 {
///             return Err(TimingError::NotWholeSeconds {
///                 setting: "lease-duration",
///                 value: timing.lease_duration,
///             }
///             .into());
///         }
///         Ok(())
///     }
///     async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
///         self.inner.try_acquire_or_renew(c).await
///     }
///     async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
///         self.inner.release(c, term).await
///     }
///     async fn get(&self) -> Result<Option<LockRecord>, LockError> {
///         self.inner.get().await
///     }
///     async fn watch(&self) -> Result<LockEventStream, LockError> {
///         self.inner.watch().await
///     }
/// }
/// # let lock = MyLock { inner: leader_lock::MemoryStore::new().lock("x") };
/// # assert!(lock.validate(&Timing::default()).is_ok());
/// ```
#[async_trait]
pub trait LeaderLock: Send + Sync {
    /// A short description for logs, e.g. `redis lease my-controller-lock`.
    fn describe(&self) -> String;

    /// Checks that this lock can work under `timing` (its granularity, its request timeout
    /// against the renew deadline), without touching the network. The default accepts any
    /// timing; [`Timing::validate`] has been checked before the elector calls it.
    ///
    /// A lock may also take its defaults from `timing` here (the Kubernetes lock bounds its
    /// requests by the renew deadline).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the setting that cannot work.
    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        let _ = timing;
        Ok(())
    }

    /// Acquires the lock if free or expired, renews it if the candidate holds it.
    ///
    /// Must be atomic: two candidates never both get [`Attempt::Leader`] for overlapping leases.
    ///
    /// # Cancel safety
    /// Dropped when it outlasts its limit (the renew deadline for a candidate, the validity
    /// left for a leader) or when the elector is cancelled. The elector counts a dropped attempt
    /// as failed and publishes no leadership for it, but its write may have been made. The
    /// backend must then guarantee that:
    /// - such a record expires as any record nobody renews: nothing the dropped future started
    ///   keeps it alive;
    /// - the next attempt of the same candidate finds it as its own (renews or adopts it), not
    ///   as another holder's;
    /// - a renew dropped part-way leaves the record releasable under the term of the last
    ///   attempt that returned: a graceful shutdown drops the attempt under way and releases
    ///   right after, and a release that finds nothing makes the followers wait out a lease.
    async fn try_acquire_or_renew(&self, candidate: &Candidate) -> Result<Attempt, LockError>;

    /// Releases the lock if the candidate still holds it under `term`; returns whether it did.
    ///
    /// # Cancel safety
    /// Dropped when the shutdown budget ends. The record is then either released in full (with
    /// whatever wakes the followers: a release message, a handover) or still ours and expiring
    /// on its own, since nobody renews it any more; never released without the followers being
    /// told.
    async fn release(&self, candidate: &Candidate, term: Term) -> Result<bool, LockError>;

    /// Withdraws a candidate that holds nothing and is stopping (the elector's graceful
    /// shutdown calls it once, instead of [`release`](Self::release)). A lock that keeps state
    /// on the server for its candidates takes it back here, so that no release hands the lock
    /// to a process that is gone (etcd's candidacy, docs/etcd.md); should the lock have been
    /// handed to this candidate meanwhile, it releases it. The default does nothing.
    ///
    /// # Errors
    /// The backend's; the state it would have taken back then ends with its lease.
    ///
    /// # Cancel safety
    /// Dropped when the shutdown budget ends: what it had not taken back must then end with its
    /// lease on the server, as when it fails.
    async fn withdraw(&self, candidate: &Candidate) -> Result<(), LockError> {
        let _ = candidate;
        Ok(())
    }

    /// Reads the current record (`None` when nobody holds the lock).
    ///
    /// # Cancel safety
    /// Must be cancel safe: it only reads, and a drop changes nothing on the server or in the
    /// lock's state.
    async fn get(&self) -> Result<Option<LockRecord>, LockError>;

    /// Reads the record and what the server keeps beside it, for an operator's tool
    /// (`gateway-leader status`): the server's own expiry of the record, the lock's history
    /// under the backend's names, and what it kept of a holder whose record is gone. The
    /// elector never calls it. The default knows only [`get`](Self::get)'s record; a wrapper
    /// around another lock should forward it.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    ///
    /// # Cancel safety
    /// Must be cancel safe: it only reads, and a drop changes nothing on the server or in the
    /// lock's state.
    async fn inspect(&self) -> Result<Inspection, LockError> {
        Ok(Inspection::of_record(self.get().await?))
    }

    /// Opens a change stream on the lock. The elector reopens it with backoff when it breaks and
    /// polls every retry period meanwhile.
    ///
    /// # Cancel safety
    /// Dropped when the elector is cancelled while the stream opens. Nothing it started may
    /// outlive it: a task or server-side watch opened for the stream ends with the future, or,
    /// once the stream is returned, when the stream is dropped (that is how the elector closes
    /// it).
    async fn watch(&self) -> Result<LockEventStream, LockError>;
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn display_is_the_classification_and_the_message() {
        assert_eq!(
            LockError::unavailable("etcd get at http://h:2379: down").to_string(),
            "backend unavailable: etcd get at http://h:2379: down"
        );
        assert_eq!(
            LockError::refused("bad password").to_string(),
            "backend refused the request: bad password"
        );
        assert_eq!(
            LockError::malformed("foreign value").to_string(),
            "malformed lock record: foreign value"
        );
        assert_eq!(
            LockError::Timeout(Duration::from_secs(2)).to_string(),
            "timed out after 2s"
        );
    }

    #[test]
    fn the_cause_is_kept_as_the_source() {
        let e = LockError::unavailable_from("reset", std::io::Error::other("reset by peer"));
        assert_eq!(e.to_string(), "backend unavailable: reset");
        let source = e.source().expect("a source");
        assert!(
            source.downcast_ref::<std::io::Error>().is_some(),
            "{source:?}"
        );
        assert!(LockError::refused("x").source().is_none());
    }

    #[test]
    fn a_config_error_is_a_refusal_that_keeps_it() {
        let c = ConfigError::invalid("redis-url", "`x` is not a URL");
        let e = LockError::from(c.clone());
        assert!(
            matches!(&e, LockError::Refused { message, .. } if message == "invalid settings"),
            "{e:?}"
        );
        assert_eq!(
            e.source().and_then(|s| s.downcast_ref::<ConfigError>()),
            Some(&c)
        );
    }
}
