//! Every setting of `gateway-leader run`: its key, default, whether it is a secret, and its help.

/// The default lock name.
pub const DEFAULT_LOCK_NAME: &str = "gateway-leader-leader-election-lock";

/// The default Gateway API controller name.
pub const DEFAULT_CONTROLLER_NAME: &str = "gateway-leader.dev/gateway-controller";
/// Where health and metrics are served unless told otherwise (the Deployment's probes and the
/// metrics Service use this port).
pub const DEFAULT_HEALTH_ADDR: &str = "0.0.0.0:9090";

/// The key of `--config` (`GATEWAY_LEADER_CONFIG`): a setting, though not one a file can hold.
pub const CONFIG_KEY: &str = "config";

/// One setting: its key in files, its default, and whether it is a secret.
#[derive(Debug)]
pub struct SettingSpec {
    /// The key in a config file (`lease_duration`); the flag is `--lease-duration`, the
    /// environment variable `GATEWAY_LEADER_LEASE_DURATION`.
    pub key: &'static str,
    /// The default, if any.
    pub default: Option<&'static str>,
    /// Redacted by `--print-config`; never a flag.
    pub secret: bool,
    /// One line for the README's reference.
    pub help: &'static str,
}

macro_rules! spec {
    ($key:literal, $default:expr, $secret:literal, $help:literal) => {
        SettingSpec {
            key: $key,
            default: $default,
            secret: $secret,
            help: $help,
        }
    };
}

/// Every setting, in the order `--print-config` shows them.
pub const SETTINGS: &[SettingSpec] = &[
    spec!(
        "lock_backend",
        Some("kubernetes"),
        false,
        "where the lock lives: kubernetes, etcd or redis"
    ),
    spec!(
        "leader_election_disable",
        Some("false"),
        false,
        "turn leader election off: this replica always writes (term shown as disabled)"
    ),
    spec!(
        "leader_election_lock_name",
        Some(DEFAULT_LOCK_NAME),
        false,
        "the lock's name (a DNS-1123 subdomain)"
    ),
    spec!(
        "leader_election_identity",
        None,
        false,
        "this replica's name; default POD_NAME, else the hostname"
    ),
    spec!(
        "leader_election_namespace",
        None,
        false,
        "namespace of the Lease (kubernetes); default POD_NAMESPACE, else the kubeconfig's"
    ),
    spec!(
        "lease_duration",
        Some("15s"),
        false,
        "how long a lease lasts without renewal"
    ),
    spec!(
        "renew_deadline",
        Some("10s"),
        false,
        "how long after its last successful renew the leader may still write"
    ),
    spec!(
        "retry_period",
        Some("2s"),
        false,
        "how often the leader renews and a follower without a watch polls"
    ),
    spec!(
        "release_on_shutdown",
        Some("true"),
        false,
        "release the lock on SIGTERM so a follower takes over at once"
    ),
    spec!(
        "wakeup",
        Some("watch"),
        false,
        "how followers learn the lock changed: watch, or poll (client-go's way, a baseline)"
    ),
    spec!(
        "controller_name",
        Some(DEFAULT_CONTROLLER_NAME),
        false,
        "the Gateway API controllerName this controller owns"
    ),
    spec!(
        "health_addr",
        Some(DEFAULT_HEALTH_ADDR),
        false,
        "address of the HTTP server for /healthz, /readyz and /metrics (port 0: any free port)"
    ),
    spec!(
        "log_format",
        Some("text"),
        false,
        "log format: text or json"
    ),
    spec!(
        "log_level",
        Some("info"),
        false,
        "log filter: a level or target=level directives, e.g. info or gateway_leader=debug (a valid RUST_LOG wins)"
    ),
    spec!(
        "kubeconfig",
        None,
        false,
        "kubeconfig path (else KUBECONFIG, ~/.kube/config, or in-cluster)"
    ),
    spec!("kube_context", None, false, "kubeconfig context"),
    spec!(
        "etcd_endpoints",
        Some("http://127.0.0.1:2379"),
        false,
        "comma-separated etcd endpoints"
    ),
    spec!(
        "etcd_ca_file",
        None,
        false,
        "CA bundle (PEM) to verify etcd"
    ),
    spec!(
        "etcd_cert_file",
        None,
        false,
        "client certificate (PEM) for etcd"
    ),
    spec!("etcd_key_file", None, false, "client key (PEM) for etcd"),
    spec!("etcd_username", None, false, "etcd user"),
    spec!(
        "etcd_password_file",
        None,
        false,
        "file holding the etcd password"
    ),
    spec!(
        "etcd_password",
        None,
        true,
        "etcd password (environment or file only)"
    ),
    spec!(
        "etcd_key_prefix",
        Some("/gateway-leader/"),
        false,
        "prefix of the etcd lock key"
    ),
    spec!(
        "redis_url",
        Some("redis://127.0.0.1:6379"),
        false,
        "redis:// or rediss:// URL, without user or password"
    ),
    spec!("redis_username", None, false, "Redis ACL user"),
    spec!(
        "redis_password_file",
        None,
        false,
        "file holding the Redis password"
    ),
    spec!(
        "redis_password",
        None,
        true,
        "Redis password (environment or file only)"
    ),
    spec!(
        "redis_ca_file",
        None,
        false,
        "CA bundle (PEM) to verify a rediss:// server"
    ),
    spec!(
        "redis_key_prefix",
        Some("gateway-leader"),
        false,
        "prefix of the Redis keys"
    ),
];
