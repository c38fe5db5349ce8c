//! References from one object to another: ReferenceGrant permission, route backendRefs and
//! listener certificateRefs.
//!
//! A certificateRef is checked for permission, kind, existence and content, against Secrets
//! reduced by [`crate::secret`] to the outcome of the certificate check.

use gateway_api::gateways::GatewayListenersTlsCertificateRefs;

use super::index::Index;
use super::reason;

/// The API group of Gateway API kinds.
pub(crate) const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// The object that holds a reference, as a ReferenceGrant's `from` names it.
pub(crate) struct Referrer<'a> {
    /// API group of the referring kind.
    pub group: &'a str,
    /// The referring kind.
    pub kind: &'a str,
    /// Namespace of the referring object.
    pub namespace: &'a str,
}

/// The object referred to, as a ReferenceGrant's `to` names it (plus its namespace).
pub(crate) struct Referent<'a> {
    /// API group; `""` is core.
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Namespace, where the ReferenceGrant must live.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
}

/// Why one reference does not resolve.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Problem {
    /// The condition reason.
    pub reason: &'static str,
    /// A short message naming the reference.
    pub message: String,
}

/// A backendRef as written in a route rule or a RequestMirror filter.
pub(crate) struct BackendRef<'a> {
    /// `group`; absent means core.
    pub group: Option<&'a str>,
    /// `kind`; absent means Service.
    pub kind: Option<&'a str>,
    /// `name`.
    pub name: &'a str,
    /// `namespace`; absent means the route's.
    pub namespace: Option<&'a str>,
    /// `port`.
    pub port: Option<i32>,
}

/// Whether a reference is allowed: same namespace, or a ReferenceGrant in the referent's
/// namespace whose `from` and `to` both admit it.
pub(crate) fn permitted(index: &Index<'_>, from: &Referrer<'_>, to: &Referent<'_>) -> bool {
    from.namespace == to.namespace
        || index.grants_in(to.namespace).iter().any(|g| {
            g.spec.from.iter().any(|f| {
                f.group == from.group && f.kind == from.kind && f.namespace == from.namespace
            }) && g.spec.to.iter().any(|t| {
                t.group == to.group
                    && t.kind == to.kind
                    && t.name
                        .as_deref()
                        .is_none_or(|n| n.is_empty() || n == to.name)
            })
        })
}

/// Checks one backendRef of a route of `route_kind` (as a ReferenceGrant's `from` names it) in
/// `route_namespace`.
///
/// Per reference the order is kind, then permission, then existence: for an unknown kind no
/// grant could help, and checking permission before existence does not reveal whether a Service
/// exists in a namespace that has not granted access.
pub(crate) fn check_backend(
    index: &Index<'_>,
    route_kind: &str,
    route_namespace: &str,
    r: &BackendRef<'_>,
) -> Result<(), Problem> {
    let group = r.group.unwrap_or("");
    let kind = r.kind.unwrap_or("Service");
    let namespace = non_empty(r.namespace).unwrap_or(route_namespace);
    let problem = |reason, what: String| {
        Err(Problem {
            reason,
            message: format!("backendRef {namespace}/{}: {what}", r.name),
        })
    };
    if !group.is_empty() || kind != "Service" {
        return problem(
            reason::INVALID_KIND,
            format!(
                "{} is not supported, only core Service",
                group_kind(group, kind)
            ),
        );
    }
    let from = Referrer {
        group: GATEWAY_GROUP,
        kind: route_kind,
        namespace: route_namespace,
    };
    let to = Referent {
        group: "",
        kind: "Service",
        namespace,
        name: r.name,
    };
    if !permitted(index, &from, &to) {
        return problem(
            reason::REF_NOT_PERMITTED,
            format!("no ReferenceGrant in {namespace} allows {route_kind}s from {route_namespace}"),
        );
    }
    let Some(service) = index.service(namespace, r.name) else {
        return problem(reason::BACKEND_NOT_FOUND, "Service not found".into());
    };
    let Some(port) = r.port else {
        return problem(
            reason::BACKEND_NOT_FOUND,
            "port is required for a Service".into(),
        );
    };
    let has_port = service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .any(|p| p.port == port);
    if !has_port {
        return problem(
            reason::BACKEND_NOT_FOUND,
            format!("Service has no port {port}"),
        );
    }
    Ok(())
}

