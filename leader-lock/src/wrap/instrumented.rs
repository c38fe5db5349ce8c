//! A lock that times every request of another, for metrics.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{
    Attempt, Candidate, ConfigError, Inspection, LeaderLock, LockError, LockEventStream, LockRecord,
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
/// reports it to a [`LockObserver`]. A request dropped before it answered (the elector gives up
/// on a call at its deadline) is reported as a [`LockError::Timeout`] after the time it ran. The
/// change stream is passed through untimed: it is one long request.
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

    /// Starts timing `request`: the guard reports it when it completes, or, dropped before
    /// that (the elector gave up on it at its deadline, or a shutdown cut it), as a
    /// [`LockError::Timeout`] after the time it ran.
    fn time(&self, request: LockRequest) -> Timed<'_, O> {
        Timed {
            observer: &self.observer,
            request,
            started: Instant::now(),
            done: false,
        }
    }
}

/// One request being timed; see [`InstrumentedLock::time`].
struct Timed<'a, O: LockObserver> {
    observer: &'a O,
    request: LockRequest,
    started: Instant,
    done: bool,
}

impl<O: LockObserver> Timed<'_, O> {
    fn record<T>(mut self, r: Result<T, LockError>) -> Result<T, LockError> {
        self.done = true;
        let outcome = r.as_ref().map(|_| ());
        self.observer
            .observe(self.request, self.started.elapsed(), outcome);
        r
    }
}

impl<O: LockObserver> Drop for Timed<'_, O> {
    fn drop(&mut self) {
        if !self.done {
            // A request that never answered is the sign of a hung backend: unreported, it would
            // leave the replica looking reachable.
            let took = self.started.elapsed();
            self.observer
                .observe(self.request, took, Err(&LockError::Timeout(took)));
        }
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
        let timed = self.time(LockRequest::AcquireOrRenew);
        timed.record(self.inner.try_acquire_or_renew(candidate).await)
    }

    async fn release(&self, candidate: &Candidate, term: Term) -> Result<bool, LockError> {
        let timed = self.time(LockRequest::Release);
        timed.record(self.inner.release(candidate, term).await)
    }

    async fn withdraw(&self, candidate: &Candidate) -> Result<(), LockError> {
        let timed = self.time(LockRequest::Withdraw);
        timed.record(self.inner.withdraw(candidate).await)
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let timed = self.time(LockRequest::Get);
        timed.record(self.inner.get().await)
    }

    async fn inspect(&self) -> Result<Inspection, LockError> {
        let timed = self.time(LockRequest::Get);
        timed.record(self.inner.inspect().await)
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

    /// A request the elector gives up on (its future dropped at the deadline) is reported as a
    /// timeout, so a hung backend does not look reachable.
    #[tokio::test(start_paused = true)]
    async fn a_request_dropped_unanswered_is_reported_as_a_timeout() {
        let reports = Arc::new(Reports::default());
        let faulty = Faulty::new(Arc::new(MemoryStore::new().lock("x")));
        let lock = InstrumentedLock::new(faulty.clone(), reports.clone());
        faulty.set(Some(Fault::Hang));
        let gave_up = tokio::time::timeout(Duration::from_secs(1), lock.get()).await;
        assert!(gave_up.is_err(), "the call hangs");
        let seen = reports.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(seen, [(LockRequest::Get, false)]);
    }
}
