//! A lock that times every request of another, for metrics.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{
    Attempt, Candidate, ConfigError, LeaderLock, LockError, LockEventStream, LockRecord,
};
use crate::{Term, Timing};

/// A request of a [`LeaderLock`], as an [`InstrumentedLock`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockRequest {
    /// [`LeaderLock::try_acquire_or_renew`].
    AcquireOrRenew,
    /// [`LeaderLock::release`].
    Release,
    /// [`LeaderLock::withdraw`].
    Withdraw,
    /// [`LeaderLock::get`].
    Get,
}

// === impl LockRequest ===

impl LockRequest {
    /// Its name as a metric label: `acquire_or_renew`, `release`, `withdraw` or `get`.
    pub fn as_str(self) -> &'static str {
        match self {
            LockRequest::AcquireOrRenew => "acquire_or_renew",
            LockRequest::Release => "release",
            LockRequest::Withdraw => "withdraw",
            LockRequest::Get => "get",
        }
    }
}

/// Where an [`InstrumentedLock`] reports each request: a metrics registry, say.
pub trait LockObserver: Send + Sync {
    /// `request` returned after `took`, with `outcome` (its error, when it failed).
    ///
    /// It runs on the elector's task, between the request and the elector's decision: keep it
    /// short and never block.
    fn observe(&self, request: LockRequest, took: Duration, outcome: Result<(), &LockError>);
}

impl<O: LockObserver + ?Sized> LockObserver for Arc<O> {
    fn observe(&self, request: LockRequest, took: Duration, outcome: Result<(), &LockError>) {
        (**self).observe(request, took, outcome);
    }
}

/// A lock that times every request of another (acquire-or-renew, release, withdraw, get) and
/// reports it to a [`LockObserver`]. The change stream is passed through untimed: it is one
/// long request.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leader_lock::backend::{LeaderLock, LockError};
/// use leader_lock::wrap::{InstrumentedLock, LockObserver, LockRequest};
/// use leader_lock::MemoryStore;
///
/// #[derive(Default)]
/// struct Failures(AtomicUsize);
///
/// impl LockObserver for Failures {
///     fn observe(&self, _: LockRequest, _: Duration, outcome: Result<(), &LockError>) {
///         if outcome.is_err() {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let failures = Arc::new(Failures::default());
/// let lock = InstrumentedLock::new(Arc::new(MemoryStore::new().lock("x")), failures.clone());
/// lock.get().await?;
/// assert_eq!(failures.0.load(Ordering::Relaxed), 0);
/// # Ok(())
/// # }
/// ```
pub struct InstrumentedLock<O> {
    inner: Arc<dyn LeaderLock>,
    observer: O,
}

// === impl InstrumentedLock ===

impl<O: LockObserver> InstrumentedLock<O> {
    /// Wraps `inner`, reporting to `observer`.
    pub fn new(inner: Arc<dyn LeaderLock>, observer: O) -> Self {
        InstrumentedLock { inner, observer }
    }

    fn record<T>(&self, request: LockRequest, started: Instant, r: &Result<T, LockError>) {
        let outcome = r.as_ref().map(|_| ());
        self.observer.observe(request, started.elapsed(), outcome);
    }
}

#[async_trait]
impl<O: LockObserver> LeaderLock for InstrumentedLock<O> {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        self.inner.validate(timing)
    }

    async fn try_acquire_or_renew(&self, candidate: &Candidate) -> Result<Attempt, LockError> {
        let started = Instant::now();
        let r = self.inner.try_acquire_or_renew(candidate).await;
        self.record(LockRequest::AcquireOrRenew, started, &r);
        r
    }

    async fn release(&self, candidate: &Candidate, term: Term) -> Result<bool, LockError> {
        let started = Instant::now();
        let r = self.inner.release(candidate, term).await;
        self.record(LockRequest::Release, started, &r);
        r
    }

    async fn withdraw(&self, candidate: &Candidate) -> Result<(), LockError> {
        let started = Instant::now();
        let r = self.inner.withdraw(candidate).await;
        self.record(LockRequest::Withdraw, started, &r);
        r
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let started = Instant::now();
        let r = self.inner.get().await;
        self.record(LockRequest::Get, started, &r);
        r
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        self.inner.watch().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::conformance::{Fault, Faulty};
    use crate::wrap::PollingLock;
    use crate::{Identity, MemoryStore};

    /// Every report, in order.
    #[derive(Default)]
    struct Reports(Mutex<Vec<(LockRequest, bool)>>);

    impl LockObserver for Reports {
        fn observe(&self, request: LockRequest, _: Duration, outcome: Result<(), &LockError>) {
            let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
            seen.push((request, outcome.is_ok()));
        }
    }

    /// A follower's withdrawal reaches the backend through both wrappers (the trait's default
    /// would answer `Ok` without asking it), and is reported with the backend's answer.
    #[tokio::test]
    async fn every_request_is_reported_with_its_outcome_through_both_wrappers() {
        let reports = Arc::new(Reports::default());
        let faulty = Faulty::new(Arc::new(MemoryStore::new().lock("x")));
        let polling = Arc::new(PollingLock::new(faulty.clone()));
        let lock = InstrumentedLock::new(polling, reports.clone());
        let c = Candidate {
            identity: Identity::new("a"),
            lease_duration: Duration::from_secs(10),
        };
        assert!(lock.get().await.is_ok());
        faulty.set(Some(Fault::Fail));
        assert!(lock.withdraw(&c).await.is_err(), "the backend's answer");
        faulty.set(None);
        assert!(lock.try_acquire_or_renew(&c).await.is_ok());
        assert!(lock.release(&c, Term(1)).await.is_ok());
        let seen = reports.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(
            seen,
            [
                (LockRequest::Get, true),
                (LockRequest::Withdraw, false),
                (LockRequest::AcquireOrRenew, true),
                (LockRequest::Release, true),
            ]
        );
    }
}
