//! HTTPRoutes: one `status.parents` entry per parentRef to one of our Gateways, with `Accepted`
//! and `ResolvedRefs`, and the attachments the Gateways' listeners count.
//!
//! `Accepted` for one parentRef, first match wins:
//! 1. the Gateway is not accepted → False/NoMatchingParent (of the spec's reasons the closest:
//!    the Gateway offers nothing to attach to; the message says why);
//! 2. no listener matches `sectionName`/`port` → False/NoMatchingParent;
//! 3. no matching listener allows the route's kind and namespace → False/NotAllowedByListeners;
//! 4. no allowing listener's hostname intersects the route's → False/NoMatchingListenerHostname;
//! 5. True/Accepted, attached to every listener that passed 4.
//!
//! Attachment depends only on the listener's `allowedRoutes`, hostname and the parentRef, not on
//! the listener's own conditions, as the spec's `attachedRoutes` text requires.

use std::collections::{BTreeMap, HashSet};

use gateway_api::httproutes::{
    HttpRoute, HttpRouteParentRefs, HttpRouteStatusParents, HttpRouteStatusParentsParentRef,
};

use super::gateway::{GatewayView, Gateways};
use super::hostname;
use super::index::Index;
use super::reason;
use super::refs::{self, non_empty, BackendRef, Problem, GATEWAY_GROUP};
use super::verdict::Verdict;
use super::World;
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};

/// `status.parents` holds at most this many entries.
const MAX_PARENTS: usize = 32;

/// Which problem `ResolvedRefs` reports when backendRefs have several: a kind this controller
/// cannot route to (only the route's author can fix it, and no grant or Service would help),
/// then a missing ReferenceGrant (another namespace's owner must act), then a missing Service
/// or port (often just not created yet). Within a reason, the first in spec order: rules in
/// order; in a rule, each backendRef followed by its own RequestMirror filters, then the rule's
/// RequestMirror filters.
const RESOLVED_REFS_PRECEDENCE: [&str; 3] = [
    reason::INVALID_KIND,
    reason::REF_NOT_PERMITTED,
    reason::BACKEND_NOT_FOUND,
];

/// Adds the desired status of each HTTPRoute related to us to `out`, and counts attachments
/// into `gateways`.
pub(crate) fn compute<'w>(
    world: &'w World,
    controller_name: &str,
    gateways: &mut Gateways<'w>,
    index: &Index<'_>,
    out: &mut BTreeMap<ObjectKey, Desired>,
) {
    for route in &world.http_routes {
        let (Some(namespace), Some(name)) = (
            route.metadata.namespace.as_deref(),
            route.metadata.name.as_deref(),
        ) else {
            continue;
        };
        let generation = route.metadata.generation.unwrap_or(0);
        let mut attachments: Vec<((&'w str, &'w str), usize)> = vec![];
        let parents = parents(
            route,
            namespace,
            controller_name,
            generation,
            gateways,
            index,
            &mut attachments,
        );
        // A route attached to one listener through two parentRefs counts once there.
        attachments.sort_unstable();
        attachments.dedup();
        for (gateway, listener) in attachments {
            if let Some(count) = gateways
                .get_mut(&gateway)
                .and_then(|g| g.attached_routes.get_mut(listener))
            {
                *count = count.saturating_add(1);
            }
        }
        let has_stale_entries = route.status.as_ref().is_some_and(|s| {
            s.parents
                .iter()
                .any(|p| p.controller_name == controller_name)
        });
        if !parents.is_empty() || has_stale_entries {
            out.insert(
                ObjectKey::namespaced(Kind::HttpRoute, namespace, name),
                Desired::HttpRoute {
                    generation,
                    parents,
                },
            );
        }
    }
}

/// Our `status.parents` entries for one route, recording its attachments.
fn parents<'w>(
    route: &'w HttpRoute,
    namespace: &'w str,
    controller_name: &str,
    generation: i64,
    gateways: &Gateways<'w>,
    index: &Index<'_>,
    attachments: &mut Vec<((&'w str, &'w str), usize)>,
) -> Vec<HttpRouteStatusParents> {
    let hostnames = route.spec.hostnames.as_deref().unwrap_or_default();
    let mut seen = HashSet::new();
    let mut resolved_refs: Option<Verdict> = None;
    let mut parents = vec![];
    for parent_ref in route.spec.parent_refs.iter().flatten() {
        if parents.len() == MAX_PARENTS {
            break;
        }
        let Some(target) = gateway_target(parent_ref, namespace) else {
            continue;
        };
        let Some(gateway) = gateways.get(&target) else {
            continue;
        };
        let section = non_empty(parent_ref.section_name.as_deref());
        if !seen.insert((target, section, parent_ref.port)) {
            continue;
        }
        let accepted = match attach(gateway, parent_ref, namespace, hostnames, index) {
            Ok(listeners) => {
                let names: Vec<&str> = listeners
                    .iter()
                    .map(|&i| gateway.listeners[i].spec.name.as_str())
                    .collect();
                attachments.extend(listeners.into_iter().map(|i| (target, i)));
                Verdict::yes(
                    reason::ACCEPTED,
                    format!("accepted by listeners: {}", names.join(", ")),
                )
            }
            Err(verdict) => verdict,
        };
        let resolved = resolved_refs.get_or_insert_with(|| resolve_refs(route, namespace, index));
        parents.push(HttpRouteStatusParents {
            conditions: vec![
                accepted.condition(reason::ACCEPTED, generation),
                resolved.condition(reason::RESOLVED_REFS, generation),
            ],
            controller_name: controller_name.to_string(),
            parent_ref: HttpRouteStatusParentsParentRef {
                group: parent_ref.group.clone(),
                kind: parent_ref.kind.clone(),
                name: parent_ref.name.clone(),
                namespace: parent_ref.namespace.clone(),
                port: parent_ref.port,
                section_name: parent_ref.section_name.clone(),
            },
        });
    }
    parents
}

