//! A Gateway's addresses: where the operator's data plane is reached, as the Service in front
//! of it says (docs/configuration.md, `gateway_addresses_service`).
//!
//! This controller runs no data plane, so it assigns nothing: it reports the addresses the
//! data plane's Service already has, as nginx-gateway-fabric reports its data plane's Service.
//! A `LoadBalancer` Service offers the addresses its load balancer was given
//! (`status.loadBalancer.ingress`: IPs and hostnames), an `ExternalName` one its name, any other
//! its cluster IPs. A Gateway without `spec.addresses` gets all of them; one with
//! `spec.addresses` gets the ones it asks for (an entry without a value: the first offered of
//! its type), as GEP-5093 says for `status.addresses` and the `AddressesAssigned` condition.

use std::net::IpAddr;

use gateway_api::gateways::{GatewayAddresses, GatewayStatusAddresses};
use k8s_openapi::api::core::v1::{Service, ServiceSpec};

use super::reason;
use super::verdict::Verdict;

/// The Service whose addresses are the Gateways' addresses.
///
/// ```
/// use gateway_leader_status::compute::AddressService;
///
/// let service = AddressService::new("gateway-system", "data-plane");
/// assert_eq!(service.to_string(), "gateway-system/data-plane");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AddressService {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
}

impl AddressService {
    /// The Service `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        AddressService {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for AddressService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The address types this controller reports and accepts in `spec.addresses`.
pub(crate) const IP_ADDRESS: &str = "IPAddress";
/// See [`IP_ADDRESS`].
pub(crate) const HOSTNAME: &str = "Hostname";

/// `status.addresses` holds at most this many (its CRD's `maxItems`).
const MAX_ADDRESSES: usize = 16;

/// The `AddressesAssigned` condition type (Gateway API v1.7, GEP-5093).
pub(crate) const ADDRESSES_ASSIGNED: &str = "AddressesAssigned";
/// Its reasons, as v1.7.0's `apis/v1/gateway_types.go` spells them.
pub(crate) const REASON_ASSIGNED: &str = "AddressesAssigned";
/// See [`REASON_ASSIGNED`].
pub(crate) const REASON_PARTIALLY_ASSIGNED: &str = "PartiallyAssigned";
/// See [`REASON_ASSIGNED`].
pub(crate) const REASON_NOT_ASSIGNED: &str = "NotAssigned";

/// One address: its type and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Address {
    kind: &'static str,
    value: String,
}

impl Address {
    fn ip(value: &str) -> Option<Address> {
        value.parse::<IpAddr>().ok().map(|ip| Address {
            kind: IP_ADDRESS,
            value: ip.to_string(),
        })
    }

    fn hostname(value: &str) -> Option<Address> {
        (!value.is_empty()).then(|| Address {
            kind: HOSTNAME,
            value: value.to_ascii_lowercase(),
        })
    }

    fn status(&self) -> GatewayStatusAddresses {
        GatewayStatusAddresses {
            r#type: Some(self.kind.to_string()),
            value: self.value.clone(),
        }
    }
}

/// What the Service offers: its addresses, or why there are none.
pub(crate) enum Offered {
    /// The Service's addresses, possibly none yet (a load balancer not provisioned).
    Addresses(Vec<Address>),
    /// The Service does not exist.
    Missing(String),
}

