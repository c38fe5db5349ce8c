//! The command line: `gateway-leader run` and its flags.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Leader election for Gateway API controllers: only the leader writes statuses.
#[derive(Debug, Parser)]
#[command(name = "gateway-leader", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the elector (and, as leader, the status writer) until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
}

/// Flags of `gateway-leader run`. Every flag also has a `GATEWAY_LEADER_*` environment variable
/// and a key in the `--config` file; flags win over the environment, which wins over the file.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// A TOML or YAML file with settings (keys as in `--print-config`).
    #[arg(long, env = "GATEWAY_LEADER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective settings (secrets redacted) and exit.
    #[arg(long)]
    pub print_config: bool,

    /// Where the lock lives: kubernetes, etcd or redis [default: kubernetes].
    #[arg(long, value_name = "BACKEND")]
    pub lock_backend: Option<String>,
    /// Turn leader election off: this replica always writes (term shown as disabled).
    #[arg(long)]
    pub leader_election_disable: bool,
    /// The lock's name, a DNS-1123 subdomain [default: gateway-leader-leader-election-lock].
    #[arg(long, value_name = "NAME")]
    pub leader_election_lock_name: Option<String>,
    /// This replica's name [default: POD_NAME, else the hostname].
    #[arg(long, value_name = "ID")]
    pub leader_election_identity: Option<String>,
    /// Namespace of the Lease [default: POD_NAMESPACE, else the kubeconfig's namespace].
    #[arg(long, value_name = "NS")]
    pub leader_election_namespace: Option<String>,
    /// How long a lease lasts without renewal, e.g. 15s [default: 15s].
    #[arg(long, value_name = "DURATION")]
    pub lease_duration: Option<String>,
    /// How long the leader may write after its last successful renew [default: 10s].
    #[arg(long, value_name = "DURATION")]
    pub renew_deadline: Option<String>,
    /// How often the leader renews [default: 2s].
    #[arg(long, value_name = "DURATION")]
    pub retry_period: Option<String>,
    /// Release the lock on SIGTERM so a follower takes over at once [default: true].
    #[arg(long, value_name = "BOOL")]
    pub release_on_shutdown: Option<String>,
    /// How followers learn the lock changed: watch, or poll as client-go does [default: watch].
    #[arg(long, value_name = "MODE")]
    pub wakeup: Option<String>,
    /// The Gateway API controllerName this controller owns.
    #[arg(long, value_name = "NAME")]
    pub controller_name: Option<String>,
    /// Address for /healthz, /readyz and /metrics; port 0 picks a free one [default: 0.0.0.0:9090].
    #[arg(long, value_name = "ADDR")]
    pub health_addr: Option<String>,
    /// Log format: text or json [default: text].
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Log filter, e.g. info or gateway_leader=debug [default: info].
    #[arg(long, value_name = "FILTER")]
    pub log_level: Option<String>,

    /// Kubeconfig path [default: KUBECONFIG, ~/.kube/config, or in-cluster].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<String>,
    /// Kubeconfig context.
    #[arg(long, value_name = "NAME")]
    pub kube_context: Option<String>,

    /// Comma-separated etcd endpoints [default: http://127.0.0.1:2379].
    #[arg(long, value_name = "URLS")]
    pub etcd_endpoints: Option<String>,
    /// CA bundle (PEM) to verify etcd.
    #[arg(long, value_name = "FILE")]
    pub etcd_ca_file: Option<String>,
    /// Client certificate (PEM) for etcd.
    #[arg(long, value_name = "FILE")]
    pub etcd_cert_file: Option<String>,
    /// Client key (PEM) for etcd.
    #[arg(long, value_name = "FILE")]
    pub etcd_key_file: Option<String>,
    /// etcd user.
    #[arg(long, value_name = "USER")]
    pub etcd_username: Option<String>,
    /// File holding the etcd password (or set GATEWAY_LEADER_ETCD_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub etcd_password_file: Option<String>,
    /// Prefix of the etcd lock key [default: /gateway-leader/].
    #[arg(long, value_name = "PREFIX")]
    pub etcd_key_prefix: Option<String>,

    /// redis:// or rediss:// URL, without user or password [default: redis://127.0.0.1:6379].
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// Redis ACL user.
    #[arg(long, value_name = "USER")]
    pub redis_username: Option<String>,
    /// File holding the Redis password (or set GATEWAY_LEADER_REDIS_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub redis_password_file: Option<String>,
    /// CA bundle (PEM) to verify a rediss:// server.
    #[arg(long, value_name = "FILE")]
    pub redis_ca_file: Option<String>,
    /// Prefix of the Redis keys [default: gateway-leader].
    #[arg(long, value_name = "PREFIX")]
    pub redis_key_prefix: Option<String>,
}

impl RunArgs {
    /// The flags that were given, as (setting key, value) overrides.
    pub fn overrides(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut put = |k: &'static str, v: &Option<String>| {
            if let Some(v) = v {
                out.push((k, v.clone()));
            }
        };
        put("lock_backend", &self.lock_backend);
        put("leader_election_lock_name", &self.leader_election_lock_name);
        put("leader_election_identity", &self.leader_election_identity);
        put("leader_election_namespace", &self.leader_election_namespace);
        put("lease_duration", &self.lease_duration);
        put("renew_deadline", &self.renew_deadline);
        put("retry_period", &self.retry_period);
        put("release_on_shutdown", &self.release_on_shutdown);
        put("wakeup", &self.wakeup);
        put("controller_name", &self.controller_name);
        put("health_addr", &self.health_addr);
        put("log_format", &self.log_format);
        put("log_level", &self.log_level);
        put("kubeconfig", &self.kubeconfig);
        put("kube_context", &self.kube_context);
        put("etcd_endpoints", &self.etcd_endpoints);
        put("etcd_ca_file", &self.etcd_ca_file);
        put("etcd_cert_file", &self.etcd_cert_file);
        put("etcd_key_file", &self.etcd_key_file);
        put("etcd_username", &self.etcd_username);
        put("etcd_password_file", &self.etcd_password_file);
        put("etcd_key_prefix", &self.etcd_key_prefix);
        put("redis_url", &self.redis_url);
        put("redis_username", &self.redis_username);
        put("redis_password_file", &self.redis_password_file);
        put("redis_ca_file", &self.redis_ca_file);
        put("redis_key_prefix", &self.redis_key_prefix);
        if self.leader_election_disable {
            out.push(("leader_election_disable", "true".to_string()));
        }
        out
    }
}
