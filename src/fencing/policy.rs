//! `gateway-leader fencing-policy`: prints the ValidatingAdmissionPolicy and binding of
//! `deploy/components/server-fencing` for any controller's Lease.
//!
//! The YAML is the component's own files, compiled in and edited field by field, so the printed
//! policy cannot drift from the one the base applies (the tests compare them).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use clap::Args;
use serde_json::{json, Value};

use crate::config::{validate_dns_label, validate_dns_subdomain};
use crate::program::EXIT_USAGE;

/// The component's policy, as the base applies it.
const POLICY: &str = include_str!("../../deploy/components/server-fencing/policy.yaml");
/// The component's binding, as the base applies it.
const BINDING: &str = include_str!("../../deploy/components/server-fencing/binding.yaml");
/// The ServiceAccount the component's match condition names.
const COMPONENT_SERVICE_ACCOUNT: &str = "gateway-leader";
/// The most `--resource` values one policy takes: enough for every kind a controller writes.
pub const MAX_RESOURCES: usize = 64;
/// The longest name Kubernetes gives an object.
const MAX_NAME: usize = 253;

/// The flags of `gateway-leader fencing-policy`.
#[derive(Debug, Clone, Args)]
pub struct FencingPolicyArgs {
    /// The Lease the controller's leader holds (a DNS-1123 subdomain), e.g.
    /// nginx-gateway-leader-election-lock.
    #[arg(long, value_name = "NAME")]
    pub lock_name: String,
    /// The Lease's namespace (a DNS-1123 label).
    #[arg(long, value_name = "NS")]
    pub namespace: String,
    /// The controller's ServiceAccount (a DNS-1123 subdomain): only its writes are fenced.
    #[arg(long, value_name = "NAME")]
    pub service_account: String,
    /// The ServiceAccount's namespace (a DNS-1123 label); default: the Lease's.
    #[arg(long, value_name = "NS")]
    pub service_account_namespace: Option<String>,
    /// A resource to fence, as PLURAL[.GROUP][/SUBRESOURCE] (e.g. httproutes.gateway.networking.k8s.io/status,
    /// services/status); repeat for more, up to 64. Default: the status of every Gateway API kind
    /// gateway-leader writes.
    #[arg(long = "resource", value_name = "RESOURCE")]
    pub resources: Vec<String>,
}

/// A resource of `--resource`: its API group (empty for the core group) and its name as an
/// admission rule spells it (`plural` or `plural/subresource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The API group; empty for the core group.
    pub group: String,
    /// `plural` or `plural/subresource`.
    pub resource: String,
}

/// Parses `PLURAL[.GROUP][/SUBRESOURCE]`.
fn parse_resource(v: &str) -> Result<Resource, String> {
    let bad = || {
        format!(
            "{v:?} is not a resource; accepted: PLURAL[.GROUP][/SUBRESOURCE] in lowercase, such \
             as httproutes.gateway.networking.k8s.io/status or services/status"
        )
    };
    if v.len() > MAX_NAME {
        return Err(bad());
    }
    let (name, sub) = match v.split_once('/') {
        Some((n, s)) => (n, Some(s)),
        None => (v, None),
    };
    let (plural, group) = match name.split_once('.') {
        Some((p, g)) => {
            validate_dns_subdomain(g).map_err(|_| bad())?;
            (p, g)
        }
        None => (name, ""),
    };
    validate_dns_label(plural).map_err(|_| bad())?;
    if let Some(s) = sub {
        if s.is_empty() || s.len() > 63 || !s.bytes().all(|b| b.is_ascii_lowercase()) {
            return Err(bad());
        }
    }
    Ok(Resource {
        group: group.to_string(),
        resource: sub.map_or_else(|| plural.to_string(), |s| format!("{plural}/{s}")),
    })
}

/// The match condition that limits the policy to one ServiceAccount: in the Lease's namespace
/// (`namespace` `None`, as the component has it, so that it follows the kustomization's
/// namespace), or in `namespace`.
pub fn service_account_condition(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        None => format!(
            "request.userInfo.username == 'system:serviceaccount:' + params.metadata.namespace \
             + ':{name}'"
        ),
        Some(ns) => format!("request.userInfo.username == 'system:serviceaccount:{ns}:{name}'"),
    }
}

