//! One Gateway's listeners: protocol, route kinds, TLS certificateRefs, conflicts between
//! listeners, and which routes' namespaces a listener allows.
//!
//! HTTP, HTTPS (TLS mode Terminate) and TLS (Terminate or Passthrough) are served, and TCP and
//! UDP where the cluster serves TCPRoute and UDPRoute (Gateway API v1.6). HTTP and HTTPS
//! listeners take HTTPRoutes and GRPCRoutes; TLS listeners take TLSRoutes (the spec's core
//! combinations, upstream `apis/v1/gateway_types.go`, `Listener`: "TLSRoute, Port: 443,
//! Protocol: TLS, TLS Mode: Passthrough"); TCP listeners take TCPRoutes and UDP listeners
//! UDPRoutes. Distinct listeners (the same `Listener` text): HTTP, HTTPS and TLS differ by port or
//! hostname, TCP and UDP by port; HTTP, HTTPS or TLS beside TCP on one port are not distinct.
//! UDP is another transport: a UDP listener shares its port number with TCP-based ones freely. A terminating listener's certificateRefs must each
//! resolve to a usable Secret (see [`refs::check_certificate`]); a Passthrough listener's are
//! ignored, as v1.5.1 `apis/v1/gateway_types.go` (`ListenerTLSConfig.Mode`) says. A listener with a
//! protocol this controller does not serve (or an unsupported TLS mode) is never accepted and takes
//! no part in conflict detection: the spec's rule for unsupported TCP listeners ("the previous rule
//! does not apply, and the TCP Listeners SHOULD NOT be accepted") keeps it from knocking out the
//! HTTP listeners that share its port.

use gateway_api::gateways::{
    GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom, GatewayListenersTlsMode,
    GatewayStatusListeners, GatewayStatusListenersSupportedKinds,
};

use super::index::Index;
use super::reason;
use super::refs::{self, Problem, GATEWAY_GROUP};
use super::selector;
use super::verdict::Verdict;
use super::Served;

/// The route kinds a listener of `protocol` (and TLS mode) takes, in `supportedKinds` order.
fn protocol_kinds(spec: &GatewayListeners, served: Served) -> &'static [&'static str] {
    match spec.protocol.as_str() {
        "HTTP" | "HTTPS" => &["HTTPRoute", "GRPCRoute"],
        "TLS" => &["TLSRoute"],
        "TCP" if served.tcp_route => &["TCPRoute"],
        "UDP" if served.udp_route => &["UDPRoute"],
        _ => &[],
    }
}

/// Whether two listeners on one port number share a transport (UDP, or TCP under everything
/// else), so that they can conflict at all.
fn same_transport(a: &GatewayListeners, b: &GatewayListeners) -> bool {
    (a.protocol == "UDP") == (b.protocol == "UDP")
}

/// Which problem a listener's ResolvedRefs reports when it has several: a reference the
/// listener may not use at all, then a certificate it cannot use (both leave HTTPS unservable),
/// then route kinds it cannot attach (the listener still serves the valid ones).
const RESOLVED_REFS_PRECEDENCE: [&str; 3] = [
    reason::REF_NOT_PERMITTED,
    reason::INVALID_CERTIFICATE_REF,
    reason::INVALID_ROUTE_KINDS,
];

/// A listener as this controller judges it.
pub(crate) struct Listener<'w> {
    /// The listener's spec.
    pub spec: &'w GatewayListeners,
    /// The `Accepted` condition.
    pub accepted: Verdict,
    /// The `ResolvedRefs` condition.
    pub resolved_refs: Verdict,
    /// `Conflicted` True with this reason and message; `None`: no conflicts.
    pub conflicted: Option<(&'static str, String)>,
    /// `OverlappingTLSConfig` True with this message; `None`: the condition is not set (the
    /// spec forbids setting it False).
    pub overlapping_tls: Option<String>,
    /// `status.listeners[].supportedKinds`.
    pub supported_kinds: Vec<GatewayStatusListenersSupportedKinds>,
}

/// Judges every listener of a Gateway in `gateway_namespace`, in spec order.
pub(crate) fn analyse<'w>(
    gateway_namespace: &str,
    listeners: &'w [GatewayListeners],
    index: &Index<'_>,
) -> Vec<Listener<'w>> {
    analyse_after(gateway_namespace, listeners, &[], index)
}

