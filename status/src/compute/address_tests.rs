//! Gateways whose addresses come from the data plane's Service, computed whole: the
//! `status.addresses`, `Programmed` and `AddressesAssigned` they get, and what the GatewayClass
//! claims (`address.rs`).

use serde_json::json;

use super::fixtures::*;
use super::{AddressService, Computation};
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};

fn data_plane() -> AddressService {
    AddressService::new("gateway-system", "data-plane")
}

/// The data plane's Service, a ClusterIP one with these cluster IPs.
fn data_plane_service(ips: &[&str]) -> std::sync::Arc<k8s_openapi::api::core::v1::Service> {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": "gateway-system", "name": "data-plane"},
        "spec": {"clusterIP": ips.first(), "clusterIPs": ips, "ports": [{"port": 80}]},
    }))
    .map(std::sync::Arc::new)
    .expect("a Service")
}

fn compute_with(w: &super::World, from: Option<AddressService>) -> Out {
    Computation::new(CONTROLLER)
        .with_addresses_from(from)
        .run(w)
        .desired
}

fn addresses(out: &Out) -> Option<Vec<(String, String)>> {
    match out.get(&ObjectKey::namespaced(Kind::Gateway, "infra", "gw")) {
        Some(Desired::Gateway { addresses, .. }) => addresses.as_ref().map(|a| {
            a.iter()
                .map(|a| (a.r#type.clone().unwrap_or_default(), a.value.clone()))
                .collect()
        }),
        other => panic!("no Gateway status: {other:?}"),
    }
}

fn features(out: &Out) -> Vec<String> {
    match out.get(&ObjectKey::cluster(Kind::GatewayClass, CLASS)) {
        Some(Desired::GatewayClass {
            supported_features, ..
        }) => supported_features.iter().map(|f| f.name.clone()).collect(),
        other => panic!("no GatewayClass status: {other:?}"),
    }
}

fn ip(value: &str) -> (String, String) {
    ("IPAddress".to_string(), value.to_string())
}

#[test]
fn a_gateway_gets_the_services_addresses_and_the_class_claims_the_address_features() {
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
    w.services = vec![data_plane_service(&["10.96.0.10"])];
    let out = compute_with(&w, Some(data_plane()));
    assert_eq!(addresses(&out), Some(vec![ip("10.96.0.10")]));
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Programmed"),
        tsr("Programmed", "True", "Programmed")
    );
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "AddressesAssigned"),
        tsr("AddressesAssigned", "True", "AddressesAssigned")
    );
    let claimed = features(&out);
    assert!(
        claimed.contains(&"GatewayAddressEmpty".to_string())
            && claimed.contains(&"GatewayStaticAddresses".to_string()),
        "{claimed:?}"
    );
    let mut sorted = claimed.clone();
    sorted.sort();
    assert_eq!(claimed, sorted, "supportedFeatures must be sorted");
}

#[test]
fn without_the_service_the_gateway_is_accepted_but_not_programmed() {
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
    let out = compute_with(&w, Some(data_plane()));
    assert_eq!(addresses(&out), Some(vec![]));
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Accepted"),
        tsr("Accepted", "True", "Accepted")
    );
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Programmed"),
        tsr("Programmed", "False", "AddressNotAssigned")
    );
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "AddressesAssigned"),
        tsr("AddressesAssigned", "False", "NotAssigned")
    );
}

#[test]
fn requested_addresses_follow_the_conformance_suites_static_address_steps() {
    let gw = |addresses: serde_json::Value| {
        gateway_with(
            "infra",
            "gw",
            json!({"gatewayClassName": CLASS, "addresses": addresses,
                   "listeners": [http("web", 80)]}),
        )
    };
    let mut w = world();
    w.services = vec![data_plane_service(&["10.96.0.10"])];
    let invalid = json!({"type": "test/fake-invalid-type", "value": "fake address teehee!"});
    let unusable = json!({"type": "IPAddress", "value": "192.0.2.1"});
    let usable = json!({"type": "IPAddress", "value": "10.96.0.10"});

    w.gateways = vec![gw(json!([invalid, unusable, usable]))];
    let out = compute_with(&w, Some(data_plane()));
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Accepted"),
        tsr("Accepted", "False", "UnsupportedAddress")
    );
    assert_eq!(addresses(&out), Some(vec![]));

    w.gateways = vec![gw(json!([unusable, usable]))];
    let out = compute_with(&w, Some(data_plane()));
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Accepted"),
        tsr("Accepted", "True", "Accepted")
    );
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Programmed"),
        tsr("Programmed", "False", "AddressNotUsable")
    );
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "AddressesAssigned"),
        tsr("AddressesAssigned", "False", "PartiallyAssigned")
    );
    assert_eq!(addresses(&out), Some(vec![ip("10.96.0.10")]));

    w.gateways = vec![gw(json!([usable]))];
    let out = compute_with(&w, Some(data_plane()));
    assert_eq!(
        gateway_condition(&out, "infra", "gw", "Programmed"),
        tsr("Programmed", "True", "Programmed")
    );
    assert_eq!(addresses(&out), Some(vec![ip("10.96.0.10")]));
}

#[test]
fn without_a_service_setting_nothing_about_addresses_is_said() {
    let mut w = world();
    w.gateways = vec![gateway("infra", "gw", json!([http("web", 80)]))];
    w.services = vec![data_plane_service(&["10.96.0.10"])];
    let out = compute_with(&w, None);
    assert_eq!(addresses(&out), None);
    let (conditions, _) = gateway_status(&out, "infra", "gw");
    assert!(
        conditions.iter().all(|c| c.type_ != "AddressesAssigned"),
        "{conditions:?}"
    );
    let claimed = features(&out);
    assert!(
        !claimed.iter().any(|f| f.contains("Address")),
        "{claimed:?}"
    );
}
