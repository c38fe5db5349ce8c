//! Throwaway `redis-server` processes: loopback, free port, no persistence, optional TLS and auth.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::process::{free_port, require_binary, tail, ServerProcess};

const INSTALL_HINT: &str = "install with `apt-get install redis-server`";

/// PEM material for a TLS-only server (certificate, its key, and the CA that signed it).
#[derive(Debug, Clone)]
pub struct RedisTls {
    /// The server certificate (PEM); its SAN must cover 127.0.0.1.
    pub cert_pem: String,
    /// The server's private key (PEM).
    pub key_pem: String,
    /// The CA certificate (PEM) that signed `cert_pem`.
    pub ca_pem: String,
}

impl RedisTls {
    /// A fresh CA and a leaf certificate for 127.0.0.1 (IP SAN) signed by it: what every
    /// throwaway TLS server here serves, so that a client verifies it with the CA alone.
    ///
    /// # Errors
    /// When a key or certificate cannot be generated.
    pub fn generate() -> Result<RedisTls> {
        let ca_key = KeyPair::generate().context("generating the CA key")?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "gateway-leader test CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        // rustls refuses a CA certificate as the server's own: the serving cert is a plain leaf.
        let leaf_key = KeyPair::generate().context("generating the server key")?;
        let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        leaf.is_ca = IsCa::NoCa;
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;
        Ok(RedisTls {
            cert_pem: leaf_cert.pem(),
            key_pem: leaf_key.serialize_pem(),
            ca_pem: ca_cert.pem(),
        })
    }

    /// Writes the server certificate, its key and the CA into `dir` as `server.crt`,
    /// `server.key` and `ca.crt`, the files a server's TLS directives name.
    pub(crate) fn write(&self, dir: &std::path::Path) -> Result<()> {
        for (file, pem) in [
            ("server.crt", &self.cert_pem),
            ("server.key", &self.key_pem),
            ("ca.crt", &self.ca_pem),
        ] {
            std::fs::write(dir.join(file), pem).with_context(|| format!("writing {file}"))?;
        }
        Ok(())
    }
}

/// How to start a [`RedisServer`]; `RedisServer::builder()` gives the defaults (plain, no auth).
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    requirepass: Option<String>,
    users: Vec<(String, String)>,
    tls: Option<RedisTls>,
    extra: Vec<String>,
}

impl RedisOptions {
    /// Requires this password for the `default` user (`--requirepass`).
    pub fn requirepass(mut self, password: impl Into<String>) -> Self {
        self.requirepass = Some(password.into());
        self
    }

    /// Adds an ACL user with all keys, channels and commands (`--user NAME on >PASSWORD ...`).
    pub fn acl_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.users.push((name.into(), password.into()));
        self
    }

    /// Serves TLS only (`--port 0 --tls-port P`), clients not asked for certificates.
    pub fn tls(mut self, tls: RedisTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Passes one more `--directive value...` argument list as is (e.g. `notify-keyspace-events`).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra.push(arg.into());
        self
    }

    /// Starts the server and waits until it accepts connections.
    pub async fn start(self) -> Result<RedisServer> {
        RedisServer::start_with(self).await
    }
}

/// A `redis-server` on 127.0.0.1 with `--save "" --appendonly no` in a temporary dir.
pub struct RedisServer {
    process: ServerProcess,
    port: u16,
    options: RedisOptions,
    binary: PathBuf,
    /// How many "ready" lines the log held when the current process was started.
    ready_lines: usize,
}

fn ready_count(log: &str) -> usize {
    log.matches("Ready to accept connections").count()
}

impl RedisServer {
    /// Options for a server (TLS, passwords) before starting it.
    pub fn builder() -> RedisOptions {
        RedisOptions::default()
    }

    /// A plain server without authentication.
    pub async fn start() -> Result<RedisServer> {
        RedisOptions::default().start().await
    }

