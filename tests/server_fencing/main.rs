//! The server-side fence (`deploy/components/server-fencing`) on a real kube-apiserver: the
//! policy and binding as kustomize renders them for a test namespace, the base's RBAC for the
//! service account, Pod objects (no kubelet runs them) and a pod-bound token for each, minted
//! with the TokenRequest API as a kubelet mints a pod's, so that every request names its pod.
//!
//! The policy is cluster-wide and, while its Lease is missing, refuses every write it matches
//! whoever sends it: these tests run on an apiserver of their own (never an existing cluster's),
//! one at a time.

#[path = "../common/mod.rs"]
mod common;

mod client_go;
mod replicas;
mod writes;

use std::time::Duration;

use common::deploy::{one, render_component_in};
use common::gateway::*;
use common::Replica;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};
use testkit::kube::KubeApiServer;
use tokio::sync::{Mutex, OnceCell};

/// The base's ServiceAccount, which the policy's match condition names.
const SA: &str = "gateway-leader";
/// The Lease the binding names: the binary's default lock name.
const LEASE: &str = gateway_leader::config::DEFAULT_LOCK_NAME;

/// An apiserver of these tests' own, with the Gateway API CRDs and [`KEEPER`].
async fn server() -> &'static KubeApiServer {
    static SERVER: OnceCell<KubeApiServer> = OnceCell::const_new();
    SERVER
        .get_or_try_init(|| async {
            let s = KubeApiServer::start_local().await?;
            s.install_gateway_api().await?;
            let keeper: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": KEEPER},
                "spec": {
                    "paramKind": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"},
                    "matchConstraints": {"resourceRules": [{
                        "apiGroups": ["gateway-leader.test"], "apiVersions": ["*"],
                        "operations": ["CREATE"], "resources": ["nothing"]}]},
                    "validations": [{"expression": "true"}],
                },
            }))?;
            Api::<DynamicObject>::all_with(
                s.admin_client(),
                &admission("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
            )
            .create(&PostParams::default(), &keeper)
            .await?;
            // Only a bound policy keeps the cache: bound to a Lease that need not exist.
            let binding: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": KEEPER},
                "spec": {"policyName": KEEPER, "validationActions": ["Deny"],
                         "paramRef": {"name": KEEPER, "namespace": "default",
                                      "parameterNotFoundAction": "Allow"}},
            }))?;
            Api::<DynamicObject>::all_with(
                s.admin_client(),
                &admission(
                    "ValidatingAdmissionPolicyBinding",
                    "validatingadmissionpolicybindings",
                ),
            )
            .create(&PostParams::default(), &binding)
            .await?;
            anyhow::Ok(s)
        })
        .await
        .expect("a local kube-apiserver (scripts/build-kube-apiserver.sh builds it)")
}

/// A bound policy with a Lease parameter that lives as long as the server. kube-apiserver
/// v1.32 starts its cache of Leases for the first bound policy that takes one and stops it when
/// none is bound any more, and never starts it again: a binding made after that never sees a
/// Lease change (docs/kubernetes.md, "Server-side fencing"). The tests delete theirs; this one
/// keeps the cache running.
const KEEPER: &str = "gateway-leader-test-keeps-the-lease-cache";

/// One test at a time: a binding whose Lease a test deletes refuses every test's status writes.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn admission(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        plural,
    )
}

/// How a status write ended.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Admitted; the route's new resourceVersion.
    Written(String),
    /// Refused by the apiserver with 403 and this message.
    Refused(String),
}

/// A test namespace with the fence bound to its Lease, the base's RBAC for its service account,
/// and a Gateway and an HTTPRoute whose status the tests write.
struct Fenced {
    server: &'static KubeApiServer,
    ns: String,
    admin: Client,
    routes: Api<HttpRoute>,
    policy: String,
    binding: String,
}

