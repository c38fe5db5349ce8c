use serde_json::{json, Value};

use super::super::compute;
use super::super::fixtures::*;
use crate::secret::Content;

pub(super) fn out_for(listeners: Value) -> Out {
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", listeners)];
    compute(&w, CONTROLLER)
}

pub(super) fn https(
    name: &str,
    port: i32,
    hostname: Option<&str>,
    certificate_refs: Value,
) -> Value {
    let mut l = json!({"name": name, "port": port, "protocol": "HTTPS",
                       "tls": {"certificateRefs": certificate_refs}});
    if let Some(h) = hostname {
        l["hostname"] = json!(h);
    }
    l
}

pub(super) fn cert() -> Value {
    json!([{"name": "cert"}])
}

fn kinds(out: &Out, name: &str) -> Vec<(Option<String>, String)> {
    listener(out, "infra", "gw", name)
        .supported_kinds
        .iter()
        .flatten()
        .map(|k| (k.group.clone(), k.kind.clone()))
        .collect()
}

#[test]
fn an_unsupported_protocol_is_not_accepted_and_supports_no_kinds() {
    let out = out_for(json!([http("web", 80), {"name": "tcp", "port": 9000, "protocol": "TCP"}]));
    let tcp = listener(&out, "infra", "gw", "tcp");
    assert_eq!(
        summary(&tcp.conditions),
        vec![
            tsr("Accepted", "False", "UnsupportedProtocol"),
            tsr("Programmed", "False", "Invalid"),
            tsr("ResolvedRefs", "True", "ResolvedRefs"),
            tsr("Conflicted", "False", "NoConflicts"),
        ]
    );
    assert_eq!(tcp.supported_kinds, Some(vec![]));
}

#[test]
fn unsupported_route_kinds_are_left_out_of_supported_kinds_and_fail_resolved_refs() {
    let out = out_for(json!([
        {"name": "mixed", "port": 80, "protocol": "HTTP", "allowedRoutes": {"kinds": [
            {"kind": "HTTPRoute"},
            {"group": "gateway.networking.k8s.io", "kind": "TCPRoute"}]}},
        {"name": "only-bad", "port": 81, "protocol": "HTTP", "allowedRoutes": {"kinds": [
            {"group": "example.com", "kind": "HTTPRoute"}]}},
    ]));
    assert_eq!(
        kinds(&out, "mixed"),
        vec![(Some("gateway.networking.k8s.io".into()), "HTTPRoute".into())]
    );
    assert_eq!(kinds(&out, "only-bad"), vec![]);
    for name in ["mixed", "only-bad"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "ResolvedRefs"),
            tsr("ResolvedRefs", "False", "InvalidRouteKinds")
        );
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Accepted"),
            tsr("Accepted", "True", "Accepted")
        );
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Programmed"),
            tsr("Programmed", "False", "Invalid")
        );
    }
}

#[test]
fn different_protocols_on_one_port_conflict_and_neither_is_accepted() {
    let out = out_for(json!([
        http("plain", 443),
        https("secure", 443, None, cert()),
        http("other", 80),
    ]));
    for name in ["plain", "secure"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Conflicted"),
            tsr("Conflicted", "True", "ProtocolConflict")
        );
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Accepted"),
            tsr("Accepted", "False", "ProtocolConflict")
        );
    }
    assert_eq!(
        listener_condition(&out, "infra", "gw", "other", "Conflicted"),
        tsr("Conflicted", "False", "NoConflicts")
    );
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Accepted"),
        tsr("Accepted", "True", "ListenersNotValid")
    );
}

#[test]
fn the_same_port_protocol_and_hostname_conflict_on_hostname() {
    let out = out_for(json!([
        {"name": "a", "port": 80, "protocol": "HTTP", "hostname": "a.example.com"},
        {"name": "b", "port": 80, "protocol": "HTTP", "hostname": "a.example.com"},
        {"name": "c", "port": 80, "protocol": "HTTP", "hostname": "c.example.com"},
        {"name": "d", "port": 80, "protocol": "HTTP"},
    ]));
    for name in ["a", "b"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Conflicted"),
            tsr("Conflicted", "True", "HostnameConflict")
        );
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Accepted"),
            tsr("Accepted", "False", "HostnameConflict")
        );
    }
    for name in ["c", "d"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Accepted"),
            tsr("Accepted", "True", "Accepted")
        );
    }
}

