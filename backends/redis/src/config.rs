use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::backend::ConfigError;
use leader_lock::input::{read_pem, Pem};
use leader_lock::Timing;
use redis::IntoConnectionInfo;

/// How to reach Redis and where to keep the lock.
///
/// # Examples
///
/// ```
/// use leader_lock::Timing;
/// use leader_lock_redis::RedisConfig;
///
/// let mut config = RedisConfig::new("redis://127.0.0.1:6379/0");
/// config.username = Some("my-controller".to_string());
/// config.password = Some("secret".to_string());
/// assert!(config.validate(&Timing::default()).is_ok());
/// // Credentials in the URL would show in logs: refused.
/// assert!(RedisConfig::new("redis://u:pw@127.0.0.1:6379").validate(&Timing::default()).is_err());
/// assert!(!format!("{config:?}").contains("secret"), "Debug hides the password");
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://` or `rediss://` URL, without user or password (those are the fields below).
    pub url: String,
    /// ACL user name; goes with `password`.
    pub username: Option<String>,
    /// Password (of `username`, or of the default user). Keep it out of `url`: a URL shows up
    /// in logs and messages.
    pub password: Option<String>,
    /// A custom CA bundle (PEM) that signs the server certificate, for `rediss://`.
    pub ca_file: Option<PathBuf>,
    /// Every key and channel of the lock starts with this ([`DEFAULT_KEY_PREFIX`] by default).
    pub key_prefix: String,
    /// Bound on every single request; must stay below the renew deadline.
    pub request_timeout: Duration,
    /// Find the primary through Redis Sentinel instead of `url` (see [`SentinelConfig`]).
    pub sentinel: Option<SentinelConfig>,
    /// After every acquire and renew, `WAIT` until this many replicas have the write before the
    /// leadership counts (0, the default: do not wait). A promoted replica then holds the record
    /// of every leadership that counted; each renew costs a replication round trip more.
    pub wait_replicas: u32,
}

/// Where the Sentinels are and which primary they watch for the lock.
///
/// The lock asks them for the primary of `master` at connect and again whenever the primary it
/// talks to fails or answers as a replica, so it follows a failover to the promoted replica.
/// `url` is not used then; `username`, `password` and `ca_file` of [`RedisConfig`] apply to the
/// data nodes, and TLS (`rediss://`) to the Sentinels and the data nodes alike.
#[derive(Clone)]
pub struct SentinelConfig {
    /// The Sentinels, each `redis://host:port` or `rediss://host:port` (all with one scheme).
    pub addresses: Vec<String>,
    /// The name the Sentinels monitor the primary under (`sentinel monitor <name> ...`).
    pub master: String,
    /// ACL user on the Sentinels; goes with `password`.
    pub username: Option<String>,
    /// Password on the Sentinels (`requirepass`, or of `username`).
    pub password: Option<String>,
}

impl std::fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelConfig")
            .field("addresses", &self.addresses)
            .field("master", &self.master)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
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
            .field("sentinel", &self.sentinel)
            .field("wait_replicas", &self.wait_replicas)
            .finish()
    }
}

/// Settings named by several checks (see [`ConfigError`] for the spelling).
const URL: &str = "redis-url";
const CA_FILE: &str = "redis-ca-file";
const SENTINEL: &str = "redis-sentinel";
const SENTINEL_MASTER: &str = "redis-sentinel-master";
const USERNAME: &str = "redis-username";
const SENTINEL_USERNAME: &str = "redis-sentinel-username";

/// The default key prefix: named after this library, so that an operator finds every lock it
/// holds under `leader-lock:*`, whatever program embeds it. Give a program's own prefix (its name,
/// say) with [`RedisConfig::key_prefix`].
pub const DEFAULT_KEY_PREFIX: &str = "leader-lock";

