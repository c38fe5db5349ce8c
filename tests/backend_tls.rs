//! BackendTLSPolicy on a real kube-apiserver with the upstream CRDs, written by real
//! `gateway-leader run` processes: each reason the spec defines shows on the ancestor entry of
//! the Gateway whose route reaches the targeted Service, a ConfigMap created later is seen, and
//! a takeover in the middle of changes to the policies loses none. The cases follow v1.5.1
//! `conformance/tests/backendtlspolicy.yaml`, `backendtlspolicy-invalid-ca-certificate-ref.yaml`,
//! `backendtlspolicy-invalid-kind.yaml` and `backendtlspolicy-conflict-resolution.yaml`, and
//! `apis/v1/backendtlspolicy_types.go` for an unknown `wellKnownCACertificates`.

mod common;

use common::blocking;
use common::gateway::*;
use common::Replica;
use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::httproutes::HttpRoute;
use gateway_leader_log::message;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::{Api, Client};
use serde_json::{json, Value};

/// The ports of Service `web` a policy's `sectionName` can name, besides `http` (443); the
/// route reaches each, so each is a target with our Gateway as its ancestor.
const SECTIONS: [(&str, i32); 4] = [("s1", 1001), ("s2", 1002), ("s3", 1003), ("s4", 1004)];

/// A class, Gateway `gw`, Service `web` (ports `http` 443 and [`SECTIONS`]) and an HTTPRoute on
/// `gw` to each of its ports, and a ConfigMap `ca` with a usable `ca.crt`.
async fn scene(ns: &str, controller: &str) -> Client {
    let client = namespace_with_class(ns, controller).await;
    gateway_and_route(&client, ns, 443).await;
    let mut web = service(ns, "web", 443);
    if let Some(ports) = web.spec.as_mut().and_then(|s| s.ports.as_mut()) {
        for (name, port) in SECTIONS {
            let mut p = ports[0].clone();
            p.name = Some(name.into());
            p.port = port;
            ports.push(p);
        }
    }
    put(&Api::<Service>::namespaced(client.clone(), ns), &web).await;
    let backends: Vec<(&str, &str, i32)> = std::iter::once(443)
        .chain(SECTIONS.iter().map(|(_, p)| *p))
        .map(|p| (ns, "web", p))
        .collect();
    put(
        &Api::<HttpRoute>::namespaced(client.clone(), ns),
        &route(ns, "route", "gw", &backends),
    )
    .await;
    put(
        &Api::<ConfigMap>::namespaced(client.clone(), ns),
        &ca_config_map(ns, "ca", &ca_pem()),
    )
    .await;
    client
}

/// A `caCertificateRefs` list naming one object of `kind`.
fn refs(kind: &str, name: &str) -> Value {
    json!([{"group": "", "kind": kind, "name": name}])
}

