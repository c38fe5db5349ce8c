//! Test-only helpers: throwaway etcd, redis-server and kube-apiserver processes on free loopback
//! ports with temporary data dirs, and the split-brain checker.

pub mod etcd;
pub mod gateway_api;
pub mod kube;
pub mod process;
pub mod rbac;
pub mod redis;

pub use leader_lock::conformance::SplitBrainChecker;
pub use process::{free_port, require_binary, tail, wait_until, ServerProcess};
