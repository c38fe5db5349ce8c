//! Listeners that terminate TLS: certificateRefs against Secrets, and TLS listeners in both
//! modes.

use serde_json::json;

use super::super::compute;
use super::super::fixtures::*;
use super::tests::{cert, https, out_for};
use crate::secret::{Content, TLS_CERT_KEY, TLS_PRIVATE_KEY_KEY};

/// ResolvedRefs and Programmed of listener `name` on `infra/gw`, and the ResolvedRefs message.
fn refs_and_programmed(out: &Out, name: &str) -> (String, String, String) {
    let resolved = listener_condition(out, "infra", "gw", name, "ResolvedRefs");
    let programmed = listener_condition(out, "infra", "gw", name, "Programmed");
    let message = listener(out, "infra", "gw", name)
        .conditions
        .iter()
        .find(|c| c.type_ == "ResolvedRefs")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    (
        format!("{}/{}", resolved.1, resolved.2),
        format!("{}/{}", programmed.1, programmed.2),
        message,
    )
}

// v1.5.1 conformance/tests/gateway-invalid-tls-configuration.{go,yaml}: a nonexistent
// Secret, an unsupported group, an unsupported kind and a malformed Secret are each
// ResolvedRefs False with InvalidCertificateRef; the listener is then not programmed.
#[test]
fn a_missing_secret_is_an_invalid_certificate_ref_until_it_is_created() {
    let mut w = world();
    w.secrets.clear();
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([https("s", 443, None, cert())]),
    )];
    let out = compute(&w, CONTROLLER);
    let (resolved, programmed, message) = refs_and_programmed(&out, "s");
    assert_eq!(resolved, "False/InvalidCertificateRef");
    assert_eq!(programmed, "False/Invalid");
    assert!(
        message.contains("infra/cert") && message.contains("not found"),
        "{message}"
    );
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Programmed"),
        tsr("Programmed", "False", "Invalid")
    );

    w.secrets.push(secret("infra", "cert", Content::Usable));
    let out = compute(&w, CONTROLLER);
    let (resolved, programmed, _) = refs_and_programmed(&out, "s");
    assert_eq!(resolved, "True/ResolvedRefs");
    assert_eq!(programmed, "True/Programmed");
}

#[test]
fn secrets_of_the_wrong_type_without_keys_or_malformed_are_invalid_certificate_refs() {
    let cases = [
        ("opaque", Content::WrongType("Opaque".into()), "Opaque"),
        ("no-crt", Content::MissingKey(TLS_CERT_KEY), "tls.crt"),
        (
            "no-key",
            Content::MissingKey(TLS_PRIVATE_KEY_KEY),
            "tls.key",
        ),
        (
            "malformed",
            Content::Malformed {
                key: TLS_CERT_KEY,
                why: "no PEM CERTIFICATE block",
            },
            "malformed",
        ),
    ];
    let mut w = world();
    let mut listeners = vec![];
    for (i, (name, content, _)) in cases.iter().enumerate() {
        w.secrets.push(secret("infra", name, content.clone()));
        let port = 8443 + i32::try_from(i).expect("few cases");
        listeners.push(https(name, port, None, json!([{"name": name}])));
    }
    // conformance: gateway-certificate-unsupported-group / -unsupported-kind.
    listeners.push(https(
        "group",
        9443,
        None,
        json!([{"group": "wrong.group.company.io", "kind": "Secret", "name": "cert"}]),
    ));
    listeners.push(https(
        "kind",
        9444,
        None,
        json!([{"group": "", "kind": "WrongKind", "name": "cert"}]),
    ));
    w.gateways = vec![gateway("infra", "gw", json!(listeners))];
    let out = compute(&w, CONTROLLER);
    for (name, _, said) in cases {
        let (resolved, programmed, message) = refs_and_programmed(&out, name);
        assert_eq!(resolved, "False/InvalidCertificateRef", "{name}");
        assert_eq!(programmed, "False/Invalid", "{name}");
        assert!(message.contains(said), "{name}: {message}");
    }
    for name in ["group", "kind"] {
        let (resolved, programmed, _) = refs_and_programmed(&out, name);
        assert_eq!(resolved, "False/InvalidCertificateRef", "{name}");
        assert_eq!(programmed, "False/Invalid", "{name}");
    }
}

#[test]
fn a_cross_namespace_ref_without_a_grant_is_not_permitted_whatever_it_names() {
    // The spec keeps InvalidCertificateRef for allowed references: an unsupported kind or a
    // missing Secret behind a missing grant is RefNotPermitted.
    let out = out_for(json!([
        https(
            "kind",
            443,
            None,
            json!([{"kind": "ConfigMap", "name": "c", "namespace": "apps"}])
        ),
        https(
            "missing",
            8443,
            None,
            json!([{"name": "nope", "namespace": "apps"}])
        ),
    ]));
    for name in ["kind", "missing"] {
        assert_eq!(refs_and_programmed(&out, name).0, "False/RefNotPermitted");
    }
}

#[test]
fn tls_listeners_terminate_with_a_usable_secret_or_pass_through_without_one() {
    let out = out_for(json!([
        {"name": "terminate", "port": 443, "protocol": "TLS",
         "tls": {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]}},
        {"name": "passthrough", "port": 8443, "protocol": "TLS", "tls": {"mode": "Passthrough",
         "certificateRefs": [{"name": "ignored-in-passthrough"}]}},
        {"name": "missing", "port": 9443, "protocol": "TLS",
         "tls": {"mode": "Terminate", "certificateRefs": [{"name": "nope"}]}},
        {"name": "no-refs", "port": 9444, "protocol": "TLS", "tls": {"mode": "Terminate"}},
    ]));
    for name in ["terminate", "passthrough"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Accepted"),
            tsr("Accepted", "True", "Accepted"),
            "{name}"
        );
        let (resolved, programmed, _) = refs_and_programmed(&out, name);
        assert_eq!(resolved, "True/ResolvedRefs", "{name}");
        assert_eq!(programmed, "True/Programmed", "{name}");
    }
    for name in ["missing", "no-refs"] {
        assert_eq!(
            refs_and_programmed(&out, name).0,
            "False/InvalidCertificateRef",
            "{name}"
        );
    }
}
