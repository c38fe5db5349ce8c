//! The validated, effective settings of `gateway-leader run`, and the choices among them.

use std::fmt;
use std::path::PathBuf;

use leader_lock::Timing;
use leader_lock_kubernetes::ClientOptions;

use super::secret::Secret;

/// Which backend holds the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A coordination.k8s.io/v1 Lease.
    Kubernetes,
    /// An etcd key bound to an etcd lease.
    Etcd,
    /// A Redis key with a TTL.
    Redis,
}

impl Backend {
    /// Every backend, whether this build offers it or not (see `backend::validate`).
    pub const ALL: [Backend; 3] = [Backend::Kubernetes, Backend::Etcd, Backend::Redis];
    /// The accepted spellings.
    pub const NAMES: &'static str = "kubernetes, etcd, redis";

    /// The name `--lock-backend` takes.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Kubernetes => "kubernetes",
            Backend::Etcd => "etcd",
            Backend::Redis => "redis",
        }
    }

    /// The check of `lock_backend`: a name in any case, or `k8s`.
    pub(super) fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "kubernetes" | "k8s" => Ok(Backend::Kubernetes),
            "etcd" => Ok(Backend::Etcd),
            "redis" => Ok(Backend::Redis),
            other => Err(format!(
                "{other:?} is not a backend; accepted values: {}",
                Self::NAMES
            )),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The check of `log_format`.
    pub(super) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{other:?}; accepted values: text, json")),
        }
    }
}

/// How a follower learns that the lock changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// The backend's change stream: a release or a deletion is seen at once, an expiry is
    /// waited for exactly; polling only while the stream is down.
    Watch,
    /// No change stream: polling every retry period, jittered, as client-go does. A baseline
    /// for `gateway-leader-bench run`, and a way out should a backend's watch misbehave.
    Poll,
}

impl Wakeup {
    /// The check of `wakeup`.
    pub(super) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "watch" => Ok(Wakeup::Watch),
            "poll" => Ok(Wakeup::Poll),
            other => Err(format!("{other:?}; accepted values: watch, poll")),
        }
    }
}

impl fmt::Display for Wakeup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Wakeup::Watch => "watch",
            Wakeup::Poll => "poll",
        })
    }
}

/// etcd connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdSettings {
    /// Endpoints, `http(s)://host:port`.
    pub endpoints: Vec<String>,
    /// CA bundle.
    pub ca_file: Option<PathBuf>,
    /// Client certificate.
    pub cert_file: Option<PathBuf>,
    /// Client key.
    pub key_file: Option<PathBuf>,
    /// User name.
    pub username: Option<String>,
    /// Password, from a file or the environment.
    pub password: Option<Secret>,
    /// Key prefix.
    pub key_prefix: String,
}

/// Redis connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis://` or `rediss://` URL.
    pub url: String,
    /// ACL user.
    pub username: Option<String>,
    /// Password, from a file or the environment.
    pub password: Option<Secret>,
    /// CA bundle for TLS.
    pub ca_file: Option<PathBuf>,
    /// Key prefix.
    pub key_prefix: String,
    /// Replicas to `WAIT` for after each acquire and renew.
    pub wait_replicas: u32,
    /// Sentinel addresses; when given, the primary is the one they name.
    pub sentinels: Option<Vec<String>>,
    /// The name the Sentinels monitor the primary under.
    pub sentinel_master: Option<String>,
    /// ACL user on the Sentinels.
    pub sentinel_username: Option<String>,
    /// The Sentinels' password, from a file or the environment.
    pub sentinel_password: Option<Secret>,
}

/// Kubernetes access settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeSettings {
    /// Kubeconfig path.
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    pub context: Option<String>,
    /// Namespace of the Lease.
    pub namespace: Option<String>,
}

impl KubeSettings {
    /// Where the clients' configuration comes from: the startup check and the connection
    /// look in the same places.
    pub fn client_options(&self) -> ClientOptions {
        let mut options = ClientOptions::default();
        options.kubeconfig = self.kubeconfig.clone();
        options.context = self.context.clone();
        options
    }
}

/// The validated, effective settings of `gateway-leader run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Which backend holds the lock.
    pub backend: Backend,
    /// Leader election off: always leader, under the `disabled` marker instead of a term.
    pub disabled: bool,
    /// The lock's name.
    pub lock_name: String,
    /// This replica's configured name (the incarnation id is added at start).
    pub identity: String,
    /// Lease, renew and retry durations.
    pub timing: Timing,
    /// Release the lock on graceful shutdown.
    pub release_on_shutdown: bool,
    /// How followers learn the lock changed.
    pub wakeup: Wakeup,
    /// Our Gateway API controllerName.
    pub controller_name: String,
    /// Where /healthz, /readyz and /metrics are served.
    pub health_addr: std::net::SocketAddr,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log_level: String,
    /// Kubernetes settings.
    pub kube: KubeSettings,
    /// etcd settings.
    pub etcd: EtcdSettings,
    /// Redis settings.
    pub redis: RedisSettings,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_parses_from_its_name_and_is_in_the_names() {
        for b in Backend::ALL {
            assert_eq!(Backend::parse(b.name()), Ok(b));
            assert!(Backend::NAMES.contains(b.name()), "{b}");
        }
    }
}
