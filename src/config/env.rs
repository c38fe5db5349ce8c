//! The process environment, as far as the settings read it.

use std::collections::BTreeMap;
use std::ffi::OsString;

use super::error::ConfigError;
use super::names::{env_var, ENV_PREFIX, NOT_SETTINGS};
use super::settings::{CONFIG_KEY, SETTINGS};

/// The pod's name from the downward API: the identity when none is configured.
pub const POD_NAME: &str = "POD_NAME";

/// The pod's namespace from the downward API: the Lease's namespace when none is configured.
pub const POD_NAMESPACE: &str = "POD_NAMESPACE";

/// The process environment as the settings see it.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `GATEWAY_LEADER_*`, `POD_NAME` and `POD_NAMESPACE`.
    pub(super) vars: BTreeMap<String, String>,
    /// `KUBECONFIG`, which holds paths and so need not be UTF-8.
    pub(super) kubeconfig: Option<OsString>,
    /// `HOME`, for `~/.kube/config`.
    pub(super) home: Option<OsString>,
}

impl Env {
    /// Keeps the variables the settings read. One of ours that is not UTF-8 is an error naming
    /// it; any other variable is ignored whatever it holds, as it is none of our business.
    pub fn from_os(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Self, ConfigError> {
        let mut env = Env::default();
        for (k, v) in vars {
            match k.to_str() {
                Some("KUBECONFIG") => env.kubeconfig = Some(v),
                Some("HOME") => env.home = Some(v),
                Some(name) if Self::is_ours(name) => {
                    let v = v.into_string().map_err(|_| {
                        ConfigError::input(
                            format!("environment variable {name}"),
                            "the value is not valid UTF-8; accepted: UTF-8 text",
                        )
                    })?;
                    env.vars.insert(name.to_string(), v);
                }
                _ => {}
            }
        }
        Ok(env)
    }

    fn is_ours(name: &str) -> bool {
        name.starts_with(&format!("{ENV_PREFIX}_")) || name == POD_NAME || name == POD_NAMESPACE
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Refuses every `GATEWAY_LEADER_*` variable that names no setting, as an unknown key in
    /// the config file is refused: a typo (`GATEWAY_LEADER_LEASE_DURATON`) would otherwise
    /// leave its setting at the default without a word. Exempt: [`NOT_SETTINGS`], and the
    /// variables Kubernetes derives from the name of a Service (`gateway-leader-metrics` gives
    /// `GATEWAY_LEADER_METRICS_SERVICE_HOST` and friends) in pods that keep service links on.
    pub(super) fn check_names(&self) -> Result<(), ConfigError> {
        let unknown: Vec<String> = self
            .vars
            .keys()
            .filter(|k| k.starts_with(&format!("{ENV_PREFIX}_")))
            .filter(|k| !is_setting(k) && !NOT_SETTINGS.contains(&k.as_str()))
            .filter(|k| !is_service_link(k))
            .map(|k| match closest_setting(k) {
                Some(near) => format!("{k} (did you mean {near}?)"),
                None => k.clone(),
            })
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        Err(ConfigError::input(
            format!("environment variable(s) {}", unknown.join(", ")),
            "no such setting; every setting's variable is listed in docs/configuration.md \
             and by `gateway-leader run --help` (a flag --lease-duration is \
             GATEWAY_LEADER_LEASE_DURATION)",
        ))
    }
}

/// The environment variables of the settings, `--config`'s included.
fn setting_vars() -> impl Iterator<Item = String> {
    SETTINGS
        .iter()
        .map(|s| env_var(s.key))
        .chain([env_var(CONFIG_KEY)])
}

fn is_setting(name: &str) -> bool {
    setting_vars().any(|v| v == name)
}

/// The setting's variable closest to `name`, if one is close enough to be what was meant
/// (the similarity clap's own suggestions ask for).
fn closest_setting(name: &str) -> Option<String> {
    let short = |v: &str| v.strip_prefix(ENV_PREFIX).unwrap_or(v).to_string();
    let given = short(name);
    setting_vars()
        .map(|v| (strsim::jaro(&given, &short(&v)), v))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, v)| v)
}

