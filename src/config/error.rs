//! The one error of the settings: which setting (or other input) is refused, and why.

use std::fmt;

use super::names::{env_var, flag};
use super::settings::{CONFIG_KEY, SETTINGS};

/// A bad setting: which one, what was given, and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The setting's file key, or a description for errors not tied to one.
    pub key: String,
    /// What went wrong and what is accepted.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key == CONFIG_KEY || SETTINGS.iter().any(|s| s.key == self.key) {
            write!(
                f,
                "invalid {} ({}): {}",
                flag(&self.key),
                env_var(&self.key),
                self.message
            )
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

pub(super) fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

pub(super) fn empty(key: &str) -> ConfigError {
    err(
        key,
        "an empty value is not accepted; leave the setting out to get its default",
    )
}
