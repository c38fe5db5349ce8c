//! Throwaway single-member etcd server for tests: loopback, free ports, temporary data dir.
//!
//! Used by the etcd backend's tests and as the storage of the test kube-apiserver.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::process::{free_port, wait_until, ServerProcess};

/// How long a fresh or restarted etcd may take to answer `/health` on a busy machine.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// Serving TLS for the client URL; files are made by the test (e.g. with rcgen).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// The server certificate (PEM), with a SAN for 127.0.0.1.
    pub cert_file: PathBuf,
    /// The server certificate's private key (PEM).
    pub key_file: PathBuf,
    /// When set, clients must present a certificate signed by this CA (`--client-cert-auth`).
    pub client_ca_file: Option<PathBuf>,
}

/// How to start the server.
#[derive(Debug, Clone, Default)]
pub struct EtcdOptions {
    /// Serve the client URL over TLS instead of plain http.
    pub tls: Option<EtcdTls>,
    /// Extra command-line flags, appended last.
    pub extra_args: Vec<String>,
}

/// A running single-member etcd; killed (and its data dir removed) on drop.
pub struct EtcdServer {
    process: ServerProcess,
    binary: PathBuf,
    options: EtcdOptions,
    client_port: u16,
    peer_port: u16,
    metrics_port: u16,
}

impl EtcdServer {
    /// Starts a plain-http etcd on free loopback ports and waits until it is healthy.
    pub async fn start() -> Result<Self> {
        Self::start_with(EtcdOptions::default()).await
    }

    /// Starts an etcd with `options` and waits until it is healthy.
    ///
    /// Ports are picked free and released before etcd binds them, so another process may win a
    /// race for one; that shows as an early exit, and the start is retried on new ports.
    pub async fn start_with(options: EtcdOptions) -> Result<Self> {
        let binary = crate::built::etcd()?;
        let mut last_err = None;
        for _ in 0..3 {
            let dir = ServerProcess::temp_dir("etcd")?;
            let (client_port, peer_port, metrics_port) = (free_port()?, free_port()?, free_port()?);
            let data_dir = dir.path().join("data");
            let cmd = command(
                &binary,
                &options,
                &data_dir,
                &Ports {
                    client: client_port,
                    peer: peer_port,
                    metrics: metrics_port,
                },
                &Membership::single(peer_port),
            );
            let process = ServerProcess::spawn("etcd", cmd, dir)?;
            let mut server = EtcdServer {
                process,
                binary: binary.clone(),
                options: options.clone(),
                client_port,
                peer_port,
                metrics_port,
            };
            match server.wait_ready().await {
                Ok(()) => return Ok(server),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("etcd did not start")))
    }

    /// The client URL, `http://127.0.0.1:<port>` (or `https://` with TLS).
    pub fn endpoint(&self) -> String {
        let scheme = if self.options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The client port.
    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The peer port.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// The server's temporary dir (its data dir is `data/` inside; the log is `etcd.log`).
    pub fn dir(&self) -> &Path {
        self.process.dir()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The underlying process (pause/resume, pid).
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// Kills the server (SIGKILL); the data dir stays for [`restart`](Self::restart).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Kills the server if running and starts it again on the same ports and data dir.
    pub async fn restart(&mut self) -> Result<()> {
        let data_dir = self.process.dir().join("data");
        let cmd = command(
            &self.binary,
            &self.options,
            &data_dir,
            &Ports {
                client: self.client_port,
                peer: self.peer_port,
                metrics: self.metrics_port,
            },
            &Membership::single(self.peer_port),
        );
        self.process.restart(cmd)?;
        self.wait_ready().await
    }

    /// Waits until `/health` on the plain-http metrics URL says healthy (a leader is elected and
    /// a read goes through); fails early with the log when etcd exits.
    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + READY_LIMIT;
        let port = self.metrics_port;
        loop {
            self.process.ensure_running()?;
            let healthy = tokio::task::spawn_blocking(move || health(port))
                .await
                .unwrap_or(false);
            if healthy {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "etcd on 127.0.0.1:{} was not healthy within {READY_LIMIT:?}; log tail:\n{}",
                    self.client_port,
                    crate::process::tail(&self.log(), 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the server answers `/health` healthy (e.g. after an external pause/resume).
    pub async fn wait_healthy(&self, limit: Duration) -> Result<()> {
        let port = self.metrics_port;
        wait_until(limit, "etcd health", move || async move {
            tokio::task::spawn_blocking(move || health(port))
                .await
                .unwrap_or(false)
        })
        .await
    }
}

/// One member's loopback ports.
pub(crate) struct Ports {
    pub(crate) client: u16,
    pub(crate) peer: u16,
    pub(crate) metrics: u16,
}

/// Who a member is in its cluster: its name and every member's peer URL.
pub(crate) struct Membership {
    pub(crate) name: String,
    /// `name=peer-url,...` for every member, this one included.
    pub(crate) initial_cluster: String,
}

impl Membership {
    /// The one member of a single-member cluster.
    fn single(peer_port: u16) -> Self {
        Membership {
            name: "default".to_string(),
            initial_cluster: format!("default=http://127.0.0.1:{peer_port}"),
        }
    }
}

pub(crate) fn command(
    binary: &Path,
    options: &EtcdOptions,
    data_dir: &Path,
    ports: &Ports,
    membership: &Membership,
) -> Command {
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let client = format!("{scheme}://127.0.0.1:{}", ports.client);
    let peer = format!("http://127.0.0.1:{}", ports.peer);
    let mut cmd = Command::new(binary);
    cmd.arg("--name")
        .arg(&membership.name)
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--listen-client-urls")
        .arg(&client)
        .arg("--advertise-client-urls")
        .arg(&client)
        .arg("--listen-peer-urls")
        .arg(&peer)
        .arg("--initial-advertise-peer-urls")
        .arg(&peer)
        .arg("--initial-cluster")
        .arg(&membership.initial_cluster)
        // A plain-http health endpoint, so readiness needs no TLS client even when clients must
        // present certificates.
        .arg("--listen-metrics-urls")
        .arg(format!("http://127.0.0.1:{}", ports.metrics))
        .arg("--logger")
        .arg("zap")
        .arg("--log-outputs")
        .arg("stderr");
    if let Some(tls) = &options.tls {
        cmd.arg("--cert-file")
            .arg(&tls.cert_file)
            .arg("--key-file")
            .arg(&tls.key_file);
        if let Some(ca) = &tls.client_ca_file {
            cmd.arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(ca);
        }
    }
    cmd.args(&options.extra_args);
    cmd
}

/// One blocking `GET /health`; true when etcd reports `"health":"true"`.
pub(crate) fn health(port: u16) -> bool {
    get(port, "/health").is_some_and(|body| body.contains("\"health\":\"true\""))
}

/// One blocking plain-http GET of `path` on the metrics port; the body, or `None`.
pub(crate) fn get(port: u16, path: &str) -> Option<String> {
    crate::metrics::get(std::net::SocketAddr::from(([127, 0, 0, 1], port)), path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn starts_and_restarts_on_the_same_ports() {
        let mut etcd = EtcdServer::start().await.expect("etcd starts");
        let endpoint = etcd.endpoint();
        assert!(endpoint.starts_with("http://127.0.0.1:"));
        etcd.kill();
        assert!(!health(etcd.metrics_port));
        etcd.restart().await.expect("etcd restarts");
        assert_eq!(etcd.endpoint(), endpoint);
        assert!(etcd.dir().join("data").is_dir());
    }
}
