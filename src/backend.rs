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
        Backend::Kubernetes => LeaseLock::validate(&s.timing),
        Backend::Etcd => EtcdLock::validate(&etcd_config(s), &s.timing),
        Backend::Redis => RedisLock::validate(&redis_config(s), &s.timing),
    };
    r.map_err(|message| ConfigError {
        key: format!("{} backend settings", s.backend),
        message,
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
            let lock = LeaseLock::new(client.clone(), &ns, &s.lock_name);
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
