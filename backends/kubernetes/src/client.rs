//! The clients of a replica: its configuration (a kubeconfig or the pod's service account), and
//! the stack every client is built on.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use http::{Request, Response};
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use leader_lock::backend::LockError;
use tower::util::BoxService;
use tower::BoxError;
use tracing::info;

use crate::stack::{layers, tcp_connector, with_timeouts};

/// The service under every client [`client_builder`] makes: kube's layers over a hyper client.
pub type ClientService = BoxService<Request<Body>, Response<hyper::body::Incoming>, BoxError>;

/// The stack of every kube client we build: kube's own layers (base URI, retry of 429/503/504,
/// authentication, extra headers such as the user agent) over a rustls connection pool whose TCP
/// connections have `TCP_NODELAY` set, with `config`'s connect, read and write timeouts. The
/// body of a write that a gate let through ([`gated_client`](crate::gated_client)) is bound by
/// its permit's deadline ([`DeadlineBody`](leader_lock::gate::DeadlineBody)): the request cannot
/// leave after that deadline, even from a process that was frozen with it queued on a
/// connection.
///
/// `Client::try_from(config)` builds the same stack but leaves Nagle's algorithm on (kube-rs
/// issue #2056): a small request written in two segments then waits for the apiserver's delayed
/// ACK, about 40 ms, which delays a new leader's first status write (docs/benchmarks.md,
/// "Graceful takeovers on a quiet machine"). Add layers with [`ClientBuilder::with_layer`], then
/// [`ClientBuilder::build`].
///
/// # Errors
/// A proxy in `config` (`proxy-url` in the kubeconfig): this build has no proxy support and
/// says so rather than connecting around it. The TLS or authentication settings cannot be used.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let config = kube::Config::infer().await?;
/// let client = leader_lock_kubernetes::client_builder(config)?.build();
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
pub fn client_builder(config: Config) -> Result<ClientBuilder<ClientService>, kube::Error> {
    let https = config.rustls_https_connector_with_connector(tcp_connector(&config)?)?;
    let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build(with_timeouts(&config, https));
    Ok(ClientBuilder::new(
        BoxService::new(layers(&config, pool)?),
        config.default_namespace,
    ))
}

/// Installs rustls' ring provider for the process unless one is installed already.
///
/// rustls picks a provider by itself only when exactly one is compiled in; this crate compiles
/// in ring (kube's `ring` feature), so a program whose build also has aws-lc-rs (kube's
/// `aws-lc-rs` feature, or any other crate's) has two, and its first TLS client panics unless a
/// provider was installed. Call this (or install the provider of your choice) at the start of
/// `main` in such a program. This crate never installs a provider by itself: which one a
/// process uses is the program's choice, not a library's.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Where a replica's Kubernetes configuration comes from, and what its requests carry: the
/// settings of a program with a kubeconfig and a context setting. [`load`](Self::load) builds
/// the one `kube::Config` that both clients of a replica ([`client`],
/// [`gated_client`](crate::gated_client)) are built from.
///
/// A program without such settings can use kube's `Config::infer()` as well.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use leader_lock_kubernetes::{client, ClientOptions};
///
/// let config = ClientOptions::default()
///     .with_kubeconfig("/etc/my-controller/kubeconfig")
///     .with_context("production")
///     .with_user_agent("my-controller/0.1")
///     .load()
///     .await?;
/// let kube = client(config.clone())?;
/// # let _ = kube;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientOptions {
    /// The kubeconfig to read; `None` looks in `KUBECONFIG`, then `~/.kube/config`, then uses
    /// the pod's service account ([`kubeconfig_source`](Self::kubeconfig_source)).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use; `None` is its current context. A context without any
    /// kubeconfig is refused.
    pub context: Option<String>,
    /// The `User-Agent` of every request (such as `my-controller/1.2 (pod-a)`): audit logs
    /// name the caller by it, and the apiserver names a write's field manager after it when the
    /// write gives none. `None` keeps kube's own.
    pub user_agent: Option<String>,
}

/// The kubeconfig a [`ClientOptions`] reads, as [`ClientOptions::kubeconfig_source`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// The file the options name.
    Given(PathBuf),
    /// The files `KUBECONFIG` lists, at least one of which exists; all are read and merged.
    Env(Vec<PathBuf>),
    /// `~/.kube/config`.
    Home(PathBuf),
}

// === impl ClientOptions ===

