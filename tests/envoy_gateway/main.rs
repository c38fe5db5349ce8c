//! Envoy Gateway, the second real Gateway API controller, built from its Go module
//! (scripts/build-envoy-gateway.sh) and run with no Envoy as two replicas serving one Gateway,
//! each in a pod network of its own (it binds fixed ports) with its own `gateway-leader proxy`
//! as a sidecar. Elected three ways, as tests/contour/ does Contour: by its own leader election
//! on the apiserver's Lease (the anchor); with its election off, behind the proxies; and with its
//! election on, answered by the proxy (`--proxy-election-lease`, issue 45). Judged from the
//! server: the statuses it holds (on a watch), who wrote them and the Envoy infrastructure (its
//! audit log, one service account per replica), and the replicas' own metrics; never from a log.

#[path = "../common/mod.rs"]
mod common;

mod churn;
mod modes;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::audit::Request;
use common::blocking;
use common::gateway::{
    gateway, gateway_class, has_conditions, put, route, service, wait_lease_holder,
};
use common::proxy::Proxy;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use gateway_leader_log::message;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::{Api, Client};
use serde_json::{json, Value};
use testkit::envoy_gateway::{EnvoyGateway, Options, LEASE_NAME};
use testkit::kube::KubeApiServer;
use testkit::pod::{PodNetwork, Relay};
use tokio::sync::{Mutex, OnceCell};

/// What a wait on a process or the server may take on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(90);

/// The proxies' Lease.
const PROXY_LEASE: &str = "proxies";

/// The Gateway each scene's replicas serve.
const GATEWAY: &str = "gw";

/// Short timings, for both elections: the tests are about who writes, and a handover by SIGTERM
/// waits for no expiry.
const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_secs(1);

/// One test at a time: two controllers and two proxies per test on 2 cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// One apiserver with an audit log for the whole file, with the Gateway API CRDs and Envoy
/// Gateway's.
async fn server() -> &'static KubeApiServer {
    static SERVER: OnceCell<KubeApiServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let s = KubeApiServer::start_local_with(testkit::kube::Options {
                audit: true,
                ..testkit::kube::Options::default()
            })
            .await
            .expect("a local kube-apiserver with an audit log (scripts/build-kube-apiserver.sh)");
            s.install_gateway_api()
                .await
                .expect("the Gateway API CRDs are installed");
            testkit::envoy_gateway::install_crds(&s.admin_client())
                .await
                .expect("Envoy Gateway's CRDs are installed (scripts/build-envoy-gateway.sh)");
            s
        })
        .await
}

/// How the replicas elect their writer.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Envoy Gateway's own election on the apiserver's Lease; it talks to the apiserver.
    Native,
    /// Its election off; each behind its own proxy, whose election decides whose writes land.
    Fenced,
    /// Its election on, pointed at its own proxy, which answers its Lease itself.
    ProxyElected,
}

/// A Gateway, a Service and three HTTPRoutes in a namespace of their own (Envoy Gateway's
/// namespace too: its Lease and the Envoy infrastructure it creates), and the credentials of the
/// replicas that serve them.
struct Scene {
    server: &'static KubeApiServer,
    ns: String,
    admin: Client,
    dir: tempfile::TempDir,
}

/// One replica as a pod holds it: its network, an Envoy Gateway, and the proxy in front of it
/// unless it talks to the apiserver itself. Fields drop in order: the processes before the
/// relay and the network they use.
struct Pod {
    /// The user its requests reach the apiserver as (`system:serviceaccount:NS:NAME`).
    user: String,
    eg: EnvoyGateway,
    proxy: Option<Proxy>,
    _relay: Relay,
    _net: PodNetwork,
}

/// Where the route `moved` sends its traffic: the scene's Service, or one that does not exist.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Backend {
    Web,
    Nowhere,
}

// === impl Scene ===

