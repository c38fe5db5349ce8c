//! TCPRoute and UDPRoute (Gateway API v1.6) through the shared engine: they attach only to
//! TCP and UDP listeners, which are served only where their kinds are, and count in
//! `attachedRoutes` like every kind.

use serde_json::json;

use super::super::fixtures::*;
use super::super::{compute, Served, World};
use crate::key::Kind;

const BOTH: Served = Served {
    tcp_route: true,
    udp_route: true,
};

/// Gateway `infra/gw`: HTTP `web` (80), TCP `tcp` (9000), UDP `udp` (53) and UDP `dns` on
/// port 80 (UDP shares a port number with HTTP); Services `infra/echo` (9000) and `infra/dns`
/// (53).
fn base(served: Served) -> World {
    let mut w = world();
    w.served = served;
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([
            http("web", 80),
            {"name": "tcp", "port": 9000, "protocol": "TCP"},
            {"name": "udp", "port": 53, "protocol": "UDP"},
            {"name": "dns", "port": 80, "protocol": "UDP"}
        ]),
    )];
    w.services = vec![
        service("infra", "echo", &[9000]),
        service("infra", "dns", &[53]),
    ];
    w
}

fn spec(section: &str, backend: serde_json::Value) -> serde_json::Value {
    json!({"parentRefs": [{"name": "gw", "sectionName": section}],
           "rules": [{"backendRefs": [backend]}]})
}

#[test]
fn tcp_and_udp_routes_attach_to_their_listeners_and_count() {
    let mut w = base(BOTH);
    w.tcp_routes = vec![tcp_route(
        "infra",
        "t",
        spec("tcp", json!({"name": "echo", "port": 9000})),
    )];
    w.udp_routes = vec![
        udp_route(
            "infra",
            "u",
            spec("udp", json!({"name": "dns", "port": 53})),
        ),
        udp_route(
            "infra",
            "all",
            json!({"parentRefs": [{"name": "gw"}],
                   "rules": [{"backendRefs": [{"name": "dns", "port": 53}]}]}),
        ),
    ];
    let out = compute(&w, CONTROLLER);
    for (kind, name) in [
        (Kind::TcpRoute, "t"),
        (Kind::UdpRoute, "u"),
        (Kind::UdpRoute, "all"),
    ] {
        for t in ["Accepted", "ResolvedRefs"] {
            assert_eq!(
                condition_on(&out, kind, "infra", name, t),
                sr("True", t),
                "{kind} {name}"
            );
        }
    }
    // Without a sectionName a UDPRoute attaches to every UDP listener, and to nothing else.
    assert_eq!(listener(&out, "infra", "gw", "tcp").attached_routes, 1);
    assert_eq!(listener(&out, "infra", "gw", "udp").attached_routes, 2);
    assert_eq!(listener(&out, "infra", "gw", "dns").attached_routes, 1);
    assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 0);
    for (name, kind) in [
        ("tcp", "TCPRoute"),
        ("udp", "UDPRoute"),
        ("dns", "UDPRoute"),
    ] {
        let kinds: Vec<String> = listener(&out, "infra", "gw", name)
            .supported_kinds
            .iter()
            .flatten()
            .map(|k| k.kind.clone())
            .collect();
        assert_eq!(kinds, [kind], "{name}");
        for (t, st, reason) in [
            ("Accepted", "True", "Accepted"),
            ("Programmed", "True", "Programmed"),
            ("Conflicted", "False", "NoConflicts"),
        ] {
            assert_eq!(
                listener_condition(&out, "infra", "gw", name, t),
                tsr(t, st, reason),
                "{name}"
            );
        }
    }
}

#[test]
fn a_tcp_route_on_an_http_listener_is_not_allowed_by_listeners() {
    // Conformance v1.6.1 `tcproute-invalid-non-tcp-listener`, and UDPRoute on TLS
    // (`udproute-not-allowed-by-listeners`).
    let mut w = base(BOTH);
    w.tcp_routes = vec![tcp_route(
        "infra",
        "t",
        spec("web", json!({"name": "echo", "port": 9000})),
    )];
    w.udp_routes = vec![udp_route(
        "infra",
        "u",
        spec("tcp", json!({"name": "dns", "port": 53})),
    )];
    let out = compute(&w, CONTROLLER);
    for (kind, name) in [(Kind::TcpRoute, "t"), (Kind::UdpRoute, "u")] {
        assert_eq!(
            condition_on(&out, kind, "infra", name, "Accepted"),
            sr("False", "NotAllowedByListeners"),
            "{kind}"
        );
    }
    for name in ["web", "tcp"] {
        assert_eq!(listener(&out, "infra", "gw", name).attached_routes, 0);
    }
}