/// Judges the listeners of a Gateway or ListenerSet in `gateway_namespace` (the object's own
/// namespace), in spec order, after the listeners in `precedent`, which are in effect on the
/// same Gateway and take precedence: a listener that conflicts with one of them is Conflicted,
/// and they are left as they are (upstream v1.5.1 `apis/v1/listenerset_types.go`,
/// `ListenerSetSpec.Listeners`: "Gateway Listeners MUST be given precedence over ListenerSet
/// Listeners", then ListenerSets by creation time and name).
pub(crate) fn analyse_after<'w>(
    gateway_namespace: &str,
    listeners: &'w [GatewayListeners],
    precedent: &[&GatewayListeners],
    index: &Index<'_>,
) -> Vec<Listener<'w>> {
    // 1. Each listener on its own.
    let served = index.served();
    let unsupported: Vec<Option<Verdict>> =
        listeners.iter().map(|l| unsupported(l, served)).collect();
    let mut out: Vec<Listener<'w>> = listeners
        .iter()
        .map(|spec| {
            let (supported_kinds, kind_problem) = route_kinds(spec, served);
            let mut problems: Vec<Problem> = certificate_problems(spec, gateway_namespace, index);
            problems.extend(kind_problem);
            let resolved_refs = match refs::most_important(&problems, &RESOLVED_REFS_PRECEDENCE) {
                Some(p) => Verdict::no(p.reason, p.message),
                None => Verdict::yes(reason::RESOLVED_REFS, "all references resolved"),
            };
            Listener {
                spec,
                accepted: Verdict::yes(reason::ACCEPTED, "listener is accepted"),
                resolved_refs,
                conflicted: None,
                overlapping_tls: None,
                supported_kinds,
            }
        })
        .collect();

    // 2. Conflicts among the listeners this controller would serve: first with the listeners
    //    that take precedence, and a listener they knock out takes no part in the conflicts
    //    among its siblings (upstream v1.7.0 conformance, ListenerSetProtocolConflict: a
    //    ListenerSet's TCP listener on its Gateway's HTTP port is conflicted, its HTTP siblings
    //    on that port are not).
    let mut eligible: Vec<bool> = unsupported.iter().map(Option::is_none).collect();
    for i in 0..out.len() {
        if eligible[i] {
            out[i].conflicted = conflict(&listeners[i], precedent.iter().copied());
        }
    }
    for i in 0..out.len() {
        eligible[i] &= out[i].conflicted.is_none();
    }
    for i in 0..out.len() {
        if eligible[i] {
            let others = listeners
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i && eligible[*j])
                .map(|(_, l)| l);
            out[i].conflicted = conflict(&listeners[i], others);
        }
    }

    // 3. Overlapping hostnames among the remaining HTTPS listeners of a port.
    let distinct: Vec<bool> = (0..out.len())
        .map(|i| eligible[i] && out[i].conflicted.is_none())
        .collect();
    for i in 0..out.len() {
        if distinct[i] && listeners[i].protocol == "HTTPS" {
            out[i].overlapping_tls = overlap(listeners, &distinct, i);
        }
    }

    // 4. Acceptance: unsupported first, then conflicts.
    for (listener, unsupported) in out.iter_mut().zip(unsupported) {
        if let Some(verdict) = unsupported {
            listener.accepted = verdict;
        } else if let Some((reason, message)) = &listener.conflicted {
            listener.accepted = Verdict::no(reason, message.clone());
        }
    }
    out
}