impl Scene {
    /// The scene in namespace `eg-<name>` (its GatewayClass and controller name are named so
    /// too: one Envoy Gateway serves one class of its controller), with one service account per
    /// replica bound to Envoy Gateway's RBAC, and to the proxies' Lease rights when proxies send
    /// for them.
    async fn new(name: &str, mode: Mode) -> Scene {
        let server = server().await;
        let ns = format!("eg-{name}");
        server.create_namespace(&ns).await.expect("namespace");
        let admin = server.admin_client();
        put(
            &Api::all(admin.clone()),
            &gateway_class(&ns, &controller_name(&ns)),
        )
        .await;
        put(
            &Api::<Gateway>::namespaced(admin.clone(), &ns),
            &gateway(&ns, GATEWAY, &ns),
        )
        .await;
        put(
            &Api::<Service>::namespaced(admin.clone(), &ns),
            &service(&ns, "web", 80),
        )
        .await;
        let routes = Api::<HttpRoute>::namespaced(admin.clone(), &ns);
        for (r, backend) in [
            ("to-web", "web"),
            ("to-nowhere", "nowhere"),
            ("moved", "web"),
        ] {
            let mut route = route(&ns, r, GATEWAY, &[(&ns, backend, 80)]);
            // A host of its own: routes with equal matches are flagged `RouteRulesOverlap`.
            route.spec.hostnames = Some(vec![format!("{r}.example.com")]);
            put(&routes, &route).await;
        }
        let scene = Scene {
            server,
            ns,
            admin,
            dir: tempfile::tempdir().expect("a temporary directory"),
        };
        let users = ["a", "b"].map(|x| service_account(mode, x));
        let users = [users[0].as_str(), users[1].as_str()];
        let mut manifests = vec![testkit::envoy_gateway::rbac_manifest()
            .expect("Envoy Gateway's RBAC beside its binary (scripts/build-envoy-gateway.sh)")];
        if mode != Mode::Native {
            manifests.push(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/rbac-leader-election.yaml"),
            );
        }
        for file in &manifests {
            testkit::rbac::bind_manifest_to(server, file, &scene.ns, &users)
                .await
                .unwrap_or_else(|e| panic!("binding {}: {e:#}", file.display()));
        }
        scene
    }

