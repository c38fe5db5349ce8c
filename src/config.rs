//! Settings from flags, `GATEWAY_LEADER_*` environment variables and a TOML or YAML file.
//!
//! Precedence: flag > environment > file > default. Everything is validated here, before any
//! backend is touched, and every error names the setting and what it accepts.

mod kubeconfig;
pub mod reference;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::input::{check_name, read_bounded, redact_userinfo};
use leader_lock::{Timing, TimingError};

/// The environment prefix of every setting.
pub const ENV_PREFIX: &str = "GATEWAY_LEADER";

/// The default lock name.
pub const DEFAULT_LOCK_NAME: &str = "gateway-leader-leader-election-lock";

/// The default Gateway API controller name.
pub const DEFAULT_CONTROLLER_NAME: &str = "gateway-leader.dev/gateway-controller";
/// Where health and metrics are served unless told otherwise (the Deployment's probes and the
/// metrics Service use this port).
pub const DEFAULT_HEALTH_ADDR: &str = "0.0.0.0:9090";

/// The key of `--config` (`GATEWAY_LEADER_CONFIG`): a setting, though not one a file can hold.
pub const CONFIG_KEY: &str = "config";

/// The pod's name from the downward API: the identity when none is configured.
pub const POD_NAME: &str = "POD_NAME";

/// The pod's namespace from the downward API: the Lease's namespace when none is configured.
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";

/// The characters an identity may hold besides ASCII letters and digits: what pod names and
/// hostnames use, plus `_` and `:`. Nothing invisible, blank or non-ASCII, so that an identity in a
/// lock record or a log line always reads as what it is.
pub const IDENTITY_CHARS: &str = "-._:";

/// The longest identity, in bytes: a pod name or a fully qualified hostname always fits.
pub const MAX_IDENTITY_BYTES: usize = 253;

/// The settings whose values are URLs: `--print-config` shows them without user info.
const URL_SETTINGS: &[&str] = &["etcd_endpoints", "redis_url"];

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

/// The flag spelling of a setting key.
pub fn flag(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

/// The environment variable of a setting key.
pub fn env_var(key: &str) -> String {
    format!("{ENV_PREFIX}_{}", key.to_uppercase())
}

/// A bad setting: which one, what was given, and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The setting's file key, or a description for errors not tied to one.
    pub key: String,
    /// What went wrong and what is accepted.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key == CONFIG_KEY || SETTINGS.iter().any(|s| s.key == self.key) {
            write!(
                f,
                "invalid {} ({}): {}",
                flag(&self.key),
                env_var(&self.key),
                self.message
            )
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

fn empty(key: &str) -> ConfigError {
    err(
        key,
        "an empty value is not accepted; leave the setting out to get its default",
    )
}

/// The process environment as the settings see it.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `GATEWAY_LEADER_*`, `POD_NAME` and `POD_NAMESPACE`.
    vars: BTreeMap<String, String>,
    /// `KUBECONFIG`, which holds paths and so need not be UTF-8.
    kubeconfig: Option<OsString>,
    /// `HOME`, for `~/.kube/config`.
    home: Option<OsString>,
}

impl Env {
    /// Keeps the variables the settings read. One of ours that is not UTF-8 is an error naming
    /// it; any other variable is ignored whatever it holds, as it is none of our business.
    pub fn from_os(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Self, ConfigError> {
        let mut env = Env::default();
        for (k, v) in vars {
            match k.to_str() {
                Some("KUBECONFIG") => env.kubeconfig = Some(v),
                Some("HOME") => env.home = Some(v),
                Some(name) if Self::is_ours(name) => {
                    let v = v.into_string().map_err(|_| {
                        err(
                            &format!("environment variable {name}"),
                            "the value is not valid UTF-8; accepted: UTF-8 text",
                        )
                    })?;
                    env.vars.insert(name.to_string(), v);
                }
                _ => {}
            }
        }
        Ok(env)
    }

    fn is_ours(name: &str) -> bool {
        name.starts_with(&format!("{ENV_PREFIX}_")) || name == POD_NAME || name == POD_NAMESPACE
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}

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
    /// The accepted spellings.
    pub const NAMES: &'static str = "kubernetes, etcd, redis";

    fn parse(s: &str) -> Result<Self, ConfigError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "kubernetes" | "k8s" => Ok(Backend::Kubernetes),
            "etcd" => Ok(Backend::Etcd),
            "redis" => Ok(Backend::Redis),
            other => Err(err(
                "lock_backend",
                format!(
                    "{other:?} is not a backend; accepted values: {}",
                    Self::NAMES
                ),
            )),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Kubernetes => "kubernetes",
            Backend::Etcd => "etcd",
            Backend::Redis => "redis",
        })
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

