//! A throwaway 3-member etcd cluster on loopback: free ports, one temporary data dir per member,
//! and a [`BlackholeProxy`] in front of every member's client URL.
//!
//! Clients are given the proxies' URLs ([`EtcdCluster::endpoints`]), so a test can kill, freeze
//! (SIGSTOP), restart or cut off (the proxy black-holes the client's traffic) one member at a
//! time, and ask which member is the Raft leader. The members talk to each other directly, so a
//! cut member still belongs to the quorum; only the client loses it, as behind a dropped route.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use tempfile::TempDir;

use crate::etcd::{command, get, health, EtcdOptions, Membership, Ports};
use crate::process::{free_port, tail, ServerProcess};
use crate::proxy::BlackholeProxy;

/// How long the members may take to elect a leader and answer `/health` on a busy machine.
const READY_LIMIT: Duration = Duration::from_secs(90);

/// One member: its process, ports, and the proxy clients reach it through.
pub struct EtcdMember {
    name: String,
    process: ServerProcess,
    binary: PathBuf,
    ports: Ports,
    initial_cluster: String,
    proxy: BlackholeProxy,
}

/// A running 3-member etcd cluster; every member is killed (and its data dir removed) on drop.
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
}

impl EtcdCluster {
    /// Starts three members on free loopback ports and waits until every one is healthy (a
    /// leader is elected and each member answers a read).
    ///
    /// Ports are picked free and released before etcd binds them; a start that loses a race for
    /// one is retried on new ports.
    pub async fn start() -> Result<Self> {
        let binary = crate::built::etcd()?;
        let mut last_err = None;
        for _ in 0..3 {
            match Self::try_start(&binary).await {
                Ok(c) => return Ok(c),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow!("the etcd cluster did not start")))
    }

    async fn try_start(binary: &std::path::Path) -> Result<Self> {
        let names = ["m0", "m1", "m2"];
        let mut ports = Vec::new();
        for _ in names {
            ports.push(Ports {
                client: free_port()?,
                peer: free_port()?,
                metrics: free_port()?,
            });
        }
        let initial_cluster = names
            .iter()
            .zip(&ports)
            .map(|(n, p)| format!("{n}=http://127.0.0.1:{}", p.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::new();
        for (name, ports) in names.iter().zip(ports) {
            let dir: TempDir = ServerProcess::temp_dir(&format!("etcd-{name}"))?;
            let membership = Membership {
                name: name.to_string(),
                initial_cluster: initial_cluster.clone(),
            };
            let cmd = command(
                binary,
                &EtcdOptions::default(),
                &dir.path().join("data"),
                &ports,
                &membership,
            );
            let process = ServerProcess::spawn(&format!("etcd-{name}"), cmd, dir)?;
            let proxy = BlackholeProxy::start(SocketAddr::from(([127, 0, 0, 1], ports.client)))
                .await
                .context("starting a member's proxy")?;
            members.push(EtcdMember {
                name: name.to_string(),
                process,
                binary: binary.to_path_buf(),
                ports,
                initial_cluster: initial_cluster.clone(),
                proxy,
            });
        }
        let mut cluster = EtcdCluster { members };
        for i in 0..cluster.members.len() {
            cluster.members[i].wait_ready(READY_LIMIT).await?;
        }
        Ok(cluster)
    }

    /// The client URLs, one per member, through each member's proxy (`http://127.0.0.1:<port>`).
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdMember::endpoint).collect()
    }

    /// The members, in the order of [`endpoints`](Self::endpoints).
    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    /// Member `i` (0, 1 or 2).
    ///
    /// # Panics
    /// When `i` is not a member's index.
    pub fn member(&mut self, i: usize) -> &mut EtcdMember {
        &mut self.members[i]
    }

