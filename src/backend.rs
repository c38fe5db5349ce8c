//! Builds the configured backend's lock: validated first, connected only afterwards.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use backon::{ExponentialBuilder, Retryable};
use leader_lock::backend::{LeaderLock, LockError};
#[cfg(feature = "etcd")]
use leader_lock_etcd::{EtcdConfig, EtcdLock};
#[cfg(feature = "kubernetes")]
use leader_lock_kubernetes::LeaseLock;
#[cfg(feature = "redis")]
use leader_lock_redis::{RedisConfig, RedisLock, SentinelConfig};

use crate::config::{env_var, flag, Backend, ConfigError, Settings, SETTINGS};
use crate::kube_client::KubeClient;
#[cfg(feature = "kubernetes")]
use crate::program::PROGRAM;
use crate::shutdown::ShutdownSignals;

/// Per-request timeout for backend calls: well inside the renew deadline. (etcd's is the lock's
/// default, `EtcdConfig::request_timeout_for`.)
#[cfg(any(feature = "kubernetes", feature = "redis"))]
fn request_timeout(s: &Settings) -> Duration {
    s.timing.renew_deadline / 2
}

/// The backends this build can use (its Cargo features `kubernetes`, `etcd`, `redis`).
pub const BUILT: &[Backend] = &[
    #[cfg(feature = "kubernetes")]
    Backend::Kubernetes,
    #[cfg(feature = "etcd")]
    Backend::Etcd,
    #[cfg(feature = "redis")]
    Backend::Redis,
];

/// The refusal of a backend this build was compiled without: it names the setting, what this
/// build accepts and how to get the one asked for.
fn not_built(b: Backend) -> ConfigError {
    let built: Vec<String> = BUILT.iter().map(|b| b.to_string()).collect();
    ConfigError::invalid(
        "lock_backend",
        format!(
            "\"{b}\": this build has no {b} backend; accepted here: {}; build with \
             `--features {b}` (the default builds all three)",
            if built.is_empty() {
                "none".to_string()
            } else {
                built.join(", ")
            }
        ),
    )
}

#[cfg(feature = "etcd")]
fn etcd_config(s: &Settings) -> EtcdConfig {
    let e = &s.etcd;
    let mut c = EtcdConfig::new(e.endpoints.clone());
    c.ca_file = e.ca_file.clone();
    c.cert_file = e.cert_file.clone();
    c.key_file = e.key_file.clone();
    c.username = e.username.clone();
    c.password = e.password.as_ref().map(|p| p.expose().to_string());
    c.key_prefix = e.key_prefix.clone();
    // No request timeout: the lock's default, a quarter of the renew deadline, shorter than the
    // others' because a renew that meets a dead or hung member must still time out, move to
    // another member and succeed there within the renew deadline (docs/etcd.md).
    c
}

#[cfg(feature = "redis")]
fn redis_config(s: &Settings) -> RedisConfig {
    let r = &s.redis;
    let mut c = RedisConfig::new(r.url.clone());
    c.username = r.username.clone();
    c.password = r.password.as_ref().map(|p| p.expose().to_string());
    c.ca_file = r.ca_file.clone();
    c.key_prefix = r.key_prefix.clone();
    c.request_timeout = request_timeout(s);
    c.wait_replicas = r.wait_replicas;
    if let Some(addresses) = r.sentinels.clone().filter(|a| !a.is_empty()) {
        c.sentinel = Some(SentinelConfig {
            addresses,
            // An empty name is refused by the config's check, under redis-sentinel-master.
            master: r.sentinel_master.clone().unwrap_or_default(),
            username: r.sentinel_username.clone(),
            password: r.sentinel_password.as_ref().map(|p| p.expose().to_string()),
        });
    }
    c
}

