//! The conformance suite every backend runs against its real server.
//!
//! A backend implements [`Harness`] and calls [`conformance_suite!`](crate::conformance_suite)
//! in an integration test; each case becomes its own `#[tokio::test]`. The
//! [`SplitBrainChecker`] watches every contender of a case and fails it on any overlap of two
//! leaderships or any term that does not increase as it must.

mod cases;
mod checker;
mod faulty;
mod wait;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{LeaderLock, Timing};

pub use cases::{
    crash_taken_after_expiry, graceful_release_is_prompt, mutual_exclusion,
    partitioned_holder_stops, paused_holder_stops, renew_keeps_holder,
    same_identity_never_both_lead, tampered_records, vanished_record_ends_leadership,
    vanished_record_is_not_free,
};
pub use checker::{Interval, SplitBrainChecker};
pub use faulty::{Fault, Faulty};
pub use wait::{wait_any_leader, wait_following, wait_leader, wait_state};

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

/// Generates one `#[tokio::test]` per conformance case for a harness.
///
/// `$make` is an async function (or closure) returning a value that implements [`Harness`].
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            mutual_exclusion,
            renew_keeps_holder,
            graceful_release_is_prompt,
            crash_taken_after_expiry,
            paused_holder_stops,
            partitioned_holder_stops,
            tampered_records,
            same_identity_never_both_lead,
            vanished_record_is_not_free,
            vanished_record_ends_leadership
        );
    };
    (@cases $make:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let h = ($make)().await;
                $crate::conformance::$case(&h).await;
            }
        )*
    };
}
