//! The status writer: every replica watches Gateway API objects and computes their statuses;
//! only the valid leader writes them.
//!
//! [`StatusController::start`] runs all of it under a [`leader_lock::Leadership`]; every write
//! goes through [`leader_lock::Leadership::run`] with a resourceVersion precondition, so only the
//! valid leader writes and a stale read never overwrites a newer status. See
//! `docs/architecture.md` for the flow from watch to write and `docs/library.md` for embedding.
//!
//! An embedder needs the controller, its [`WriterConfig`], the readiness it reports
//! ([`leader_lock::readiness::Readiness`]) and, optionally, the [`StatusMetrics`] it counts in;
//! [`StatusController::cache`] shows the statuses this replica computed ([`StatusCache`], keyed
//! by [`ObjectKey`]). The computation is public on its own ([`compute`]): pure, so it can be run
//! and timed without a cluster.
//!
//! Inside, one module per step: which kinds the cluster serves (`installed`), one reflector per
//! kind (`watch`), the computation ([`compute`]), the cache, the watched copies a write starts
//! from (`observed`), the Gateway API's rules for merging our part of a status (`merge`) and
//! the guarded writer (`writer`).
//!
//! # Examples
//!
//! ```no_run
//! # async fn run(kube: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use gateway_leader_status::{StatusController, WriterConfig};
//! use leader_lock::readiness::Readiness;
//! use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
//!
//! // Any lock: a Lease (leader-lock-kubernetes) in production.
//! let elector = Elector::spawn(
//!     Arc::new(MemoryStore::new().lock("statuses")),
//!     ElectorConfig {
//!         identity: Identity::new("pod-a"),
//!         timing: Timing::default(),
//!         release_on_shutdown: true,
//!     },
//! )?;
//! let config = WriterConfig::default().with_controller_name("example.net/gateway-controller");
//! let (readiness, mut ready) = tokio::sync::watch::channel(Readiness::default());
//! let mut status = StatusController::start(kube, elector.leadership(), config, readiness);
//! ready.wait_for(|r| *r == Readiness::Ready).await?;
//! // ... until a shutdown signal:
//! let ((), released) = tokio::join!(status.stop_writing(), elector.shutdown());
//! status.stop().await;
//! released?;
//! # Ok(())
//! # }
//! ```

mod cache;
pub mod compute;
mod configmap;
mod controller;
mod desired;
mod installed;
mod key;
mod merge;
mod metrics;
mod observed;
mod reduce;
mod secret;
pub mod stored;
pub mod v1_6;
mod watch;
mod writer;

pub use cache::StatusCache;
pub use controller::StatusController;
pub use desired::Desired;
pub use key::{Kind, ObjectKey};
pub use metrics::{KindLabel, StatusMetrics};
pub use reduce::{Reducer, Trim};
pub use writer::{WriterConfig, DEFAULT_CONTROLLER_NAME};
