//! Connection settings and the checks that run before connecting.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::Timing;

/// The smallest lease TTL a default etcd accepts (1.5 × its 1 s election timeout, rounded up).
pub const MIN_LEASE: Duration = Duration::from_secs(2);

/// How to reach etcd and where the lock keys live.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Client URLs, `http://host:port` or `https://host:port`; several are balanced.
    pub endpoints: Vec<String>,
    /// CA bundle (PEM) that signs the servers' certificates; without it, the system's trusted roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for servers that require one; goes with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key_file: Option<PathBuf>,
    /// User for etcd authentication.
    pub username: Option<String>,
    /// Password of `username` (read from a file or the environment by the CLI).
    pub password: Option<String>,
    /// Prefix of the lock keys; the key is `<prefix><lock name>`.
    pub key_prefix: String,
    /// Timeout of every single request; keep it below the renew deadline.
    pub request_timeout: Duration,
}

impl EtcdConfig {
    /// Settings for `endpoints` with the defaults: no TLS, no auth, prefix `/gateway-leader/`,
    /// 5 s per request (half the default renew deadline).
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdConfig {
            endpoints,
            ca_file: None,
            cert_file: None,
            key_file: None,
            username: None,
            password: None,
            key_prefix: "/gateway-leader/".to_string(),
            request_timeout: Duration::from_secs(5),
        }
    }

    /// True when any endpoint uses TLS.
    pub(crate) fn uses_tls(&self) -> bool {
        self.endpoints.iter().any(|e| e.starts_with("https://"))
    }
}

/// Checks an endpoint is `http(s)://host:port` with nothing after the port but an optional `/`.
pub(crate) fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "etcd-endpoints: `{endpoint}` is not a client URL like http://127.0.0.1:2379 ({why})"
        ))
    };
    let rest = match endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
    {
        Some(r) => r,
        None => return bad("the scheme must be http:// or https://"),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') || authority.contains('@') || authority.contains('?') {
        return bad("only scheme, host and port are allowed");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        match v6.split_once("]:") {
            Some((h, p)) => (h, p),
            None => return bad("an IPv6 address needs the form [addr]:port"),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => return bad("the port is missing"),
        }
    };
    if host.is_empty() || host.contains(':') && !authority.starts_with('[') {
        return bad("the host is missing or malformed");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => bad("the port must be a number from 1 to 65535"),
    }
}

fn check_file(setting: &str, path: &Path) -> Result<(), String> {
    std::fs::File::open(path)
        .map(|_| ())
        .map_err(|e| format!("{setting}: cannot read {}: {e}", path.display()))
}

/// The checks of [`EtcdLock::validate`](crate::EtcdLock::validate).
pub(crate) fn validate(config: &EtcdConfig, timing: &Timing) -> Result<(), String> {
    if config.endpoints.is_empty() {
        return Err("etcd-endpoints: at least one endpoint is required".into());
    }
    for e in &config.endpoints {
        check_endpoint(e)?;
    }
    let tls = config.uses_tls();
    if tls && config.endpoints.iter().any(|e| e.starts_with("http://")) {
        return Err(
            "etcd-endpoints: mixing http:// and https:// endpoints is not supported".into(),
        );
    }
    let tls_files = config.ca_file.is_some() || config.cert_file.is_some();
    if !tls && tls_files {
        return Err(
            "etcd-ca-file/etcd-cert-file are set but etcd-endpoints are http://; use https:// URLs"
                .into(),
        );
    }
    match (&config.cert_file, &config.key_file) {
        (Some(_), None) => return Err("etcd-cert-file is set without etcd-key-file".into()),
        (None, Some(_)) => return Err("etcd-key-file is set without etcd-cert-file".into()),
        _ => {}
    }
    for (setting, file) in [
        ("etcd-ca-file", &config.ca_file),
        ("etcd-cert-file", &config.cert_file),
        ("etcd-key-file", &config.key_file),
    ] {
        if let Some(f) = file {
            check_file(setting, f)?;
        }
    }
    match (&config.username, &config.password) {
        (Some(u), _) if u.is_empty() => return Err("etcd-username is empty".into()),
        (Some(_), None) => {
            return Err("etcd-username is set without a password (etcd-password-file or GATEWAY_LEADER_ETCD_PASSWORD)".into())
        }
        (None, Some(_)) => return Err("an etcd password is set without etcd-username".into()),
        _ => {}
    }
    if config.key_prefix.is_empty() {
        return Err("etcd-key-prefix must not be empty".into());
    }
    timing.validate().map_err(|e| e.to_string())?;
    timing
        .require_whole_seconds(MIN_LEASE)
        .map_err(|e| format!("{e} (etcd lease TTLs are whole seconds, at least {MIN_LEASE:?})"))?;
    timing
        .check_request_timeout("etcd", config.request_timeout)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing::default()
    }

    #[test]
    fn endpoints() {
        for ok in [
            "http://127.0.0.1:2379",
            "https://etcd.example:2379/",
            "http://[::1]:2379",
        ] {
            assert_eq!(check_endpoint(ok), Ok(()), "{ok}");
        }
        for bad in [
            "127.0.0.1:2379",
            "http://127.0.0.1",
            "http://:2379",
            "http://host:0",
            "http://host:99999",
            "http://host:2379/v3",
            "unix:///run/etcd.sock",
            "http://::1:2379",
        ] {
            let e = check_endpoint(bad).expect_err(bad);
            assert!(e.contains("etcd-endpoints"), "{e}");
        }
    }

    #[test]
    fn settings() {
        let ok = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        assert_eq!(validate(&ok, &timing()), Ok(()));

        let empty = EtcdConfig::new(vec![]);
        assert!(validate(&empty, &timing())
            .unwrap_err()
            .contains("etcd-endpoints"));

        let mut half = ok.clone();
        half.endpoints = vec!["https://127.0.0.1:2379".into()];
        half.ca_file = Some("/etc/hostname".into());
        half.cert_file = Some("/etc/hostname".into());
        assert!(validate(&half, &timing())
            .unwrap_err()
            .contains("without etcd-key-file"));

        let mut missing = half.clone();
        missing.key_file = Some("/nonexistent/key.pem".into());
        assert!(validate(&missing, &timing())
            .unwrap_err()
            .contains("/nonexistent/key.pem"));

        // Without a CA file the system's trusted roots verify the servers.
        let mut no_ca = ok.clone();
        no_ca.endpoints = vec!["https://127.0.0.1:2379".into()];
        assert!(validate(&no_ca, &timing()).is_ok());

        let mut user = ok.clone();
        user.username = Some("root".into());
        assert!(validate(&user, &timing()).unwrap_err().contains("password"));
    }

    #[test]
    fn lease_granularity() {
        let ok = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        let ms = Duration::from_millis;
        let fractional = Timing::new(ms(2500), ms(2000), ms(500)).expect("valid timing");
        assert!(validate(&ok, &fractional)
            .unwrap_err()
            .contains("lease-duration"));
        let short = Timing::new(ms(1000), ms(800), ms(200)).expect("valid timing");
        assert!(validate(&ok, &short)
            .unwrap_err()
            .contains("lease-duration"));
        let mut slow = ok.clone();
        slow.request_timeout = Duration::from_secs(10);
        assert!(validate(&slow, &timing())
            .unwrap_err()
            .contains("renew-deadline"));
    }
}
