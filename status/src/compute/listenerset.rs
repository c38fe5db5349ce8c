//! ListenerSets of our Gateways: `Accepted`, `Programmed`, `status.listeners`, and the
//! Gateway's `status.attachedListenerSets`.
//!
//! A ListenerSet's listeners are judged by the Gateway listener code (`listener.rs`), in the
//! ListenerSet's namespace (its certificateRefs and `allowedRoutes.namespaces.from: Same` are
//! relative to it). Routes attach to them only through a parentRef of kind ListenerSet; the
//! route engine treats a ListenerSet as a parent like a Gateway ([`GatewayView`]).
//!
//! `Accepted`, first match wins (upstream v1.5.1 `apis/v1/listenerset_types.go`,
//! `ListenerSetConditionReason`; conformance `listenerset-*`):
//! 1. the Gateway's `allowedListeners.namespaces.from` does not admit the ListenerSet's
//!    namespace → False/NotAllowed (`from` defaults to None: upstream `apis/v1/gateway_types.go`,
//!    `AllowedListeners`; conformance `listenerset-default-not-allowed`);
//! 2. the Gateway is not accepted → False/ParentNotAccepted;
//! 3. no listener is accepted → False/ListenersNotValid; some listener is not valid →
//!    True/ListenersNotValid (as for a Gateway, `gateway::listeners_verdict`);
//! 4. True/Accepted.
//!
//! `Programmed` is True/Programmed when accepted, else False with `Accepted`'s reason (the
//! conformance tests expect NotAllowed and ListenersNotValid on both).
//!
//! Conflicts: the Gateway's own listeners take precedence, then ListenerSets by creation time,
//! then namespace/name (`ListenerSetSpec.Listeners`); a ListenerSet listener that shares a port
//! with a listener in effect before it is Conflicted (ProtocolConflict or HostnameConflict, as
//! conformance `listenerset-protocol-conflict` and `listenerset-hostname-conflict` expect).
//! Only accepted ListenerSets count in `attachedListenerSets` and put their listeners in effect.
//!
//! A ListenerSet whose parentRef names no Gateway of ours (another class, another kind, a
//! Gateway that does not exist) gets nothing: it may be another controller's.

use std::collections::{BTreeMap, HashMap};

use gateway_api::gateways::{GatewayAllowedListenersNamespacesFrom, GatewayListeners};
use k8s_openapi::jiff::Timestamp;

use super::gateway::{listeners_verdict, GatewayView, Gateways};
use super::index::Index;
use super::listener;
use super::reason;
use super::refs::{non_empty, GATEWAY_GROUP};
use super::selector::{self, Requirement};
use super::verdict::Verdict;
use super::World;
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};

/// Our ListenerSets by (namespace, name), judged as route parents.
pub(crate) type ListenerSets<'w> = Gateways<'w>;

/// A ListenerSet with its listeners in the Gateway listener's shape, which `listener.rs` reads.
pub(crate) struct Prepared<'w> {
    namespace: &'w str,
    name: &'w str,
    generation: i64,
    created: Option<Timestamp>,
    /// The parent Gateway as (namespace, name); `None` when the parentRef is not a Gateway.
    parent: Option<(&'w str, &'w str)>,
    listeners: Vec<GatewayListeners>,
}

/// Reads every ListenerSet once. kopium gives ListenerSet its own copy of the upstream
/// `ListenerEntry`, which has the Gateway `Listener`'s fields; a listener that does not convert
/// (impossible for what the CRD admits) is left out.
pub(crate) fn prepare(world: &World) -> Vec<Prepared<'_>> {
    world
        .listener_sets
        .iter()
        .filter_map(|set| {
            let namespace = set.metadata.namespace.as_deref()?;
            let name = set.metadata.name.as_deref()?;
            let p = &set.spec.parent_ref;
            let is_gateway = p.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
                && p.kind.as_deref().unwrap_or("Gateway") == "Gateway";
            let parent = is_gateway.then(|| {
                (
                    non_empty(p.namespace.as_deref()).unwrap_or(namespace),
                    p.name.as_str(),
                )
            });
            let listeners = set
                .spec
                .listeners
                .iter()
                .filter_map(|l| {
                    serde_json::to_value(l)
                        .ok()
                        .and_then(|v| serde_json::from_value(v).ok())
                })
                .collect();
            Some(Prepared {
                namespace,
                name,
                generation: set.metadata.generation.unwrap_or(0),
                created: set.metadata.creation_timestamp.as_ref().map(|t| t.0),
                parent,
                listeners,
            })
        })
        .collect()
}

