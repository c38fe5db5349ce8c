//! The process environment, as far as the settings read it.

use std::collections::BTreeMap;
use std::ffi::OsString;

use super::error::ConfigError;
use super::names::ENV_PREFIX;

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
}
