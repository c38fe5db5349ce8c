//! Gateways of our classes: `Accepted`, `Programmed` and `status.listeners`, whose
//! `attachedRoutes` the route pass fills in.
//!
//! `Accepted` is decided in this order, first match wins:
//! 1. the GatewayClass is not accepted → False/Invalid (the spec has no Gateway reason for an
//!    unaccepted class; `Invalid` is its reason for a Gateway that cannot be configured, while
//!    `Pending` is for Unknown and `InvalidParameters` for the Gateway's own parametersRef);
//! 2. `spec.infrastructure.parametersRef` is set → False/InvalidParameters (no parameters are
//!    taken);
//! 3. `spec.addresses` is set and no Service gives Gateways their addresses → False/
//!    UnsupportedAddress (no addresses are assigned); with one, an entry of a type other than
//!    IPAddress or Hostname → False/UnsupportedAddress (`address.rs`);
//! 4. no listener is accepted → False/ListenersNotValid (nothing could be configured);
//! 5. some listener is not valid → True/ListenersNotValid (the valid ones are served);
//! 6. True/Accepted.

use std::collections::{BTreeMap, HashMap};

use gateway_api::gateways::{GatewayAddresses, GatewayAllowedListeners, GatewayStatusListeners};

use super::address::{self, AddressService, Offered};
use super::gatewayclass::Classes;
use super::index::Index;
use super::listener::{self, Listener};
use super::reason;
use super::verdict::Verdict;
use super::World;
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};

/// A Gateway of one of our classes, judged; also a ListenerSet of one of our Gateways, which
/// is a parent of routes the same way (`listenerset.rs`).
pub(crate) struct GatewayView<'w> {
    /// The kind of parent, as messages name it: `Gateway` or `ListenerSet`.
    pub kind: &'static str,
    /// `metadata.namespace`.
    pub namespace: &'w str,
    /// `metadata.name`.
    pub name: &'w str,
    /// `metadata.generation` (0 when absent).
    pub generation: i64,
    /// The `Accepted` condition.
    pub accepted: Verdict,
    /// The listeners, in spec order.
    pub listeners: Vec<Listener<'w>>,
    /// Routes attached to each listener, same order; counted by the route pass.
    pub attached_routes: Vec<i32>,
    /// `spec.allowedListeners` (always `None` on a ListenerSet).
    pub allowed_listeners: Option<&'w GatewayAllowedListeners>,
    /// Accepted ListenerSets attached to the Gateway; counted by the ListenerSet pass.
    pub attached_listener_sets: i32,
    /// The Gateway this parent is or belongs to, as (namespace, name): a ListenerSet's is its
    /// parent Gateway (the ancestor a BackendTLSPolicy names, `policy.rs`).
    pub gateway: (&'w str, &'w str),
    /// `spec.addresses` (always empty on a ListenerSet).
    pub requested_addresses: &'w [GatewayAddresses],
}

impl GatewayView<'_> {
    /// `status.listeners`, in spec order, with the attachments counted.
    pub(crate) fn listener_statuses(&self) -> Vec<GatewayStatusListeners> {
        self.listeners
            .iter()
            .zip(&self.attached_routes)
            .map(|(l, attached)| l.status(self.kind, self.accepted.ok, *attached, self.generation))
            .collect()
    }
}

/// Our Gateways by (namespace, name).
pub(crate) type Gateways<'w> = HashMap<(&'w str, &'w str), GatewayView<'w>>;

