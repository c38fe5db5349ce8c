//! Leader election over a pluggable lock.
//!
//! A backend implements [`LeaderLock`]; the [`Elector`] runs the acquire/renew loop against it and
//! publishes a [`Leadership`] that writers consult with [`Leadership::check`] before every write.
//! The safety rule (`docs/leader-election.md` in the repository): leadership is valid until
//! `sent + renew_deadline`, where `sent` is the monotonic instant noted *before* the last
//! successful acquire or renew was sent. A [`WritePermit`] never outlives that deadline, and a
//! process frozen while holding one writes nothing after it thaws.
//!
//! # Usage
//!
//! 1. Pick a lock: a backend crate (`leader-lock-kubernetes`, `leader-lock-etcd`,
//!    `leader-lock-redis`) or [`MemoryStore`] for tests and examples.
//! 2. [`Elector::spawn`] it with an [`ElectorConfig`]: an [`Identity`] (a pod's name, say) and a
//!    [`Timing`]. It refuses a timing the lock cannot honour with a [`ConfigError`].
//! 3. Gate every write: [`Leadership::run`] for a write in code, or [`WriteGateLayer`] (a tower
//!    layer) on the controller's HTTP client so every mutating request takes a permit
//!    ([`WriteGateLayer::for_permit`] for writes that carry their permit's term). The lock's own
//!    client stays ungated.
//! 4. React to a new term or the end of one with [`Leadership::changes`] (a reconcile of
//!    everything when this replica starts leading, say); its renewals are no change.
//! 5. On the way out, [`Elector::shutdown`]: no new writes, the writes in flight finish, then the
//!    lock is released so a follower takes over at once.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, NotLeader, Timing};
//!
//! let elector = Elector::spawn(
//!     Arc::new(MemoryStore::new().lock("my-controller")),
//!     ElectorConfig {
//!         identity: Identity::new("pod-a"),
//!         timing: Timing::default(),
//!         release_on_shutdown: true,
//!     },
//! )?;
//! let leadership = elector.leadership();
//! drop(leadership.wait_leader().await?);
//! let term = leadership
//!     .run(|permit| async move {
//!         // ... read the object, compute the change ...
//!         let term = permit.check()?; // right before the request goes out
//!         Ok::<_, NotLeader>(term)
//!     })
//!     .await?;
//! println!("wrote under term {term}");
//! elector.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//!
//! - `input`: the `input` module, checks of outside input (bounded file reads, PEM bundles, names,
//!   durations as text) for backends and programs that read settings from files or flags. Off
//!   by default; it adds a certificate parser to the tree.
//! - `conformance`: `conformance`, the backend-independent test suite a backend runs against its
//!   real server, and `Leadership::scripted` for tests of what consumes a leadership.

pub mod clock;
mod config;
mod elector;
mod gate;
#[cfg(feature = "input")]
pub mod input;
mod leadership;
mod lock;
mod memory;
mod observe;
mod record;
mod timing;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use config::ConfigError;
pub use elector::{Elector, ElectorConfig, AFTER_RELEASE_QUIET, SHUTDOWN_BUDGET};
pub use gate::{DeadlineBody, GateError, WriteGate, WriteGateFuture, WriteGateLayer};
#[cfg(feature = "conformance")]
pub use leadership::Scripted;
pub use leadership::{
    GuardedError, LeaderState, Leadership, LeadershipChange, LeadershipChanges, NotLeader, Stamped,
    WritePermit,
};
pub use lock::{Attempt, LeaderLock, LockError, LockEvent, LockEventStream};
pub use memory::{MemoryLock, MemoryStore};
pub use observe::ObservedRecord;
pub use record::{Candidate, Identity, LockRecord, Term};
pub use timing::{Timing, TimingError, MAX_LEASE_DURATION, MIN_RETRY_PERIOD};