impl fmt::Display for Wakeup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Wakeup::Watch => "watch",
            Wakeup::Poll => "poll",
        })
    }
}

/// A secret that never shows in Debug output or `--print-config`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret's value, for handing to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
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

/// The raw, merged values before validation: key -> value.
pub struct Layers {
    merged: config::Config,
    env: Env,
}

impl Layers {
    /// Merges defaults, the config file, the environment and the flags given (key, value).
    pub fn load(
        file: Option<&Path>,
        env: Env,
        flags: &[(&'static str, String)],
    ) -> Result<Self, ConfigError> {
        let mut b = config::Config::builder();
        for s in SETTINGS {
            if let Some(d) = s.default {
                b = b
                    .set_default(s.key, d)
                    .map_err(|e| err(s.key, e.to_string()))?;
            }
        }
        if let Some(path) = file {
            b = b.add_source(read_file(path)?);
        }
        let vars: config::Map<String, String> = env
            .vars
            .iter()
            .filter(|(k, _)| SETTINGS.iter().any(|s| env_var(s.key) == **k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        b = b.add_source(
            config::Environment::with_prefix(ENV_PREFIX)
                .prefix_separator("_")
                .source(Some(vars)),
        );
        for (k, v) in flags {
            b = b
                .set_override(*k, v.as_str())
                .map_err(|e| err(k, e.to_string()))?;
        }
        let merged = b.build().map_err(|e| err("configuration", e.to_string()))?;
        Ok(Layers { merged, env })
    }

    /// The value of `key`, if given anywhere (or defaulted). A value given empty is an error: it
    /// is a mistake, never a way to ask for the default.
    fn get(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.merged.get::<config::Value>(key) {
            Ok(v) => match v.kind {
                config::ValueKind::Nil => Err(empty(key)),
                config::ValueKind::Table(_) | config::ValueKind::Array(_)
                    if key == "etcd_endpoints" =>
                {
                    let list: Vec<String> = self
                        .merged
                        .get(key)
                        .map_err(|e| err(key, format!("expected a list of endpoints: {e}")))?;
                    Ok(Some(list.join(",")))
                }
                config::ValueKind::Table(_) | config::ValueKind::Array(_) => {
                    Err(err(key, "expected a single value, found a table or list"))
                }
                _ => {
                    let v = v.into_string().map_err(|e| err(key, e.to_string()))?;
                    match v.trim() {
                        "" => Err(empty(key)),
                        v => Ok(Some(v.to_string())),
                    }
                }
            },
            Err(config::ConfigError::NotFound(_)) => Ok(None),
            Err(e) => Err(err(key, e.to_string())),
        }
    }

    fn bool(&self, key: &str) -> Result<bool, ConfigError> {
        let v = self.get(key)?.unwrap_or_default();
        match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(err(
                key,
                format!("{v:?} is not a boolean; accepted: true or false"),
            )),
        }
    }

    fn duration(&self, key: &str) -> Result<Duration, ConfigError> {
        let v = self.get(key)?.unwrap_or_default();
        parse_duration(&v).map_err(|m| err(key, m))
    }

    /// A file setting and the file's bytes: a regular file of at most 1 MiB, whatever reads it
    /// later, so that a FIFO or `/dev/zero` is named at startup instead of hanging a reader.
    fn file(&self, key: &str) -> Result<Option<(PathBuf, Vec<u8>)>, ConfigError> {
        let Some(p) = self.get(key)? else {
            return Ok(None);
        };
        let path = PathBuf::from(&p);
        let bytes = read_bounded(&path).map_err(|e| err(key, e))?;
        Ok(Some((path, bytes)))
    }

    fn path(&self, key: &str) -> Result<Option<PathBuf>, ConfigError> {
        Ok(self.file(key)?.map(|(path, _)| path))
    }

    fn secret(&self, key: &str, file_key: &str) -> Result<Option<Secret>, ConfigError> {
        if let Some((path, bytes)) = self.file(file_key)? {
            let s = String::from_utf8(bytes)
                .map_err(|_| err(file_key, format!("{} is not UTF-8 text", path.display())))?;
            let s = s.trim_end_matches(['\r', '\n']).to_string();
            if s.is_empty() {
                return Err(err(file_key, format!("{} is empty", path.display())));
            }
            return Ok(Some(Secret(s)));
        }
        Ok(self.get(key)?.map(Secret))
    }

    /// This replica's name: the setting, else `POD_NAME`, else the hostname; checked wherever
    /// it came from, and an error names that source.
    fn identity(&self, hostname: impl FnOnce() -> String) -> Result<String, ConfigError> {
        let key = "leader_election_identity";
        if let Some(id) = self.get(key)? {
            check_identity(&id).map_err(|m| err(key, m))?;
            return Ok(id);
        }
        if let Some(pod) = self.env.get(POD_NAME) {
            check_identity(pod).map_err(|m| {
                err(
                    POD_NAME,
                    format!("{m} (or set {} to override it)", flag(key)),
                )
            })?;
            return Ok(pod.to_string());
        }
        let host = hostname();
        check_identity(&host).map_err(|m| {
            err(
                key,
                format!("the hostname, the default when POD_NAME is not set: {m}"),
            )
        })?;
        Ok(host)
    }

    /// The Lease's namespace: the setting, else `POD_NAMESPACE`, else none (the kubeconfig's).
    fn namespace(&self) -> Result<Option<String>, ConfigError> {
        let key = "leader_election_namespace";
        if let Some(ns) = self.get(key)? {
            validate_dns_label(&ns).map_err(|m| err(key, m))?;
            return Ok(Some(ns));
        }
        match self.env.get(POD_NAMESPACE) {
            Some(ns) => {
                validate_dns_label(ns).map_err(|m| err(POD_NAMESPACE, m))?;
                Ok(Some(ns.to_string()))
            }
            None => Ok(None),
        }
    }

    /// Validates everything and builds the effective settings; `hostname` gives the identity
    /// when neither the setting nor `POD_NAME` does.
    pub fn settings(&self, hostname: impl FnOnce() -> String) -> Result<Settings, ConfigError> {
        let backend = Backend::parse(&self.get("lock_backend")?.unwrap_or_default())?;
        let lock_name = self.get("leader_election_lock_name")?.unwrap_or_default();
        validate_dns_subdomain(&lock_name).map_err(|m| err("leader_election_lock_name", m))?;
        let identity = self.identity(hostname)?;
        let timing = Timing::new(
            self.duration("lease_duration")?,
            self.duration("renew_deadline")?,
            self.duration("retry_period")?,
        )
        .map_err(|e| err(&timing_key(&e), e.to_string()))?;
        let controller_name = self.get("controller_name")?.unwrap_or_default();
        validate_controller_name(&controller_name).map_err(|m| err("controller_name", m))?;
        let health_addr = self.get("health_addr")?.unwrap_or_default();
        let health_addr: std::net::SocketAddr = health_addr.parse().map_err(|_| {
            err(
                "health_addr",
                format!(
                    "{health_addr:?} is not a socket address; accepted: IP:PORT such as \
                     0.0.0.0:9090, 127.0.0.1:0 or [::]:9090"
                ),
            )
        })?;
        let log_format = match self.get("log_format")?.unwrap_or_default().as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(err(
                    "log_format",
                    format!("{other:?}; accepted values: text, json"),
                ))
            }
        };
        let wakeup = match self.get("wakeup")?.unwrap_or_default().as_str() {
            "watch" => Wakeup::Watch,
            "poll" => Wakeup::Poll,
            other => {
                return Err(err(
                    "wakeup",
                    format!("{other:?}; accepted values: watch, poll"),
                ))
            }
        };
        let namespace = self.namespace()?;
        let endpoints: Vec<String> = self
            .get("etcd_endpoints")?
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let etcd = EtcdSettings {
            endpoints,
            ca_file: self.path("etcd_ca_file")?,
            cert_file: self.path("etcd_cert_file")?,
            key_file: self.path("etcd_key_file")?,
            username: self.get("etcd_username")?,
            password: self.secret("etcd_password", "etcd_password_file")?,
            key_prefix: self.get("etcd_key_prefix")?.unwrap_or_default(),
        };
        let redis = RedisSettings {
            url: self.get("redis_url")?.unwrap_or_default(),
            username: self.get("redis_username")?,
            password: self.secret("redis_password", "redis_password_file")?,
            ca_file: self.path("redis_ca_file")?,
            key_prefix: self.get("redis_key_prefix")?.unwrap_or_default(),
        };
        let kube = KubeSettings {
            kubeconfig: self.path("kubeconfig")?,
            context: self.get("kube_context")?,
            namespace,
        };
        kubeconfig::check(&kube, &self.env)?;
        Ok(Settings {
            backend,
            disabled: self.bool("leader_election_disable")?,
            lock_name,
            identity,
            timing,
            release_on_shutdown: self.bool("release_on_shutdown")?,
            wakeup,
            controller_name,
            health_addr,
            log_format,
            log_level: self.get("log_level")?.unwrap_or_default(),
            kube,
            etcd,
            redis,
        })
    }

    /// The effective raw values for `--print-config`, secrets redacted, as TOML lines.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for s in SETTINGS {
            let v = match self.get(s.key) {
                Ok(Some(_)) if s.secret => "\"<redacted>\"".to_string(),
                Ok(Some(v)) if URL_SETTINGS.contains(&s.key) => {
                    let urls: Vec<String> = v.split(',').map(redact_userinfo).collect();
                    format!("{:?}", urls.join(","))
                }
                Ok(Some(v)) if v == "true" || v == "false" => v,
                Ok(Some(v)) => format!("{v:?}"),
                Ok(None) => continue,
                Err(e) => format!("# {e}"),
            };
            out.push_str(&format!("{} = {v}\n", s.key));
        }
        out
    }
}