/// Whether `name` has the shape of a variable Kubernetes sets for a Service in the pod's
/// namespace when `enableServiceLinks` is on: `<SVC>_SERVICE_HOST`, `<SVC>_SERVICE_PORT`,
/// `<SVC>_SERVICE_PORT_<PORT_NAME>`, `<SVC>_PORT`, `<SVC>_PORT_<N>_<PROTO>` and that with
/// `_PROTO`, `_PORT` or `_ADDR`. No setting's variable has one of these shapes (a test checks).
fn is_service_link(name: &str) -> bool {
    if name.ends_with("_SERVICE_HOST")
        || name.ends_with("_SERVICE_PORT")
        || name.contains("_SERVICE_PORT_")
        || name.ends_with("_PORT")
    {
        return true;
    }
    // `<SVC>_PORT_<N>_<PROTO>[_PROTO|_PORT|_ADDR]`, found from the end: the Service's own name
    // may hold `_PORT_` too.
    let parts: Vec<&str> = name.rsplit('_').collect();
    let tail = match parts.as_slice() {
        [suffix, rest @ ..] if ["PROTO", "PORT", "ADDR"].contains(suffix) => rest,
        all => all,
    };
    matches!(tail, [proto, number, port, _, ..]
        if ["TCP", "UDP", "SCTP"].contains(proto)
            && !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit())
            && *port == "PORT")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(b"\xff".to_vec());
        let env = Env::from_os([
            ("UNRELATED".into(), bad()),
            ("KUBECONFIG".into(), bad()),
            ("POD_NAME".into(), "pod-0".into()),
        ])
        .expect("only our variables must be UTF-8");
        assert_eq!(env.get(POD_NAME), Some("pod-0"));
        assert_eq!(env.get("UNRELATED"), None);
        let e = Env::from_os([("GATEWAY_LEADER_X".into(), bad())]).unwrap_err();
        assert!(e.to_string().contains("GATEWAY_LEADER_X"), "{e}");
    }

    fn check(vars: &[&str]) -> Result<(), ConfigError> {
        Env::from_os(vars.iter().map(|k| (k.into(), "1".into())))
            .expect("UTF-8")
            .check_names()
    }

    #[test]
    fn a_misspelt_setting_is_refused_with_the_setting_it_resembles() {
        let e = check(&["GATEWAY_LEADER_LEASE_DURATON"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "GATEWAY_LEADER_LEASE_DURATON (did you mean GATEWAY_LEADER_LEASE_DURATION?)"
            ),
            "{e}"
        );
        let e = check(&["GATEWAY_LEADER_RENEW_DEADLIN", "GATEWAY_LEADER_WHATEVER"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("did you mean GATEWAY_LEADER_RENEW_DEADLINE?"),
            "{e}"
        );
        assert!(
            e.contains("GATEWAY_LEADER_WHATEVER,") || e.contains("GATEWAY_LEADER_WHATEVER:"),
            "nothing resembles it, so nothing is suggested: {e}"
        );
        assert!(e.contains("docs/configuration.md"), "{e}");
    }

    #[test]
    fn settings_and_the_listed_names_are_accepted() {
        let settings: Vec<String> = setting_vars().collect();
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        assert_eq!(check(&settings), Ok(()));
        assert_eq!(check(NOT_SETTINGS), Ok(()));
        assert!(settings.contains(&"GATEWAY_LEADER_CONFIG"));
        // Not ours, nor even spelt like ours.
        assert_eq!(check(&["GATEWAYLEADER_X", "POD_NAME", "HOME"]), Ok(()));
    }

    #[test]
    fn the_listed_names_are_no_settings() {
        for name in NOT_SETTINGS {
            assert!(
                !is_setting(name),
                "{name} is a setting: drop it from NOT_SETTINGS"
            );
            assert!(name.starts_with("GATEWAY_LEADER_"), "{name}");
        }
    }

    #[test]
    fn kubernetes_service_links_are_accepted_and_no_setting_looks_like_one() {
        // A Service `gateway-leader` with a port named `metrics`, and `gateway-leader-metrics`.
        let links = [
            "GATEWAY_LEADER_SERVICE_HOST",
            "GATEWAY_LEADER_SERVICE_PORT",
            "GATEWAY_LEADER_SERVICE_PORT_METRICS",
            "GATEWAY_LEADER_PORT",
            "GATEWAY_LEADER_PORT_9090_TCP",
            "GATEWAY_LEADER_PORT_9090_TCP_PROTO",
            "GATEWAY_LEADER_PORT_9090_TCP_PORT",
            "GATEWAY_LEADER_PORT_9090_TCP_ADDR",
            "GATEWAY_LEADER_METRICS_PORT_53_UDP_ADDR",
            "GATEWAY_LEADER_METRICS_SERVICE_HOST",
        ];
        assert_eq!(check(&links), Ok(()));
        for near_miss in ["GATEWAY_LEADER_PORT_X_TCP", "GATEWAY_LEADER_PORT_9090_HTTP"] {
            assert!(!is_service_link(near_miss), "{near_miss}");
        }
        for var in setting_vars() {
            assert!(
                !is_service_link(&var),
                "{var} would be taken for a service link"
            );
        }
    }
}
