use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::Timing;
use redis::IntoConnectionInfo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// How to reach Redis and where to keep the lock.
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://` or `rediss://` URL; may carry user and password too (the fields below win).
    pub url: String,
    /// ACL user name (`--redis-username`).
    pub username: Option<String>,
    /// Password, already read from its file or the environment by the CLI.
    pub password: Option<String>,
    /// A custom CA bundle (PEM) that signs the server certificate, for `rediss://`.
    pub ca_file: Option<PathBuf>,
    /// Every key and channel of the lock starts with this (`--redis-key-prefix`).
    pub key_prefix: String,
    /// Bound on every single request; must stay below the renew deadline.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Passwords never reach a log line, neither the field nor the one inside the URL.
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("ca_file", &self.ca_file)
            .field("key_prefix", &self.key_prefix)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// The default key prefix.
pub const DEFAULT_KEY_PREFIX: &str = "gateway-leader";

impl RedisConfig {
    /// A config for `url` with no extra auth, prefix `gateway-leader` and a 2 s request timeout.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            username: None,
            password: None,
            ca_file: None,
            key_prefix: DEFAULT_KEY_PREFIX.to_string(),
            request_timeout: Duration::from_secs(2),
        }
    }

    /// True for a `rediss://` URL.
    pub(crate) fn is_tls(&self) -> bool {
        scheme(&self.url).is_some_and(|s| s.eq_ignore_ascii_case("rediss"))
    }
}

fn scheme(url: &str) -> Option<&str> {
    url.split_once("://").map(|(s, _)| s)
}

/// The URL with any password replaced, for messages.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    match auth {
        Some(a) => match a.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://{a}@{host}"),
        },
        None => url.to_string(),
    }
}

/// Checks the URL, the prefix and the CA file; no network.
pub(crate) fn check_config(config: &RedisConfig) -> Result<(), String> {
    let shown = redact_url(&config.url);
    match scheme(&config.url) {
        Some(s) if s.eq_ignore_ascii_case("redis") || s.eq_ignore_ascii_case("rediss") => {}
        Some(s) => {
            return Err(format!(
                "redis-url `{shown}`: scheme `{s}` is not supported; use redis:// or rediss://"
            ))
        }
        None => {
            return Err(format!(
                "redis-url `{shown}` is not a URL; expected redis://HOST:PORT or rediss://HOST:PORT"
            ))
        }
    }
    if let Err(e) = config.url.as_str().into_connection_info() {
        return Err(format!("redis-url `{shown}` is invalid: {e}"));
    }
    if config.key_prefix.is_empty() {
        return Err("redis-key-prefix must not be empty".into());
    }
    if config
        .key_prefix
        .chars()
        .any(|c| c == '{' || c == '}' || c.is_control() || c.is_whitespace())
    {
        return Err(format!(
            "redis-key-prefix `{}` must not contain braces (they would break the cluster hash tag), \
             whitespace or control characters",
            config.key_prefix
        ));
    }
    if let Some(ca) = &config.ca_file {
        if !config.is_tls() {
            return Err(format!(
                "redis-ca-file is set but redis-url `{shown}` does not use TLS; use rediss://"
            ));
        }
        read_ca(ca)?;
    }
    if config.request_timeout.is_zero() {
        return Err("the redis request timeout must be greater than zero".into());
    }
    Ok(())
}

/// Reads a CA bundle and checks that it holds at least one PEM certificate.
pub(crate) fn read_ca(path: &Path) -> Result<Vec<u8>, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("redis-ca-file {}: cannot read it: {e}", path.display()))?;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|e| {
            format!(
                "redis-ca-file {}: not a PEM certificate bundle: {e}",
                path.display()
            )
        })?;
        count += 1;
    }
    if count == 0 {
        return Err(format!(
            "redis-ca-file {}: no PEM certificate found in it",
            path.display()
        ));
    }
    Ok(pem)
}

/// Checks the timing against what Redis can express (PX takes whole milliseconds).
pub(crate) fn check_timing(config: &RedisConfig, timing: &Timing) -> Result<(), String> {
    timing.validate().map_err(|e| e.to_string())?;
    let lease = timing.lease_duration;
    if lease.subsec_nanos() % 1_000_000 != 0 || lease < Duration::from_millis(1) {
        return Err(format!(
            "lease-duration ({lease:?}) must be a whole number of milliseconds, at least 1ms, for redis"
        ));
    }
    timing
        .check_request_timeout("redis", config.request_timeout)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing::default()
    }

    #[test]
    fn schemes() {
        let ok = |u: &str| check_config(&RedisConfig::new(u));
        assert!(ok("redis://127.0.0.1:6379").is_ok());
        assert!(ok("rediss://redis.example:6380/2").is_ok());
        let e = ok("http://127.0.0.1:6379").unwrap_err();
        assert!(e.contains("redis-url") && e.contains("http"), "{e}");
        let e = ok("127.0.0.1:6379").unwrap_err();
        assert!(e.contains("redis-url"), "{e}");
        let e = ok("redis+unix:///tmp/x.sock").unwrap_err();
        assert!(e.contains("redis-url"), "{e}");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("redis://:secret@h:1"), "redis://:***@h:1");
        let mut c = RedisConfig::new("redis://u:secret@h:1");
        c.password = Some("hunter2".into());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("secret") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn prefix_and_ca() {
        let mut c = RedisConfig::new("redis://127.0.0.1:6379");
        c.key_prefix = "a{b}".into();
        assert!(check_config(&c).unwrap_err().contains("redis-key-prefix"));
        c.key_prefix = "gl".into();
        c.ca_file = Some("/nonexistent/ca.pem".into());
        assert!(check_config(&c).unwrap_err().contains("rediss://"));
        c.url = "rediss://127.0.0.1:6379".into();
        let e = check_config(&c).unwrap_err();
        assert!(
            e.contains("redis-ca-file") && e.contains("/nonexistent/ca.pem"),
            "{e}"
        );
    }

    #[test]
    fn milliseconds() {
        let c = RedisConfig::new("redis://127.0.0.1:6379");
        assert!(check_timing(&c, &timing()).is_ok());
        let t = Timing {
            lease_duration: Duration::from_micros(15_000_500),
            ..timing()
        };
        assert!(check_timing(&c, &t).unwrap_err().contains("milliseconds"));
        let slow = RedisConfig {
            request_timeout: Duration::from_secs(10),
            ..c
        };
        assert!(check_timing(&slow, &timing())
            .unwrap_err()
            .contains("renew-deadline"));
    }
}
