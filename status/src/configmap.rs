//! ConfigMaps as the BackendTLSPolicy CA check needs them, and nothing more.
//!
//! The ConfigMap watch maps every ConfigMap to a [`CaBundle`] before it enters the reflector's
//! store (see the `watch` module): its name, namespace and resourceVersion, and whether its
//! `ca.crt` holds PEM certificates. ConfigMaps can be large (up to 1 MiB each) and most have
//! nothing to do with TLS, so the store costs a few hundred bytes per ConfigMap whatever they
//! hold.
//!
//! The rules, from Gateway API v1.5.1 `apis/v1/backendtlspolicy_types.go`
//! (`BackendTLSValidation.CACertificateRefs`: "Support: Core - An optional single reference to a
//! Kubernetes ConfigMap, with the CA certificate in a key named `ca.crt`"; a reference is invalid
//! when "a ConfigMap does not contain a key named `ca.crt`";
//! `BackendTLSPolicyReasonInvalidCACertificateRef`: "when it refers to a nonexistent resource or
//! when the data within that resource is malformed") and
//! `conformance/tests/backendtlspolicy-invalid-ca-certificate-ref.yaml` (a ConfigMap with
//! `data: {}` is "malformed").

use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::secret::{reduce_event, reduced_lookup};

/// The key of the PEM CA bundle in a ConfigMap.
pub(crate) const CA_CERT_KEY: &str = "ca.crt";

/// A ConfigMap reduced to what the CA check needs.
#[derive(Debug, Clone, PartialEq)]
pub struct CaBundle {
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.resourceVersion` (kept for `Lookup`).
    pub resource_version: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// What the check found; `None` when the bundle is usable.
    pub problem: Option<&'static str>,
}

impl CaBundle {
    /// Reduces a ConfigMap; the result holds none of its data.
    pub fn from_config_map(config_map: &ConfigMap) -> Self {
        CaBundle {
            namespace: config_map.metadata.namespace.clone(),
            name: config_map.metadata.name.clone(),
            resource_version: config_map.metadata.resource_version.clone(),
            uid: config_map.metadata.uid.clone(),
            problem: check(config_map),
        }
    }

    /// A watch event of ConfigMaps as one of reduced ConfigMaps.
    pub(crate) fn map_event(event: watcher::Event<ConfigMap>) -> watcher::Event<CaBundle> {
        reduce_event(event, Self::from_config_map)
    }
}

/// `ca.crt` must hold at least one PEM certificate, every block must be one, and the first must
/// parse as X.509.
fn check(config_map: &ConfigMap) -> Option<&'static str> {
    let Some(pem) = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(CA_CERT_KEY))
        .filter(|v| !v.is_empty())
    else {
        return Some("the ConfigMap has no ca.crt, or it is empty");
    };
    let mut certificates = CertificateDer::pem_slice_iter(pem.as_bytes());
    let first = match certificates.next() {
        None => return Some("ca.crt holds no PEM CERTIFICATE block"),
        Some(Err(_)) => return Some("ca.crt is not valid PEM"),
        Some(Ok(c)) => c,
    };
    if certificates.any(|c| c.is_err()) {
        return Some("ca.crt is not valid PEM");
    }
    if webpki::EndEntityCert::try_from(&first).is_err() {
        return Some("the first certificate in ca.crt is not valid X.509 DER");
    }
    None
}

reduced_lookup!(CaBundle, "ConfigMap", "configmaps");

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::Lookup;
    use serde_json::json;

    use super::*;

    fn config_map(data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "ca", "namespace": "apps", "resourceVersion": "3"},
            "data": data,
        }))
        .expect("config map")
    }

    fn problem(data: serde_json::Value) -> Option<&'static str> {
        CaBundle::from_config_map(&config_map(data)).problem
    }

    #[test]
    fn a_pem_ca_bundle_is_usable_and_its_data_is_not_kept() {
        let c = rcgen::generate_simple_self_signed(vec!["ca.example.com".into()])
            .expect("self-signed certificate");
        let pem = c.cert.pem();
        assert_eq!(problem(json!({ "ca.crt": pem })), None);
        assert_eq!(problem(json!({ "ca.crt": format!("{pem}{pem}") })), None);
        let reduced = CaBundle::from_config_map(&config_map(json!({ "ca.crt": pem })));
        assert!(!format!("{reduced:?}").contains("BEGIN"));
        assert_eq!(Lookup::name(&reduced).as_deref(), Some("ca"));
        assert_eq!(Lookup::namespace(&reduced).as_deref(), Some("apps"));
        assert_eq!(Lookup::resource_version(&reduced).as_deref(), Some("3"));
        assert_eq!(CaBundle::plural(&()), "configmaps");
    }

    #[test]
    fn a_missing_empty_or_malformed_ca_crt_is_a_problem() {
        // The conformance suite's malformed ConfigMap: `data: {}`.
        assert!(problem(json!({})).is_some());
        assert!(problem(json!(null)).is_some());
        assert!(problem(json!({ "ca.crt": "" })).is_some());
        assert!(problem(json!({ "tls.crt": "x" })).is_some());
        assert!(problem(json!({ "ca.crt": "Hello world\n" })).is_some());
        let fake = "-----BEGIN CERTIFICATE-----\nSGVsbG8gd29ybGQK\n-----END CERTIFICATE-----\n";
        assert!(problem(json!({ "ca.crt": fake })).is_some());
    }
}
