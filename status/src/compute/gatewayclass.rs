//! GatewayClasses whose `spec.controllerName` is ours: `Accepted` and `SupportedVersion`.

use std::collections::{BTreeMap, HashMap};

use gateway_api::gatewayclasses::GatewayClassStatusSupportedFeatures;

use super::reason;
use super::verdict::Verdict;
use super::{Served, World};
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};

/// The Gateway API release lines this controller implements, as the message names them.
const SUPPORTED_VERSIONS: &str = "v1.5.x, v1.6.x, v1.7.x";
/// The same, as `1.<minor>.` prefixes of a bundle version.
const SUPPORTED_LINES: [&str; 3] = ["1.5.", "1.6.", "1.7."];

/// `status.supportedFeatures`: the features whose statuses this controller computes as the
/// conformance tests expect (the upstream suite's no-traffic tests pass on them,
/// docs/conformance.md), named as `pkg/features/` names them (`gateway.go`: `SupportGateway`,
/// `SupportListenerSet`; `grpcroute.go`: `SupportGRPCRoute`; `httproute.go`: `SupportHTTPRoute`;
/// `referencegrant.go`: `SupportReferenceGrant`; `backendtlspolicy.go`:
/// `SupportBackendTLSPolicy`; `tlsroute.go`: `SupportTLSRoute`, and `SupportTLSRouteModeTerminate`
/// and `SupportTLSRouteModeMixed`, since a TLS listener here takes either mode and both on one
/// port; v1.6.1 adds `tcproute.go`: `SupportTCPRoute` and `udproute.go`: `SupportUDPRoute`,
/// listed only where the cluster serves those kinds, see [`supported_features`]) and sorted
/// ascending by name (byte order: `GRPCRoute` before `Gateway`), as `apis/v1/gatewayclass_types.go`
/// (`GatewayClassStatus.SupportedFeatures`: "It MUST be sorted in ascending alphabetical order
/// by the Name key") requires. Other extended features (`GatewayPort8080`, `HTTPRoute*` matches
/// and filters, and v1.7.0's standard `HTTPRouteRetryCodes` and `HTTPRouteRetryConnectionError`)
/// are left out: they are data-plane behaviour this status writer cannot vouch for (a route that
/// sets `retry.backoff` is refused as upstream requires of an implementation without it,
/// `route.rs`, rule 6).
pub(crate) const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "GRPCRoute",
    "Gateway",
    "HTTPRoute",
    "ListenerSet",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
    "UDPRoute",
];

/// Our GatewayClasses by name, each with its `Accepted` verdict (which its Gateways inherit).
pub(crate) type Classes<'w> = HashMap<&'w str, Verdict>;

/// Adds the status of each of our GatewayClasses to `out` and returns them by name.
pub(crate) fn compute<'w>(
    world: &'w World,
    controller_name: &str,
    addresses: bool,
    out: &mut BTreeMap<ObjectKey, Desired>,
) -> Classes<'w> {
    let supported_version = supported_version(world.bundle_version.as_deref());
    let mut classes = HashMap::new();
    for class in &world.gateway_classes {
        let Some(name) = class.metadata.name.as_deref() else {
            continue;
        };
        if class.spec.controller_name != controller_name {
            continue;
        }
        let generation = class.metadata.generation.unwrap_or(0);
        // This controller has nothing to configure, so any parametersRef is one it cannot
        // honour; accepting the class anyway would hide that the parameters are ignored.
        let accepted = match &class.spec.parameters_ref {
            Some(p) => Verdict::no(
                reason::INVALID_PARAMETERS,
                format!(
                    "parametersRef {} {} is not supported: this controller takes no parameters",
                    p.kind, p.name
                ),
            ),
            None => Verdict::yes(reason::ACCEPTED, "GatewayClass is accepted"),
        };
        let conditions = vec![
            accepted.condition(reason::ACCEPTED, generation),
            supported_version.condition(reason::SUPPORTED_VERSION, generation),
        ];
        out.insert(
            ObjectKey::cluster(Kind::GatewayClass, name),
            Desired::GatewayClass {
                generation,
                conditions,
                supported_features: supported_features(world.served, addresses),
            },
        );
        classes.entry(name).or_insert(accepted);
    }
    classes
}

/// The features a Service that gives Gateways their addresses adds (`address.rs`):
/// `spec.addresses` with values the Service has (`GatewayStaticAddresses`) and without a value
/// (`GatewayAddressEmpty`), as v1.7.0 `pkg/features/gateway.go` names them.
pub(crate) const ADDRESS_FEATURES: &[&str] = &["GatewayAddressEmpty", "GatewayStaticAddresses"];

