//! Hostname matching between listeners and routes.
//!
//! A hostname is precise (`foo.example.com`) or a wildcard (`*.example.com`), which matches any
//! host with at least one more label in front of the suffix (`a.example.com`, `a.b.example.com`,
//! but not `example.com`). Comparisons ignore ASCII case: the CRD only admits lower case, but a
//! status must not depend on how strict the API server validated.

/// Whether a listener (`None`: every hostname) admits a route with these hostnames (empty: every
/// hostname): both unrestricted, or at least one pair that can match a common host.
pub(crate) fn listener_admits(listener: Option<&str>, route: &[String]) -> bool {
    match listener.filter(|l| !l.is_empty()) {
        None => true,
        Some(l) => route.is_empty() || route.iter().any(|r| intersects(l, r)),
    }
}

/// Whether two listener hostnames (`None`: every hostname) can both match one host.
pub(crate) fn listeners_overlap(a: Option<&str>, b: Option<&str>) -> bool {
    match (a.filter(|h| !h.is_empty()), b.filter(|h| !h.is_empty())) {
        (Some(a), Some(b)) => intersects(a, b),
        _ => true,
    }
}

/// Whether some host matches both `a` and `b`.
pub(crate) fn intersects(a: &str, b: &str) -> bool {
    match (wildcard_suffix(a), wildcard_suffix(b)) {
        (None, None) => a.eq_ignore_ascii_case(b),
        (Some(suffix), None) => wildcard_matches(suffix, b),
        (None, Some(suffix)) => wildcard_matches(suffix, a),
        // `*.a.example.com` is inside `*.example.com`; disjoint suffixes share no host.
        (Some(x), Some(y)) => ends_with_ignore_case(x, y) || ends_with_ignore_case(y, x),
    }
}

/// `.example.com` for `*.example.com`; `None` for a precise hostname.
fn wildcard_suffix(hostname: &str) -> Option<&str> {
    hostname.strip_prefix('*').filter(|s| s.starts_with('.'))
}

/// Whether a precise `host` matches the wildcard whose suffix (with its leading dot) is given.
fn wildcard_matches(suffix: &str, host: &str) -> bool {
    host.len() > suffix.len() && ends_with_ignore_case(host, suffix)
}

fn ends_with_ignore_case(s: &str, suffix: &str) -> bool {
    let (s, suffix) = (s.as_bytes(), suffix.as_bytes());
    s.len() >= suffix.len() && s[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precise_hostnames_intersect_only_when_equal() {
        assert!(intersects("foo.example.com", "FOO.example.com"));
        assert!(!intersects("foo.example.com", "bar.example.com"));
    }

    #[test]
    fn a_wildcard_matches_any_depth_below_its_suffix_but_not_the_suffix_itself() {
        assert!(intersects("*.example.com", "test.example.com"));
        assert!(intersects("foo.test.example.com", "*.example.com"));
        assert!(!intersects("*.example.com", "example.com"));
        assert!(!intersects("*.example.com", "fooexample.com"));
        assert!(!intersects("*.example.com", "test.example.net"));
    }

    #[test]
    fn wildcards_intersect_when_one_suffix_contains_the_other() {
        assert!(intersects("*.example.com", "*.foo.example.com"));
        assert!(intersects("*.foo.example.com", "*.example.com"));
        assert!(!intersects("*.example.com", "*.example.net"));
        assert!(!intersects("*.example.com", "*.ample.com"));
    }

    #[test]
    fn a_listener_without_hostname_or_a_route_without_hostnames_matches_everything() {
        assert!(listener_admits(None, &["a.example.com".into()]));
        assert!(listener_admits(Some("a.example.com"), &[]));
        assert!(listener_admits(
            Some("*.example.com"),
            &["test.example.net".into(), "test.example.com".into()]
        ));
        assert!(!listener_admits(
            Some("*.example.com"),
            &["example.com".into(), "test.example.net".into()]
        ));
    }

    #[test]
    fn odd_input_does_not_panic() {
        for h in ["", "*", "*.", ".", "*.*", "é.example.com", "*.é"] {
            let _ = intersects(h, "*.example.com");
            let _ = intersects("*.é", h);
            let _ = listeners_overlap(Some(h), Some("x"));
        }
    }
}
