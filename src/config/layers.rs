//! The layers of raw values (defaults, file, environment, flags) merged, then validated into
//! [`Settings`].

use std::path::Path;

use leader_lock::input::redact_userinfo;
use leader_lock::timing::TimingError;
use leader_lock::Timing;

use super::checks::{check_identity, validate_dns_label};
use super::effective::{
    Backend, EtcdSettings, ExecSettings, KubeSettings, RedisSettings, Settings,
};
use super::env::{Env, POD_NAME, POD_NAMESPACE};
use super::error::ConfigError;
use super::file::read_file;
use super::kubeconfig;
use super::names::{env_var, flag, ENV_PREFIX};
use super::secret::Secret;
use super::settings::{Form, Values, SETTINGS};

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
        env.check_names()?;
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

    /// This replica's name: the setting, else `POD_NAME`, else the hostname; checked wherever
    /// it came from, and an error names that source.
    fn identity(&self, hostname: impl FnOnce() -> String) -> Result<String, ConfigError> {
        if let Some(id) = self.leader_election_identity()? {
            return Ok(id);
        }
        let key = "leader_election_identity";
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
        if let Some(ns) = self.leader_election_namespace()? {
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
    /// when neither the setting nor `POD_NAME` does. Each value goes through the check its
    /// setting declares (`settings.rs`); what is left here is what spans settings or sources.
    pub fn settings(&self, hostname: impl FnOnce() -> String) -> Result<Settings, ConfigError> {
        let backend = self.lock_backend()?;
        let lock_name = self.leader_election_lock_name()?;
        let identity = self.identity(hostname)?;
        let timing = Timing::new(
            self.lease_duration()?,
            self.renew_deadline()?,
            self.retry_period()?,
        )
        .map_err(|e| timing_error(&e))?;
        let controller_name = self.controller_name()?;
        let health_addr = self.health_addr()?;
        let log_format = self.log_format()?;
        let wakeup = self.wakeup()?;
        let namespace = self.namespace()?;
        let etcd = EtcdSettings {
            endpoints: self.etcd_endpoints()?,
            ca_file: self.etcd_ca_file()?,
            cert_file: self.etcd_cert_file()?,
            key_file: self.etcd_key_file()?,
            username: self.etcd_username()?,
            password: password(self.etcd_password_file()?, || self.etcd_password())?,
            key_prefix: self.etcd_key_prefix()?,
        };
        let redis = RedisSettings {
            url: self.redis_url()?,
            username: self.redis_username()?,
            password: password(self.redis_password_file()?, || self.redis_password())?,
            ca_file: self.redis_ca_file()?,
            key_prefix: self.redis_key_prefix()?,
            wait_replicas: self.redis_wait_replicas()?,
            sentinels: self.redis_sentinel()?,
            sentinel_master: self.redis_sentinel_master()?,
            sentinel_username: self.redis_sentinel_username()?,
            sentinel_password: password(self.redis_sentinel_password_file()?, || {
                self.redis_sentinel_password()
            })?,
        };
        let kube = KubeSettings {
            kubeconfig: self.kubeconfig()?,
            context: self.kube_context()?,
            namespace,
        };
        kubeconfig::check(&kube, &self.env)?;
        let proxy_election_lease = self.proxy_election_lease()?;
        if let Some(lease) = &proxy_election_lease {
            // Answered by the proxy and never sent on: it must not be the Lease our own lock is.
            let same_namespace = match &kube.namespace {
                Some(ns) => *ns == lease.namespace,
                // The kubeconfig's namespace, unknown here: it may be the same.
                None => true,
            };
            if backend == Backend::Kubernetes && lease.name == lock_name && same_namespace {
                return Err(ConfigError::invalid(
                    "proxy_election_lease",
                    format!(
                        "{lease} is the Lease of this replica's own lock \
                         (--leader-election-lock-name {lock_name}): name the controller's \
                         election another Lease, or set --leader-election-namespace to another \
                         namespace"
                    ),
                ));
            }
        }
        Ok(Settings {
            backend,
            disabled: self.leader_election_disable()?,
            lock_name,
            identity,
            timing,
            release_on_shutdown: self.release_on_shutdown()?,
            wakeup,
            controller_name,
            gateway_addresses_service: self.gateway_addresses_service()?,
            health_addr,
            readiness_follows_leadership: self.readiness_follows_leadership()?,
            proxy_listen: self.proxy_listen()?,
            proxy_election_lease,
            exec: ExecSettings {
                grace: self.exec_grace()?,
                restart: self.exec_restart()?,
            },
            worker_threads: self.worker_threads()?,
            log_format,
            log_level: self.log_level()?,
            kube,
            etcd,
            redis,
        })
    }

    /// The effective raw values for `--print-config`, secrets redacted, as TOML lines.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for s in SETTINGS {
            let v = match self.raw(s.key) {
                Ok(Some(_)) if s.secret => "\"<redacted>\"".to_string(),
                Ok(Some(v)) if s.form != Form::Plain => {
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

impl Values for Layers {
    /// The value of `key`, if given anywhere (or defaulted). A value given empty is an error: it
    /// is a mistake, never a way to ask for the default.
    fn raw(&self, key: &'static str) -> Result<Option<String>, ConfigError> {
        let list = SETTINGS
            .iter()
            .any(|s| s.key == key && s.form == Form::UrlList);
        match self.merged.get::<config::Value>(key) {
            Ok(v) => match v.kind {
                config::ValueKind::Nil => Err(ConfigError::empty(key)),
                config::ValueKind::Table(_) | config::ValueKind::Array(_) if list => {
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
}

/// A password: from its file when one is given, else the value itself, which is then not even
/// read: an empty one beside a file is no error.
fn password(
    file: Option<Secret>,
    value: impl FnOnce() -> Result<Option<Secret>, ConfigError>,
) -> Result<Option<Secret>, ConfigError> {
    match file {
        Some(p) => Ok(Some(p)),
        None => value(),
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
    use crate::config::effective::{Backend, Wakeup};
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
    fn the_addresses_service_is_namespace_slash_name_of_a_service() {
        let s = load(&[], &[("gateway_addresses_service", "gw-system/envoy")]).expect("valid");
        let svc = s.gateway_addresses_service.expect("set");
        assert_eq!(svc.to_string(), "gw-system/envoy");
        assert!(load(&[], &[])
            .expect("valid")
            .gateway_addresses_service
            .is_none());
        // A Service's name is a DNS label: no dots, unlike a Lease's.
        for bad in [
            "envoy",
            "gw/",
            "/envoy",
            "gw/a.b",
            "gw/a/b",
            "GW/envoy",
            "gw/\u{202e}x",
        ] {
            let e = load(&[], &[("gateway_addresses_service", bad)])
                .expect_err(bad)
                .to_string();
            assert!(
                e.contains("--gateway-addresses-service") && e.contains("NAMESPACE/NAME"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_election_lease_is_namespace_slash_name_and_never_our_own_lock() {
        let s = load(
            &[],
            &[("proxy_election_lease", "projectcontour/leader-elect")],
        )
        .expect("valid");
        let lease = s.proxy_election_lease.expect("set");
        assert_eq!(
            (lease.namespace.as_str(), lease.name.as_str()),
            ("projectcontour", "leader-elect")
        );
        for bad in ["leader-elect", "Bad_NS/x", "ns/", "/x", "ns/x/y", "a.b/x"] {
            let e = load(&[], &[("proxy_election_lease", bad)])
                .expect_err(bad)
                .to_string();
            assert!(
                e.contains("--proxy-election-lease") && e.contains("NAMESPACE/NAME"),
                "{bad}: {e}"
            );
        }
        let own = format!("gw/{DEFAULT_LOCK_NAME}");
        let e = load(
            &[],
            &[
                ("proxy_election_lease", &own),
                ("leader_election_namespace", "gw"),
            ],
        )
        .expect_err("our own lock")
        .to_string();
        assert!(e.contains("own lock"), "{e}");
        // Not ours when the lock is in etcd, or in another namespace.
        for flags in [
            [
                ("proxy_election_lease", own.as_str()),
                ("lock_backend", "etcd"),
            ],
            [
                ("proxy_election_lease", own.as_str()),
                ("leader_election_namespace", "other"),
            ],
        ] {
            assert!(load(&[], &flags).is_ok(), "{flags:?}");
        }
    }

    #[test]
    fn env_and_flags_layer() {
        let s = load(
            &[
                ("GATEWAY_LEADER_LOCK_BACKEND", "redis"),
                ("GATEWAY_LEADER_REDIS_PASSWORD", "pw"),
                // Not a setting, and listed as such: accepted, and not read.
                ("GATEWAY_LEADER_KUBE_VERSION", "oldest"),
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
    fn a_password_file_wins_and_the_password_beside_it_is_not_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\n").expect("write");
        let file = file.to_str().expect("a UTF-8 temp path");
        let s = load(
            &[("GATEWAY_LEADER_REDIS_PASSWORD", "")],
            &[("redis_password_file", file)],
        )
        .expect("an empty password beside its file is not read");
        assert_eq!(
            s.redis.password.as_ref().map(Secret::expose),
            Some("from-file")
        );
        let e = load(&[("GATEWAY_LEADER_ETCD_PASSWORD", "")], &[]).unwrap_err();
        assert_eq!(e.setting(), Some("etcd_password"));
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
