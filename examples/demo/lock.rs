//! Where the lock lives: the apiserver (a Lease), or a throwaway etcd or Redis.

use anyhow::{Context, Result};
use testkit::etcd::EtcdServer;
use testkit::redis::RedisServer;
use tokio::time::Instant;

use crate::NS;

/// The binary's own backend names: the demo runs the binary with `--lock-backend`.
pub use gateway_leader::config::Backend;

/// The backend named exactly as `--lock-backend` spells it.
pub fn parse_backend(s: &str) -> Option<Backend> {
    Backend::ALL.into_iter().find(|b| b.name() == s)
}

/// Where the lock lives; statuses always go to the apiserver.
pub enum LockServer {
    Kubernetes,
    Etcd(EtcdServer),
    Redis {
        server: RedisServer,
        /// When it came up: a fresh Redis hands out no lock for one lease after that.
        up_since: Instant,
    },
}

impl LockServer {
    pub async fn start(backend: Backend) -> Result<LockServer> {
        Ok(match backend {
            Backend::Kubernetes => LockServer::Kubernetes,
            Backend::Etcd => LockServer::Etcd(
                EtcdServer::start()
                    .await
                    .context("starting etcd for the lock")?,
            ),
            Backend::Redis => {
                let server = RedisServer::start()
                    .await
                    .context("starting redis-server for the lock")?;
                LockServer::Redis {
                    server,
                    up_since: Instant::now(),
                }
            }
        })
    }

    pub fn describe(&self) -> String {
        match self {
            LockServer::Kubernetes => format!("a Lease in namespace {NS} on the apiserver"),
            LockServer::Etcd(s) => format!("a key in a throwaway etcd at {}", s.endpoint()),
            LockServer::Redis { server, .. } => {
                format!("a key in a throwaway Redis at {}", server.url())
            }
        }
    }

    /// `--lock-backend`'s value.
    pub fn backend(&self) -> &'static str {
        match self {
            LockServer::Kubernetes => "kubernetes",
            LockServer::Etcd(_) => "etcd",
            LockServer::Redis { .. } => "redis",
        }
    }

    /// Where to find the lock: the Lease's namespace, or the server's endpoint.
    pub fn flags(&self) -> [String; 2] {
        match self {
            LockServer::Kubernetes => ["--leader-election-namespace".into(), NS.into()],
            LockServer::Etcd(s) => ["--etcd-endpoints".into(), s.endpoint()],
            LockServer::Redis { server, .. } => ["--redis-url".into(), server.url()],
        }
    }
}
