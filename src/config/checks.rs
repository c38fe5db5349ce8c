//! Checks of single values: durations, DNS names, identities, controller names. Each returns
//! what is accepted in its message; the caller adds which setting it was.

use std::time::Duration;

use leader_lock::input::check_name;

/// The characters an identity may hold besides ASCII letters and digits: what pod names and
/// hostnames use, plus `_` and `:`. Nothing invisible, blank or non-ASCII, so that an identity in a
/// lock record or a log line always reads as what it is.
pub const IDENTITY_CHARS: &str = "-._:";

/// The longest identity, in bytes: a pod name or a fully qualified hostname always fits.
pub const MAX_IDENTITY_BYTES: usize = 253;

/// Parses `15s`, `1500ms`, `2m` or a bare number of seconds.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        if (0.0..1e9).contains(&secs) {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(v).map_err(|e| {
        format!(
            "{v:?} is not a duration ({e}); accepted: e.g. 15s, 1500ms, 2m, or seconds as a number"
        )
    })
}

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
            "{s:?} is not a DNS-1123 subdomain; accepted: at most 253 characters of lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
        ))
    }
}

/// Checks a DNS-1123 label (a namespace name).
pub fn validate_dns_label(s: &str) -> Result<(), String> {
    if s.len() <= 63 && !s.contains('.') && validate_dns_subdomain(s).is_ok() {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a DNS-1123 label; accepted: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
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
        format!("{s:?} is not a controller name; accepted: at most 253 bytes, a domain-prefixed path such as example.net/gateway-controller")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("NaN").is_err());
        assert!(parse_duration("1e300").is_err());
        assert!(parse_duration("").is_err());
    }

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
}