/// Checks one `tls.certificateRefs` entry of a listener of a Gateway in `gateway_namespace`.
///
/// Permission comes first because the spec reserves InvalidCertificateRef for references that
/// are allowed (v1.5.1 `apis/v1/gateway_types.go`, `ListenerReasonInvalidCertificateRef`: "This
/// reason must be used only when the reference is allowed"; `ListenerTLSConfig.CertificateRefs`:
/// without a ReferenceGrant, "RefNotPermitted"; conformance
/// `gateway-secret-missing-reference-grant`, `gateway-secret-invalid-reference-grant`). Then the
/// kind (an unsupported group or kind: conformance `gateway-invalid-tls-configuration`,
/// `gateway-certificate-unsupported-group`/`-kind`), then the Secret itself: one that does not
/// exist (`gateway-certificate-nonexistent-secret`) or whose data is malformed
/// (`gateway-certificate-malformed-secret`), of another type than `kubernetes.io/tls` (the only
/// one with core support), or without `tls.crt`/`tls.key`.
pub(crate) fn check_certificate(
    index: &Index<'_>,
    gateway_namespace: &str,
    r: &GatewayListenersTlsCertificateRefs,
) -> Result<(), Problem> {
    let group = r.group.as_deref().unwrap_or("");
    let kind = r.kind.as_deref().unwrap_or("Secret");
    let namespace = non_empty(r.namespace.as_deref()).unwrap_or(gateway_namespace);
    let at = format!("certificateRef {namespace}/{}", r.name);
    let from = Referrer {
        group: GATEWAY_GROUP,
        kind: "Gateway",
        namespace: gateway_namespace,
    };
    let to = Referent {
        group,
        kind,
        namespace,
        name: &r.name,
    };
    if !permitted(index, &from, &to) {
        return Err(Problem {
            reason: reason::REF_NOT_PERMITTED,
            message: format!(
                "{at}: no ReferenceGrant in {namespace} allows Gateways from {gateway_namespace}"
            ),
        });
    }
    if !group.is_empty() || kind != "Secret" {
        return Err(Problem {
            reason: reason::INVALID_CERTIFICATE_REF,
            message: format!(
                "{at}: {} is not supported, only core Secret",
                group_kind(group, kind)
            ),
        });
    }
    let invalid = |what: String| {
        Err(Problem {
            reason: reason::INVALID_CERTIFICATE_REF,
            message: format!("{at}: {what}"),
        })
    };
    match index.secret(namespace, &r.name) {
        None => invalid("Secret not found".into()),
        Some(secret) => match secret.content.problem() {
            Some(problem) => invalid(problem),
            None => Ok(()),
        },
    }
}

/// The problem to report among several: the first reason in `precedence` that occurs, with the
/// message of its first occurrence and a count of the other problems.
pub(crate) fn most_important(problems: &[Problem], precedence: &[&str]) -> Option<Problem> {
    let rank = |p: &Problem| {
        precedence
            .iter()
            .position(|r| *r == p.reason)
            .unwrap_or(precedence.len())
    };
    // min_by_key keeps the first of equal keys: spec order breaks ties.
    let first = problems.iter().min_by_key(|p| rank(p))?;
    let message = match problems.len() - 1 {
        0 => first.message.clone(),
        1 => format!("{} (and 1 more problem)", first.message),
        n => format!("{} (and {n} more problems)", first.message),
    };
    Some(Problem {
        reason: first.reason,
        message,
    })
}

/// `Kind` for the core group, `group/Kind` otherwise.
pub(crate) fn group_kind(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{group}/{kind}")
    }
}

/// An optional string field, with `""` taken as unset (as the CRDs' CEL rules do).
pub(crate) fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::fixtures::grant;
    use super::super::World;
    use super::*;

    fn route_to_service<'a>(
        namespace: &'a str,
        name: &'a str,
    ) -> (Referrer<'static>, Referent<'a>) {
        (
            Referrer {
                group: GATEWAY_GROUP,
                kind: "HTTPRoute",
                namespace: "infra",
            },
            Referent {
                group: "",
                kind: "Service",
                namespace,
                name,
            },
        )
    }

    #[test]
    fn the_same_namespace_needs_no_grant() {
        let world = World::default();
        let index = Index::new(&world);
        let (from, to) = route_to_service("infra", "web");
        assert!(permitted(&index, &from, &to));
    }

    #[test]
    fn a_grant_must_admit_both_the_referrer_and_the_referent() {
        let world = World {
            reference_grants: vec![grant(
                "apps",
                "g",
                json!({"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                 "namespace": "infra"},
                                {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                 "namespace": "other"}],
                       "to": [{"group": "", "kind": "Service", "name": "api"},
                              {"group": "", "kind": "Secret", "name": ""}]}),
            )],
            ..World::default()
        };
        let index = Index::new(&world);
        let (from, to) = route_to_service("apps", "api");
        assert!(permitted(&index, &from, &to));
        let (from, to) = route_to_service("apps", "db");
        assert!(!permitted(&index, &from, &to));
        let (from, to) = route_to_service("elsewhere", "api");
        assert!(!permitted(&index, &from, &to));
        // An empty `to.name` covers every Secret, but only for the `from` entries listed.
        let gateway_from = |namespace| Referrer {
            group: GATEWAY_GROUP,
            kind: "Gateway",
            namespace,
        };
        let secret = Referent {
            group: "",
            kind: "Secret",
            namespace: "apps",
            name: "any",
        };
        assert!(permitted(&index, &gateway_from("other"), &secret));
        assert!(!permitted(&index, &gateway_from("infra"), &secret));
    }

    #[test]
    fn the_most_important_problem_follows_the_precedence_then_spec_order() {
        let p = |reason, message: &str| Problem {
            reason,
            message: message.into(),
        };
        let problems = [
            p(reason::INVALID_ROUTE_KINDS, "first"),
            p(reason::INVALID_CERTIFICATE_REF, "second"),
            p(reason::INVALID_CERTIFICATE_REF, "third"),
        ];
        let precedence = [
            reason::REF_NOT_PERMITTED,
            reason::INVALID_CERTIFICATE_REF,
            reason::INVALID_ROUTE_KINDS,
        ];
        assert_eq!(
            most_important(&problems, &precedence),
            Some(p(
                reason::INVALID_CERTIFICATE_REF,
                "second (and 2 more problems)"
            ))
        );
        assert_eq!(
            most_important(&problems[..1], &precedence),
            Some(p(reason::INVALID_ROUTE_KINDS, "first"))
        );
        assert_eq!(most_important(&[], &precedence), None);
    }
}
