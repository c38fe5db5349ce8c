//! Throwaway local servers: `etcd`, `redis-server` and `kube-apiserver` processes on free loopback
//! ports with temporary data dirs, the Gateway API CRDs on an apiserver, and a TCP proxy that
//! black-holes a client's traffic on demand (a partition).
//!
//! `gateway-leader bench` starts its backends with these, and the test suite uses them through
//! `testkit`, which re-exports this module: one set of launchers for both.

pub mod etcd;
pub mod gateway_api;
pub mod kube;
pub mod process;
pub mod proxy;
pub mod redis;

pub use process::{free_port, require_binary, tail, wait_until, ServerProcess};
