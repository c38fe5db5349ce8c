//! The server that holds a lane's lock: a throwaway local one, or an existing one given by its
//! endpoint. The Kubernetes lock lives on the bench's apiserver.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};

use crate::cluster::Cluster;
use crate::topology::Topology;
use leader_lock::clock;
use testkit::etcd::EtcdServer;
use testkit::etcd_cluster::EtcdCluster;
use testkit::redis::RedisServer;
use testkit::redis_sentinel::{SentinelTopology, MASTER};

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
        /// The bench's 3-member cluster (`etcd-cluster`), whose members' proxies are the
        /// endpoints; the member faults act on it.
        members: Option<EtcdCluster>,
    },
    /// Redis: the URL the replicas use, and the local server if the bench started it.
    Redis {
        /// `--redis-url`.
        url: String,
        /// The throwaway server, if any.
        local: Option<RedisServer>,
        /// The bench's primary, replica and Sentinels (`redis-sentinel`): the replicas find
        /// the primary through the Sentinels, and `url` is the primary when it started.
        sentinel: Option<SentinelTopology>,
    },
}

impl LockServer {
    /// The bench's 3-member etcd cluster, on an `etcd-cluster` lane.
    pub fn members_mut(&mut self) -> Option<&mut EtcdCluster> {
        match self {
            LockServer::Etcd { members, .. } => members.as_mut(),
            _ => None,
        }
    }

    /// Starts (or points at) the server of `backend`.
    pub async fn start(backend: Topology, given: &Endpoints) -> Result<LockServer> {
        Ok(match backend {
            Topology::Kubernetes => LockServer::Kubernetes,
            Topology::Etcd => match &given.etcd {
                Some(e) => LockServer::Etcd {
                    endpoints: e.clone(),
                    local: None,
                    members: None,
                },
                None => {
                    let s = EtcdServer::start()
                        .await
                        .context("starting a local etcd (or give --etcd-endpoints)")?;
                    LockServer::Etcd {
                        endpoints: s.endpoint(),
                        local: Some(s),
                        members: None,
                    }
                }
            },
            Topology::EtcdCluster => {
                let c = EtcdCluster::start()
                    .await
                    .context("starting a local 3-member etcd cluster")?;
                LockServer::Etcd {
                    endpoints: c.endpoints().join(","),
                    local: None,
                    members: Some(c),
                }
            }
            Topology::Redis => match &given.redis {
                Some(u) => LockServer::Redis {
                    url: u.clone(),
                    local: None,
                    sentinel: None,
                },
                None => {
                    let s = RedisServer::start()
                        .await
                        .context("starting a local redis-server (or give --redis-url)")?;
                    LockServer::Redis {
                        url: s.url(),
                        local: Some(s),
                        sentinel: None,
                    }
                }
            },
            Topology::RedisSentinel => {
                let mut t = SentinelTopology::start()
                    .await
                    .context("starting a local Redis primary, replica and 3 Sentinels")?;
                LockServer::Redis {
                    url: t.node(0).url(),
                    local: None,
                    sentinel: Some(t),
                }
            }
        })
    }

    /// The backend.
    pub fn backend(&self) -> Topology {
        match self {
            LockServer::Kubernetes => Topology::Kubernetes,
            LockServer::Etcd {
                members: Some(_), ..
            } => Topology::EtcdCluster,
            LockServer::Etcd { .. } => Topology::Etcd,
            LockServer::Redis {
                sentinel: Some(_), ..
            } => Topology::RedisSentinel,
            LockServer::Redis { .. } => Topology::Redis,
        }
    }

