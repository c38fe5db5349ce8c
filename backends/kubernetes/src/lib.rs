//! A [`LeaderLock`](leader_lock::LeaderLock) on a `coordination.k8s.io/v1` Lease.
//!
//! The Lease is read and written exactly as client-go's `LeaseLock` and `LeaderElector` do, so a
//! client-go replica and a gateway-leader replica sharing one Lease respect each other. Expiry is
//! decided on the follower's own monotonic clock (a record seen unchanged for its lease duration);
//! the holder's wall-clock `renewTime` is never trusted. A watch on the one Lease lets followers
//! take a released lease at once. See `docs/kubernetes.md`.

mod client;
mod error;
mod events;
mod gate;
mod lease;
mod spec;

pub use client::{client, install_crypto_provider};
pub use events::{spawn_leader_events, EVENT_POST_TIMEOUT};
pub use gate::gated_client;
pub use lease::{LeaseLock, DEFAULT_MAX_LEASE_DURATION};