/// Reads the `--config` file: a regular file of at most 1 MiB, UTF-8, in a format known by its
/// extension, YAML without anchors or aliases, and only known keys. The bytes are read once, with
/// the bound, and handed to `config` as a string, so that `config` never opens the file itself.
fn read_file(
    path: &Path,
) -> Result<config::File<config::FileSourceString, config::FileFormat>, ConfigError> {
    let key = CONFIG_KEY;
    let shown = path.display();
    let format = match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => config::FileFormat::Toml,
        Some("yaml" | "yml") => config::FileFormat::Yaml,
        _ => {
            return Err(err(
                key,
                format!("{shown}: unknown format; accepted: a .toml, .yaml or .yml file"),
            ))
        }
    };
    let bytes = read_bounded(path).map_err(|e| err(key, e))?;
    let text =
        String::from_utf8(bytes).map_err(|_| err(key, format!("{shown} is not UTF-8 text")))?;
    if format == config::FileFormat::Yaml {
        check_yaml(&text).map_err(|e| err(key, format!("{shown}: {e}")))?;
    }
    // Unknown keys in a file are typos: refuse them rather than silently ignore them.
    let parsed = config::Config::builder()
        .add_source(config::File::from_str(&text, format))
        .build()
        .map_err(|e| err(key, format!("{shown}: {}", without_excerpt(&e.to_string()))))?;
    let table = parsed
        .cache
        .into_table()
        .map_err(|e| err(key, format!("{shown}: {e}")))?;
    let known: BTreeSet<&str> = SETTINGS.iter().map(|s| s.key).collect();
    let unknown: Vec<String> = table
        .keys()
        .filter(|k| !known.contains(k.as_str()))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(err(
            key,
            format!(
                "{shown}: unknown setting(s) {}; see `gateway-leader run --help` for the accepted keys",
                unknown.join(", ")
            ),
        ));
    }
    Ok(config::File::from_str(&text, format))
}

