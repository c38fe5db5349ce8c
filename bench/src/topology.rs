//! Which lock servers the bench starts, and the replicas' `--lock-backend`.

use std::fmt;

/// A lock backend the bench can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
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

impl Backend {
    /// Every backend, in the order a run measures them.
    pub const ALL: [Backend; 3] = [Backend::Kubernetes, Backend::Etcd, Backend::Redis];
    /// The accepted names, for error messages.
    pub const NAMES: &'static str = "kubernetes, etcd, redis, etcd-cluster, redis-sentinel";

    /// The production topologies, named on their own (not in `all`).
    pub const TOPOLOGIES: [Backend; 2] = [Backend::EtcdCluster, Backend::RedisSentinel];

    /// The backend named `s` (as the bench's `--lock-backend` spells it).
    pub fn parse(s: &str) -> Option<Backend> {
        Backend::ALL
            .into_iter()
            .chain(Backend::TOPOLOGIES)
            .find(|b| b.name() == s)
    }

    /// The bench's name for it, in its `--lock-backend` and its output.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Kubernetes => "kubernetes",
            Backend::Etcd => "etcd",
            Backend::Redis => "redis",
            Backend::EtcdCluster => "etcd-cluster",
            Backend::RedisSentinel => "redis-sentinel",
        }
    }

    /// The name `gateway-leader run --lock-backend` takes.
    pub fn lock_backend(self) -> &'static str {
        match self {
            Backend::EtcdCluster => Backend::Etcd.name(),
            Backend::RedisSentinel => Backend::Redis.name(),
            b => b.name(),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_nothing_else_parses() {
        for b in Backend::ALL.into_iter().chain(Backend::TOPOLOGIES) {
            assert_eq!(Backend::parse(&b.to_string()), Some(b));
        }
        assert_eq!(Backend::EtcdCluster.lock_backend(), "etcd");
        assert_eq!(Backend::RedisSentinel.lock_backend(), "redis");
        assert_eq!(Backend::parse("Redis"), None);
        assert_eq!(Backend::parse(""), None);
    }
}
