//! BackendTLSPolicy: one `status.ancestors` entry per Gateway of ours whose routes reach a
//! Service the policy targets, with `Accepted` and `ResolvedRefs`.
//!
//! Ancestors are Gateways (upstream `apis/v1/policy_types.go`, `PolicyAncestorStatus`:
//! implementations "SHOULD use Gateway as the PolicyAncestorStatus object"); a Gateway is one
//! when it accepted a route (HTTPRoute, GRPCRoute or TLSRoute) with a backendRef to a targeted
//! Service that it may name (same namespace, or a ReferenceGrant allows it), as the route
//! engine found ([`Reach`]). Only targetRefs to core Services count
//! (`apis/v1/backendtlspolicy_types.go`, `BackendTLSPolicySpec.TargetRefs`: "Extended:
//! Kubernetes Service referenced by HTTPRoute backendRefs"; v1.6.1: "backendRefs used on a Route.
//! HTTPRoute, GRPCRoute, TLSRoute with termination"). A `sectionName` names one port of the
//! Service (`LocalPolicyTargetReferenceWithSectionName`): the target is that port, so only routes
//! whose backendRef names that port's number make a Gateway an ancestor through it.
//!
//! `Accepted`, per ancestor, first match wins:
//! 0. every target the ancestor is reached through does not exist (the Service is missing, or
//!    has no port named `sectionName`) → False/TargetNotFound (`policy_types.go`,
//!    `PolicyReasonTargetNotFound`: "attached to an invalid target resource"); the ancestors are
//!    then the Gateways whose routes name the Service at all, the only place to say so;
//! 1. another policy targets the same Service and `sectionName` and takes precedence (older
//!    `creationTimestamp`, then `{namespace}/{name}` alphabetically) → False/Conflicted
//!    (`BackendTLSPolicySpec.TargetRefs`; `policy_types.go`, `PolicyReasonConflicted`;
//!    conformance `backendtlspolicy-conflict-resolution`);
//! 2. `wellKnownCACertificates` is set to anything but `System` → False/Invalid
//!    (`BackendTLSValidation.WellKnownCACertificates`: "the supplied value is not recognized");
//! 3. every caCertificateRef is invalid → False/NoValidCACertificate
//!    (`BackendTLSValidation.CACertificateRefs`; conformance
//!    `backendtlspolicy-invalid-ca-certificate-ref`, `backendtlspolicy-invalid-kind`);
//! 4. True/Accepted (`PolicyReasonAccepted`; conformance `backendtlspolicy`).
//!
//! `ResolvedRefs`, the same on every ancestor: each caCertificateRef must be a core ConfigMap
//! (else InvalidKind, conformance `backendtlspolicy-invalid-kind`) that exists and whose
//! `ca.crt` holds PEM certificates (else InvalidCACertificateRef, conformance
//! `backendtlspolicy-invalid-ca-certificate-ref`; see [`crate::configmap`]); True/ResolvedRefs
//! otherwise (`BackendTLSPolicyConditionResolvedRefs` and its reasons).
//!
//! Not covered: `TargetNotFound` for a Service no route of ours names (it has no ancestor of
//! ours to report it on), the validation of `hostname`, `subjectAltNames` and `options` beyond
//! the CRD's own rules.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gateway_api::backendtlspolicies::{BackendTlsPolicy, BackendTlsPolicyValidation};
use gateway_api::httproutes::HttpRouteStatusParentsParentRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::index::Index;
use super::reason;
use super::refs::{self, group_kind, non_empty, Problem, GATEWAY_GROUP};
use super::route::Reach;
use super::verdict::Verdict;
use super::World;
use crate::desired::{Desired, PolicyAncestorStatus};
use crate::key::{Kind, ObjectKey};
use crate::merge::MAX_ANCESTORS;

/// The only `wellKnownCACertificates` value the spec defines ("System").
const WELL_KNOWN_SYSTEM: &str = "System";

/// Which problem `ResolvedRefs` reports when caCertificateRefs have several: a kind no
/// ConfigMap could fix first, then a ConfigMap that is missing or malformed.
const RESOLVED_REFS_PRECEDENCE: [&str; 2] =
    [reason::INVALID_KIND, reason::INVALID_CA_CERTIFICATE_REF];

/// A targeted Service port set: (namespace, name, sectionName).
type Target<'w> = (&'w str, &'w str, Option<&'w str>);