impl Fenced {
    async fn new(name: &str) -> Fenced {
        let server = server().await;
        let ns = format!("fence-{name}");
        server.create_namespace(&ns).await.expect("namespace");
        let admin = server.admin_client();
        // Creates the ServiceAccount too.
        server
            .service_account_token(&ns, SA)
            .await
            .expect("the service account");
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
        for file in [
            base.join("rbac-leader-election.yaml"),
            base.join("rbac-status-writer.yaml"),
            base.join("../components/server-fencing/rbac-fencing-check.yaml"),
        ] {
            testkit::rbac::bind_manifest(server, &file, &ns, SA)
                .await
                .unwrap_or_else(|e| panic!("binding {}: {e:#}", file.display()));
        }
        put(
            &Api::all(admin.clone()),
            &gateway_class(&ns, &format!("fence.dev/{ns}")),
        )
        .await;
        put(
            &Api::namespaced(admin.clone(), &ns),
            &gateway(&ns, "gw", &ns),
        )
        .await;
        put(
            &Api::<Service>::namespaced(admin.clone(), &ns),
            &service(&ns, "web", 80),
        )
        .await;
        let routes: Api<HttpRoute> = Api::namespaced(admin.clone(), &ns);
        put(&routes, &route(&ns, "route", "gw", &[(&ns, "web", 80)])).await;
        let objects = render_component_in("server-fencing", &ns);
        let policy = one(&objects, "ValidatingAdmissionPolicy").clone();
        let binding = one(&objects, "ValidatingAdmissionPolicyBinding").clone();
        assert_eq!(binding["spec"]["paramRef"]["namespace"], ns.as_str());
        assert_eq!(binding["spec"]["paramRef"]["name"], LEASE);
        let f = Fenced {
            server,
            policy: policy["metadata"]["name"].as_str().expect("name").into(),
            binding: binding["metadata"]["name"].as_str().expect("name").into(),
            ns,
            admin,
            routes,
        };
        f.create_cluster_scoped(
            &policy,
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
        )
        .await;
        f.bind().await;
        f
    }

