//! The validated, effective settings of `gateway-leader run`, and the choices among them.

use std::fmt;
use std::path::PathBuf;

pub use gateway_leader_status::compute::AddressService;
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

/// Where `gateway-leader proxy` (and `exec` with a proxy) listens. The proxy sends requests with
/// this replica's own credentials, so only this host may reach it: a loopback address, or a Unix
/// socket that only its owner may open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyListen {
    /// A loopback `IP:PORT` (`127.0.0.0/8` or `[::1]`; `localhost:PORT` is `127.0.0.1:PORT`).
    Tcp(std::net::SocketAddr),
    /// `unix:PATH`: a Unix socket, created with mode 0600.
    Unix(PathBuf),
}

impl ProxyListen {
    /// The default of `gateway-leader proxy`, where `kubectl proxy` listens too.
    pub const DEFAULT: &'static str = "127.0.0.1:8001";

    /// The longest socket path: `sun_path` holds 108 bytes, the terminating NUL included.
    const MAX_UNIX_PATH: usize = 107;

    /// The check of `proxy_listen`.
    pub(super) fn parse(s: &str) -> Result<Self, String> {
        const ACCEPTED: &str = "accepted: a loopback IP:PORT (127.0.0.1:8001, [::1]:8001, \
                                localhost:8001) or unix:PATH";
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() || path.len() > Self::MAX_UNIX_PATH || path.contains('\0') {
                return Err(format!(
                    "{s:?}: a socket path of 1 to {} bytes; {ACCEPTED}",
                    Self::MAX_UNIX_PATH
                ));
            }
            return Ok(ProxyListen::Unix(PathBuf::from(path)));
        }
        let addr: std::net::SocketAddr = match s.strip_prefix("localhost:") {
            Some(port) => port
                .parse::<u16>()
                .map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
                .map_err(|_| format!("{s:?} is not an address; {ACCEPTED}"))?,
            None => s
                .parse()
                .map_err(|_| format!("{s:?} is not an address; {ACCEPTED}"))?,
        };
        if !addr.ip().is_loopback() {
            return Err(format!(
                "{s:?} is not a loopback address: the proxy sends requests with this replica's \
                 credentials, so only this host may reach it; {ACCEPTED}"
            ));
        }
        Ok(ProxyListen::Tcp(addr))
    }
}

impl fmt::Display for ProxyListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyListen::Tcp(a) => write!(f, "{a}"),
            ProxyListen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A Lease by namespace and name: `--proxy-election-lease NAMESPACE/NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseName {
    /// Its namespace, a DNS label.
    pub namespace: String,
    /// Its name, a DNS subdomain.
    pub name: String,
}

impl LeaseName {
    /// The check of `proxy_election_lease`.
    pub(super) fn parse(s: &str) -> Result<Self, String> {
        const ACCEPTED: &str = "accepted: NAMESPACE/NAME, the namespace and name the \
                                controller's leader election is given (contour's \
                                --leader-election-resource-namespace and -name, for example)";
        let (namespace, name) = namespaced(s, ACCEPTED, super::checks::validate_dns_subdomain)?;
        Ok(LeaseName { namespace, name })
    }
}

/// `NAMESPACE/NAME`: a namespace (a DNS label) and a name that `name_check` accepts; an error
/// quotes the input, says which half is wrong, and ends with `accepted`.
fn namespaced(
    s: &str,
    accepted: &str,
    name_check: fn(&str) -> Result<(), String>,
) -> Result<(String, String), String> {
    let Some((namespace, name)) = s.split_once('/') else {
        return Err(format!("{s:?} has no '/'; {accepted}"));
    };
    super::checks::validate_dns_label(namespace)
        .map_err(|m| format!("{s:?}: the namespace {m}; {accepted}"))?;
    name_check(name).map_err(|m| format!("{s:?}: the name {m}; {accepted}"))?;
    Ok((namespace.to_string(), name.to_string()))
}

/// The check of `gateway_addresses_service`: the Service in front of the data plane, whose
/// addresses are the Gateways' addresses.
pub(super) fn parse_address_service(s: &str) -> Result<AddressService, String> {
    const ACCEPTED: &str = "accepted: NAMESPACE/NAME of the Service through which the data \
                            plane is reached";
    let (namespace, name) = namespaced(s, ACCEPTED, super::checks::validate_dns_label)?;
    Ok(AddressService { namespace, name })
}

impl fmt::Display for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What `gateway-leader exec` does when its child ends or is stopped at the end of a leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecRestart {
    /// Start it again at the next leadership (and again if it exits while leading).
    Always,
    /// Run it once: gateway-leader exits with the child's code.
    Never,
}

impl ExecRestart {
    /// The check of `exec_restart`.
    pub(super) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(ExecRestart::Always),
            "never" => Ok(ExecRestart::Never),
            other => Err(format!("{other:?}; accepted values: always, never")),
        }
    }
}

/// The settings of `gateway-leader exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecSettings {
    /// Between SIGTERM and SIGKILL.
    pub grace: std::time::Duration,
    /// Whether the child is started again.
    pub restart: ExecRestart,
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
    /// The Service whose addresses are the Gateways' addresses (`status.addresses`), if any.
    pub gateway_addresses_service: Option<AddressService>,
    /// Where /healthz, /readyz, /metrics and /leader are served.
    pub health_addr: std::net::SocketAddr,
    /// `/readyz` fails on every replica but the valid leader.
    pub readiness_follows_leadership: bool,
    /// Where the write-gating Kubernetes API proxy listens: `proxy` uses
    /// [`ProxyListen::DEFAULT`] when none is given, `exec` runs no proxy then.
    pub proxy_listen: Option<ProxyListen>,
    /// The Lease of the controller's own leader election, which the proxy answers itself from
    /// this replica's leadership (docs/sidecar.md).
    pub proxy_election_lease: Option<LeaseName>,
    /// `exec`'s child.
    pub exec: ExecSettings,
    /// The runtime's worker threads, when given (else: `run` one per core, `proxy` and `exec`
    /// one).
    pub worker_threads: Option<usize>,
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

    #[test]
    fn the_proxy_listens_only_where_this_host_alone_reaches_it() {
        for ok in [
            "127.0.0.1:8001",
            "127.1.2.3:0",
            "[::1]:8001",
            "localhost:8001",
        ] {
            assert!(
                matches!(ProxyListen::parse(ok), Ok(ProxyListen::Tcp(a)) if a.ip().is_loopback()),
                "{ok}"
            );
        }
        assert_eq!(
            ProxyListen::parse("unix:/run/gl.sock"),
            Ok(ProxyListen::Unix(PathBuf::from("/run/gl.sock")))
        );
        let long = format!("unix:/{}", "a".repeat(200));
        for bad in [
            "0.0.0.0:8001",
            "[::]:8001",
            "10.0.0.1:8001",
            "example.com:80",
            "8001",
            "",
            "unix:",
            long.as_str(),
            "localhost:99999",
            "unix:/a\0b",
        ] {
            let e = ProxyListen::parse(bad).expect_err(bad);
            assert!(e.contains("accepted: a loopback IP:PORT"), "{bad}: {e}");
        }
        assert_eq!(ProxyListen::DEFAULT, "127.0.0.1:8001");
        assert!(ProxyListen::parse(ProxyListen::DEFAULT).is_ok());
    }
}
