//! A lock wrapper that hangs or fails on demand, as a paused process or a partition would.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::backend::{
    Attempt, Candidate, ConfigError, LeaderLock, LockError, LockEventStream, LockRecord,
};
use crate::{Term, Timing};

/// How a [`Faulty`] lock misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Calls hang until the fault is cleared, like a paused process or a dead link. The elector
    /// itself lives on, so its `check()` stays truthful: this is how the suite crashes a leader.
    Hang,
    /// Calls fail at once, like a partition that refuses connections.
    Fail,
}

/// Wraps a lock so that a test can pause it or cut it off.
pub struct Faulty {
    inner: Arc<dyn LeaderLock>,
    fault: Mutex<Option<Fault>>,
    cleared: Notify,
}

impl Faulty {
    /// Wraps `inner`, working normally.
    pub fn new(inner: Arc<dyn LeaderLock>) -> Arc<Self> {
        Arc::new(Faulty {
            inner,
            fault: Mutex::new(None),
            cleared: Notify::new(),
        })
    }

    /// Sets or clears the fault. Calls already past the gate finish normally.
    pub fn set(&self, fault: Option<Fault>) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
        if fault.is_none() {
            self.cleared.notify_waiters();
        }
    }

    async fn gate(&self) -> Result<(), LockError> {
        loop {
            let notified = self.cleared.notified();
            let f = *self.fault.lock().unwrap_or_else(|p| p.into_inner());
            match f {
                None => return Ok(()),
                Some(Fault::Fail) => return Err(LockError::unavailable("injected fault")),
                Some(Fault::Hang) => notified.await,
            }
        }
    }
}

#[async_trait]
impl LeaderLock for Faulty {
    fn describe(&self) -> String {
        format!("faulty {}", self.inner.describe())
    }

    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        self.inner.validate(timing)
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.gate().await?;
        self.inner.try_acquire_or_renew(c).await
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.gate().await?;
        self.inner.release(c, term).await
    }
    async fn withdraw(&self, c: &Candidate) -> Result<(), LockError> {
        self.gate().await?;
        self.inner.withdraw(c).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.gate().await?;
        self.inner.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        self.gate().await?;
        self.inner.watch().await
    }
}
