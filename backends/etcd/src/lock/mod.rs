//! The lock itself: acquire, renew and release, and the follower's answer.

mod acquire;
mod attempt;
mod release;
mod renew;
mod take;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leader_lock::{
    Attempt, Candidate, ConfigError, LeaderLock, LockError, LockEventStream, LockRecord, Term,
    Timing,
};
use tokio::task::JoinHandle;

use crate::client::Inner;
use crate::config::MIN_LEASE;
use crate::value::record;

/// A lock on etcd; one per process and lock name.
pub struct EtcdLock {
    pub(crate) inner: Arc<Inner>,
    pub(crate) spare_keeper: JoinHandle<()>,
}

impl Drop for EtcdLock {
    fn drop(&mut self) {
        self.spare_keeper.abort();
        // A follower going away frees its spare lease at once instead of leaving it to expire.
        // The held lease is left alone: dropping without a release is a crash by design.
        if tokio::runtime::Handle::try_current().is_ok() {
            if let Ok(mut spare) = self.inner.spare.try_lock() {
                if let Some(s) = spare.take() {
                    self.inner.abandon(s);
                }
            }
        }
    }
}

impl EtcdLock {
    /// The full key of the lock (`<prefix><name>`).
    pub fn key(&self) -> &str {
        &self.inner.key_text
    }

    /// The key of the release marker (`<prefix><name>#released`), which holds the last term
    /// released gracefully.
    pub fn release_marker_key(&self) -> String {
        String::from_utf8_lossy(&self.inner.marker).into_owned()
    }

    /// The deadline of each request, as it applies now: the config's
    /// [`request_timeout`](crate::EtcdConfig::request_timeout), else a quarter of the renew
    /// deadline of the timing the elector validated the lock with (before that, of the default
    /// timing's: 2.5 s).
    pub fn request_timeout(&self) -> Duration {
        self.inner.timeout.get()
    }
}

impl Inner {
    pub(crate) async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let current = self.read().await?;
        match current.kvs().first() {
            None => Ok(None),
            Some(kv) => record(kv).map(Some).map_err(LockError::malformed),
        }
    }
}

#[async_trait]
impl LeaderLock for EtcdLock {
    fn describe(&self) -> String {
        format!(
            "etcd key {} at {}",
            self.inner.key_text, self.inner.endpoints
        )
    }

    /// The timing rules of [`EtcdConfig::validate`](crate::EtcdConfig::validate), with the
    /// config's request timeout or, when it gave none, a quarter of `timing`'s renew deadline,
    /// which the lock's requests time out at from then on.
    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        let timeout = &self.inner.timeout;
        crate::config::check_timing(timing, timeout.under(timing))?;
        timeout.adopt(timing);
        Ok(())
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let attempt = self.inner.try_acquire_or_renew(c).await;
        if let (Ok(Attempt::Leader { .. }), Ok(ttl)) = (&attempt, whole_seconds(c.lease_duration)) {
            // Off the attempt's path, so that its reads never delay its answer; from the
            // attempt that made us leader on, so that even a short leadership hands over at once.
            let holder = c.holder();
            if self.inner.choice_due(ttl, &holder) {
                let inner = Arc::clone(&self.inner);
                tokio::spawn(async move { inner.choose_ahead(&holder).await });
            }
        }
        attempt
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }

    async fn withdraw(&self, c: &Candidate) -> Result<(), LockError> {
        self.inner.withdraw(&c.holder()).await
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        self.inner.watch().await
    }
}

/// Failures another try may not meet: a member's fault, a timeout, or the lock's own "try again".
fn retryable(e: &LockError) -> bool {
    matches!(e, LockError::Unavailable { .. } | LockError::Timeout(_))
}

fn whole_seconds(d: Duration) -> Result<i64, LockError> {
    if d.subsec_nanos() != 0 || d < MIN_LEASE {
        return Err(LockError::refused(format!(
            "lease-duration {d:?} must be a whole number of seconds, at least {MIN_LEASE:?}, for etcd"
        )));
    }
    i64::try_from(d.as_secs())
        .map_err(|_| LockError::refused(format!("lease-duration {d:?} is too long for etcd")))
}
