//! The status writer: every replica watches Gateway API objects and computes their statuses;
//! only the valid leader writes them.
//!
//! - [`installed`]: which Gateway API kinds the cluster serves (discovery), and readiness.
//! - [`watch`]: one reflector per kind the computation reads.
//! - [`compute`]: each kind's desired status from the watched objects (pure).
//! - [`cache`]: the latest desired status per object and which still need writing.
//! - [`observed`]: the watched copies a write starts from, and drift from the desired status.
//! - [`merge`]: the Gateway API's rules for folding our part into an object's status.
//! - [`writer`]: the guarded writer, which sends only under a valid leadership.
//! - [`metrics`]: what the writer counts, registered where the caller says.
//! - [`secret`]: Secrets reduced to what the listener certificate check needs.
//! - [`configmap`]: ConfigMaps reduced to what the BackendTLSPolicy CA check needs.
//!
//! [`StatusController::start`] runs all of it under a [`leader_lock::Leadership`]; every write
//! goes through [`leader_lock::Leadership::run`] with a resourceVersion precondition, so only the
//! valid leader writes and a stale read never overwrites a newer status. See
//! `docs/architecture.md` for the flow from watch to write and `docs/library.md` for embedding.

pub mod cache;
pub mod compute;
pub mod configmap;
mod controller;
pub mod desired;
pub mod installed;
pub mod key;
pub mod merge;
pub mod metrics;
pub mod observed;
pub mod secret;
pub mod watch;

pub mod writer;

pub use cache::StatusCache;
pub use compute::World;
pub use controller::StatusController;
pub use desired::Desired;
pub use installed::Readiness;
pub use key::{Kind, ObjectKey};
pub use metrics::StatusMetrics;
pub use writer::{StatusWriter, WriterConfig, DEFAULT_CONTROLLER_NAME};