/// The addresses `service` offers, in the order it lists them, without repeats.
pub(crate) fn offered(source: &AddressService, service: Option<&Service>) -> Offered {
    let Some(service) = service else {
        return Offered::Missing(format!(
            "the Service {source} that gives Gateways their addresses does not exist"
        ));
    };
    let no_spec = ServiceSpec::default();
    let spec = service.spec.as_ref().unwrap_or(&no_spec);
    let mut out: Vec<Address> = vec![];
    match spec.type_.as_deref() {
        Some("LoadBalancer") => {
            let ingress = service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref());
            for i in ingress.into_iter().flatten() {
                out.extend(i.ip.as_deref().and_then(Address::ip));
                out.extend(i.hostname.as_deref().and_then(Address::hostname));
            }
        }
        Some("ExternalName") => {
            out.extend(spec.external_name.as_deref().and_then(Address::hostname));
        }
        _ => {
            let ips = match spec.cluster_ips.as_deref() {
                Some(ips) if !ips.is_empty() => ips,
                _ => spec.cluster_ip.as_slice(),
            };
            // "None" (a headless Service) parses as no address.
            out.extend(ips.iter().filter_map(|ip| Address::ip(ip)));
        }
    }
    let mut seen: Vec<Address> = Vec::with_capacity(out.len());
    for a in out {
        if !seen.contains(&a) {
            seen.push(a);
        }
    }
    seen.truncate(MAX_ADDRESSES);
    Offered::Addresses(seen)
}

/// The type an entry of `spec.addresses` asks for (the CRD defaults it to `IPAddress`).
fn requested_type(a: &GatewayAddresses) -> &str {
    a.r#type.as_deref().unwrap_or(IP_ADDRESS)
}

/// `Accepted=False/UnsupportedAddress` when an entry of `spec.addresses` has a type this
/// controller does not report.
pub(crate) fn unsupported(requested: &[GatewayAddresses]) -> Option<Verdict> {
    let (i, a) = requested
        .iter()
        .enumerate()
        .find(|(_, a)| !matches!(requested_type(a), IP_ADDRESS | HOSTNAME))?;
    Some(Verdict::no(
        reason::UNSUPPORTED_ADDRESS,
        format!(
            "spec.addresses[{i}] has type {:?}: this controller supports IPAddress and Hostname",
            requested_type(a)
        ),
    ))
}

/// A Gateway's addresses and the two conditions they decide.
pub(crate) struct Assigned {
    /// `status.addresses`.
    pub addresses: Vec<GatewayStatusAddresses>,
    /// `Programmed=False` when the addresses keep the Gateway from being programmed.
    pub not_programmed: Option<Verdict>,
    /// `AddressesAssigned`.
    pub assigned: Verdict,
}