impl RedisConfig {
    /// A config for `url` with no extra auth, prefix [`DEFAULT_KEY_PREFIX`] and a 2 s request
    /// timeout.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            username: None,
            password: None,
            ca_file: None,
            key_prefix: DEFAULT_KEY_PREFIX.to_string(),
            request_timeout: Duration::from_secs(2),
            sentinel: None,
            wait_replicas: 0,
        }
    }

    /// Checks the settings without touching the network: URL scheme and no credentials in it,
    /// CA file, key prefix, and that the timing fits Redis (lease in whole milliseconds,
    /// `request_timeout` below the renew deadline).
    ///
    /// [`Elector::spawn`](leader_lock::Elector::spawn) checks the timing rules again on the
    /// connected lock; this checks the rest too, before connecting.
    ///
    /// # Errors
    /// The [`ConfigError`] naming the first setting that cannot work.
    pub fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        check_config(self)?;
        check_timing(timing, self.request_timeout)
    }

    /// True for a `rediss://` URL (or Sentinel addresses).
    pub(crate) fn is_tls(&self) -> bool {
        match &self.sentinel {
            Some(s) => s
                .addresses
                .iter()
                .any(|a| scheme(a).is_some_and(|s| s.eq_ignore_ascii_case("rediss"))),
            None => scheme(&self.url).is_some_and(|s| s.eq_ignore_ascii_case("rediss")),
        }
    }
}

fn scheme(url: &str) -> Option<&str> {
    url.split_once("://").map(|(s, _)| s)
}

/// The URL without user and password, for messages and Debug output.
pub(crate) use leader_lock::input::redact_userinfo as redact_url;

/// The characters a key prefix may hold besides ASCII letters and digits: no braces (they would
/// break the cluster hash tag), nothing invisible or blank.
const KEY_PREFIX_CHARS: &str = "-._:/";

/// The longest key prefix: keys stay short, and a longer prefix is a mistake.
const MAX_KEY_PREFIX_BYTES: usize = 128;

/// Checks each Sentinel address: a URL without credentials, all of one scheme.
fn check_sentinel_addresses(addresses: &[String]) -> Result<(), ConfigError> {
    let mut schemes = Vec::new();
    for a in addresses {
        let shown = redact_url(a);
        if a.contains('@') {
            return Err(ConfigError::CredentialsInUrl {
                setting: SENTINEL,
                shown: shown.to_string(),
            });
        }
        let ok = match scheme(a) {
            Some(sc) if sc.eq_ignore_ascii_case("redis") || sc.eq_ignore_ascii_case("rediss") => {
                schemes.push(sc.to_ascii_lowercase());
                a.as_str().into_connection_info().is_ok()
            }
            _ => false,
        };
        if !ok {
            return Err(ConfigError::invalid(
                SENTINEL,
                format!(
                    "`{shown}` is not a Sentinel address like \
                     redis://127.0.0.1:26379 or rediss://sentinel-0.example:26379"
                ),
            ));
        }
    }
    schemes.dedup();
    if schemes.len() > 1 {
        return Err(ConfigError::invalid(
            SENTINEL,
            "mixes redis:// and rediss://; use one scheme for every Sentinel",
        ));
    }
    Ok(())
}

/// Checks the Sentinel addresses (URLs of one scheme, without credentials) and the master name.
fn check_sentinel(s: &SentinelConfig) -> Result<(), ConfigError> {
    if s.addresses.is_empty() {
        return Err(ConfigError::invalid(
            SENTINEL,
            "at least one Sentinel address is required",
        ));
    }
    check_sentinel_addresses(&s.addresses)?;
    // redis-rs sends no AUTH for a user without a password: it would connect as `default`.
    if s.username.is_some() && s.password.is_none() {
        return Err(ConfigError::UserWithoutPassword {
            setting: SENTINEL_USERNAME,
        });
    }
    let name_ok = !s.master.is_empty()
        && s.master.len() <= 128
        && s.master
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
    if !name_ok {
        return Err(ConfigError::invalid(
            SENTINEL_MASTER,
            format!(
                "{:?}: the name the Sentinels monitor the primary under is \
                 required with redis-sentinel (letters, digits, '-', '.', '_'; at most 128)",
                s.master
            ),
        ));
    }
    Ok(())
}

/// Checks the URL (or the Sentinels), the prefix and the CA file; no network.
pub(crate) fn check_config(config: &RedisConfig) -> Result<(), ConfigError> {
    match &config.sentinel {
        Some(s) => check_sentinel(s)?,
        None => check_url(config)?,
    }
    check_rest(config)
}

