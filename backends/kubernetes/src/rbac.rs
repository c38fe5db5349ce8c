//! The RBAC a replica needs in its leader-election namespace (mirrored in docs/kubernetes.md).

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The Role rules, as YAML, that the docs and manifests use.
pub const ROLE_RULES_YAML: &str = r#"rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "list", "watch", "create", "update"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create"]
"#;

/// The Role rules a replica needs in its namespace: Leases read/watch/write, Events create.
pub fn role_rules() -> Vec<PolicyRule> {
    let rule = |group: &str, resource: &str, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(vec![resource.to_string()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    };
    vec![
        rule(
            "coordination.k8s.io",
            "leases",
            &["get", "list", "watch", "create", "update"],
        ),
        rule("", "events", &["create"]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_rules_agree() {
        for r in role_rules() {
            let group = r.api_groups.as_deref().unwrap_or_default().join("");
            let res = r.resources.as_deref().unwrap_or_default().join("");
            assert!(ROLE_RULES_YAML.contains(&format!("apiGroups: [\"{group}\"]")));
            assert!(ROLE_RULES_YAML.contains(&format!("resources: [\"{res}\"]")));
            let verbs = r
                .verbs
                .iter()
                .map(|v| format!("\"{v}\""))
                .collect::<Vec<_>>()
                .join(", ");
            assert!(ROLE_RULES_YAML.contains(&format!("verbs: [{verbs}]")));
        }
    }
}
