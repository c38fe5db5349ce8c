//! For lock authors: what a backend implements, what it reads and reports, and the rules every
//! backend shares.
//!
//! A backend is one [`LeaderLock`]: acquire-or-renew, release, read the current [`LockRecord`],
//! and a change stream of [`LockEvent`]s with a polling fallback. Its errors are [`LockError`]s
//! (a failure at run time) and [`ConfigError`]s (a setting that cannot work, found before
//! anything is sent). An embedder hands the lock to [`Elector::spawn`](crate::Elector::spawn)
//! and needs nothing else from here.
//!
//! Two rules are the same on every backend, and written here once:
//!
//! - **Expiry seen on this process's clock.** A backend without a server-side TTL (a Kubernetes
//!   Lease) takes a lock over only once its record has been seen unchanged for its lease
//!   duration: [`ObservedRecord`].
//! - **A vanished record is not free** (docs/leader-election.md, "Who may write"): a record that
//!   disappears without a release (deleted by hand, evicted, lost with the server's state) may
//!   still be believed held by its holder, so nobody takes the lock until
//!   [`vanished_free_at`] says so.
//!
//! A lock may also answer [`LeaderLock::inspect`] with what its server keeps beside the record
//! (an [`Inspection`]: its expiry, its history, a trace of a vanished holder), for an operator's
//! tool; the elector never asks.
//!
//! The conformance suite (feature `conformance`) checks a backend against both, on its real
//! server; `examples/custom_backend.rs` in the repository is a whole backend that passes it.

pub use crate::config::ConfigError;
pub use crate::inspect::{Fact, FactValue, Inspection, LastHolder};
pub use crate::lock::{Attempt, LeaderLock, LockError, LockEvent, LockEventStream};
pub use crate::observe::{vanished_free_at, ObservedRecord};
pub use crate::record::{Candidate, LockRecord};