/// How deep a settings file may nest: settings are flat (a list of endpoints is the deepest), so
/// this is generous, and it keeps the recursive conversion inside `config` far from the stack's end.
const MAX_YAML_DEPTH: usize = 16;

/// Checks a YAML settings file with the YAML event parser that `config` itself uses, before
/// `config` loads it: no anchors or aliases, because `config` expands every alias into a copy (a
/// "billion laughs" file of a few hundred bytes grows without bound) and flat settings have no use
/// for them; and no nesting beyond [`MAX_YAML_DEPTH`].
fn check_yaml(text: &str) -> Result<(), String> {
    use yaml_rust2::parser::{Event, Parser};
    let mut parser = Parser::new_from_str(text);
    let mut depth = 0usize;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| e.to_string())?;
        let refused = match event {
            Event::StreamEnd => return Ok(()),
            Event::Alias(_) => true,
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                depth += 1;
                if depth > MAX_YAML_DEPTH {
                    return Err(format!(
                        "nested deeper than {MAX_YAML_DEPTH} levels (at line {} column {})",
                        mark.line(),
                        mark.col() + 1
                    ));
                }
                anchor != 0
            }
            Event::SequenceEnd | Event::MappingEnd => {
                depth = depth.saturating_sub(1);
                false
            }
            Event::Scalar(_, _, anchor, _) => anchor != 0,
            _ => false,
        };
        if refused {
            return Err(format!(
                "YAML anchors and aliases are not accepted (at line {} column {}); write the value out",
                mark.line(),
                mark.col() + 1
            ));
        }
    }
}

