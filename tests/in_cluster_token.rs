//! A pod's service-account token is short-lived and rotated: the kubelet mints a bound token with
//! the TokenRequest API and swaps it into the projected volume before the old one expires. A
//! replica must pick up the new file and keep leading once the old token is refused.
//!
//! The tokens here are minted with TokenRequest for 10 minutes (its minimum) and bound to a
//! Secret each, so that the old one can be refused at once by deleting its Secret instead of
//! waiting out its expiry. The apiserver's audit log says which token each request carried (its
//! `credential-id`, the token's `jti`), so the old token is refused only once the server has seen
//! the replica use the new one.

mod common;

use gateway_leader_log::message;
use std::time::Duration;

use base64::Engine as _;
use common::gateway::*;
use common::in_cluster::*;
use common::{blocking, Replica};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde_json::Value;
use testkit::kube::{KubeApiServer, Options};
use tokio::sync::OnceCell;

/// The Lease the base's replicas hold (the binary's default lock name).
const LEASE: &str = "gateway-leader-leader-election-lock";
/// The shortest expiry TokenRequest accepts, as a kubelet may ask for.
const TEN_MINUTES: i64 = 600;

/// An apiserver of this test's own, with an audit log (no existing cluster gives one).
async fn audited() -> &'static KubeApiServer {
    static SERVER: OnceCell<KubeApiServer> = OnceCell::const_new();
    SERVER
        .get_or_try_init(|| {
            KubeApiServer::start_local_with(Options {
                audit: true,
                ..Options::default()
            })
        })
        .await
        .expect("a local kube-apiserver with an audit log (scripts/build-kube-apiserver.sh)")
}

/// A token for the base's service account, valid for ten minutes and only while Secret
/// `secret` exists; returned with its `jti`.
async fn bound_token(c: &InCluster, secret: &str) -> (String, String) {
    let secrets: Api<Secret> = Api::namespaced(admin(c.server), &c.ns);
    let s: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret, "namespace": &c.ns},
    }))
    .expect("a Secret");
    let s = secrets
        .create(&PostParams::default(), &s)
        .await
        .expect("creating the Secret the token is bound to");
    let spec = serde_json::json!({
        "expirationSeconds": TEN_MINUTES,
        "boundObjectRef": {
            "apiVersion": "v1", "kind": "Secret",
            "name": s.metadata.name, "uid": s.metadata.uid,
        },
    });
    let token = c
        .server
        .service_account_token_with(&c.ns, SA, spec)
        .await
        .expect("a bound token");
    let jti = jti(&token);
    (token, jti)
}

/// The `jti` claim of a JWT, which the apiserver records as `credential-id: JTI=<jti>`.
fn jti(token: &str) -> String {
    let payload = token.split('.').nth(1).expect("a JWT has a payload");
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("the payload is base64url"),
    )
    .expect("the payload is JSON");
    claims["jti"]
        .as_str()
        .expect("a bound token has a jti")
        .to_string()
}

/// How many requests the apiserver answered, by its audit log, for the service account of
/// namespace `ns` carrying the token with `jti`, and with which status codes.
fn audited_uses(server: &KubeApiServer, ns: &str, jti: &str) -> Vec<u64> {
    let user = format!("system:serviceaccount:{ns}:{SA}");
    let credential = format!("JTI={jti}");
    server
        .audit_events()
        .expect("the audit log")
        .iter()
        .filter(|e| e["stage"] == "ResponseComplete" && e["user"]["username"] == user.as_str())
        .filter(|e| {
            e["user"]["extra"]["authentication.kubernetes.io/credential-id"]
                .as_array()
                .is_some_and(|ids| ids.iter().any(|id| id == credential.as_str()))
        })
        .filter_map(|e| e["responseStatus"]["code"].as_u64())
        .collect()
}

