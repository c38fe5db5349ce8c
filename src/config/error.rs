//! The one error of the settings: which setting (or other input) is refused, and why.

use super::names::{env_var, flag};

/// A refused input, naming the setting (or other input) and what is accepted, before anything is
/// touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting's value is refused, wherever it came from: the message names its flag and its
    /// environment variable.
    #[error("invalid {} ({}): {message}", flag(setting), env_var(setting))]
    Setting {
        /// The setting's file key (`lease_duration`), or `config` for `--config`.
        setting: &'static str,
        /// What was given and what is accepted.
        message: String,
    },
    /// Another input is refused: an environment variable that is no setting, `POD_NAME`,
    /// `POD_NAMESPACE`, `KUBECONFIG`, or a rule between settings (timing, a backend's).
    #[error("{input}: {message}")]
    Input {
        /// What was refused, as the user knows it.
        input: String,
        /// What was given and what is accepted.
        message: String,
    },
}

impl ConfigError {
    /// A refused setting: `setting` is its file key.
    pub fn invalid(setting: &'static str, message: impl Into<String>) -> Self {
        ConfigError::Setting {
            setting,
            message: message.into(),
        }
    }

    /// A refused input that is not one setting.
    pub fn input(input: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Input {
            input: input.into(),
            message: message.into(),
        }
    }

    /// The setting refused, if the error is about one.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            ConfigError::Setting { setting, .. } => Some(setting),
            ConfigError::Input { .. } => None,
        }
    }

    /// A setting given empty: a mistake, never a way to ask for the default.
    pub(super) fn empty(setting: &'static str) -> Self {
        Self::invalid(
            setting,
            "an empty value is not accepted; leave the setting out to get its default",
        )
    }
}