/// Judges every Gateway whose class is one of ours.
pub(crate) fn analyse<'w>(
    world: &'w World,
    classes: &Classes<'_>,
    index: &Index<'_>,
    addresses_from: Option<&AddressService>,
) -> Gateways<'w> {
    let mut gateways = HashMap::new();
    for gateway in &world.gateways {
        let (Some(namespace), Some(name)) = (
            gateway.metadata.namespace.as_deref(),
            gateway.metadata.name.as_deref(),
        ) else {
            continue;
        };
        let class_name = gateway.spec.gateway_class_name.as_str();
        let Some(class) = classes.get(class_name) else {
            continue;
        };
        let listeners = listener::analyse(namespace, &gateway.spec.listeners, index);
        let requested = gateway.spec.addresses.as_deref().unwrap_or_default();
        let infrastructure_parameters = gateway
            .spec
            .infrastructure
            .as_ref()
            .and_then(|i| i.parameters_ref.as_ref());
        let accepted = if !class.ok {
            Verdict::no(
                reason::INVALID,
                format!("GatewayClass {class_name} is not accepted"),
            )
        } else if let Some(p) = infrastructure_parameters {
            Verdict::no(
                reason::INVALID_PARAMETERS,
                format!(
                    "infrastructure.parametersRef {} {} is not supported: \
                     this controller takes no parameters",
                    super::refs::group_kind(&p.group, &p.kind),
                    p.name
                ),
            )
        } else if let Some(unsupported) = match addresses_from {
            None if !requested.is_empty() => Some(Verdict::no(
                reason::UNSUPPORTED_ADDRESS,
                "spec.addresses is not supported: this controller assigns no addresses \
                 (no --gateway-addresses-service is set)",
            )),
            None => None,
            Some(_) => address::unsupported(requested),
        } {
            unsupported
        } else {
            listeners_verdict("Gateway", &listeners)
        };
        let view = GatewayView {
            kind: "Gateway",
            namespace,
            name,
            generation: gateway.metadata.generation.unwrap_or(0),
            accepted,
            attached_routes: vec![0; listeners.len()],
            listeners,
            allowed_listeners: gateway.spec.allowed_listeners.as_ref(),
            attached_listener_sets: 0,
            gateway: (namespace, name),
            requested_addresses: requested,
        };
        gateways.entry((namespace, name)).or_insert(view);
    }
    gateways
}