impl ClientOptions {
    /// Reads the kubeconfig at `path` instead of looking for one.
    #[must_use]
    pub fn with_kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig = Some(path.into());
        self
    }

    /// Uses the kubeconfig context `context` instead of its current one.
    #[must_use]
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// Sends `user_agent` as the `User-Agent` of every request.
    #[must_use]
    pub fn with_user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = Some(user_agent.into());
        self
    }

    /// The kubeconfig [`load`](Self::load) reads, given the values of `KUBECONFIG` and `HOME`
    /// (`load` passes the process's): the options' own, else the files `KUBECONFIG` lists when
    /// one of them exists, else `~/.kube/config` when it is a file; `None` means the pod's
    /// service account. A program that checks its settings before it connects finds the same
    /// file here.
    //
    // kube reads the same places (`Kubeconfig::read`), but only tells that none is there by
    // failing, and `Config::infer` then falls back to the service account whatever the failure:
    // a kubeconfig that exists but is broken must be reported as such, not hidden behind an
    // in-cluster error. This decides between the two; kube does the reading.
    pub fn kubeconfig_source(
        &self,
        kubeconfig_var: Option<&OsStr>,
        home: Option<&OsStr>,
    ) -> Option<KubeconfigSource> {
        if let Some(path) = &self.kubeconfig {
            return Some(KubeconfigSource::Given(path.clone()));
        }
        if let Some(list) = kubeconfig_var.filter(|v| !v.is_empty()) {
            let files: Vec<PathBuf> = std::env::split_paths(list)
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
            // kube reads every file listed once it reads the variable; one is enough to use it.
            if files.iter().any(|p| p.exists()) {
                return Some(KubeconfigSource::Env(files));
            }
        }
        let home = home.filter(|h| !h.is_empty())?;
        let path = Path::new(home).join(".kube").join("config");
        path.is_file().then_some(KubeconfigSource::Home(path))
    }

    /// Loads the configuration of this replica's clients: from the kubeconfig
    /// [`kubeconfig_source`](Self::kubeconfig_source) finds (with the options' context), else
    /// from the pod's service account when `KUBERNETES_SERVICE_HOST` is set. Its
    /// `default_namespace` is the context's (or the service account's) namespace.
    ///
    /// # Errors
    /// [`LockError::Refused`] when no configuration is found, the kubeconfig or its context
    /// cannot be used, or the user agent is no valid header value; the message names the file
    /// or the context.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads configuration.
    pub async fn load(&self) -> Result<Config, LockError> {
        let opts = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let context = self.context.as_deref().unwrap_or("<current>");
        let source = self.kubeconfig_source(
            std::env::var_os("KUBECONFIG").as_deref(),
            std::env::var_os("HOME").as_deref(),
        );
        let (mut config, from) = match source {
            Some(KubeconfigSource::Given(path)) => {
                let kc = Kubeconfig::read_from(&path).map_err(|e| {
                    LockError::refused_from(format!("cannot read kubeconfig {}", path.display()), e)
                })?;
                let c = Config::from_custom_kubeconfig(kc, &opts)
                    .await
                    .map_err(|e| {
                        LockError::refused_from(
                            format!("kubeconfig {} (context {context})", path.display()),
                            e,
                        )
                    })?;
                (c, path.display().to_string())
            }
            Some(KubeconfigSource::Env(files)) => {
                let shown = std::env::join_paths(&files)
                    .map(|v| v.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| format!("{files:?}"));
                (found_kubeconfig(&opts, &shown, context).await?, shown)
            }
            Some(KubeconfigSource::Home(path)) => {
                let shown = path.display().to_string();
                (found_kubeconfig(&opts, &shown, context).await?, shown)
            }
            None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                if let Some(ctx) = &self.context {
                    return Err(LockError::refused(format!(
                        "context {ctx} given but no kubeconfig found (none given, none in \
                         KUBECONFIG or ~/.kube/config)"
                    )));
                }
                let c = Config::incluster().map_err(|e| {
                    LockError::refused_from(
                        "in-cluster config (service account at \
                         /var/run/secrets/kubernetes.io/serviceaccount)",
                        e,
                    )
                })?;
                (c, "in-cluster service account".to_string())
            }
            None => {
                return Err(LockError::refused(
                    "no Kubernetes configuration: give a kubeconfig, set KUBECONFIG, create \
                     ~/.kube/config, or run in a pod with a service account",
                ))
            }
        };
        // kube reads a CA file that holds no PEM certificate as an empty trust store: every
        // connection would then fail later with an unknown issuer, far from the cause.
        if config.root_cert.as_ref().is_some_and(Vec::is_empty) {
            return Err(LockError::refused(format!(
                "{from}: the cluster's certificate-authority (or certificate-authority-data) \
                 holds no PEM certificate"
            )));
        }
        if let Some(agent) = &self.user_agent {
            let value = http::HeaderValue::from_str(agent).map_err(|e| {
                LockError::refused_from(format!("user agent {agent:?} is not a header value"), e)
            })?;
            config.headers.push((http::header::USER_AGENT, value));
        }
        info!(apiserver = %config.cluster_url, from = %from, namespace = %config.default_namespace,
            "kubernetes configuration loaded");
        Ok(config)
    }
}

/// The configuration of the kubeconfig found in `KUBECONFIG` or `~/.kube/config` (`shown`):
/// kube's own lookup reads the same files, merged as client-go merges them.
async fn found_kubeconfig(
    opts: &KubeConfigOptions,
    shown: &str,
    context: &str,
) -> Result<Config, LockError> {
    Config::from_kubeconfig(opts).await.map_err(|e| {
        LockError::refused_from(
            format!("kubeconfig {shown} (from KUBECONFIG or ~/.kube/config, context {context})"),
            e,
        )
    })
}

/// A client on [`client_builder`]'s stack (`TCP_NODELAY` on every connection), ungated: for the
/// [`LeaseLock`](crate::LeaseLock), the leadership Events and the controller's reads. Its writes
/// are not gated; a controller's own writes go through [`gated_client`](crate::gated_client),
/// built from the same `config`.
///
/// # Errors
/// As [`client_builder`]: a proxy is set, or the TLS or auth settings could not be used.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use leader_lock_kubernetes::{client, LeaseLock};
///
/// let config = kube::Config::infer().await?;
/// let lock = LeaseLock::new(client(config.clone())?, &config.default_namespace, "my-lock");
/// # let _ = lock;
/// # Ok(())
/// # }
/// ```
pub fn client(config: Config) -> Result<Client, kube::Error> {
    client_builder(config).map(ClientBuilder::build)
}
