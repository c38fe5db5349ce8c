//! `--wakeup poll`: the lock without its change stream, so the elector behaves like client-go's:
//! followers poll every retry period (jittered), and nothing but that poll wakes them.
//!
//! This wraps any backend instead of changing the elector: the elector already polls at the
//! jittered retry period whenever its watch is down, and wakes a follower early only on a watch
//! event or on the backend's expiry hint (`retry_after`). Failing the watch and dropping the
//! hint leave exactly the polling.

use std::sync::Arc;

use async_trait::async_trait;
use leader_lock::backend::{
    Attempt, Candidate, ConfigError, LeaderLock, LockError, LockEventStream, LockRecord,
};
use leader_lock::{Term, Timing};

/// A lock whose change stream never opens and whose attempts carry no expiry hint.
pub struct PollingLock {
    inner: Arc<dyn LeaderLock>,
}

impl PollingLock {
    /// Wraps `inner`.
    pub fn wrap(inner: Arc<dyn LeaderLock>) -> Arc<dyn LeaderLock> {
        Arc::new(PollingLock { inner })
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

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        Err(LockError::unavailable(
            "--wakeup poll: no change stream; polling every retry period",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leader_lock::{Identity, MemoryStore};
    use std::time::Duration;

    #[tokio::test]
    async fn no_watch_and_no_expiry_hint() {
        let lock = PollingLock::wrap(Arc::new(MemoryStore::new().lock("l")));
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