    async fn create_cluster_scoped(&self, obj: &Value, kind: &str, plural: &str) {
        let api: Api<DynamicObject> = Api::all_with(self.admin.clone(), &admission(kind, plural));
        let mut obj = obj.clone();
        // kustomize gives every kind it does not know a namespace; these are cluster-scoped.
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        let obj: DynamicObject = serde_json::from_value(obj).expect("an object");
        api.create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("creating {kind}: {e}"));
    }

    /// Creates the binding (again).
    async fn bind(&self) {
        let objects = render_component_in("server-fencing", &self.ns);
        let binding = one(&objects, "ValidatingAdmissionPolicyBinding").clone();
        self.create_cluster_scoped(
            &binding,
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        )
        .await;
    }

    /// Deletes the binding: the policy then fences nothing.
    async fn unbind(&self) {
        let api: Api<DynamicObject> = Api::all_with(
            self.admin.clone(),
            &admission(
                "ValidatingAdmissionPolicyBinding",
                "validatingadmissionpolicybindings",
            ),
        );
        api.delete(&self.binding, &DeleteParams::default())
            .await
            .expect("deleting the binding");
    }

    /// Removes this test's policy and binding, so that nothing of it fences later tests.
    async fn remove(self) {
        let bindings: Api<DynamicObject> = Api::all_with(
            self.admin.clone(),
            &admission(
                "ValidatingAdmissionPolicyBinding",
                "validatingadmissionpolicybindings",
            ),
        );
        let _ = bindings
            .delete(&self.binding, &DeleteParams::default())
            .await;
        let policies: Api<DynamicObject> = Api::all_with(
            self.admin.clone(),
            &admission("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
        );
        let _ = policies
            .delete(&self.policy, &DeleteParams::default())
            .await;
    }

    /// A Pod object `name` that runs as the service account, and a one-hour token bound to it:
    /// what a kubelet would mount in that pod. Returns the token.
    async fn pod_token(&self, name: &str) -> String {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), &self.ns);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": &self.ns},
            "spec": {"serviceAccountName": SA,
                     "containers": [{"name": "gateway-leader", "image": "gateway-leader:latest"}]}
        }))
        .expect("a Pod");
        let pod = pods
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("creating Pod {name}: {e}"));
        self.server
            .service_account_token_with(
                &self.ns,
                SA,
                json!({
                    "expirationSeconds": 3600,
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                       "name": name, "uid": pod.uid()},
                }),
            )
            .await
            .expect("a pod-bound token")
    }

    /// A plain client that sends `token`, with none of gateway-leader's checks in its way: what
    /// a deposed leader's buggy or frozen process, or another controller, may send.
    fn raw_client(&self, token: &str) -> Client {
        self.server
            .client_for_token(token)
            .expect("a client for the token")
    }

    /// Sets the Lease's holder (`None`: released), creating the Lease if need be.
    async fn hold(&self, client: &Client, holder: Option<&str>) {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.ns);
        let body = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": &self.ns},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        });
        match leases.get_opt(LEASE).await.expect("reading the Lease") {
            None => {
                let lease: Lease = serde_json::from_value(body).expect("a Lease");
                leases
                    .create(&PostParams::default(), &lease)
                    .await
                    .expect("creating the Lease");
            }
            // As the elector does: a PUT with the resourceVersion it read.
            Some(mut lease) => {
                lease.spec = serde_json::from_value(body["spec"].clone()).expect("a spec");
                leases
                    .replace(LEASE, &PostParams::default(), &lease)
                    .await
                    .expect("updating the Lease (its writes are not fenced)");
            }
        }
    }

    async fn delete_lease(&self) {
        let leases: Api<Lease> = Api::namespaced(self.admin.clone(), &self.ns);
        leases
            .delete(LEASE, &DeleteParams::default())
            .await
            .expect("deleting the Lease");
    }

    /// The route's resourceVersion as the server has it.
    async fn route_version(&self) -> String {
        version(&self.routes.get("route").await.expect("the route"))
    }

    /// Writes the route's status through `client` as the status writer does (a PUT of the
    /// status subresource with the resourceVersion just read), a condition message saying `tag`.
    async fn write(&self, client: &Client, tag: &str) -> Outcome {
        let routes: Api<HttpRoute> = Api::namespaced(client.clone(), &self.ns);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let current = self.routes.get("route").await.expect("the route");
            let mut body = serde_json::to_value(&current).expect("json");
            body["status"] = json!({"parents": [{
                "parentRef": {"name": "gw"},
                "controllerName": format!("fence.dev/{}", self.ns),
                "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                "message": tag, "lastTransitionTime": "2026-01-01T00:00:00Z",
                                "observedGeneration": 1}],
            }]});
            let body: HttpRoute = serde_json::from_value(body).expect("a route");
            match routes
                .replace_status("route", &PostParams::default(), &body)
                .await
            {
                Ok(r) => return Outcome::Written(version(&r)),
                // A denial (403), or the binding's failure to find its Lease (422).
                Err(kube::Error::Api(e))
                    if (e.code == 403 || e.code == 422) && e.message.contains("denied request") =>
                {
                    return Outcome::Refused(e.message)
                }
                // Someone wrote in between, or a new grant has not reached the authorizer's
                // cache yet: again.
                Err(kube::Error::Api(e))
                    if (e.code == 409 || e.code == 403)
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("writing the route's status ({tag}): {e}"),
            }
        }
    }

    /// Writes until the outcome is of the kind `want` expects (the policy reads the Lease from its
    /// own watch, which may lag a moment behind the Lease's last change); returns it.
    async fn write_until(&self, client: &Client, tag: &str, refused: bool) -> Outcome {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let out = self.write(client, tag).await;
            if matches!(out, Outcome::Refused(_)) == refused {
                return out;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{tag}: still {out:?} after {PATIENCE:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Expects `client`'s write to be refused, naming `pod`, and the route unchanged.
    async fn refused(&self, client: &Client, pod: &str, holder: &str, tag: &str) -> String {
        // Until the policy's copy of the Lease has the last change, a write may still pass, or
        // be refused because the copy has no Lease yet ("no params found").
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            match self.write_until(client, tag, true).await {
                Outcome::Refused(m) if m.contains("server-side fencing") => break,
                other => assert!(
                    tokio::time::Instant::now() < deadline,
                    "{tag}: still {other:?} after {PATIENCE:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let before = self.route_version().await;
        let Outcome::Refused(message) = self.write(client, tag).await else {
            panic!("{tag}: admitted after a refusal")
        };
        for part in [
            format!("pod {pod} "),
            format!("the Lease {}/{LEASE}", self.ns),
            format!("(holder: {holder})"),
            "httproutes/status".to_string(),
            format!("'{}'", self.policy),
        ] {
            assert!(message.contains(&part), "{tag}: {part:?} in {message:?}");
        }
        assert_eq!(
            self.route_version().await,
            before,
            "{tag}: a refused write changes nothing"
        );
        message
    }

    /// Expects `client`'s write to be admitted; returns the new resourceVersion.
    async fn admitted(&self, client: &Client, tag: &str) -> String {
        let Outcome::Written(v) = self.write_until(client, tag, false).await else {
            unreachable!()
        };
        let r = self.routes.get("route").await.expect("the route");
        assert_eq!(version(&r), v, "{tag}: the server holds the write");
        let said = r.status.as_ref().and_then(|s| s.parents.first()).map(|p| {
            p.conditions
                .first()
                .map(|c| c.message.clone())
                .unwrap_or_default()
        });
        assert_eq!(said.as_deref(), Some(tag), "{tag}: the status is ours");
        v
    }
}
