//! Every setting of `gateway-leader run`, declared once.
//!
//! One entry in the `settings!` list at the end of this file gives a setting its key
//! (`lease_duration` in a file, `--lease-duration` on the command line,
//! `GATEWAY_LEADER_LEASE_DURATION` in the environment, spelled by `names.rs`), whether it is a
//! flag, a switch or a secret (never a flag), its default, its check (the typed parse that turns
//! the raw text into its value, or says what is accepted), and its help. From that one list the
//! macro expands:
//!
//! - [`RunArgs`], the clap flags of `gateway-leader run`, with the help and default;
//! - [`RunArgs::overrides`], the flags given, as the top layer;
//! - [`SETTINGS`], which the layers take defaults and known file keys from, `--print-config`
//!   its order and redaction, and docs/configuration.md its reference (`reference.rs`);
//! - `Values`, one checked, typed getter per setting, from which `Layers` builds the
//!   effective `Settings`.
//!
//! Why a declarative macro rather than clap's `env` attribute: clap would read the environment
//! itself, where the settings read an injected [`super::Env`] (which refuses a non-UTF-8
//! `GATEWAY_LEADER_*` variable by name, in one line); it treats an empty variable as unset, where
//! an empty value is an error here; it parses `--leader-election-disable`'s variable with its own
//! boolean spellings; and it has no notion of a setting that is an environment variable and a
//! file key but never a flag (the secrets). Keeping clap to the flags and the `config` crate to
//! the layers leaves every accepted and refused input as it was, with one list to change.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::checks::{
    bounded_file, check_identity, checked, comma_list, exec_grace, parse_bool, parse_duration,
    parse_socket_addr, replica_count, text, validate_controller_name, validate_dns_label,
    validate_dns_subdomain, validate_filter, worker_threads,
};
use super::effective::{
    parse_address_service, AddressService, Backend, ExecRestart, LeaseName, LogFormat, ProxyListen,
    Wakeup,
};
use super::error::ConfigError;
use super::secret::Secret;

/// The default lock name.
pub const DEFAULT_LOCK_NAME: &str = "gateway-leader-leader-election-lock";

/// The default Gateway API controller name.
pub use gateway_leader_status::DEFAULT_CONTROLLER_NAME;
/// Where health and metrics are served unless told otherwise (the Deployment's probes and the
/// metrics Service use this port).
pub const DEFAULT_HEALTH_ADDR: &str = "0.0.0.0:9090";

/// The key of `--config` (`GATEWAY_LEADER_CONFIG`): a setting, though not one a file can hold.
pub const CONFIG_KEY: &str = "config";

/// How a value is written: what shapes a file may give it in, and how `--print-config` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// One value, shown as given.
    Plain,
    /// A URL, shown without its user info.
    Url,
    /// Comma-separated URLs, or a list in a file; each shown without its user info.
    UrlList,
}

/// One setting as the layers, `--print-config` and the reference see it.
#[derive(Debug)]
pub struct SettingSpec {
    /// The key in a config file (`lease_duration`); the flag is `--lease-duration`, the
    /// environment variable `GATEWAY_LEADER_LEASE_DURATION`.
    pub key: &'static str,
    /// The default, if any.
    pub default: Option<&'static str>,
    /// Redacted by `--print-config`; never a flag.
    pub secret: bool,
    /// How the value is written and shown.
    pub form: Form,
    /// One line for the reference in docs/configuration.md and `gateway-leader run --help`.
    pub help: &'static str,
}

/// The help of a flag: the setting's help, and its default when it has one.
fn flag_help(help: &str, default: Option<&str>) -> String {
    match default {
        Some(d) => format!("{help} [default: {d}]"),
        None => help.to_string(),
    }
}

/// `Some(default)` when the entry has one.
macro_rules! default {
    () => {
        None
    };
    ($default:expr) => {
        Some($default)
    };
}

/// Whether the entry is a secret: an environment variable and a file key, never a flag.
macro_rules! is_secret {
    (secret) => {
        true
    };
    ($kind:ident) => {
        false
    };
}

/// The entry's form, [`Form::Plain`] unless it says otherwise.
macro_rules! form {
    () => {
        Form::Plain
    };
    ($form:ident) => {
        Form::$form
    };
}