/// [`SUPPORTED_FEATURES`] as the status field holds them, without the route kinds the cluster
/// does not serve (a conformance run would test them and find no CRD), with
/// [`ADDRESS_FEATURES`] when Gateways take their addresses from a Service; sorted by name.
fn supported_features(served: Served, addresses: bool) -> Vec<GatewayClassStatusSupportedFeatures> {
    let extra = if addresses { ADDRESS_FEATURES } else { &[] };
    let mut names: Vec<&str> = SUPPORTED_FEATURES
        .iter()
        .chain(extra)
        .copied()
        .filter(|name| match *name {
            "TCPRoute" => served.tcp_route,
            "UDPRoute" => served.udp_route,
            _ => true,
        })
        .collect();
    names.sort_unstable();
    names
        .into_iter()
        .map(|name| GatewayClassStatusSupportedFeatures {
            name: name.to_string(),
        })
        .collect()
}

/// `SupportedVersion` for the installed CRDs' bundle version. An unreadable version (`None`)
/// is reported True: the controller cannot tell, and refusing every class because of a missing
/// read permission would be worse than saying so in the message.
fn supported_version(bundle_version: Option<&str>) -> Verdict {
    match bundle_version {
        None => Verdict::yes(
            reason::SUPPORTED_VERSION,
            format!(
                "the CRDs' bundle version could not be read; \
                 assuming a supported one ({SUPPORTED_VERSIONS})"
            ),
        ),
        Some(v) if is_supported(v) => Verdict::yes(
            reason::SUPPORTED_VERSION,
            format!("CRD bundle version {v} is supported"),
        ),
        Some(v) => Verdict::no(
            reason::UNSUPPORTED_VERSION,
            format!("CRD bundle version {v:?} is not supported; supported: {SUPPORTED_VERSIONS}"),
        ),
    }
}