    /// The index of the member that is the Raft leader now, from the members' own metrics
    /// (`etcd_server_is_leader`); `None` while no running member says it leads.
    pub async fn leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if m.is_leader().await {
                return Some(i);
            }
        }
        None
    }

    /// Waits until a member other than `old` leads; returns its index.
    ///
    /// # Errors
    /// When none does within `limit`.
    pub async fn wait_new_leader(&self, old: usize, limit: Duration) -> Result<usize> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(l) = self.leader().await.filter(|l| *l != old) {
                return Ok(l);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("no member other than m{old} led within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until some member leads and every running member reports healthy.
    pub async fn wait_healthy(&self, limit: Duration) -> Result<usize> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(l) = self.leader().await {
                let mut all = true;
                for m in &self.members {
                    all &= m.healthy().await;
                }
                if all {
                    return Ok(l);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("the etcd cluster was not healthy within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl EtcdMember {
    /// The member's name in the cluster (`m0`, `m1`, `m2`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client URL through this member's proxy.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.proxy.addr())
    }

    /// The member's own client URL, bypassing the proxy.
    pub fn direct_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.client)
    }

    /// The proxy in front of the client URL: [`cut`](BlackholeProxy::cut) black-holes the
    /// clients' traffic to this member while it stays in the quorum.
    pub fn proxy(&self) -> &BlackholeProxy {
        &self.proxy
    }

    /// The member's process (pause/resume, pid).
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// The member's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Kills the member (SIGKILL); its data dir stays for [`restart`](Self::restart).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Freezes the member (SIGSTOP): its connections stay open and nothing answers.
    ///
    /// # Errors
    /// When the member is not running.
    pub fn pause(&self) -> Result<()> {
        self.process.pause()
    }

    /// Thaws a frozen member (SIGCONT).
    ///
    /// # Errors
    /// When the member is not running.
    pub fn resume(&self) -> Result<()> {
        self.process.resume()
    }

    /// Starts the member again (killing it first if it runs) on its ports and data dir, and
    /// waits until it is healthy, i.e. has rejoined the quorum.
    ///
    /// # Errors
    /// When it does not start or is not healthy within 90 s; the error carries its log's tail.
    pub async fn restart(&mut self) -> Result<()> {
        let membership = Membership {
            name: self.name.clone(),
            initial_cluster: self.initial_cluster.clone(),
        };
        let cmd = command(
            &self.binary,
            &EtcdOptions::default(),
            &self.process.dir().join("data"),
            &self.ports,
            &membership,
        );
        self.process.restart(cmd)?;
        self.wait_ready(READY_LIMIT).await
    }

    /// Whether the member says it is the Raft leader.
    pub async fn is_leader(&self) -> bool {
        let port = self.ports.metrics;
        tokio::task::spawn_blocking(move || {
            get(port, "/metrics").is_some_and(|m| m.lines().any(|l| l == "etcd_server_is_leader 1"))
        })
        .await
        .unwrap_or(false)
    }

    /// Whether the member answers `/health` healthy (it has a leader and serves a read).
    pub async fn healthy(&self) -> bool {
        let port = self.ports.metrics;
        tokio::task::spawn_blocking(move || health(port))
            .await
            .unwrap_or(false)
    }

    async fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.process.ensure_running()?;
            if self.healthy().await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "etcd member {} was not healthy within {limit:?}; log tail:\n{}",
                    self.name,
                    tail(&self.log(), 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_member_cluster_keeps_its_quorum_through_a_member_restart() {
        let mut cluster = EtcdCluster::start().await.expect("the cluster starts");
        assert_eq!(cluster.endpoints().len(), 3);
        let leader = cluster
            .wait_healthy(Duration::from_secs(60))
            .await
            .expect("a leader");
        cluster.member(leader).kill();
        let next = cluster
            .wait_new_leader(leader, Duration::from_secs(60))
            .await
            .expect("a new leader");
        assert_ne!(next, leader, "a new Raft leader among the other two");
        cluster.member(leader).restart().await.expect("rejoins");
        cluster
            .wait_healthy(Duration::from_secs(60))
            .await
            .expect("all three healthy again");
    }
}
