//! Leader election over a pluggable lock.
//!
//! A backend implements [`LeaderLock`](backend::LeaderLock); the [`Elector`] runs the
//! acquire/renew loop against it and publishes a [`Leadership`] that writers consult with
//! [`Leadership::check`] before every write.
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
//!    [`Timing`]. It refuses a timing the lock cannot honour with a
//!    [`ConfigError`](backend::ConfigError).
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
//! use leader_lock::leadership::NotLeader;
//! use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
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
//! # Modules
//!
//! The root holds what an embedder uses; each module holds the rest of its concept:
//!
//! - [`elector`]: the [`Elector`], its shutdown budget.
//! - [`leadership`]: [`Leadership`] and its [`WritePermit`]s, the stream of
//!   [`LeadershipChange`]s, and why a write may not go ahead ([`NotLeader`](leadership::NotLeader),
//!   [`GuardedError`](leadership::GuardedError)).
//! - [`gate`]: the write gate for tower HTTP clients ([`WriteGateLayer`] and its service, future,
//!   body and error).
//! - [`timing`]: [`Timing`], client-go's rules and their bounds.
//! - [`memory`]: the in-memory lock ([`MemoryStore`]).
//! - [`wrap`]: locks that wrap another: client-go's polling, every request timed.
//! - [`backend`]: for lock authors: the [`LeaderLock`](backend::LeaderLock) trait, records,
//!   errors, and the rule for a record that vanished.
//! - [`clock`]: instants as `CLOCK_MONOTONIC` milliseconds, for log lines that several processes
//!   compare.
//!
//! # Features
//!
//! - `input`: the `input` module, checks of outside input (bounded file reads, PEM bundles, names,
//!   durations as text) for backends and programs that read settings from files or flags. Off
//!   by default; it adds a certificate parser to the tree.
//! - `test-util`: what tests need and production code must not use, as tokio's feature of that
//!   name: a [`Leadership`] whose states a test publishes (`Leadership::scripted`), and
//!   [`MemoryStore`]'s ways to plant, delete or lose a record behind its clients' backs.
//! - `conformance` (implies `test-util`): `conformance`, the backend-independent test suite a
//!   backend runs against its real server.

pub mod backend;
pub mod clock;
mod config;
pub mod elector;
pub mod gate;
#[cfg(feature = "input")]
pub mod input;
mod inspect;
pub mod leadership;
mod lock;
pub mod memory;
mod observe;
pub mod readiness;
mod record;
pub mod timing;
pub mod wrap;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use elector::{Candidacy, Elector, ElectorConfig};
pub use gate::WriteGateLayer;
pub use leadership::{LeaderState, Leadership, LeadershipChange, WritePermit};
pub use memory::MemoryStore;
pub use record::{Identity, Term};
pub use timing::Timing;