/// Whether `v` is `v1.5.<patch>`, `v1.6.<patch>` or `v1.7.<patch>` (the `v` optional), with an
/// optional pre-release or build suffix.
fn is_supported(v: &str) -> bool {
    let v = v.strip_prefix('v').unwrap_or(v);
    let Some(patch) = SUPPORTED_LINES.iter().find_map(|line| v.strip_prefix(line)) else {
        return false;
    };
    let digits = patch.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && matches!(patch.as_bytes().get(digits), None | Some(b'-' | b'+'))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::super::compute;
    use super::super::fixtures::{class, condition_of, summary, tsr, world, CONTROLLER};
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::cluster(Kind::GatewayClass, name)
    }

    fn class_conditions(world: &World, name: &str) -> (i64, Vec<(String, String, String)>) {
        match compute(world, CONTROLLER).get(&key(name)) {
            Some(Desired::GatewayClass {
                conditions,
                generation,
                ..
            }) => {
                assert!(conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(*generation)));
                (*generation, summary(conditions))
            }
            other => panic!("no GatewayClass status: {other:?}"),
        }
    }

    #[test]
    fn our_class_is_accepted_with_a_supported_version() {
        let w = world();
        assert_eq!(
            class_conditions(&w, "ours"),
            (
                3,
                vec![
                    tsr("Accepted", "True", "Accepted"),
                    tsr("SupportedVersion", "True", "SupportedVersion"),
                ]
            )
        );
    }

    #[test]
    fn a_parameters_ref_makes_the_class_invalid_parameters() {
        let mut w = world();
        let mut c = (*class("ours", CONTROLLER)).clone();
        c.spec.parameters_ref = Some(
            serde_json::from_value(json!({"group": "example.com", "kind": "Config", "name": "x"}))
                .expect("valid parametersRef"),
        );
        w.gateway_classes = vec![Arc::new(c)];
        assert_eq!(
            class_conditions(&w, "ours").1,
            vec![
                tsr("Accepted", "False", "InvalidParameters"),
                tsr("SupportedVersion", "True", "SupportedVersion"),
            ]
        );
    }

    #[test]
    fn another_bundle_version_is_unsupported_and_named_in_the_message() {
        let mut w = world();
        w.bundle_version = Some("v1.4.0".into());
        assert_eq!(
            class_conditions(&w, "ours").1,
            vec![
                tsr("Accepted", "True", "Accepted"),
                tsr("SupportedVersion", "False", "UnsupportedVersion"),
            ]
        );
        let out = compute(&w, CONTROLLER);
        let c = condition_of(&out, &key("ours"), "SupportedVersion");
        assert!(
            c.message.contains("v1.4.0") && c.message.contains("v1.5.x, v1.6.x, v1.7.x"),
            "{}",
            c.message
        );
    }

    #[test]
    fn an_unreadable_bundle_version_is_assumed_supported_and_says_so() {
        let mut w = world();
        w.bundle_version = None;
        let out = compute(&w, CONTROLLER);
        let c = condition_of(&out, &key("ours"), "SupportedVersion");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "SupportedVersion")
        );
        assert!(c.message.contains("could not be read"), "{}", c.message);
    }

    #[test]
    fn version_parsing_accepts_only_v1_5_v1_6_and_v1_7_patches() {
        for v in [
            "v1.5.0",
            "v1.5.1",
            "1.5.1",
            "v1.5.12",
            "v1.5.0-rc.1",
            "v1.5.1+build",
            "v1.6.0",
            "v1.6.1",
            "v1.6.3",
            "v1.7.0",
            "v1.7.0-rc.3",
            "v1.7.12",
        ] {
            assert!(is_supported(v), "{v}");
        }
        for v in [
            "v1.5", "v1.5.", "v1.50.0", "v1.4.1", "v1.8.0", "v1.5.x", "", "v1.5.1a", "v1.60.0",
            "v1.70.0", "v2.7.0",
        ] {
            assert!(!is_supported(v), "{v}");
        }
    }

    #[test]
    fn our_class_lists_its_supported_features_sorted_by_name_and_within_the_crd_limit() {
        let out = compute(&world(), CONTROLLER);
        let Some(Desired::GatewayClass {
            supported_features, ..
        }) = out.get(&key("ours"))
        else {
            panic!("no GatewayClass status");
        };
        let names: Vec<&str> = supported_features.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "BackendTLSPolicy",
                "GRPCRoute",
                "Gateway",
                "HTTPRoute",
                "ListenerSet",
                "ReferenceGrant",
                "TLSRoute",
                "TLSRouteModeMixed",
                "TLSRouteModeTerminate"
            ]
        );
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            names, sorted,
            "ascending by name, no duplicates (a list-map)"
        );
        assert!(names.len() <= 64, "the CRD's maxItems");
    }

    #[test]
    fn tcp_and_udp_routes_are_supported_features_only_where_their_kinds_are_served() {
        let names = |w: &World| match compute(w, CONTROLLER).get(&key("ours")) {
            Some(Desired::GatewayClass {
                supported_features, ..
            }) => supported_features
                .iter()
                .map(|f| f.name.clone())
                .collect::<Vec<_>>(),
            other => panic!("no GatewayClass status: {other:?}"),
        };
        let mut w = world();
        w.served = Served {
            tcp_route: true,
            udp_route: true,
        };
        w.bundle_version = Some("v1.7.0".into());
        assert_eq!(
            names(&w),
            [
                "BackendTLSPolicy",
                "GRPCRoute",
                "Gateway",
                "HTTPRoute",
                "ListenerSet",
                "ReferenceGrant",
                "TCPRoute",
                "TLSRoute",
                "TLSRouteModeMixed",
                "TLSRouteModeTerminate",
                "UDPRoute"
            ]
        );
        assert_eq!(
            class_conditions(&w, "ours").1[1],
            tsr("SupportedVersion", "True", "SupportedVersion")
        );
        w.served.udp_route = false;
        assert!(!names(&w).contains(&"UDPRoute".to_string()));
    }

    #[test]
    fn the_v1_7_retry_features_are_not_claimed() {
        // v1.7.0 `pkg/features/httproute.go`: retries are the data plane's, which a status
        // writer cannot vouch for (`route.rs`, rule 6, for what a route asking for them gets).
        let out = compute(&world(), CONTROLLER);
        let Some(Desired::GatewayClass {
            supported_features, ..
        }) = out.get(&key("ours"))
        else {
            panic!("no GatewayClass status");
        };
        for retry in ["HTTPRouteRetryCodes", "HTTPRouteRetryConnectionError"] {
            assert!(
                supported_features.iter().all(|f| f.name != retry),
                "{retry} claimed"
            );
        }
    }

    #[test]
    fn another_controllers_class_gets_nothing() {
        let mut w = world();
        w.gateway_classes = vec![class("theirs", "example.com/other")];
        assert!(compute(&w, CONTROLLER).is_empty());
    }
}
