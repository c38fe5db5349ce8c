//! Which object a status belongs to.

use std::fmt;
use std::sync::Arc;

/// The Gateway API kinds whose status gateway-leader writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// `gateway.networking.k8s.io/v1` GatewayClass (cluster-scoped).
    GatewayClass,
    /// `gateway.networking.k8s.io/v1` Gateway.
    Gateway,
    /// `gateway.networking.k8s.io/v1` HTTPRoute.
    HttpRoute,
    /// `gateway.networking.k8s.io/v1` GRPCRoute.
    GrpcRoute,
    /// `gateway.networking.k8s.io/v1` TLSRoute.
    TlsRoute,
    /// `gateway.networking.k8s.io/v1` TCPRoute (Gateway API v1.6 and later).
    TcpRoute,
    /// `gateway.networking.k8s.io/v1` UDPRoute (Gateway API v1.6 and later).
    UdpRoute,
    /// ListenerSet (optional CRD).
    ListenerSet,
    /// `gateway.networking.k8s.io/v1` BackendTLSPolicy (its `status.ancestors`).
    BackendTlsPolicy,
}

impl Kind {
    /// Every kind whose status the writer may write.
    pub const ALL: [Kind; 9] = [
        Kind::GatewayClass,
        Kind::Gateway,
        Kind::HttpRoute,
        Kind::GrpcRoute,
        Kind::TlsRoute,
        Kind::TcpRoute,
        Kind::UdpRoute,
        Kind::ListenerSet,
        Kind::BackendTlsPolicy,
    ];

    /// The Kubernetes kind, as in `kind:`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::GatewayClass => "GatewayClass",
            Kind::Gateway => "Gateway",
            Kind::HttpRoute => "HTTPRoute",
            Kind::GrpcRoute => "GRPCRoute",
            Kind::TlsRoute => "TLSRoute",
            Kind::TcpRoute => "TCPRoute",
            Kind::UdpRoute => "UDPRoute",
            Kind::ListenerSet => "ListenerSet",
            Kind::BackendTlsPolicy => "BackendTLSPolicy",
        }
    }

    /// Whether this is a route kind (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute).
    pub fn is_route(self) -> bool {
        matches!(
            self,
            Kind::HttpRoute | Kind::GrpcRoute | Kind::TlsRoute | Kind::TcpRoute | Kind::UdpRoute
        )
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Kind, namespace and name: the identity of one status to write.
///
/// The names are shared (`Arc<str>`): a key sits in several maps at once (desired statuses,
/// the cache, the drift check, the computation's memos, the writer's queue), and at 10,000
/// routes a copy of each string per map was megabytes (docs/architecture.md, Memory).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// The object's kind.
    pub kind: Kind,
    /// The namespace; `None` for cluster-scoped kinds.
    pub namespace: Option<Arc<str>>,
    /// The object's name.
    pub name: Arc<str>,
}

impl ObjectKey {
    /// A key for a cluster-scoped object.
    pub fn cluster(kind: Kind, name: impl Into<Arc<str>>) -> Self {
        ObjectKey {
            kind,
            namespace: None,
            name: name.into(),
        }
    }

    /// A key for a namespaced object.
    pub fn namespaced(
        kind: Kind,
        namespace: impl Into<Arc<str>>,
        name: impl Into<Arc<str>>,
    ) -> Self {
        ObjectKey {
            kind,
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A Gateway API kind that is watched only while its CRD is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub(crate) enum Crd {
    /// GatewayClass (required).
    GatewayClass,
    /// Gateway (required).
    Gateway,
    /// HTTPRoute (required).
    HttpRoute,
    /// GRPCRoute.
    GrpcRoute,
    /// TLSRoute.
    TlsRoute,
    /// TCPRoute (from Gateway API v1.6).
    TcpRoute,
    /// UDPRoute (from Gateway API v1.6).
    UdpRoute,
    /// ReferenceGrant (without it, every cross-namespace reference is refused).
    ReferenceGrant,
    /// ListenerSet (without it, Gateways have only their own listeners).
    ListenerSet,
    /// BackendTLSPolicy (its `status.ancestors`).
    BackendTlsPolicy,
}

impl Crd {
    /// Every kind, required ones first.
    pub(crate) const ALL: [Crd; 10] = [
        Crd::GatewayClass,
        Crd::Gateway,
        Crd::HttpRoute,
        Crd::GrpcRoute,
        Crd::TlsRoute,
        Crd::TcpRoute,
        Crd::UdpRoute,
        Crd::ReferenceGrant,
        Crd::ListenerSet,
        Crd::BackendTlsPolicy,
    ];

    /// The Kubernetes kind.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Crd::GatewayClass => "GatewayClass",
            Crd::Gateway => "Gateway",
            Crd::HttpRoute => "HTTPRoute",
            Crd::GrpcRoute => "GRPCRoute",
            Crd::TlsRoute => "TLSRoute",
            Crd::TcpRoute => "TCPRoute",
            Crd::UdpRoute => "UDPRoute",
            Crd::ReferenceGrant => "ReferenceGrant",
            Crd::ListenerSet => "ListenerSet",
            Crd::BackendTlsPolicy => "BackendTLSPolicy",
        }
    }

    /// The resource (plural) name, as discovery lists it.
    pub(crate) fn plural(self) -> &'static str {
        match self {
            Crd::GatewayClass => "gatewayclasses",
            Crd::Gateway => "gateways",
            Crd::HttpRoute => "httproutes",
            Crd::GrpcRoute => "grpcroutes",
            Crd::TlsRoute => "tlsroutes",
            Crd::TcpRoute => "tcproutes",
            Crd::UdpRoute => "udproutes",
            Crd::ReferenceGrant => "referencegrants",
            Crd::ListenerSet => "listenersets",
            Crd::BackendTlsPolicy => "backendtlspolicies",
        }
    }

    /// The CRD's name.
    pub(crate) fn crd_name(self) -> String {
        format!("{}.gateway.networking.k8s.io", self.plural())
    }

    /// Whether the status writer is of any use without it: readiness waits for these.
    pub(crate) fn required(self) -> bool {
        matches!(self, Crd::GatewayClass | Crd::Gateway | Crd::HttpRoute)
    }
}

impl fmt::Display for Crd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}
