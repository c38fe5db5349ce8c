//! A [`LeaderLock`](leader_lock::LeaderLock) on a `coordination.k8s.io/v1` Lease, for the
//! elector of the `leader-lock` crate.
//!
//! The Lease is read and written exactly as client-go's `LeaseLock` and `LeaderElector` do, so a
//! client-go replica and a replica using this crate, sharing one Lease, respect each other. Expiry
//! is decided on the follower's own monotonic clock (a record seen unchanged for its lease
//! duration); the holder's wall-clock `renewTime` is never trusted. A watch on the one Lease lets
//! followers take a released lease at once.
//!
//! - [`client`] builds a kube client (kubeconfig or in-cluster) for the lock, on
//!   [`client_builder`]'s stack (`TCP_NODELAY` on every connection);
//! - [`LeaseLock`] is the lock; hand it to `leader_lock::Elector::spawn`;
//! - [`gated_client`] builds the controller's own client, whose writes go out only while this
//!   replica leads (never give it to the lock);
//! - [`spawn_leader_events`] posts client-go's leader-election Events on the Lease.
//!
//! The Lease needs RBAC `leases: get, list, watch, create, update` in its namespace (and
//! `events: create` for the Events). See `docs/kubernetes.md` and `docs/library.md` in the
//! repository.
//!
//! # Examples
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use leader_lock::{Elector, ElectorConfig, Identity, Timing};
//! use leader_lock_kubernetes::{client, gated_client, LeaseLock};
//!
//! let (kube, namespace) = client(None, None, "my-controller/0.1").await?;
//! let lock = LeaseLock::new(kube, &namespace, "my-controller-lock")
//!     .with_field_manager("my-controller");
//! let elector = Elector::spawn(
//!     Arc::new(lock),
//!     ElectorConfig {
//!         identity: Identity::new("pod-a"),
//!         timing: Timing::default(),
//!         release_on_shutdown: true,
//!     },
//! )?;
//! let writes = gated_client(kube::Config::infer().await?, elector.leadership())?;
//! // ... run the controller with `writes` ...
//! # let _ = writes;
//! elector.shutdown().await?;
//! # Ok(())
//! # }
//! ```

mod client;
mod error;
mod events;
mod gate;
mod lease;
mod spec;

pub use client::{client, client_builder, install_crypto_provider, ClientService};
pub use events::{spawn_leader_events, EVENT_POST_TIMEOUT};
pub use gate::gated_client;
pub use lease::{LeaseLock, DEFAULT_FIELD_MANAGER, DEFAULT_MAX_LEASE_DURATION};
