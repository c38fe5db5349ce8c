//! Checks of single values: booleans, durations, addresses, files, DNS names, identities,
//! controller names, log filters. Each returns what is accepted in its message; the caller adds
//! which setting it was. `settings.rs` names the check of each setting.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::input::{check_name, read_bounded};

/// The characters an identity may hold besides ASCII letters and digits: what pod names and
/// hostnames use, plus `_` and `:`. Nothing invisible, blank or non-ASCII, so that an identity in a
/// lock record or a log line always reads as what it is.
pub const IDENTITY_CHARS: &str = "-._:";

/// The longest identity, in bytes: a pod name or a fully qualified hostname always fits.
pub const MAX_IDENTITY_BYTES: usize = 253;

/// The levels a log filter may name, in any case.
const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// A check that keeps the text once `validate` accepts it.
pub(super) fn checked(
    validate: fn(&str) -> Result<(), String>,
) -> impl Fn(&str) -> Result<String, String> {
    move |v| validate(v).map(|()| v.to_string())
}

/// Any text: what is accepted is left to the backend that reads it, or to no one.
pub(super) fn text(v: &str) -> Result<String, String> {
    Ok(v.to_string())
}

/// A boolean, in the spellings people write in files and environments.
pub(super) fn parse_bool(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!("{v:?} is not a boolean; accepted: true or false")),
    }
}

/// An `IP:PORT` to listen on.
pub(super) fn parse_socket_addr(v: &str) -> Result<SocketAddr, String> {
    v.parse().map_err(|_| {
        format!(
            "{v:?} is not a socket address; accepted: IP:PORT such as \
             0.0.0.0:9090, 127.0.0.1:0 or [::]:9090"
        )
    })
}

/// How long a child gets between SIGTERM and SIGKILL: at most 15 s, so that the child's stop,
/// the release and the last Event fit in Kubernetes' default grace period of 30 s.
pub(super) fn exec_grace(v: &str) -> Result<Duration, String> {
    let d = parse_duration(v)?;
    if d > MAX_EXEC_GRACE {
        return Err(format!(
            "{v:?} is longer than {}s; accepted: a duration from 0s to {}s",
            MAX_EXEC_GRACE.as_secs(),
            MAX_EXEC_GRACE.as_secs()
        ));
    }
    Ok(d)
}

/// The longest `exec_grace`.
pub const MAX_EXEC_GRACE: Duration = Duration::from_secs(15);

/// A number of Redis replicas to wait for: a whole number from 0 to 16.
pub(super) fn replica_count(v: &str) -> Result<u32, String> {
    match v.trim().parse::<u32>() {
        Ok(n) if n <= 16 => Ok(n),
        _ => Err(format!("{v:?} is not a number of replicas from 0 to 16")),
    }
}

/// The most worker threads the runtime may be given.
pub const MAX_WORKER_THREADS: usize = 256;

/// A number of runtime worker threads: a whole number from 1 to [`MAX_WORKER_THREADS`].
pub(super) fn worker_threads(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_WORKER_THREADS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{v:?} is not a number of threads from 1 to {MAX_WORKER_THREADS}"
        )),
    }
}

/// A comma-separated list, blanks around and between the commas dropped.
pub(super) fn comma_list(v: &str) -> Result<Vec<String>, String> {
    Ok(v.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect())
}

/// A file setting: a regular file of at most 1 MiB, whatever reads it later, so that a FIFO or
/// `/dev/zero` is named at startup instead of hanging a reader.
pub(super) fn bounded_file(v: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(v);
    read_bounded(Path::new(v))?;
    Ok(path)
}

/// Parses `15s`, `1500ms`, `2m` or a bare number of seconds: the rule `gateway-leader-bench`
/// shares, so it lives beside the other shared input checks.
pub use leader_lock::input::parse_duration;

/// Checks a Kubernetes DNS-1123 subdomain: lowercase alphanumerics, '-' and '.', at most 253.
pub fn validate_dns_subdomain(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a DNS-1123 subdomain; accepted: at most 253 characters of lowercase \
             letters, digits, '-' and '.', starting and ending with a letter or digit"
        ))
    }
}

/// Checks a DNS-1123 label (a namespace name).
pub fn validate_dns_label(s: &str) -> Result<(), String> {
    if s.len() <= 63 && !s.contains('.') && validate_dns_subdomain(s).is_ok() {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a DNS-1123 label; accepted: at most 63 lowercase letters, digits and \
             '-', starting and ending with a letter or digit"
        ))
    }
}

/// Checks an identity: see [`IDENTITY_CHARS`] and [`MAX_IDENTITY_BYTES`].
pub fn check_identity(s: &str) -> Result<(), String> {
    check_name(s, IDENTITY_CHARS, MAX_IDENTITY_BYTES)
}

/// Checks a Gateway API controllerName: `domain/path`.
pub fn validate_controller_name(s: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "{s:?} is not a controller name; accepted: at most 253 bytes, a domain-prefixed path \
             such as example.net/gateway-controller"
        )
    };
    let (domain, path) = s.split_once('/').ok_or_else(bad)?;
    if s.len() > 253 || validate_dns_subdomain(domain).is_err() || path.is_empty() {
        return Err(bad());
    }
    if !path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c))
    {
        return Err(bad());
    }
    Ok(())
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
    fn names() {
        assert!(validate_dns_subdomain("gateway-leader.lock-1").is_ok());
        for bad in ["", "A", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(validate_dns_subdomain(bad).is_err(), "{bad:?}");
        }
        assert!(validate_dns_label("gateway-system").is_ok());
        assert!(validate_dns_label("a.b").is_err());
        assert!(validate_controller_name("example.net/gateway-controller").is_ok());
        for bad in ["nodomain", "/path", "Example.net/x", "example.net/"] {
            assert!(validate_controller_name(bad).is_err(), "{bad:?}");
        }
    }

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
}
