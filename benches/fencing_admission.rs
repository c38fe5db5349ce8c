//! What the server-side fence costs a status write: `PUT .../httproutes/<name>/status` with a
//! pod-bound token, timed on the client, with the policy bound to the writer's Lease and without,
//! on one throwaway kube-apiserver.
//!
//! Blocks of `BLOCK` writes alternate between the two (the binding created or deleted between
//! blocks, and each block started only once a write by a pod that does not hold the Lease shows
//! the binding in force, or not), `BLOCKS` blocks each (default 10 of 50). Prints the median, p90
//! and p99 of each.
//!
//! Run: `cargo bench --bench fencing_admission` (`GATEWAY_LEADER_KUBE_VERSION=oldest` for
//! v1.32).

use std::time::Duration;

use gateway_api::httproutes::HttpRoute;
use gateway_leader::fencing::{render, FencingPolicyArgs};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use testkit::kube::KubeApiServer;
use tokio::time::Instant;

const NS: &str = "fencing-bench";
const SA: &str = "gateway-leader";
const LEASE: &str = gateway_leader::config::DEFAULT_LOCK_NAME;
const LIMIT: Duration = Duration::from_secs(90);

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn admission(kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::all_with(
        CLIENT.get().expect("the admin client").clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            plural,
        ),
    )
}

static CLIENT: std::sync::OnceLock<Client> = std::sync::OnceLock::new();

/// A Pod object `name` of the service account and a token bound to it.
async fn pod_client(server: &KubeApiServer, admin: &Client, name: &str) -> Client {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
        "spec": {"serviceAccountName": SA, "containers": [{"name": "c", "image": "x"}]}
    }))
    .expect("a Pod");
    let pod = Api::<Pod>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &pod)
        .await
        .expect("the Pod");
    let token = server
        .service_account_token_with(
            NS,
            SA,
            json!({"expirationSeconds": 3600,
                   "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name,
                                      "uid": pod.uid()}}),
        )
        .await
        .expect("a pod-bound token");
    server.client_for_token(&token).expect("a client")
}

/// One status PUT through `client` from `route`; the new route, or the refusal's code.
async fn put(client: &Client, route: &HttpRoute, n: usize) -> Result<HttpRoute, u16> {
    let mut body = serde_json::to_value(route).expect("json");
    body["status"] = json!({"parents": [{
        "parentRef": {"name": "gw"}, "controllerName": "bench.dev/fencing",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                        "message": format!("write {n}"),
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}],
    }]});
    let body: HttpRoute = serde_json::from_value(body).expect("a route");
    match Api::<HttpRoute>::namespaced(client.clone(), NS)
        .replace_status("route", &PostParams::default(), &body)
        .await
    {
        Ok(r) => Ok(r),
        Err(kube::Error::Api(e)) => Err(e.code),
        Err(e) => panic!("a status write: {e}"),
    }
}

/// Waits until a write by `other` (who does not hold the Lease) is refused (`fenced`) or not.
async fn settle(other: &Client, admin: &Client, fenced: bool) {
    let deadline = Instant::now() + LIMIT;
    let routes: Api<HttpRoute> = Api::namespaced(admin.clone(), NS);
    loop {
        let route = routes.get("route").await.expect("the route");
        match put(other, &route, 0).await {
            Err(403) if fenced => return,
            Ok(_) if !fenced => return,
            _ => {}
        }
        assert!(Instant::now() < deadline, "the fence did not settle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn summary(label: &str, mut d: Vec<Duration>) {
    d.sort();
    let at = |q: f64| {
        let i = ((d.len() as f64 - 1.0) * q).round() as usize;
        d[i].as_secs_f64() * 1000.0
    };
    println!(
        "{label:<16} n={:<5} p50={:.2} ms  p90={:.2} ms  p99={:.2} ms",
        d.len(),
        at(0.5),
        at(0.9),
        at(0.99)
    );
}

async fn run() {
    let blocks = env_usize("BLOCKS", 10);
    let block = env_usize("BLOCK", 50);
    let server = KubeApiServer::start_local()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh)");
    server.install_gateway_api().await.expect("the CRDs");
    let admin = server.admin_client();
    let _ = CLIENT.set(admin.clone());
    server.create_namespace(NS).await.expect("namespace");
    server
        .service_account_token(NS, SA)
        .await
        .expect("the account");
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
    testkit::rbac::bind_manifest(&server, &base.join("rbac-status-writer.yaml"), NS, SA)
        .await
        .expect("RBAC");
    for (kind, plural, body) in [
        (
            "GatewayClass",
            "gatewayclasses",
            json!({"apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass", "metadata": {"name": NS},
            "spec": {"controllerName": "bench.dev/fencing"}}),
        ),
        (
            "Gateway",
            "gateways",
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": NS},
            "spec": {"gatewayClassName": NS,
                     "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}),
        ),
        (
            "HTTPRoute",
            "httproutes",
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "route", "namespace": NS},
            "spec": {"parentRefs": [{"name": "gw"}]}}),
        ),
    ] {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", kind),
            plural,
        );
        let api: Api<DynamicObject> = if kind == "GatewayClass" {
            Api::all_with(admin.clone(), &ar)
        } else {
            Api::namespaced_with(admin.clone(), NS, &ar)
        };
        let obj: DynamicObject = serde_json::from_value(body).expect("an object");
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("creating the {kind}: {e}"));
    }
    let holder = pod_client(&server, &admin, "holder").await;
    let other = pod_client(&server, &admin, "other").await;
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEASE, "namespace": NS},
        "spec": {"holderIdentity": "holder_5f3c9e1a", "leaseDurationSeconds": 15},
    }))
    .expect("a Lease");
    Api::<Lease>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &lease)
        .await
        .expect("the Lease");
    let yaml = render(&FencingPolicyArgs {
        lock_name: LEASE.into(),
        namespace: NS.into(),
        service_account: SA.into(),
        service_account_namespace: None,
        resources: Vec::new(),
    })
    .expect("the policy");
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| {
            serde_json::to_value(
                <serde_yaml::Value as serde::Deserialize>::deserialize(d).expect("YAML"),
            )
            .expect("JSON")
        })
        .collect();
    let as_obj = |v: &Value| -> DynamicObject { serde_json::from_value(v.clone()).expect("obj") };
    admission("ValidatingAdmissionPolicy", "validatingadmissionpolicies")
        .create(&PostParams::default(), &as_obj(&docs[0]))
        .await
        .expect("the policy");
    let bindings = admission(
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    );
    let binding = docs[1]["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let mut n = 0;
    for b in 0..blocks * 2 {
        let fenced = b % 2 == 1;
        if fenced {
            bindings
                .create(&PostParams::default(), &as_obj(&docs[1]))
                .await
                .expect("the binding");
        } else if b > 0 {
            bindings
                .delete(&binding, &DeleteParams::default())
                .await
                .expect("deleting the binding");
        }
        settle(&other, &admin, fenced).await;
        let mut route = Api::<HttpRoute>::namespaced(admin.clone(), NS)
            .get("route")
            .await
            .expect("route");
        for _ in 0..block {
            n += 1;
            let started = Instant::now();
            route = put(&holder, &route, n).await.expect("the holder's write");
            let took = started.elapsed();
            if fenced { &mut with } else { &mut without }.push(took);
        }
    }
    println!(
        "status PUT by the Lease's holder (pod-bound token), {blocks} alternating blocks of \
         {block}, kube-apiserver {}:",
        std::env::var("GATEWAY_LEADER_KUBE_VERSION").unwrap_or_else(|_| "newest".into())
    );
    summary("without fence", without);
    summary("with fence", with);
}