/// A policy's precedence among those targeting one Service section: older first, then by
/// `{namespace}/{name}`; a policy without a creation time (never on a real apiserver) last.
type Precedence<'w> = (bool, Option<&'w Time>, &'w str, &'w str);

/// Adds the desired status of each BackendTLSPolicy related to us to `out`.
pub(crate) fn compute<'w>(
    world: &'w World,
    controller_name: &str,
    reach: &Reach<'w>,
    index: &Index<'_>,
    out: &mut BTreeMap<ObjectKey, Desired>,
) {
    let winners = winners(&world.backend_tls_policies);
    for policy in &world.backend_tls_policies {
        let meta = &policy.metadata;
        let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref())
        else {
            continue;
        };
        let generation = meta.generation.unwrap_or(0);
        // The Gateways reaching each target, and the targets through which each is reached.
        let mut ancestors: BTreeMap<(&str, &str), Vec<Via<'_>>> = BTreeMap::new();
        for target in targets(policy, namespace) {
            let found = find(target, index);
            for (gateway, port) in reach.get(&(target.0, target.1)).into_iter().flatten() {
                let through = match &found {
                    Ok(Some(p)) => *port == Some(*p),
                    Ok(None) | Err(_) => true,
                };
                if through {
                    let via = Via {
                        target,
                        missing: found.as_ref().err().cloned(),
                    };
                    let list = ancestors.entry(*gateway).or_default();
                    if !list.contains(&via) {
                        list.push(via);
                    }
                }
            }
        }
        let mut entries = vec![];
        if !ancestors.is_empty() {
            let me = precedence(policy, namespace, name);
            let resolved = resolve_refs(&policy.spec.validation, namespace, index);
            for ((gw_namespace, gw_name), via) in ancestors.into_iter().take(MAX_ANCESTORS) {
                let accepted = accept(&policy.spec.validation, &via, &me, &winners, &resolved);
                entries.push(PolicyAncestorStatus {
                    conditions: vec![
                        accepted.condition(reason::ACCEPTED, generation),
                        resolved
                            .verdict
                            .condition(reason::RESOLVED_REFS, generation),
                    ],
                    controller_name: controller_name.to_string(),
                    parent_ref: HttpRouteStatusParentsParentRef {
                        group: Some(GATEWAY_GROUP.to_string()),
                        kind: Some("Gateway".to_string()),
                        name: gw_name.to_string(),
                        namespace: Some(gw_namespace.to_string()),
                        port: None,
                        section_name: None,
                    },
                });
            }
        }
        let has_stale_entries = policy
            .status
            .iter()
            .flat_map(|s| &s.ancestors)
            .any(|a| a.controller_name == controller_name);
        if !entries.is_empty() || has_stale_entries {
            out.insert(
                ObjectKey::namespaced(Kind::BackendTlsPolicy, namespace, name),
                Desired::Policy {
                    generation,
                    ancestors: entries,
                },
            );
        }
    }
}

/// A target an ancestor is reached through, and why it does not exist, if it does not.
#[derive(Debug, Clone, PartialEq)]
struct Via<'w> {
    target: Target<'w>,
    missing: Option<String>,
}

/// The port number `target`'s `sectionName` names (`None` without one), or why the target does
/// not exist.
fn find(target: Target<'_>, index: &Index<'_>) -> Result<Option<i32>, String> {
    let (namespace, name, section) = target;
    let Some(service) = index.service(namespace, name) else {
        return Err(format!("Service {namespace}/{name} does not exist"));
    };
    let Some(section) = section else {
        return Ok(None);
    };
    service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(section))
        .map(|p| Some(p.port))
        .ok_or_else(|| format!("Service {namespace}/{name} has no port named {section}"))
}

