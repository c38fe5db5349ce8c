//! Listener certificates on a real kube-apiserver with the upstream CRDs (v1.7.0, or v1.5.1
//! beside the oldest apiserver), written by real `gateway-leader run` processes: each
//! certificate reason the spec defines shows on the listener it belongs to, a Secret created,
//! changed or granted later is seen, the GatewayClass lists its supported features, and a
//! takeover in the middle of Secret changes loses none.
//! The cases follow v1.5.1 `conformance/tests/gateway-invalid-tls-configuration.yaml`,
//! `gateway-secret-missing-reference-grant.yaml` and `gateway-secret-reference-grant-*.yaml`.

mod common;

use gateway_leader_log::message;
use std::sync::OnceLock;

use common::blocking;
use common::gateway::*;
use common::Replica;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::{json, Value};

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

/// A self-signed certificate for `*.example.com` and its key, PEM.
fn pem_pair() -> &'static (String, String) {
    static PAIR: OnceLock<(String, String)> = OnceLock::new();
    PAIR.get_or_init(|| {
        let c = rcgen::generate_simple_self_signed(vec!["*.example.com".into()])
            .expect("self-signed certificate");
        (c.cert.pem(), c.signing_key.serialize_pem())
    })
}

/// A Secret of `type_` with these `tls.crt` and `tls.key` (as `stringData`).
fn secret(ns: &str, name: &str, type_: &str, crt: &str, key: &str) -> Secret {
    from_json(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "type": type_,
        "stringData": {"tls.crt": crt, "tls.key": key}
    }))
}

/// A usable TLS Secret.
fn good_secret(ns: &str, name: &str) -> Secret {
    let (crt, key) = pem_pair();
    secret(ns, name, "kubernetes.io/tls", crt, key)
}

/// The conformance suite's malformed Secret: "Hello world" in both keys.
fn malformed_secret(ns: &str, name: &str) -> Secret {
    secret(
        ns,
        name,
        "kubernetes.io/tls",
        "Hello world\n",
        "Hello world\n",
    )
}

/// An HTTPS listener on `port` with these certificateRefs.
fn https(name: &str, port: i32, refs: Value) -> Value {
    json!({"name": name, "protocol": "HTTPS", "port": port, "tls": {"certificateRefs": refs}})
}

fn gateway_with(ns: &str, name: &str, class: &str, listeners: Value) -> Gateway {
    from_json(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"gatewayClassName": class, "listeners": listeners}
    }))
}

/// A ReferenceGrant in `ns` letting Gateways of `from_ns` use its Secrets.
fn grant_secrets(ns: &str, name: &str, from_ns: &str) -> ReferenceGrant {
    from_json(json!({
        "apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                           "namespace": from_ns}],
                 "to": [{"group": "", "kind": "Secret"}]}
    }))
}

