//! Locks that wrap another lock: each is a [`LeaderLock`](crate::backend::LeaderLock) itself, so
//! they stack, and each forwards [`validate`](crate::backend::LeaderLock::validate) and
//! [`withdraw`](crate::backend::LeaderLock::withdraw) to the lock it wraps.
//!
//! - [`PollingLock`]: no change stream and no expiry hint, so followers poll as client-go's do.
//! - [`InstrumentedLock`]: every request timed and reported to a [`LockObserver`] (metrics).

mod instrumented;
mod polling;

pub use instrumented::{InstrumentedLock, LockObserver, LockRequest};
pub use polling::PollingLock;
