//! The startup check of server-side fencing: whether the apiserver fences this replica's Lease
//! (a binding of a Lease-parameter policy to it, as `deploy/components/server-fencing` makes),
//! said once at startup.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Api, ListParams};
use tracing::{info, warn};

use crate::config::POD_NAME;

/// How long the startup check may take: it says something within this, whatever the apiserver
/// does.
const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// What the startup check found about the fence on this replica's Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// A binding with `Deny` binds a policy whose parameter is a Lease to this Lease.
    Bound {
        /// The policy's name.
        policy: String,
        /// The binding's name.
        binding: String,
    },
    /// The apiserver serves no ValidatingAdmissionPolicyBinding v1 (before Kubernetes 1.30, or
    /// the API turned off).
    ApiOff,
    /// This replica may not list the bindings or policies (the component's ClusterRole
    /// `gateway-leader-fencing-check` grants it).
    NoPermission(String),
    /// Bindings of Lease-parameter policies exist, none on this Lease: `namespace/name` of the
    /// Leases they are bound to.
    OtherLease(Vec<String>),
    /// A binding names this Lease, but its policy is missing, takes no Lease, or the binding
    /// does not deny: what is wrong.
    Incomplete(String),
    /// No binding of a Lease-parameter policy at all.
    NoBinding,
    /// The apiserver could not be asked (an error or no answer in time).
    Unknown(String),
}

/// Looks for a binding of a Lease-parameter policy to the Lease `namespace/lock`.
pub async fn check(client: &kube::Client, namespace: &str, lock: &str) -> Fence {
    match tokio::time::timeout(CHECK_TIMEOUT, check_inner(client, namespace, lock)).await {
        Ok(found) => found,
        Err(_) => Fence::Unknown(format!("no answer within {CHECK_TIMEOUT:?}")),
    }
}

async fn check_inner(client: &kube::Client, namespace: &str, lock: &str) -> Fence {
    let refused = |what: &str, e: kube::Error| match &e {
        kube::Error::Api(s) if s.code == 404 => Fence::ApiOff,
        kube::Error::Api(s) if s.code == 403 => Fence::NoPermission(format!(
            "cannot list {what} (the ClusterRole gateway-leader-fencing-check of \
             deploy/components/server-fencing grants get and list)"
        )),
        _ => Fence::Unknown(format!("listing {what}: {e}")),
    };
    let bindings = match Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(e) => return refused("validatingadmissionpolicybindings", e),
    };
    let policies = match Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(e) => return refused("validatingadmissionpolicies", e),
    };
    let takes_lease = |p: &ValidatingAdmissionPolicy| {
        p.spec
            .as_ref()
            .and_then(|s| s.param_kind.as_ref())
            .is_some_and(|k| {
                k.api_version.as_deref() == Some("coordination.k8s.io/v1")
                    && k.kind.as_deref() == Some("Lease")
            })
    };
    let mut others = Vec::new();
    let mut wrong = None;
    for b in &bindings {
        let Some(spec) = &b.spec else { continue };
        let name = b.metadata.name.clone().unwrap_or_default();
        let policy_name = spec.policy_name.clone().unwrap_or_default();
        let policy = policies
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(policy_name.as_str()));
        let (ref_ns, ref_name) = spec.param_ref.as_ref().map_or((None, None), |r| {
            (r.namespace.as_deref(), r.name.as_deref())
        });
        let ours = ref_ns == Some(namespace) && ref_name == Some(lock);
        if !ours {
            if policy.is_some_and(takes_lease) {
                others.push(format!(
                    "{}/{}",
                    ref_ns.unwrap_or("(the request's namespace)"),
                    ref_name.unwrap_or("(by label selector)")
                ));
            }
            continue;
        }
        let denies = spec
            .validation_actions
            .as_ref()
            .is_some_and(|a| a.iter().any(|a| a == "Deny"));
        match policy {
            None => {
                wrong = Some(format!(
                    "binding {name} names policy {policy_name}, which does not exist"
                ))
            }
            Some(p) if !takes_lease(p) => {
                wrong = Some(format!(
                    "binding {name}'s policy {policy_name} does not take a Lease as its parameter"
                ))
            }
            Some(_) if !denies => {
                wrong = Some(format!(
                    "binding {name} only warns or audits (its validationActions have no Deny)"
                ))
            }
            Some(_) => {
                return Fence::Bound {
                    policy: policy_name,
                    binding: name,
                }
            }
        }
    }
    match (wrong, others.is_empty()) {
        (Some(w), _) => Fence::Incomplete(w),
        (None, false) => {
            others.sort();
            others.dedup();
            Fence::OtherLease(others)
        }
        (None, true) => Fence::NoBinding,
    }
}

/// Says once, at info, whether the apiserver fences this replica's status writes on the Lease
/// `namespace/lock`, and what is missing if it does not. Never fails: the fence adds to the
/// replica's own checks, which hold without it.
pub async fn report_fence(client: kube::Client, namespace: String, lock: String, identity: String) {
    let lease = format!("{namespace}/{lock}");
    const WHY: &str = "docs/kubernetes.md, \"Server-side fencing\"";
    match check(&client, &namespace, &lock).await {
        Fence::Bound { policy, binding } => {
            info!(%lease, %policy, %binding,
                "server-side fencing: the apiserver admits status writes only from the pod that \
                 holds the Lease");
            // The policy compares the holder with the pod the token names.
            if let Ok(pod) = std::env::var(POD_NAME) {
                if pod != identity {
                    warn!(%lease, %identity, pod_name = %pod,
                        "server-side fencing: this replica's identity is not its pod's name, so \
                         the fence refuses its writes even while it leads; leave \
                         --leader-election-identity unset");
                }
            }
        }
        found => {
            let missing = match found {
                Fence::ApiOff => "the apiserver serves no ValidatingAdmissionPolicyBinding \
                                  (admissionregistration.k8s.io/v1, Kubernetes 1.30 or later)"
                    .to_string(),
                Fence::NoPermission(why) => why,
                Fence::OtherLease(leases) => format!(
                    "no binding on this Lease; Lease-parameter policies are bound to {}",
                    leases.join(", ")
                ),
                Fence::Incomplete(why) => why,
                Fence::NoBinding => "no ValidatingAdmissionPolicyBinding binds a policy to this \
                                     Lease (deploy/components/server-fencing)"
                    .to_string(),
                Fence::Unknown(why) => format!("could not look: {why}"),
                Fence::Bound { .. } => return,
            };
            info!(%lease, %missing, see = WHY,
                "server-side fencing: not in force; only this replica's own checks fence its \
                 writes");
        }
    }
}
