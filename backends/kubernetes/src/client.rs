//! The clients of a replica: its configuration (a kubeconfig or the pod's service account), and
//! the stack every client is built on.

use std::path::{Path, PathBuf};

use http::{Request, Response};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use leader_lock::backend::LockError;
use leader_lock::gate::DeadlineBody;
use tower::retry::RetryLayer;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};
use tracing::info;

/// The service under every client [`client_builder`] makes: kube's layers over a hyper client.
pub type ClientService = BoxService<Request<Body>, Response<hyper::body::Incoming>, BoxError>;

/// The stack of every kube client we build: kube's own layers (base URI, retry of 429/503/504,
/// authentication, extra headers such as the user agent) over a rustls connection pool whose TCP
/// connections have `TCP_NODELAY` set, with `config`'s connect, read and write timeouts. The
/// body of a write that a gate let through ([`gated_client`](crate::gated_client)) is bound by
/// its permit's deadline ([`DeadlineBody`]): the request cannot leave after that deadline, even
/// from a process that was frozen with it queued on a connection.
///
/// `Client::try_from(config)` builds the same stack but leaves Nagle's algorithm on (kube-rs
/// issue #2056): a small request written in two segments then waits for the apiserver's delayed
/// ACK, about 40 ms, which showed as the first status write of a new leader coming 46–56 ms after
/// it led in one takeover in three (`docs/benchmarks.md`). Add layers with
/// [`ClientBuilder::with_layer`], then [`ClientBuilder::build`].
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
    install_crypto_provider();
    if let Some(proxy) = &config.proxy_url {
        // What `Client::try_from` answers in a build without kube's `http-proxy`/`socks5`.
        return Err(kube::Error::ProxyProtocolDisabled {
            proxy_url: proxy.clone(),
            protocol_feature: "kube/http-proxy",
        });
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        // Innermost: the connection's task reads a write's body only before its deadline.
        .map_request(DeadlineBody::bound)
        .service(pool)
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

/// Installs rustls' ring provider for the process unless one is installed already.
///
/// rustls picks a provider by itself only when exactly one is compiled in; this crate compiles
/// in ring (kube's `ring` feature), so a program whose build also has aws-lc-rs (kube's
/// `aws-lc-rs` feature, or any other crate's) has two, and its first TLS client panics unless a
/// provider was installed. Every client function of this crate ([`client`], [`client_builder`],
/// [`gated_client`](crate::gated_client)) calls this first; call it (or install the provider of
/// your choice) at the start of `main` when the program builds a TLS client of its own before
/// them, such as `kube::Client::try_from(config)`.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The kubeconfig that `KUBECONFIG` or `~/.kube/config` names, if any exists.
fn default_kubeconfig() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        // KUBECONFIG may list several files; kube merges them, we only need one to exist.
        if std::env::split_paths(&v).any(|p| p.is_file()) {
            return Some(PathBuf::from(v));
        }
    }
    let home = std::env::var_os("HOME")?;
    let p = Path::new(&home).join(".kube").join("config");
    p.is_file().then_some(p)
}

/// Loads the configuration of this replica's clients, for a program with a kubeconfig setting
/// and a context setting; a program without either can use `kube::Config::infer()` as well.
///
/// The configuration comes from `kubeconfig` when given, else the files `KUBECONFIG` lists, else
/// `~/.kube/config`, with `context` (default: the current one); with none of those, from the
/// pod's service account (in-cluster). Every request of a client built from it carries
/// `user_agent` (such as `my-controller/1.2 (pod-a)`): audit logs name the caller by it, and the
/// apiserver names a write's field manager after it when the write gives none. Its
/// `default_namespace` is the kubeconfig context's (or the service account's) namespace.
///
/// Build the lock's client ([`client`]) and the controller's ([`gated_client`](crate::gated_client))
/// from the one configuration it returns.
///
/// # Errors
/// [`LockError::Refused`] when no configuration is found, the kubeconfig or its context cannot be
/// used, or `user_agent` is no valid header value; the message names the file or context.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::path::Path;
///
/// let config = leader_lock_kubernetes::load_config(
///     Some(Path::new("/etc/my-controller/kubeconfig")),
///     Some("production"),
///     "my-controller/0.1",
/// )
/// .await?;
/// let kube = leader_lock_kubernetes::client(config.clone())?;
/// # let _ = kube;
/// # Ok(())
/// # }
/// ```
pub async fn load_config(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    user_agent: &str,
) -> Result<Config, LockError> {
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let (config, source) = if let Some(path) = kubeconfig {
        let kc = Kubeconfig::read_from(path).map_err(|e| {
            LockError::refused_from(format!("cannot read kubeconfig {}: {e}", path.display()), e)
        })?;
        let c = Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(|e| {
                LockError::refused_from(
                    format!(
                        "kubeconfig {} (context {}): {e}",
                        path.display(),
                        context.unwrap_or("<current>")
                    ),
                    e,
                )
            })?;
        (c, path.display().to_string())
    } else if let Some(found) = default_kubeconfig() {
        let c = Config::from_kubeconfig(&opts).await.map_err(|e| {
            LockError::refused_from(
                format!(
                    "kubeconfig {} (from KUBECONFIG or ~/.kube/config, context {}): {e}",
                    found.display(),
                    context.unwrap_or("<current>")
                ),
                e,
            )
        })?;
        (c, found.display().to_string())
    } else if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        if let Some(ctx) = context {
            return Err(LockError::refused(format!(
                "context {ctx} given but no kubeconfig found (none given, none in KUBECONFIG or ~/.kube/config)"
            )));
        }
        let c = Config::incluster().map_err(|e| {
            LockError::refused_from(
                format!(
                    "in-cluster config (service account at \
                     /var/run/secrets/kubernetes.io/serviceaccount): {e}"
                ),
                e,
            )
        })?;
        (c, "in-cluster service account".to_string())
    } else {
        return Err(LockError::refused(
            "no Kubernetes configuration: give a kubeconfig, set KUBECONFIG, create ~/.kube/config, \
             or run in a pod with a service account",
        ));
    };
    let mut config = config;
    let agent = http::HeaderValue::from_str(user_agent).map_err(|e| {
        LockError::refused_from(
            format!("user agent {user_agent:?} is not a header value: {e}"),
            e,
        )
    })?;
    config.headers.push((http::header::USER_AGENT, agent));
    info!(apiserver = %config.cluster_url, from = %source, namespace = %config.default_namespace,
        "kubernetes configuration loaded");
    Ok(config)
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
