//! Envoy Gateway (gateway.envoyproxy.io), a real Gateway API controller, as a throwaway process:
//! `envoy-gateway server` with its Kubernetes provider and no Envoy, in a [`PodNetwork`] of its
//! own.
//!
//! It binds fixed ports (health 8081, xDS 18000, metrics 19001, ...) and reads its xDS
//! certificates from `/certs`, where its Deployment mounts the Secret `envoy-gateway`: no flag
//! moves either, so each replica runs in its own network namespace with a directory of test
//! certificates mounted at `/certs` (see [`crate::pod`]). It reaches the apiserver, or its pod's
//! `gateway-leader proxy`, through the kubeconfig it is given (`KUBECONFIG`), from inside that
//! namespace.
//!
//! Every replica watches and translates; with its own leader election on (controller-runtime's,
//! on the Lease `5b9825d2.gateway.envoyproxy.io` of its namespace), only the one that leads runs
//! its status updater and creates the Envoy infrastructure (a Deployment, a Service, ...; with
//! no kubelet they never run, so a Gateway stays `Programmed: False`). With it off, every
//! replica does both.
//!
//! The binary comes from `GATEWAY_LEADER_ENVOY_GATEWAY`, else the cache
//! `scripts/build-envoy-gateway.sh` fills ([`crate::built::envoy_gateway`]); its CRDs and RBAC,
//! as its release ships them, stand beside it ([`install_crds`], [`rbac_manifest`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use kube::Client;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::metrics;
use crate::pod::PodNetwork;
use crate::process::{tail, ServerProcess};

pub use crate::built::ENVOY_GATEWAY_ENV;

/// The name of Envoy Gateway's election Lease, in its namespace (`internal/provider/kubernetes/
/// kubernetes.go`); no setting changes it.
pub const LEASE_NAME: &str = "5b9825d2.gateway.envoyproxy.io";

/// Where it serves `/metrics` in its pod.
const METRICS_PORT: u16 = 19001;

/// Where it serves `/healthz` and `/readyz` in its pod.
const HEALTH_PORT: u16 = 8081;

/// A fresh replica answers its health probe within seconds; a busy 2-core machine may need far
/// more.
const READY_LIMIT: Duration = Duration::from_secs(90);

/// How an Envoy Gateway replica runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Its namespace (`ENVOY_GATEWAY_NAMESPACE`): where its Lease and the Envoy infrastructure
    /// it creates live.
    pub namespace: String,
    /// The `controllerName` of the GatewayClasses it serves (`gateway.controllerName`).
    pub controller_name: String,
    /// The only namespaces whose objects it watches (`provider.kubernetes.watch`; empty: all).
    pub watch_namespaces: Vec<String>,
    /// Its own leader election's lease duration, renew deadline and retry period, or `None`
    /// for `leaderElection.disable` (every replica writes).
    pub election: Option<[Duration; 3]>,
}

/// A running `envoy-gateway server`; killed when dropped (its log and dir kept if the test
/// panics).
pub struct EnvoyGateway {
    name: String,
    process: ServerProcess,
    metrics: SocketAddr,
    elected: bool,
}

// === impl Options ===

impl Options {
    /// Replicas of namespace `namespace` serving the GatewayClasses of `controller_name`,
    /// watching every namespace, with Envoy Gateway's own election off.
    pub fn new(namespace: &str, controller_name: &str) -> Options {
        Options {
            namespace: namespace.to_string(),
            controller_name: controller_name.to_string(),
            watch_namespaces: Vec::new(),
            election: None,
        }
    }

    /// With Envoy Gateway's own leader election, at these timings.
    #[must_use]
    pub fn with_election(mut self, lease: Duration, renew: Duration, retry: Duration) -> Options {
        self.election = Some([lease, renew, retry]);
        self
    }

    /// Watching only `namespaces` (cluster-scoped objects whatever this says).
    #[must_use]
    pub fn with_watch_namespaces(mut self, namespaces: &[&str]) -> Options {
        self.watch_namespaces = namespaces.iter().map(|n| n.to_string()).collect();
        self
    }
}