/// Waits until our ancestor entry for `gw` on policy `name` says `t`=`st` (`reason`).
async fn expect(
    api: &Api<BackendTlsPolicy>,
    controller: &str,
    name: &str,
    t: &str,
    st: &str,
    reason: &str,
) {
    let c = controller.to_string();
    let (t2, st2, r2) = (t.to_string(), st.to_string(), reason.to_string());
    wait_for(api, name, &format!("{t}={st} ({reason})"), move |p| {
        policy_says(p, &c, "gw", &t2, &st2, &r2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_tls_policies_get_the_spec_reasons() {
    let ns = "btls-reasons";
    let controller = "gateway-leader.dev/btls-reasons";
    let client = scene(ns, controller).await;
    let policies: Api<BackendTlsPolicy> = Api::namespaced(client.clone(), ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let empty: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "malformed", "namespace": ns}, "data": {}
    }))
    .expect("config map");
    put(&config_maps, &empty).await;
    // Each on its own sectionName of `web`, so that only the pair meant to conflict does.
    let cases = [
        ("a-good", None, refs("ConfigMap", "ca")),
        ("b-conflicted", None, refs("ConfigMap", "ca")),
        ("nonexistent", Some("s1"), refs("ConfigMap", "later")),
        ("malformed", Some("s2"), refs("ConfigMap", "malformed")),
        ("invalid-kind", Some("s3"), refs("Secret", "ca")),
    ];
    for (name, section, r) in cases {
        put(&policies, &backend_tls_policy(ns, name, "web", section, r)).await;
    }
    // A port the Service does not have: the target does not exist.
    put(
        &policies,
        &backend_tls_policy(ns, "no-port", "web", Some("s9"), refs("ConfigMap", "ca")),
    )
    .await;
    // A set of well-known CAs this controller does not know.
    let mut custom = backend_tls_policy(ns, "custom-cas", "web", Some("s4"), json!([]));
    custom.spec.validation.ca_certificate_refs = None;
    custom.spec.validation.well_known_ca_certificates = Some("example.com/cas".into());
    put(&policies, &custom).await;
    let args = replica_args(apiserver().await.kubeconfig_path(), ns, controller);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = Replica::start("btls-a", &args);
    blocking(|| a.wait_for(message::LEADING, PATIENCE));

    let p = &policies;
    let c = controller;
    expect(p, c, "a-good", "Accepted", "True", "Accepted").await;
    expect(p, c, "a-good", "ResolvedRefs", "True", "ResolvedRefs").await;
    // Created after `a-good` (or in the same second, and later by name): `a-good` takes precedence.
    expect(p, c, "b-conflicted", "Accepted", "False", "Conflicted").await;
    for name in ["nonexistent", "malformed"] {
        expect(p, c, name, "Accepted", "False", "NoValidCACertificate").await;
        expect(
            p,
            c,
            name,
            "ResolvedRefs",
            "False",
            "InvalidCACertificateRef",
        )
        .await;
    }
    expect(
        p,
        c,
        "invalid-kind",
        "Accepted",
        "False",
        "NoValidCACertificate",
    )
    .await;
    expect(p, c, "invalid-kind", "ResolvedRefs", "False", "InvalidKind").await;
    expect(p, c, "custom-cas", "Accepted", "False", "Invalid").await;
    expect(p, c, "no-port", "Accepted", "False", "TargetNotFound").await;

    // The missing ConfigMap appears: the ConfigMap watch sees it.
    put(&config_maps, &ca_config_map(ns, "later", &ca_pem())).await;
    expect(p, c, "nonexistent", "ResolvedRefs", "True", "ResolvedRefs").await;
    expect(p, c, "nonexistent", "Accepted", "True", "Accepted").await;

    // The route stops reaching `web`: our ancestor entries go, and only ours.
    put(
        &Api::<HttpRoute>::namespaced(client, ns),
        &route(ns, "route", "gw", &[(ns, "elsewhere", 443)]),
    )
    .await;
    wait_for(p, "a-good", "no ancestor of ours", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| !s.ancestors.iter().any(|a| a.controller_name == controller))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_in_the_middle_of_changes_to_backend_tls_policies_loses_none() {
    let ns = "btls-takeover";
    let controller = "gateway-leader.dev/btls-takeover";
    let client = scene(ns, controller).await;
    let policies: Api<BackendTlsPolicy> = Api::namespaced(client.clone(), ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client, ns);
    put(
        &policies,
        &backend_tls_policy(ns, "p", "web", Some("s1"), refs("ConfigMap", "ca")),
    )
    .await;
    put(
        &policies,
        &backend_tls_policy(ns, "q", "web", Some("s2"), refs("ConfigMap", "ca")),
    )
    .await;
    let args = replica_args(apiserver().await.kubeconfig_path(), ns, controller);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = Replica::start("btls-ta", &args);
    blocking(|| a.wait_for(message::LEADING, PATIENCE));
    let mut b = Replica::start("btls-tb", &args);
    blocking(|| b.wait_for(message::FOLLOWING, PATIENCE));
    let (p, c) = (&policies, controller);
    expect(p, c, "p", "Accepted", "True", "Accepted").await;
    expect(p, c, "q", "Accepted", "True", "Accepted").await;

    // Crash the leader and change the policies while nobody may write (the lease runs 3 s),
    // then once more while the follower takes over.
    drop(a);
    put(
        p,
        &backend_tls_policy(ns, "p", "web", Some("s1"), refs("Secret", "ca")),
    )
    .await;
    put(
        p,
        &backend_tls_policy(ns, "z", "web", Some("s2"), refs("ConfigMap", "ca")),
    )
    .await;
    blocking(|| b.wait_for(message::LEADING, PATIENCE));
    config_maps
        .delete("ca", &Default::default())
        .await
        .expect("deleting the ConfigMap");
    expect(p, c, "p", "ResolvedRefs", "False", "InvalidKind").await;
    expect(p, c, "z", "Accepted", "False", "Conflicted").await;
    expect(
        p,
        c,
        "q",
        "ResolvedRefs",
        "False",
        "InvalidCACertificateRef",
    )
    .await;
    expect(p, c, "q", "Accepted", "False", "NoValidCACertificate").await;
    for name in ["p", "q", "z"] {
        let managers = status_managers(&p.get(name).await.expect("policy"));
        assert!(
            managers.contains(&manager_of("btls-tb")),
            "{name}: the new leader wrote it: {managers:?}"
        );
    }
}
