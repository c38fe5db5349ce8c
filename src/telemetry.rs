//! Logging setup.

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// The levels a filter may name, in any case.
const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

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

/// Checks a log filter before anything starts, so a typo is a startup error, not silence.
///
/// `EnvFilter` takes any unknown word as a target name, so `debgu` would hide every line, errors
/// included. Only a level, or comma-separated `target=level` directives whose target is a Rust
/// path, are accepted.
pub fn validate_filter(filter: &str) -> Result<(), String> {
    let is_level = |l: &str| LEVELS.iter().any(|k| k.eq_ignore_ascii_case(l));
    let is_path = |t: &str| {
        t.split("::").all(|seg| {
            !seg.is_empty() && seg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let directive = |d: &str| match d.split_once('=') {
        Some((target, level)) => is_path(target) && is_level(level),
        None => is_level(d),
    };
    if !filter.is_empty() && filter.split(',').all(directive) {
        return Ok(());
    }
    Err(format!(
        "{filter:?} is not a log filter; accepted: a level ({}, case-insensitive) or \
         comma-separated target=level directives with such a level, e.g. \
         gateway_leader=debug,kube=warn",
        LEVELS.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters() {
        for ok in [
            "info",
            "DEBUG",
            "off",
            "gateway_leader=debug",
            "gateway_leader::run=trace,kube=warn,info",
        ] {
            assert_eq!(validate_filter(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "debgu",
            "info,",
            "=debug",
            "gateway_leader=verbose",
            "gateway-leader=debug",
            "a::=info",
            "a=debug, b=warn",
            "a[span]=debug",
        ] {
            let e = validate_filter(bad).expect_err(bad);
            assert!(e.contains("target=level") && e.contains("trace"), "{e}");
        }
    }

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
