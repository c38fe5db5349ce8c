//! Contour (projectcontour.io), a real Gateway API controller, as a throwaway process on
//! loopback: `contour serve` with no Envoy, serving the one Gateway its configuration names
//! (Contour's static mode: `gateway.gatewayRef`), its xDS, metrics and debug servers each on a
//! free loopback port, so that several replicas share the machine.
//!
//! Every replica watches and rebuilds its DAG (`contour_dagrebuild_total` on its metrics);
//! with its own leader election on, only the one that leads writes statuses, one at a time from
//! one queue (`internal/k8s/status.go`: a Get from its cache, then an Update of `/status`,
//! retried on a conflict only). With it off, every replica writes.
//!
//! The binary comes from `GATEWAY_LEADER_CONTOUR`, else the cache `scripts/build-contour.sh`
//! fills ([`crate::built::contour`]); Contour's CRDs and RBAC, as its release ships them, stand
//! beside it ([`install_crds`], [`rbac_manifest`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use kube::Client;

use crate::metrics;
use crate::process::{free_port, tail, ServerProcess};

pub use crate::built::CONTOUR_ENV;

/// Contour's controller name: what its GatewayClass names, and the `controllerName` of the
/// route statuses it writes (it copies the class's).
pub const CONTROLLER_NAME: &str = "projectcontour.io/gateway-controller";

/// What Contour's own leader election defaults to (`cmd/contour/serve.go`).
const DEFAULT_TIMING: [Duration; 3] = [
    Duration::from_secs(15),
    Duration::from_secs(10),
    Duration::from_secs(2),
];

/// The kinds a Contour built against Gateway API v1.3 reads at versions that later standard
/// CRDs no longer serve (TLSRoute and TCPRoute `v1alpha2`, BackendTLSPolicy `v1alpha3`): an
/// informer for a kind the apiserver does not serve is fatal at startup, so they are left out.
const DISABLED_FEATURES: [&str; 3] = ["tlsroutes", "tcproutes", "backendtlspolicies"];

/// A fresh replica's metrics server answers within a second; a busy 2-core machine may need far
/// more.
const READY_LIMIT: Duration = Duration::from_secs(90);

/// How a Contour replica runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The Gateway it serves (`gateway.gatewayRef` of its configuration file): namespace, name.
    pub gateway: (String, String),
    /// Its own leader election, or `None` for `--disable-leader-election` (every replica writes).
    pub election: Option<Election>,
    /// `--watch-namespaces`: the only namespaces whose objects it watches (empty: all of them).
    pub watch_namespaces: Vec<String>,
}

/// Contour's own leader election: controller-runtime's (client-go's `leaderelection`) on a
/// Lease, its identity `<hostname>_<random UUID>`, which no flag or variable sets; it releases
/// the Lease on SIGTERM and exits when it loses it.
#[derive(Debug, Clone)]
pub struct Election {
    /// `--leader-election-resource-namespace`.
    pub namespace: String,
    /// `--leader-election-resource-name`.
    pub name: String,
    /// `--leader-election-lease-duration` (15 s by default).
    pub lease_duration: Duration,
    /// `--leader-election-renew-deadline` (10 s by default).
    pub renew_deadline: Duration,
    /// `--leader-election-retry-period` (2 s by default).
    pub retry_period: Duration,
}

/// A running `contour serve`; killed when dropped (its log and dir kept if the test panics).
pub struct Contour {
    name: String,
    process: ServerProcess,
    metrics: SocketAddr,
    xds: SocketAddr,
    debug: SocketAddr,
    election: Option<Election>,
}

// === impl Options ===

impl Options {
    /// Serves Gateway `namespace/name`, watching every namespace, with Contour's own election
    /// off.
    pub fn new(namespace: &str, name: &str) -> Options {
        Options {
            gateway: (namespace.to_string(), name.to_string()),
            election: None,
            watch_namespaces: Vec::new(),
        }
    }

    /// With Contour's own leader election.
    #[must_use]
    pub fn with_election(mut self, election: Election) -> Options {
        self.election = Some(election);
        self
    }

    /// Watching only `namespaces` (the cluster-scoped GatewayClasses are watched whatever this
    /// says).
    #[must_use]
    pub fn with_watch_namespaces(mut self, namespaces: &[&str]) -> Options {
        self.watch_namespaces = namespaces.iter().map(|n| n.to_string()).collect();
        self
    }
}

// === impl Election ===

impl Election {
    /// An election on the Lease `namespace/name`, with Contour's default timing.
    pub fn new(namespace: &str, name: &str) -> Election {
        let [lease_duration, renew_deadline, retry_period] = DEFAULT_TIMING;
        Election {
            namespace: namespace.to_string(),
            name: name.to_string(),
            lease_duration,
            renew_deadline,
            retry_period,
        }
    }

