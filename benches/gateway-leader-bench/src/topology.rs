//! Which lock servers a lane of the bench runs on, and the replicas' `--lock-backend` there.

use std::fmt;

pub use gateway_leader::config::Backend;

/// The lock servers a lane runs on: one server of a backend the binary offers, or a production
/// topology of several. The replicas' `--lock-backend` is the binary's own [`Backend`], so a
/// name the binary stops accepting fails the bench's build, not its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// A Kubernetes Lease on the bench's (or the given) kube-apiserver.
    Kubernetes,
    /// An etcd key on the bench's (or the given) etcd.
    Etcd,
    /// A Redis key on the bench's (or the given) redis-server.
    Redis,
    /// An etcd key on the bench's own 3-member etcd cluster, every member given to the
    /// replicas: the production topology, for the member-fault scenarios. Not in `all`.
    EtcdCluster,
    /// A Redis key on the bench's own primary, replica and three Sentinels, the replicas
    /// finding the primary through the Sentinels: for the `sentinel-failover` scenario. Not in
    /// `all`.
    RedisSentinel,
}

impl Topology {
    /// One server of each backend, in the order a run measures them.
    pub const ALL: [Topology; 3] = [Topology::Kubernetes, Topology::Etcd, Topology::Redis];
    /// The accepted names, for error messages.
    pub const NAMES: &'static str = "kubernetes, etcd, redis, etcd-cluster, redis-sentinel";

    /// The production topologies, named on their own (not in `all`).
    pub const TOPOLOGIES: [Topology; 2] = [Topology::EtcdCluster, Topology::RedisSentinel];

    /// The topology named `s` (as the bench's `--lock-backend` spells it).
    pub fn parse(s: &str) -> Option<Topology> {
        Topology::ALL
            .into_iter()
            .chain(Topology::TOPOLOGIES)
            .find(|b| b.name() == s)
    }

    /// The bench's name for it, in its `--lock-backend` and its output: the backend's own name
    /// for one server.
    pub fn name(self) -> &'static str {
        match self {
            Topology::EtcdCluster => "etcd-cluster",
            Topology::RedisSentinel => "redis-sentinel",
            b => b.lock_backend().name(),
        }
    }

    /// The backend the replicas are given (`gateway-leader run --lock-backend`).
    pub fn lock_backend(self) -> Backend {
        match self {
            Topology::Kubernetes => Backend::Kubernetes,
            Topology::Etcd | Topology::EtcdCluster => Backend::Etcd,
            Topology::Redis | Topology::RedisSentinel => Backend::Redis,
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_nothing_else_parses() {
        for b in Topology::ALL.into_iter().chain(Topology::TOPOLOGIES) {
            assert_eq!(Topology::parse(&b.to_string()), Some(b));
        }
        assert_eq!(Topology::EtcdCluster.lock_backend(), Backend::Etcd);
        assert_eq!(Topology::RedisSentinel.lock_backend(), Backend::Redis);
        assert_eq!(Topology::parse("Redis"), None);
        assert_eq!(Topology::parse(""), None);
    }

    #[test]
    fn one_server_of_each_backend_the_binary_offers() {
        let all: Vec<Backend> = Topology::ALL.iter().map(|t| t.lock_backend()).collect();
        assert_eq!(all, Backend::ALL);
    }
}