    async fn start_with(options: RedisOptions) -> Result<RedisServer> {
        let binary = require_binary("redis-server", &["/usr/bin", "/usr/sbin"], INSTALL_HINT)?;
        let dir = ServerProcess::temp_dir("redis")?;
        if let Some(tls) = &options.tls {
            tls.write(dir.path())?;
        }
        let port = free_port()?;
        let cmd = Self::command(&binary, dir.path(), port, &options);
        let process = ServerProcess::spawn("redis", cmd, dir)?;
        let mut server = RedisServer {
            process,
            port,
            options,
            binary,
            ready_lines: 0,
        };
        server.wait_ready().await?;
        Ok(server)
    }

    fn command(
        binary: &PathBuf,
        dir: &std::path::Path,
        port: u16,
        options: &RedisOptions,
    ) -> Command {
        let mut cmd = Command::new(binary);
        cmd.arg("--bind").arg("127.0.0.1");
        match &options.tls {
            Some(_) => tls_only(&mut cmd, dir, port),
            None => {
                cmd.args(["--port", &port.to_string()]);
            }
        }
        cmd.args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir);
        if let Some(p) = &options.requirepass {
            cmd.args(["--requirepass", p]);
        }
        for (name, password) in &options.users {
            cmd.args([
                "--user",
                name,
                "on",
                &format!(">{password}"),
                "~*",
                "&*",
                "+@all",
            ]);
        }
        cmd.args(&options.extra);
        cmd
    }

    /// Waits for the current process's "Ready to accept connections" line, then for a TCP
    /// connection (and a PING answer when the server is plain).
    async fn wait_ready(&mut self) -> Result<()> {
        let port = self.port;
        let plain = self.options.tls.is_none();
        let before = self.ready_lines;
        let limit = Duration::from_secs(30);
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.process.ensure_running()?;
            if ready_count(&self.process.log()) > before && probe(port, plain).await {
                self.ready_lines = ready_count(&self.process.log());
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "redis-server on port {port} was not ready within {limit:?}; log tail:\n{}",
                    tail(&self.process.log(), 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// `redis://127.0.0.1:PORT` or `rediss://127.0.0.1:PORT` (no credentials in it).
    pub fn url(&self) -> String {
        let scheme = if self.options.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The port it listens on (the TLS port for a TLS server).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's temporary dir (its log and TLS files live there).
    pub fn dir(&self) -> PathBuf {
        self.process.dir().to_path_buf()
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Kills the server (SIGKILL): every key is lost, nothing is persisted.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts a fresh, empty server on the same port with the same options and waits for it.
    pub async fn restart(&mut self) -> Result<()> {
        self.ready_lines = ready_count(&self.process.log());
        let cmd = Self::command(&self.binary, self.process.dir(), self.port, &self.options);
        self.process.restart(cmd)?;
        self.wait_ready().await
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered.
    pub fn pause(&self) -> Result<()> {
        self.process.pause()
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) -> Result<()> {
        self.process.resume()
    }
}

/// Serves TLS only on `port` (`--port 0`), with the files [`RedisTls::write`] put in `dir`;
/// clients are not asked for certificates. A Sentinel takes the same directives.
pub(crate) fn tls_only(cmd: &mut Command, dir: &std::path::Path, port: u16) {
    cmd.args(["--port", "0", "--tls-port", &port.to_string()])
        .arg("--tls-cert-file")
        .arg(dir.join("server.crt"))
        .arg("--tls-key-file")
        .arg(dir.join("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(dir.join("ca.crt"))
        .args(["--tls-auth-clients", "no"]);
}

/// Connects to the port; on a plain server also checks that it answers PING (or asks for auth).
async fn probe(port: u16, plain: bool) -> bool {
    tokio::task::spawn_blocking(move || {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            return false;
        };
        if !plain {
            return true;
        }
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(n) if n > 0 => {
                let reply = String::from_utf8_lossy(&buf[..n]);
                reply.starts_with("+PONG") || reply.starts_with("-NOAUTH")
            }
            _ => false,
        }
    })
    .await
    .unwrap_or(false)
}
