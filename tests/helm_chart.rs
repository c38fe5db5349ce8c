//! The Helm chart in `deploy/helm/gateway-leader/`, with helm built from its Go module
//! (`scripts/build-helm.sh`): it lints for every backend; for the same settings it renders the
//! objects the kustomize base and overlays render, but for the differences listed in
//! [`INTENDED`]; every setting it passes is one the binary takes; its RBAC is the base's, which
//! tests/in_cluster.rs proves enough (and `the_charts_rbac_is_enough_in_cluster` there runs on
//! the chart's own); its sidecar mode is the sidecar overlay's shape; and its objects are created
//! on a kube-apiserver. tests/helm_values.rs checks its values: the schema and the docs' table.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::deploy::{
    container, create_all, deploy_dir, environment, fresh, mount_secrets, of_kind, one, printed,
    render, resource_for, strings,
};
use common::helm::{chart_dir, run, template, template_as, NAMESPACE};
use common::pod::PodFiles;
use kube::api::{Api, DynamicObject};
use kube::discovery::Scope;
use serde_json::{json, Value};

/// What the chart renders differently from `kubectl kustomize deploy/...` on purpose; the
/// comparison takes these out of both sides and nothing else.
///
/// 1. Helm's labels (`helm.sh/chart`, `app.kubernetes.io/{instance,version,managed-by}`) on
///    every object, and `app.kubernetes.io/instance` in the selectors, so that two releases in
///    one namespace do not select each other's pods.
/// 2. No Namespace object: `helm install --namespace ... --create-namespace` makes it, and an
///    uninstall must not delete it.
/// 3. The lock's settings are literal `env` values in the pod template, where the overlays take
///    them from a generated ConfigMap: `helm upgrade` with new values changes the pod template
///    and so rolls the Deployment by itself. The comparison resolves the overlays'
///    `configMapKeyRef`s to their values and drops the ConfigMap.
/// 4. The image's tag: the chart's appVersion by default, `latest` in the base (the comparison
///    sets `image.tag: latest`).
/// 5. No namespace on the cluster-scoped admission policy and its binding: kustomize gives every
///    kind it does not know the kustomization's namespace, which the apiserver drops.
const INTENDED: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
];

/// Removes Helm's labels (difference 1) wherever they are: labels and selectors.
fn drop_helm_labels(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in INTENDED {
                m.remove(k);
            }
            m.values_mut().for_each(drop_helm_labels);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_helm_labels),
        _ => {}
    }
}

/// The kustomize render with differences 2 and 3 taken out.
fn kustomize_comparable(objects: &[Value]) -> Vec<Value> {
    let maps: Vec<&Value> = of_kind(objects, "ConfigMap");
    let mut out = Vec::new();
    for o in objects {
        if o["kind"] == "Namespace" || o["kind"] == "ConfigMap" {
            continue;
        }
        let mut o = o.clone();
        if matches!(
            o["kind"].as_str(),
            Some("ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding")
        ) {
            if let Some(m) = o["metadata"].as_object_mut() {
                m.remove("namespace");
            }
        }
        if o["kind"] == "Deployment" {
            let env = &mut o["spec"]["template"]["spec"]["containers"][0]["env"];
            for e in env.as_array_mut().into_iter().flatten() {
                let Some(r) = e["valueFrom"]["configMapKeyRef"].as_object().cloned() else {
                    continue;
                };
                let map = maps
                    .iter()
                    .find(|m| m["metadata"]["name"] == r["name"])
                    .unwrap_or_else(|| panic!("{e}: its ConfigMap is rendered"));
                let value = map["data"][r["key"].as_str().expect("key")].clone();
                *e = json!({"name": e["name"], "value": value});
            }
        }
        out.push(o);
    }
    out
}

/// The first path at which `a` and `b` differ, with both values there.
fn difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (v, w) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                difference(v, w, &format!("{at}.{k}"))
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| difference(v, w, &format!("{at}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{at}: chart {a}, kustomize {b}")),
    }
}

/// Objects by kind, namespace and name.
fn by_name(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|mut o| {
            drop_helm_labels(&mut o);
            let key = format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, o)
        })
        .collect()
}

