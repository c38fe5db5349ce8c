//! Connection settings and the checks that run before connecting.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::backend::ConfigError;
use leader_lock::input::{check_name, read_pem, redact_userinfo, Pem};
use leader_lock::Timing;

/// Settings named by several checks (see [`ConfigError`] for the spelling).
const ENDPOINTS: &str = "etcd-endpoints";
const USERNAME: &str = "etcd-username";

/// The smallest lease TTL a default etcd accepts (1.5 × its 1 s election timeout, rounded up).
pub const MIN_LEASE: Duration = Duration::from_secs(2);

/// The default prefix of the lock keys: named after this library, so that an operator who lists
/// `/leader-lock/` finds every lock it holds, whatever program embeds it. Give a program's own
/// prefix (its name, say) with [`EtcdConfig::key_prefix`].
pub const DEFAULT_KEY_PREFIX: &str = "/leader-lock/";

/// How to reach etcd and where the lock keys live.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leader_lock::Timing;
/// use leader_lock_etcd::EtcdConfig;
///
/// let mut config = EtcdConfig::new(vec!["http://127.0.0.1:2379".to_string()]);
/// config.key_prefix = "/my-controller/".to_string();
/// // Requests time out at a quarter of the renew deadline unless the config says otherwise.
/// let secs = Duration::from_secs;
/// let short = Timing::new(secs(6), secs(4), secs(1))?;
/// assert!(config.validate(&short).is_ok());
/// config.request_timeout = Some(Duration::from_secs(5));
/// assert!(config.validate(&short).is_err(), "a request may not outlast the renew deadline");
///
/// let fractional = Timing::new(
///     Duration::from_millis(2500),
///     Duration::from_secs(2),
///     Duration::from_millis(500),
/// )?;
/// assert!(config.validate(&fractional).is_err(), "etcd leases are whole seconds");
/// # Ok::<(), leader_lock::timing::TimingError>(())
/// ```
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Client URLs, `http://host:port` or `https://host:port`; several are balanced.
    pub endpoints: Vec<String>,
    /// CA bundle (PEM) that signs the servers' certificates; without it, the system's trusted
    /// roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), for servers that require one; goes with `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key_file: Option<PathBuf>,
    /// User for etcd authentication.
    pub username: Option<String>,
    /// Password of `username`.
    pub password: Option<String>,
    /// Prefix of the lock keys; the key is `<prefix><lock name>` ([`DEFAULT_KEY_PREFIX`] by
    /// default).
    pub key_prefix: String,
    /// Deadline of one request to one member; by default (`None`) a quarter of the renew
    /// deadline of the timing the elector validates the lock with
    /// ([`EtcdConfig::request_timeout_for`]). A lock attempt whose request fails or times out
    /// moves to the next endpoint and tries again there, so with several endpoints keep a
    /// deadline of your own well inside the renew deadline.
    pub request_timeout: Option<Duration>,
}

impl EtcdConfig {
    /// Settings for `endpoints` with the defaults: no TLS, no auth, prefix
    /// [`DEFAULT_KEY_PREFIX`], and requests that time out at a quarter of the renew deadline.
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdConfig {
            endpoints,
            ca_file: None,
            cert_file: None,
            key_file: None,
            username: None,
            password: None,
            key_prefix: DEFAULT_KEY_PREFIX.to_string(),
            request_timeout: None,
        }
    }

    /// Checks the settings without touching the network: well-formed endpoints without
    /// credentials, TLS files given together and holding PEM of the right kind, credentials
    /// complete, a plain key prefix, lease duration whole seconds of at least [`MIN_LEASE`], and
    /// `request_timeout` below the renew deadline.
    ///
    /// [`Elector::spawn`](leader_lock::Elector::spawn) checks the timing rules again on the
    /// connected lock; this checks the rest too, before connecting.
    ///
    /// # Errors
    /// The [`ConfigError`] naming the first setting that cannot work.
    pub fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        validate(self, timing)
    }

    /// The default per-request deadline for `timing`: a quarter of the renew deadline, so that
    /// a renew that meets a dead or hung member still has time to time out, move to a healthy
    /// member and succeed there (even after etcd elected a new Raft leader) before the
    /// leadership's validity ends.
    pub fn request_timeout_for(timing: &Timing) -> Duration {
        timing.renew_deadline / 4
    }

    /// True when any endpoint uses TLS.
    pub(crate) fn uses_tls(&self) -> bool {
        self.endpoints.iter().any(|e| e.starts_with("https://"))
    }
}