/// A parser's message on one line, without the excerpt of the offending line that TOML and
/// kubeconfig errors carry: that line may hold a password or a token.
pub(crate) fn without_excerpt(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| {
            let excerpt = l
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start()
                .starts_with('|')
                || l.starts_with("-->");
            !l.is_empty() && !excerpt
        })
        .collect::<Vec<_>>()
        .join(": ")
}

/// The setting a timing error is about, so that the message names its flag; rules between
/// settings are reported under "timing".
fn timing_key(e: &TimingError) -> String {
    match e {
        TimingError::Zero { setting } | TimingError::OutOfRange { setting, .. } => {
            setting.replace('-', "_")
        }
        _ => "timing".to_string(),
    }
}

/// Parses `15s`, `1500ms`, `2m` or a bare number of seconds.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        if (0.0..1e9).contains(&secs) {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(v).map_err(|e| {
        format!(
            "{v:?} is not a duration ({e}); accepted: e.g. 15s, 1500ms, 2m, or seconds as a number"
        )
    })
}

/// Checks a Kubernetes DNS-1123 subdomain: lowercase alphanumerics, '-' and '.', at most 253.
pub fn validate_dns_subdomain(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a DNS-1123 subdomain; accepted: at most 253 characters of lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
        ))
    }
}

/// Checks a DNS-1123 label (a namespace name).
pub fn validate_dns_label(s: &str) -> Result<(), String> {
    if s.len() <= 63 && !s.contains('.') && validate_dns_subdomain(s).is_ok() {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a DNS-1123 label; accepted: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
        ))
    }
}

/// Checks an identity: see [`IDENTITY_CHARS`] and [`MAX_IDENTITY_BYTES`].
pub fn check_identity(s: &str) -> Result<(), String> {
    check_name(s, IDENTITY_CHARS, MAX_IDENTITY_BYTES)
}

