//! A throwaway Redis primary, one replica and three Sentinels on loopback (free ports, temporary
//! dirs): the production topology of the Redis lock, with ways to kill a node and wait for a
//! failover. [`SentinelTopology::builder`] starts it with ACL users on every node and Sentinel,
//! with TLS everywhere, or both.
//!
//! To make a promoted replica lack writes, as an asynchronous replica that lagged would, delete
//! them on the replica after the primary is gone and before the promotion (with
//! `replica-read-only no`): holding back its replication stream does not work here, since
//! Sentinel re-points a replica that replicates through a proxy straight at the primary, and a
//! frozen replica still receives into its socket and reads the stream when it thaws.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::process::{free_port, require_binary, tail, ServerProcess};
use crate::redis::{tls_only, RedisOptions, RedisServer, RedisTls};

const INSTALL_HINT: &str = "install with `apt-get install redis-server` (it has Sentinel mode)";

/// The name the Sentinels monitor the primary under.
pub const MASTER: &str = "gateway-leader";

/// How long the Sentinels wait before they call the primary down (`down-after-milliseconds`).
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// An ACL user of a topology started with [`SentinelOptions::acl`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    /// The ACL user name.
    pub name: &'static str,
    /// Its password.
    pub password: &'static str,
}

/// The client's user on the data nodes of an ACL topology (all keys, channels and commands).
pub const DATA_USER: User = User {
    name: "gateway-leader",
    password: "data-secret",
};

/// The client's user on the Sentinels of an ACL topology: another name and password than on
/// the data nodes, so that credentials given to the wrong side fail.
pub const SENTINEL_USER: User = User {
    name: "gateway-leader-sentinel",
    password: "sentinel-secret",
};

/// The Sentinels' user on the data nodes (`sentinel auth-user`).
const MONITOR_USER: User = User {
    name: "sentinel-monitor",
    password: "monitor-secret",
};

/// The replica's user on the primary (`masteruser`).
const REPLICA_USER: User = User {
    name: "replica",
    password: "replica-secret",
};

/// The Sentinels' user on each other (`sentinel sentinel-user`).
const PEER_USER: User = User {
    name: "sentinel-peer",
    password: "peer-secret",
};

/// One Sentinel process.
pub struct Sentinel {
    process: ServerProcess,
    port: u16,
}

/// How to start a [`SentinelTopology`]; `SentinelTopology::builder()` gives a plain one (no
/// TLS, no passwords), as [`SentinelTopology::start`] does.
#[derive(Debug, Clone, Default)]
pub struct SentinelOptions {
    acl: bool,
    tls: Option<RedisTls>,
}

impl SentinelOptions {
    /// Nothing answers without a password: the `default` user is off on every data node and
    /// every Sentinel. Clients log in as [`DATA_USER`] on the data nodes and as
    /// [`SENTINEL_USER`] on the Sentinels; the replica, the Sentinels (on the data nodes and on
    /// each other) have users of their own (`masteruser`, `sentinel auth-user`,
    /// `sentinel sentinel-user`).
    pub fn acl(mut self) -> Self {
        self.acl = true;
        self
    }

    /// Every node and every Sentinel serves TLS only, with this certificate, and they talk to
    /// each other over TLS too (`tls-replication yes`).
    pub fn tls(mut self, tls: RedisTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Starts the primary, the replica (synced), and three Sentinels that agree on the primary
    /// and know the replica and each other.
    pub async fn start(self) -> Result<SentinelTopology> {
        SentinelTopology::start_with(self).await
    }

    /// A data node with these options: TLS, and the ACL users every node has.
    fn data_node(&self) -> RedisOptions {
        let mut o = RedisServer::builder();
        if let Some(tls) = &self.tls {
            o = o.tls(tls.clone()).arg("--tls-replication").arg("yes");
        }
        if self.acl {
            for u in [DATA_USER, MONITOR_USER, REPLICA_USER] {
                o = o.acl_user(u.name, u.password);
            }
            o = o.arg("--user").arg("default").arg("off");
        }
        o
    }

    /// The ACL lines of a Sentinel's config (after its `sentinel monitor` line).
    fn sentinel_acl(&self) -> String {
        if !self.acl {
            return String::new();
        }
        let mut conf = String::from("user default off\n");
        for u in [SENTINEL_USER, PEER_USER] {
            conf.push_str(&format!(
                "user {} on >{} allchannels +@all\n",
                u.name, u.password
            ));
        }
        conf.push_str(&format!(
            "sentinel sentinel-user {}\nsentinel sentinel-pass {}\n\
             sentinel auth-user {MASTER} {}\nsentinel auth-pass {MASTER} {}\n",
            PEER_USER.name, PEER_USER.password, MONITOR_USER.name, MONITOR_USER.password
        ));
        conf
    }

    /// How the topology's own probes reach the data nodes and the Sentinels.
    fn probes(&self) -> Result<(Probe, Probe)> {
        let tls = self
            .tls
            .as_ref()
            .map(|t| client_config(&t.ca_pem))
            .transpose()?;
        let as_user = |user: User| Probe {
            tls: tls.clone(),
            user: self.acl.then_some(user),
        };
        Ok((as_user(DATA_USER), as_user(SENTINEL_USER)))
    }
}

/// A primary, a replica of it and three Sentinels (quorum 2); all killed on drop.
pub struct SentinelTopology {
    nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
    tls: bool,
    /// How the topology's own probes reach the data nodes.
    data_probe: Probe,
    /// How they reach the Sentinels.
    sentinel_probe: Probe,
}

impl SentinelTopology {
    /// Options (ACL users, TLS) before starting a topology.
    pub fn builder() -> SentinelOptions {
        SentinelOptions::default()
    }

