//! Building a kube client from a kubeconfig or the pod's service account.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use leader_lock::LockError;
use tracing::info;

/// Installs rustls' ring provider for the process unless one is set: with more than one provider
/// compiled in (a workspace build), rustls cannot pick and the first TLS client would panic.
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

/// Builds a client and returns it with its default namespace.
///
/// The configuration comes from `kubeconfig` when given, else the files `KUBECONFIG` lists, else
/// `~/.kube/config`, with `context` (default: the current one); with none of those, from the
/// pod's service account (in-cluster). Every request carries `user_agent` (such as
/// `my-controller/1.2 (pod-a)`): audit logs name the caller by it, and the apiserver names a
/// write's field manager after it when the write gives none.
///
/// Give the [`LeaseLock`](crate::LeaseLock) this client as is; a controller's own writes go
/// through a gated one ([`gated_client`](crate::gated_client)).
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
/// let (kube, namespace) = leader_lock_kubernetes::client(
///     Some(Path::new("/etc/my-controller/kubeconfig")),
///     Some("production"),
///     "my-controller/0.1",
/// )
/// .await?;
/// # let _ = (kube, namespace);
/// # Ok(())
/// # }
/// ```
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    user_agent: &str,
) -> Result<(Client, String), LockError> {
    install_crypto_provider();
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
    let namespace = config.default_namespace.clone();
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| {
        LockError::refused_from(
            format!("cannot build a client for {url} (from {source}): {e}"),
            e,
        )
    })?;
    info!(apiserver = %url, from = %source, %namespace, "kubernetes client ready");
    Ok((client, namespace))
}
