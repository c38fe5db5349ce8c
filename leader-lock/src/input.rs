//! Checks of outside input that backends and programs share: files read with a bound, PEM
//! bundles, URLs shown without their credentials, names limited to a safe character set, and
//! durations as text.
//!
//! Behind the `input` feature: a program that embeds the elector and builds its settings in code
//! needs none of it (nor the certificate parser it pulls in); the etcd and Redis backends, which
//! read certificate files named in their configs, enable it.
//!
//! Each check returns a message without the setting's name; callers put the name in front. A
//! backend reports what its own checks find as a [`ConfigError`](crate::backend::ConfigError),
//! which names the setting.

use std::io::Read;
use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The largest settings, credential or kubeconfig file accepted: far above any real one, small
/// enough that `/dev/zero` or a runaway log file named by mistake cannot exhaust memory.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Reads a regular file (symlinks followed) of at most [`MAX_FILE_BYTES`].
///
/// The kind is checked before opening, because opening a FIFO blocks until a writer appears; and
/// at most one byte more than the bound is read, because `/proc` files report a size of zero.
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("{shown} is larger than 1 MiB"));
    }
    Ok(bytes)
}

/// What a PEM file must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pem {
    /// One or more certificates (a CA bundle or a client certificate chain).
    Certificates,
    /// A private key (PKCS#8, PKCS#1 or SEC1).
    PrivateKey,
}

/// Reads a bounded PEM file and checks that it holds what `kind` asks for, so that a wrong file
/// is named at startup instead of surfacing later as a bare TLS "transport error".
pub fn read_pem(path: &Path, kind: Pem) -> Result<Vec<u8>, String> {
    let pem = read_bounded(path)?;
    let shown = path.display();
    match kind {
        Pem::Certificates => {
            let mut count = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert =
                    cert.map_err(|e| format!("{shown} is not a PEM certificate bundle: {e}"))?;
                count += 1;
                // Well-formed base64 can still hold garbage; parse the X.509 structure too.
                webpki::anchor_from_trusted_cert(&cert).map_err(|e| {
                    format!(
                        "certificate {count} in {shown} is not a valid X.509 certificate: {e:?}"
                    )
                })?;
            }
            if count == 0 {
                return Err(format!("no PEM certificate found in {shown}"));
            }
        }
        Pem::PrivateKey => {
            PrivateKeyDer::from_pem_slice(&pem)
                .map_err(|e| format!("no PEM private key found in {shown}: {e}"))?;
        }
    }
    Ok(pem)
}

/// The URL with everything before its last `@` (user and password) replaced by `***`, for
/// messages. It works on malformed input too (`redis:u:pw@host`), so a message can never echo a
/// password, whatever the user typed.
pub fn redact_userinfo(url: &str) -> String {
    let Some((before, host)) = url.rsplit_once('@') else {
        return url.to_string();
    };
    match before.split_once("://") {
        Some((scheme, _)) => format!("{scheme}://***@{host}"),
        None => format!("***@{host}"),
    }
}

/// Checks a name that ends up in lock records, keys and log lines: 1 to `max_bytes` bytes of ASCII
/// letters, digits and the characters in `extra`. ASCII only, so that bidi overrides and
/// zero-width characters cannot make one name look like another in a log line.
pub fn check_name(value: &str, extra: &str, max_bytes: usize) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= max_bytes
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(c));
    if ok {
        return Ok(());
    }
    let extra: Vec<String> = extra.chars().map(|c| format!("'{c}'")).collect();
    Err(format!(
        "{value:?} is not accepted; \
         accepted: 1 to {max_bytes} bytes of ASCII letters, digits and {}",
        extra.join(", ")
    ))
}

/// Parses a duration as the settings take it: `15s`, `1500ms`, `2m` or a bare number of seconds.
pub fn parse_duration(v: &str) -> Result<std::time::Duration, String> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        if (0.0..1e9).contains(&secs) {
            return Ok(std::time::Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(v).map_err(|e| {
        format!(
            "{v:?} is not a duration ({e}); accepted: e.g. 15s, 1500ms, 2m, or seconds as a number"
        )
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
    fn files_are_bounded_and_regular() {
        assert!(read_bounded(Path::new("/dev/zero"))
            .unwrap_err()
            .contains("not a regular file"));
        assert!(read_bounded(Path::new("/nonexistent/x"))
            .unwrap_err()
            .contains("/nonexistent/x"));
        let dir = std::env::temp_dir().join(format!("leader-lock-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let big = dir.join("big");
        let limit = usize::try_from(MAX_FILE_BYTES).expect("fits");
        std::fs::write(&big, vec![b'a'; limit]).expect("write");
        assert_eq!(read_bounded(&big).map(|b| b.len()), Ok(limit));
        std::fs::write(&big, vec![b'a'; limit + 1]).expect("write");
        assert!(read_bounded(&big).unwrap_err().contains("1 MiB"));
        let pem = dir.join("x.pem");
        let refused = |text: &str, kind: Pem| {
            std::fs::write(&pem, text).expect("write");
            read_pem(&pem, kind).unwrap_err()
        };
        let cert = |body: &str| {
            format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
        };
        let e = refused("hello\n", Pem::Certificates);
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = refused("hello\n", Pem::PrivateKey);
        assert!(e.contains("no PEM private key"), "{e}");
        let e = refused(&cert("!!!"), Pem::Certificates);
        assert!(e.contains("not a PEM certificate bundle"), "{e}");
        // Valid base64 that is no X.509 certificate.
        let e = refused(&cert("MIIB"), Pem::Certificates);
        assert!(e.contains("certificate 1 in"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(redact_userinfo("redis://u:pw@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact_userinfo("redis://:p@w@h:1"), "redis://***@h:1");
        assert_eq!(redact_userinfo("redis:u:pw@h"), "***@h");
        assert_eq!(redact_userinfo("http://h:2379"), "http://h:2379");
    }

    #[test]
    fn names_are_plain_ascii() {
        assert!(check_name("pod-0.ns_1:a", "-._:", 253).is_ok());
        for bad in ["", "a b", "a\u{202e}b", "a\u{200b}b", "ä", "a/b"] {
            let e = check_name(bad, "-._:", 253).unwrap_err();
            assert!(e.contains("253 bytes") && e.contains("'-'"), "{e}");
        }
        assert!(check_name(&"a".repeat(254), "-", 253).is_err());
        // The message shows invisible characters escaped, so it cannot spoof a log line itself.
        assert!(check_name("a\u{202e}b", "-", 9)
            .unwrap_err()
            .contains("\\u{202e}"));
    }
}