    /// With this lease duration, renew deadline and retry period.
    #[must_use]
    pub fn with_timing(mut self, lease: Duration, renew: Duration, retry: Duration) -> Election {
        self.lease_duration = lease;
        self.renew_deadline = renew;
        self.retry_period = retry;
        self
    }
}

// === impl Contour ===

impl Contour {
    /// Starts `contour serve` as replica `name` against the apiserver of `kubeconfig` (whose
    /// credentials it sends: the apiserver's, or none for a `gateway-leader proxy`), and waits
    /// until its metrics server answers.
    ///
    /// # Errors
    ///
    /// When there is no contour binary (the error says how to build one), or the replica exits
    /// or does not serve its metrics in time (the error holds its log's tail).
    pub async fn start(name: &str, kubeconfig: &Path, options: &Options) -> Result<Contour> {
        let binary = crate::built::contour()?;
        let mut last = None;
        // A free port may be taken between picking and binding: retry on new ones.
        for _ in 0..3 {
            let dir = ServerProcess::temp_dir(&format!("contour-{name}"))?;
            let config = dir.path().join("contour.yaml");
            std::fs::write(&config, configuration(options))
                .with_context(|| format!("writing {}", config.display()))?;
            let [metrics, xds, debug] = [free_port()?, free_port()?, free_port()?]
                .map(|port| SocketAddr::from(([127, 0, 0, 1], port)));
            let cmd = command(&binary, kubeconfig, &config, options, [metrics, xds, debug]);
            let mut contour = Contour {
                name: name.to_string(),
                process: ServerProcess::spawn(&format!("contour-{name}"), cmd, dir)?,
                metrics,
                xds,
                debug,
                election: options.election.clone(),
            };
            match contour.wait_serving().await {
                Ok(()) => return Ok(contour),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("contour {name} did not start")))
    }

