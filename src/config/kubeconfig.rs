//! The kubeconfig, checked at startup. Every backend needs Kubernetes (the status writer always
//! talks to it), so a kubeconfig that does not parse or lacks the context asked for is refused
//! before anything runs, rather than when the first client is built. No kubeconfig at all is fine:
//! then the pod's service account is used.

use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;
use leader_lock::input::read_bounded;

use super::effective::KubeSettings;
use super::env::Env;
use super::error::ConfigError;
use super::file::without_excerpt;

/// At most this many context names are listed in a message.
const LISTED_CONTEXTS: usize = 10;

/// Where the kubeconfig comes from, in the client's order, and how an error names that source.
struct Source {
    files: Vec<PathBuf>,
    /// `--kubeconfig` is a setting; `KUBECONFIG` is not one of ours.
    refused: fn(String) -> ConfigError,
    what: String,
}

/// The kubeconfig the client will load: `--kubeconfig`, else the files in `KUBECONFIG` (when one
/// of them exists), else `~/.kube/config` (when it is a file), else none.
fn source(explicit: Option<&Path>, env: &Env) -> Option<Source> {
    if let Some(path) = explicit {
        return Some(Source {
            files: vec![path.to_path_buf()],
            refused: |m| ConfigError::invalid("kubeconfig", m),
            what: path.display().to_string(),
        });
    }
    if let Some(list) = env.kubeconfig.as_deref().filter(|v| !v.is_empty()) {
        let files: Vec<PathBuf> = std::env::split_paths(list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        // The client loads KUBECONFIG once any file in it exists, and then reads every file.
        if files.iter().any(|p| p.exists()) {
            return Some(Source {
                files,
                refused: |m| ConfigError::input("KUBECONFIG", m),
                what: list.to_string_lossy().into_owned(),
            });
        }
    }
    let home = env.home.as_deref().filter(|h| !h.is_empty())?;
    let path = Path::new(home).join(".kube").join("config");
    path.is_file().then(|| Source {
        what: format!("{} (the default kubeconfig)", path.display()),
        files: vec![path],
        refused: |m| ConfigError::invalid("kubeconfig", m),
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
    let Some(source) = source(kube.kubeconfig.as_deref(), env) else {
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
