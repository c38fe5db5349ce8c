//! The layers of raw values (defaults, file, environment, flags) merged, then validated into
//! [`Settings`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::input::{read_bounded, redact_userinfo};
use leader_lock::{Timing, TimingError};

use super::checks::{
    check_identity, parse_duration, validate_controller_name, validate_dns_label,
    validate_dns_subdomain,
};
use super::effective::{
    Backend, EtcdSettings, KubeSettings, LogFormat, RedisSettings, Settings, Wakeup,
};
use super::env::{Env, POD_NAME, POD_NAMESPACE};
use super::error::ConfigError;
use super::file::read_file;
use super::kubeconfig;
use super::names::{env_var, flag, ENV_PREFIX};
use super::secret::Secret;
use super::settings::SETTINGS;

/// The settings whose values are URLs: `--print-config` shows them without user info.
const URL_SETTINGS: &[&str] = &["etcd_endpoints", "redis_url"];

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
                    .map_err(|e| ConfigError::invalid(s.key, e.to_string()))?;
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
                .map_err(|e| ConfigError::invalid(k, e.to_string()))?;
        }
        let merged = b
            .build()
            .map_err(|e| ConfigError::input("configuration", e.to_string()))?;
        Ok(Layers { merged, env })
    }

    /// The value of `key`, if given anywhere (or defaulted). A value given empty is an error: it
    /// is a mistake, never a way to ask for the default.
    fn get(&self, key: &'static str) -> Result<Option<String>, ConfigError> {
        match self.merged.get::<config::Value>(key) {
            Ok(v) => match v.kind {
                config::ValueKind::Nil => Err(ConfigError::empty(key)),
                config::ValueKind::Table(_) | config::ValueKind::Array(_)
                    if key == "etcd_endpoints" =>
                {
                    let list: Vec<String> = self.merged.get(key).map_err(|e| {
                        ConfigError::invalid(key, format!("expected a list of endpoints: {e}"))
                    })?;
                    Ok(Some(list.join(",")))
                }
                config::ValueKind::Table(_) | config::ValueKind::Array(_) => Err(
                    ConfigError::invalid(key, "expected a single value, found a table or list"),
                ),
                _ => {
                    let v = v
                        .into_string()
                        .map_err(|e| ConfigError::invalid(key, e.to_string()))?;
                    match v.trim() {
                        "" => Err(ConfigError::empty(key)),
                        v => Ok(Some(v.to_string())),
                    }
                }
            },
            Err(config::ConfigError::NotFound(_)) => Ok(None),
            Err(e) => Err(ConfigError::invalid(key, e.to_string())),
        }
    }

    fn bool(&self, key: &'static str) -> Result<bool, ConfigError> {
        let v = self.get(key)?.unwrap_or_default();
        match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(ConfigError::invalid(
                key,
                format!("{v:?} is not a boolean; accepted: true or false"),
            )),
        }
    }

    fn duration(&self, key: &'static str) -> Result<Duration, ConfigError> {
        let v = self.get(key)?.unwrap_or_default();
        parse_duration(&v).map_err(|m| ConfigError::invalid(key, m))
    }

    /// A file setting and the file's bytes: a regular file of at most 1 MiB, whatever reads it
    /// later, so that a FIFO or `/dev/zero` is named at startup instead of hanging a reader.
    fn file(&self, key: &'static str) -> Result<Option<(PathBuf, Vec<u8>)>, ConfigError> {
        let Some(p) = self.get(key)? else {
            return Ok(None);
        };
        let path = PathBuf::from(&p);
        let bytes = read_bounded(&path).map_err(|e| ConfigError::invalid(key, e))?;
        Ok(Some((path, bytes)))
    }

    fn path(&self, key: &'static str) -> Result<Option<PathBuf>, ConfigError> {
        Ok(self.file(key)?.map(|(path, _)| path))
    }

    fn secret(
        &self,
        key: &'static str,
        file_key: &'static str,
    ) -> Result<Option<Secret>, ConfigError> {
        if let Some((path, bytes)) = self.file(file_key)? {
            let s = String::from_utf8(bytes).map_err(|_| {
                ConfigError::invalid(file_key, format!("{} is not UTF-8 text", path.display()))
            })?;
            let s = s.trim_end_matches(['\r', '\n']).to_string();
            if s.is_empty() {
                return Err(ConfigError::invalid(
                    file_key,
                    format!("{} is empty", path.display()),
                ));
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
            check_identity(&id).map_err(|m| ConfigError::invalid(key, m))?;
            return Ok(id);
        }
        if let Some(pod) = self.env.get(POD_NAME) {
            check_identity(pod).map_err(|m| {
                ConfigError::input(
                    POD_NAME,
                    format!("{m} (or set {} to override it)", flag(key)),
                )
            })?;
            return Ok(pod.to_string());
        }
        let host = hostname();
        check_identity(&host).map_err(|m| {
            ConfigError::invalid(
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
            validate_dns_label(&ns).map_err(|m| ConfigError::invalid(key, m))?;
            return Ok(Some(ns));
        }
        match self.env.get(POD_NAMESPACE) {
            Some(ns) => {
                validate_dns_label(ns).map_err(|m| ConfigError::input(POD_NAMESPACE, m))?;
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
        validate_dns_subdomain(&lock_name)
            .map_err(|m| ConfigError::invalid("leader_election_lock_name", m))?;
        let identity = self.identity(hostname)?;
        let timing = Timing::new(
            self.duration("lease_duration")?,
            self.duration("renew_deadline")?,
            self.duration("retry_period")?,
        )
        .map_err(|e| timing_error(&e))?;
        let controller_name = self.get("controller_name")?.unwrap_or_default();
        validate_controller_name(&controller_name)
            .map_err(|m| ConfigError::invalid("controller_name", m))?;
        let health_addr = self.get("health_addr")?.unwrap_or_default();
        let health_addr: std::net::SocketAddr = health_addr.parse().map_err(|_| {
            ConfigError::invalid(
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
                return Err(ConfigError::invalid(
                    "log_format",
                    format!("{other:?}; accepted values: text, json"),
                ))
            }
        };
        let wakeup = match self.get("wakeup")?.unwrap_or_default().as_str() {
            "watch" => Wakeup::Watch,
            "poll" => Wakeup::Poll,
            other => {
                return Err(ConfigError::invalid(
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

/// A timing error under the setting it is about, so that the message names its flag; rules
/// between settings are reported under "timing".
fn timing_error(e: &TimingError) -> ConfigError {
    let setting = match e {
        TimingError::Zero { setting } | TimingError::OutOfRange { setting, .. } => SETTINGS
            .iter()
            .find(|s| s.key.replace('_', "-") == *setting)
            .map(|s| s.key),
        _ => None,
    };
    match setting {
        Some(key) => ConfigError::invalid(key, e.to_string()),
        None => ConfigError::input("timing", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::settings::DEFAULT_LOCK_NAME;

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
    fn errors_name_the_setting() {
        let e = load(&[("GATEWAY_LEADER_RELEASE_ON_SHUTDOWN", "maybe")], &[]).unwrap_err();
        assert_eq!(e.setting(), Some("release_on_shutdown"));
        let text = e.to_string();
        assert!(
            text.contains("--release-on-shutdown") && text.contains("true or false"),
            "{text}"
        );
        let e = load(&[], &[("wakeup", "push")]).unwrap_err();
        assert_eq!(e.setting(), Some("wakeup"));
        assert!(e.to_string().contains("watch, poll"), "{e}");
        assert_eq!(
            load(&[], &[("wakeup", "poll")]).ok().map(|s| s.wakeup),
            Some(Wakeup::Poll)
        );
        let e = load(&[], &[("log_format", "xml")]).unwrap_err();
        assert_eq!(e.setting(), Some("log_format"));
        assert!(e.to_string().contains("text, json"), "{e}");
    }
}