/// Assigns `requested` (a Gateway's `spec.addresses`, all of supported types) from `offered`.
pub(crate) fn assign(
    source: &AddressService,
    offered: &Offered,
    requested: &[GatewayAddresses],
) -> Assigned {
    let offered = match offered {
        Offered::Missing(message) => {
            return Assigned {
                addresses: vec![],
                not_programmed: Some(Verdict::no(reason::ADDRESS_NOT_ASSIGNED, message.clone())),
                assigned: Verdict::no(REASON_NOT_ASSIGNED, message.clone()),
            }
        }
        Offered::Addresses(a) => a,
    };
    if requested.is_empty() {
        if offered.is_empty() {
            let message = format!("the Service {source} has no address yet");
            return Assigned {
                addresses: vec![],
                not_programmed: Some(Verdict::no(reason::ADDRESS_NOT_ASSIGNED, message.clone())),
                assigned: Verdict::no(REASON_NOT_ASSIGNED, message),
            };
        }
        return Assigned {
            addresses: offered.iter().map(Address::status).collect(),
            not_programmed: None,
            assigned: Verdict::yes(
                REASON_ASSIGNED,
                format!("the addresses of the Service {source}"),
            ),
        };
    }
    let mut taken: Vec<&Address> = vec![];
    let mut unusable = vec![];
    let mut unassigned = vec![];
    for (i, want) in requested.iter().enumerate() {
        let kind = requested_type(want);
        let value = want.value.as_deref().unwrap_or("");
        let found = if value.is_empty() {
            offered
                .iter()
                .find(|a| a.kind == kind && !taken.contains(a))
        } else {
            let want = match kind {
                IP_ADDRESS => Address::ip(value),
                _ => Address::hostname(value),
            };
            want.and_then(|w| offered.iter().find(|a| **a == w))
        };
        match found {
            Some(a) if !taken.contains(&a) => taken.push(a),
            Some(_) => {}
            None if value.is_empty() => {
                unassigned.push(format!("spec.addresses[{i}] (any {kind})"));
            }
            None => unusable.push(format!("spec.addresses[{i}] {kind} {value}")),
        }
    }
    let addresses: Vec<GatewayStatusAddresses> = taken.iter().map(|a| a.status()).collect();
    let offers = || {
        let list: Vec<&str> = offered.iter().map(|a| a.value.as_str()).collect();
        if list.is_empty() {
            "none yet".to_string()
        } else {
            list.join(", ")
        }
    };
    let not_programmed = if !unusable.is_empty() {
        Some(Verdict::no(
            reason::ADDRESS_NOT_USABLE,
            format!(
                "{} cannot be used: not an address of the Service {source} (it has {})",
                unusable.join(", "),
                offers()
            ),
        ))
    } else if !unassigned.is_empty() {
        Some(Verdict::no(
            reason::ADDRESS_NOT_ASSIGNED,
            format!(
                "{} could not be assigned: the Service {source} has no such address (it has {})",
                unassigned.join(", "),
                offers()
            ),
        ))
    } else {
        None
    };
    let unsatisfied: Vec<String> = unusable.into_iter().chain(unassigned).collect();
    let assigned = if unsatisfied.is_empty() {
        Verdict::yes(REASON_ASSIGNED, "every requested address is assigned")
    } else if addresses.is_empty() {
        Verdict::no(
            REASON_NOT_ASSIGNED,
            format!("not assigned: {}", unsatisfied.join(", ")),
        )
    } else {
        Verdict::no(
            REASON_PARTIALLY_ASSIGNED,
            format!("not assigned: {}", unsatisfied.join(", ")),
        )
    };
    Assigned {
        addresses,
        not_programmed,
        assigned,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServiceSpec, ServiceStatus,
    };

    use super::*;

    fn source() -> AddressService {
        AddressService::new("gateway-system", "data-plane")
    }

    fn cluster_ip(ips: &[&str]) -> Service {
        Service {
            spec: Some(ServiceSpec {
                cluster_ip: ips.first().map(|s| s.to_string()),
                cluster_ips: Some(ips.iter().map(|s| s.to_string()).collect()),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    fn want(kind: Option<&str>, value: Option<&str>) -> GatewayAddresses {
        GatewayAddresses {
            r#type: kind.map(str::to_string),
            value: value.map(str::to_string),
        }
    }

    fn values(a: &Assigned) -> Vec<(String, String)> {
        a.addresses
            .iter()
            .map(|a| (a.r#type.clone().unwrap_or_default(), a.value.clone()))
            .collect()
    }

    #[test]
    fn a_cluster_ip_service_offers_its_cluster_ips_and_a_headless_one_none() {
        let s = cluster_ip(&["10.96.0.10", "fd00::10"]);
        let a = assign(&source(), &offered(&source(), Some(&s)), &[]);
        assert_eq!(
            values(&a),
            [
                ("IPAddress".into(), "10.96.0.10".into()),
                ("IPAddress".into(), "fd00::10".into())
            ]
        );
        assert!(a.not_programmed.is_none() && a.assigned.ok);

        let headless = cluster_ip(&["None"]);
        let a = assign(&source(), &offered(&source(), Some(&headless)), &[]);
        assert!(a.addresses.is_empty());
        let np = a.not_programmed.expect("not programmed");
        assert_eq!(np.reason, "AddressNotAssigned");
        assert!(np.message.contains("gateway-system/data-plane"), "{np:?}");
        assert_eq!(a.assigned.reason, "NotAssigned");
    }

    #[test]
    fn a_load_balancer_offers_its_ingress_only_once_provisioned() {
        let mut s = cluster_ip(&["10.96.0.10"]);
        if let Some(spec) = s.spec.as_mut() {
            spec.type_ = Some("LoadBalancer".into());
        }
        let a = assign(&source(), &offered(&source(), Some(&s)), &[]);
        assert_eq!(
            a.not_programmed.map(|v| v.reason),
            Some("AddressNotAssigned")
        );
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress {
                        ip: Some("203.0.113.7".into()),
                        ..LoadBalancerIngress::default()
                    },
                    LoadBalancerIngress {
                        hostname: Some("LB.example.com".into()),
                        ..LoadBalancerIngress::default()
                    },
                ]),
            }),
            ..ServiceStatus::default()
        });
        let a = assign(&source(), &offered(&source(), Some(&s)), &[]);
        assert_eq!(
            values(&a),
            [
                ("IPAddress".into(), "203.0.113.7".into()),
                ("Hostname".into(), "lb.example.com".into())
            ]
        );
    }

    #[test]
    fn a_missing_service_assigns_nothing_and_says_which() {
        let a = assign(&source(), &offered(&source(), None), &[]);
        assert!(a.addresses.is_empty());
        assert_eq!(
            a.not_programmed.map(|v| (v.reason, v.message)),
            Some((
                "AddressNotAssigned",
                "the Service gateway-system/data-plane that gives Gateways their addresses \
                 does not exist"
                    .to_string()
            ))
        );
        assert!(!a.assigned.ok);
    }

    #[test]
    fn requested_addresses_are_assigned_when_the_service_has_them() {
        let s = cluster_ip(&["10.96.0.10", "fd00::10"]);
        let o = offered(&source(), Some(&s));
        // Another spelling of the same IPv6 address, and an entry without a value.
        let a = assign(
            &source(),
            &o,
            &[
                want(None, Some("fd00:0::10")),
                want(Some("IPAddress"), None),
            ],
        );
        assert_eq!(
            values(&a),
            [
                ("IPAddress".into(), "fd00::10".into()),
                ("IPAddress".into(), "10.96.0.10".into())
            ]
        );
        assert!(a.not_programmed.is_none());
        assert_eq!(
            (a.assigned.ok, a.assigned.reason),
            (true, "AddressesAssigned")
        );
    }

    #[test]
    fn an_address_the_service_lacks_is_not_usable_and_the_rest_partially_assigned() {
        let s = cluster_ip(&["10.96.0.10"]);
        let o = offered(&source(), Some(&s));
        let a = assign(
            &source(),
            &o,
            &[
                want(None, Some("192.0.2.1")),
                want(None, Some("10.96.0.10")),
            ],
        );
        assert_eq!(values(&a), [("IPAddress".into(), "10.96.0.10".into())]);
        let np = a.not_programmed.expect("not programmed");
        assert_eq!(np.reason, "AddressNotUsable");
        assert!(
            np.message.contains("spec.addresses[0] IPAddress 192.0.2.1"),
            "{np:?}"
        );
        assert_eq!(a.assigned.reason, "PartiallyAssigned");

        // Only an empty Hostname entry, and the Service has no hostname.
        let a = assign(&source(), &o, &[want(Some("Hostname"), None)]);
        assert!(a.addresses.is_empty());
        assert_eq!(
            a.not_programmed.map(|v| v.reason),
            Some("AddressNotAssigned")
        );
        assert_eq!(a.assigned.reason, "NotAssigned");
    }

    #[test]
    fn a_type_other_than_ip_address_or_hostname_is_unsupported() {
        assert!(
            unsupported(&[want(None, Some("10.0.0.1")), want(Some("Hostname"), None)]).is_none()
        );
        let v = unsupported(&[
            want(None, None),
            want(Some("test/fake-invalid-type"), Some("x")),
        ])
        .expect("unsupported");
        assert_eq!(v.reason, "UnsupportedAddress");
        assert!(v.message.contains("spec.addresses[1]"), "{v:?}");
    }
}
