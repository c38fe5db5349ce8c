//! Test-only helpers: throwaway etcd, redis-server and kube-apiserver processes on free loopback
//! ports with temporary data dirs, and the split-brain checker.
//!
//! The launchers live in the `gateway-leader` crate (`gateway_leader::servers`), where
//! `gateway-leader bench` uses them too; they are re-exported here under their old paths.

pub use gateway_leader::servers::{etcd, gateway_api, kube, process, proxy, redis};
pub mod rbac;

pub use gateway_leader::servers::process::{
    free_port, require_binary, tail, wait_until, ServerProcess,
};
pub use leader_lock::conformance::SplitBrainChecker;