/// The fields of [`RunArgs`], one per flag or switch, accumulated in order; a secret has none.
macro_rules! run_args {
    ([$($fields:tt)*]) => {
        /// Flags of `gateway-leader run`. Every flag also has a `GATEWAY_LEADER_*` environment
        /// variable and a key in the `--config` file; flags win over the environment, which wins
        /// over the file. Generated from the settings' one definition (`config/settings.rs`).
        #[derive(Debug, clap::Args, Default)]
        pub struct RunArgs {
            /// A TOML or YAML file with settings (keys as in `--print-config`).
            #[arg(long, env = "GATEWAY_LEADER_CONFIG", value_name = "FILE")]
            pub config: Option<PathBuf>,
            /// Print the effective settings (secrets redacted) and exit.
            #[arg(long)]
            pub print_config: bool,
            $($fields)*
        }
    };
    ([$($fields:tt)*] $key:ident flag($value:literal) [$($default:expr)?] $help:literal;
     $($rest:tt)*) => {
        run_args!([$($fields)*
            #[doc = $help]
            #[arg(long, value_name = $value, help = flag_help($help, default!($($default)?)))]
            pub $key: Option<String>,
        ] $($rest)*);
    };
    ([$($fields:tt)*] $key:ident switch [$($default:expr)?] $help:literal; $($rest:tt)*) => {
        run_args!([$($fields)*
            #[doc = $help]
            #[arg(long, help = flag_help($help, default!($($default)?)))]
            pub $key: bool,
        ] $($rest)*);
    };
    ([$($fields:tt)*] $key:ident secret [$($default:expr)?] $help:literal; $($rest:tt)*) => {
        run_args!([$($fields)*] $($rest)*);
    };
}

/// Pushes the override of one flag, if it was given.
macro_rules! push_override {
    ($args:ident, $out:ident, $key:ident flag) => {
        if let Some(v) = &$args.$key {
            $out.push((stringify!($key), v.clone()));
        }
    };
    ($args:ident, $out:ident, $key:ident switch) => {
        if $args.$key {
            $out.push((stringify!($key), "true".to_string()));
        }
    };
    ($args:ident, $out:ident, $key:ident secret) => {};
}

/// The checked getter of one setting: its value through its check, the error naming it. With a
/// default, the value is always there.
macro_rules! getter {
    ($key:ident: $ty:ty, $check:expr, []) => {
        #[doc = concat!("`", stringify!($key), "`, checked, if given.")]
        fn $key(&self) -> Result<Option<$ty>, ConfigError> {
            let key = stringify!($key);
            let Some(v) = self.raw(key)? else {
                return Ok(None);
            };
            ($check)(&v)
                .map(Some)
                .map_err(|m| ConfigError::invalid(key, m))
        }
    };
    ($key:ident: $ty:ty, $check:expr, [$default:expr]) => {
        #[doc = concat!("`", stringify!($key), "`, checked, or its default.")]
        fn $key(&self) -> Result<$ty, ConfigError> {
            let key = stringify!($key);
            // The default is a layer, so a value is always there; were it not, the empty text
            // is refused by the check like any other bad value.
            let v = self.raw(key)?.unwrap_or_default();
            ($check)(&v).map_err(|m| ConfigError::invalid(key, m))
        }
    };
}