/// The component's policy and binding, parsed.
fn component() -> Result<(Value, Value), String> {
    let parse = |what: &str, text: &str| {
        serde_saphyr::from_str::<Value>(text)
            .map_err(|e| format!("the compiled-in {what} does not parse: {e}"))
    };
    Ok((parse("policy", POLICY)?, parse("binding", BINDING)?))
}

/// The policy and binding for `args`, as YAML, or what is wrong with `args` (naming the flag).
pub fn render(args: &FencingPolicyArgs) -> Result<String, String> {
    let flag = |flag: &str, check: fn(&str) -> Result<(), String>, v: &str| {
        check(v).map_err(|e| format!("{flag}: {e}"))
    };
    flag("--lock-name", validate_dns_subdomain, &args.lock_name)?;
    flag("--namespace", validate_dns_label, &args.namespace)?;
    flag(
        "--service-account",
        validate_dns_subdomain,
        &args.service_account,
    )?;
    if let Some(ns) = &args.service_account_namespace {
        flag("--service-account-namespace", validate_dns_label, ns)?;
    }
    if args.resources.len() > MAX_RESOURCES {
        return Err(format!(
            "--resource: {} given; accepted: at most {MAX_RESOURCES}",
            args.resources.len()
        ));
    }
    let resources = args
        .resources
        .iter()
        .map(|r| parse_resource(r).map_err(|e| format!("--resource: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let name = format!("server-fencing.{}.{}", args.namespace, args.lock_name);
    if name.len() > MAX_NAME {
        return Err(format!(
            "--lock-name and --namespace: together at most {} bytes, so that the policy's name \
             {name:?} fits Kubernetes' {MAX_NAME}",
            MAX_NAME - "server-fencing..".len()
        ));
    }
    let (mut policy, mut binding) = component()?;
    let condition = &mut policy["spec"]["matchConditions"][0]["expression"];
    if condition.as_str().map(str::trim)
        != Some(&service_account_condition(None, COMPONENT_SERVICE_ACCOUNT))
    {
        return Err(format!(
            "the compiled-in policy's first match condition is not the ServiceAccount's: \
             {condition}"
        ));
    }
    let sa_ns = args
        .service_account_namespace
        .as_deref()
        .filter(|ns| *ns != args.namespace);
    *condition = json!(service_account_condition(sa_ns, &args.service_account));
    if !resources.is_empty() {
        let rules = &mut policy["spec"]["matchConstraints"]["resourceRules"];
        let template = rules[0].clone();
        let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for r in &resources {
            let list = by_group.entry(&r.group).or_default();
            if !list.contains(&r.resource.as_str()) {
                list.push(&r.resource);
            }
        }
        *rules = Value::Array(
            by_group
                .into_iter()
                .map(|(group, resources)| {
                    let mut rule = template.clone();
                    rule["apiGroups"] = json!([group]);
                    rule["resources"] = json!(resources);
                    rule
                })
                .collect(),
        );
    }
    policy["metadata"] = json!({ "name": name });
    binding["metadata"] = json!({ "name": name });
    binding["spec"]["policyName"] = json!(name);
    binding["spec"]["paramRef"]["name"] = json!(args.lock_name);
    binding["spec"]["paramRef"]["namespace"] = json!(args.namespace);
    let yaml = |v: &Value| {
        serde_saphyr::to_string(v).map_err(|e| format!("cannot write the policy as YAML: {e}"))
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Server-side fencing for the Lease {ns}/{lock}:\n\
         # the apiserver admits a write of the fenced resources by the ServiceAccount\n\
         # {sa_ns}/{sa} only from the pod that holds the Lease (its holder is the pod's name, or\n\
         # the name, '_' and a per-process id). While the Lease is missing, every write the policy\n\
         # matches is refused, whoever sends it. Rendered by gateway-leader {version}\n\
         # fencing-policy from deploy/components/server-fencing; see gateway-leader's\n\
         # docs/kubernetes.md, \"Server-side fencing\". Needs Kubernetes 1.30 or later.",
        ns = args.namespace,
        lock = args.lock_name,
        sa_ns = sa_ns.unwrap_or(&args.namespace),
        sa = args.service_account,
        version = env!("CARGO_PKG_VERSION"),
    );
    out.push_str(&yaml(&policy)?);
    out.push_str("---\n");
    out.push_str(&yaml(&binding)?);
    Ok(out)
}

/// `gateway-leader fencing-policy`: prints the YAML, or says what is wrong and exits 2.
pub fn main(args: &FencingPolicyArgs) -> std::process::ExitCode {
    match render(args) {
        Ok(yaml) => {
            print!("{yaml}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gateway-leader fencing-policy: {e}");
            std::process::ExitCode::from(EXIT_USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_LOCK_NAME;

    fn args(resources: Vec<String>) -> FencingPolicyArgs {
        FencingPolicyArgs {
            lock_name: DEFAULT_LOCK_NAME.into(),
            namespace: "gateway-system".into(),
            service_account: COMPONENT_SERVICE_ACCOUNT.into(),
            service_account_namespace: None,
            resources,
        }
    }

    fn docs(yaml: &str) -> Vec<Value> {
        serde_saphyr::from_multiple(yaml).expect("YAML documents")
    }

    #[test]
    fn rendered_for_the_bases_lease_it_is_the_component_but_for_the_names() {
        let (policy, binding) = component().expect("the component");
        let out = docs(&render(&args(vec![])).expect("renders"));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["spec"], policy["spec"]);
        let mut want = binding["spec"].clone();
        want["policyName"] = out[0]["metadata"]["name"].clone();
        assert_eq!(out[1]["spec"], want);
    }

    #[test]
    fn another_controllers_lease_account_and_resources() {
        let a = FencingPolicyArgs {
            lock_name: "nginx-gateway-leader-election-lock".into(),
            namespace: "nginx-gateway".into(),
            service_account: "nginx-gateway".into(),
            service_account_namespace: Some("ngf-system".into()),
            resources: [
                "httproutes.gateway.networking.k8s.io/status",
                "services/status",
                "gateways.gateway.networking.k8s.io/status",
                "services/status",
            ]
            .map(String::from)
            .to_vec(),
        };
        let out = docs(&render(&a).expect("renders"));
        let name = "server-fencing.nginx-gateway.nginx-gateway-leader-election-lock";
        assert_eq!(out[0]["metadata"]["name"], name);
        assert_eq!(out[1]["spec"]["policyName"], name);
        assert_eq!(
            out[1]["spec"]["paramRef"],
            json!({"name": "nginx-gateway-leader-election-lock", "namespace": "nginx-gateway",
                   "parameterNotFoundAction": "Deny"})
        );
        assert_eq!(
            out[0]["spec"]["matchConditions"][0]["expression"],
            "request.userInfo.username == 'system:serviceaccount:ngf-system:nginx-gateway'"
        );
        let rules = &out[0]["spec"]["matchConstraints"]["resourceRules"];
        assert_eq!(rules[0]["apiGroups"], json!([""]));
        assert_eq!(rules[0]["resources"], json!(["services/status"]));
        assert_eq!(rules[1]["apiGroups"], json!(["gateway.networking.k8s.io"]));
        assert_eq!(
            rules[1]["resources"],
            json!(["httproutes/status", "gateways/status"])
        );
        assert_eq!(rules[1]["operations"], json!(["CREATE", "UPDATE"]));
    }

    #[test]
    fn resources_are_checked() {
        for ok in [
            "services",
            "services/status",
            "httproutes.gateway.networking.k8s.io",
        ] {
            assert!(parse_resource(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/status",
            "Services",
            "services/",
            "services/Status",
            "services/status/x",
            "services.",
            "services.-x",
            "svc'or'",
            &"a".repeat(300),
        ] {
            let e = parse_resource(bad).expect_err(bad);
            assert!(e.contains("PLURAL[.GROUP][/SUBRESOURCE]"), "{e}");
        }
    }

    #[test]
    fn too_many_resources_or_too_long_a_name_are_refused_by_flag() {
        let many = vec!["services".to_string(); MAX_RESOURCES + 1];
        assert!(render(&args(many))
            .expect_err("too many")
            .starts_with("--resource"));
        let mut long = args(vec![]);
        long.lock_name = format!("{}.lock", "a".repeat(240));
        assert!(render(&long)
            .expect_err("too long")
            .starts_with("--lock-name"));
    }
}
