//! Contour, a real Gateway API controller built from its Go module (scripts/build-contour.sh),
//! run with no Envoy as two replicas serving one Gateway, elected three ways: by Contour's own
//! leader election on the apiserver's Lease; with its election off, each replica behind its own
//! `gateway-leader proxy`; and with its election on, answered by the proxy
//! (`--proxy-election-lease`, issue 45). Judged from the server: the statuses it holds (on a
//! watch), who wrote them (its audit log, one service account per replica, and managedFields),
//! and the replicas' own metrics; never from a log.

#[path = "../common/mod.rs"]
mod common;

mod churn;
mod modes;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::audit::Request;
use common::blocking;
use common::gateway::{
    gateway, gateway_class, has_conditions, lease_holder, put, route, service, status_managers,
    wait_for, wait_lease_holder,
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
use testkit::contour::{Contour, Election, Options, CONTROLLER_NAME};
use testkit::kube::KubeApiServer;
use tokio::sync::{Mutex, OnceCell};

/// What a wait on a process or the server may take on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(90);

/// Contour's Lease (its own election's, or the one the proxy answers).
const CONTOUR_LEASE: &str = "contour";

/// The proxies' Lease.
const PROXY_LEASE: &str = "proxies";

/// The Gateway each scene's Contours serve.
const GATEWAY: &str = "gw";

/// Short timings, for both elections: the tests are about who writes, and a handover by SIGTERM
/// waits for no expiry.
const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_secs(1);

/// One test at a time: four controllers and two proxies per test on 2 cores, and the handover
/// figures are measured on a machine the other tests leave alone.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// One apiserver with an audit log for the whole file, with the Gateway API CRDs and Contour's.
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
            testkit::contour::install_crds(&s.admin_client())
                .await
                .expect("Contour's CRDs are installed (scripts/build-contour.sh)");
            s
        })
        .await
}

/// How the replicas elect their writer.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Contour's own election on the apiserver's Lease; each Contour talks to the apiserver.
    Native,
    /// Contour's election off; each Contour behind its own proxy, whose election decides whose
    /// writes land.
    Fenced,
    /// Contour's election on, pointed at its own proxy, which answers Contour's Lease itself
    /// (`--proxy-election-lease`): only the replica whose proxy leads sees its Contour lead.
    ProxyElected,
}

/// A Gateway, a Service and three HTTPRoutes in a namespace of their own, and the credentials of
/// the replicas that serve them.
struct Scene {
    server: &'static KubeApiServer,
    ns: String,
    admin: Client,
    dir: tempfile::TempDir,
}

/// A replica's pod before its Contour runs.
struct Seat {
    x: String,
    mode: Mode,
    /// The user its requests reach the apiserver as.
    user: String,
    /// A kubeconfig with its service account's token.
    kubeconfig: PathBuf,
    proxy: Option<Proxy>,
}

/// One replica as a pod holds it: a Contour, and the proxy in front of it unless it talks to
/// the apiserver itself.
struct Pod {
    /// The user its requests reach the apiserver as (`system:serviceaccount:NS:NAME`).
    user: String,
    proxy: Option<Proxy>,
    contour: Contour,
}

/// Where the route `moved` sends its traffic: the scene's Service, or one that does not exist.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Backend {
    Web,
    Nowhere,
}

// === impl Scene ===

