//! Throwaway local servers for tests and benchmarks: `etcd` (one member, or a 3-member cluster),
//! `redis-server` (alone, or a primary, a replica and three Sentinels) and `kube-apiserver`
//! processes on free loopback ports with temporary data dirs, the Gateway API CRDs on an
//! apiserver, the shipped RBAC bound to a test's service account, and a TCP proxy that
//! black-holes a client's traffic on demand (a partition); the replica harness ([`replica`]):
//! `gateway-leader run` processes and the Go peers, their log lines read as typed events, for
//! the tests, the bench and the demo alike; and two real Gateway API controllers run with no
//! Envoy: Contour ([`contour`]) and Envoy Gateway ([`envoy_gateway`]), the latter in a pod's own
//! network and files ([`pod`]).
//!
//! Dev-only: the test suites and `gateway-leader-bench` use it; nothing that ships links it. It
//! depends on no lock backend and not on the `gateway-leader` binary (the harness knows it by
//! its command line and by the log lines `gateway-leader-log` declares), so a backend's tests
//! build only that backend.

pub mod built;
pub mod cargo;
pub mod contour;
pub mod envoy_gateway;
pub mod etcd;
pub mod etcd_cluster;
pub mod gateway_api;
pub mod kube;
pub mod metrics;
pub mod pod;
pub mod process;
pub mod proxy;
pub mod rbac;
pub mod redis;
pub mod redis_sentinel;
pub mod replica;
pub mod route_versions;

pub use cargo::workspace_binary;
pub use process::{free_port, require_binary, tail, wait_until, ServerProcess};