/// The one ConfigMap's value at `key` in a rendered overlay.
fn config(objects: &[Value], key: &str) -> String {
    one(objects, "ConfigMap")["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("the overlay's ConfigMap has {key}"))
        .to_string()
}

/// A comma-separated ConfigMap value as a list.
fn list(text: &str) -> Vec<String> {
    text.split(',').map(str::to_string).collect()
}

/// The chart's values for the settings a kustomization renders (its ConfigMap's, so that an
/// edited overlay is compared with the chart set the same way).
fn values_like(kustomization: &str, objects: &[Value]) -> Value {
    let le = match kustomization {
        "base" => json!({}),
        "overlays/etcd" => json!({"backend": "etcd", "etcd": {
            "endpoints": list(&config(objects, "endpoints")),
            "username": config(objects, "username")}}),
        "overlays/redis" => json!({"backend": "redis", "redis": {
            "url": config(objects, "url"), "username": config(objects, "username")}}),
        "overlays/redis-sentinel" => json!({"backend": "redis", "redis": {
            "url": "",
            "username": config(objects, "username"),
            "sentinel": {"urls": list(&config(objects, "sentinels")),
                         "master": config(objects, "master"),
                         "username": config(objects, "sentinel-username")}}}),
        other => panic!("no values for {other}"),
    };
    json!({"image": {"tag": "latest"}, "leaderElection": le})
}

const KUSTOMIZATIONS: [&str; 4] = [
    "base",
    "overlays/etcd",
    "overlays/redis",
    "overlays/redis-sentinel",
];

#[test]
fn the_chart_renders_what_kustomize_renders_for_the_same_settings() {
    for k in KUSTOMIZATIONS {
        let kustomized = render(&deploy_dir().join(k));
        let values = values_like(k, &kustomized);
        let want = by_name(kustomize_comparable(&kustomized));
        let got = by_name(template(&values));
        let (wk, gk): (Vec<_>, Vec<_>) = (want.keys().collect(), got.keys().collect());
        assert_eq!(
            gk, wk,
            "{k}: the chart renders the same objects with {values}"
        );
        for (key, w) in &want {
            if let Some(d) = difference(&got[key], w, "") {
                panic!("{k}: the chart's {key} differs from kustomize's with {values}: {d}");
            }
        }
    }
}

/// Values for each backend, and with leader election off.
fn every_backend() -> Vec<(&'static str, Value)> {
    vec![
        ("kubernetes", json!({})),
        ("etcd", json!({"leaderElection": {"backend": "etcd"}})),
        ("redis", json!({"leaderElection": {"backend": "redis"}})),
        (
            "redis with sentinel",
            json!({"leaderElection": {"backend": "redis", "redis": {"url": "",
                "sentinel": {"urls": ["rediss://s-0:26379", "rediss://s-1:26379"],
                             "master": "gateway-leader"}}}}),
        ),
        (
            "leader election off",
            json!({"replicaCount": 1, "leaderElection": {"enable": false}}),
        ),
    ]
}

#[test]
fn helm_lints_the_chart_for_every_backend() {
    let chart = chart_dir();
    for (what, values) in every_backend() {
        let out = run(
            &["lint", "--strict", chart.to_str().expect("UTF-8")],
            &values,
        );
        assert!(
            out.status.success(),
            "{what}: helm lint --strict fails:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A case of [`all_set`]: what it is, the values, and each `--print-config` key with the value
/// it must show.
type SetCase = (&'static str, Value, Vec<(&'static str, &'static str)>);

/// Every setting the chart can pass, set to something other than the binary's default, per
/// backend.
fn all_set() -> Vec<SetCase> {
    let common = |backend: Value| {
        let mut le = json!({"lockName": "my-lock", "leaseDuration": "20s",
                            "renewDeadline": "12s", "retryPeriod": "3s",
                            "releaseOnShutdown": false, "wakeup": "poll"});
        le.as_object_mut()
            .expect("object")
            .extend(backend.as_object().cloned().unwrap_or_default());
        json!({"leaderElection": le, "controllerName": "example.com/gateway-controller",
               "gatewayAddressesService": "gateway-system/envoy",
               "logLevel": "debug", "metrics": {"port": 9191},
               "terminationGracePeriodSeconds": 40})
    };
    let shared = [
        ("leader_election_lock_name", "my-lock"),
        ("lease_duration", "20s"),
        ("renew_deadline", "12s"),
        ("retry_period", "3s"),
        ("release_on_shutdown", "false"),
        ("wakeup", "poll"),
        ("controller_name", "example.com/gateway-controller"),
        ("gateway_addresses_service", "gateway-system/envoy"),
        ("log_level", "debug"),
        ("health_addr", "0.0.0.0:9191"),
        ("log_format", "json"),
    ];
    let with = |extra: &[(&'static str, &'static str)]| [&shared[..], extra].concat();
    vec![
        (
            "kubernetes",
            common(json!({"kubernetes": {"namespace": "leases"}})),
            with(&[
                ("lock_backend", "kubernetes"),
                ("leader_election_namespace", "leases"),
            ]),
        ),
        (
            "etcd",
            common(json!({"backend": "etcd", "etcd": {
                "endpoints": ["https://etcd-0:2379", "https://etcd-1:2379"],
                "username": "gl", "keyPrefix": "/locks/",
                "secret": {"name": "etcd-auth", "certKey": "tls.crt", "keyKey": "tls.key"}}})),
            with(&[
                ("lock_backend", "etcd"),
                ("etcd_username", "gl"),
                ("etcd_key_prefix", "/locks/"),
            ]),
        ),
        (
            "redis",
            common(json!({"backend": "redis", "redis": {
                "url": "rediss://redis:6380", "username": "gl", "keyPrefix": "locks",
                "waitReplicas": 1}})),
            with(&[
                ("lock_backend", "redis"),
                ("redis_url", "rediss://redis:6380"),
                ("redis_username", "gl"),
                ("redis_key_prefix", "locks"),
                ("redis_wait_replicas", "1"),
            ]),
        ),
        (
            "redis with sentinel",
            common(json!({"backend": "redis", "redis": {
                "url": "", "username": "gl",
                "sentinel": {"urls": ["rediss://s-0:26379"], "master": "primary",
                             "username": "gl-sentinel"}}})),
            with(&[
                ("lock_backend", "redis"),
                ("redis_sentinel_master", "primary"),
                ("redis_username", "gl"),
                ("redis_sentinel_username", "gl-sentinel"),
            ]),
        ),
    ]
}

#[test]
fn every_setting_the_chart_passes_is_one_the_binary_takes() {
    let defaults: Vec<(&str, Value)> = every_backend();
    let set = all_set()
        .into_iter()
        .map(|(w, v, e)| (w, v, Some(e)))
        .chain(defaults.into_iter().map(|(w, v)| (w, v, None)));
    for (what, values, expected) in set {
        let objects = template(&values);
        let c = container(&objects);
        let args = strings(&c["args"]);
        let pod = PodFiles::new();
        let files = mount_secrets(&objects, &pod);
        let env = environment(&objects);
        let out = pod
            .command(
                Path::new(env!("CARGO_BIN_EXE_gateway-leader")),
                &[args.clone(), vec!["--print-config".into()]].concat(),
                &env,
            )
            .output()
            .expect("runs");
        let config = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{what}: {args:?} with {env:?} are not valid settings: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for f in &files {
            assert!(
                config.contains(&format!("\"{f}\"")),
                "{what}: {f} is used: {config}"
            );
        }
        for (name, value) in &env {
            if let Some(key) = name.strip_prefix("GATEWAY_LEADER_") {
                let shown = printed(&config, &key.to_lowercase());
                // Lists are printed as TOML arrays.
                let as_list = format!(
                    "[{}]",
                    list(value)
                        .iter()
                        .map(|v| format!("\"{v}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                assert!(
                    shown == Some(value.as_str()) || shown == Some(as_list.as_str()),
                    "{what}: {name}={value} took effect: {config}"
                );
            }
        }
        let off = values["leaderElection"]["enable"] == false;
        assert_eq!(
            printed(&config, "leader_election_disable"),
            Some(if off { "true" } else { "false" }),
            "{what}: {config}"
        );
        for (key, want) in expected.into_iter().flatten() {
            let shown = printed(&config, key).unwrap_or_else(|| panic!("{what}: {key}: {config}"));
            let same = match (
                humantime::parse_duration(shown),
                humantime::parse_duration(want),
            ) {
                (Ok(a), Ok(b)) => a == b,
                _ => shown == want,
            };
            assert!(same, "{what}: {key} is {shown}, the values say {want}");
        }
        // The grace period covers a graceful stop with these settings (docs/operations.md's
        // shutdown budget).
        let renew = humantime::parse_duration(printed(&config, "renew_deadline").expect("renew"))
            .expect("a duration");
        let grace = one(&objects, "Deployment")["spec"]["template"]["spec"]
            ["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("grace");
        assert!(
            Duration::from_secs(grace) > gateway_leader::shutdown::graceful_stop_budget(renew),
            "{what}: grace {grace}s"
        );
        // The probes, the container's port and the Service agree on the health port.
        let port = c["ports"][0]["containerPort"].as_u64().expect("port");
        let addr = printed(&config, "health_addr").expect("health_addr");
        assert!(
            addr.ends_with(&format!(":{port}")),
            "{what}: {addr} vs {port}"
        );
        let svc = one(&objects, "Service");
        assert_eq!(svc["spec"]["ports"][0]["port"], port, "{what}");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics", "{what}");
    }
}

/// The ClusterRole's and (if any) the Role's rules, by kind.
fn rules(objects: &[Value]) -> BTreeMap<String, Value> {
    ["Role", "ClusterRole"]
        .iter()
        .flat_map(|k| of_kind(objects, k))
        .map(|o| {
            let (kind, name) = (&o["kind"], &o["metadata"]["name"]);
            (
                format!(
                    "{} {}",
                    kind.as_str().expect("kind"),
                    name.as_str().expect("name")
                ),
                o["rules"].clone(),
            )
        })
        .collect()
}

#[test]
fn the_charts_rbac_is_the_bases_for_exactly_what_the_lock_needs() {
    let base = render(&deploy_dir().join("base"));
    let base_rules = rules(&base);
    assert!(
        base_rules.contains_key("ClusterRole gateway-leader-fencing-check"),
        "{base_rules:?}"
    );
    for (what, values) in every_backend() {
        let objects = template(&values);
        let got = rules(&objects);
        let lease = what == "kubernetes";
        // The Lease's Role, and the read of the fence that is bound to the Lease, only for the
        // kubernetes lock.
        let want: BTreeMap<String, Value> = base_rules
            .iter()
            .filter(|(k, _)| lease || !(k.starts_with("Role ") || k.ends_with("fencing-check")))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "{what}");
        assert_eq!(of_kind(&objects, "RoleBinding").len(), usize::from(lease));
    }
    // The Role goes where the Lease is; its binding names the pods' ServiceAccount.
    let objects = template(
        &json!({"leaderElection": {"kubernetes": {"namespace": "leases"}},
                                   "serviceAccount": {"name": "gl"}}),
    );
    let role = one(&objects, "Role");
    assert_eq!(role["metadata"]["namespace"], "leases");
    let binding = one(&objects, "RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], "leases");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "gl", "namespace": NAMESPACE}])
    );
    assert_eq!(
        one(&objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"],
        "gl"
    );
    // rbac.create false: none at all (the operator binds their own).
    let objects = template(&json!({"rbac": {"create": false}}));
    assert!(rules(&objects).is_empty());
}

#[test]
fn the_service_monitor_scrapes_the_metrics_service() {
    let objects = template(&json!({"metrics": {"serviceMonitor": {"enabled": true,
        "labels": {"release": "prometheus"}}}}));
    let sm = one(&objects, "ServiceMonitor");
    let svc = one(&objects, "Service");
    assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("labels")
    {
        assert_eq!(svc["metadata"]["labels"][k], *v, "the Service has {k}");
    }
    assert_eq!(
        sm["spec"]["endpoints"][0]["port"],
        svc["spec"]["ports"][0]["name"]
    );
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
    assert!(
        of_kind(&template(&json!({})), "ServiceMonitor").is_empty(),
        "off by default"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_is_created_for_real_with_rbac_on() {
    let server = testkit::kube::KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    let client = server.admin_client();
    for (what, values) in every_backend() {
        // A release of its own: names that no other copy on the server uses.
        let ns = fresh("helm");
        let objects = template_as(&ns, &ns, &values).unwrap_or_else(|e| panic!("{what}: {e}"));
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": ns}});
        create_all(&client, &[namespace], false).await;
        // The fence's binding only as a dry run: its Lease does not exist here, and a binding
        // whose Lease is missing refuses every Gateway API status write on the server, whoever
        // sends it (tests/server_fencing.rs binds it for real, on a server of its own).
        let (binding, objects): (Vec<Value>, Vec<Value>) = objects
            .into_iter()
            .partition(|o| o["kind"] == "ValidatingAdmissionPolicyBinding");
        create_all(&client, &objects, false).await;
        create_all(&client, &binding, true).await;
        // Nothing cluster-wide of this copy may stay on someone's cluster.
        if server.is_external() {
            for obj in &objects {
                let (resource, caps) = resource_for(&client, obj).await;
                if caps.scope == Scope::Cluster {
                    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                    let name = obj["metadata"]["name"].as_str().expect("name");
                    let _ = api.delete(name, &Default::default()).await;
                }
            }
        }
    }
}

/// Sidecar mode is `deploy/overlays/sidecar`'s shape: `proxy` instead of `run` with a loopback
/// `--proxy-listen`, the controller beside it with a kubeconfig that is the one the proxy writes
/// for itself, no status-writer ClusterRole, and the fence bound to the proxies' Lease.
#[test]
fn sidecar_mode_runs_the_proxy_beside_the_controller_as_the_overlay_does() {
    let overlay = render(&deploy_dir().join("overlays/sidecar"));
    let overlay_pod = &one(&overlay, "Deployment")["spec"]["template"]["spec"];
    let theirs = overlay_pod["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "controller")
        .expect("the overlay's sample controller")
        .clone();
    let mut controller = theirs.clone();
    let m = controller.as_object_mut().expect("a container");
    m.remove("env");
    m.remove("volumeMounts");
    let objects = template(&json!({
        "leaderElection": {"lockName": "sample-controller"},
        "sidecar": {"enabled": true, "controller": controller},
    }));
    let args = strings(&container(&objects)["args"]);
    assert_eq!(args.first().map(String::as_str), Some("proxy"), "{args:?}");
    let listen = args
        .iter()
        .skip_while(|a| *a != "--proxy-listen")
        .nth(1)
        .expect("--proxy-listen");
    let addr: std::net::SocketAddr = listen.parse().expect("a loopback IP:PORT");
    assert!(addr.ip().is_loopback());
    // The binary takes the proxy's command line.
    let pod = PodFiles::new();
    let out = pod
        .command(
            Path::new(env!("CARGO_BIN_EXE_gateway-leader")),
            &[args.clone(), vec!["--print-config".into()]].concat(),
            &environment(&objects),
        )
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The controller: the overlay's, with the same KUBECONFIG and mount.
    let pod_spec = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    let ours = pod_spec["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "controller")
        .expect("the controller beside the proxy");
    assert_eq!(ours["env"], theirs["env"]);
    assert_eq!(ours["volumeMounts"], theirs["volumeMounts"]);
    assert_eq!(ours["image"], theirs["image"]);
    let cm = one(&objects, "ConfigMap");
    let mounted: Value =
        serde_yaml::from_str(cm["data"]["kubeconfig"].as_str().expect("a kubeconfig"))
            .expect("YAML");
    let written: Value =
        serde_yaml::from_str(&gateway_leader::proxy::kubeconfig(addr)).expect("YAML");
    assert_eq!(mounted, written);
    let volume = pod_spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "controller-kubeconfig")
        .expect("the kubeconfig's volume");
    assert_eq!(volume["configMap"]["name"], cm["metadata"]["name"]);
    // The proxy writes no statuses of its own; the fence is on the proxies' Lease.
    assert!(
        of_kind(&objects, "ClusterRole")
            .iter()
            .all(|r| !r["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .ends_with("status-writer")),
        "no status-writer ClusterRole in sidecar mode"
    );
    let binding = one(&objects, "ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["spec"]["paramRef"]["name"], "sample-controller");
}
