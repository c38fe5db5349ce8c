//! Condition types and reasons, spelled as Gateway API v1.5.1 spells them
//! (`apis/v1/gateway_types.go`, `apis/v1/gatewayclass_types.go`, `apis/v1/shared_types.go`).
//!
//! Plain `&str` constants so every condition is built the same way: gateway-api 0.22's
//! `constants` module has no route conditions, no `SupportedVersion` and no listener
//! `UnsupportedValue`/`OverlappingTLSConfig`. The test below pins the ones it does have to the
//! crate's enums, so a typo here cannot drift from upstream.

/// Condition type and reason of acceptance on every kind.
pub(crate) const ACCEPTED: &str = "Accepted";
/// Gateway and listener condition type and reason for a configuration that is in effect.
pub(crate) const PROGRAMMED: &str = "Programmed";
/// Listener and route condition type and reason for references that resolve.
pub(crate) const RESOLVED_REFS: &str = "ResolvedRefs";
/// Listener condition type for indistinct listeners.
pub(crate) const CONFLICTED: &str = "Conflicted";
/// Listener condition type for HTTPS listeners whose hostnames overlap on one port.
pub(crate) const OVERLAPPING_TLS_CONFIG: &str = "OverlappingTLSConfig";
/// GatewayClass condition type and reason for the installed CRD version.
pub(crate) const SUPPORTED_VERSION: &str = "SupportedVersion";

/// GatewayClass/Gateway: a `parametersRef` this controller cannot use.
pub(crate) const INVALID_PARAMETERS: &str = "InvalidParameters";
/// GatewayClass: the installed CRDs are of another bundle version.
pub(crate) const UNSUPPORTED_VERSION: &str = "UnsupportedVersion";
/// Gateway/listener: syntactically or semantically invalid.
pub(crate) const INVALID: &str = "Invalid";
/// Gateway: some (or all) listeners are not valid.
pub(crate) const LISTENERS_NOT_VALID: &str = "ListenersNotValid";
/// Gateway: `spec.addresses` asks for something this controller does not assign.
pub(crate) const UNSUPPORTED_ADDRESS: &str = "UnsupportedAddress";
/// Gateway (Programmed): an address was asked for that the data plane's Service does not have.
pub(crate) const ADDRESS_NOT_USABLE: &str = "AddressNotUsable";
/// Gateway (Programmed): no address could be assigned (the data plane's Service has none yet,
/// or none of a requested type).
pub(crate) const ADDRESS_NOT_ASSIGNED: &str = "AddressNotAssigned";
/// Listener: a protocol other than HTTP, HTTPS and TLS.
pub(crate) const UNSUPPORTED_PROTOCOL: &str = "UnsupportedProtocol";
/// Listener: a field value this controller does not support.
pub(crate) const UNSUPPORTED_VALUE: &str = "UnsupportedValue";
/// Listener: another listener on the port has a different protocol.
pub(crate) const PROTOCOL_CONFLICT: &str = "ProtocolConflict";
/// Listener: another listener has the same port, protocol and hostname.
pub(crate) const HOSTNAME_CONFLICT: &str = "HostnameConflict";
/// Listener: `Conflicted` is False.
pub(crate) const NO_CONFLICTS: &str = "NoConflicts";
/// Listener: `allowedRoutes.kinds` names a kind this controller cannot attach.
pub(crate) const INVALID_ROUTE_KINDS: &str = "InvalidRouteKinds";
/// Listener: an allowed certificateRef that is not a core Secret, or names a Secret that does
/// not exist or cannot serve (wrong type, no `tls.crt`/`tls.key`, malformed PEM).
pub(crate) const INVALID_CERTIFICATE_REF: &str = "InvalidCertificateRef";
/// Listener/route: a cross-namespace reference no ReferenceGrant allows.
pub(crate) const REF_NOT_PERMITTED: &str = "RefNotPermitted";
/// Listener: `OverlappingTLSConfig` is True because hostnames overlap.
pub(crate) const OVERLAPPING_HOSTNAMES: &str = "OverlappingHostnames";
/// Route: listeners exist but none allows the route's namespace or kind.
pub(crate) const NOT_ALLOWED_BY_LISTENERS: &str = "NotAllowedByListeners";
/// Route: no allowing listener's hostname intersects the route's hostnames.
pub(crate) const NO_MATCHING_LISTENER_HOSTNAME: &str = "NoMatchingListenerHostname";
/// Route: the parentRef's sectionName/port select no listener, or the Gateway is not accepted.
pub(crate) const NO_MATCHING_PARENT: &str = "NoMatchingParent";
/// Route: a backendRef to a group/kind other than core Service.
pub(crate) const INVALID_KIND: &str = "InvalidKind";
/// Route: a backendRef to a Service or Service port that does not exist.
pub(crate) const BACKEND_NOT_FOUND: &str = "BackendNotFound";
/// ListenerSet: its Gateway's `allowedListeners` does not admit it (upstream v1.5.1
/// `apis/v1/listenerset_types.go`, `ListenerSetReasonNotAllowed`).
pub(crate) const NOT_ALLOWED: &str = "NotAllowed";
/// ListenerSet: its Gateway is not accepted (`ListenerSetReasonParentNotAccepted`).
pub(crate) const PARENT_NOT_ACCEPTED: &str = "ParentNotAccepted";
/// BackendTLSPolicy: `Accepted` False because every caCertificateRef is invalid
/// (`apis/v1/backendtlspolicy_types.go`, `BackendTLSPolicyReasonNoValidCACertificate`).
pub(crate) const NO_VALID_CA_CERTIFICATE: &str = "NoValidCACertificate";
/// Policy: `Accepted` False because its target does not exist (`apis/v1/policy_types.go`,
/// `PolicyReasonTargetNotFound`).
pub(crate) const TARGET_NOT_FOUND: &str = "TargetNotFound";
/// BackendTLSPolicy: a caCertificateRef names a ConfigMap that does not exist or whose `ca.crt`
/// is missing or malformed (`BackendTLSPolicyReasonInvalidCACertificateRef`).
pub(crate) const INVALID_CA_CERTIFICATE_REF: &str = "InvalidCACertificateRef";

