//! Builds the configured backend's lock: validated first, connected only afterwards.

use std::sync::Arc;

use leader_lock::{LeaderLock, LockError};
use leader_lock_etcd::{EtcdConfig, EtcdLock};
use leader_lock_kubernetes::LeaseLock;
use leader_lock_redis::{RedisConfig, RedisLock};

use crate::config::{Backend, ConfigError, Settings};

/// Per-request timeout for backend calls: well inside the renew deadline.
fn request_timeout(s: &Settings) -> std::time::Duration {
    s.timing.renew_deadline / 2
}

fn etcd_config(s: &Settings) -> EtcdConfig {
    let e = &s.etcd;
    let mut c = EtcdConfig::new(e.endpoints.clone());
    c.ca_file = e.ca_file.clone();
    c.cert_file = e.cert_file.clone();
    c.key_file = e.key_file.clone();
    c.username = e.username.clone();
    c.password = e.password.as_ref().map(|p| p.expose().to_string());
    c.key_prefix = e.key_prefix.clone();
    c.request_timeout = request_timeout(s);
    c
}

fn redis_config(s: &Settings) -> RedisConfig {
    let r = &s.redis;
    let mut c = RedisConfig::new(r.url.clone());
    c.username = r.username.clone();
    c.password = r.password.as_ref().map(|p| p.expose().to_string());
    c.ca_file = r.ca_file.clone();
    c.key_prefix = r.key_prefix.clone();
    c.request_timeout = request_timeout(s);
    c
}

/// The backend's own checks (granularity, URLs, files), without touching the network.
pub fn validate(s: &Settings) -> Result<(), ConfigError> {
    if s.disabled {
        return Ok(());
    }
    let r = match s.backend {
        Backend::Kubernetes => LeaseLock::validate(&s.timing, request_timeout(s)),
        Backend::Etcd => EtcdLock::validate(&etcd_config(s), &s.timing),
        Backend::Redis => RedisLock::validate(&redis_config(s), &s.timing),
    };
    // A rule between timing settings is reported under "timing", as the timing checks are.
    r.map_err(|e| ConfigError {
        key: e
            .setting()
            .map_or_else(|| "timing".to_string(), |s| s.replace('-', "_")),
        message: e.to_string(),
    })
}

/// What `connect` made: the lock, and for Kubernetes the namespace of the Lease (for Events).
pub struct Connected {
    /// The lock.
    pub lock: Arc<dyn LeaderLock>,
    /// The Lease's namespace, when the backend is Kubernetes.
    pub lease_namespace: Option<String>,
}

/// The namespace of the Lease: the setting, else `POD_NAMESPACE`, else the client's default.
pub fn lease_namespace(s: &Settings, client_default: &str) -> String {
    s.kube
        .namespace
        .clone()
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| client_default.to_string())
}

/// The Lease lock of the Kubernetes backend, its requests bounded like every backend's.
fn lease_lock(s: &Settings, client: &kube::Client, namespace: &str) -> LeaseLock {
    LeaseLock::new(client.clone(), namespace, &s.lock_name).with_request_timeout(request_timeout(s))
}

/// Connects to the configured backend; the Kubernetes lock uses `kube`, the client the status
/// writer uses too, with its default namespace.
///
/// # Errors
/// [`LockError::Unavailable`] or [`LockError::Timeout`] while the backend cannot be reached
/// (worth retrying), [`LockError::Refused`] when it refuses us for good.
pub async fn connect(s: &Settings, kube: (&kube::Client, &str)) -> Result<Connected, LockError> {
    match s.backend {
        Backend::Kubernetes => {
            let (client, default_ns) = kube;
            let ns = lease_namespace(s, default_ns);
            let lock = lease_lock(s, client, &ns);
            Ok(Connected {
                lock: Arc::new(lock),
                lease_namespace: Some(ns),
            })
        }
        Backend::Etcd => {
            let lock = EtcdLock::connect(etcd_config(s), &s.lock_name).await?;
            Ok(Connected {
                lock: Arc::new(lock),
                lease_namespace: None,
            })
        }
        Backend::Redis => {
            let lock = RedisLock::connect(redis_config(s), &s.lock_name).await?;
            Ok(Connected {
                lock: Arc::new(lock),
                lease_namespace: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Env, Layers};

    fn settings(flags: &[(&'static str, &str)]) -> Settings {
        let flags: Vec<(&'static str, String)> =
            flags.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let env = Env::from_os(std::iter::empty()).expect("env");
        Layers::load(None, env, &flags)
            .and_then(|l| l.settings(|| "host-1".to_string()))
            .expect("valid settings")
    }

    #[tokio::test]
    async fn kubernetes_requests_time_out_before_a_short_renew_deadline() {
        let s = settings(&[
            ("lease_duration", "30s"),
            ("renew_deadline", "3s"),
            ("retry_period", "2s"),
        ]);
        validate(&s).expect("valid for the Kubernetes backend");
        leader_lock_kubernetes::install_crypto_provider();
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

    #[test]
    fn a_backend_setting_error_is_reported_under_its_setting() {
        let s = settings(&[
            ("lock_backend", "etcd"),
            ("lease_duration", "2500ms"),
            ("renew_deadline", "2s"),
            ("retry_period", "500ms"),
        ]);
        let e = validate(&s).expect_err("etcd leases are whole seconds");
        assert_eq!(e.key, "lease_duration", "{e}");
        assert!(e.message.contains("whole number of seconds"), "{e}");
    }
}