    /// Waits until `/metrics` answers with Contour's own metrics; fails early if the process
    /// exits.
    async fn wait_serving(&mut self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + READY_LIMIT;
        loop {
            self.process.ensure_running()?;
            if self
                .metrics()
                .await
                .is_ok_and(|m| m.contains("contour_build_info"))
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(anyhow!(
                    "contour {} did not serve /metrics on {} within {READY_LIMIT:?}; log tail:\n{}",
                    self.name,
                    self.metrics,
                    tail(&self.log(), 40)
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The replica's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Where it serves `/metrics` and `/healthz` (`--http-address`, `--health-address`).
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics
    }

    /// Where its xDS server listens, without TLS (`--xds-address`, `--insecure`), once its first
    /// DAG is built.
    pub fn xds_addr(&self) -> SocketAddr {
        self.xds
    }

    /// Where its debug server listens (`--debug-http-address`).
    pub fn debug_addr(&self) -> SocketAddr {
        self.debug
    }

    /// Its `/metrics` now (Prometheus text).
    ///
    /// # Errors
    ///
    /// When it does not answer (exited, frozen).
    pub async fn metrics(&self) -> Result<String> {
        let addr = self.metrics;
        tokio::task::spawn_blocking(move || metrics::get(addr, "/metrics"))
            .await
            .context("the metrics scrape's thread")?
    }

    /// How many times it has rebuilt its DAG (`contour_dagrebuild_total`): every replica does,
    /// leader or not, on every change it watches.
    ///
    /// # Errors
    ///
    /// As [`metrics`](Self::metrics).
    pub async fn dag_rebuilds(&self) -> Result<f64> {
        Ok(metrics::sum(
            &self.metrics().await?,
            "contour_dagrebuild_total",
            None,
        ))
    }

    /// Whether it leads its own election now (controller-runtime's
    /// `leader_election_master_status` for its Lease's name is 1); false with its election
    /// off.
    ///
    /// # Errors
    ///
    /// As [`metrics`](Self::metrics).
    pub async fn leads(&self) -> Result<bool> {
        let Some(e) = &self.election else {
            return Ok(false);
        };
        let label = format!("name=\"{}\"", e.name);
        let text = self.metrics().await?;
        Ok(metrics::sum(&text, "leader_election_master_status", Some(&label)) == 1.0)
    }

    /// Its log so far (logrus text, stderr and stdout).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Fails with its log's tail when it has exited.
    ///
    /// # Errors
    ///
    /// When it has exited.
    pub fn ensure_running(&mut self) -> Result<()> {
        self.process.ensure_running()
    }

    /// A crash: SIGKILL, nothing released.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// A graceful stop: SIGTERM (Contour releases its Lease when it holds one), then waits up
    /// to `limit` for it to exit.
    ///
    /// # Errors
    ///
    /// When it is not running, or still runs after `limit`.
    pub async fn terminate(&mut self, limit: Duration) -> Result<()> {
        self.process.terminate(limit).await
    }

    /// Freezes it (SIGSTOP), as a paused VM or a long GC would.
    ///
    /// # Errors
    ///
    /// When it is not running.
    pub fn freeze(&self) -> Result<()> {
        self.process.pause()
    }

    /// Thaws it (SIGCONT).
    ///
    /// # Errors
    ///
    /// When it is not running.
    pub fn thaw(&self) -> Result<()> {
        self.process.resume()
    }
}

/// Contour's configuration file: the one Gateway it serves. Everything else comes from flags.
fn configuration(options: &Options) -> String {
    let (namespace, name) = &options.gateway;
    // JSON is YAML, and escapes whatever the names hold.
    serde_json::json!({
        "gateway": {"gatewayRef": {"namespace": namespace, "name": name}},
    })
    .to_string()
}

/// `contour serve` with every listener on its loopback port: `[metrics and health, xDS, debug]`.
fn command(
    binary: &Path,
    kubeconfig: &Path,
    config: &Path,
    options: &Options,
    [metrics, xds, debug]: [SocketAddr; 3],
) -> Command {
    let mut cmd = Command::new(binary);
    cmd.arg("serve")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--config-path")
        .arg(config)
        // No Envoy connects; its xDS server has no certificates to serve with.
        .arg("--insecure");
    for (flag, addr) in [
        ("xds", xds),
        ("http", metrics),
        // Health on the metrics server: Contour serves both on one port when they are equal.
        ("health", metrics),
        ("debug-http", debug),
    ] {
        cmd.arg(format!("--{flag}-address={}", addr.ip()))
            .arg(format!("--{flag}-port={}", addr.port()));
    }
    for feature in DISABLED_FEATURES {
        cmd.arg(format!("--disable-feature={feature}"));
    }
    if !options.watch_namespaces.is_empty() {
        cmd.arg(format!(
            "--watch-namespaces={}",
            options.watch_namespaces.join(",")
        ));
    }
    match &options.election {
        None => {
            cmd.arg("--disable-leader-election");
        }
        Some(e) => {
            cmd.arg(format!(
                "--leader-election-resource-namespace={}",
                e.namespace
            ))
            .arg(format!("--leader-election-resource-name={}", e.name))
            .arg(format!(
                "--leader-election-lease-duration={}ms",
                e.lease_duration.as_millis()
            ))
            .arg(format!(
                "--leader-election-renew-deadline={}ms",
                e.renew_deadline.as_millis()
            ))
            .arg(format!(
                "--leader-election-retry-period={}ms",
                e.retry_period.as_millis()
            ));
        }
    }
    // Contour reads its namespace (the default Lease namespace) and its kubeconfig from the
    // environment too: only the flags above may decide.
    cmd.env_remove("CONTOUR_NAMESPACE").env_remove("KUBECONFIG");
    cmd
}

/// Contour's own CRDs (HTTPProxy, ExtensionService, ContourConfiguration, ...) from beside the
/// binary, created and established on the apiserver of `client`: Contour watches some of them
/// whatever it is asked to serve.
///
/// # Errors
///
/// As [`crate::built::contour`], or when the apiserver refuses a CRD.
pub async fn install_crds(client: &Client) -> Result<()> {
    let file = crate::built::contour()?.with_file_name(crate::built::CONTOUR_CRDS);
    let bundle = crate::gateway_api::read_file(&file)?;
    crate::gateway_api::install_crds(client, &bundle.crds).await
}

/// Contour's RBAC as its release ships it (a ClusterRole for what it watches and the statuses
/// it writes, a Role for its Lease and Events, and their bindings), for
/// [`crate::rbac::bind_manifest_to`].
///
/// # Errors
///
/// As [`crate::built::contour`].
pub fn rbac_manifest() -> Result<PathBuf> {
    Ok(crate::built::contour()?.with_file_name(crate::built::CONTOUR_RBAC))
}

/// The manifests Contour's release ships (`examples/` of its Go module at the version
/// `scripts/versions.sh` pins, which `scripts/build-contour.sh` downloaded into the project's Go
/// module cache): what an operator applies, for the tests of what gateway-leader adds to it
/// (`examples/render/contour-gateway.yaml` is what `deploy/examples/contour-with-proxy` pulls
/// from GitHub).
///
/// # Errors
///
/// When the module is not in the cache (Contour has not been built here).
pub fn examples_dir() -> Result<PathBuf> {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR")))
        .join("scripts");
    // The cache root and the version as the build scripts have them, so the two never differ.
    let out = Command::new("bash")
        .arg("-c")
        .arg(
            ". ./versions.sh && . ./go.sh && printf '%s' \
             \"$(go_cache_root)/go/mod/github.com/projectcontour/contour@$CONTOUR_VERSION/examples\"",
        )
        .current_dir(&scripts)
        .output()
        .with_context(|| format!("asking {} where Contour's module is", scripts.display()))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).into_owned());
    if !out.status.success() || !dir.join("render").is_dir() {
        return Err(anyhow!(
            "Contour's release manifests are not at {}: run scripts/build-contour.sh (or `. \
             scripts/servers.sh; ensure_servers`), which downloads its Go module ({})",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(dir)
}