#[test]
fn an_unsupported_listener_does_not_conflict_with_the_http_listener_on_its_port() {
    let out = out_for(json!([http("web", 80), {"name": "tcp", "port": 80, "protocol": "TCP"}]));
    assert_eq!(
        listener_condition(&out, "infra", "gw", "web", "Accepted"),
        tsr("Accepted", "True", "Accepted")
    );
    assert_eq!(
        listener_condition(&out, "infra", "gw", "tcp", "Accepted"),
        tsr("Accepted", "False", "UnsupportedProtocol")
    );
}

#[test]
fn a_certificate_ref_to_another_kind_is_an_invalid_certificate_ref() {
    let out = out_for(json!([
        https(
            "cm",
            443,
            Some("a.example.com"),
            json!([{"kind": "ConfigMap", "name": "c"}])
        ),
        https("none", 8443, None, json!([])),
    ]));
    for name in ["cm", "none"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "ResolvedRefs"),
            tsr("ResolvedRefs", "False", "InvalidCertificateRef")
        );
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Programmed"),
            tsr("Programmed", "False", "Invalid")
        );
    }
}

#[test]
fn a_cross_namespace_certificate_ref_needs_a_reference_grant_to_secrets() {
    let listeners = json!([https(
        "s",
        443,
        None,
        json!([{"name": "cert", "namespace": "certs"}])
    )]);
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", listeners)];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        listener_condition(&out, "infra", "gw", "s", "ResolvedRefs"),
        tsr("ResolvedRefs", "False", "RefNotPermitted")
    );

    // A grant to Services does not cover Secrets.
    w.reference_grants = vec![grant(
        "certs",
        "to-services",
        json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                         "namespace": "infra"}],
               "to": [{"group": "", "kind": "Service"}]}),
    )];
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        listener_condition(&out, "infra", "gw", "s", "ResolvedRefs"),
        tsr("ResolvedRefs", "False", "RefNotPermitted")
    );

    w.secrets.push(secret("certs", "cert", Content::Usable));
    w.reference_grants.push(grant(
        "certs",
        "to-secrets",
        json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                         "namespace": "infra"}],
               "to": [{"group": "", "kind": "Secret", "name": "cert"}]}),
    ));
    let out = compute(&w, CONTROLLER);
    assert_eq!(
        listener_condition(&out, "infra", "gw", "s", "ResolvedRefs"),
        tsr("ResolvedRefs", "True", "ResolvedRefs")
    );
    assert_eq!(
        listener_condition(&out, "infra", "gw", "s", "Programmed"),
        tsr("Programmed", "True", "Programmed")
    );
}

#[test]
fn https_listeners_whose_hostnames_overlap_on_one_port_are_flagged() {
    let out = out_for(json!([
        https("wild", 443, Some("*.example.com"), cert()),
        https("foo", 443, Some("foo.example.com"), cert()),
        https("other", 443, Some("foo.example.org"), cert()),
        https("elsewhere", 8443, Some("foo.example.com"), cert()),
    ]));
    for name in ["wild", "foo"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "OverlappingTLSConfig"),
            tsr("OverlappingTLSConfig", "True", "OverlappingHostnames")
        );
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Accepted"),
            tsr("Accepted", "True", "Accepted")
        );
    }
    for name in ["other", "elsewhere"] {
        let l = listener(&out, "infra", "gw", name);
        assert!(
            l.conditions
                .iter()
                .all(|c| c.type_ != "OverlappingTLSConfig"),
            "{name}: {:?}",
            l.conditions
        );
    }
}

#[test]
fn passthrough_on_an_https_listener_is_an_unsupported_value() {
    let out = out_for(json!([{"name": "pt", "port": 443, "protocol": "HTTPS",
                              "tls": {"mode": "Passthrough"}}]));
    assert_eq!(
        listener_condition(&out, "infra", "gw", "pt", "Accepted"),
        tsr("Accepted", "False", "UnsupportedValue")
    );
    assert_eq!(
        listener_condition(&out, "infra", "gw", "pt", "ResolvedRefs"),
        tsr("ResolvedRefs", "True", "ResolvedRefs")
    );
}