#[cfg(test)]
mod tests {
    use gateway_api::constants::{
        GatewayClassConditionReason, GatewayConditionReason, ListenerConditionReason,
        ListenerConditionType,
    };

    use super::*;

    #[test]
    fn strings_match_the_gateway_api_crate_where_it_has_them() {
        assert_eq!(ACCEPTED, ListenerConditionType::Accepted.to_string());
        assert_eq!(PROGRAMMED, ListenerConditionType::Programmed.to_string());
        assert_eq!(
            RESOLVED_REFS,
            ListenerConditionType::ResolvedRefs.to_string()
        );
        assert_eq!(CONFLICTED, ListenerConditionType::Conflicted.to_string());
        assert_eq!(
            INVALID_PARAMETERS,
            GatewayClassConditionReason::InvalidParameters.to_string()
        );
        assert_eq!(INVALID, GatewayConditionReason::Invalid.to_string());
        assert_eq!(
            LISTENERS_NOT_VALID,
            GatewayConditionReason::ListenersNotValid.to_string()
        );
        assert_eq!(
            UNSUPPORTED_ADDRESS,
            GatewayConditionReason::UnsupportedAddress.to_string()
        );
        assert_eq!(
            UNSUPPORTED_PROTOCOL,
            ListenerConditionReason::UnsupportedProtocol.to_string()
        );
        assert_eq!(
            PROTOCOL_CONFLICT,
            ListenerConditionReason::ProtocolConflict.to_string()
        );
        assert_eq!(
            HOSTNAME_CONFLICT,
            ListenerConditionReason::HostnameConflict.to_string()
        );
        assert_eq!(
            NO_CONFLICTS,
            ListenerConditionReason::NoConflicts.to_string()
        );
        assert_eq!(
            INVALID_ROUTE_KINDS,
            ListenerConditionReason::InvalidRouteKinds.to_string()
        );
        assert_eq!(
            INVALID_CERTIFICATE_REF,
            ListenerConditionReason::InvalidCertificateRef.to_string()
        );
        assert_eq!(
            REF_NOT_PERMITTED,
            ListenerConditionReason::RefNotPermitted.to_string()
        );
    }
}
