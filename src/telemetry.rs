//! Logging setup.

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{validate_filter, LogFormat};

/// Installs the global subscriber; logs go to stderr. `RUST_LOG` wins over the `log-level`
/// setting, but only when it is a filter that [`validate_filter`] accepts: a malformed one would
/// silently hide every line, so it is ignored with one warning instead.
pub fn init(format: LogFormat, level: &str) {
    let (filter, ignored) = choose_filter(std::env::var_os("RUST_LOG").as_deref(), level);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a file or a log collector.
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if let Some(rust_log) = ignored {
        let message = "ignoring RUST_LOG: not a log filter; using --log-level";
        if tracing::enabled!(tracing::Level::WARN) {
            tracing::warn!(rust_log, log_level = level, "{message}");
        } else {
            // The setting hides warnings, but this one must not go unseen.
            eprintln!("gateway-leader: {message} {level:?} (RUST_LOG={rust_log})");
        }
    }
}

/// The filter to use: `RUST_LOG` when set, non-empty and valid, else `level`; and the ignored
/// `RUST_LOG`, shown safely, when it was set but not valid.
fn choose_filter(rust_log: Option<&OsStr>, level: &str) -> (String, Option<String>) {
    match rust_log.filter(|v| !v.is_empty()) {
        None => (level.to_string(), None),
        Some(v) => match v.to_str() {
            Some(f) if validate_filter(f).is_ok() => (f.to_string(), None),
            Some(f) => (level.to_string(), Some(format!("{f:?}"))),
            None => (level.to_string(), Some(format!("{v:?}"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_only_when_valid() {
        let os = |s: &str| Some(OsStr::new(s).to_os_string());
        assert_eq!(choose_filter(None, "info"), ("info".into(), None));
        assert_eq!(
            choose_filter(os("").as_deref(), "info"),
            ("info".into(), None)
        );
        assert_eq!(
            choose_filter(os("kube=debug").as_deref(), "info"),
            ("kube=debug".into(), None)
        );
        assert_eq!(
            choose_filter(os("debgu").as_deref(), "warn"),
            ("warn".into(), Some("\"debgu\"".into()))
        );
    }
}
