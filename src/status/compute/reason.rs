//! Condition types and reasons, spelled as Gateway API v1.5.1 spells them.
//!
//! Plain `&str` constants so every condition is built the same way: gateway-api 0.22's
//! `constants` module has no `SupportedVersion`. The test below pins the ones it does have to
//! the crate's enums, so a typo here cannot drift from upstream.

/// Condition type and reason of acceptance on every kind.
pub(crate) const ACCEPTED: &str = "Accepted";
/// GatewayClass condition type and reason for the installed CRD version.
pub(crate) const SUPPORTED_VERSION: &str = "SupportedVersion";

/// GatewayClass/Gateway: a `parametersRef` this controller cannot use.
pub(crate) const INVALID_PARAMETERS: &str = "InvalidParameters";
/// GatewayClass: the installed CRDs are of another bundle version.
pub(crate) const UNSUPPORTED_VERSION: &str = "UnsupportedVersion";

#[cfg(test)]
mod tests {
    use gateway_api::constants::{GatewayClassConditionReason, GatewayClassConditionType};

    use super::*;

    #[test]
    fn strings_match_the_gateway_api_crate_where_it_has_them() {
        assert_eq!(ACCEPTED, GatewayClassConditionType::Accepted.to_string());
        assert_eq!(ACCEPTED, GatewayClassConditionReason::Accepted.to_string());
        assert_eq!(
            INVALID_PARAMETERS,
            GatewayClassConditionReason::InvalidParameters.to_string()
        );
    }
}