/// The Gateway a parentRef names, as (namespace, name); `None` for other kinds of parent.
fn gateway_target<'w>(
    parent_ref: &'w HttpRouteParentRefs,
    route_namespace: &'w str,
) -> Option<(&'w str, &'w str)> {
    let group = parent_ref.group.as_deref().unwrap_or(GATEWAY_GROUP);
    let kind = parent_ref.kind.as_deref().unwrap_or("Gateway");
    (group == GATEWAY_GROUP && kind == "Gateway").then(|| {
        (
            non_empty(parent_ref.namespace.as_deref()).unwrap_or(route_namespace),
            parent_ref.name.as_str(),
        )
    })
}

/// The listeners (indices) of `gateway` that accept the route through `parent_ref`, or the
/// `Accepted` False verdict.
fn attach(
    gateway: &GatewayView<'_>,
    parent_ref: &HttpRouteParentRefs,
    route_namespace: &str,
    hostnames: &[String],
    index: &Index<'_>,
) -> Result<Vec<usize>, Verdict> {
    if !gateway.accepted.ok {
        return Err(Verdict::no(
            reason::NO_MATCHING_PARENT,
            format!(
                "Gateway {}/{} is not accepted",
                gateway.namespace, gateway.name
            ),
        ));
    }
    let section = non_empty(parent_ref.section_name.as_deref());
    let port = parent_ref.port;
    let selected: Vec<usize> = (0..gateway.listeners.len())
        .filter(|&i| {
            let spec = gateway.listeners[i].spec;
            section.is_none_or(|s| spec.name == s) && port.is_none_or(|p| spec.port == p)
        })
        .collect();
    if selected.is_empty() {
        let message = match (section, port) {
            (Some(s), Some(p)) => format!("no listener named {s} on port {p}"),
            (Some(s), None) => format!("no listener named {s}"),
            (None, Some(p)) => format!("no listener on port {p}"),
            (None, None) => "the Gateway has no listeners".to_string(),
        };
        return Err(Verdict::no(reason::NO_MATCHING_PARENT, message));
    }
    let allowing: Vec<usize> = selected
        .iter()
        .copied()
        .filter(|&i| {
            let l = &gateway.listeners[i];
            l.admits_http_routes() && l.allows_namespace(gateway.namespace, route_namespace, index)
        })
        .collect();
    if allowing.is_empty() {
        let message = if selected
            .iter()
            .any(|&i| gateway.listeners[i].admits_http_routes())
        {
            format!("no matching listener allows routes from namespace {route_namespace}")
        } else {
            "no matching listener allows HTTPRoutes".to_string()
        };
        return Err(Verdict::no(reason::NOT_ALLOWED_BY_LISTENERS, message));
    }
    let matching: Vec<usize> = allowing
        .into_iter()
        .filter(|&i| {
            hostname::listener_admits(gateway.listeners[i].spec.hostname.as_deref(), hostnames)
        })
        .collect();
    if matching.is_empty() {
        return Err(Verdict::no(
            reason::NO_MATCHING_LISTENER_HOSTNAME,
            "no allowing listener's hostname matches the route's hostnames",
        ));
    }
    Ok(matching)
}

/// The route's `ResolvedRefs`, over every backendRef and RequestMirror backendRef.
fn resolve_refs(route: &HttpRoute, namespace: &str, index: &Index<'_>) -> Verdict {
    let mut problems: Vec<Problem> = vec![];
    let mut check = |r: BackendRef<'_>| {
        if let Err(p) = refs::check_backend(index, namespace, &r) {
            problems.push(p);
        }
    };
    for rule in route.spec.rules.iter().flatten() {
        for b in rule.backend_refs.iter().flatten() {
            check(BackendRef {
                group: b.group.as_deref(),
                kind: b.kind.as_deref(),
                name: &b.name,
                namespace: b.namespace.as_deref(),
                port: b.port,
            });
            for m in b
                .filters
                .iter()
                .flatten()
                .filter_map(|f| f.request_mirror.as_ref())
            {
                let m = &m.backend_ref;
                check(BackendRef {
                    group: m.group.as_deref(),
                    kind: m.kind.as_deref(),
                    name: &m.name,
                    namespace: m.namespace.as_deref(),
                    port: m.port,
                });
            }
        }
        for m in rule
            .filters
            .iter()
            .flatten()
            .filter_map(|f| f.request_mirror.as_ref())
        {
            let m = &m.backend_ref;
            check(BackendRef {
                group: m.group.as_deref(),
                kind: m.kind.as_deref(),
                name: &m.name,
                namespace: m.namespace.as_deref(),
                port: m.port,
            });
        }
    }
    match refs::most_important(&problems, &RESOLVED_REFS_PRECEDENCE) {
        Some(p) => Verdict::no(p.reason, p.message),
        None => Verdict::yes(reason::RESOLVED_REFS, "all references resolved"),
    }
}

#[cfg(test)]
mod tests;
