//! Label selectors (`matchLabels` + `matchExpressions`) evaluated against a namespace's labels.
//!
//! Semantics of Kubernetes' `metav1.LabelSelector`: every term must hold; an empty selector
//! selects everything. A selector the API server would refuse to convert (an unknown operator,
//! `In`/`NotIn` without values, `Exists`/`DoesNotExist` with values) selects nothing here, so a
//! typo in a listener never opens it to more namespaces than intended.

use std::collections::BTreeMap;

use gateway_api::gateways::GatewayListenersAllowedRoutesNamespacesSelector;

/// One `matchExpressions` term.
pub(crate) struct Requirement<'a> {
    /// The label key.
    pub key: &'a str,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: &'a str,
    /// The values for `In`/`NotIn`.
    pub values: &'a [String],
}

/// Whether `labels` satisfy every `match_labels` pair and every requirement.
pub(crate) fn matches<'a>(
    labels: &BTreeMap<String, String>,
    match_labels: Option<&BTreeMap<String, String>>,
    requirements: impl IntoIterator<Item = Requirement<'a>>,
) -> bool {
    let labels_hold = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_hold && requirements.into_iter().all(|r| r.holds(labels))
}

/// Whether a listener's `allowedRoutes.namespaces.selector` selects a namespace with `labels`.
pub(crate) fn namespace_selector_matches(
    selector: &GatewayListenersAllowedRoutesNamespacesSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    let requirements = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|e| Requirement {
            key: &e.key,
            operator: &e.operator,
            values: e.values.as_deref().unwrap_or_default(),
        });
    matches(labels, selector.match_labels.as_ref(), requirements)
}

impl Requirement<'_> {
    fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(self.key);
        match self.operator {
            "In" => !self.values.is_empty() && value.is_some_and(|v| self.values.contains(v)),
            // A missing key satisfies NotIn, as in Kubernetes.
            "NotIn" => !self.values.is_empty() && value.is_none_or(|v| !self.values.contains(v)),
            "Exists" => self.values.is_empty() && value.is_some(),
            "DoesNotExist" => self.values.is_empty() && value.is_none(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req<'a>(key: &'a str, operator: &'a str, values: &'a [String]) -> Requirement<'a> {
        Requirement {
            key,
            operator,
            values,
        }
    }

    #[test]
    fn an_empty_selector_selects_every_namespace() {
        assert!(matches(&labels(&[]), None, []));
    }

    #[test]
    fn match_labels_must_all_be_present_with_equal_values() {
        let want = labels(&[("team", "a"), ("env", "prod")]);
        assert!(matches(
            &labels(&[("team", "a"), ("env", "prod"), ("x", "y")]),
            Some(&want),
            []
        ));
        assert!(!matches(&labels(&[("team", "a")]), Some(&want), []));
        assert!(!matches(
            &labels(&[("team", "a"), ("env", "dev")]),
            Some(&want),
            []
        ));
    }

    #[test]
    fn each_operator_follows_kubernetes_semantics() {
        let ab = vec!["a".to_string(), "b".to_string()];
        let has_a = labels(&[("team", "a")]);
        let has_c = labels(&[("team", "c")]);
        let none = labels(&[]);
        assert!(matches(&has_a, None, [req("team", "In", &ab)]));
        assert!(!matches(&has_c, None, [req("team", "In", &ab)]));
        assert!(!matches(&none, None, [req("team", "In", &ab)]));
        assert!(!matches(&has_a, None, [req("team", "NotIn", &ab)]));
        assert!(matches(&has_c, None, [req("team", "NotIn", &ab)]));
        assert!(matches(&none, None, [req("team", "NotIn", &ab)]));
        assert!(matches(&has_a, None, [req("team", "Exists", &[])]));
        assert!(!matches(&none, None, [req("team", "Exists", &[])]));
        assert!(matches(&none, None, [req("team", "DoesNotExist", &[])]));
        assert!(!matches(&has_a, None, [req("team", "DoesNotExist", &[])]));
    }

    #[test]
    fn a_malformed_requirement_selects_nothing() {
        let ab = vec!["a".to_string()];
        let has_a = labels(&[("team", "a")]);
        assert!(!matches(&has_a, None, [req("team", "in", &ab)]));
        assert!(!matches(&has_a, None, [req("team", "In", &[])]));
        assert!(!matches(&labels(&[]), None, [req("team", "NotIn", &[])]));
        assert!(!matches(&has_a, None, [req("team", "Exists", &ab)]));
    }

    #[test]
    fn labels_and_expressions_must_both_hold() {
        let want = labels(&[("env", "prod")]);
        let ab = vec!["a".to_string()];
        let ns = labels(&[("env", "prod"), ("team", "b")]);
        assert!(!matches(&ns, Some(&want), [req("team", "In", &ab)]));
        assert!(matches(&ns, Some(&want), [req("team", "NotIn", &ab)]));
    }
}
