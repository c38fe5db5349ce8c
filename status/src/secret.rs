//! Secrets as the listener certificate check needs them, and nothing more.
//!
//! The Secret watch maps every Secret to a [`TlsSecret`] before it enters the reflector's store
//! (see the `watch` module): its name, namespace and resourceVersion, and the outcome of the
//! certificate check on its `type`, `tls.crt` and `tls.key`. Neither the key material nor any
//! other field is kept, so the store costs a few hundred bytes per Secret whatever the Secrets
//! hold, and no private key stays in this process's memory beyond the event that carried it.
//!
//! The rules, from Gateway API v1.5.1: `apis/v1/gateway_types.go` (`ListenerTLSConfig`:
//! "Support: Core - A single reference to a Kubernetes Secret of type kubernetes.io/tls";
//! `ListenerReasonInvalidCertificateRef`: "invalid when it refers to a nonexistent or
//! unsupported resource or kind, or when the data within that resource is malformed") and
//! `conformance/tests/gateway-invalid-tls-configuration.yaml` (a `kubernetes.io/tls` Secret
//! whose `tls.crt` and `tls.key` are not PEM is "malformed").

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::runtime::watcher;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The Secret type whose references listeners support (core support in v1.5.1).
pub(crate) const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";
/// The key of the PEM certificate chain in a TLS Secret.
pub(crate) const TLS_CERT_KEY: &str = "tls.crt";
/// The key of the PEM private key in a TLS Secret.
pub(crate) const TLS_PRIVATE_KEY_KEY: &str = "tls.key";

/// The longest type name kept from a Secret: the type is user input echoed into a message.
const MAX_TYPE_LEN: usize = 64;

