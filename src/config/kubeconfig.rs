//! The kubeconfig, checked at startup. Every backend needs Kubernetes (the status writer always
//! talks to it), so a kubeconfig that does not parse or lacks the context asked for is refused
//! before anything runs, rather than when the first client is built. No kubeconfig at all is fine:
//! then the pod's service account is used.

use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;
use leader_lock::input::read_bounded;
#[cfg(doc)]
use leader_lock_kubernetes::ClientOptions;
use leader_lock_kubernetes::KubeconfigSource;

use super::effective::KubeSettings;
use super::env::Env;
use super::error::ConfigError;
use super::file::without_excerpt;

/// At most this many context names are listed in a message.
const LISTED_CONTEXTS: usize = 10;

/// The kubeconfig the client will load, and how an error names that source.
struct Source {
    files: Vec<PathBuf>,
    /// `--kubeconfig` is a setting; `KUBECONFIG` is not one of ours.
    refused: fn(String) -> ConfigError,
    what: String,
}

/// The kubeconfig the client will load, found where the client looks
/// ([`ClientOptions::kubeconfig_source`]).
fn source(kube: &KubeSettings, env: &Env) -> Option<Source> {
    let found = kube
        .client_options()
        .kubeconfig_source(env.kubeconfig.as_deref(), env.home.as_deref())?;
    Some(match found {
        KubeconfigSource::Given(path) => Source {
            what: path.display().to_string(),
            files: vec![path],
            refused: |m| ConfigError::invalid("kubeconfig", m),
        },
        KubeconfigSource::Env(files) => Source {
            files,
            refused: |m| ConfigError::input("KUBECONFIG", m),
            what: env
                .kubeconfig
                .as_deref()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
        },
        KubeconfigSource::Home(path) => Source {
            what: format!("{} (the default kubeconfig)", path.display()),
            files: vec![path],
            refused: |m| ConfigError::invalid("kubeconfig", m),
        },
    })
}

/// Parses one kubeconfig file, bounded like every other file setting.
fn parse(path: &Path) -> Result<Kubeconfig, String> {
    read_bounded(path)?;
    Kubeconfig::read_from(path).map_err(|e| {
        format!(
            "{}: not a kubeconfig: {}",
            path.display(),
            without_excerpt(&e.to_string())
        )
    })
}

/// Checks the kubeconfig that will be used, if any, and that it has the context asked for (or a
/// current context when none is asked for).
pub(super) fn check(kube: &KubeSettings, env: &Env) -> Result<(), ConfigError> {
    let context_key = "kube_context";
    let Some(source) = source(kube, env) else {
        return match &kube.context {
            Some(c) => Err(ConfigError::invalid(
                context_key,
                format!(
                    "{c:?} given, but there is no kubeconfig to take it from \
                     (--kubeconfig, KUBECONFIG, ~/.kube/config)"
                ),
            )),
            None => Ok(()),
        };
    };
    let mut merged = Kubeconfig::default();
    for file in &source.files {
        let one = parse(file).map_err(source.refused)?;
        merged = merged
            .merge(one)
            .map_err(|e| (source.refused)(format!("{}: {e}", source.what)))?;
    }
    let names: Vec<&str> = merged.contexts.iter().map(|c| c.name.as_str()).collect();
    let listed = || {
        let mut shown: Vec<String> = names
            .iter()
            .take(LISTED_CONTEXTS)
            .map(|n| format!("{n:?}"))
            .collect();
        if names.len() > LISTED_CONTEXTS {
            shown.push("...".into());
        }
        if shown.is_empty() {
            "none".to_string()
        } else {
            shown.join(", ")
        }
    };
    match (&kube.context, &merged.current_context) {
        (Some(c), _) if names.contains(&c.as_str()) => Ok(()),
        (Some(c), _) => Err(ConfigError::invalid(
            context_key,
            format!(
                "{c:?} is not a context of {}; its contexts: {}",
                source.what,
                listed()
            ),
        )),
        (None, Some(c)) if names.contains(&c.as_str()) => Ok(()),
        (None, current) => Err(ConfigError::invalid(
            context_key,
            format!(
                "none given, and the current-context of {} ({}) is not one of its contexts: {}",
                source.what,
                current
                    .as_deref()
                    .map_or("unset".to_string(), |c| format!("{c:?}")),
                listed()
            ),
        )),
    }
}