    /// A kubeconfig for the apiserver as a pod reaches it through `relay`, with a token of
    /// service account `sa`. The apiserver's certificate names `kubernetes`, not the relay's
    /// address: `tls-server-name` says which name to check, as a cluster's kubeconfig may.
    async fn pod_kubeconfig(&self, sa: &str, relay: &Relay) -> PathBuf {
        let token = self
            .server
            .service_account_token(&self.ns, sa)
            .await
            .expect("a service account token");
        let path = self.dir.path().join(format!("{sa}.kubeconfig"));
        self.server
            .write_token_kubeconfig(&token, &path)
            .expect("the token kubeconfig");
        let mut kc: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("the kubeconfig just written"))
                .expect("a JSON kubeconfig");
        for c in kc["clusters"].as_array_mut().into_iter().flatten() {
            c["cluster"]["server"] = json!(format!("https://{}", relay.addr()));
            c["cluster"]["tls-server-name"] = json!("kubernetes");
        }
        std::fs::write(&path, serde_json::to_vec_pretty(&kc).expect("JSON"))
            .expect("the pod's kubeconfig");
        path
    }

    /// Starts replica `x` (`a` or `b`) of `mode`: its network and relay, its proxy (which must
    /// serve before Envoy Gateway's first request), then its Envoy Gateway once `before_eg`
    /// returns.
    async fn start(&self, x: &str, mode: Mode) -> Pod {
        let net = PodNetwork::new().expect("a pod network (run as root)");
        let relay = Relay::start(
            net.host_ip(),
            self.server.local_addr().expect("a local apiserver"),
        )
        .expect("a relay to the apiserver");
        let user = service_account(mode, x);
        let kubeconfig = self.pod_kubeconfig(&user, &relay).await;
        let proxy = match mode {
            Mode::Native => None,
            Mode::Fenced | Mode::ProxyElected => {
                let mut extra = vec!["--leader-election-lock-name".into(), PROXY_LEASE.into()];
                for (flag, d) in [
                    ("--lease-duration", LEASE),
                    ("--renew-deadline", RENEW),
                    ("--retry-period", RETRY),
                ] {
                    extra.extend([flag.to_string(), format!("{}ms", d.as_millis())]);
                }
                if mode == Mode::ProxyElected {
                    extra.extend([
                        "--proxy-election-lease".into(),
                        format!("{}/{LEASE_NAME}", self.ns),
                    ]);
                }
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                let (ns, dir) = (self.ns.as_str(), self.dir.path());
                let proxy =
                    blocking(|| Proxy::start_in(Some(&net), &kubeconfig, &user, ns, dir, &extra));
                Some(proxy)
            }
        };
        if x == "a" && proxy.is_some() {
            // The first to lead: its proxy holds the Lease before its controller's first write,
            // so no refusal starts the scene.
            self.wait_holder(PROXY_LEASE, "proxy-a").await;
        }
        let mut options =
            Options::new(&self.ns, &controller_name(&self.ns)).with_watch_namespaces(&[&self.ns]);
        if mode != Mode::Fenced {
            options = options.with_election(LEASE, RENEW, RETRY);
        }
        let eg_kubeconfig = proxy.as_ref().map_or(&kubeconfig, |p| &p.kubeconfig);
        let eg = EnvoyGateway::start(&format!("{}-{x}", self.ns), &net, eg_kubeconfig, &options)
            .await
            .unwrap_or_else(|e| panic!("envoy-gateway {x}: {e:#}"));
        Pod {
            user: format!("system:serviceaccount:{}:{user}", self.ns),
            eg,
            proxy,
            _relay: relay,
            _net: net,
        }
    }

    /// Both replicas of `mode`, settled: a leading (its Envoy Gateway too, when it elects), b
    /// following, every status right.
    async fn pair(&self, mode: Mode) -> (Pod, Pod) {
        let a = self.start("a", mode).await;
        if mode != Mode::Fenced {
            wait_leads(&a.eg).await;
        }
        let mut b = self.start("b", mode).await;
        if let Some(p) = b.proxy.as_mut() {
            blocking(|| p.replica.wait_for(message::FOLLOWING, PATIENCE));
        }
        self.wait_correct(Backend::Web).await;
        (a, b)
    }

    fn routes(&self) -> Api<HttpRoute> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    fn gateways(&self) -> Api<Gateway> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Every status of the scene as Envoy Gateway writes it, when route `moved` goes to
    /// `moved`; the first difference otherwise.
    async fn check(&self, moved: Backend) -> Result<(), String> {
        let gw = self
            .gateways()
            .get(GATEWAY)
            .await
            .map_err(|e| e.to_string())?;
        gateway_correct(&gw, 3)?;
        for (name, resolved) in routes_resolved(moved) {
            let r = self.routes().get(name).await.map_err(|e| e.to_string())?;
            route_correct(&r, &controller_name(&self.ns), resolved)
                .map_err(|e| format!("route {name}: {e}"))?;
        }
        Ok(())
    }

    /// Waits (on watches) until the server holds every status of the scene; panics after
    /// [`PATIENCE`] with the first difference.
    async fn wait_correct(&self, moved: Backend) {
        let controller = controller_name(&self.ns);
        let watched = async {
            await_condition(self.gateways(), GATEWAY, |gw: Option<&Gateway>| {
                gw.is_some_and(|gw| gateway_correct(gw, 3).is_ok())
            })
            .await?;
            for (name, resolved) in routes_resolved(moved) {
                let controller = controller.clone();
                await_condition(self.routes(), name, move |r: Option<&HttpRoute>| {
                    r.is_some_and(|r| route_correct(r, &controller, resolved).is_ok())
                })
                .await?;
            }
            Ok::<_, kube::runtime::wait::Error>(())
        };
        match tokio::time::timeout(PATIENCE, watched).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{}: watching the statuses: {e}", self.ns),
            Err(_) => panic!(
                "{}: statuses not correct within {PATIENCE:?}: {:?}",
                self.ns,
                self.check(moved).await
            ),
        }
        if let Err(e) = self.check(moved).await {
            panic!("{}: statuses not all correct at once: {e}", self.ns);
        }
    }

    /// Points route `moved` at `to`.
    async fn move_route(&self, to: Backend) {
        let name = match to {
            Backend::Web => "web",
            Backend::Nowhere => "nowhere",
        };
        let change = json!({"spec": {"rules": [{"backendRefs": [{"name": name, "port": 80}]}]}});
        self.routes()
            .patch("moved", &PatchParams::default(), &Patch::Merge(&change))
            .await
            .expect("route moved is changed");
    }

    /// The status writes (updates or patches of a `/status` subresource) of the scene's
    /// namespace the apiserver answered, oldest first.
    fn status_writes(&self) -> Vec<Request> {
        self.audited(|e| {
            (e["verb"] == "update" || e["verb"] == "patch")
                && e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["namespace"] == self.ns.as_str()
        })
    }

    /// The writes to the Envoy infrastructure (Deployments, Services, ServiceAccounts,
    /// ConfigMaps, ...) Envoy Gateway creates in its namespace, that the apiserver took.
    fn infrastructure_writes(&self) -> Vec<Request> {
        self.audited(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete")
            ) && e["objectRef"]["namespace"] == self.ns.as_str()
                && matches!(
                    e["objectRef"]["resource"].as_str(),
                    Some(
                        "deployments"
                            | "services"
                            | "serviceaccounts"
                            | "configmaps"
                            | "horizontalpodautoscalers"
                            | "poddisruptionbudgets"
                    )
                )
                && e["objectRef"]["subresource"].is_null()
                && e["responseStatus"]["code"].as_i64().unwrap_or_default() < 300
        })
        .into_iter()
        .filter(|w| !w.user.starts_with("admin"))
        .collect()
    }

    /// The requests for Lease `name` in the scene's namespace the apiserver answered.
    fn lease_requests(&self, name: &str) -> Vec<Request> {
        self.audited(|e| {
            e["objectRef"]["resource"] == "leases"
                && e["objectRef"]["namespace"] == self.ns.as_str()
                && e["objectRef"]["name"] == name
        })
    }

    fn audited(&self, pick: impl Fn(&Value) -> bool) -> Vec<Request> {
        common::audit::audited(self.server, pick)
    }

    /// The status writes the server took from `user`.
    fn landed_from(&self, user: &str) -> usize {
        self.status_writes()
            .iter()
            .filter(|w| w.code < 300 && w.user == user)
            .count()
    }

    /// Waits until the server says Lease `name` is held by the proxy whose identity is
    /// `identity`; panics after [`PATIENCE`].
    async fn wait_holder(&self, name: &str, identity: &str) {
        wait_lease_holder(&self.admin, &self.ns, name, identity, PATIENCE).await
    }
}