/// A Secret reduced to what the certificate check needs.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSecret {
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.resourceVersion` (the store keys on name and namespace; kept for `Lookup`).
    pub resource_version: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// What the check found.
    pub content: Content,
}

/// The outcome of the certificate check on one Secret.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// A `kubernetes.io/tls` Secret whose `tls.crt` holds at least one PEM certificate that
    /// parses as X.509 and whose `tls.key` holds a PEM private key.
    Usable,
    /// Another Secret type (as written, cut at 64 bytes).
    WrongType(String),
    /// `tls.crt` or `tls.key` is missing or empty.
    MissingKey(&'static str),
    /// `tls.crt` or `tls.key` does not parse.
    Malformed {
        /// Which key.
        key: &'static str,
        /// Why, in a few words.
        why: &'static str,
    },
}

impl TlsSecret {
    /// Reduces a Secret; the result holds no key material.
    pub fn from_secret(secret: &Secret) -> Self {
        TlsSecret {
            namespace: secret.metadata.namespace.clone(),
            name: secret.metadata.name.clone(),
            resource_version: secret.metadata.resource_version.clone(),
            uid: secret.metadata.uid.clone(),
            content: check(secret),
        }
    }

    /// A watch event of Secrets as one of reduced Secrets.
    pub(crate) fn map_event(event: watcher::Event<Secret>) -> watcher::Event<TlsSecret> {
        reduce_event(event, Self::from_secret)
    }
}

/// A watch event of objects as one of their reductions (Secrets, ConfigMaps): each object is
/// reduced as it arrives and dropped.
pub(crate) fn reduce_event<K, R>(
    event: watcher::Event<K>,
    reduce: impl Fn(&K) -> R,
) -> watcher::Event<R> {
    use watcher::Event;
    match event {
        Event::Apply(o) => Event::Apply(reduce(&o)),
        Event::Delete(o) => Event::Delete(reduce(&o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(reduce(&o)),
        Event::InitDone => Event::InitDone,
    }
}

impl Content {
    /// Why the Secret cannot serve a listener, for a condition message; `None` when usable.
    pub fn problem(&self) -> Option<String> {
        match self {
            Content::Usable => None,
            Content::WrongType(t) => Some(format!("Secret type is {t:?}, not {TLS_SECRET_TYPE}")),
            Content::MissingKey(k) => Some(format!("Secret has no {k}, or it is empty")),
            Content::Malformed { key, why } => Some(format!("{key} is malformed: {why}")),
        }
    }
}

/// The check itself, in the order a reader would fix things: type, presence, then content.
fn check(secret: &Secret) -> Content {
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != TLS_SECRET_TYPE {
        let mut end = type_.len().min(MAX_TYPE_LEN);
        while !type_.is_char_boundary(end) {
            end -= 1;
        }
        return Content::WrongType(type_[..end].to_string());
    }
    let value = |key| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|ByteString(b)| b.as_slice())
            .filter(|b| !b.is_empty())
    };
    let Some(crt) = value(TLS_CERT_KEY) else {
        return Content::MissingKey(TLS_CERT_KEY);
    };
    let Some(key) = value(TLS_PRIVATE_KEY_KEY) else {
        return Content::MissingKey(TLS_PRIVATE_KEY_KEY);
    };
    let malformed = |key, why| Content::Malformed { key, why };
    let mut certificates = CertificateDer::pem_slice_iter(crt);
    let first = match certificates.next() {
        None => return malformed(TLS_CERT_KEY, "no PEM CERTIFICATE block"),
        Some(Err(_)) => return malformed(TLS_CERT_KEY, "not valid PEM"),
        Some(Ok(c)) => c,
    };
    if certificates.any(|c| c.is_err()) {
        return malformed(TLS_CERT_KEY, "not valid PEM");
    }
    if webpki::EndEntityCert::try_from(&first).is_err() {
        return malformed(TLS_CERT_KEY, "the first certificate is not valid X.509 DER");
    }
    match PrivateKeyDer::from_pem_slice(key) {
        Ok(_) => Content::Usable,
        Err(rustls_pki_types::pem::Error::NoItemsFound) => {
            malformed(TLS_PRIVATE_KEY_KEY, "no PEM PRIVATE KEY block")
        }
        Err(_) => malformed(TLS_PRIVATE_KEY_KEY, "not valid PEM"),
    }
}

// === impl Lookup ===

/// Lets a reflector store hold a reduced object (with `namespace`, `name`, `resource_version`
/// and `uid` fields), keyed like the objects it comes from: `reduced_lookup!(Type, "Kind",
/// "plural")` for a core v1 kind.
macro_rules! reduced_lookup {
    ($reduced:ty, $kind:literal, $plural:literal) => {
        impl kube::runtime::reflector::Lookup for $reduced {
            type DynamicType = ();

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                "".into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.name.as_deref().map(std::borrow::Cow::Borrowed)
            }

            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.namespace.as_deref().map(std::borrow::Cow::Borrowed)
            }

            fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.resource_version
                    .as_deref()
                    .map(std::borrow::Cow::Borrowed)
            }

            fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.uid.as_deref().map(std::borrow::Cow::Borrowed)
            }
        }
    };
}
pub(crate) use reduced_lookup;

