//! The server that holds a lane's lock: a throwaway local one, or an existing one given by its
//! endpoint. The Kubernetes lock lives on the bench's apiserver.

use std::fmt;

use anyhow::{Context, Result};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};

use crate::bench::cluster::Cluster;
use crate::config::Backend;
use crate::servers::etcd::EtcdServer;
use crate::servers::redis::RedisServer;

/// Existing servers to use instead of starting throwaway ones.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    /// etcd endpoints (comma-separated), as `run --etcd-endpoints` takes them.
    pub etcd: Option<String>,
    /// A Redis URL, as `run --redis-url` takes it.
    pub redis: Option<String>,
}

/// A lock backend's server.
pub enum LockServer {
    /// The Lease lives on the bench's apiserver.
    Kubernetes,
    /// etcd: the endpoints the replicas use, and the local server if the bench started it.
    Etcd {
        /// `--etcd-endpoints`.
        endpoints: String,
        /// The throwaway server, if any.
        local: Option<EtcdServer>,
    },
    /// Redis: the URL the replicas use, and the local server if the bench started it.
    Redis {
        /// `--redis-url`.
        url: String,
        /// The throwaway server, if any.
        local: Option<RedisServer>,
    },
}

impl LockServer {
    /// Starts (or points at) the server of `backend`.
    pub async fn start(backend: Backend, given: &Endpoints) -> Result<LockServer> {
        Ok(match backend {
            Backend::Kubernetes => LockServer::Kubernetes,
            Backend::Etcd => match &given.etcd {
                Some(e) => LockServer::Etcd {
                    endpoints: e.clone(),
                    local: None,
                },
                None => {
                    let s = EtcdServer::start()
                        .await
                        .context("starting a local etcd (or give --etcd-endpoints)")?;
                    LockServer::Etcd {
                        endpoints: s.endpoint(),
                        local: Some(s),
                    }
                }
            },
            Backend::Redis => match &given.redis {
                Some(u) => LockServer::Redis {
                    url: u.clone(),
                    local: None,
                },
                None => {
                    let s = RedisServer::start()
                        .await
                        .context("starting a local redis-server (or give --redis-url)")?;
                    LockServer::Redis {
                        url: s.url(),
                        local: Some(s),
                    }
                }
            },
        })
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        match self {
            LockServer::Kubernetes => Backend::Kubernetes,
            LockServer::Etcd { .. } => Backend::Etcd,
            LockServer::Redis { .. } => Backend::Redis,
        }
    }

    /// The `run` flags that point a replica at this server; `ns` is the Lease's namespace.
    pub fn replica_args(&self, ns: &str) -> Vec<String> {
        let mut a = vec!["--lock-backend".to_string(), self.backend().to_string()];
        match self {
            LockServer::Kubernetes => {
                a.extend(["--leader-election-namespace".into(), ns.into()]);
            }
            LockServer::Etcd { endpoints, .. } => {
                a.extend(["--etcd-endpoints".into(), endpoints.clone()]);
            }
            LockServer::Redis { url, .. } => {
                a.extend(["--redis-url".into(), url.clone()]);
            }
        }
        a
    }
}

impl LockServer {
    /// Deletes the lock record `lock` by hand, as an operator or a stray script would: the
    /// Lease in `ns`, the etcd key under the default prefix, the Redis holder key.
    pub async fn delete_record(&self, cluster: &Cluster, ns: &str, lock: &str) -> Result<()> {
        match self {
            LockServer::Kubernetes => {
                let api: Api<Lease> = Api::namespaced(cluster.client(), ns);
                api.delete(lock, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting Lease {ns}/{lock}"))?;
            }
            LockServer::Etcd { endpoints, .. } => {
                let eps: Vec<&str> = endpoints.split(',').map(str::trim).collect();
                let mut c = etcd_client::Client::connect(eps, None)
                    .await
                    .context("connecting to etcd")?;
                c.delete(format!("/gateway-leader/{lock}"), None)
                    .await
                    .context("etcd del")?;
            }
            LockServer::Redis { url, .. } => {
                let client = redis::Client::open(url.as_str()).context("the Redis URL")?;
                let mut con = client.get_multiplexed_async_connection().await?;
                // The backend's holder key: `{prefix}:{<name>}:holder` (DNS names need no escaping).
                let _: i64 = redis::cmd("DEL")
                    .arg(format!("gateway-leader:{{{lock}}}:holder"))
                    .query_async(&mut con)
                    .await
                    .context("redis DEL")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for LockServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockServer::Kubernetes => f.write_str("kubernetes (the bench's apiserver)"),
            LockServer::Etcd { endpoints, local } => write!(
                f,
                "etcd at {endpoints}{}",
                if local.is_some() { " (local)" } else { "" }
            ),
            LockServer::Redis { url, local } => write!(
                f,
                "redis at {url}{}",
                if local.is_some() { " (local)" } else { "" }
            ),
        }
    }
}