/// What one listener must say: ResolvedRefs's status and reason, and whether it is programmed.
type Want = (&'static str, &'static str, &'static str, bool);

/// True when every listener named in `want` has that ResolvedRefs and Programmed.
fn listeners_say(g: &Gateway, want: &[Want]) -> bool {
    let Some(ls) = g.status.as_ref().and_then(|s| s.listeners.as_deref()) else {
        return false;
    };
    want.iter().all(|(name, status, reason, programmed)| {
        ls.iter().find(|l| l.name == *name).is_some_and(|l| {
            condition(&l.conditions, "ResolvedRefs")
                .is_some_and(|c| c.status == *status && c.reason == *reason)
                && condition(&l.conditions, "Programmed")
                    .is_some_and(|c| (c.status == "True") == *programmed)
        })
    })
}

/// Waits until the Gateway's listeners say `want`.
async fn wait_listeners(api: &Api<Gateway>, name: &str, what: &str, want: &'static [Want]) {
    wait_for(api, name, what, move |g| listeners_say(g, want)).await;
}

/// One namespace (plus `<ns>-certs` for cross-namespace Secrets) with our GatewayClass.
struct Scene {
    ns: String,
    certs_ns: String,
    controller: String,
    args: Vec<String>,
    classes: Api<GatewayClass>,
    gateways: Api<Gateway>,
    secrets: Api<Secret>,
    certs_secrets: Api<Secret>,
    certs_grants: Api<ReferenceGrant>,
}

impl Scene {
    async fn new(test: &str) -> Scene {
        let s = apiserver().await;
        let ns = format!("tls-{test}");
        let certs_ns = format!("{ns}-certs");
        for n in [&ns, &certs_ns] {
            s.create_namespace(n).await.expect("namespace");
        }
        let client = admin(s);
        let controller = format!("gateway-leader.dev/{ns}");
        let scene = Scene {
            args: replica_args(s.kubeconfig_path(), &ns, &controller),
            classes: Api::all(client.clone()),
            gateways: Api::namespaced(client.clone(), &ns),
            secrets: Api::namespaced(client.clone(), &ns),
            certs_secrets: Api::namespaced(client.clone(), &certs_ns),
            certs_grants: Api::namespaced(client, &certs_ns),
            controller,
            ns,
            certs_ns,
        };
        put(&scene.classes, &gateway_class(&scene.ns, &scene.controller)).await;
        scene
    }

    fn start(&self, name: &str, extra: &[&str]) -> Replica {
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        Replica::start(name, &args)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_certificate_problem_gets_its_spec_reason_and_a_fix_is_seen() {
    let scene = Scene::new("reasons").await;
    let (ns, certs) = (scene.ns.as_str(), scene.certs_ns.as_str());
    let (crt, key) = pem_pair();
    put(&scene.secrets, &good_secret(ns, "good")).await;
    put(&scene.secrets, &secret(ns, "opaque", "Opaque", crt, key)).await;
    // The apiserver insists that a kubernetes.io/tls Secret has both keys, but not that they
    // hold anything.
    put(
        &scene.secrets,
        &secret(ns, "empty-key", "kubernetes.io/tls", crt, ""),
    )
    .await;
    put(&scene.secrets, &malformed_secret(ns, "malformed")).await;
    put(&scene.certs_secrets, &good_secret(certs, "elsewhere")).await;
    let listeners = json!([
        https("good", 443, json!([{"name": "good"}])),
        https("missing", 444, json!([{"group": "", "kind": "Secret", "name": "later"}])),
        https("opaque", 445, json!([{"name": "opaque"}])),
        https("empty-key", 446, json!([{"name": "empty-key"}])),
        https("malformed", 447, json!([{"name": "malformed"}])),
        https(
            "group",
            448,
            json!([{"group": "wrong.group.company.io", "kind": "Secret", "name": "good"}]),
        ),
        https("kind", 449, json!([{"group": "", "kind": "WrongKind", "name": "good"}])),
        https("cross", 450, json!([{"name": "elsewhere", "namespace": certs}])),
        {"name": "tls-terminate", "protocol": "TLS", "port": 451,
         "tls": {"mode": "Terminate", "certificateRefs": [{"name": "good"}]}},
        {"name": "tls-passthrough", "protocol": "TLS", "port": 452, "tls": {"mode": "Passthrough"}},
    ]);
    put(&scene.gateways, &gateway_with(ns, "gw", ns, listeners)).await;
    let _replica = scene.start("tls-reasons-a", &["--leader-election-disable"]);

    const BEFORE: &[Want] = &[
        ("good", "True", "ResolvedRefs", true),
        ("missing", "False", "InvalidCertificateRef", false),
        ("opaque", "False", "InvalidCertificateRef", false),
        ("empty-key", "False", "InvalidCertificateRef", false),
        ("malformed", "False", "InvalidCertificateRef", false),
        ("group", "False", "InvalidCertificateRef", false),
        ("kind", "False", "InvalidCertificateRef", false),
        ("cross", "False", "RefNotPermitted", false),
        ("tls-terminate", "True", "ResolvedRefs", true),
        ("tls-passthrough", "True", "ResolvedRefs", true),
    ];
    wait_listeners(&scene.gateways, "gw", "each listener's reason", BEFORE).await;
    // The messages say which reference and why.
    let g = scene.gateways.get("gw").await.expect("gateway");
    let status = g.status.expect("status");
    let message = |name: &str| {
        let l = status
            .listeners
            .iter()
            .flatten()
            .find(|l| l.name == name)
            .expect("listener");
        condition(&l.conditions, "ResolvedRefs")
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    assert!(
        message("missing").contains("not found"),
        "{}",
        message("missing")
    );
    assert!(
        message("opaque").contains("Opaque"),
        "{}",
        message("opaque")
    );
    assert!(
        message("empty-key").contains("tls.key"),
        "{}",
        message("empty-key")
    );
    assert!(
        message("malformed").contains("tls.crt"),
        "{}",
        message("malformed")
    );
    // The Gateway is accepted for its valid listeners, and says which are not.
    let accepted = condition(status.conditions.as_deref().unwrap_or_default(), "Accepted")
        .expect("Accepted")
        .clone();
    assert_eq!(
        (accepted.status.as_str(), accepted.reason.as_str()),
        ("True", "ListenersNotValid")
    );
    // The class lists what it supports, sorted by name.
    let gc = scene.classes.get(ns).await.expect("class");
    let features: Vec<String> = gc
        .status
        .and_then(|s| s.supported_features)
        .unwrap_or_default()
        .into_iter()
        .map(|f| f.name)
        .collect();
    // TCPRoute and UDPRoute only where their CRDs are (the v1.6 bundle).
    let v1_6 = testkit::gateway_api::require_v1_6(&admin(apiserver().await))
        .await
        .is_ok();
    let mut expected = vec![
        "BackendTLSPolicy",
        "GRPCRoute",
        "Gateway",
        "HTTPRoute",
        "ListenerSet",
        "ReferenceGrant",
    ];
    if v1_6 {
        expected.push("TCPRoute");
    }
    expected.extend(["TLSRoute", "TLSRouteModeMixed", "TLSRouteModeTerminate"]);
    if v1_6 {
        expected.push("UDPRoute");
    }
    assert_eq!(features, expected);

    // Fixes, each seen through the watches: the missing Secret is created, the malformed one
    // repaired, and a ReferenceGrant lets the cross-namespace reference in.
    put(&scene.secrets, &good_secret(ns, "later")).await;
    put(&scene.secrets, &good_secret(ns, "malformed")).await;
    put(&scene.certs_grants, &grant_secrets(certs, "gateways", ns)).await;
    const AFTER: &[Want] = &[
        ("missing", "True", "ResolvedRefs", true),
        ("malformed", "True", "ResolvedRefs", true),
        ("cross", "True", "ResolvedRefs", true),
        ("opaque", "False", "InvalidCertificateRef", false),
    ];
    wait_listeners(&scene.gateways, "gw", "the fixed listeners resolved", AFTER).await;
    // And a Secret deleted is missing again.
    scene
        .secrets
        .delete("good", &Default::default())
        .await
        .expect("delete");
    const DELETED: &[Want] = &[
        ("good", "False", "InvalidCertificateRef", false),
        ("tls-terminate", "False", "InvalidCertificateRef", false),
        ("tls-passthrough", "True", "ResolvedRefs", true),
    ];
    wait_listeners(&scene.gateways, "gw", "the deleted Secret missing", DELETED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_in_the_middle_of_secret_changes_loses_none() {
    let scene = Scene::new("takeover").await;
    let (ns, certs) = (scene.ns.as_str(), scene.certs_ns.as_str());
    put(&scene.secrets, &good_secret(ns, "two")).await;
    put(&scene.certs_secrets, &good_secret(certs, "three")).await;
    let listeners = json!([
        https("one", 443, json!([{"name": "one"}])),
        https("two", 444, json!([{"name": "two"}])),
        https("three", 445, json!([{"name": "three", "namespace": certs}])),
    ]);
    put(&scene.gateways, &gateway_with(ns, "gw", ns, listeners)).await;
    let mut a = scene.start("tls-takeover-a", &[]);
    blocking(|| a.wait_for(message::LEADING, PATIENCE));
    let mut b = scene.start("tls-takeover-b", &[]);
    blocking(|| b.wait_for(message::FOLLOWING, PATIENCE));
    const START: &[Want] = &[
        ("one", "False", "InvalidCertificateRef", false),
        ("two", "True", "ResolvedRefs", true),
        ("three", "False", "RefNotPermitted", false),
    ];
    wait_listeners(&scene.gateways, "gw", "the first leader's statuses", START).await;

    // One change just before the leader crashes, one while nobody may write (the lease runs
    // 3 s), one once the follower leads: the new leader's statuses reflect all three.
    put(&scene.secrets, &good_secret(ns, "one")).await;
    drop(a);
    put(&scene.secrets, &malformed_secret(ns, "two")).await;
    blocking(|| b.wait_for(message::LEADING, PATIENCE));
    put(&scene.certs_grants, &grant_secrets(certs, "gateways", ns)).await;
    const END: &[Want] = &[
        ("one", "True", "ResolvedRefs", true),
        ("two", "False", "InvalidCertificateRef", false),
        ("three", "True", "ResolvedRefs", true),
    ];
    wait_listeners(
        &scene.gateways,
        "gw",
        "every change after the takeover",
        END,
    )
    .await;
    let g = scene.gateways.get("gw").await.expect("gateway");
    assert!(
        status_managers(&g).contains(&manager_of("tls-takeover-b")),
        "the new leader wrote them: {:?}",
        status_managers(&g)
    );
}