    /// The `run` flags that point a replica at this server; `ns` is the Lease's namespace.
    /// `via` replaces the etcd endpoints or the Redis address with proxies, in the order of
    /// [`upstreams`](Self::upstreams) (a Kubernetes lane is proxied through its kubeconfig).
    pub fn replica_args(&self, ns: &str, via: &[SocketAddr]) -> Vec<String> {
        let mut a = vec![
            "--lock-backend".to_string(),
            self.backend().lock_backend().to_string(),
        ];
        match self {
            LockServer::Kubernetes => {
                a.extend(["--leader-election-namespace".into(), ns.into()]);
            }
            LockServer::Etcd { endpoints, .. } => {
                let eps = if via.is_empty() {
                    endpoints.clone()
                } else {
                    via.iter()
                        .map(|p| format!("http://{p}"))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                a.extend(["--etcd-endpoints".into(), eps]);
            }
            LockServer::Redis {
                sentinel: Some(t), ..
            } => {
                a.extend([
                    "--redis-sentinel".into(),
                    t.sentinel_urls().join(","),
                    "--redis-sentinel-master".into(),
                    MASTER.into(),
                ]);
            }
            LockServer::Redis { url, .. } => {
                let url = match via.first() {
                    Some(p) => with_address(url, *p),
                    None => url.clone(),
                };
                a.extend(["--redis-url".into(), url]);
            }
        }
        a
    }

    /// The addresses a replica reaches the lock's server at, for partition proxies.
    pub fn upstreams(&self, cluster: &Cluster) -> Result<Vec<SocketAddr>> {
        let urls: Vec<String> = match self {
            LockServer::Kubernetes => vec![cluster
                .local()
                .ok_or_else(|| anyhow!("a partition needs the bench's own apiserver"))?
                .url()],
            LockServer::Etcd { endpoints, .. } => {
                endpoints.split(',').map(|e| e.trim().to_string()).collect()
            }
            LockServer::Redis { url, .. } => vec![url.clone()],
        };
        urls.iter().map(|u| socket_addr(u)).collect()
    }

    /// Kills the lock's server and starts it again at once: Redis comes back empty, etcd with
    /// its data, the apiserver with its etcd. Returns the instant of the kill
    /// (`CLOCK_MONOTONIC` ms), once the server answers again.
    pub async fn restart(&mut self, cluster: &mut Cluster) -> Result<f64> {
        let at = clock::mono_ms();
        match self {
            LockServer::Kubernetes => cluster
                .local_mut()
                .ok_or_else(|| anyhow!("backend-restart needs the bench's own apiserver"))?
                .restart()
                .await
                .context("restarting the apiserver")?,
            LockServer::Etcd { local, .. } => local
                .as_mut()
                .ok_or_else(|| {
                    anyhow!(
                        "backend-restart needs the bench's own single etcd \
                         (on etcd-cluster, use member-restart or rolling-restart)"
                    )
                })?
                .restart()
                .await
                .context("restarting etcd")?,
            LockServer::Redis { local, .. } => local
                .as_mut()
                .ok_or_else(|| anyhow!("backend-restart needs the bench's own redis-server"))?
                .restart()
                .await
                .context("restarting redis-server")?,
        }
        Ok(at)
    }
}

impl LockServer {
    /// `redis-sentinel`: kills the primary the Sentinels name (SIGKILL) and waits until they
    /// promote the replica (once that replica is in sync); then starts the killed node again,
    /// for the Sentinels to make it the next replica. Returns the instant of the kill and of the
    /// promotion seen (`CLOCK_MONOTONIC` ms).
    pub async fn fail_over(&mut self) -> Result<(f64, f64)> {
        const PATIENCE: Duration = Duration::from_secs(60);
        let LockServer::Redis {
            sentinel: Some(t), ..
        } = self
        else {
            return Err(anyhow!(
                "sentinel-failover needs --lock-backend redis-sentinel"
            ));
        };
        let primary = t
            .primary_port()
            .await
            .ok_or_else(|| anyhow!("no Sentinel names a primary"))?;
        let i = (0..2)
            .find(|i| t.node(*i).port() == primary)
            .ok_or_else(|| anyhow!("the Sentinels name port {primary}, not one of ours"))?;
        // A failover needs a replica in sync to promote: after the last round's, the old primary
        // started again must first be made one by the Sentinels and sync (before the kill, so
        // that the wait is not in the figures).
        let url = t.node(1 - i).url();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !replica_in_sync(&url).await {
            if tokio::time::Instant::now() >= deadline {
                return Err(anyhow!(
                    "the Redis replica was not in sync with the primary within {PATIENCE:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let at = clock::mono_ms();
        t.node(i).kill();
        t.wait_failover(primary, PATIENCE).await?;
        let promoted = clock::mono_ms();
        t.node(i)
            .restart()
            .await
            .context("starting the old primary again")?;
        Ok((at, promoted))
    }
}

/// Whether the Redis node at `url` is a replica whose link to its primary is up.
async fn replica_in_sync(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut con) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    let info: redis::RedisResult<String> = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut con)
        .await;
    info.is_ok_and(|i| i.contains("role:slave") && i.contains("master_link_status:up"))
}

/// `scheme://[userinfo@]host:port[/rest]` → the socket address of `host:port`.
fn socket_addr(url: &str) -> Result<SocketAddr> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    host_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| anyhow!("cannot resolve the address of {url:?} for a proxy"))
}

/// `url` with its `host:port` replaced by `addr` (credentials and path kept).
fn with_address(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let userinfo = authority
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    format!("{scheme}://{userinfo}{addr}{path}")
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
                // The backend's holder key: `{prefix}:{<name>}:holder` (DNS names need no
                // escaping).
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
            LockServer::Etcd {
                endpoints,
                local,
                members,
            } => write!(
                f,
                "etcd at {endpoints}{}",
                if members.is_some() {
                    " (local 3-member cluster)"
                } else if local.is_some() {
                    " (local)"
                } else {
                    ""
                }
            ),
            LockServer::Redis {
                url,
                local,
                sentinel,
            } => match sentinel {
                Some(t) => write!(
                    f,
                    "redis through the Sentinels at {} (local primary, replica, 3 Sentinels)",
                    t.sentinel_urls().join(",")
                ),
                None => write!(
                    f,
                    "redis at {url}{}",
                    if local.is_some() { " (local)" } else { "" }
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_for_proxies() {
        let a: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(
            socket_addr("redis://u:p@127.0.0.1:6379/2").unwrap().port(),
            6379
        );
        assert_eq!(socket_addr("http://127.0.0.1:2379").unwrap().port(), 2379);
        assert_eq!(socket_addr("https://127.0.0.1:6443").unwrap().port(), 6443);
        assert!(socket_addr("redis://").is_err());
        assert_eq!(
            with_address("rediss://u:p@127.0.0.1:6379/2", a),
            "rediss://u:p@127.0.0.1:4000/2"
        );
        assert_eq!(
            with_address("redis://127.0.0.1:6379", a),
            "redis://127.0.0.1:4000"
        );
    }
}