/// Checks a Gateway API controllerName: `domain/path`.
pub fn validate_controller_name(s: &str) -> Result<(), String> {
    let bad = || {
        format!("{s:?} is not a controller name; accepted: at most 253 bytes, a domain-prefixed path such as example.net/gateway-controller")
    };
    let (domain, path) = s.split_once('/').ok_or_else(bad)?;
    if s.len() > 253 || validate_dns_subdomain(domain).is_err() || path.is_empty() {
        return Err(bad());
    }
    if !path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c))
    {
        return Err(bad());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env::from_os(vars.iter().map(|(k, v)| (k.into(), v.into()))).expect("UTF-8")
    }

    fn load(
        vars: &[(&str, &str)],
        flags: &[(&'static str, &str)],
    ) -> Result<Settings, ConfigError> {
        let flags: Vec<(&'static str, String)> =
            flags.iter().map(|(k, v)| (*k, v.to_string())).collect();
        Layers::load(None, env(vars), &flags)?.settings(|| "host-1".to_string())
    }

    #[test]
    fn defaults() {
        let s = load(&[], &[]).expect("defaults are valid");
        assert_eq!(s.backend, Backend::Kubernetes);
        assert!(!s.disabled);
        assert_eq!(s.lock_name, DEFAULT_LOCK_NAME);
        assert_eq!(s.identity, "host-1");
        assert_eq!(s.timing, Timing::default());
        assert!(s.release_on_shutdown);
        assert_eq!(s.wakeup, Wakeup::Watch);
        assert_eq!(s.etcd.endpoints, vec!["http://127.0.0.1:2379".to_string()]);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("NaN").is_err());
        assert!(parse_duration("1e300").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn names() {
        assert!(validate_dns_subdomain("gateway-leader.lock-1").is_ok());
        for bad in ["", "A", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(validate_dns_subdomain(bad).is_err(), "{bad:?}");
        }
        assert!(validate_dns_label("gateway-system").is_ok());
        assert!(validate_dns_label("a.b").is_err());
        assert!(validate_controller_name("example.net/gateway-controller").is_ok());
        for bad in ["nodomain", "/path", "Example.net/x", "example.net/"] {
            assert!(validate_controller_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn env_and_flags_layer() {
        let s = load(
            &[
                ("GATEWAY_LEADER_LOCK_BACKEND", "redis"),
                ("GATEWAY_LEADER_REDIS_PASSWORD", "pw"),
                ("GATEWAY_LEADER_UNRELATED", "ignored"),
            ],
            &[("leader_election_disable", "true")],
        )
        .expect("valid");
        assert_eq!(s.backend, Backend::Redis);
        assert!(s.disabled);
        assert_eq!(s.redis.password.as_ref().map(Secret::expose), Some("pw"));
        assert_eq!(format!("{:?}", s.redis.password), "Some(<redacted>)");
    }

    #[test]
    fn environment() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(b"\xff".to_vec());
        let env = Env::from_os([
            ("UNRELATED".into(), bad()),
            ("KUBECONFIG".into(), bad()),
            ("POD_NAME".into(), "pod-0".into()),
        ])
        .expect("only our variables must be UTF-8");
        assert_eq!(env.get(POD_NAME), Some("pod-0"));
        assert_eq!(env.get("UNRELATED"), None);
        let e = Env::from_os([("GATEWAY_LEADER_X".into(), bad())]).unwrap_err();
        assert!(e.to_string().contains("GATEWAY_LEADER_X"), "{e}");
    }

    #[test]
    fn yaml_without_anchors_and_shallow() {
        assert_eq!(check_yaml("a: 1\nb: [x, y]\n"), Ok(()));
        let e = check_yaml("a: &x 1\nb: *x\n").unwrap_err();
        assert!(
            e.contains("anchors and aliases") && e.contains("line 1"),
            "{e}"
        );
        let deep = format!("a: {}{}", "[".repeat(20), "]".repeat(20));
        assert!(check_yaml(&deep).unwrap_err().contains("deeper than 16"));
        assert!(check_yaml("a: [").is_err());
    }

    #[test]
    fn parser_excerpts_are_dropped() {
        let toml = "TOML parse error at line 1, column 17\n  |\n1 | redis_password = \"secret\n  |                 ^\ninvalid basic string\n";
        assert_eq!(
            without_excerpt(toml),
            "TOML parse error at line 1, column 17: invalid basic string"
        );
    }

    #[test]
    fn errors_name_the_setting() {
        let e = load(&[("GATEWAY_LEADER_RELEASE_ON_SHUTDOWN", "maybe")], &[]).unwrap_err();
        assert_eq!(e.key, "release_on_shutdown");
        let text = e.to_string();
        assert!(
            text.contains("--release-on-shutdown") && text.contains("true or false"),
            "{text}"
        );
        let e = load(&[], &[("wakeup", "push")]).unwrap_err();
        assert!(e.to_string().contains("watch, poll"), "{e}");
        assert_eq!(
            load(&[], &[("wakeup", "poll")]).ok().map(|s| s.wakeup),
            Some(Wakeup::Poll)
        );
        let e = load(&[], &[("log_format", "xml")]).unwrap_err();
        assert!(e.to_string().contains("text, json"), "{e}");
    }
}
