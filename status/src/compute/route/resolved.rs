//! A route's `ResolvedRefs`: every backendRef (and RequestMirror target) resolved to a Service
//! and port it may use, or the first reason it may not.

use super::*;

/// The route's `ResolvedRefs`, over every backendRef.
pub(super) fn resolve_refs(
    kind: Kind,
    backend_refs: &[BackendRef<'_>],
    namespace: &str,
    index: &Index<'_>,
) -> Verdict {
    let problems: Vec<Problem> = backend_refs
        .iter()
        .filter_map(|r| refs::check_backend(index, kind.as_str(), namespace, r).err())
        .collect();
    match refs::most_important(&problems, &RESOLVED_REFS_PRECEDENCE) {
        Some(p) => Verdict::no(p.reason, p.message),
        None => Verdict::yes(reason::RESOLVED_REFS, "all references resolved"),
    }
}

/// Builds a [`ParentRef`] or [`BackendRef`] view from any kind's generated struct: kopium gives
/// every route kind its own copies of the same upstream types.
macro_rules! parent_ref {
    ($p:expr) => {
        ParentRef {
            group: $p.group.as_deref(),
            kind: $p.kind.as_deref(),
            name: &$p.name,
            namespace: $p.namespace.as_deref(),
            port: $p.port,
            section_name: $p.section_name.as_deref(),
        }
    };
}

macro_rules! backend_ref {
    ($b:expr) => {
        BackendRef {
            group: $b.group.as_deref(),
            kind: $b.kind.as_deref(),
            name: &$b.name,
            namespace: $b.namespace.as_deref(),
            port: $b.port,
        }
    };
}

/// The `controllerName` of each `status.parents` entry of a route of any kind.
macro_rules! status_controllers {
    ($route:expr) => {
        $route
            .status
            .iter()
            .flat_map(|s| s.parents.iter())
            .map(|p| p.controller_name.as_str())
            .collect()
    };
}

/// HTTPRoute and GRPCRoute: optional parentRefs, hostnames and rules, whose backendRefs and
/// rules may carry RequestMirror filters.
macro_rules! impl_route_with_mirrors {
    ($route:ty, $kind:expr $(, $extra:item)*) => {
        impl Route for $route {
            const KIND: Kind = $kind;
            $($extra)*

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn view(&self) -> RouteView<'_> {
                let mut backend_refs = vec![];
                for rule in self.spec.rules.iter().flatten() {
                    for b in rule.backend_refs.iter().flatten() {
                        backend_refs.push(backend_ref!(b));
                        let mirrors = b.filters.iter().flatten();
                        let mirrors = mirrors.filter_map(|f| f.request_mirror.as_ref());
                        backend_refs.extend(mirrors.map(|m| backend_ref!(m.backend_ref)));
                    }
                    let mirrors = rule.filters.iter().flatten();
                    let mirrors = mirrors.filter_map(|f| f.request_mirror.as_ref());
                    backend_refs.extend(mirrors.map(|m| backend_ref!(m.backend_ref)));
                }
                let parent_refs = self.spec.parent_refs.iter().flatten();
                RouteView {
                    parent_refs: parent_refs.map(|p| parent_ref!(p)).collect(),
                    hostnames: self.spec.hostnames.as_deref().unwrap_or_default(),
                    backend_refs,
                    status_controllers: status_controllers!(self),
                }
            }
        }
    };
}

impl_route_with_mirrors!(
    StoredHttpRoute,
    Kind::HttpRoute,
    fn unsupported_value(&self) -> Option<String> {
        self.retry_backoff.map(|rule| {
            format!(
                "rule {rule} sets retry.backoff, which this controller does not support (it \
                 claims no retry feature)"
            )
        })
    }
);
impl_route_with_mirrors!(GrpcRoute, Kind::GrpcRoute);

// === impl Route for TlsRoute ===

impl Route for TlsRoute {
    const KIND: Kind = Kind::TlsRoute;

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn view(&self) -> RouteView<'_> {
        RouteView {
            parent_refs: self
                .spec
                .parent_refs
                .iter()
                .flatten()
                .map(|p| parent_ref!(p))
                .collect(),
            hostnames: &self.spec.hostnames,
            backend_refs: self
                .spec
                .rules
                .iter()
                .flat_map(|r| &r.backend_refs)
                .map(|b| backend_ref!(b))
                .collect(),
            status_controllers: status_controllers!(self),
        }
    }
}

// === impl Route for TcpRoute, UdpRoute ===

/// TCPRoute and UDPRoute (Gateway API v1.6, our own types): parentRefs and the rules'
/// backendRefs; no hostnames (every listener's hostname admits them, and TCP and UDP listeners
/// have none) and no filters.
macro_rules! impl_l4_route {
    ($route:ty, $kind:expr) => {
        impl Route for $route {
            const KIND: Kind = $kind;
            const BACKEND_TLS: bool = false;

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn view(&self) -> RouteView<'_> {
                let rules = self.spec.rules.iter().flatten();
                RouteView {
                    parent_refs: self
                        .spec
                        .parent_refs
                        .iter()
                        .flatten()
                        .map(|p| parent_ref!(p))
                        .collect(),
                    hostnames: &[],
                    backend_refs: rules
                        .flat_map(|r| r.backend_refs.iter().flatten())
                        .map(|b| backend_ref!(b))
                        .collect(),
                    status_controllers: status_controllers!(self),
                }
            }
        }
    };
}

impl_l4_route!(TcpRoute, Kind::TcpRoute);
impl_l4_route!(UdpRoute, Kind::UdpRoute);