/// Sentinel or not, one way to name the primary: the Sentinels' master name and credentials mean
/// nothing without Sentinels, given alone they are a mistake (a forgotten `--redis-sentinel`
/// would connect to `--redis-url` instead); and a `--redis-url` given beside the Sentinels would
/// be ignored, so it is refused too rather than leave a stale address that looks in use.
#[cfg(feature = "redis")]
fn sentinel_settings_need_sentinels(r: &crate::config::RedisSettings) -> Result<(), ConfigError> {
    if r.sentinels.as_ref().is_some_and(|a| !a.is_empty()) {
        let default_url = SETTINGS
            .iter()
            .find(|spec| spec.key == "redis_url")
            .and_then(|spec| spec.default);
        if default_url != Some(r.url.as_str()) {
            return Err(ConfigError::invalid(
                "redis_url",
                format!(
                    "set with {}, whose Sentinels name the primary instead; leave it out",
                    flag("redis_sentinel")
                ),
            ));
        }
        return Ok(());
    }
    let given = [
        ("redis_sentinel_master", r.sentinel_master.is_some()),
        ("redis_sentinel_username", r.sentinel_username.is_some()),
        ("redis_sentinel_password", r.sentinel_password.is_some()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((key, _)) => Err(ConfigError::invalid(
            key,
            format!(
                "set without {}; it applies only to the Sentinels",
                flag("redis_sentinel")
            ),
        )),
        None => Ok(()),
    }
}

/// The backend's own checks (granularity, URLs, files), without touching the network.
pub fn validate(s: &Settings) -> Result<(), ConfigError> {
    if s.disabled {
        return Ok(());
    }
    let r = match s.backend {
        #[cfg(feature = "kubernetes")]
        Backend::Kubernetes => LeaseLock::check_timing(&s.timing, Some(request_timeout(s))),
        #[cfg(feature = "etcd")]
        Backend::Etcd => etcd_config(s).validate(&s.timing),
        #[cfg(feature = "redis")]
        Backend::Redis => {
            sentinel_settings_need_sentinels(&s.redis)?;
            redis_config(s).validate(&s.timing)
        }
        #[allow(unreachable_patterns)]
        other => return Err(not_built(other)),
    };
    r.map_err(|e| backend_refusal(s.backend, &e))
}

/// A backend's refusal as a settings error: under the setting it names (its file key), with the
/// backend's reason alone, since the error names the setting already;
/// a rule between timing settings, or a field with no setting of its own, under the backend.
/// Credentials are worded with this program's own flags and variables, which the backends do not
/// know.
fn backend_refusal(backend: Backend, e: &leader_lock::backend::ConfigError) -> ConfigError {
    let message = e.to_string();
    let Some(key) = e.setting().and_then(|dashed| {
        let key = dashed.replace('-', "_");
        SETTINGS
            .iter()
            .find(|spec| spec.key == key)
            .map(|spec| spec.key)
    }) else {
        return ConfigError::input(format!("{backend} backend settings"), message);
    };
    // The credentials a setting goes with: its own (redis_sentinel: redis_sentinel_username),
    // else its backend's, whose name the settings share as their prefix (etcd_username,
    // redis_password).
    let own = key.strip_suffix("_username").unwrap_or(key);
    let prefix = if SETTINGS
        .iter()
        .any(|spec| spec.key == format!("{own}_password_file"))
    {
        own
    } else {
        key.split('_').next().unwrap_or(key)
    };
    // Only the credentials refusals name them: built there, not for every refusal.
    let password = || {
        format!(
            "{} or {}",
            flag(&format!("{prefix}_password_file")),
            env_var(&format!("{prefix}_password"))
        )
    };
    let message = match e {
        leader_lock::backend::ConfigError::CredentialsInUrl { shown, .. } => format!(
            "`{shown}` holds credentials; give the user with {} and the password with {}",
            flag(&format!("{prefix}_username")),
            password()
        ),
        leader_lock::backend::ConfigError::UserWithoutPassword { .. } => {
            format!("set without a password ({})", password())
        }
        leader_lock::backend::ConfigError::Invalid { message, .. } => message.clone(),
        _ => message,
    };
    ConfigError::invalid(key, message)
}

/// What `connect` made: the lock, and for Kubernetes the namespace of the Lease (for Events).
pub struct Connected {
    /// The lock.
    pub lock: Arc<dyn LeaderLock>,
    /// The Lease's namespace, when the backend is Kubernetes.
    pub lease_namespace: Option<String>,
}

/// The namespace of the Lease: the settings' (the setting, else `POD_NAMESPACE`, both checked
/// there), else the client's default.
pub fn lease_namespace(s: &Settings, client_default: &str) -> String {
    s.kube
        .namespace
        .clone()
        .unwrap_or_else(|| client_default.to_string())
}

/// The Lease lock of the Kubernetes backend, its requests bounded like every backend's, its
/// writes under the program's field manager.
#[cfg(feature = "kubernetes")]
fn lease_lock(s: &Settings, client: &kube::Client, namespace: &str) -> LeaseLock {
    LeaseLock::new(client.clone(), namespace, &s.lock_name)
        .with_request_timeout(request_timeout(s))
        .with_field_manager(PROGRAM)
}

/// Connects to the configured backend; the Kubernetes lock uses `kube`, the client the status
/// writer uses too, with its default namespace.
///
/// # Errors
/// [`LockError::Unavailable`] or [`LockError::Timeout`] while the backend cannot be reached
/// (worth retrying), [`LockError::Refused`] when it refuses us for good.
#[cfg_attr(not(feature = "kubernetes"), allow(unused_variables))]
pub async fn connect(
    s: &Settings,
    kube: Option<(&kube::Client, &str)>,
) -> Result<Connected, LockError> {
    match s.backend {
        #[cfg(feature = "kubernetes")]
        Backend::Kubernetes => {
            let (client, default_ns) = kube.ok_or_else(|| {
                LockError::refused("the Kubernetes lock needs a Kubernetes client")
            })?;
            let ns = lease_namespace(s, default_ns);
            let lock = lease_lock(s, client, &ns);
            Ok(Connected {
                lock: Arc::new(lock),
                lease_namespace: Some(ns),
            })
        }
        #[cfg(feature = "etcd")]
        Backend::Etcd => {
            let lock = EtcdLock::connect(etcd_config(s), &s.lock_name).await?;
            Ok(Connected {
                lock: Arc::new(lock),
                lease_namespace: None,
            })
        }
        #[cfg(feature = "redis")]
        Backend::Redis => {
            let lock = RedisLock::connect(redis_config(s), &s.lock_name).await?;
            Ok(Connected {
                lock: Arc::new(lock),
                lease_namespace: None,
            })
        }
        // `validate` refused it at startup, before anything was touched.
        #[allow(unreachable_patterns)]
        other => Err(LockError::refused(not_built(other).to_string())),
    }
}

/// [`connect`]s, waiting while the backend cannot be reached (as Kubernetes' own client does),
/// with a backoff from 200 ms to 10 s; only a refusal (credentials, permissions) ends the wait.
/// `None` when a signal arrived first: nothing was held.
///
/// # Errors
/// The backend refused.
pub async fn connect_when_reachable(
    s: &Settings,
    kube: Option<&KubeClient>,
    signals: &mut ShutdownSignals,
) -> anyhow::Result<Option<Connected>> {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times();
    let client = kube.map(|k| (&k.client, k.default_namespace()));
    let connecting = (|| connect(s, client))
        .retry(backoff)
        .when(|e| matches!(e, LockError::Unavailable { .. } | LockError::Timeout(_)))
        .notify(|e, after| {
            tracing::warn!(backend = %s.backend, error = %e.chain(), retry_in = ?after,
                "lock backend unreachable; retrying")
        });
    tokio::select! {
        r = connecting => r
            .map(Some)
            .with_context(|| format!("connecting to the {} lock backend", s.backend)),
        sig = signals.recv() => {
            tracing::info!(signal = sig, "stopped before the lock backend could be reached");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Env, Layers};

    fn settings(flags: &[(&'static str, &str)]) -> Settings {
        settings_with_env(flags, &[])
    }

    /// The settings of `flags` and the environment variables `env`.
    fn settings_with_env(flags: &[(&'static str, &str)], env: &[(&str, &str)]) -> Settings {
        let flags: Vec<(&'static str, String)> =
            flags.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let env = Env::from_os(env.iter().map(|(k, v)| (k.into(), v.into()))).expect("env");
        Layers::load(None, env, &flags)
            .and_then(|l| l.settings(|| "host-1".to_string()))
            .expect("valid settings")
    }

    #[test]
    fn a_backend_left_out_of_the_build_is_refused_by_name_with_the_way_to_get_it() {
        let e = not_built(Backend::Redis);
        assert_eq!(e.setting(), Some("lock_backend"));
        let text = e.to_string();
        assert!(text.contains("this build has no redis backend"), "{text}");
        assert!(text.contains("--features redis"), "{text}");
        assert_eq!(
            BUILT.len(),
            usize::from(cfg!(feature = "kubernetes"))
                + usize::from(cfg!(feature = "etcd"))
                + usize::from(cfg!(feature = "redis"))
        );
    }

    #[cfg(feature = "kubernetes")]
    #[tokio::test]
    async fn kubernetes_requests_time_out_before_a_short_renew_deadline() {
        let s = settings(&[
            ("lease_duration", "30s"),
            ("renew_deadline", "3s"),
            ("retry_period", "2s"),
        ]);
        validate(&s).expect("valid for the Kubernetes backend");
        // Never connected: the URL only has to parse.
        let config = kube::Config::new("https://127.0.0.1:1".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let lock = lease_lock(&s, &client, "ns");
        assert!(
            lock.request_timeout() < s.timing.renew_deadline,
            "{:?} is not below the renew deadline",
            lock.request_timeout()
        );
        assert_eq!(lock.request_timeout(), Duration::from_millis(1500));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_sentinel_needs_its_master_name_and_plain_addresses() {
        let s = settings(&[
            ("lock_backend", "redis"),
            (
                "redis_sentinel",
                "redis://127.0.0.1:26379,redis://127.0.0.1:26380",
            ),
        ]);
        let e = validate(&s).expect_err("the master name is required");
        assert_eq!(e.setting(), Some("redis_sentinel_master"), "{e}");
        let s = settings(&[
            ("lock_backend", "redis"),
            ("redis_sentinel", "redis://u:SECRET@127.0.0.1:26379"),
            ("redis_sentinel_master", "mymaster"),
        ]);
        let e = validate(&s).expect_err("no credentials in a Sentinel address");
        assert_eq!(e.setting(), Some("redis_sentinel"), "{e}");
        assert!(!e.to_string().contains("SECRET"), "{e}");
        let s = settings(&[
            ("lock_backend", "redis"),
            ("redis_sentinel", "redis://127.0.0.1:26379"),
            ("redis_sentinel_master", "mymaster"),
        ]);
        validate(&s).expect("a valid Sentinel setup");
        let c = redis_config(&s).sentinel.expect("Sentinel mode");
        assert_eq!(c.master, "mymaster");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_sentinel_credentials_are_refused_in_the_sentinels_own_words() {
        let sentinel = [
            ("lock_backend", "redis"),
            ("redis_sentinel", "rediss://127.0.0.1:26379"),
            ("redis_sentinel_master", "mymaster"),
        ];
        // A Sentinel user without its password: the Sentinels' password settings, not Redis'.
        let mut s = settings(&sentinel);
        s.redis.sentinel_username = Some("watcher".into());
        let e = validate(&s).expect_err("a user needs a password");
        assert_eq!(e.setting(), Some("redis_sentinel_username"), "{e}");
        assert!(
            e.to_string().ends_with(
                "set without a password (--redis-sentinel-password-file or \
                 GATEWAY_LEADER_REDIS_SENTINEL_PASSWORD)"
            ),
            "{e}"
        );
        let mut s = settings_with_env(
            &[&sentinel[..], &[("redis_sentinel_username", "watcher")]].concat(),
            &[("GATEWAY_LEADER_REDIS_SENTINEL_PASSWORD", "pw")],
        );
        validate(&s).expect("a Sentinel user with its password");
        // The same for the data nodes' user, in Sentinel mode too.
        s.redis.username = Some("gl".into());
        let e = validate(&s).expect_err("a user needs a password");
        assert_eq!(e.setting(), Some("redis_username"), "{e}");
        assert!(
            e.to_string()
                .ends_with("(--redis-password-file or GATEWAY_LEADER_REDIS_PASSWORD)"),
            "{e}"
        );
        // Credentials in a Sentinel address are the Sentinels' own.
        let s = settings(&[
            ("lock_backend", "redis"),
            ("redis_sentinel", "redis://u:SECRET@127.0.0.1:26379"),
            ("redis_sentinel_master", "mymaster"),
        ]);
        let text = validate(&s).expect_err("credentials in a URL").to_string();
        assert!(
            text.contains("--redis-sentinel-username")
                && text.contains("GATEWAY_LEADER_REDIS_SENTINEL_PASSWORD"),
            "{text}"
        );
        // A CA file with plain Sentinels names the Sentinels, not redis-url.
        let mut s = settings(&[
            ("lock_backend", "redis"),
            ("redis_sentinel", "redis://127.0.0.1:26379"),
            ("redis_sentinel_master", "mymaster"),
        ]);
        s.redis.ca_file = Some("/nonexistent/ca.pem".into());
        let e = validate(&s).expect_err("TLS settings without TLS");
        assert_eq!(e.setting(), Some("redis_ca_file"), "{e}");
        assert!(e.to_string().contains("redis-sentinel `redis://"), "{e}");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_sentinel_settings_without_sentinels_and_a_url_with_them_are_refused() {
        for (key, value) in [
            ("redis_sentinel_master", "mymaster"),
            ("redis_sentinel_username", "watcher"),
        ] {
            let s = settings(&[("lock_backend", "redis"), (key, value)]);
            let e = validate(&s).expect_err("no Sentinels to apply it to");
            assert_eq!(e.setting(), Some(key), "{e}");
            assert!(e.to_string().contains("without --redis-sentinel"), "{e}");
        }
        let s = settings_with_env(
            &[("lock_backend", "redis")],
            &[("GATEWAY_LEADER_REDIS_SENTINEL_PASSWORD", "pw")],
        );
        let e = validate(&s).expect_err("no Sentinels to apply it to");
        assert_eq!(e.setting(), Some("redis_sentinel_password"), "{e}");
        // The other way round: a URL beside the Sentinels would not be used.
        let s = settings(&[
            ("lock_backend", "redis"),
            ("redis_sentinel", "redis://127.0.0.1:26379"),
            ("redis_sentinel_master", "mymaster"),
            ("redis_url", "redis://10.0.0.1:6379"),
        ]);
        let e = validate(&s).expect_err("a URL the Sentinels override");
        assert_eq!(e.setting(), Some("redis_url"), "{e}");
        assert!(e.to_string().contains("--redis-sentinel"), "{e}");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_requests_time_out_within_a_quarter_of_the_renew_deadline() {
        let s = settings(&[
            ("lock_backend", "etcd"),
            ("lease_duration", "5s"),
            ("renew_deadline", "3s"),
            ("retry_period", "1s"),
        ]);
        validate(&s).expect("valid for etcd");
        // Left to the lock, which takes a quarter of the renew deadline it is validated with.
        assert_eq!(etcd_config(&s).request_timeout, None);
        assert_eq!(
            EtcdConfig::request_timeout_for(&s.timing),
            Duration::from_millis(750)
        );
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn credentials_are_refused_in_this_programs_own_words() {
        let mut s = settings(&[("lock_backend", "etcd")]);
        s.etcd.username = Some("alice".into());
        let e = validate(&s).expect_err("a user needs a password");
        assert_eq!(e.setting(), Some("etcd_username"), "{e}");
        assert!(
            e.to_string().ends_with(
                "set without a password (--etcd-password-file or GATEWAY_LEADER_ETCD_PASSWORD)"
            ),
            "{e}"
        );
        let s = settings(&[
            ("lock_backend", "etcd"),
            ("etcd_endpoints", "http://alice:SECRET@127.0.0.1:2379"),
        ]);
        let e = validate(&s).expect_err("no credentials in a URL");
        assert_eq!(e.setting(), Some("etcd_endpoints"), "{e}");
        let text = e.to_string();
        assert!(text.contains("--etcd-username"), "{text}");
        assert!(!text.contains("SECRET"), "{text}");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn a_backend_setting_error_is_reported_under_its_setting() {
        let s = settings(&[
            ("lock_backend", "etcd"),
            ("lease_duration", "2500ms"),
            ("renew_deadline", "2s"),
            ("retry_period", "500ms"),
        ]);
        let e = validate(&s).expect_err("etcd leases are whole seconds");
        assert_eq!(e.setting(), Some("lease_duration"), "{e}");
        assert!(e.to_string().contains("whole number of seconds"), "{e}");
    }
}