/// Checks an endpoint is `http(s)://host:port` with nothing after the port but an optional `/`.
pub(crate) fn check_endpoint(endpoint: &str) -> Result<(), ConfigError> {
    // Built from the redacted form only, so that no message can echo a password.
    let shown = redact_userinfo(endpoint);
    let bad = |why: &str| {
        Err(ConfigError::invalid(
            ENDPOINTS,
            format!("`{shown}` is not a client URL like http://127.0.0.1:2379 ({why})"),
        ))
    };
    if endpoint.contains('@') {
        return Err(ConfigError::CredentialsInUrl {
            setting: ENDPOINTS,
            shown: shown.to_string(),
        });
    }
    let rest = match endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
    {
        Some(r) => r,
        None => return bad("the scheme must be http:// or https://"),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') || authority.contains('?') {
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

/// The characters a key prefix may hold besides ASCII letters and digits: keys are paths such as
/// `/leader-lock/`, and nothing invisible or blank belongs in one.
const KEY_PREFIX_CHARS: &str = "-._:/";

/// The longest key prefix: keys stay short, and a longer prefix is a mistake.
const MAX_KEY_PREFIX_BYTES: usize = 128;

/// Reads one of the TLS files (bounded) and checks it holds what it should.
pub(crate) fn read_tls_file(
    setting: &'static str,
    path: &Path,
    kind: Pem,
) -> Result<Vec<u8>, ConfigError> {
    read_pem(path, kind).map_err(|e| ConfigError::invalid(setting, e.to_string()))
}

/// The checks of [`EtcdConfig::validate`].
pub(crate) fn validate(config: &EtcdConfig, timing: &Timing) -> Result<(), ConfigError> {
    if config.endpoints.is_empty() {
        return Err(no_endpoint());
    }
    for e in &config.endpoints {
        check_endpoint(e)?;
    }
    let tls = config.uses_tls();
    if tls && config.endpoints.iter().any(|e| e.starts_with("http://")) {
        return Err(ConfigError::invalid(
            ENDPOINTS,
            "mixing http:// and https:// endpoints is not supported",
        ));
    }
    check_tls(config)?;
    match (&config.username, &config.password) {
        (Some(u), _) if u.is_empty() => {
            return Err(ConfigError::invalid(USERNAME, "must not be empty"))
        }
        (Some(_), None) => return Err(ConfigError::UserWithoutPassword { setting: USERNAME }),
        (None, Some(_)) => {
            return Err(ConfigError::invalid(
                "etcd-password",
                "set without etcd-username",
            ))
        }
        _ => {}
    }
    check_name(&config.key_prefix, KEY_PREFIX_CHARS, MAX_KEY_PREFIX_BYTES)
        .map_err(|e| ConfigError::invalid("etcd-key-prefix", e.to_string()))?;
    let timeout = config
        .request_timeout
        .unwrap_or_else(|| EtcdConfig::request_timeout_for(timing));
    check_timing(timing, timeout)
}

/// The TLS settings of [`validate`]: only with `https://`, a client certificate with its key,
/// and each file readable and of its kind.
fn check_tls(config: &EtcdConfig) -> Result<(), ConfigError> {
    let tls = config.uses_tls();
    let tls_files = config.ca_file.is_some() || config.cert_file.is_some();
    if !tls && tls_files {
        return Err(ConfigError::invalid(
            ENDPOINTS,
            "http:// while etcd-ca-file or etcd-cert-file is set; use https:// URLs",
        ));
    }
    match (&config.cert_file, &config.key_file) {
        (Some(_), None) => {
            return Err(ConfigError::invalid(
                "etcd-cert-file",
                "set without etcd-key-file",
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::invalid(
                "etcd-key-file",
                "set without etcd-cert-file",
            ))
        }
        _ => {}
    }
    for (setting, file, kind) in [
        ("etcd-ca-file", &config.ca_file, Pem::Certificates),
        ("etcd-cert-file", &config.cert_file, Pem::Certificates),
        ("etcd-key-file", &config.key_file, Pem::PrivateKey),
    ] {
        if let Some(f) = file {
            read_tls_file(setting, f, kind)?;
        }
    }
    Ok(())
}

/// The timing rules of etcd: leases of whole seconds, at least [`MIN_LEASE`], and requests that
/// time out before the renew deadline.
pub(crate) fn check_timing(timing: &Timing, request_timeout: Duration) -> Result<(), ConfigError> {
    timing.validate()?;
    timing
        .require_whole_seconds(MIN_LEASE)
        .map_err(|source| ConfigError::Timing {
            source,
            note: Some(format!(
                "etcd lease TTLs are whole seconds, at least {MIN_LEASE:?}"
            )),
        })?;
    timing.check_request_timeout("etcd", request_timeout)?;
    Ok(())
}

/// The error for an empty endpoint list, which connecting refuses too.
pub(crate) fn no_endpoint() -> ConfigError {
    ConfigError::invalid(ENDPOINTS, "at least one endpoint is required")
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
            let (setting, _) = invalid(check_endpoint(bad).expect_err(bad));
            assert_eq!(setting, "etcd-endpoints", "{bad}");
        }
        for with_password in [
            "http://u:SECRET@127.0.0.1:2379",
            "https://:SECRET@h:2379/",
            "u:SECRET@h:2379",
        ] {
            let e = check_endpoint(with_password).expect_err(with_password);
            assert!(
                matches!(&e, ConfigError::CredentialsInUrl { setting: "etcd-endpoints", shown }
                    if !shown.contains("SECRET")),
                "{e:?}"
            );
            assert!(!e.to_string().contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn key_prefix() {
        let mut c = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        for bad in [
            "",
            "/gl\u{202e}/",
            "/a b/",
            &format!("/{}/", "a".repeat(127)),
        ] {
            c.key_prefix = bad.into();
            let (setting, e) = invalid(validate(&c, &timing()).unwrap_err());
            assert_eq!(setting, "etcd-key-prefix");
            assert!(e.contains("128 bytes"), "{e}");
        }
        c.key_prefix = "/team-a/gateway_leader:v1/".into();
        assert_eq!(validate(&c, &timing()), Ok(()));
    }

    #[test]
    fn endpoints_are_required_and_a_client_certificate_needs_its_key() {
        let ok = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        assert_eq!(validate(&ok, &timing()), Ok(()));

        let empty = EtcdConfig::new(vec![]);
        let (setting, _) = invalid(validate(&empty, &timing()).unwrap_err());
        assert_eq!(setting, "etcd-endpoints");

        let mut half = ok.clone();
        half.endpoints = vec!["https://127.0.0.1:2379".into()];
        half.ca_file = Some("/etc/hostname".into());
        half.cert_file = Some("/etc/hostname".into());
        let (setting, e) = invalid(validate(&half, &timing()).unwrap_err());
        assert_eq!(setting, "etcd-cert-file");
        assert!(e.contains("without etcd-key-file"), "{e}");
    }

    #[test]
    fn each_tls_file_is_named_when_it_cannot_be_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
            .expect("a certificate");
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, real.cert.pem()).expect("write");
        std::fs::write(&key, real.signing_key.serialize_pem()).expect("write");
        let mut tls = EtcdConfig::new(vec!["https://127.0.0.1:2379".into()]);
        tls.ca_file = Some(cert.clone());
        tls.cert_file = Some(cert.clone());
        tls.key_file = Some(key.clone());
        assert_eq!(validate(&tls, &timing()), Ok(()));

        // Each file is named when it is missing, not PEM, of the wrong kind, or no regular file.
        let not_pem = dir.path().join("not.pem");
        std::fs::write(&not_pem, "hello\n").expect("write");
        for (setting, bad, why) in [
            ("etcd-ca-file", "/nonexistent/ca.pem", "/nonexistent/ca.pem"),
            (
                "etcd-ca-file",
                not_pem.to_str().expect("utf-8"),
                "no PEM certificate",
            ),
            (
                "etcd-cert-file",
                key.to_str().expect("utf-8"),
                "no PEM certificate",
            ),
            (
                "etcd-key-file",
                cert.to_str().expect("utf-8"),
                "no PEM private key",
            ),
            ("etcd-key-file", "/dev/zero", "not a regular file"),
        ] {
            let mut c = tls.clone();
            let slot = match setting {
                "etcd-ca-file" => &mut c.ca_file,
                "etcd-cert-file" => &mut c.cert_file,
                _ => &mut c.key_file,
            };
            *slot = Some(bad.into());
            let (named, e) = invalid(validate(&c, &timing()).unwrap_err());
            assert_eq!(named, setting, "{bad}: {e}");
            assert!(
                e.starts_with(setting) && e.contains(why),
                "{setting} {bad}: {e}"
            );
        }
    }

    #[test]
    fn without_a_ca_file_the_system_roots_verify_and_a_user_needs_a_password() {
        let ok = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        // Without a CA file the system's trusted roots verify the servers.
        let mut no_ca = ok.clone();
        no_ca.endpoints = vec!["https://127.0.0.1:2379".into()];
        assert!(validate(&no_ca, &timing()).is_ok());

        let mut user = ok.clone();
        user.username = Some("root".into());
        assert_eq!(
            validate(&user, &timing()),
            Err(ConfigError::UserWithoutPassword {
                setting: "etcd-username"
            })
        );
    }

    #[test]
    fn lease_granularity() {
        let ok = EtcdConfig::new(vec!["http://127.0.0.1:2379".into()]);
        let ms = Duration::from_millis;
        let fractional = Timing::new(ms(2500), ms(2000), ms(500)).expect("valid timing");
        let e = validate(&ok, &fractional).unwrap_err();
        assert!(
            matches!(
                &e,
                ConfigError::Timing {
                    source: TimingError::NotWholeSeconds {
                        setting: "lease-duration",
                        ..
                    },
                    note: Some(_),
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.setting(), Some("lease-duration"));
        assert!(
            e.to_string()
                .ends_with("(etcd lease TTLs are whole seconds, at least 2s)"),
            "{e}"
        );
        let short = Timing::new(ms(1000), ms(800), ms(200)).expect("valid timing");
        assert!(
            matches!(
                validate(&ok, &short),
                Err(ConfigError::Timing {
                    source: TimingError::BelowMinimum {
                        setting: "lease-duration",
                        ..
                    },
                    ..
                })
            ),
            "{:?}",
            validate(&ok, &short)
        );
        let mut slow = ok.clone();
        slow.request_timeout = Some(Duration::from_secs(10));
        let too_slow = TimingError::RequestTimeout {
            backend: "etcd",
            value: Duration::from_secs(10),
            renew: Duration::from_secs(10),
        };
        assert_eq!(validate(&slow, &timing()), Err(too_slow.into()));
    }
}
