//! The status writer: every replica watches Gateway API objects and computes their statuses;
//! only the valid leader writes them.
//!
//! - [`compute`]: each kind's desired status from the watched objects (pure).
//! - [`desired`], [`key`]: what a desired status is and which object it belongs to.
//!
//! See `docs/architecture.md` for the flow from watch to write.

pub mod compute;
pub mod desired;
pub mod key;

pub use compute::World;
pub use desired::Desired;
pub use key::{Kind, ObjectKey};