/// Judges every ListenerSet of our Gateways, in precedence order, and counts the accepted ones
/// into their Gateways.
pub(crate) fn analyse<'a>(
    prepared: &'a [Prepared<'a>],
    gateways: &mut Gateways<'a>,
    index: &Index<'_>,
) -> ListenerSets<'a> {
    let mut order: Vec<&'a Prepared<'a>> = prepared
        .iter()
        .filter(|p| p.parent.is_some_and(|g| gateways.contains_key(&g)))
        .collect();
    order.sort_by_key(|p| (p.created, p.namespace, p.name));
    // Per Gateway, the listeners in effect so far: its own accepted ones, then those of the
    // ListenerSets accepted before.
    let mut in_effect: HashMap<(&str, &str), Vec<&'a GatewayListeners>> = HashMap::new();
    let mut sets = HashMap::new();
    for p in order {
        let Some(parent) = p.parent else { continue };
        let Some(gateway) = gateways.get_mut(&parent) else {
            continue;
        };
        let taken = in_effect.entry(parent).or_insert_with(|| {
            gateway
                .listeners
                .iter()
                .filter(|l| l.accepted.ok)
                .map(|l| l.spec)
                .collect()
        });
        let listeners = listener::analyse_after(p.namespace, &p.listeners, taken, index);
        let accepted = if !allows(gateway, p.namespace, index) {
            Verdict::no(
                reason::NOT_ALLOWED,
                format!(
                    "Gateway {}/{} does not allow ListenerSets from namespace {} \
                     (spec.allowedListeners)",
                    gateway.namespace, gateway.name, p.namespace
                ),
            )
        } else if !gateway.accepted.ok {
            Verdict::no(
                reason::PARENT_NOT_ACCEPTED,
                format!(
                    "Gateway {}/{} is not accepted",
                    gateway.namespace, gateway.name
                ),
            )
        } else if !listeners.is_empty() && !listeners.iter().any(listener::Listener::is_valid) {
            // A ListenerSet none of whose listeners can be configured adds nothing to its
            // Gateway: not accepted (upstream v1.7.0 conformance, ListenerSetReferenceGrant: its
            // one listener's certificate not permitted makes it False/ListenersNotValid).
            let invalid: Vec<String> = listeners
                .iter()
                .map(|l| format!("{} ({})", l.spec.name, l.invalid_reason()))
                .collect();
            Verdict::no(
                reason::LISTENERS_NOT_VALID,
                format!("no listener is valid: {}", invalid.join(", ")),
            )
        } else {
            listeners_verdict("ListenerSet", &listeners)
        };
        if accepted.ok {
            gateway.attached_listener_sets = gateway.attached_listener_sets.saturating_add(1);
            taken.extend(listeners.iter().filter(|l| l.accepted.ok).map(|l| l.spec));
        }
        let view = GatewayView {
            kind: "ListenerSet",
            namespace: p.namespace,
            name: p.name,
            generation: p.generation,
            accepted,
            attached_routes: vec![0; listeners.len()],
            listeners,
            allowed_listeners: None,
            attached_listener_sets: 0,
            gateway: parent,
            requested_addresses: &[],
        };
        sets.entry((p.namespace, p.name)).or_insert(view);
    }
    sets
}

/// Whether the Gateway's `allowedListeners.namespaces` admits ListenerSets from `namespace`
/// (upstream v1.5.1 `apis/v1/gateway_types.go`, `ListenerNamespaces.From`: None by default,
/// Same, All, Selector). A namespace not (yet) seen matches no selector.
fn allows(gateway: &GatewayView<'_>, namespace: &str, index: &Index<'_>) -> bool {
    let namespaces = gateway
        .allowed_listeners
        .and_then(|a| a.namespaces.as_ref());
    match namespaces.and_then(|n| n.from.as_ref()) {
        None | Some(GatewayAllowedListenersNamespacesFrom::None) => false,
        Some(GatewayAllowedListenersNamespacesFrom::Same) => namespace == gateway.namespace,
        Some(GatewayAllowedListenersNamespacesFrom::All) => true,
        Some(GatewayAllowedListenersNamespacesFrom::Selector) => {
            match (
                namespaces.and_then(|n| n.selector.as_ref()),
                index.namespace_labels(namespace),
            ) {
                (Some(s), Some(labels)) => {
                    let requirements = s.match_expressions.iter().flatten().map(|e| Requirement {
                        key: &e.key,
                        operator: &e.operator,
                        values: e.values.as_deref().unwrap_or_default(),
                    });
                    selector::matches(labels, s.match_labels.as_ref(), requirements)
                }
                _ => false,
            }
        }
    }
}

/// Adds each ListenerSet's desired status to `out`.
pub(crate) fn emit(sets: ListenerSets<'_>, out: &mut BTreeMap<ObjectKey, Desired>) {
    for view in sets.into_values() {
        let generation = view.generation;
        let programmed = if view.accepted.ok {
            Verdict::yes(reason::PROGRAMMED, "the ListenerSet is valid and in effect")
        } else {
            Verdict::no(view.accepted.reason, "the ListenerSet is not accepted")
        };
        let listeners = view.listener_statuses();
        out.insert(
            ObjectKey::namespaced(Kind::ListenerSet, view.namespace, view.name),
            Desired::ListenerSet {
                generation,
                conditions: vec![
                    view.accepted.condition(reason::ACCEPTED, generation),
                    programmed.condition(reason::PROGRAMMED, generation),
                ],
                listeners,
            },
        );
    }
}

#[cfg(test)]
#[path = "listenerset_tests.rs"]
mod tests;
