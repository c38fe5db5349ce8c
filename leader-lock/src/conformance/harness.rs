//! What a backend gives the suite: its locks, and ways to damage or delete their records.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::LeaderLock;
use crate::Timing;

/// An error from a harness (server setup, tampering).
pub type HarnessError = Box<dyn std::error::Error + Send + Sync>;

/// A damaged or foreign record a harness plants to check that nothing panics or steals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tamper {
    /// Fields of the wrong type (a string where a number belongs, and so on).
    WrongTypes,
    /// Required fields missing.
    MissingFields,
    /// A negative lease duration.
    NegativeDuration,
    /// An absurdly long lease duration.
    HugeDuration,
    /// A renew time far in the future by the writer's clock.
    RenewInFuture,
    /// An empty holder.
    EmptyHolder,
    /// Bytes that are no record at all.
    Garbage,
}

impl Tamper {
    /// Every case, in a fixed order.
    pub const ALL: [Tamper; 7] = [
        Tamper::WrongTypes,
        Tamper::MissingFields,
        Tamper::NegativeDuration,
        Tamper::HugeDuration,
        Tamper::RenewInFuture,
        Tamper::EmptyHolder,
        Tamper::Garbage,
    ];
}

/// How long a planted record must be respected, from the moment `tamper` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protect {
    /// The record holds nothing; a contender may take the lock at once.
    Nothing,
    /// Nobody may take the lock before this much time has passed; afterwards someone must.
    For(Duration),
}

/// What a backend gives the suite.
///
/// # Cancel safety
/// The suite awaits every call to its end, so none needs to be cancel safe.
#[async_trait]
pub trait Harness: Send + Sync {
    /// Timing for the suite: short, but within the backend's granularity.
    fn timing(&self) -> Timing;
    /// A new client of the lock `name`, as a separate process would have.
    async fn lock(&self, name: &str) -> Result<Arc<dyn LeaderLock>, HarnessError>;
    /// Plants a tampered record in lock `name`, as another writer might.
    async fn tamper(&self, name: &str, case: Tamper) -> Result<Protect, HarnessError>;
    /// Deletes the lock record by hand, as an operator, an eviction or a lost backend state
    /// would: no release.
    async fn vanish(&self, name: &str) -> Result<(), HarnessError>;
}

/// A generous deadline for waits on a busy 2-core machine.
pub fn patience(t: &Timing) -> Duration {
    t.lease_duration * 4 + Duration::from_secs(20)
}
