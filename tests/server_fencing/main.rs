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
            let s = KubeApiServer::start_local_kept().await?;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_pod_that_holds_the_lease_writes_status() {
    let _one = ONE_AT_A_TIME.lock().await;
    let f = Fenced::new("holder").await;
    let (a, b) = (
        f.pod_token("replica-a").await,
        f.pod_token("replica-b").await,
    );
    let (a, b) = (f.raw_client(&a), f.raw_client(&b));
    let holder = "replica-a_5f3c9e1a";
    // The holder takes the Lease with its own token: the Lease's writes are not fenced.
    f.hold(&a, Some(holder)).await;
    f.refused(&b, "replica-b", holder, "b while a holds").await;
    f.admitted(&a, "a while a holds").await;
    // Nor is anyone else's write: the admin, another service account.
    f.admitted(&f.admin, "the admin").await;
    let other = f
        .server
        .service_account_token(&f.ns, "someone-else")
        .await
        .expect("token");
    let grant: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "someone-else", "namespace": &f.ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": format!("gateway-leader-status-writer-{}", f.ns)},
        "subjects": [{"kind": "ServiceAccount", "name": "someone-else", "namespace": &f.ns}],
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(f.admin.clone(), &f.ns)
        .create(&PostParams::default(), &grant)
        .await
        .expect("granting the status writer's rights to another account");
    f.admitted(&f.raw_client(&other), "another service account")
        .await;
    // The holder forms that name pod replica-a, and near misses that must not.
    for (holder, a_may) in [
        ("replica-a", true),
        ("replica-a_0d6f2b7e-1c39-4a5e-9d0b-5b0f6c7e8a91", true),
        ("replica-ab_5f3c9e1a", false),
        ("replica-a_x_5f3c9e1a", false),
        ("replica-a_5F3C9E1A", false),
        ("replica-a_5f3c9e1a0", false),
        ("replica-a-5f3c9e1a", false),
        ("xreplica-a_5f3c9e1a", false),
        ("", false),
    ] {
        f.hold(&f.admin, Some(holder).filter(|h| !h.is_empty()))
            .await;
        let tag = format!("a while {holder:?} holds");
        if a_may {
            f.admitted(&a, &tag).await;
        } else {
            let shown = if holder.is_empty() { "none" } else { holder };
            f.refused(&a, "replica-a", shown, &tag).await;
        }
    }
    // A token that names no pod (as `kubectl create token` makes) never passes.
    let unbound = f
        .server
        .service_account_token(&f.ns, SA)
        .await
        .expect("token");
    f.hold(&f.admin, Some("replica-a_5f3c9e1a")).await;
    let unbound = f.raw_client(&unbound);
    f.write_until(&unbound, "no pod", true).await;
    let before = f.route_version().await;
    let out = f.write(&unbound, "no pod").await;
    assert!(
        matches!(&out, Outcome::Refused(m) if m.contains("a request without a pod-bound token")),
        "{out:?}"
    );
    assert_eq!(f.route_version().await, before);
    f.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_without_its_client_fences_writes_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let f = Fenced::new("deposed").await;
    let (a, b) = (
        f.pod_token("replica-a").await,
        f.pod_token("replica-b").await,
    );
    let (a, b) = (f.raw_client(&a), f.raw_client(&b));
    f.hold(&a, Some("replica-a_11111111")).await;
    f.admitted(&a, "a leads").await;
    // Another replica takes the Lease (with its own token); the old leader, its permits and
    // write gate out of the way, keeps writing as if it still led.
    f.hold(&b, Some("replica-b_22222222")).await;
    // Until the policy's copy of the Lease catches up, a write may still pass: the window the
    // replicas' own checks cover. From the first refusal on, nothing lands.
    f.refused(&a, "replica-a", "replica-b_22222222", "deposed a")
        .await;
    let before = f.route_version().await;
    let mut refusals = 0;
    for i in 0..20 {
        match f.write(&a, &format!("deposed a, try {i}")).await {
            Outcome::Refused(m) => {
                assert!(m.contains("replica-b_22222222"), "{m}");
                refusals += 1;
            }
            Outcome::Written(v) => panic!("try {i}: admitted after a refusal ({v})"),
        }
    }
    assert_eq!(refusals, 20);
    assert_eq!(
        f.route_version().await,
        before,
        "nothing of the deposed leader landed"
    );
    f.admitted(&b, "b leads").await;
    f.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lease_nobody_writes_and_without_the_binding_everyone_does() {
    let _one = ONE_AT_A_TIME.lock().await;
    let f = Fenced::new("gone").await;
    let (a, b) = (
        f.pod_token("replica-a").await,
        f.pod_token("replica-b").await,
    );
    let (a, b) = (f.raw_client(&a), f.raw_client(&b));
    f.hold(&a, Some("replica-a_11111111")).await;
    f.admitted(&a, "a leads").await;
    f.delete_lease().await;
    // The parameter is missing: the apiserver refuses before it looks at who writes, the admin
    // included (docs/kubernetes.md says so).
    for (who, client) in [("a", &a), ("b", &b), ("the admin", &f.admin)] {
        f.write_until(client, &format!("{who}, no Lease"), true)
            .await;
        let before = f.route_version().await;
        let out = f.write(client, &format!("{who}, no Lease")).await;
        assert!(
            matches!(&out, Outcome::Refused(m) if m.contains("no params found")),
            "{who}: {out:?}"
        );
        assert_eq!(f.route_version().await, before, "{who}: nothing landed");
    }
    // Taken again, by b: b writes, a does not.
    f.hold(&b, Some("replica-b_22222222")).await;
    f.admitted(&b, "b took the new Lease").await;
    f.refused(&a, "replica-a", "replica-b_22222222", "a after b took it")
        .await;
    // The binding removed: the policy fences nothing, and a writes again.
    f.unbind().await;
    f.admitted(&a, "a, unbound").await;
    f.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_pod_tokens_lead_and_write_through_the_fence() {
    let _one = ONE_AT_A_TIME.lock().await;
    let f = Fenced::new("replicas").await;
    let controller = format!("fence.dev/{}", f.ns);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut replicas = Vec::new();
    let mut clients = Vec::new();
    for pod in ["replica-a", "replica-b"] {
        let token = f.pod_token(pod).await;
        let kubeconfig = dir.path().join(pod);
        f.server
            .write_token_kubeconfig(&token, &kubeconfig)
            .expect("kubeconfig");
        let args: Vec<String> = [
            "--lock-backend",
            "kubernetes",
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--leader-election-namespace",
            &f.ns,
            "--controller-name",
            &controller,
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        replicas.push(Replica::start(pod, &args));
        clients.push((pod, f.raw_client(&token)));
    }
    // Each says once that the fence is in force (the component's ClusterRole lets it look).
    for r in &mut replicas {
        let line = r.wait_for(FENCE_IN_FORCE, PATIENCE);
        assert_eq!(line.text("binding").as_deref(), Some(f.binding.as_str()));
    }
    // The leader's statuses land: its holder is `<pod>_<incarnation>`, which the policy admits.
    let ctl = controller.clone();
    wait_for(&f.routes, "route", "written by the leader", move |r| {
        route_says(r, &ctl, "ResolvedRefs", "True", "ResolvedRefs")
    })
    .await;
    let holder = testkit::kube::lease_holder(&f.admin, &f.ns, LEASE)
        .await
        .expect("the holder");
    let (leader, follower) = if holder.starts_with("replica-a_") {
        (0, 1)
    } else {
        (1, 0)
    };
    let r = f.routes.get("route").await.expect("route");
    assert!(
        status_managers(&r).contains(&manager_of(clients[leader].0)),
        "the leader wrote: {:?}",
        status_managers(&r)
    );
    // The follower's token cannot write, whatever its process does.
    f.refused(
        &clients[follower].1,
        clients[follower].0,
        &holder,
        "the follower",
    )
    .await;
    // The leader stops; the follower takes over and its writes land.
    replicas[leader].terminate();
    let pod = clients[follower].0;
    put(
        &f.routes,
        &route(&f.ns, "route", "gw", &[(&f.ns, "missing", 80)]),
    )
    .await;
    let ctl = controller.clone();
    wait_for(&f.routes, "route", "written by the new leader", move |r| {
        route_says(r, &ctl, "ResolvedRefs", "False", "BackendNotFound")
    })
    .await;
    let r = f.routes.get("route").await.expect("route");
    assert!(
        status_managers(&r).contains(&manager_of(pod)),
        "the new leader wrote: {:?}",
        status_managers(&r)
    );
    for r in &mut replicas {
        let said = r
            .lines()
            .iter()
            .filter(|l| l.message().starts_with("server-side fencing"))
            .count();
        assert_eq!(said, 1, "{}: said once", r.name);
    }
    drop(replicas);
    f.remove().await;
}

/// What a replica logs when the fence is in force.
const FENCE_IN_FORCE: &str = "server-side fencing: the apiserver admits";
/// What it logs when it is not.
const FENCE_MISSING: &str = "server-side fencing: not in force";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_names_what_the_fence_lacks_once_and_runs_on() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = server().await;
    let ns = "fence-lacking";
    server.create_namespace(ns).await.expect("namespace");
    let token = server.service_account_token(ns, SA).await.expect("token");
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
    for file in ["rbac-leader-election.yaml", "rbac-status-writer.yaml"] {
        testkit::rbac::bind_manifest(server, &base.join(file), ns, SA)
            .await
            .unwrap_or_else(|e| panic!("binding {file}: {e:#}"));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    server
        .write_token_kubeconfig(&token, &kubeconfig)
        .expect("kubeconfig");
    let args = replica_args(&kubeconfig, ns, &format!("fence.dev/{ns}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Without the component's ClusterRole it cannot look, and says so, and leads all the same.
    let mut r = Replica::start("lacking-a", &args);
    let line = r.wait_for(FENCE_MISSING, PATIENCE);
    let missing = line.text("missing").unwrap_or_default();
    assert!(
        missing.contains("cannot list validatingadmissionpolicybindings")
            && missing.contains("gateway-leader-fencing-check"),
        "{missing}"
    );
    r.wait_for(gateway_leader_log::message::LEADING, PATIENCE);
    drop(r);
    // With it, and no binding on this Lease: named too.
    testkit::rbac::bind_manifest(
        server,
        &base.join("../components/server-fencing/rbac-fencing-check.yaml"),
        ns,
        SA,
    )
    .await
    .expect("binding the fencing check's ClusterRole");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let mut r = Replica::start("lacking-b", &args);
        let line = r.wait_for(FENCE_MISSING, PATIENCE);
        let missing = line.text("missing").unwrap_or_default();
        // The new grant may take a moment to reach the authorizer.
        if missing.contains("cannot list") && tokio::time::Instant::now() < deadline {
            continue;
        }
        assert!(missing.contains("this Lease"), "{missing}");
        r.wait_for(gateway_leader_log::message::LEADING, PATIENCE);
        let said = r
            .lines()
            .iter()
            .filter(|l| l.message().starts_with("server-side fencing"))
            .count();
        assert_eq!(said, 1, "said once");
        break;
    }
}

/// A child process stopped (SIGTERM, then waited for) when this goes, also when a test fails.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.0.wait();
    }
}

/// Creates `obj` (a namespaced object as JSON, with its kind) as the admin.
async fn create_json<K>(admin: &Client, obj: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).expect("an object");
    let ns = obj.meta().namespace.clone().expect("a namespace");
    Api::<K>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("creating {obj:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_policy_fences_a_client_go_electors_writes_to_its_own_lease() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::rbac::v1::Role;

    let _one = ONE_AT_A_TIME.lock().await;
    let peers = testkit::built::peers().expect("the Go peers are built (scripts/build-peers.sh)");
    let server = server().await;
    let ns = "fence-client-go";
    server.create_namespace(ns).await.expect("namespace");
    let admin = server.admin_client();
    let (sa, lock, cm) = ("go-controller", "go-controller-lock", "go-controller-state");
    // The policy for that controller's Lease, as an operator would print it: its ConfigMap
    // writes are what is fenced.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gateway-leader"))
        .args([
            "fencing-policy",
            "--lock-name",
            lock,
            "--namespace",
            ns,
            "--service-account",
            sa,
            "--resource",
            "configmaps",
        ])
        .output()
        .expect("fencing-policy runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            serde_json::to_value(
                <serde_yaml::Value as serde::Deserialize>::deserialize(d).expect("YAML"),
            )
            .expect("JSON")
        })
        .collect();
    assert_eq!(docs.len(), 2, "{text}");
    let f = Fenced {
        server,
        ns: ns.to_string(),
        admin: admin.clone(),
        routes: Api::namespaced(admin.clone(), ns),
        policy: docs[0]["metadata"]["name"].as_str().expect("name").into(),
        binding: docs[1]["metadata"]["name"].as_str().expect("name").into(),
    };
    f.create_cluster_scoped(
        &docs[0],
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    )
    .await;
    f.create_cluster_scoped(
        &docs[1],
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    )
    .await;
    // What the Go controller needs: its Lease and its ConfigMap.
    server
        .service_account_token(ns, sa)
        .await
        .expect("the account");
    let _: Role = create_json(
        &admin,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": sa, "namespace": ns},
               "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                          "verbs": ["get", "list", "watch", "create", "update"]},
                         {"apiGroups": [""], "resources": ["configmaps"],
                          "verbs": ["get", "create", "update", "patch"]}]}),
    )
    .await;
    let _: RoleBinding = create_json(
        &admin,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": sa, "namespace": ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
               "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]}),
    )
    .await;
    let pod_token = |pod: &'static str| {
        let f = &f;
        async move {
            let p: Pod = create_json(
                &f.admin,
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": pod, "namespace": ns},
                       "spec": {"serviceAccountName": sa,
                                "containers": [{"name": "c", "image": "go-controller"}]}}),
            )
            .await;
            f.server
                .service_account_token_with(
                    ns,
                    sa,
                    json!({"expirationSeconds": 3600,
                           "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                              "name": pod, "uid": p.uid()}}),
                )
                .await
                .expect("a pod-bound token")
        }
    };
    let leader_token = pod_token("go-controller-0").await;
    let follower = f.raw_client(&pod_token("go-controller-1").await);
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    server
        .write_token_kubeconfig(&leader_token, &kubeconfig)
        .expect("kubeconfig");
    // client-go's elector, its holder `go-controller-0_<UUID>`, writing its ConfigMap while it
    // leads.
    let peer = std::process::Command::new(peers.join(testkit::built::CLIENT_GO_ELECTOR))
        .args(["--kubeconfig", &kubeconfig.display().to_string()])
        .args([
            "--namespace",
            ns,
            "--lease",
            lock,
            "--identity",
            "go-controller-0",
        ])
        .args(["--write-configmap", cm, "--write-every", "200ms"])
        .args([
            "--lease-duration",
            "15s",
            "--renew-deadline",
            "10s",
            "--retry-period",
            "2s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("the client-go elector starts");
    let peer = Stopped(peer);
    // Its writes land: the ConfigMap changes again and again under the policy.
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let mut seen = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while seen.len() < 5 {
        if let Some(c) = cms.get_opt(cm).await.expect("reading the ConfigMap") {
            seen.insert(version(&c));
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the elector's writes did not land: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holder = testkit::kube::lease_holder(&admin, ns, lock)
        .await
        .expect("the holder");
    assert!(
        holder.starts_with("go-controller-0_") && holder.len() == "go-controller-0_".len() + 36,
        "{holder}"
    );
    // The follower pod, same account, same rights: refused, the ConfigMap untouched.
    let theirs: Api<ConfigMap> = Api::namespaced(follower, ns);
    let patch = json!({"data": {"writer": "the follower"}});
    let refused = theirs
        .patch(
            cm,
            &kube::api::PatchParams::apply("follower").force(),
            &kube::api::Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": cm, "namespace": ns}, "data": patch["data"]})),
        )
        .await;
    match refused {
        Err(kube::Error::Api(e)) if e.code == 403 => {
            for part in [
                "pod go-controller-1 ",
                &format!("(holder: {holder})"),
                "may not write configmaps",
            ] {
                assert!(e.message.contains(part), "{part:?} in {}", e.message);
            }
        }
        other => panic!("the follower's write: {other:?}"),
    }
    let now = cms.get(cm).await.expect("the ConfigMap");
    assert_ne!(
        now.data
            .as_ref()
            .and_then(|d| d.get("writer"))
            .map(String::as_str),
        Some("the follower")
    );
    drop(peer);
    f.remove().await;
}