/// Waits until the apiserver has answered a request of the replica that carried the token with
/// `jti`.
async fn wait_used(c: &InCluster, jti: &str, what: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while audited_uses(c.server, &c.ns, jti).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the apiserver saw no request with {what} within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The Lease's holder, transitions (our term) and renew time, as the server holds it.
fn lease_state(l: &Lease) -> (String, i32, String) {
    let spec = l.spec.clone().unwrap_or_default();
    (
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or_default(),
        spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_keeps_leading_across_a_rotation_of_its_bound_token() {
    let server = audited().await;
    let c = InCluster::on(server, "token-rotation", rbac(Without::Nothing)).await;
    let (first, first_jti) = bound_token(&c, "token-1").await;
    c.pod.rotate_token(&first);
    let mut a: Replica = c.start("gateway-leader-a");
    blocking(|| a.wait_for(message::LEADING, PATIENCE));
    c.wait_written().await;
    wait_used(&c, &first_jti, "the first token").await;
    let leases: Api<Lease> = Api::namespaced(admin(server), &c.ns);
    let (holder, term, _) = lease_state(&leases.get(LEASE).await.expect("the Lease"));
    assert!(holder.starts_with("gateway-leader-a_"), "{holder}");

    // The kubelet's rotation; the server sees the new token in use before the old one goes.
    let (second, second_jti) = bound_token(&c, "token-2").await;
    c.pod.rotate_token(&second);
    wait_used(&c, &second_jti, "the rotated token").await;
    Api::<Secret>::namespaced(admin(server), &c.ns)
        .delete("token-1", &DeleteParams::default())
        .await
        .expect("deleting the first token's Secret");
    // The first token is refused from now on (a bound token dies with its object).
    let refused = async {
        loop {
            let stale = server.client_for_token(&first).expect("a client");
            match Api::<Lease>::namespaced(stale, &c.ns).get(LEASE).await {
                Err(kube::Error::Api(s)) if s.code == 401 => break,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    };
    tokio::time::timeout(PATIENCE, refused)
        .await
        .expect("the first token is refused once its Secret is gone");

    // Renewals go on, for several lease durations, by the same holder in the same term.
    let mut last = None;
    for _ in 0..8 {
        let lease = tokio::time::timeout(PATIENCE, async {
            loop {
                let l = leases.get(LEASE).await.expect("the Lease");
                if Some(lease_state(&l).2) != last {
                    break l;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await
        .expect("the Lease is renewed");
        let (h, t, renew) = lease_state(&lease);
        assert_eq!((&h, t), (&holder, term), "the same holder, the same term");
        last = Some(renew);
    }
    // A status written after the rotation, with the new token.
    c.route_to_a_missing_service_written_by("gateway-leader-a")
        .await;
    // Never lost, never refused: one leadership from start to end.
    let lines = a.lines();
    let leading = lines
        .iter()
        .filter(|l| l.message() == message::LEADING)
        .count();
    let lost: Vec<_> = lines
        .iter()
        .filter(|l| l.message() == message::FOLLOWING || text(l).contains("Unauthorized"))
        .map(|l| l.json.clone())
        .collect();
    assert!(
        leading == 1 && lost.is_empty(),
        "the leader was refused or lost ({leading} leaderships): {lost:?}"
    );
    // Nothing the replica asked for is deprecated on this apiserver (it marks each such request
    // in its audit log; the newest release is where a removal shows first).
    let user = format!("system:serviceaccount:{}:{SA}", c.ns);
    let deprecated: Vec<String> = server
        .audit_events()
        .expect("the audit log")
        .iter()
        .filter(|e| e["user"]["username"] == user.as_str())
        .filter(|e| e["annotations"]["k8s.io/deprecated"] == "true")
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    assert!(
        deprecated.is_empty(),
        "deprecated APIs used: {deprecated:?}"
    );
    let refused_uses: Vec<u64> = audited_uses(server, &c.ns, &second_jti)
        .into_iter()
        .filter(|code| *code == 401)
        .collect();
    assert!(refused_uses.is_empty(), "{refused_uses:?}");
}
