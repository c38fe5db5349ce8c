//! One round: its namespace, its objects, its two replicas, and what it does to the leader.

use super::*;

/// What one round measured.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) led: Option<f64>,
    pub(super) correct: Option<f64>,
    pub(super) landed: Option<usize>,
    /// What those writes were.
    pub(super) landed_what: Vec<String>,
    /// Churn: the leader's rebuilds less the follower's.
    pub(super) behind: Option<f64>,
    /// Churn: stale statuses and rewrites after the handover.
    pub(super) stale: Option<(usize, usize)>,
}

/// One round's namespace, objects and replicas.
pub(super) struct Scene<'a> {
    server: &'a KubeApiServer,
    plan: &'a Plan,
    dir: &'a Path,
    kind: Kind,
    mode: Mode,
    ns: String,
    admin: Client,
    pods: Vec<Pod>,
}

/// One replica: its controller, its proxy unless native, and its pod network (Envoy Gateway).
/// Fields drop in order: processes before the relay and network they use.
struct Pod {
    user: String,
    controller: Controller,
    proxy: Option<Process>,
    _relay: Option<Relay>,
    _net: Option<PodNetwork>,
}

enum Controller {
    Contour(Contour),
    EnvoyGateway(EnvoyGateway),
}

impl Controller {
    fn pid(&self) -> Option<u32> {
        match self {
            Controller::Contour(c) => c.pid(),
            Controller::EnvoyGateway(e) => e.pid(),
        }
    }

    /// Its rebuilds of what it serves so far, leader or not.
    async fn rebuilds(&self) -> Result<f64> {
        match self {
            Controller::Contour(c) => c.dag_rebuilds().await,
            Controller::EnvoyGateway(e) => e.snapshots().await,
        }
    }

    async fn leads(&self) -> bool {
        match self {
            Controller::Contour(c) => c.leads().await.unwrap_or(false),
            Controller::EnvoyGateway(e) => e.leads().await.unwrap_or(false),
        }
    }
}

impl Pod {
    /// Sends `s` to the whole replica: its controller and its proxy.
    fn signal(&self, s: Signal) {
        let mut pids: Vec<u32> = self.controller.pid().into_iter().collect();
        if let Some(p) = &self.proxy {
            pids.push(p.id());
        }
        for pid in pids {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = kill(Pid::from_raw(pid), s);
            }
        }
    }
}

