//! Locks that wrap another lock.

mod polling;

pub use polling::PollingLock;