/// The policy's targetRefs to core Services (in its own namespace: targetRefs are local).
fn targets<'w>(policy: &'w BackendTlsPolicy, namespace: &'w str) -> Vec<Target<'w>> {
    let mut out: Vec<Target<'w>> = policy
        .spec
        .target_refs
        .iter()
        .filter(|t| t.group.is_empty() && t.kind == "Service")
        .map(|t| {
            (
                namespace,
                t.name.as_str(),
                non_empty(t.section_name.as_deref()),
            )
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn precedence<'w>(
    policy: &'w BackendTlsPolicy,
    namespace: &'w str,
    name: &'w str,
) -> Precedence<'w> {
    let created = policy.metadata.creation_timestamp.as_ref();
    (created.is_none(), created, namespace, name)
}

/// For each target, the policy that takes precedence on it.
fn winners(policies: &[Arc<BackendTlsPolicy>]) -> HashMap<Target<'_>, Precedence<'_>> {
    let mut winners: HashMap<Target<'_>, Precedence<'_>> = HashMap::new();
    for policy in policies {
        let meta = &policy.metadata;
        let (Some(namespace), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref())
        else {
            continue;
        };
        let me = precedence(policy, namespace, name);
        for target in targets(policy, namespace) {
            winners
                .entry(target)
                .and_modify(|w| {
                    if me < *w {
                        *w = me;
                    }
                })
                .or_insert(me);
        }
    }
    winners
}

/// `ResolvedRefs` and whether any caCertificateRef is usable.
struct Resolved {
    verdict: Verdict,
    /// caCertificateRefs listed, and how many of them are invalid.
    refs: usize,
    invalid: usize,
}

fn resolve_refs(
    validation: &BackendTlsPolicyValidation,
    namespace: &str,
    index: &Index<'_>,
) -> Resolved {
    let refs = validation
        .ca_certificate_refs
        .as_deref()
        .unwrap_or_default();
    let problems: Vec<Problem> = refs
        .iter()
        .filter_map(|r| {
            let at = format!("caCertificateRef {namespace}/{}", r.name);
            let problem = |reason, what: String| {
                Some(Problem {
                    reason,
                    message: format!("{at}: {what}"),
                })
            };
            if !r.group.is_empty() || r.kind != "ConfigMap" {
                return problem(
                    reason::INVALID_KIND,
                    format!(
                        "{} is not supported, only core ConfigMap",
                        group_kind(&r.group, &r.kind)
                    ),
                );
            }
            match index.config_map(namespace, &r.name) {
                None => problem(
                    reason::INVALID_CA_CERTIFICATE_REF,
                    "ConfigMap not found".into(),
                ),
                Some(c) => c
                    .problem
                    .and_then(|p| problem(reason::INVALID_CA_CERTIFICATE_REF, p.to_string())),
            }
        })
        .collect();
    let verdict = match refs::most_important(&problems, &RESOLVED_REFS_PRECEDENCE) {
        Some(p) => Verdict::no(p.reason, p.message),
        None => Verdict::yes(reason::RESOLVED_REFS, "all references resolved"),
    };
    Resolved {
        verdict,
        refs: refs.len(),
        invalid: problems.len(),
    }
}

/// `Accepted` on one ancestor reached through the targets `via`.
fn accept(
    validation: &BackendTlsPolicyValidation,
    via: &[Via<'_>],
    me: &Precedence<'_>,
    winners: &HashMap<Target<'_>, Precedence<'_>>,
    resolved: &Resolved,
) -> Verdict {
    if let Some(missing) = via
        .iter()
        .map(|v| v.missing.as_ref())
        .collect::<Option<Vec<_>>>()
    {
        if !missing.is_empty() {
            let why: Vec<&str> = missing.iter().map(|m| m.as_str()).collect();
            return Verdict::no(reason::TARGET_NOT_FOUND, why.join("; "));
        }
    }
    let via: Vec<Target<'_>> = via
        .iter()
        .filter(|v| v.missing.is_none())
        .map(|v| v.target)
        .collect();
    let lost = via
        .iter()
        .find_map(|t| winners.get(t).filter(|w| *w != me).map(|w| (t, w)));
    if let Some(((_, service, section), (_, _, ns, name))) = lost {
        let section = section.map(|s| format!(" section {s}")).unwrap_or_default();
        return Verdict::no(
            reason::CONFLICTED,
            format!(
                "BackendTLSPolicy {ns}/{name} targets Service {service}{section} too and takes \
                 precedence"
            ),
        );
    }
    if resolved.refs == 0 {
        let well_known = validation
            .well_known_ca_certificates
            .as_deref()
            .unwrap_or("");
        if !well_known.is_empty() && well_known != WELL_KNOWN_SYSTEM {
            return Verdict::no(
                reason::INVALID,
                format!(
                    "wellKnownCACertificates {well_known:?} is not supported, \
                     only {WELL_KNOWN_SYSTEM}"
                ),
            );
        }
    } else if resolved.invalid == resolved.refs {
        return Verdict::no(
            reason::NO_VALID_CA_CERTIFICATE,
            "no caCertificateRef is valid; see ResolvedRefs",
        );
    }
    Verdict::yes(reason::ACCEPTED, "accepted")
}

#[cfg(test)]
mod tests;