impl Listener<'_> {
    /// Accepted with all references resolved: the listener can be configured.
    pub(crate) fn is_valid(&self) -> bool {
        self.accepted.ok && self.resolved_refs.ok
    }

    /// The reason that makes the listener not valid.
    pub(crate) fn invalid_reason(&self) -> &'static str {
        if self.accepted.ok {
            self.resolved_refs.reason
        } else {
            self.accepted.reason
        }
    }

    /// Whether routes of `kind` may attach here (by kind: `supportedKinds`).
    pub(crate) fn admits(&self, kind: &str) -> bool {
        self.supported_kinds
            .iter()
            .any(|k| k.kind == kind && k.group.as_deref() == Some(GATEWAY_GROUP))
    }

    /// Whether `allowedRoutes.namespaces` admits routes from `route_namespace`. A namespace not
    /// (yet) seen has no known labels and matches no selector.
    pub(crate) fn allows_namespace(
        &self,
        gateway_namespace: &str,
        route_namespace: &str,
        index: &Index<'_>,
    ) -> bool {
        let namespaces = self
            .spec
            .allowed_routes
            .as_ref()
            .and_then(|a| a.namespaces.as_ref());
        match namespaces.and_then(|n| n.from.as_ref()) {
            None | Some(GatewayListenersAllowedRoutesNamespacesFrom::Same) => {
                route_namespace == gateway_namespace
            }
            Some(GatewayListenersAllowedRoutesNamespacesFrom::All) => true,
            Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector) => {
                match (
                    namespaces.and_then(|n| n.selector.as_ref()),
                    index.namespace_labels(route_namespace),
                ) {
                    (Some(s), Some(labels)) => selector::namespace_selector_matches(s, labels),
                    _ => false,
                }
            }
        }
    }

    /// The `Programmed` condition: a valid listener of an accepted Gateway (or ListenerSet:
    /// `parent_kind` names which) is in effect at once, as there is no data plane to wait for.
    /// A conflicted listener says its conflict (upstream v1.7.0 conformance,
    /// ListenerSetProtocolConflict and ListenerSetHostnameConflict: `Programmed` False with
    /// `ProtocolConflict` or `HostnameConflict`).
    pub(crate) fn programmed(&self, parent_kind: &str, parent_accepted: bool) -> Verdict {
        if let Some((reason, message)) = &self.conflicted {
            Verdict::no(reason, message.clone())
        } else if !parent_accepted {
            Verdict::no(
                reason::INVALID,
                format!("the {parent_kind} is not accepted"),
            )
        } else if !self.accepted.ok {
            Verdict::no(reason::INVALID, "the listener is not accepted")
        } else if !self.resolved_refs.ok {
            Verdict::no(reason::INVALID, "the listener has unresolved references")
        } else {
            Verdict::yes(reason::PROGRAMMED, "the listener is valid and in effect")
        }
    }

    /// This listener's `status.listeners` entry.
    pub(crate) fn status(
        &self,
        parent_kind: &str,
        gateway_accepted: bool,
        attached_routes: i32,
        generation: i64,
    ) -> GatewayStatusListeners {
        let conflicted = match &self.conflicted {
            Some((reason, message)) => Verdict::yes(reason, message.clone()),
            None => Verdict::no(reason::NO_CONFLICTS, "no conflicts with other listeners"),
        };
        let mut conditions = vec![
            self.accepted.condition(reason::ACCEPTED, generation),
            self.programmed(parent_kind, gateway_accepted)
                .condition(reason::PROGRAMMED, generation),
            self.resolved_refs
                .condition(reason::RESOLVED_REFS, generation),
            conflicted.condition(reason::CONFLICTED, generation),
        ];
        if let Some(message) = &self.overlapping_tls {
            conditions.push(
                Verdict::yes(reason::OVERLAPPING_HOSTNAMES, message.clone())
                    .condition(reason::OVERLAPPING_TLS_CONFIG, generation),
            );
        }
        GatewayStatusListeners {
            attached_routes,
            conditions,
            name: self.spec.name.clone(),
            supported_kinds: Some(self.supported_kinds.clone()),
        }
    }
}

/// Why a listener cannot be served at all, whatever the other listeners are.
fn unsupported(spec: &GatewayListeners, served: Served) -> Option<Verdict> {
    match spec.protocol.as_str() {
        "HTTP" => None,
        "HTTPS" if is_passthrough(spec) => Some(Verdict::no(
            reason::UNSUPPORTED_VALUE,
            "tls.mode Passthrough is not supported on an HTTPS listener",
        )),
        "HTTPS" | "TLS" => None,
        "TCP" | "UDP" if !protocol_kinds(spec, served).is_empty() => None,
        p @ ("TCP" | "UDP") => Some(Verdict::no(
            reason::UNSUPPORTED_PROTOCOL,
            format!(
                "protocol {p} needs the {p}Route CRD (Gateway API v1.6 or later), which the \
                 cluster does not serve"
            ),
        )),
        other => Some(Verdict::no(
            reason::UNSUPPORTED_PROTOCOL,
            format!("protocol {other} is not supported (only HTTP, HTTPS, TLS, TCP and UDP)"),
        )),
    }
}

fn is_passthrough(spec: &GatewayListeners) -> bool {
    matches!(
        spec.tls.as_ref().and_then(|t| t.mode.as_ref()),
        Some(GatewayListenersTlsMode::Passthrough)
    )
}