// === impl EnvoyGateway ===

impl EnvoyGateway {
    /// Starts `envoy-gateway server` as replica `name` in `net`, against the apiserver of
    /// `kubeconfig` (as reached from inside `net`), and waits until it answers its readiness
    /// probe.
    ///
    /// # Errors
    ///
    /// When there is no envoy-gateway binary (the error says how to build one), or the replica
    /// exits or does not become ready in time (the error holds its log's tail).
    pub async fn start(
        name: &str,
        net: &PodNetwork,
        kubeconfig: &Path,
        options: &Options,
    ) -> Result<EnvoyGateway> {
        let binary = crate::built::envoy_gateway()?;
        let dir = ServerProcess::temp_dir(&format!("envoy-gateway-{name}"))?;
        let config = dir.path().join("envoy-gateway.yaml");
        std::fs::write(&config, configuration(options))
            .with_context(|| format!("writing {}", config.display()))?;
        let certs = dir.path().join("certs");
        write_certificates(&certs, &options.namespace)?;
        let config_arg = format!("--config-path={}", config.display());
        let mut cmd = net.command(
            &binary,
            &["server", &config_arg],
            &[(certs.as_path(), "/certs")],
        );
        cmd.env("KUBECONFIG", kubeconfig)
            .env("ENVOY_GATEWAY_NAMESPACE", &options.namespace)
            .env("KUBERNETES_CLUSTER_DOMAIN", "cluster.local");
        let mut eg = EnvoyGateway {
            name: name.to_string(),
            process: ServerProcess::spawn(&format!("envoy-gateway-{name}"), cmd, dir)?,
            metrics: SocketAddr::from((net.pod_ip(), METRICS_PORT)),
            elected: options.election.is_some(),
        };
        eg.wait_ready(SocketAddr::from((net.pod_ip(), HEALTH_PORT)))
            .await?;
        Ok(eg)
    }

