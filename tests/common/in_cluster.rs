//! A replica run as a pod of the base Deployment runs (`tests/in_cluster.rs`): one namespace
//! whose service account holds the base's RBAC (less one rule, maybe), the objects whose statuses
//! it writes, and the pod's files.

use std::path::Path;
use std::sync::OnceLock;

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use gateway_api::listenersets::ListenerSet;
use gateway_api::tlsroutes::TlsRoute;
use kube::Api;
use serde_json::Value;
use testkit::kube::KubeApiServer;

use super::deploy::{container, deploy_dir, render, strings};
use super::gateway::*;
use super::pod::{self, PodFiles};
use super::{Line, Replica};

/// The base's ServiceAccount.
pub const SA: &str = "gateway-leader";

/// The base as `kubectl kustomize` renders it, once per test binary.
pub fn base() -> &'static [Value] {
    static BASE: OnceLock<Vec<Value>> = OnceLock::new();
    BASE.get_or_init(|| render(&deploy_dir().join("base")))
}

/// What to leave out of the base's RBAC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Without {
    /// Nothing: exactly the base's RBAC.
    Nothing,
    /// The rule at this index of the Role.
    RoleRule(usize),
    /// The rule at this index of the ClusterRole.
    ClusterRoleRule(usize),
    /// One verb of the rule at this index of the Role.
    RoleVerb(usize, &'static str),
    /// One verb of the rule at this index of the ClusterRole.
    ClusterRoleVerb(usize, &'static str),
}

/// The RBAC objects of `deploy/components/server-fencing`, which let a replica read whether the
/// fence is bound (a startup line, never a failure): not among what election and status writes
/// need.
pub const FENCING_CHECK: &str = "gateway-leader-fencing-check";

/// The base's RBAC objects for election and status writes (not [`FENCING_CHECK`]), without
/// `without`, and without their namespace (the test's is set when they are bound).
pub fn rbac(without: Without) -> Vec<Value> {
    let needed: Vec<Value> = base()
        .iter()
        .filter(|o| o["metadata"]["name"] != FENCING_CHECK)
        .cloned()
        .collect();
    let out = rbac_of(&needed, without);
    assert_eq!(out.len(), 4, "a Role, a ClusterRole and their bindings");
    out
}

/// The RBAC objects among `objects`, without `without` and without their namespace.
pub fn rbac_of(objects: &[Value], without: Without) -> Vec<Value> {
    let mut out = Vec::new();
    for obj in objects {
        let kind = obj["kind"].as_str().expect("kind");
        let mut obj = obj.clone();
        match (kind, without) {
            ("Role", Without::RoleRule(i)) | ("ClusterRole", Without::ClusterRoleRule(i)) => {
                let rules = obj["rules"].as_array_mut().expect("rules");
                assert!(i < rules.len(), "the {kind} has a rule {i}");
                rules.remove(i);
            }
            ("Role", Without::RoleVerb(i, verb))
            | ("ClusterRole", Without::ClusterRoleVerb(i, verb)) => {
                let verbs = obj["rules"][i]["verbs"]
                    .as_array_mut()
                    .unwrap_or_else(|| panic!("the {kind} has a rule {i}"));
                let before = verbs.len();
                verbs.retain(|v| v != verb);
                assert_eq!(verbs.len() + 1, before, "the {kind}'s rule {i} has {verb}");
                // A rule without verbs is refused by the apiserver: that is the rule case.
                assert!(!verbs.is_empty(), "{verb} is not the only verb of rule {i}");
            }
            ("Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding", _) => {}
            _ => continue,
        }
        obj["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("namespace");
        out.push(obj);
    }
    out
}

/// One namespace whose service account holds the base's RBAC (less one rule, maybe), with a
/// valid GatewayClass, Gateway, Service and HTTPRoute for a controller name of its own.
pub struct InCluster {
    pub server: &'static KubeApiServer,
    pub ns: String,
    pub controller: String,
    pub pod: PodFiles,
    pub classes: Api<GatewayClass>,
    pub gateways: Api<Gateway>,
    pub routes: Api<HttpRoute>,
}

impl InCluster {
    pub async fn new(name: &str, without: Without) -> InCluster {
        Self::with_rbac(name, rbac(without)).await
    }

    /// Like [`new`](Self::new), with these RBAC objects bound to the service account.
    pub async fn with_rbac(name: &str, rbac: Vec<Value>) -> InCluster {
        Self::on(apiserver().await, name, rbac).await
    }

    /// Like [`with_rbac`](Self::with_rbac), on `server` rather than the test binary's shared
    /// apiserver.
    pub async fn on(server: &'static KubeApiServer, name: &str, rbac: Vec<Value>) -> InCluster {
        server
            .install_gateway_api()
            .await
            .expect("the Gateway API CRDs are installed");
        let ns = format!("ic-{name}");
        server.create_namespace(&ns).await.expect("namespace");
        let client = admin(server);
        let c = InCluster {
            server,
            controller: format!("gateway-leader.dev/{ns}"),
            pod: PodFiles::new(),
            classes: Api::all(client.clone()),
            gateways: Api::namespaced(client.clone(), &ns),
            routes: Api::namespaced(client.clone(), &ns),
            ns,
        };
        put(&c.classes, &gateway_class(&c.ns, &c.controller)).await;
        put(&c.gateways, &gateway(&c.ns, "gw", &c.ns)).await;
        put(&Api::namespaced(client, &c.ns), &service(&c.ns, "web", 80)).await;
        // Hosts of their own: an HTTPRoute and a GRPCRoute sharing one on a listener would
        // admit only the older.
        let mut http = route(&c.ns, "route", "gw", &[(&c.ns, "web", 80)]);
        http.spec.hostnames = Some(vec!["web.example.com".into()]);
        put(&c.routes, &http).await;
        // A route of each other kind, so that each kind's status is written (the TLSRoute is
        // not allowed by the HTTP listener, which is a status too).
        let mut grpc = grpc_route(&c.ns, "grpc", "gw", &[(&c.ns, "web", 80)]);
        grpc.spec.hostnames = Some(vec!["grpc.example.com".into()]);
        put(&Api::namespaced(admin(server), &c.ns), &grpc).await;
        put(
            &Api::namespaced(admin(server), &c.ns),
            &tls_route(
                &c.ns,
                "tls",
                serde_json::json!({"name": "gw"}),
                "a.example.com",
                &[(&c.ns, "web", 80)],
            ),
        )
        .await;
        // A ListenerSet, whose status is written too (NotAllowed: the Gateway allows none).
        let set: ListenerSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
            "metadata": {"name": "set", "namespace": &c.ns},
            "spec": {"parentRef": {"name": "gw"},
                     "listeners": [{"name": "extra", "protocol": "HTTP", "port": 8080}]}
        }))
        .expect("listener set");
        put(&Api::namespaced(admin(server), &c.ns), &set).await;
        // A BackendTLSPolicy on `web` with its CA ConfigMap, so that its ancestors are written.
        put(
            &Api::namespaced(admin(server), &c.ns),
            &ca_config_map(&c.ns, "ca", &ca_pem()),
        )
        .await;
        put(
            &Api::namespaced(admin(server), &c.ns),
            &backend_tls_policy(
                &c.ns,
                "policy",
                "web",
                None,
                serde_json::json!([{"group": "", "kind": "ConfigMap", "name": "ca"}]),
            ),
        )
        .await;
        // The ServiceAccount and a token for it, as the kubelet would mount.
        let token = server
            .service_account_token(&c.ns, SA)
            .await
            .expect("service account token");
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("rbac.yaml");
        let docs: Vec<String> = rbac
            .iter()
            .map(|o| serde_yaml::to_string(o).expect("YAML"))
            .collect();
        std::fs::write(&file, docs.join("---\n")).expect("writing the RBAC");
        testkit::rbac::bind_manifest(server, &file, &c.ns, SA)
            .await
            .expect("binding the base's RBAC");
        c.pod
            .service_account(&token, &pod::ca_pem(server.config()), &c.ns);
        c
    }

    /// A replica as a pod of the base Deployment: its command line (plus this namespace's
    /// controller name and short timing), `POD_NAME`, `POD_NAMESPACE`, the apiserver as
    /// `KUBERNETES_SERVICE_HOST`/`PORT`, and nothing else in its environment.
    pub fn start(&self, pod_name: &str) -> Replica {
        self.start_with(pod_name, strings(&container(base())["args"]))
    }

    /// Like [`start`](Self::start), with this command line instead of the base Deployment's.
    pub fn start_with(&self, pod_name: &str, mut args: Vec<String>) -> Replica {
        for a in [
            "--controller-name",
            &self.controller,
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "1s",
            // Pods have a network namespace each; these share the machine's, so each takes a
            // free port for health and metrics instead of the Deployment's 9090.
            "--health-addr",
            "127.0.0.1:0",
        ] {
            args.push(a.to_string());
        }
        let mut env = pod::service_env(self.server.config());
        env.push(("POD_NAME".into(), pod_name.into()));
        env.push(("POD_NAMESPACE".into(), self.ns.clone()));
        let binary = Path::new(env!("CARGO_BIN_EXE_gateway-leader"));
        Replica::spawn(pod_name, self.pod.command(binary, &args, &env))
    }

    /// Points the route at a Service that does not exist and waits until its status says so,
    /// written by the replica named `pod_name`: the leader writes a status it computed now.
    pub async fn route_to_a_missing_service_written_by(&self, pod_name: &str) {
        put(
            &self.routes,
            &route(&self.ns, "route", "gw", &[(&self.ns, "missing", 80)]),
        )
        .await;
        let ctl = self.controller.clone();
        wait_for(&self.routes, "route", "BackendNotFound", move |r| {
            route_says(r, &ctl, "ResolvedRefs", "False", "BackendNotFound")
        })
        .await;
        let r = self.routes.get("route").await.expect("route");
        assert!(
            status_managers(&r).contains(&manager_of(pod_name)),
            "{pod_name} wrote the route's status: {:?}",
            status_managers(&r)
        );
    }

    /// Waits until the route and the Gateway say what a valid setup says.
    pub async fn wait_written(&self) {
        let c = self.controller.clone();
        wait_for(&self.routes, "route", "accepted, refs resolved", move |r| {
            route_says(r, &c, "Accepted", "True", "Accepted")
                && route_says(r, &c, "ResolvedRefs", "True", "ResolvedRefs")
        })
        .await;
        wait_for(&self.gateways, "gw", "programmed with two routes", |g| {
            g.status.as_ref().is_some_and(|s| {
                s.conditions
                    .as_deref()
                    .and_then(|c| condition(c, "Programmed"))
                    .is_some_and(|c| c.status == "True")
                    && s.listeners
                        .as_deref()
                        .is_some_and(|l| l.len() == 1 && l[0].attached_routes == 2)
            })
        })
        .await;
        let c = self.controller.clone();
        let tls: Api<TlsRoute> = Api::namespaced(admin(self.server), &self.ns);
        wait_for(&tls, "tls", "not allowed by the HTTP listener", move |r| {
            any_route_says(r, &c, "Accepted", "False", "NotAllowedByListeners")
        })
        .await;
        let sets: Api<ListenerSet> = Api::namespaced(admin(self.server), &self.ns);
        wait_for(&sets, "set", "not allowed by the Gateway", |ls| {
            ls.status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .and_then(|c| condition(c, "Accepted"))
                .is_some_and(|c| c.reason == "NotAllowed")
        })
        .await;
        let c = self.controller.clone();
        let policies: Api<BackendTlsPolicy> = Api::namespaced(admin(self.server), &self.ns);
        wait_for(&policies, "policy", "accepted on gw", move |p| {
            policy_says(p, &c, "gw", "Accepted", "True", "Accepted")
                && policy_says(p, &c, "gw", "ResolvedRefs", "True", "ResolvedRefs")
        })
        .await;
    }
}

/// Every string in a log line (its message and fields), one per line.
pub fn text(line: &Line) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            Value::Object(o) => o.values().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    walk(&line.json, &mut out);
    out
}

/// True when the line carries the apiserver's RBAC refusal of `verb` (any verb when empty) on
/// `resource` (`... is forbidden: User "system:serviceaccount:..." cannot get resource "leases"
/// in API group ...`).
pub fn forbidden(line: &Line, verb: &str, resource: &str) -> bool {
    let t = text(line);
    let refusal = if verb.is_empty() {
        format!(" resource \"{resource}\"")
    } else {
        format!("cannot {verb} resource \"{resource}\"")
    };
    t.contains("forbidden") && t.contains(&refusal)
}