/// The controller name of the scene in `ns`.
fn controller_name(ns: &str) -> String {
    format!("gateway.envoyproxy.io/{ns}")
}

/// The service account of replica `x` (`a`, `b`) in `mode`: its Envoy Gateway's, or its
/// proxy's.
fn service_account(mode: Mode, x: &str) -> String {
    match mode {
        Mode::Native => format!("envoy-gateway-{x}"),
        Mode::Fenced | Mode::ProxyElected => format!("proxy-{x}"),
    }
}

/// The scene's routes, each with whether its backend resolves when route `moved` goes to
/// `moved`.
fn routes_resolved(moved: Backend) -> [(&'static str, bool); 3] {
    [
        ("to-web", true),
        ("to-nowhere", false),
        ("moved", moved == Backend::Web),
    ]
}

/// The Gateway as Envoy Gateway writes it with no Envoy running: Accepted, not Programmed (no
/// address: its Envoy Service never gets one); its one listener accepted, programmed, resolved,
/// with `attached` routes; every condition at its generation.
fn gateway_correct(gw: &Gateway, attached: i64) -> Result<(), String> {
    let v = serde_json::to_value(gw).map_err(|e| e.to_string())?;
    let generation = &v["metadata"]["generation"];
    let status = &v["status"];
    has_conditions(
        &status["conditions"],
        &[
            ("Accepted", "True", "Accepted"),
            ("Programmed", "False", "AddressNotAssigned"),
        ],
        generation,
    )
    .map_err(|e| format!("Gateway: {e}"))?;
    let listener = status["listeners"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == "http"))
        .ok_or("Gateway: no status of listener http")?;
    if listener["attachedRoutes"] != attached {
        return Err(format!(
            "listener http: {} attached routes, not {attached}",
            listener["attachedRoutes"]
        ));
    }
    has_conditions(
        &listener["conditions"],
        &[
            ("Accepted", "True", "Accepted"),
            ("Programmed", "True", "Programmed"),
            ("ResolvedRefs", "True", "ResolvedRefs"),
        ],
        generation,
    )
    .map_err(|e| format!("listener http: {e}"))
}