    /// Starts a plain topology (no TLS, no passwords): the primary, the replica (synced), and
    /// three Sentinels that agree on the primary and know the replica and each other.
    pub async fn start() -> Result<Self> {
        Self::start_with(SentinelOptions::default()).await
    }

    async fn start_with(options: SentinelOptions) -> Result<Self> {
        let binary = require_binary("redis-server", &["/usr/bin", "/usr/sbin"], INSTALL_HINT)?;
        let (data_probe, sentinel_probe) = options.probes()?;
        let primary = options
            .data_node()
            .start()
            .await
            .context("starting the primary")?;
        let mut replica = options
            .data_node()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(primary.port().to_string());
        if options.acl {
            replica = replica
                .arg("--masteruser")
                .arg(REPLICA_USER.name)
                .arg("--masterauth")
                .arg(REPLICA_USER.password);
        }
        let replica = replica.start().await.context("starting the replica")?;
        let topology_nodes = vec![primary, replica];
        wait_for(Duration::from_secs(30), "the replica to sync", || {
            info(&data_probe, topology_nodes[1].port(), "replication")
                .is_some_and(|i| i.contains("master_link_status:up"))
        })
        .await
        .map_err(|e| anyhow!("{e}; replica log:\n{}", tail(&topology_nodes[1].log(), 20)))?;
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let dir = ServerProcess::temp_dir(&format!("sentinel-{i}"))?;
            let port = free_port()?;
            let conf = dir.path().join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER} {down}\n\
                     sentinel failover-timeout {MASTER} 10000\n\
                     sentinel parallel-syncs {MASTER} 1\n{acl}",
                    dir = dir.path().display(),
                    primary = topology_nodes[0].port(),
                    down = DOWN_AFTER.as_millis(),
                    acl = options.sentinel_acl(),
                ),
            )
            .context("writing sentinel.conf")?;
            let mut cmd = Command::new(&binary);
            cmd.arg(&conf).arg("--sentinel");
            if let Some(tls) = &options.tls {
                // The same directives as a data node's: TLS only, to clients and to the nodes
                // and the other Sentinels alike.
                tls.write(dir.path())?;
                tls_only(&mut cmd, dir.path(), port);
                cmd.args(["--tls-replication", "yes"]);
            }
            let process = ServerProcess::spawn(&format!("sentinel-{i}"), cmd, dir)?;
            sentinels.push(Sentinel { process, port });
        }
        let topology = SentinelTopology {
            nodes: topology_nodes,
            sentinels,
            tls: options.tls.is_some(),
            data_probe,
            sentinel_probe,
        };
        // Every Sentinel must know the replica (to promote it) and the two other Sentinels (to
        // reach the quorum), which they learn from the primary and its hello channel.
        for s in &topology.sentinels {
            let port = s.port;
            wait_for(
                Duration::from_secs(60),
                "the Sentinels to know each other",
                || {
                    let probe = &topology.sentinel_probe;
                    command(probe, port, &["SENTINEL", "MASTER", MASTER]).is_some_and(|r| {
                        field(&r, "num-slaves").is_some_and(|n| n >= 1)
                            && field(&r, "num-other-sentinels").is_some_and(|n| n >= 2)
                    })
                },
            )
            .await
            .map_err(|e| anyhow!("{e}; sentinel log:\n{}", tail(&s.process.log(), 20)))?;
        }
        Ok(topology)
    }

    /// The Sentinels' addresses as URLs, `redis://127.0.0.1:<port>` (`rediss://` with TLS).
    pub fn sentinel_urls(&self) -> Vec<String> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        self.sentinels
            .iter()
            .map(|s| format!("{scheme}://127.0.0.1:{}", s.port))
            .collect()
    }

    /// The data node started as the primary (index 0) or as the replica (index 1).
    ///
    /// # Panics
    /// When `i` is not 0 or 1.
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The port of the primary the Sentinels name now (the first Sentinel that answers).
    pub async fn primary_port(&self) -> Option<u16> {
        let ports: Vec<u16> = self.sentinels.iter().map(|s| s.port).collect();
        let probe = self.sentinel_probe.clone();
        tokio::task::spawn_blocking(move || {
            ports.into_iter().find_map(|p| {
                let r = command(&probe, p, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER])?;
                r.lines()
                    .filter(|l| !l.starts_with(['*', '$']))
                    .nth(1)?
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .await
        .ok()
        .flatten()
    }

    /// Waits until the Sentinels name a primary on another port than `old` and that node says it
    /// is a master; returns its port.
    pub async fn wait_failover(&self, old: u16, limit: Duration) -> Result<u16> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(p) = self.primary_port().await.filter(|p| *p != old) {
                let probe = self.data_probe.clone();
                let role = tokio::task::spawn_blocking(move || info(&probe, p, "replication"))
                    .await
                    .ok()
                    .flatten();
                if role.is_some_and(|r| r.contains("role:master")) {
                    return Ok(p);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "no failover away from port {old} within {limit:?}; sentinel log:\n{}",
                    tail(&self.sentinels[0].process.log(), 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// How a probe reaches a node: over TLS (trusting the topology's CA) or not, and logged in as
/// `user` or not.
#[derive(Clone)]
struct Probe {
    tls: Option<Arc<rustls::ClientConfig>>,
    user: Option<User>,
}

/// A TLS client config that trusts the CA in `ca_pem`, on the ring provider (rustls cannot
/// pick one by itself when several are compiled in).
fn client_config(ca_pem: &str) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.context("reading the CA certificate")?)
            .context("trusting the CA certificate")?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Polls a blocking `probe` until it holds or `limit` passes.
async fn wait_for(limit: Duration, what: &str, probe: impl Fn() -> bool) -> Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if tokio::task::block_in_place(&probe) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("waited {limit:?} for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `INFO <section>` of the server on `port`.
fn info(probe: &Probe, port: u16, section: &str) -> Option<String> {
    command(probe, port, &["INFO", section])
}

/// The integer after line `name` in a flat RESP array of names and values.
fn field(reply: &str, name: &str) -> Option<i64> {
    let lines: Vec<&str> = reply
        .lines()
        .filter(|l| !l.starts_with(['*', '$']))
        .collect();
    let i = lines.iter().position(|l| *l == name)?;
    lines.get(i + 1)?.trim().parse().ok()
}

/// Sends one command (RESP array) to 127.0.0.1:`port` and returns the raw reply; logs in
/// first (`AUTH`, pipelined) when the probe has a user, and speaks TLS when it has a config.
fn command(probe: &Probe, port: u16, args: &[&str]) -> Option<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let mut req = String::new();
    if let Some(u) = &probe.user {
        req.push_str(&resp(&["AUTH", u.name, u.password]));
    }
    req.push_str(&resp(args));
    let text = match &probe.tls {
        None => exchange(tcp, &req)?,
        Some(config) => {
            let name = rustls::pki_types::ServerName::from(addr.ip());
            let tls = rustls::ClientConnection::new(config.clone(), name).ok()?;
            exchange(rustls::StreamOwned::new(tls, tcp), &req)?
        }
    };
    let reply = match probe.user {
        // A refused login answers `-WRONGPASS…`: no reply to the command then.
        Some(_) => text.strip_prefix("+OK\r\n").map(str::to_string),
        None => Some(text),
    };
    reply.filter(|t| !t.is_empty())
}

/// `args` as a RESP array.
fn resp(args: &[&str]) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    req
}

/// Writes `req` and reads until the server pauses: replies here are small and come in one
/// piece or two.
fn exchange(mut s: impl Read + Write, req: &str) -> Option<String> {
    s.write_all(req.as_bytes()).ok()?;
    s.flush().ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sentinel_topology_fails_over_to_the_replica() {
        let mut t = SentinelTopology::start()
            .await
            .expect("the topology starts");
        let old = t.node(0).port();
        assert_eq!(t.primary_port().await, Some(old));
        t.node(0).kill();
        let new = t
            .wait_failover(old, Duration::from_secs(60))
            .await
            .expect("the replica is promoted");
        assert_eq!(new, t.node(1).port());
    }
}