/// Expands the one list of settings; see the module docs. An entry is
/// `key: Type { flag("VALUE") | switch | secret, [default: "text",] [form: Url | UrlList,]
/// check: fn(&str) -> Result<Type, String>, help: "…" }`.
macro_rules! settings {
    ($(
        $key:ident: $ty:ty {
            $kind:ident $(($value:literal))?,
            $(default: $default:expr,)?
            $(form: $form:ident,)?
            check: $check:expr,
            help: $help:literal $(,)?
        }
    ),* $(,)?) => {
        /// Every setting, in the order `--print-config` shows them.
        pub const SETTINGS: &[SettingSpec] = &[$(
            SettingSpec {
                key: stringify!($key),
                default: default!($($default)?),
                secret: is_secret!($kind),
                form: form!($($form)?),
                help: $help,
            },
        )*];

        run_args!([] $($key $kind $(($value))? [$($default)?] $help;)*);

        impl RunArgs {
            /// The flags that were given, as (setting key, value) overrides.
            pub fn overrides(&self) -> Vec<(&'static str, String)> {
                let mut out = Vec::new();
                $(push_override!(self, out, $key $kind);)*
                out
            }
        }

        /// Each setting's value, typed by its check; implemented over the merged layers.
        pub(super) trait Values {
            /// The raw value of `key` after layering, if given anywhere or defaulted.
            fn raw(&self, key: &'static str) -> Result<Option<String>, ConfigError>;

            $(getter!($key: $ty, $check, [$($default)?]);)*
        }
    };
}

settings! {
    lock_backend: Backend {
        flag("BACKEND"),
        default: "kubernetes",
        check: Backend::parse,
        help: "where the lock lives: kubernetes, etcd or redis",
    },
    leader_election_disable: bool {
        switch,
        default: "false",
        check: parse_bool,
        help: "turn leader election off: this replica always writes (term shown as disabled)",
    },
    leader_election_lock_name: String {
        flag("NAME"),
        default: DEFAULT_LOCK_NAME,
        check: checked(validate_dns_subdomain),
        help: "the lock's name (a DNS-1123 subdomain)",
    },
    leader_election_identity: String {
        flag("ID"),
        check: checked(check_identity),
        help: "this replica's name; default POD_NAME, else the hostname",
    },
    leader_election_namespace: String {
        flag("NS"),
        check: checked(validate_dns_label),
        help: "namespace of the Lease (kubernetes); default POD_NAMESPACE, else the kubeconfig's",
    },
    lease_duration: Duration {
        flag("DURATION"),
        default: "15s",
        check: parse_duration,
        help: "how long a lease lasts without renewal",
    },
    renew_deadline: Duration {
        flag("DURATION"),
        default: "10s",
        check: parse_duration,
        help: "how long after its last successful renew the leader may still write",
    },
    retry_period: Duration {
        flag("DURATION"),
        default: "2s",
        check: parse_duration,
        help: "how often the leader renews and a follower without a watch polls",
    },
    release_on_shutdown: bool {
        flag("BOOL"),
        default: "true",
        check: parse_bool,
        help: "release the lock on SIGTERM so a follower takes over at once",
    },
    wakeup: Wakeup {
        flag("MODE"),
        default: "watch",
        check: Wakeup::parse,
        help: "how followers learn the lock changed: watch, or poll (client-go's way, a baseline)",
    },
    controller_name: String {
        flag("NAME"),
        default: DEFAULT_CONTROLLER_NAME,
        check: checked(validate_controller_name),
        help: "the Gateway API controllerName this controller owns",
    },
    gateway_addresses_service: AddressService {
        flag("NAMESPACE/NAME"),
        check: parse_address_service,
        help: "run: the Service through which the data plane is reached; its addresses (a load \
               balancer's, else its cluster IPs) become each Gateway's status.addresses, and \
               spec.addresses may ask for them (docs/configuration.md)",
    },
    health_addr: SocketAddr {
        flag("ADDR"),
        default: DEFAULT_HEALTH_ADDR,
        check: parse_socket_addr,
        help: "address of the HTTP server for /healthz, /readyz and /metrics \
               (port 0: any free port)",
    },
    readiness_follows_leadership: bool {
        switch,
        default: "false",
        check: parse_bool,
        help: "/readyz answers 200 only on the valid leader (an active-passive Service)",
    },
    proxy_listen: ProxyListen {
        flag("ADDR"),
        check: ProxyListen::parse,
        help: "where the write-gating Kubernetes API proxy listens: a loopback IP:PORT or \
               unix:PATH (proxy: default 127.0.0.1:8001; exec: no proxy unless given)",
    },
    proxy_election_lease: LeaseName {
        flag("NAMESPACE/NAME"),
        check: LeaseName::parse,
        help: "proxy, exec: the Lease of the controller's own leader election, which the proxy \
               answers from this replica's leadership and never sends to the apiserver, so the \
               controller leads exactly while this replica does (docs/sidecar.md)",
    },
    exec_grace: Duration {
        flag("DURATION"),
        default: "10s",
        check: exec_grace,
        help: "exec: how long the child has between SIGTERM and SIGKILL (at most 15s)",
    },
    exec_restart: ExecRestart {
        flag("POLICY"),
        default: "always",
        check: ExecRestart::parse,
        help: "exec: start the child again at the next leadership (always), or run it once and \
               exit with its code (never)",
    },
    worker_threads: usize {
        flag("N"),
        check: worker_threads,
        help: "threads that run the program's tasks, 1 to 256 (run: one per core; proxy and \
               exec: 1, which spends the least CPU on each proxied request)",
    },
    log_format: LogFormat {
        flag("FORMAT"),
        default: "text",
        check: LogFormat::parse,
        help: "log format: text or json",
    },
    log_level: String {
        flag("FILTER"),
        default: "info",
        check: checked(validate_filter),
        help: "log filter: a level or target=level directives, e.g. info or gateway_leader=debug \
               (a valid RUST_LOG wins)",
    },
    kubeconfig: PathBuf {
        flag("FILE"),
        check: bounded_file,
        help: "kubeconfig path (else KUBECONFIG, ~/.kube/config, or in-cluster)",
    },
    kube_context: String {
        flag("NAME"),
        check: text,
        help: "kubeconfig context",
    },
    etcd_endpoints: Vec<String> {
        flag("URLS"),
        default: "http://127.0.0.1:2379",
        form: UrlList,
        check: comma_list,
        help: "comma-separated etcd endpoints",
    },
    etcd_ca_file: PathBuf {
        flag("FILE"),
        check: bounded_file,
        help: "CA bundle (PEM) to verify etcd",
    },
    etcd_cert_file: PathBuf {
        flag("FILE"),
        check: bounded_file,
        help: "client certificate (PEM) for etcd",
    },
    etcd_key_file: PathBuf {
        flag("FILE"),
        check: bounded_file,
        help: "client key (PEM) for etcd",
    },
    etcd_username: String {
        flag("USER"),
        check: text,
        help: "etcd user",
    },
    etcd_password_file: Secret {
        flag("FILE"),
        check: Secret::from_file,
        help: "file holding the etcd password",
    },
    etcd_password: Secret {
        secret,
        check: Secret::from_text,
        help: "etcd password (environment or file only)",
    },
    etcd_key_prefix: String {
        flag("PREFIX"),
        default: "/gateway-leader/",
        check: text,
        help: "prefix of the etcd lock key",
    },
    redis_url: String {
        flag("URL"),
        default: "redis://127.0.0.1:6379",
        form: Url,
        check: text,
        help: "redis:// or rediss:// URL, without user or password",
    },
    redis_username: String {
        flag("USER"),
        check: text,
        help: "Redis ACL user (on the data nodes, with Sentinel)",
    },
    redis_password_file: Secret {
        flag("FILE"),
        check: Secret::from_file,
        help: "file holding the Redis password",
    },
    redis_password: Secret {
        secret,
        check: Secret::from_text,
        help: "Redis password (environment or file only)",
    },
    redis_ca_file: PathBuf {
        flag("FILE"),
        check: bounded_file,
        help: "CA bundle (PEM) to verify rediss:// servers (the data nodes and the Sentinels)",
    },
    redis_key_prefix: String {
        flag("PREFIX"),
        default: "gateway-leader",
        check: text,
        help: "prefix of the Redis keys",
    },
    redis_wait_replicas: u32 {
        flag("N"),
        default: "0",
        check: replica_count,
        help: "WAIT until this many replicas have each acquire and renew before it counts \
               (0: do not wait)",
    },
    redis_sentinel: Vec<String> {
        flag("URLS"),
        form: UrlList,
        check: comma_list,
        help: "comma-separated Redis Sentinels (redis://host:port or rediss://); \
               the lock uses the primary they name instead of redis-url",
    },
    redis_sentinel_master: String {
        flag("NAME"),
        check: text,
        help: "the name the Sentinels monitor the primary under",
    },
    redis_sentinel_username: String {
        flag("USER"),
        check: text,
        help: "ACL user on the Sentinels",
    },
    redis_sentinel_password_file: Secret {
        flag("FILE"),
        check: Secret::from_file,
        help: "file holding the Sentinels' password",
    },
    redis_sentinel_password: Secret {
        secret,
        check: Secret::from_text,
        help: "the Sentinels' password (environment or file only)",
    },
}

#[cfg(test)]
mod tests {
    use clap::{Args, FromArgMatches};

    use super::*;
    use crate::config::names::flag;

    /// `gateway-leader run` with `args`, as clap parses it.
    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let cmd = RunArgs::augment_args(clap::Command::new("run"));
        let matches = cmd.try_get_matches_from([&["run"], args].concat())?;
        RunArgs::from_arg_matches(&matches)
    }

    #[test]
    fn every_flag_overrides_its_own_setting_and_secrets_have_none() {
        for s in SETTINGS {
            if s.secret {
                assert!(parse(&[&flag(s.key), "x"]).is_err(), "{} is a flag", s.key);
                continue;
            }
            let switch = ["leader_election_disable", "readiness_follows_leadership"];
            let (given, value) = if switch.contains(&s.key) {
                (parse(&[&flag(s.key)]), "true")
            } else {
                (parse(&[&flag(s.key), "x"]), "x")
            };
            let overrides = given.expect("the flag parses").overrides();
            assert_eq!(overrides, vec![(s.key, value.to_string())], "{}", s.key);
        }
        assert_eq!(RunArgs::default().overrides(), Vec::new());
    }

    #[test]
    fn flag_help_shows_the_default() {
        assert_eq!(flag_help("a", Some("1s")), "a [default: 1s]");
        assert_eq!(flag_help("a", None), "a");
    }
}
