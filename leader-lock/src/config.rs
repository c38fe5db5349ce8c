//! The error of a lock's configuration, found before anything is sent.

use std::fmt;

use crate::timing::TimingError;

/// A backend setting that cannot work, found before connecting.
///
/// Each variant names the setting it is about (`etcd-endpoints`, `lease-duration`: the backend and
/// the field of its config, or the [`Timing`](crate::Timing) field, in dashed form), so that a
/// caller can point at its own input for that field without reading the message.
///
/// Every message carries its whole cause (a timing rule's included), so none has a
/// [`source`](std::error::Error::source): a chain of errors (`{e:#}`) shows it once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A setting is malformed, incomplete, or in conflict with another one.
    Invalid {
        /// The setting the message is about.
        setting: &'static str,
        /// What is wrong and what is accepted. The error shows the setting before it
        /// (`{setting}: {message}`), so the message does not start with it.
        message: String,
    },
    /// A URL carries a user or a password. Credentials belong in their own fields (`username`,
    /// `password`), never in a URL, which shows in logs, process listings and printed settings.
    /// A program with settings of its own names them when it reports this.
    CredentialsInUrl {
        /// The URL's setting.
        setting: &'static str,
        /// The URL with its credentials redacted.
        shown: String,
    },
    /// A user is set without a password.
    UserWithoutPassword {
        /// The user's setting.
        setting: &'static str,
    },
    /// The timing breaks one of client-go's rules or one of the backend's.
    Timing {
        /// The rule broken; it names its settings. Shown in the message, so it is no
        /// [`source`](std::error::Error::source).
        source: TimingError,
        /// Why the backend has this rule, when the rule alone does not say.
        note: Option<String>,
    },
}

// === impl ConfigError ===

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Invalid { setting, message } => write!(f, "{setting}: {message}"),
            ConfigError::CredentialsInUrl { setting, shown } => write!(
                f,
                "{setting}: `{shown}` holds credentials; give the user and the password in the \
                 config's username and password fields instead"
            ),
            ConfigError::UserWithoutPassword { setting } => {
                write!(f, "{setting} is set without a password")
            }
            ConfigError::Timing { source, note } => match note {
                Some(note) => write!(f, "{source} ({note})"),
                None => write!(f, "{source}"),
            },
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// [`ConfigError::Invalid`] about `setting`.
    pub fn invalid(setting: &'static str, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            setting,
            message: message.into(),
        }
    }

    /// The one setting to fix; `None` for a timing rule between settings (such as
    /// `lease-duration` above `renew-deadline`).
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            ConfigError::Invalid { setting, .. }
            | ConfigError::CredentialsInUrl { setting, .. }
            | ConfigError::UserWithoutPassword { setting } => Some(setting),
            ConfigError::Timing { source, .. } => source.setting(),
        }
    }
}

impl From<TimingError> for ConfigError {
    fn from(source: TimingError) -> Self {
        ConfigError::Timing { source, note: None }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn config_errors_name_their_setting_and_read_as_before() {
        let invalid = ConfigError::invalid("etcd-endpoints", "`x` is not a URL");
        assert_eq!(invalid.setting(), Some("etcd-endpoints"));
        assert_eq!(invalid.to_string(), "etcd-endpoints: `x` is not a URL");

        let rule = TimingError::NotWholeSeconds {
            setting: "lease-duration",
            value: Duration::from_millis(2500),
        };
        let plain = ConfigError::from(rule.clone());
        assert_eq!(plain.to_string(), rule.to_string());
        assert_eq!(plain.setting(), Some("lease-duration"));
        let noted = ConfigError::Timing {
            source: rule.clone(),
            note: Some("etcd lease TTLs are whole seconds".into()),
        };
        assert_eq!(
            noted.to_string(),
            format!("{rule} (etcd lease TTLs are whole seconds)")
        );

        // The rule is in the message, once: not also the source.
        assert!(std::error::Error::source(&noted).is_none());

        let between = ConfigError::from(TimingError::LeaseNotAboveRenew {
            lease: Duration::from_secs(10),
            renew: Duration::from_secs(10),
        });
        assert_eq!(between.setting(), None);
    }
}