fn check_url(config: &RedisConfig) -> Result<(), ConfigError> {
    let shown = redact_url(&config.url);
    let bad_url = |message: String| Err(ConfigError::invalid(URL, message));
    // A password in the URL would show in `--print-config`, in process listings and in messages.
    if config.url.contains('@') {
        return Err(ConfigError::CredentialsInUrl {
            setting: URL,
            shown: shown.to_string(),
        });
    }
    match scheme(&config.url) {
        Some(s) if s.eq_ignore_ascii_case("redis") || s.eq_ignore_ascii_case("rediss") => {}
        Some(s) => {
            return bad_url(format!(
                "`{shown}`: scheme `{s}` is not supported; use redis:// or rediss://"
            ))
        }
        None => {
            return bad_url(format!(
                "`{shown}` is not a URL; expected redis://HOST:PORT or rediss://HOST:PORT"
            ))
        }
    }
    if let Err(e) = config.url.as_str().into_connection_info() {
        return bad_url(format!("`{shown}` is invalid: {e}"));
    }
    Ok(())
}

fn check_rest(config: &RedisConfig) -> Result<(), ConfigError> {
    // The setting that decides TLS: the Sentinels' addresses when they name the primary.
    let (tls_setting, shown) = match &config.sentinel {
        Some(s) => (SENTINEL, s.addresses.join(",")),
        None => (URL, redact_url(&config.url).to_string()),
    };
    leader_lock::input::check_name(&config.key_prefix, KEY_PREFIX_CHARS, MAX_KEY_PREFIX_BYTES)
        .map_err(|e| ConfigError::invalid("redis-key-prefix", e.to_string()))?;
    if config.username.is_some() && config.password.is_none() {
        return Err(ConfigError::UserWithoutPassword { setting: USERNAME });
    }
    if let Some(ca) = &config.ca_file {
        if !config.is_tls() {
            return Err(ConfigError::invalid(
                CA_FILE,
                format!(
                    "set, but {tls_setting} `{shown}` does not use TLS; use \
                     rediss://"
                ),
            ));
        }
        read_ca(ca)?;
    }
    if config.request_timeout.is_zero() {
        return Err(ConfigError::invalid(
            "request-timeout",
            "must be greater than zero",
        ));
    }
    Ok(())
}

/// Reads a CA bundle (bounded) and checks that it holds PEM certificates.
pub(crate) fn read_ca(path: &Path) -> Result<Vec<u8>, ConfigError> {
    read_pem(path, Pem::Certificates).map_err(|e| ConfigError::invalid(CA_FILE, e.to_string()))
}

