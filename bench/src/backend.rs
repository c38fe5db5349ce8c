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
}

impl Backend {
    /// Every backend, in the order a run measures them.
    pub const ALL: [Backend; 3] = [Backend::Kubernetes, Backend::Etcd, Backend::Redis];
    /// The accepted names, for error messages.
    pub const NAMES: &'static str = "kubernetes, etcd, redis";

    /// The backend named `s` (as `--lock-backend` spells it).
    pub fn parse(s: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == s)
    }

    /// The name `gateway-leader run --lock-backend` takes.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Kubernetes => "kubernetes",
            Backend::Etcd => "etcd",
            Backend::Redis => "redis",
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
        for b in Backend::ALL {
            assert_eq!(Backend::parse(&b.to_string()), Some(b));
        }
        assert_eq!(Backend::parse("Redis"), None);
        assert_eq!(Backend::parse(""), None);
    }
}
