//! A [`LeaderLock`](leader_lock::backend::LeaderLock) on a `coordination.k8s.io/v1` Lease, for the
//! elector of the `leader-lock` crate.
//!
//! The Lease is read and written exactly as client-go's `LeaseLock` and `LeaderElector` do, so a
//! client-go replica and a replica using this crate, sharing one Lease, respect each other. Expiry
//! is decided on the follower's own monotonic clock (a record seen unchanged for its lease
//! duration); the holder's wall-clock `renewTime` is never trusted. A watch on the one Lease lets
//! followers take a released lease at once.
//!
//! From one `kube::Config` (kube's `Config::infer`, or [`ClientOptions::load`] for a program with
//! kubeconfig and context settings), build both clients of a replica:
//!
//! - [`client`], ungated, for the lock, the Events and the controller's reads, on
//!   [`client_builder`]'s stack (`TCP_NODELAY` on every connection);
//! - [`gated_client`], the controller's own, whose writes go out only while this replica leads
//!   (never give it to the lock); [`permit_client`] narrows it to one permit, for a write that
//!   carries the permit's term.
//!
//! [`LeaseLock`] is the lock (hand it to `leader_lock::Elector::spawn`), and
//! [`spawn_leader_events`] posts client-go's leader-election Events on the Lease.
//!
//! The Lease needs RBAC `leases: get, list, watch, create, update` in its namespace (and
//! `events: create` for the Events). See `docs/kubernetes.md` and `docs/library.md` in the
//! repository.
//!
//! # TLS
//!
//! This crate compiles in rustls' ring provider. If your build also has aws-lc-rs (kube's
//! `aws-lc-rs` feature, say), rustls cannot pick one by itself: call [`install_crypto_provider`]
//! at the start of `main`, before any TLS client is built. The crate never installs a provider
//! for the process by itself.
//!
//! # Examples
//!
//! A kube-runtime `Controller` on a Lease: every replica watches and reconciles, only the leader's
//! patches are sent, and a new leader reconciles everything at once.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # use kube::runtime::controller::Action;
//! # async fn reconcile(
//! #     _: Arc<ConfigMap>,
//! #     _: Arc<kube::Api<ConfigMap>>,
//! # ) -> Result<Action, kube::Error> {
//! #     Ok(Action::await_change())
//! # }
//! # fn error_policy(_: Arc<ConfigMap>, _: &kube::Error, _: Arc<kube::Api<ConfigMap>>) -> Action {
//! #     Action::requeue(Duration::from_secs(5))
//! # }
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use futures::{future, StreamExt};
//! use kube::runtime::{watcher, Controller};
//! use kube::Api;
//! use leader_lock::{Elector, ElectorConfig, Identity, LeadershipChange, Timing};
//! use leader_lock_kubernetes::{client, gated_client, LeaseLock};
//!
//! let config = kube::Config::infer().await?;
//! let namespace = config.default_namespace.clone();
//! let lock = LeaseLock::new(client(config.clone())?, &namespace, "my-controller-lock")
//!     .with_field_manager("my-controller");
//! let elector = Elector::spawn(
//!     Arc::new(lock),
//!     ElectorConfig {
//!         identity: Identity::new(std::env::var("POD_NAME")?),
//!         timing: Timing::default(),
//!         release_on_shutdown: true,
//!     },
//! )?;
//! let leadership = elector.leadership();
//! let configmaps: Api<ConfigMap> =
//!     Api::namespaced(gated_client(config, leadership.clone())?, &namespace);
//! let new_terms = leadership.changes().filter_map(|change| {
//!     future::ready(matches!(change, LeadershipChange::StartedLeading { .. }).then_some(()))
//! });
//! Controller::new(configmaps.clone(), watcher::Config::default())
//!     .reconcile_all_on(new_terms)
//!     .shutdown_on_signal()
//!     .run(reconcile, error_policy, Arc::new(configmaps))
//!     .for_each(|_| future::ready(()))
//!     .await;
//! elector.shutdown().await?; // the reconciles in flight have finished: release the Lease
//! # Ok(())
//! # }
//! ```

mod client;
mod error;
mod events;
mod gate;
mod lease;
mod spec;
pub mod stack;

pub use client::{
    client, client_builder, install_crypto_provider, ClientOptions, ClientService, KubeconfigSource,
};
pub use events::{spawn_leader_events, LeaderEventsConfig, EVENT_POST_TIMEOUT};
pub use gate::{gated_client, permit_client};
pub use lease::{LeaseLock, DEFAULT_FIELD_MANAGER, DEFAULT_MAX_LEASE_DURATION};