/// The route as Envoy Gateway writes it: its `status.parents` entry for the Gateway, by the
/// scene's controller, Accepted, and its refs resolved (or the backend not found).
fn route_correct(r: &HttpRoute, controller: &str, resolved: bool) -> Result<(), String> {
    let v = serde_json::to_value(r).map_err(|e| e.to_string())?;
    let ours: Vec<&Value> = v["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["controllerName"] == controller)
        .collect();
    let [parent] = ours.as_slice() else {
        return Err(format!(
            "{} entries of {controller} in {}",
            ours.len(),
            v["status"]
        ));
    };
    if parent["parentRef"]["name"] != GATEWAY {
        return Err(format!("the entry is for {}", parent["parentRef"]));
    }
    let refs = if resolved {
        ("ResolvedRefs", "True", "ResolvedRefs")
    } else {
        ("ResolvedRefs", "False", "BackendNotFound")
    };
    has_conditions(
        &parent["conditions"],
        &[("Accepted", "True", "Accepted"), refs],
        &v["metadata"]["generation"],
    )
}

// === impl Pod ===

impl Pod {
    /// A graceful stop of the whole replica, as the kubelet stops a pod: SIGTERM to its proxy
    /// and its Envoy Gateway at once; returns once both have exited.
    async fn terminate(&mut self) {
        if let Some(p) = self.proxy.as_mut() {
            p.replica.terminate();
        }
        let name = self.eg.name().to_string();
        self.eg
            .terminate(PATIENCE)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        if let Some(p) = self.proxy.as_mut() {
            assert_eq!(
                blocking(|| p.replica.wait_exit(PATIENCE)),
                Some(0),
                "the proxy exits cleanly after SIGTERM"
            );
        }
    }

    /// Writes (status updates and patches, and the Envoy infrastructure's) the proxy refused:
    /// they never reached the apiserver.
    fn refused_writes(&mut self) -> f64 {
        let p = self.proxy.as_mut().expect("a replica with a proxy");
        let health = blocking(|| p.replica.health_addr(PATIENCE));
        let m =
            blocking(|| testkit::metrics::get(health, "/metrics")).expect("the proxy's /metrics");
        testkit::metrics::sum(
            &m,
            "gateway_leader_proxy_requests_total",
            Some(r#"outcome="refused""#),
        )
    }

    /// Freezes the whole replica (SIGSTOP to its proxy and its Envoy Gateway), as a paused VM.
    fn freeze(&mut self) {
        if let Some(p) = self.proxy.as_mut() {
            p.replica.pause();
        }
        self.eg.freeze().expect("envoy-gateway is frozen");
    }

    /// Thaws the whole replica.
    fn thaw(&mut self) {
        self.eg.thaw().expect("envoy-gateway is thawed");
        if let Some(p) = self.proxy.as_mut() {
            p.replica.resume();
        }
    }
}

/// Waits until `eg` says it leads its election (its metrics); panics after [`PATIENCE`].
async fn wait_leads(eg: &EnvoyGateway) {
    let until = Instant::now() + PATIENCE;
    while !eg.leads().await.unwrap_or(false) {
        assert!(
            Instant::now() < until,
            "{} did not lead within {PATIENCE:?}",
            eg.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