/// Checks the timing against what Redis can express (PX takes whole milliseconds), and that
/// requests time out before the renew deadline.
pub(crate) fn check_timing(timing: &Timing, request_timeout: Duration) -> Result<(), ConfigError> {
    timing.validate()?;
    let lease = timing.lease_duration;
    if !lease.subsec_nanos().is_multiple_of(1_000_000) || lease < Duration::from_millis(1) {
        return Err(ConfigError::invalid(
            "lease-duration",
            format!(
                "{lease:?} must be a whole number of milliseconds, at least 1ms, \
                 for redis"
            ),
        ));
    }
    timing.check_request_timeout("redis", request_timeout)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use leader_lock::timing::TimingError;

    use super::*;

    fn timing() -> Timing {
        Timing::default()
    }

    /// The setting and the message of an invalid-setting error.
    /// The setting, and the error as shown (the setting first).
    fn invalid(e: ConfigError) -> (&'static str, String) {
        match &e {
            ConfigError::Invalid { setting, .. } => (setting, e.to_string()),
            other => panic!("not an invalid setting: {other:?}"),
        }
    }

    #[test]
    fn schemes() {
        let ok = |u: &str| check_config(&RedisConfig::new(u));
        assert!(ok("redis://127.0.0.1:6379").is_ok());
        assert!(ok("rediss://redis.example:6380/2").is_ok());
        let (setting, e) = invalid(ok("http://127.0.0.1:6379").unwrap_err());
        assert_eq!(setting, "redis-url");
        assert!(e.contains("http"), "{e}");
        for bad in ["127.0.0.1:6379", "redis+unix:///tmp/x.sock"] {
            let (setting, _) = invalid(ok(bad).unwrap_err());
            assert_eq!(setting, "redis-url", "{bad}");
        }
    }

    #[test]
    fn credentials_in_the_url_are_refused_unechoed() {
        for url in [
            "redis://u:SECRET@h:1/0",
            "redis://:SECRET@h:1",
            "redis:u:SECRET@h",
            "http://u:SECRET@h:1",
        ] {
            let e = check_config(&RedisConfig::new(url)).unwrap_err();
            assert!(
                matches!(&e, ConfigError::CredentialsInUrl { setting: "redis-url", shown }
                    if !shown.contains("SECRET")),
                "{e:?}"
            );
            assert!(!e.to_string().contains("SECRET"), "{e}");
        }
        let mut c = RedisConfig::new("redis://u:SECRET@h:1");
        c.password = Some("hunter2".into());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("SECRET") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn prefix_and_ca() {
        let mut c = RedisConfig::new("redis://127.0.0.1:6379");
        for bad in ["a{b}", "", "gl\u{202e}x", "gl\u{200b}", "a b"] {
            c.key_prefix = bad.into();
            let (setting, e) = invalid(check_config(&c).unwrap_err());
            assert_eq!(setting, "redis-key-prefix");
            assert!(e.contains("128 bytes"), "{e}");
        }
        c.key_prefix = "gl:test/1".into();
        assert_eq!(check_config(&c), Ok(()));
        c.ca_file = Some("/nonexistent/ca.pem".into());
        let (setting, e) = invalid(check_config(&c).unwrap_err());
        assert_eq!(setting, "redis-ca-file");
        assert!(e.contains("rediss://"), "{e}");
        c.url = "rediss://127.0.0.1:6379".into();
        let (setting, e) = invalid(check_config(&c).unwrap_err());
        assert_eq!(setting, "redis-ca-file");
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        c.ca_file = Some("/dev/zero".into());
        let (setting, e) = invalid(check_config(&c).unwrap_err());
        assert_eq!(setting, "redis-ca-file");
        assert!(e.contains("not a regular file"), "{e}");

        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not a certificate\n").expect("write");
        c.ca_file = Some(ca.clone());
        let (setting, e) = invalid(check_config(&c).unwrap_err());
        assert_eq!(setting, "redis-ca-file");
        assert!(e.contains("no PEM certificate"), "{e}");
        let real = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .expect("a certificate");
        std::fs::write(&ca, real.cert.pem()).expect("write");
        assert_eq!(check_config(&c), Ok(()));
    }

    #[test]
    fn a_user_without_a_password_is_refused_on_either_side() {
        let mut c = RedisConfig::new("redis://127.0.0.1:6379");
        c.username = Some("gl".into());
        let no_password = |setting| Err(ConfigError::UserWithoutPassword { setting });
        assert_eq!(check_config(&c), no_password("redis-username"));
        c.password = Some("pw".into());
        assert_eq!(check_config(&c), Ok(()));
        c.sentinel = Some(SentinelConfig {
            addresses: vec!["redis://127.0.0.1:26379".into()],
            master: "mymaster".into(),
            username: Some("watcher".into()),
            password: None,
        });
        assert_eq!(check_config(&c), no_password("redis-sentinel-username"));
        if let Some(s) = c.sentinel.as_mut() {
            s.password = Some("sentinel-pw".into());
        }
        assert_eq!(check_config(&c), Ok(()));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("sentinel-pw") && !shown.contains("\"pw\""),
            "{shown}"
        );
        // TLS is the Sentinels' scheme's: a CA with plain Sentinels names them.
        c.ca_file = Some("/nonexistent/ca.pem".into());
        let (setting, e) = invalid(check_config(&c).unwrap_err());
        assert_eq!(setting, "redis-ca-file");
        assert!(
            e.contains("redis-sentinel `redis://127.0.0.1:26379`"),
            "{e}"
        );
    }

    #[test]
    fn milliseconds() {
        let c = RedisConfig::new("redis://127.0.0.1:6379");
        assert!(check_timing(&timing(), c.request_timeout).is_ok());
        let t = Timing {
            lease_duration: Duration::from_micros(15_000_500),
            ..timing()
        };
        let (setting, e) = invalid(check_timing(&t, c.request_timeout).unwrap_err());
        assert_eq!(setting, "lease-duration");
        assert!(e.contains("milliseconds"), "{e}");
        let slow = RedisConfig {
            request_timeout: Duration::from_secs(10),
            ..c
        };
        let too_slow = TimingError::RequestTimeout {
            backend: "redis",
            value: Duration::from_secs(10),
            renew: Duration::from_secs(10),
        };
        assert_eq!(
            check_timing(&timing(), slow.request_timeout),
            Err(too_slow.into())
        );
    }
}