reduced_lookup!(TlsSecret, "Secret", "secrets");

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use kube::runtime::reflector::Lookup;
    use serde_json::json;

    use super::*;

    /// A self-signed certificate and its key, PEM.
    pub(crate) fn pem_pair() -> &'static (String, String) {
        static PAIR: OnceLock<(String, String)> = OnceLock::new();
        PAIR.get_or_init(|| {
            let c = rcgen::generate_simple_self_signed(vec!["example.com".into()])
                .expect("self-signed certificate");
            (c.cert.pem(), c.signing_key.serialize_pem())
        })
    }

    fn secret(type_: Option<&str>, crt: Option<&[u8]>, key: Option<&[u8]>) -> Secret {
        let mut data = serde_json::Map::new();
        let b64 = |b: &[u8]| serde_json::to_value(ByteString(b.to_vec())).expect("bytes");
        if let Some(c) = crt {
            data.insert(TLS_CERT_KEY.into(), b64(c));
        }
        if let Some(k) = key {
            data.insert(TLS_PRIVATE_KEY_KEY.into(), b64(k));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "infra", "resourceVersion": "7"},
            "type": type_, "data": data,
        }))
        .expect("secret")
    }

    fn content(type_: Option<&str>, crt: Option<&[u8]>, key: Option<&[u8]>) -> Content {
        TlsSecret::from_secret(&secret(type_, crt, key)).content
    }

    #[test]
    fn a_tls_secret_with_a_pem_certificate_and_key_is_usable() {
        let (crt, key) = pem_pair();
        let tls = Some(TLS_SECRET_TYPE);
        assert_eq!(
            content(tls, Some(crt.as_bytes()), Some(key.as_bytes())),
            Content::Usable
        );
        // A chain: every block must be PEM, the first one is the leaf.
        let chain = format!("{crt}{crt}");
        assert_eq!(
            content(tls, Some(chain.as_bytes()), Some(key.as_bytes())),
            Content::Usable
        );
    }

    #[test]
    fn the_wrong_type_missing_keys_and_malformed_pem_are_told_apart() {
        let (crt, key) = pem_pair();
        let (crt, key) = (Some(crt.as_bytes()), Some(key.as_bytes()));
        let tls = Some(TLS_SECRET_TYPE);
        assert_eq!(
            content(Some("Opaque"), crt, key),
            Content::WrongType("Opaque".into())
        );
        assert_eq!(content(None, crt, key), Content::WrongType("Opaque".into()));
        let long = "é".repeat(40);
        let Content::WrongType(cut) = content(Some(&long), crt, key) else {
            panic!("wrong type expected");
        };
        assert!(cut.len() <= MAX_TYPE_LEN && long.starts_with(&cut));
        assert_eq!(content(tls, None, key), Content::MissingKey(TLS_CERT_KEY));
        assert_eq!(
            content(tls, Some(b""), key),
            Content::MissingKey(TLS_CERT_KEY)
        );
        assert_eq!(
            content(tls, crt, None),
            Content::MissingKey(TLS_PRIVATE_KEY_KEY)
        );
        // The conformance suite's malformed Secret: "Hello world\n" in both keys.
        let hello: &[u8] = b"Hello world\n";
        assert!(matches!(
            content(tls, Some(hello), Some(hello)),
            Content::Malformed {
                key: TLS_CERT_KEY,
                ..
            }
        ));
        assert!(matches!(
            content(tls, crt, Some(hello)),
            Content::Malformed {
                key: TLS_PRIVATE_KEY_KEY,
                ..
            }
        ));
        // PEM framing around bytes that are not a certificate.
        let fake = b"-----BEGIN CERTIFICATE-----\nSGVsbG8gd29ybGQK\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            content(tls, Some(fake), key),
            Content::Malformed {
                key: TLS_CERT_KEY,
                ..
            }
        ));
        // The key where the certificate should be, and the other way round.
        assert!(matches!(
            content(tls, key, crt),
            Content::Malformed {
                key: TLS_CERT_KEY,
                ..
            }
        ));
        for c in [
            content(Some("Opaque"), crt, key),
            content(tls, None, key),
            content(tls, Some(hello), key),
        ] {
            assert!(c.problem().is_some_and(|m| !m.is_empty()));
        }
        assert_eq!(Content::Usable.problem(), None);
    }

    #[test]
    fn the_reduced_secret_keeps_no_data_and_keys_like_the_secret() {
        let (crt, key) = pem_pair();
        let s = secret(
            Some(TLS_SECRET_TYPE),
            Some(crt.as_bytes()),
            Some(key.as_bytes()),
        );
        let reduced = TlsSecret::from_secret(&s);
        let debug = format!("{reduced:?}");
        assert!(!debug.contains("PRIVATE"), "{debug}");
        assert_eq!(Lookup::name(&reduced).as_deref(), Some("s"));
        assert_eq!(Lookup::namespace(&reduced).as_deref(), Some("infra"));
        assert_eq!(Lookup::resource_version(&reduced).as_deref(), Some("7"));
        assert_eq!(TlsSecret::plural(&()), "secrets");
    }
}