impl<'a> Scene<'a> {
    /// Namespace `rc-N` with a GatewayClass of the scene's own, a Gateway, a Service `web` and
    /// route `moved` to it, one service account per replica bound to the controller's RBAC
    /// (and the proxies' Lease rights), and both replicas running, every status right.
    pub(super) async fn new(
        server: &'a KubeApiServer,
        plan: &'a Plan,
        dir: &'a Path,
        kind: Kind,
        mode: Mode,
        n: usize,
    ) -> Result<Scene<'a>> {
        let ns = format!("rc-{n}");
        server.create_namespace(&ns).await?;
        let admin = server.admin_client();
        let mut scene = Scene {
            server,
            plan,
            dir,
            kind,
            mode,
            ns,
            admin,
            pods: Vec::new(),
        };
        scene.objects().await?;
        let mut manifests = vec![match kind {
            Kind::Contour => testkit::contour::rbac_manifest()?,
            Kind::EnvoyGateway => testkit::envoy_gateway::rbac_manifest()?,
        }];
        if mode != Mode::Native {
            manifests.push(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../deploy/base/rbac-leader-election.yaml"),
            );
        }
        for file in &manifests {
            testkit::rbac::bind_manifest_to(server, file, &scene.ns, &["a", "b"])
                .await
                .with_context(|| format!("binding {}", file.display()))?;
        }
        for x in ["a", "b"] {
            let pod = scene.start(x).await?;
            scene.pods.push(pod);
            if x == "a" {
                scene.wait_leads(0).await?;
            }
        }
        scene.wait_right("web", PATIENCE).await?;
        if !scene.wait_leads_now(0).await {
            bail!("replica a does not lead once both run");
        }
        Ok(scene)
    }

    fn controller_name(&self) -> String {
        match self.kind {
            Kind::Contour => testkit::contour::CONTROLLER_NAME.to_string(),
            Kind::EnvoyGateway => format!("gateway.envoyproxy.io/{}", self.ns),
        }
    }

    /// The GatewayClass, Gateway, Service and route.
    async fn objects(&self) -> Result<()> {
        let ns = &self.ns;
        let objects = [
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                "metadata": {"name": ns}, "spec": {"controllerName": self.controller_name()}}),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "gw", "namespace": ns},
                "spec": {"gatewayClassName": ns,
                    "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": ns},
                "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}}}),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "moved", "namespace": ns},
                "spec": {"parentRefs": [{"name": "gw"}], "hostnames": ["moved.example.com"],
                    "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}),
        ];
        let [class, gateway, service, route] = objects;
        let pp = PostParams::default();
        let admin = &self.admin;
        Api::<GatewayClass>::all(admin.clone())
            .create(&pp, &serde_json::from_value(class)?)
            .await?;
        Api::<Gateway>::namespaced(admin.clone(), ns)
            .create(&pp, &serde_json::from_value(gateway)?)
            .await?;
        Api::<Service>::namespaced(admin.clone(), ns)
            .create(&pp, &serde_json::from_value(service)?)
            .await?;
        self.routes()
            .create(&pp, &serde_json::from_value(route)?)
            .await?;
        Ok(())
    }

    /// A kubeconfig for the apiserver with service account `sa`'s token, as reached from
    /// `relay` when given (a pod network's).
    async fn kubeconfig(&self, sa: &str, relay: Option<&Relay>) -> Result<PathBuf> {
        let token = self.server.service_account_token(&self.ns, sa).await?;
        let path = self.dir.join(format!("{}-{sa}.kubeconfig", self.ns));
        self.server.write_token_kubeconfig(&token, &path)?;
        if let Some(relay) = relay {
            let mut kc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
            for c in kc["clusters"].as_array_mut().into_iter().flatten() {
                c["cluster"]["server"] = json!(format!("https://{}", relay.addr()));
                c["cluster"]["tls-server-name"] = json!("kubernetes");
            }
            std::fs::write(&path, serde_json::to_vec_pretty(&kc)?)?;
        }
        Ok(path)
    }

    /// Replica `x`: its network (Envoy Gateway), its proxy, its controller.
    async fn start(&self, x: &str) -> Result<Pod> {
        let t = self.plan.timing;
        let (net, relay) = match self.kind {
            Kind::Contour => (None, None),
            Kind::EnvoyGateway => {
                let net = PodNetwork::new()?;
                let to = self
                    .server
                    .local_addr()
                    .ok_or_else(|| anyhow!("not a local apiserver"))?;
                let relay = Relay::start(net.host_ip(), to)?;
                (Some(net), Some(relay))
            }
        };
        let kubeconfig = self.kubeconfig(x, relay.as_ref()).await?;
        let election_lease = match self.kind {
            Kind::Contour => CONTOUR_LEASE.to_string(),
            Kind::EnvoyGateway => testkit::envoy_gateway::LEASE_NAME.to_string(),
        };
        let (proxy, controller_kubeconfig) = if self.mode == Mode::Native {
            (None, kubeconfig.clone())
        } else {
            let port = testkit::process::free_port()?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let go = |d: Duration| format!("{}ms", d.as_millis());
            let health = net
                .as_ref()
                .map_or("127.0.0.1:0".to_string(), |n| format!("{}:0", n.pod_ip()));
            let mut args: Vec<String> = vec!["proxy".into()];
            for (flag, value) in [
                ("--lock-backend", "kubernetes".to_string()),
                ("--kubeconfig", kubeconfig.display().to_string()),
                ("--leader-election-namespace", self.ns.clone()),
                ("--leader-election-lock-name", PROXY_LEASE.to_string()),
                ("--leader-election-identity", format!("proxy-{x}")),
                ("--lease-duration", go(t.lease)),
                ("--renew-deadline", go(t.renew)),
                ("--retry-period", go(t.retry)),
                ("--proxy-listen", addr.to_string()),
                ("--health-addr", health),
                ("--log-format", "json".to_string()),
            ] {
                args.extend([flag.to_string(), value]);
            }
            if self.mode == Mode::Driven {
                args.extend([
                    "--proxy-election-lease".to_string(),
                    format!("{}/{election_lease}", self.ns),
                ]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut cmd = match &net {
                Some(net) => net.command(&self.plan.binary, &args, &[]),
                None => {
                    let mut c = Command::new(&self.plan.binary);
                    c.args(&args);
                    c
                }
            };
            cmd.env("RUST_LOG", "info");
            testkit::replica::clear_settings(&mut cmd);
            let log = self.plan.logs.join(format!("{}-proxy-{x}.log", self.ns));
            let mut proxy = Process::spawn(cmd, true, &log)?;
            proxy
                .wait(PATIENCE, |v| {
                    v["message"] == gateway_leader_log::message::PROXY_SERVING
                })
                .with_context(|| format!("proxy-{x} serving"))?;
            let path = self.dir.join(format!("{}-{x}-proxy.kubeconfig", self.ns));
            std::fs::write(&path, gateway_leader::proxy::kubeconfig(addr))?;
            if x == "a" {
                self.wait_holder(&format!("proxy-{x}_")).await?;
            }
            (Some(proxy), path)
        };
        let retry = match self.mode {
            Mode::Driven => t.controller_retry,
            _ => t.retry,
        };
        let elects = self.mode != Mode::Fenced;
        let controller = match self.kind {
            Kind::Contour => {
                let mut o = testkit::contour::Options::new(&self.ns, "gw")
                    .with_watch_namespaces(&[&self.ns]);
                if elects {
                    o = o.with_election(
                        testkit::contour::Election::new(&self.ns, CONTOUR_LEASE)
                            .with_timing(t.lease, t.renew, retry),
                    );
                }
                Controller::Contour(
                    Contour::start(&format!("{}-{x}", self.ns), &controller_kubeconfig, &o).await?,
                )
            }
            Kind::EnvoyGateway => {
                let mut o = testkit::envoy_gateway::Options::new(&self.ns, &self.controller_name())
                    .with_watch_namespaces(&[&self.ns]);
                if elects {
                    o = o.with_election(t.lease, t.renew, retry);
                }
                let net = net.as_ref().ok_or_else(|| anyhow!("no pod network"))?;
                Controller::EnvoyGateway(
                    EnvoyGateway::start(
                        &format!("{}-{x}", self.ns),
                        net,
                        &controller_kubeconfig,
                        &o,
                    )
                    .await?,
                )
            }
        };
        Ok(Pod {
            user: format!("system:serviceaccount:{}:{x}", self.ns),
            controller,
            proxy,
            _relay: relay,
            _net: net,
        })
    }

    /// Whether replica `i` leads now: its controller (native, driven) or its proxy (fenced).
    async fn wait_leads_now(&self, i: usize) -> bool {
        match self.mode {
            Mode::Fenced => self
                .holder()
                .await
                .starts_with(&format!("proxy-{}_", ["a", "b"][i])),
            _ => self.pods[i].controller.leads().await,
        }
    }

    /// Waits until replica `i` leads; the time it took.
    async fn wait_leads(&self, i: usize) -> Result<Duration> {
        let start = Instant::now();
        while !self.wait_leads_now(i).await {
            if start.elapsed() > PATIENCE {
                bail!("replica {i} did not lead within {PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(start.elapsed())
    }

    /// Both controllers' rebuilds so far: a's, b's.
    async fn rebuild_counts(&self) -> Result<(f64, f64)> {
        Ok((
            self.pods[0].controller.rebuilds().await?,
            self.pods[1].controller.rebuilds().await?,
        ))
    }

    /// The proxies' Lease holder on the server.
    async fn holder(&self) -> String {
        Api::<Lease>::namespaced(self.admin.clone(), &self.ns)
            .get_opt(PROXY_LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default()
    }

    async fn wait_holder(&self, prefix: &str) -> Result<()> {
        let start = Instant::now();
        while !self.holder().await.starts_with(prefix) {
            if start.elapsed() > PATIENCE {
                bail!("the proxies' Lease not held by {prefix}* within {PATIENCE:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    fn routes(&self) -> Api<HttpRoute> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Points route `moved` at Service `to`.
    async fn move_route(&self, to: &str) -> Result<()> {
        let change = json!({"spec": {"rules": [{"backendRefs": [{"name": to, "port": 80}]}]}});
        self.routes()
            .patch("moved", &PatchParams::default(), &Patch::Merge(&change))
            .await?;
        Ok(())
    }

    /// Waits (on a watch) until route `moved`'s status, by the scene's controller, says its
    /// backend `to` resolves or not, at its generation; false after `limit`.
    async fn wait_right(&self, to: &str, limit: Duration) -> Result<bool> {
        let controller = self.controller_name();
        let resolved = to == "web";
        let cond =
            move |r: Option<&HttpRoute>| r.is_some_and(|r| route_right(r, &controller, resolved));
        match tokio::time::timeout(limit, await_condition(self.routes(), "moved", cond)).await {
            Ok(r) => r.map(|_| true).context("watching route moved"),
            Err(_) => Ok(false),
        }
    }

    /// The writes (statuses and others, as `verb resource[/subresource]/name`) the apiserver
    /// took from `user` in the namespace, but for Leases and Events.
    fn writes_from(&self, user: &str) -> Result<Vec<String>> {
        Ok(self
            .server
            .audit_events()?
            .iter()
            .filter(|e| {
                e["stage"] == "ResponseComplete"
                    && e["user"]["username"] == user
                    && e["objectRef"]["namespace"] == self.ns.as_str()
                    && e["objectRef"]["resource"] != "leases"
                    && matches!(
                        e["verb"].as_str(),
                        Some("create" | "update" | "patch" | "delete")
                    )
                    && e["objectRef"]["resource"] != "events"
                    && e["responseStatus"]["code"].as_i64().unwrap_or(500) < 300
            })
            .map(|e| {
                let o = &e["objectRef"];
                let sub = o["subresource"]
                    .as_str()
                    .map_or(String::new(), |s| format!("/{s}"));
                format!(
                    "{} {}{sub}/{}",
                    e["verb"].as_str().unwrap_or_default(),
                    o["resource"].as_str().unwrap_or_default(),
                    o["name"].as_str().unwrap_or_default()
                )
            })
            .collect())
    }

    pub(super) async fn round(mut self, scenario: Scenario) -> Result<Outcome> {
        let mut out = Outcome::default();
        let lost_limit = self.plan.timing.lease + Duration::from_secs(30);
        match scenario {
            Scenario::Graceful => {
                self.move_route("nowhere").await?;
                let start = Instant::now();
                self.pods[0].signal(Signal::SIGTERM);
                let (right, led) = tokio::join!(
                    async {
                        let r = self.wait_right("nowhere", lost_limit).await;
                        (r, start.elapsed())
                    },
                    async {
                        if self.mode == Mode::Fenced {
                            None
                        } else {
                            self.wait_leads(1).await.ok().map(|_| start.elapsed())
                        }
                    }
                );
                if right.0? {
                    out.correct = Some(right.1.as_secs_f64() * 1e3);
                }
                out.led = led.map(|d| d.as_secs_f64() * 1e3);
            }
            Scenario::Crash => {
                self.pods[0].signal(Signal::SIGKILL);
                let start = Instant::now();
                self.move_route("nowhere").await?;
                if self.mode == Mode::Fenced {
                    if self.wait_right("nowhere", lost_limit).await? {
                        out.correct = Some(start.elapsed().as_secs_f64() * 1e3);
                    }
                } else {
                    self.wait_leads(1).await?;
                    let led = start.elapsed();
                    out.led = Some(led.as_secs_f64() * 1e3);
                    if self.wait_right("nowhere", lost_limit).await? {
                        out.correct = Some((start.elapsed() - led).as_secs_f64() * 1e3);
                    }
                }
            }
            Scenario::Freeze => {
                self.pods[0].signal(Signal::SIGSTOP);
                self.wait_leads(1).await?;
                self.move_route("nowhere").await?;
                if !self.wait_right("nowhere", PATIENCE).await? {
                    bail!("the change made while a was frozen was not written");
                }
                let user = self.pods[0].user.clone();
                let before = self.writes_from(&user)?;
                self.pods[0].signal(Signal::SIGCONT);
                // What the thawed replica had in flight goes out within its own retry and
                // renew machinery, or not at all.
                tokio::time::sleep(self.plan.timing.renew + self.plan.timing.retry * 2).await;
                let after = self.writes_from(&user)?;
                let landed = after.get(before.len()..).unwrap_or_default().to_vec();
                out.landed = Some(landed.len());
                out.landed_what = landed;
            }
            Scenario::Churn => {
                let (a0, b0) = self.rebuild_counts().await?;
                for i in 0..40 {
                    self.move_route(if i % 2 == 0 { "nowhere" } else { "web" })
                        .await?;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if !self.wait_right("web", PATIENCE).await? {
                    bail!("the churn's last change was not written");
                }
                // Both see the last change within moments; a follower held up falls behind by
                // dozens.
                let until = Instant::now() + Duration::from_secs(10);
                let behind = loop {
                    let (a1, b1) = self.rebuild_counts().await?;
                    let behind = (a1 - a0) - (b1 - b0);
                    if behind <= 0.0 || Instant::now() > until {
                        break behind;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                };
                out.behind = Some(behind);
                let (stop, stopped) = tokio::sync::oneshot::channel();
                let watch = tokio::spawn(testkit::route_versions::record_versions(
                    self.routes(),
                    "moved",
                    stopped,
                ));
                tokio::time::sleep(Duration::from_millis(500)).await;
                self.pods[0].signal(Signal::SIGTERM);
                self.wait_leads(1).await?;
                if !self.wait_right("web", PATIENCE).await? {
                    bail!("the statuses were not right after the handover");
                }
                // Room for a late write from a queue of old updates, which is what this counts.
                tokio::time::sleep(self.plan.timing.retry * 3).await;
                let _ = stop.send(());
                let versions = watch.await.context("the route's watch")?;
                let stale = versions.iter().filter(|v| v.is_stale()).count();
                let rewrites = versions.iter().filter(|v| v.status_changed).count();
                out.stale = Some((stale, rewrites));
            }
        }
        let pods = std::mem::take(&mut self.pods);
        drop(pods);
        Ok(out)
    }
}

/// Route `moved`'s entry by `controller` says Accepted, and ResolvedRefs `resolved`, at the
/// route's generation.
fn route_right(r: &HttpRoute, controller: &str, resolved: bool) -> bool {
    let Ok(v) = serde_json::to_value(r) else {
        return false;
    };
    let generation = &v["metadata"]["generation"];
    let want = if resolved { "True" } else { "False" };
    v["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["controllerName"] == controller)
        .any(|p| {
            let conditions = p["conditions"].as_array();
            let has = |t: &str, s: &str| {
                conditions.into_iter().flatten().any(|c| {
                    c["type"] == t && c["status"] == s && c["observedGeneration"] == *generation
                })
            };
            has("Accepted", "True") && has("ResolvedRefs", want)
        })
}