/// The supported kinds, and the problem when `allowedRoutes.kinds` names others. Without
/// `kinds`, the protocol decides ([`protocol_kinds`]).
fn route_kinds(
    spec: &GatewayListeners,
    served: Served,
) -> (Vec<GatewayStatusListenersSupportedKinds>, Option<Problem>) {
    let kind = |k: &str| GatewayStatusListenersSupportedKinds {
        group: Some(GATEWAY_GROUP.to_string()),
        kind: k.to_string(),
    };
    let served = protocol_kinds(spec, served);
    let listed = spec
        .allowed_routes
        .as_ref()
        .and_then(|a| a.kinds.as_deref())
        .filter(|k| !k.is_empty());
    let Some(listed) = listed else {
        return (served.iter().map(|k| kind(k)).collect(), None);
    };
    let mut supported: Vec<GatewayStatusListenersSupportedKinds> = vec![];
    let mut invalid = vec![];
    for k in listed {
        let group = k.group.as_deref().unwrap_or(GATEWAY_GROUP);
        if group == GATEWAY_GROUP && served.contains(&k.kind.as_str()) {
            if !supported.iter().any(|s| s.kind == k.kind) {
                supported.push(kind(&k.kind));
            }
        } else {
            invalid.push(refs::group_kind(group, &k.kind));
        }
    }
    let problem = (!invalid.is_empty()).then(|| Problem {
        reason: reason::INVALID_ROUTE_KINDS,
        message: format!(
            "route kinds not supported on {}: {}",
            spec.protocol,
            invalid.join(", ")
        ),
    });
    (supported, problem)
}

/// The certificateRef problems of a listener that terminates TLS (HTTPS, or TLS in mode
/// Terminate, the default), in spec order.
fn certificate_problems(
    spec: &GatewayListeners,
    gateway_namespace: &str,
    index: &Index<'_>,
) -> Vec<Problem> {
    if !matches!(spec.protocol.as_str(), "HTTPS" | "TLS") || is_passthrough(spec) {
        return vec![];
    }
    let certificate_refs = spec
        .tls
        .as_ref()
        .and_then(|t| t.certificate_refs.as_deref())
        .unwrap_or_default();
    if certificate_refs.is_empty() {
        return vec![Problem {
            reason: reason::INVALID_CERTIFICATE_REF,
            message: format!(
                "a {} listener that terminates TLS needs tls.certificateRefs",
                spec.protocol
            ),
        }];
    }
    certificate_refs
        .iter()
        .filter_map(|r| refs::check_certificate(index, gateway_namespace, r).err())
        .collect()
}

/// A listener's conflict with `others` (eligible listeners): a different protocol on its port
/// and transport first (it cannot be told apart at all), then the same port, protocol and
/// hostname (TCP and UDP listeners have no hostname: the same port is the same listener).
fn conflict<'a>(
    me: &GatewayListeners,
    others: impl Iterator<Item = &'a GatewayListeners> + Clone,
) -> Option<(&'static str, String)> {
    let others = || {
        others
            .clone()
            .filter(|l| l.port == me.port && same_transport(l, me))
    };
    if let Some(other) = others().find(|l| l.protocol != me.protocol) {
        return Some((
            reason::PROTOCOL_CONFLICT,
            format!(
                "port {} is also used by listener {} with protocol {}",
                me.port, other.name, other.protocol
            ),
        ));
    }
    fn hostname(l: &GatewayListeners) -> Option<&str> {
        refs::non_empty(l.hostname.as_deref())
    }
    others()
        .find(|l| l.protocol == me.protocol && hostname(l) == hostname(me))
        .map(|other| {
            (
                reason::HOSTNAME_CONFLICT,
                format!(
                    "listener {} has the same port, protocol and hostname",
                    other.name
                ),
            )
        })
}

/// Whether HTTPS listener `i` shares its port with another distinct HTTPS listener whose
/// hostname can match the same host, so that a client may reuse one's TLS connection for the
/// other.
fn overlap(listeners: &[GatewayListeners], distinct: &[bool], i: usize) -> Option<String> {
    let me = &listeners[i];
    listeners
        .iter()
        .enumerate()
        .find(|(j, l)| {
            *j != i
                && distinct[*j]
                && l.protocol == "HTTPS"
                && l.port == me.port
                && super::hostname::listeners_overlap(me.hostname.as_deref(), l.hostname.as_deref())
        })
        .map(|(_, other)| {
            format!(
                "hostname overlaps listener {} on port {}",
                other.name, me.port
            )
        })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tls_tests;
