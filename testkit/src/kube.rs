//! A throwaway genuine kube-apiserver for tests and `gateway-leader-bench`, with its own etcd, on
//! loopback.
//!
//! The binary comes from `GATEWAY_LEADER_KUBE_APISERVER`, else the cache that
//! `scripts/build-kube-apiserver.sh` fills (the newest pinned release, or the one
//! `GATEWAY_LEADER_KUBE_VERSION` names: [`crate::built::kube_apiserver`]). When
//! `GATEWAY_LEADER_TEST_KUBECONFIG` names a kubeconfig, that existing cluster (kind, k3s, ...) is
//! used instead and nothing is started; restart and pause are then unavailable.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use tokio::sync::OnceCell;

use crate::etcd::EtcdServer;
use crate::process::{free_port, tail, ServerProcess};

mod pki;
pub mod simulated;
use pki::Pki;
pub use simulated::SimulatedNodes;

/// Names an existing cluster's kubeconfig to test against instead of starting an apiserver.
pub const TEST_KUBECONFIG_ENV: &str = "GATEWAY_LEADER_TEST_KUBECONFIG";
pub use crate::built::APISERVER_ENV;
/// The service-account issuer and audience of the test apiserver.
pub const ISSUER: &str = "https://kubernetes.default.svc";

/// A fresh or restarted apiserver is ready in 1–6 s; a busy 2-core machine may need far more.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// Keeps a child from outliving the test binary: a server kept in a static is never dropped, so
/// a tiny shell kills it once our process is gone and then removes `dir` (the temporary dir its
/// `Drop` would have removed; an etcd dir holds over 100 MB). Every local server gets one,
/// whoever holds it: a server that is dropped first has its dir removed by `Drop`, and its
/// watchdog ends with the child.
fn watchdog(child: Option<u32>, dir: &Path) {
    let Some(child) = child else { return };
    let me = std::process::id();
    // The dir goes as an argument ($1), so no path needs quoting inside the script.
    let script = format!(
        "while kill -0 {me} 2>/dev/null && kill -0 {child} 2>/dev/null; do sleep 1; done; \
         kill -0 {me} 2>/dev/null && exit 0; kill -CONT {child} 2>/dev/null; \
         kill -9 {child} 2>/dev/null; sleep 1; rm -rf -- \"$1\""
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("watchdog")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

/// What a local apiserver runs with beyond the defaults, for the tests that need it.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Writes an audit log (level `Metadata` for every request, JSON lines, written before the
    /// response goes out), read with [`KubeApiServer::audit_events`]: what the server itself saw,
    /// such as which credential a request carried or whether a request reached it at all.
    pub audit: bool,
    /// `--feature-gates` entries, such as `WatchList=false` (an apiserver that does not stream
    /// initial lists).
    pub feature_gates: Vec<String>,
    /// The pinned release to run (`newest`, `oldest` or `vX.Y.Z`), from the build scripts' cache
    /// whatever `GATEWAY_LEADER_KUBE_APISERVER` and `GATEWAY_LEADER_KUBE_VERSION` say; `None`
    /// follows them. For servers that must match other components' release, as
    /// [`SimulatedNodes`] does ([`SimulatedNodes::apiserver_options`]).
    pub version: Option<String>,
}

/// The audit policy of [`Options::audit`]: who, what and which credential, never a body.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
";

struct Local {
    etcd: EtcdServer,
    process: ServerProcess,
    binary: PathBuf,
    port: u16,
    pki: Pki,
    options: Options,
}

impl Local {
    fn command(&self) -> Command {
        command(
            &self.binary,
            &self.etcd.endpoint(),
            self.process.dir(),
            self.port,
            &self.pki,
            &self.options,
        )
    }

    fn audit_log(&self) -> PathBuf {
        self.process.dir().join("audit.log")
    }
}

fn command(
    binary: &Path,
    etcd: &str,
    dir: &Path,
    port: u16,
    pki: &Pki,
    options: &Options,
) -> Command {
    let mut cmd = Command::new(binary);
    cmd.arg(format!("--etcd-servers={etcd}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(format!("--cert-dir={}", dir.join("certs").display()))
        .arg(format!("--tls-cert-file={}", pki.cert_file.display()))
        .arg(format!("--tls-private-key-file={}", pki.key_file.display()))
        .arg(format!("--client-ca-file={}", pki.ca_file.display()))
        .arg(format!("--token-auth-file={}", pki.tokens.display()))
        .arg(format!(
            "--service-account-key-file={}",
            pki.sa_pub.display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            pki.sa_key.display()
        ))
        .arg(format!("--service-account-issuer={ISSUER}"))
        .arg(format!("--api-audiences={ISSUER}"))
        .arg("--service-cluster-ip-range=10.96.0.0/16")
        .arg("--endpoint-reconciler-type=none")
        .arg("--authorization-mode=RBAC")
        .arg("--profiling=false")
        .arg("--v=1");
    if !options.feature_gates.is_empty() {
        cmd.arg(format!(
            "--feature-gates={}",
            options.feature_gates.join(",")
        ));
    }
    if options.audit {
        // Blocking: an event is in the file before the response leaves, so a test that has its
        // answer can read the event at once.
        cmd.arg(format!(
            "--audit-policy-file={}",
            dir.join("audit-policy.yaml").display()
        ))
        .arg(format!(
            "--audit-log-path={}",
            dir.join("audit.log").display()
        ))
        .arg("--audit-log-format=json")
        .arg("--audit-log-mode=blocking")
        .arg("--audit-log-maxsize=0");
    }
    cmd
}

enum Mode {
    Local(Box<Local>),
    External,
}

/// A kube-apiserver for tests: started here with its own etcd, or an existing cluster.
pub struct KubeApiServer {
    mode: Mode,
    config: Config,
    kubeconfig: PathBuf,
    gateway_api: OnceCell<()>,
}

static SHARED: OnceCell<KubeApiServer> = OnceCell::const_new();

impl KubeApiServer {
    /// Starts a kube-apiserver with its own etcd (or connects to `GATEWAY_LEADER_TEST_KUBECONFIG`)
    /// and waits until `/readyz` answers ok with the admin token.
    pub async fn start() -> Result<KubeApiServer> {
        Self::start_inner(true, Options::default()).await
    }

    /// Always starts a local kube-apiserver, even when `GATEWAY_LEADER_TEST_KUBECONFIG` names a
    /// cluster: for tests that restart or freeze the apiserver, which no shared cluster allows.
    ///
    /// A test binary may keep it in a `static` (which is never dropped): its temporary dirs are
    /// removed once the test binary has exited, as every local server's are.
    pub async fn start_local() -> Result<KubeApiServer> {
        Self::start_inner(false, Options::default()).await
    }

    /// Always starts a local kube-apiserver, with `options`.
    pub async fn start_local_with(options: Options) -> Result<KubeApiServer> {
        Self::start_inner(false, options).await
    }

    async fn start_inner(allow_external: bool, options: Options) -> Result<KubeApiServer> {
        if let Some(path) = std::env::var_os(TEST_KUBECONFIG_ENV).filter(|p| !p.is_empty()) {
            if allow_external {
                return Self::external(PathBuf::from(path)).await;
            }
        }
        let binary = match &options.version {
            Some(version) => crate::built::kube_apiserver_at(version)?,
            None => crate::built::kube_apiserver()?,
        };
        let mut etcd = Some(
            EtcdServer::start()
                .await
                .context("starting the apiserver's etcd")?,
        );
        let mut last = None;
        // A free port may be taken between picking and binding: retry on a new one.
        for _ in 0..3 {
            let Some(db) = etcd.take() else { break };
            let dir = ServerProcess::temp_dir("kube-apiserver")?;
            let pki = Pki::write(dir.path())?;
            let port = free_port()?;
            let kubeconfig = dir.path().join("kubeconfig");
            write_kubeconfig(&kubeconfig, port, &pki.ca_file, &pki.admin_token)?;
            if options.audit {
                std::fs::write(dir.path().join("audit-policy.yaml"), AUDIT_POLICY)
                    .context("writing the audit policy")?;
            }
            let cmd = command(&binary, &db.endpoint(), dir.path(), port, &pki, &options);
            let process = ServerProcess::spawn("kube-apiserver", cmd, dir)?;
            watchdog(process.pid(), process.dir());
            watchdog(db.process().pid(), db.dir());
            let config = load(&kubeconfig, None).await?;
            let mut server = KubeApiServer {
                mode: Mode::Local(Box::new(Local {
                    etcd: db,
                    process,
                    binary: binary.clone(),
                    port,
                    pki,
                    options: options.clone(),
                })),
                config,
                kubeconfig,
                gateway_api: OnceCell::new(),
            };
            match server.wait_ready().await {
                Ok(()) => return Ok(server),
                Err(e) => {
                    last = Some(e);
                    if let Mode::Local(l) = server.mode {
                        let Local { etcd: db, .. } = *l;
                        etcd = Some(db);
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("kube-apiserver did not start")))
    }

    /// One apiserver shared by every test of this test binary (started on first use).
    ///
    /// Tests that restart or pause the server must [`start`](Self::start) their own.
    pub async fn shared() -> Result<&'static KubeApiServer> {
        SHARED
            .get_or_try_init(|| Self::start_inner(true, Options::default()))
            .await
    }

    /// Uses the existing cluster of the kubeconfig at `path` (its current context, with the
    /// rights of its user), starting nothing; waits until it is ready.
    pub async fn connect(path: &Path) -> Result<KubeApiServer> {
        Self::external(path.to_path_buf()).await
    }

    async fn external(path: PathBuf) -> Result<KubeApiServer> {
        let config = load(&path, None)
            .await
            .with_context(|| format!("{TEST_KUBECONFIG_ENV}={}", path.display()))?;
        let mut server = KubeApiServer {
            mode: Mode::External,
            config,
            kubeconfig: path,
            gateway_api: OnceCell::new(),
        };
        server.wait_ready().await?;
        Ok(server)
    }

    /// True when this is an existing cluster from `GATEWAY_LEADER_TEST_KUBECONFIG`.
    pub fn is_external(&self) -> bool {
        matches!(self.mode, Mode::External)
    }

    /// The apiserver's process id (`None` for an existing cluster).
    pub fn pid(&self) -> Option<u32> {
        match &self.mode {
            Mode::Local(l) => l.process.pid(),
            Mode::External => None,
        }
    }

    /// Where a local apiserver listens (loopback); `None` for an existing cluster.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match &self.mode {
            Mode::Local(l) => Some(std::net::SocketAddr::from(([127, 0, 0, 1], l.port))),
            Mode::External => None,
        }
    }

    /// The apiserver URL.
    pub fn url(&self) -> String {
        self.config.cluster_url.to_string()
    }

    /// A client with cluster-admin rights (`system:masters`).
    pub fn admin_client(&self) -> Client {
        // Built per call: a client's connections belong to the runtime that first uses them.
        Client::try_from(self.config.clone()).unwrap_or_else(|e| {
            panic!(
                "a client for the test apiserver {}: {e}",
                self.config.cluster_url
            )
        })
    }

    /// The admin connection settings (clone and adjust for other users).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A kubeconfig file for subprocesses (admin user, namespace `default`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes a kubeconfig at `path` for the same cluster as
    /// [`kubeconfig_path`](Self::kubeconfig_path) whose user authenticates with the bearer `token`
    /// only, for subprocesses that must run with exactly a service account's rights.
    pub fn write_token_kubeconfig(&self, token: &str, path: &Path) -> Result<()> {
        let mut kc = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        for user in &mut kc.auth_infos {
            user.auth_info = Some(kube::config::AuthInfo {
                token: Some(token.to_string().into()),
                ..kube::config::AuthInfo::default()
            });
        }
        // Kubeconfig serialises the token redacted; write it out in the clear for the child.
        let mut v = serde_json::to_value(&kc).context("encoding the kubeconfig")?;
        if let Some(users) = v.get_mut("users").and_then(|u| u.as_array_mut()) {
            for u in users {
                u["user"] = serde_json::json!({ "token": token });
            }
        }
        std::fs::write(path, serde_json::to_vec_pretty(&v)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// A client that authenticates with a bearer `token` only.
    pub fn client_for_token(&self, token: &str) -> Result<Client> {
        let mut c = self.config.clone();
        c.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..kube::config::AuthInfo::default()
        };
        Client::try_from(c).context("building a client for a token")
    }

    /// Installs the Gateway API CRDs once per server (see [`crate::gateway_api::install`]).
    pub async fn install_gateway_api(&self) -> Result<()> {
        self.gateway_api
            .get_or_try_init(|| async { crate::gateway_api::install(&self.admin_client()).await })
            .await
            .map(|_| ())
    }

    /// Creates namespace `name` (fine if it exists).
    pub async fn create_namespace(&self, name: &str) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.admin_client());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
        }
    }

    /// Creates ServiceAccount `name` in `namespace` and returns a one-hour token for it
    /// (TokenRequest API; no controller-manager runs, so no token Secrets appear).
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> Result<String> {
        self.service_account_token_with(
            namespace,
            name,
            serde_json::json!({ "audiences": [], "expirationSeconds": 3600 }),
        )
        .await
    }

    /// Creates ServiceAccount `name` in `namespace` (fine if it exists) and returns a token
    /// minted for it by the TokenRequest API with `spec` (a `TokenRequestSpec` as JSON): an
    /// expiry, or an object the token is bound to (it is refused once that object is gone), as a
    /// kubelet asks for a pod's.
    pub async fn service_account_token_with(
        &self,
        namespace: &str,
        name: &str,
        spec: serde_json::Value,
    ) -> Result<String> {
        let api: Api<ServiceAccount> = Api::namespaced(self.admin_client(), namespace);
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating {namespace}/{name}")),
        }
        // Through JSON: the TokenRequest's fields are required in the types of some Kubernetes
        // versions k8s-openapi targets and optional in others (1.36), and testkit builds with
        // whichever version the crate under test picks.
        let req: TokenRequest = serde_json::from_value(serde_json::json!({ "spec": spec }))
            .context("a TokenRequest")?;
        let t = api
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .with_context(|| format!("requesting a token for {namespace}/{name}"))?;
        let t = serde_json::to_value(&t).context("the TokenRequest as JSON")?;
        t.pointer("/status/token")
            .and_then(serde_json::Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("the TokenRequest for {namespace}/{name} returned no token"))
    }

    fn local(&mut self) -> Result<&mut Local> {
        match &mut self.mode {
            Mode::Local(l) => Ok(l),
            Mode::External => {
                bail!("not possible against an existing cluster ({TEST_KUBECONFIG_ENV})")
            }
        }
    }

    /// Stops the apiserver (SIGKILL) and starts it again on the same port with the same etcd.
    pub async fn restart(&mut self) -> Result<()> {
        let l = self.local()?;
        let cmd = l.command();
        l.process.restart(cmd)?;
        watchdog(l.process.pid(), l.process.dir());
        self.wait_ready().await
    }

    /// Kills the apiserver (its etcd keeps running); [`restart`](Self::restart) brings it back.
    pub fn kill(&mut self) -> Result<()> {
        self.local()?.process.kill();
        Ok(())
    }

    /// Freezes the apiserver (SIGSTOP): connections stay open but nothing answers.
    pub fn pause(&mut self) -> Result<()> {
        self.local()?.process.pause()
    }

    /// Thaws a paused apiserver (SIGCONT).
    pub fn resume(&mut self) -> Result<()> {
        self.local()?.process.resume()
    }

    /// Every audit event the apiserver has written so far, oldest first (started with
    /// [`Options::audit`]; an error otherwise).
    pub fn audit_events(&self) -> Result<Vec<serde_json::Value>> {
        let Mode::Local(l) = &self.mode else {
            bail!("no audit log of an existing cluster ({TEST_KUBECONFIG_ENV})");
        };
        if !l.options.audit {
            bail!("this apiserver was started without Options::audit");
        }
        let path = l.audit_log();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // Nothing audited yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        // The last line may be half written.
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    /// The apiserver's log so far (empty for an existing cluster).
    pub fn log(&self) -> String {
        match &self.mode {
            Mode::Local(l) => l.process.log(),
            Mode::External => String::new(),
        }
    }

    /// Waits until `/readyz` answers ok with the admin token and the `default` namespace (the
    /// kubeconfig's, which the apiserver's bootstrap controller creates a moment after `/readyz`
    /// turns ok) exists; fails early if the process exits.
    pub async fn wait_ready(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + READY_LIMIT;
        let client = self.admin_client();
        loop {
            if let Mode::Local(l) = &mut self.mode {
                l.process.ensure_running()?;
            }
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .context("building the readiness request")?;
            let last = match tokio::time::timeout(Duration::from_secs(5), client.request_text(req))
                .await
            {
                Ok(Ok(body)) if body.trim() == "ok" => {
                    match Api::<Namespace>::all(client.clone())
                        .get_opt("default")
                        .await
                    {
                        Ok(Some(_)) => return Ok(()),
                        Ok(None) => "ready, but the namespace default is not created yet".into(),
                        Err(e) => format!("ready, but reading the namespace default: {e}"),
                    }
                }
                Ok(Ok(body)) => body,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "no answer within 5 s".into(),
            };
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "kube-apiserver at {} was not ready within {READY_LIMIT:?} (last: {last}); \
                     log tail:\n{}",
                    self.config.cluster_url,
                    tail(&self.log(), 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Writes a kubeconfig (JSON is valid YAML) for the admin token.
fn write_kubeconfig(path: &Path, port: u16, ca: &Path, token: &str) -> Result<()> {
    let kc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": format!("https://127.0.0.1:{port}"),
            "certificate-authority": ca,
        }}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "test",
                      "context": {"cluster": "test", "user": "admin", "namespace": "default"}}],
        "current-context": "test",
    });
    std::fs::write(path, serde_json::to_vec_pretty(&kc)?)
        .with_context(|| format!("writing {}", path.display()))
}

async fn load(path: &Path, context: Option<&str>) -> Result<Config> {
    // rustls cannot pick a crypto provider by itself when several are compiled in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    Config::from_custom_kubeconfig(kc, &opts)
        .await
        .with_context(|| format!("loading {}", path.display()))
}

/// The holder of the Lease `namespace/name` as the server has it: empty once it was released
/// (a graceful release empties `holderIdentity`, as client-go does).
pub async fn lease_holder(client: &Client, namespace: &str, name: &str) -> Result<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), namespace);
    let lease = leases
        .get(name)
        .await
        .with_context(|| format!("reading the Lease {namespace}/{name}"))?;
    Ok(lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default())
}
