//! Leader election over a pluggable lock.
//!
//! A backend implements [`LeaderLock`]; the [`Elector`] runs the acquire/renew loop against it and
//! publishes a [`Leadership`] that writers consult with [`Leadership::check`] before every write.
//! The safety rule (docs/leader-election.md): leadership is valid until `sent + renew_deadline`,
//! where `sent` is the monotonic instant noted *before* the last successful acquire or renew was
//! sent.

pub mod clock;
mod elector;
mod gate;
pub mod input;
mod leadership;
mod lock;
mod memory;
mod observe;
mod record;
mod timing;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use elector::{Elector, ElectorConfig, SHUTDOWN_BUDGET};
pub use gate::{GateError, WriteGate, WriteGateFuture, WriteGateLayer};
pub use input::ConfigError;
#[cfg(feature = "conformance")]
pub use leadership::Scripted;
pub use leadership::{GuardedError, LeaderState, Leadership, NotLeader, Stamped, WritePermit};
pub use lock::{Attempt, LeaderLock, LockError, LockEvent, LockEventStream};
pub use memory::{MemoryLock, MemoryStore};
pub use observe::ObservedRecord;
pub use record::{Candidate, Identity, LockRecord, Term};
pub use timing::{Timing, TimingError, MAX_LEASE_DURATION, MIN_RETRY_PERIOD};