impl Scene {
    /// The scene in namespace `contour-<name>` (its GatewayClass is named so too), with one
    /// service account per replica bound to Contour's own RBAC, and to the proxies' Lease
    /// rights when proxies send for them.
    async fn new(name: &str, mode: Mode) -> Scene {
        let server = server().await;
        let ns = format!("contour-{name}");
        server.create_namespace(&ns).await.expect("namespace");
        let admin = server.admin_client();
        put(
            &Api::all(admin.clone()),
            &gateway_class(&ns, CONTROLLER_NAME),
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
            // Contour refuses a route whose matches equal another's on the same host
            // (`RuleMatchConflict`): each has a host of its own.
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
        let mut manifests = vec![testkit::contour::rbac_manifest()
            .expect("Contour's RBAC beside its binary (scripts/build-contour.sh)")];
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

    /// A kubeconfig for the apiserver with a token of service account `sa`.
    async fn token_kubeconfig(&self, sa: &str) -> PathBuf {
        let token = self
            .server
            .service_account_token(&self.ns, sa)
            .await
            .expect("a service account token");
        let path = self.dir.path().join(format!("{sa}.kubeconfig"));
        self.server
            .write_token_kubeconfig(&token, &path)
            .expect("the token kubeconfig");
        path
    }

    /// Starts replica `x` (`a` or `b`) of `mode`: its proxy first (it must serve before
    /// Contour's first request), then its Contour.
    async fn start(&self, x: &str, mode: Mode) -> Pod {
        let seat = self.seat(x, mode).await;
        self.start_contour(seat).await
    }

    /// Starts replica a of `mode`, the first to lead: with a proxy, its Contour only once the
    /// server says the proxy holds the Lease (Contour does not write again a status whose write
    /// a proxy refused, until the object changes).
    async fn start_leader(&self, mode: Mode) -> Pod {
        let seat = self.seat("a", mode).await;
        if seat.proxy.is_some() {
            self.wait_holder(PROXY_LEASE, "proxy-a").await;
        }
        self.start_contour(seat).await
    }

    /// Both replicas of `mode` behind proxies, settled: a leading (its Contour too, when the
    /// proxy answers its election), b's proxy following, every status right.
    async fn pair(&self, mode: Mode) -> (Pod, Pod) {
        let a = self.start_leader(mode).await;
        if mode == Mode::ProxyElected {
            wait_leads(&a.contour).await;
        }
        let mut b = self.start("b", mode).await;
        blocking(|| b.proxy().replica.wait_for(message::FOLLOWING, PATIENCE));
        self.wait_correct(Backend::Web).await;
        (a, b)
    }

    /// Replica `x` of `mode` up to its Contour: its credentials, and its proxy serving (and
    /// electing) when it has one.
    async fn seat(&self, x: &str, mode: Mode) -> Seat {
        let user = service_account(mode, x);
        let kubeconfig = self.token_kubeconfig(&user).await;
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
                        format!("{}/{CONTOUR_LEASE}", self.ns),
                    ]);
                }
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                let (ns, dir) = (self.ns.as_str(), self.dir.path());
                Some(blocking(|| {
                    Proxy::start_with(&kubeconfig, &user, ns, dir, &extra)
                }))
            }
        };
        Seat {
            x: x.to_string(),
            mode,
            user: format!("system:serviceaccount:{}:{user}", self.ns),
            kubeconfig,
            proxy,
        }
    }

    /// Starts the Contour of `seat`: through its proxy when it has one, else with its own
    /// credentials; with Contour's own election unless its proxy alone decides.
    async fn start_contour(&self, seat: Seat) -> Pod {
        let mut options = Options::new(&self.ns, GATEWAY).with_watch_namespaces(&[&self.ns]);
        if seat.mode != Mode::Fenced {
            options = options.with_election(
                Election::new(&self.ns, CONTOUR_LEASE).with_timing(LEASE, RENEW, RETRY),
            );
        }
        let kubeconfig = seat
            .proxy
            .as_ref()
            .map_or(&seat.kubeconfig, |p| &p.kubeconfig);
        let contour = Contour::start(&format!("{}-{}", self.ns, seat.x), kubeconfig, &options)
            .await
            .unwrap_or_else(|e| panic!("contour {}: {e:#}", seat.x));
        Pod {
            user: seat.user,
            proxy: seat.proxy,
            contour,
        }
    }

    fn routes(&self) -> Api<HttpRoute> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    fn gateways(&self) -> Api<Gateway> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Every status of the scene as Contour writes it, when route `moved` goes to `moved`; the
    /// first difference otherwise.
    async fn check(&self, moved: Backend) -> Result<(), String> {
        let gw = self
            .gateways()
            .get(GATEWAY)
            .await
            .map_err(|e| e.to_string())?;
        gateway_correct(&gw, 3)?;
        for (name, resolved) in routes_resolved(moved) {
            let r = self.routes().get(name).await.map_err(|e| e.to_string())?;
            route_correct(&r, resolved).map_err(|e| format!("route {name}: {e}"))?;
        }
        Ok(())
    }

    /// Waits (on watches) until the server holds every status of the scene; panics after
    /// [`PATIENCE`] with the first difference.
    async fn wait_correct(&self, moved: Backend) {
        let watched = async {
            await_condition(self.gateways(), GATEWAY, |gw: Option<&Gateway>| {
                gw.is_some_and(|gw| gateway_correct(gw, 3).is_ok())
            })
            .await?;
            for (name, resolved) in routes_resolved(moved) {
                await_condition(self.routes(), name, move |r: Option<&HttpRoute>| {
                    r.is_some_and(|r| route_correct(r, resolved).is_ok())
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
        // The watches saw each object right at one instant; all of them right at once now.
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

    /// The status writes (updates of a `/status` subresource) of the scene's namespace the
    /// apiserver answered, oldest first.
    fn status_writes(&self) -> Vec<Request> {
        self.audited(|e| {
            e["verb"] == "update"
                && e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["namespace"] == self.ns.as_str()
        })
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

    /// The holder of Lease `name` on the server ("" once released or when there is none).
    async fn holder(&self, name: &str) -> String {
        lease_holder(&self.admin, &self.ns, name).await
    }

    /// Waits until the server says Lease `name` is held by the proxy whose identity is
    /// `identity` (its holder is `<identity>_<incarnation>`); panics after [`PATIENCE`].
    async fn wait_holder(&self, name: &str, identity: &str) {
        wait_lease_holder(&self.admin, &self.ns, name, identity, PATIENCE).await
    }

    /// Asserts that every status write the server took in the scene came from `user`, and
    /// that there was one at least; returns how many.
    fn all_written_by(&self, user: &str) -> usize {
        let writes = self.status_writes();
        let landed: Vec<&Request> = writes.iter().filter(|w| w.code < 300).collect();
        assert!(!landed.is_empty(), "{}: no status write at all", self.ns);
        let others: Vec<&&Request> = landed.iter().filter(|w| w.user != user).collect();
        assert!(
            others.is_empty(),
            "{}: status writes by others than {user}: {others:#?}",
            self.ns
        );
        landed.len()
    }

    /// Asserts that nobody but Contour (the field manager its user agent names) wrote the
    /// statuses (managedFields).
    async fn only_contour_manages_statuses(&self) {
        let gw = self.gateways().get(GATEWAY).await.expect("the Gateway");
        assert_eq!(
            status_managers(&gw),
            ["contour".to_string()].into(),
            "{gw:?}"
        );
        for r in self
            .routes()
            .list(&Default::default())
            .await
            .expect("routes")
        {
            assert_eq!(status_managers(&r), ["contour".to_string()].into(), "{r:?}");
        }
    }
}

/// The service account of replica `x` (`a`, `b`) in `mode`: its Contour's, or its proxy's.
fn service_account(mode: Mode, x: &str) -> String {
    match mode {
        Mode::Native => format!("contour-{x}"),
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

/// The Gateway as Contour writes it: Accepted and Programmed, its one listener accepted,
/// programmed, resolved, with `attached` routes; every condition at its generation.
fn gateway_correct(gw: &Gateway, attached: i64) -> Result<(), String> {
    let v = serde_json::to_value(gw).map_err(|e| e.to_string())?;
    let generation = &v["metadata"]["generation"];
    let status = &v["status"];
    has_conditions(
        &status["conditions"],
        &[
            ("Accepted", "True", "Accepted"),
            ("Programmed", "True", "Programmed"),
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

/// The route as Contour writes it: its `status.parents` entry for the Gateway, by Contour's
/// controller, Accepted, and its refs resolved (or the backend not found).
fn route_correct(r: &HttpRoute, resolved: bool) -> Result<(), String> {
    let v = serde_json::to_value(r).map_err(|e| e.to_string())?;
    let ours: Vec<&Value> = v["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["controllerName"] == CONTROLLER_NAME)
        .collect();
    let [parent] = ours.as_slice() else {
        return Err(format!(
            "{} entries of {CONTROLLER_NAME} in {}",
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
    fn proxy(&mut self) -> &mut Proxy {
        self.proxy.as_mut().expect("a replica with a proxy")
    }

    /// The proxy's own metrics now.
    fn proxy_metrics(&mut self) -> String {
        let health = blocking(|| self.proxy().replica.health_addr(PATIENCE));
        blocking(|| testkit::metrics::get(health, "/metrics")).expect("the proxy's /metrics")
    }

    /// Status writes (updates) the proxy refused: they never reached the apiserver.
    fn refused_updates(&mut self) -> f64 {
        let m = self.proxy_metrics();
        testkit::metrics::sum(
            &m,
            "gateway_leader_proxy_requests_total",
            Some(r#"verb="update",outcome="refused""#),
        )
    }

    /// Waits until the proxy has refused `at_least` status writes and Contour counted as many
    /// failed: each refused write was one request, which neither client-go nor Contour sent
    /// again. Returns the count; panics after [`PATIENCE`].
    async fn wait_refusals_counted(&mut self, at_least: f64) -> f64 {
        let until = Instant::now() + PATIENCE;
        loop {
            let (refused, failed) = (self.refused_updates(), self.contour_failed_updates().await);
            if refused >= at_least && refused == failed {
                return refused;
            }
            assert!(
                Instant::now() < until,
                "{}: {refused} writes refused by the proxy, {failed} failed in Contour (wanted \
                 {at_least} or more of each, as many)",
                self.contour.name()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Status writes Contour counted as failed (`contour_status_update_failed_total`).
    async fn contour_failed_updates(&self) -> f64 {
        let m = self.contour.metrics().await.expect("Contour's /metrics");
        testkit::metrics::sum(&m, "contour_status_update_failed_total", None)
    }

    /// A graceful stop of the whole replica, as the kubelet stops a pod: SIGTERM to its proxy
    /// and its Contour at once. Returns what `meanwhile` returns, once both have exited.
    async fn terminate_while<T>(&mut self, meanwhile: impl Future<Output = T>) -> T {
        if let Some(p) = self.proxy.as_mut() {
            p.replica.terminate();
        }
        let (stopped, out) = tokio::join!(self.contour.terminate(PATIENCE), meanwhile);
        stopped.unwrap_or_else(|e| panic!("{}: {e:#}", self.contour.name()));
        if let Some(p) = self.proxy.as_mut() {
            assert_eq!(
                blocking(|| p.replica.wait_exit(PATIENCE)),
                Some(0),
                "the proxy exits cleanly after SIGTERM"
            );
        }
        out
    }

    /// A graceful stop of the whole replica.
    async fn terminate(&mut self) {
        self.terminate_while(async {}).await
    }
}

/// Waits until `contour` says it leads its election (its metrics); panics after [`PATIENCE`].
async fn wait_leads(contour: &Contour) {
    let until = Instant::now() + PATIENCE;
    while !contour.leads().await.unwrap_or(false) {
        assert!(
            Instant::now() < until,
            "{} did not lead within {PATIENCE:?}",
            contour.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