#[test]
fn a_tcp_routes_missing_backend_and_ungranted_namespace_are_unresolved() {
    // Conformance v1.6.1 `tcproute-invalid-backendref-nonexistent`,
    // `tcproute-invalid-cross-namespace-backend-ref`: attached, but ResolvedRefs False.
    let mut w = base(BOTH);
    w.tcp_routes = vec![
        tcp_route(
            "infra",
            "gone",
            spec("tcp", json!({"name": "nope", "port": 1})),
        ),
        tcp_route(
            "infra",
            "far",
            spec("tcp", json!({"name": "x", "namespace": "apps", "port": 1})),
        ),
    ];
    let out = compute(&w, CONTROLLER);
    for (name, reason) in [("gone", "BackendNotFound"), ("far", "RefNotPermitted")] {
        assert_eq!(
            condition_on(&out, Kind::TcpRoute, "infra", name, "Accepted"),
            sr("True", "Accepted")
        );
        assert_eq!(
            condition_on(&out, Kind::TcpRoute, "infra", name, "ResolvedRefs"),
            sr("False", reason)
        );
    }
    assert_eq!(listener(&out, "infra", "gw", "tcp").attached_routes, 2);
}

#[test]
fn without_their_kinds_tcp_and_udp_listeners_are_unsupported_protocols() {
    // A v1.5.1 cluster: no TCPRoute or UDPRoute can exist, so nothing could attach.
    let out = compute(&base(Served::default()), CONTROLLER);
    for name in ["tcp", "udp", "dns"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Accepted"),
            tsr("Accepted", "False", "UnsupportedProtocol")
        );
        assert!(listener(&out, "infra", "gw", name)
            .supported_kinds
            .iter()
            .flatten()
            .next()
            .is_none());
    }
    // The HTTP listener on port 80 is not knocked out by the unsupported UDP one.
    assert_eq!(
        listener_condition(&out, "infra", "gw", "web", "Accepted"),
        tsr("Accepted", "True", "Accepted")
    );
}

#[test]
fn tcp_beside_http_on_one_port_conflicts_but_udp_does_not() {
    let mut w = world();
    w.served = BOTH;
    w.gateways = vec![gateway(
        "infra",
        "gw",
        json!([
            http("web", 80),
            {"name": "tcp", "port": 80, "protocol": "TCP"},
            {"name": "udp", "port": 80, "protocol": "UDP"},
            {"name": "udp2", "port": 53, "protocol": "UDP"},
            {"name": "udp3", "port": 53, "protocol": "UDP"}
        ]),
    )];
    let out = compute(&w, CONTROLLER);
    for name in ["web", "tcp"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Conflicted"),
            tsr("Conflicted", "True", "ProtocolConflict"),
            "{name}"
        );
    }
    assert_eq!(
        listener_condition(&out, "infra", "gw", "udp", "Conflicted"),
        tsr("Conflicted", "False", "NoConflicts")
    );
    for name in ["udp2", "udp3"] {
        assert_eq!(
            listener_condition(&out, "infra", "gw", name, "Accepted").1,
            "False",
            "two UDP listeners on one port are not distinct: {name}"
        );
    }
}

#[test]
fn a_change_of_the_served_kinds_computes_every_route_again() {
    let mut w = base(Served::default());
    w.tcp_routes = vec![tcp_route(
        "infra",
        "t",
        spec("tcp", json!({"name": "echo", "port": 9000})),
    )];
    let mut c = super::super::Computation::new(CONTROLLER);
    let first = c.run(&w);
    assert_eq!(first.routes_computed, 1);
    w.served = BOTH;
    let second = c.run(&w);
    assert_eq!(
        second.routes_computed, 1,
        "the TCP listener became acceptable"
    );
}