/// `Accepted` as the listeners decide it (steps 4 to 6) for a `what` (Gateway or ListenerSet:
/// the reasons are the same, upstream v1.5.1 `apis/v1/listenerset_types.go`).
pub(crate) fn listeners_verdict(what: &str, listeners: &[Listener<'_>]) -> Verdict {
    if listeners.is_empty() {
        return Verdict::no(
            reason::LISTENERS_NOT_VALID,
            format!("the {what} has no listeners"),
        );
    }
    let invalid: Vec<String> = listeners
        .iter()
        .filter(|l| !l.is_valid())
        .map(|l| format!("{} ({})", l.spec.name, l.invalid_reason()))
        .collect();
    if !listeners.iter().any(|l| l.accepted.ok) {
        Verdict::no(
            reason::LISTENERS_NOT_VALID,
            format!("no listener is accepted: {}", invalid.join(", ")),
        )
    } else if !invalid.is_empty() {
        Verdict::yes(
            reason::LISTENERS_NOT_VALID,
            format!(
                "listeners not valid: {}; the others are valid",
                invalid.join(", ")
            ),
        )
    } else {
        Verdict::yes(reason::ACCEPTED, format!("{what} is accepted"))
    }
}

/// Adds each Gateway's desired status to `out`. With `addressing` (the Service that gives
/// Gateways their addresses, and what it offers), each Gateway gets `status.addresses` and an
/// `AddressesAssigned` condition, and is `Programmed` only with its addresses.
pub(crate) fn emit(
    gateways: Gateways<'_>,
    addressing: Option<(&AddressService, &Offered)>,
    out: &mut BTreeMap<ObjectKey, Desired>,
) {
    for view in gateways.into_values() {
        let generation = view.generation;
        let assigned = addressing.map(|(source, offered)| {
            if view.accepted.ok {
                address::assign(source, offered, view.requested_addresses)
            } else {
                // An address of a Gateway that is not accepted would be one nothing serves.
                address::Assigned {
                    addresses: vec![],
                    not_programmed: None,
                    assigned: Verdict::no(
                        address::REASON_NOT_ASSIGNED,
                        "the Gateway is not accepted",
                    ),
                }
            }
        });
        let programmed = if !view.accepted.ok {
            Verdict::no(reason::INVALID, "the Gateway is not accepted")
        } else if !view.listeners.iter().any(Listener::is_valid) {
            Verdict::no(reason::INVALID, "no listener is valid")
        } else if let Some(v) = assigned.as_ref().and_then(|a| a.not_programmed.clone()) {
            v
        } else {
            // No data plane of ours: an accepted configuration is in effect as soon as it is
            // computed (and, with a Service, reached at its addresses).
            Verdict::yes(reason::PROGRAMMED, "the Gateway is valid and in effect")
        };
        let listeners = view.listener_statuses();
        let mut conditions = vec![
            view.accepted.condition(reason::ACCEPTED, generation),
            programmed.condition(reason::PROGRAMMED, generation),
        ];
        if let Some(a) = &assigned {
            conditions.push(
                a.assigned
                    .condition(address::ADDRESSES_ASSIGNED, generation),
            );
        }
        out.insert(
            ObjectKey::namespaced(Kind::Gateway, view.namespace, view.name),
            Desired::Gateway {
                generation,
                conditions,
                listeners,
                attached_listener_sets: view.allowed_listeners.map(|_| view.attached_listener_sets),
                addresses: assigned.map(|a| a.addresses),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::compute;
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn a_valid_gateway_is_accepted_and_programmed_with_a_status_per_listener_in_spec_order() {
        let mut w = world();
        w.gateways = vec![gateway(
            "infra",
            "gw",
            json!([http("web", 80), http("alt", 8080)]),
        )];
        let out = compute(&w, CONTROLLER);
        let Some(Desired::Gateway {
            generation,
            conditions,
            listeners,
            ..
        }) = out.get(&ObjectKey::namespaced(Kind::Gateway, "infra", "gw"))
        else {
            panic!("no Gateway status: {out:?}");
        };
        assert_eq!(*generation, GATEWAY_GENERATION);
        assert_eq!(
            summary(conditions),
            vec![
                tsr("Accepted", "True", "Accepted"),
                tsr("Programmed", "True", "Programmed"),
            ]
        );
        let names: Vec<&str> = listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["web", "alt"]);
        for l in listeners {
            assert_eq!(
                summary(&l.conditions),
                vec![
                    tsr("Accepted", "True", "Accepted"),
                    tsr("Programmed", "True", "Programmed"),
                    tsr("ResolvedRefs", "True", "ResolvedRefs"),
                    tsr("Conflicted", "False", "NoConflicts"),
                ]
            );
            assert_eq!(l.attached_routes, 0);
            let kinds: Vec<(Option<&str>, &str)> = l
                .supported_kinds
                .iter()
                .flatten()
                .map(|k| (k.group.as_deref(), k.kind.as_str()))
                .collect();
            let group = Some("gateway.networking.k8s.io");
            assert_eq!(kinds, [(group, "HTTPRoute"), (group, "GRPCRoute")]);
            assert!(l
                .conditions
                .iter()
                .all(|c| c.observed_generation == Some(GATEWAY_GENERATION)));
        }
    }

    #[test]
    fn spec_addresses_make_the_gateway_unsupported_address_and_its_routes_unattached() {
        let mut w = world();
        w.gateways = vec![gateway_with(
            "infra",
            "gw",
            json!({"gatewayClassName": CLASS, "listeners": [http("web", 80)],
                   "addresses": [{"type": "IPAddress", "value": "10.0.0.1"}]}),
        )];
        w.http_routes = vec![route(
            "infra",
            "r",
            route_spec(json!([{"name": "gw"}]), json!([])),
        )];
        let out = compute(&w, CONTROLLER);
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Accepted"),
            tsr("Accepted", "False", "UnsupportedAddress")
        );
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Programmed"),
            tsr("Programmed", "False", "Invalid")
        );
        assert_eq!(
            listener_condition(&out, "infra", "gw", "web", "Programmed"),
            tsr("Programmed", "False", "Invalid")
        );
        assert_eq!(
            route_condition(&out, "infra", "r", "Accepted"),
            sr("False", "NoMatchingParent")
        );
        assert_eq!(listener(&out, "infra", "gw", "web").attached_routes, 0);
    }

    #[test]
    fn a_gateway_of_our_class_that_is_not_accepted_is_invalid() {
        let mut w = world();
        let mut class = (*w.gateway_classes[0]).clone();
        class.spec.parameters_ref = Some(
            serde_json::from_value(json!({"group": "", "kind": "ConfigMap", "name": "p"}))
                .expect("valid parametersRef"),
        );
        w.gateway_classes = vec![std::sync::Arc::new(class)];
        w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
        let out = compute(&w, CONTROLLER);
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Accepted"),
            tsr("Accepted", "False", "Invalid")
        );
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Programmed"),
            tsr("Programmed", "False", "Invalid")
        );
    }

    #[test]
    fn an_infrastructure_parameters_ref_is_invalid_parameters() {
        let mut w = world();
        w.gateways = vec![gateway_with(
            "infra",
            "gw",
            json!({"gatewayClassName": CLASS, "listeners": [http("web", 80)],
                   "infrastructure": {"parametersRef": {"group": "", "kind": "ConfigMap",
                                                        "name": "p"}}}),
        )];
        let out = compute(&w, CONTROLLER);
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Accepted"),
            tsr("Accepted", "False", "InvalidParameters")
        );
    }

    #[test]
    fn a_gateway_without_any_accepted_listener_is_not_accepted() {
        let mut w = world();
        w.gateways = vec![gateway(
            "infra",
            "gw",
            json!([{"name": "tcp", "port": 9000, "protocol": "TCP"}]),
        )];
        let out = compute(&w, CONTROLLER);
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Accepted"),
            tsr("Accepted", "False", "ListenersNotValid")
        );
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Programmed"),
            tsr("Programmed", "False", "Invalid")
        );
    }

    #[test]
    fn a_gateway_with_some_invalid_listeners_is_accepted_and_names_them() {
        let mut w = world();
        w.gateways = vec![gateway(
            "infra",
            "gw",
            json!([http("web", 80), {"name": "udp", "port": 53, "protocol": "UDP"}]),
        )];
        let out = compute(&w, CONTROLLER);
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Accepted"),
            tsr("Accepted", "True", "ListenersNotValid")
        );
        assert_eq!(
            gateway_condition(&out, "infra", "gw", "Programmed"),
            tsr("Programmed", "True", "Programmed")
        );
        let message = &condition_of(
            &out,
            &ObjectKey::namespaced(Kind::Gateway, "infra", "gw"),
            "Accepted",
        )
        .message;
        assert!(message.contains("udp (UnsupportedProtocol)"), "{message}");
        assert!(!message.contains("web"), "{message}");
    }

    #[test]
    fn attached_routes_count_accepted_routes_per_listener() {
        let mut w = world();
        w.gateways = vec![
            gateway("infra", "gw", json!([http("a", 80), http("b", 8080)])),
            gateway("infra", "idle", json!([http("c", 80)])),
        ];
        w.http_routes = vec![
            // The whole Gateway: both listeners.
            route(
                "infra",
                "whole",
                route_spec(json!([{"name": "gw"}]), json!([])),
            ),
            // One listener by sectionName.
            route(
                "infra",
                "only-b",
                route_spec(json!([{"name": "gw", "sectionName": "b"}]), json!([])),
            ),
            // One listener by port.
            route(
                "infra",
                "port-80",
                route_spec(json!([{"name": "gw", "port": 80}]), json!([])),
            ),
            // Two parentRefs to listener a count once.
            route(
                "infra",
                "twice",
                route_spec(
                    json!([{"name": "gw", "sectionName": "a"},
                           {"name": "gw", "sectionName": "a", "port": 80}]),
                    json!([]),
                ),
            ),
            // Not accepted (namespace not allowed): not counted.
            route(
                "apps",
                "foreign",
                route_spec(json!([{"name": "gw", "namespace": "infra"}]), json!([])),
            ),
            // Broken backends do not undo attachment.
            route(
                "infra",
                "broken",
                route_spec(
                    json!([{"name": "gw", "sectionName": "b"}]),
                    json!([{"name": "missing", "port": 80}]),
                ),
            ),
        ];
        let out = compute(&w, CONTROLLER);
        assert_eq!(listener(&out, "infra", "gw", "a").attached_routes, 3);
        assert_eq!(listener(&out, "infra", "gw", "b").attached_routes, 3);
        assert_eq!(listener(&out, "infra", "idle", "c").attached_routes, 0);
    }

    #[test]
    fn a_route_attached_to_a_whole_gateway_with_two_listeners_counts_on_both() {
        let mut w = world();
        w.gateways = vec![gateway(
            "infra",
            "gw",
            json!([http("a", 80), http("b", 8080)]),
        )];
        w.http_routes = vec![route(
            "infra",
            "r",
            route_spec(json!([{"name": "gw"}]), json!([])),
        )];
        let out = compute(&w, CONTROLLER);
        assert_eq!(listener(&out, "infra", "gw", "a").attached_routes, 1);
        assert_eq!(listener(&out, "infra", "gw", "b").attached_routes, 1);
        assert_eq!(
            route_condition(&out, "infra", "r", "Accepted"),
            sr("True", "Accepted")
        );
        assert_eq!(
            route_message(&out, "infra", "r", "Accepted"),
            "accepted by listeners: a, b"
        );
    }

    #[test]
    fn a_gateway_of_another_controllers_class_gets_nothing() {
        let mut w = world();
        w.gateway_classes.push(class("theirs", "example.com/other"));
        w.gateways = vec![gateway_with(
            "infra",
            "gw",
            json!({"gatewayClassName": "theirs", "listeners": [http("web", 80)]}),
        )];
        let out = compute(&w, CONTROLLER);
        assert!(!out.contains_key(&ObjectKey::namespaced(Kind::Gateway, "infra", "gw")));
        assert!(!out.contains_key(&ObjectKey::cluster(Kind::GatewayClass, "theirs")));
    }
}
