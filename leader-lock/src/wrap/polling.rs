//! The lock without its change stream, so the elector behaves like client-go's: followers poll
//! every retry period (jittered), and nothing but that poll wakes them.
//!
//! This wraps any backend instead of changing the elector: the elector already polls at the
//! jittered retry period whenever its watch is down, and wakes a follower early only on a watch
//! event or on the backend's expiry hint (`retry_after`). Failing the watch and dropping the
//! hint leave exactly the polling.

use std::sync::Arc;

use async_trait::async_trait;

use crate::backend::{
    Attempt, Candidate, ConfigError, Inspection, LeaderLock, LockError, LockEventStream, LockRecord,
};
use crate::{Term, Timing};

/// A lock whose change stream never opens and whose attempts carry no expiry hint: a follower
/// on it polls every retry period, as client-go's do, and learns of a release or an expiry only
/// at its next poll. For comparing with client-go (`gateway-leader run --wakeup poll`, the
/// bench's polling lanes), or for a backend whose change stream cannot be trusted.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use leader_lock::wrap::PollingLock;
/// use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let lock = PollingLock::new(Arc::new(MemoryStore::new().lock("my-controller")));
/// let elector = Elector::spawn(
///     Arc::new(lock),
///     ElectorConfig {
///         identity: Identity::new("pod-a"),
///         timing: Timing::default(),
///         release_on_shutdown: true,
///     },
/// )?;
/// # elector.shutdown().await?;
/// # Ok(())
/// # }
/// ```
pub struct PollingLock {
    inner: Arc<dyn LeaderLock>,
}

// === impl PollingLock ===

impl PollingLock {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn LeaderLock>) -> Self {
        PollingLock { inner }
    }
}

#[async_trait]
impl LeaderLock for PollingLock {
    fn describe(&self) -> String {
        format!("{} (polling)", self.inner.describe())
    }

    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        self.inner.validate(timing)
    }

    async fn try_acquire_or_renew(&self, candidate: &Candidate) -> Result<Attempt, LockError> {
        match self.inner.try_acquire_or_renew(candidate).await? {
            // client-go knows nothing of when a lease expires: it just polls again.
            Attempt::Follower { holder, term, .. } => Ok(Attempt::Follower {
                holder,
                term,
                retry_after: None,
            }),
            leader => Ok(leader),
        }
    }

    async fn release(&self, candidate: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(candidate, term).await
    }

    async fn withdraw(&self, candidate: &Candidate) -> Result<(), LockError> {
        self.inner.withdraw(candidate).await
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }

    async fn inspect(&self) -> Result<Inspection, LockError> {
        self.inner.inspect().await
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        Err(LockError::unavailable(
            "a polling lock has no change stream; polling every retry period",
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Identity, MemoryStore};

    #[tokio::test]
    async fn no_watch_and_no_expiry_hint() {
        let lock = PollingLock::new(Arc::new(MemoryStore::new().lock("l")));
        assert!(lock.watch().await.is_err());
        let a = Candidate {
            identity: Identity::new("a"),
            lease_duration: Duration::from_secs(10),
        };
        let b = Candidate {
            identity: Identity::new("b"),
            lease_duration: Duration::from_secs(10),
        };
        assert!(matches!(
            lock.try_acquire_or_renew(&a).await,
            Ok(Attempt::Leader { .. })
        ));
        assert!(matches!(
            lock.try_acquire_or_renew(&b).await,
            Ok(Attempt::Follower {
                retry_after: None,
                ..
            })
        ));
    }
}