    /// Waits until `/readyz` answers; fails early if the process exits.
    async fn wait_ready(&mut self, health: SocketAddr) -> Result<()> {
        let deadline = tokio::time::Instant::now() + READY_LIMIT;
        loop {
            self.process.ensure_running()?;
            let ready = tokio::task::spawn_blocking(move || metrics::get(health, "/readyz"))
                .await
                .context("the readiness probe's thread")?;
            if ready.is_ok() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(anyhow!(
                    "envoy-gateway {} was not ready on {health} within {READY_LIMIT:?}; log \
                     tail:\n{}",
                    self.name,
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

    /// How many xDS snapshots it has built (`xds_snapshot_create_total`): every replica
    /// translates every change it watches, leader or not.
    ///
    /// # Errors
    ///
    /// As [`metrics`](Self::metrics).
    pub async fn snapshots(&self) -> Result<f64> {
        Ok(metrics::sum(
            &self.metrics().await?,
            "xds_snapshot_create_total",
            None,
        ))
    }

    /// How many status updates it has attempted, by `status` label value (`success`,
    /// `failure`, ...), summed over kinds (`status_update_total`).
    ///
    /// # Errors
    ///
    /// As [`metrics`](Self::metrics).
    pub async fn status_updates(&self, status: &str) -> Result<f64> {
        let label = format!("status=\"{status}\"");
        Ok(metrics::sum(
            &self.metrics().await?,
            "status_update_total",
            Some(&label),
        ))
    }

    /// Whether it leads its own election now (`leader_election_master_status` for its Lease is
    /// 1); false with its election off.
    ///
    /// # Errors
    ///
    /// As [`metrics`](Self::metrics).
    pub async fn leads(&self) -> Result<bool> {
        if !self.elected {
            return Ok(false);
        }
        let label = format!("name=\"{LEASE_NAME}\"");
        let text = self.metrics().await?;
        Ok(metrics::sum(&text, "leader_election_master_status", Some(&label)) == 1.0)
    }

    /// Its log so far (zap's console lines, stderr and stdout).
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

    /// A graceful stop: SIGTERM (controller-runtime releases its Lease when it holds one), then
    /// waits up to `limit` for it to exit.
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

/// Its configuration file (an `EnvoyGateway` object): the controller name, the namespaces it
/// watches and its election.
fn configuration(options: &Options) -> String {
    let election = match options.election {
        None => serde_json::json!({"disable": true}),
        Some([lease, renew, retry]) => serde_json::json!({
            "leaseDuration": go_duration(lease),
            "renewDeadline": go_duration(renew),
            "retryPeriod": go_duration(retry),
        }),
    };
    let mut kubernetes = serde_json::json!({"leaderElection": election});
    if !options.watch_namespaces.is_empty() {
        kubernetes["watch"] = serde_json::json!({
            "type": "Namespaces",
            "namespaces": options.watch_namespaces,
        });
    }
    // JSON is YAML, and escapes whatever the names hold.
    serde_json::json!({
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "EnvoyGateway",
        "gateway": {"controllerName": options.controller_name},
        "logging": {"level": {"default": "info"}},
        "provider": {"type": "Kubernetes", "kubernetes": kubernetes},
    })
    .to_string()
}

/// A duration as Go's `time.ParseDuration` reads it.
fn go_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// What its chart's certgen Job puts into the Secret it mounts at `/certs`: a CA, and a
/// serving and client certificate for `envoy-gateway` that the CA signed (its xDS server
/// loads all three at startup and refuses to start without them).
fn write_certificates(dir: &Path, namespace: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "envoy-gateway test CA");
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(vec![
        "envoy-gateway".to_string(),
        format!("envoy-gateway.{namespace}"),
        format!("envoy-gateway.{namespace}.svc"),
    ])?;
    leaf.distinguished_name
        .push(DnType::CommonName, "envoy-gateway");
    let cert = leaf.signed_by(&key, &issuer)?;
    for (file, pem) in [
        ("ca.crt", ca_cert.pem()),
        ("tls.crt", cert.pem()),
        ("tls.key", key.serialize_pem()),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Envoy Gateway's own CRDs (EnvoyProxy, ClientTrafficPolicy, ...) from beside the binary,
/// created and established on the apiserver of `client`: it watches them whatever it is asked
/// to serve.
///
/// # Errors
///
/// As [`crate::built::envoy_gateway`], or when the apiserver refuses a CRD.
pub async fn install_crds(client: &Client) -> Result<()> {
    let file = crate::built::envoy_gateway()?.with_file_name(crate::built::ENVOY_GATEWAY_CRDS);
    let bundle = crate::gateway_api::read_file(&file)?;
    crate::gateway_api::install_crds(client, &bundle.crds).await
}

/// Envoy Gateway's RBAC as its Helm chart renders it (a ClusterRole for what it watches and
/// the statuses it writes, Roles for its Lease and for the Envoy infrastructure it creates in
/// its namespace, and their bindings), for [`crate::rbac::bind_manifest_to`].
///
/// # Errors
///
/// As [`crate::built::envoy_gateway`].
pub fn rbac_manifest() -> Result<PathBuf> {
    Ok(crate::built::envoy_gateway()?.with_file_name(crate::built::ENVOY_GATEWAY_RBAC))
}

/// Envoy Gateway's Helm chart (`gateway-helm`) as its release publishes it, from beside the
/// binary: what an operator installs, for the tests of what gateway-leader's post-renderer adds
/// to it.
///
/// # Errors
///
/// As [`crate::built::envoy_gateway`], or when the chart is not there.
pub fn chart_dir() -> Result<PathBuf> {
    let dir = crate::built::envoy_gateway()?.with_file_name("envoy-gateway-chart");
    if !dir.join("values.yaml").is_file() {
        return Err(anyhow!(
            "no Helm chart at {}: scripts/build-envoy-gateway.sh puts it there",
            dir.display()
        ));
    }
    Ok(dir)
}
