//! A throwaway Redis primary, one replica and three Sentinels on loopback (free ports, temporary
//! dirs): the production topology of the Redis lock, with ways to kill a node and wait for a
//! failover.
//!
//! To make a promoted replica lack writes, as an asynchronous replica that lagged would, delete
//! them on the replica after the primary is gone and before the promotion (with
//! `replica-read-only no`): holding back its replication stream does not work here, since
//! Sentinel re-points a replica that replicates through a proxy straight at the primary, and a
//! frozen replica still receives into its socket and reads the stream when it thaws.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::process::{free_port, require_binary, tail, ServerProcess};
use crate::redis::RedisServer;

const INSTALL_HINT: &str = "install with `apt-get install redis-server` (it has Sentinel mode)";

/// The name the Sentinels monitor the primary under.
pub const MASTER: &str = "gateway-leader";

/// How long the Sentinels wait before they call the primary down (`down-after-milliseconds`).
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// One Sentinel process.
pub struct Sentinel {
    process: ServerProcess,
    port: u16,
}

/// A primary, a replica of it and three Sentinels (quorum 2); all killed on drop.
pub struct SentinelTopology {
    nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

impl SentinelTopology {
    /// Starts the primary, the replica (synced), and three Sentinels that agree on the primary
    /// and know the replica and each other.
    pub async fn start() -> Result<Self> {
        let binary = require_binary("redis-server", &["/usr/bin", "/usr/sbin"], INSTALL_HINT)?;
        let primary = RedisServer::start().await.context("starting the primary")?;
        let replica = RedisServer::builder()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(primary.port().to_string())
            .start()
            .await
            .context("starting the replica")?;
        let topology_nodes = vec![primary, replica];
        wait_for(Duration::from_secs(30), "the replica to sync", || {
            info(topology_nodes[1].port(), "replication")
                .is_some_and(|i| i.contains("master_link_status:up"))
        })
        .await?;
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
                     sentinel parallel-syncs {MASTER} 1\n",
                    dir = dir.path().display(),
                    primary = topology_nodes[0].port(),
                    down = DOWN_AFTER.as_millis(),
                ),
            )
            .context("writing sentinel.conf")?;
            let mut cmd = Command::new(&binary);
            cmd.arg(&conf).arg("--sentinel");
            let process = ServerProcess::spawn(&format!("sentinel-{i}"), cmd, dir)?;
            sentinels.push(Sentinel { process, port });
        }
        let topology = SentinelTopology {
            nodes: topology_nodes,
            sentinels,
        };
        // Every Sentinel must know the replica (to promote it) and the two other Sentinels (to
        // reach the quorum), which they learn from the primary and its hello channel.
        for s in &topology.sentinels {
            let port = s.port;
            wait_for(
                Duration::from_secs(60),
                "the Sentinels to know each other",
                || {
                    command(port, &["SENTINEL", "MASTER", MASTER]).is_some_and(|r| {
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

    /// The Sentinels' addresses as URLs, `redis://127.0.0.1:<port>`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
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
        tokio::task::spawn_blocking(move || {
            ports.into_iter().find_map(|p| {
                let r = command(p, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER])?;
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
                let role = tokio::task::spawn_blocking(move || info(p, "replication"))
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
fn info(port: u16, section: &str) -> Option<String> {
    command(port, &["INFO", section])
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

/// Sends one command (RESP array) to 127.0.0.1:`port` and returns the raw reply.
fn command(port: u16, args: &[&str]) -> Option<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // Read until the server pauses: replies here are small and come in one piece or two.
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    (!text.is_empty()).then_some(text)
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
