//! The proxy's component (`deploy/components/proxy-sidecar`) rendered onto Contour's manifests
//! as its release ships them (`deploy/examples/contour-with-proxy`); post_renderer.rs adds it
//! to a chart's output through the Helm post-renderer.

use super::*;

/// What `deploy/examples/contour-with-proxy` pulls from GitHub, as a path under `examples/` of
/// Contour's Go module: the same file at the same version.
const CONTOUR_RENDER: &str = "render/contour-gateway.yaml";

/// The port the component's proxy listens on, beside Contour's xDS on 8001.
pub(crate) const PROXY_LISTEN: &str = "127.0.0.1:8002";

/// `deploy/examples/contour-with-proxy` as `kubectl apply -k` renders it, with Contour's
/// manifests read from its Go module rather than GitHub; through an overlay that moves it to
/// namespace `moved_to` and appends `-<ns>` to every name, when given (as `render_in` does).
fn contour_with_proxy(moved_to: Option<&str>) -> Vec<Value> {
    let examples = testkit::contour::examples_dir().unwrap_or_else(|e| panic!("{e:#}"));
    let version = examples
        .parent()
        .and_then(|m| m.file_name())
        .and_then(|m| m.to_str())
        .and_then(|m| m.split_once('@'))
        .map(|(_, v)| v.to_string())
        .expect("the module's directory is contour@VERSION");
    let example = deploy_dir().join("examples/contour-with-proxy");
    let kustomization =
        std::fs::read_to_string(example.join("kustomization.yaml")).expect("the example");
    // The example follows the Contour the tests build (scripts/versions.sh).
    let url = format!(
        "https://raw.githubusercontent.com/projectcontour/contour/{version}/examples/{CONTOUR_RENDER}"
    );
    assert_eq!(
        kustomization.matches(&url).count(),
        1,
        "deploy/examples/contour-with-proxy pulls {url}"
    );
    // Laid out as in the repository: the example two levels below the components.
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(
        deploy_dir().join("components"),
        dir.path().join("components"),
    )
    .expect("a link to the components");
    let copy = dir.path().join("examples/contour-with-proxy");
    std::fs::create_dir_all(&copy).expect("dir");
    for f in std::fs::read_dir(&example)
        .expect("the example's files")
        .flatten()
    {
        if f.file_name() != "kustomization.yaml" {
            std::fs::copy(f.path(), copy.join(f.file_name())).expect("copy");
        }
    }
    std::fs::copy(
        examples.join(CONTOUR_RENDER),
        copy.join("contour-gateway.yaml"),
    )
    .expect("Contour's manifests");
    std::fs::write(
        copy.join("kustomization.yaml"),
        kustomization.replace(&url, "contour-gateway.yaml"),
    )
    .expect("write");
    let Some(ns) = moved_to else {
        return render(&copy);
    };
    let moved = dir.path().join("moved");
    std::fs::create_dir(&moved).expect("dir");
    std::fs::write(
        moved.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             namespace: {ns}\nnameSuffix: -{ns}\nresources:\n  - ../examples/contour-with-proxy\n"
        ),
    )
    .expect("write");
    render(&moved)
}

/// The object of `kind` named `name`; panics if there is none.
pub(crate) fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    of_kind(objects, kind)
        .into_iter()
        .find(|o| o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("a {kind} {name} is rendered"))
}

/// The one native sidecar (an init container that keeps running) of the Deployment's pod.
pub(crate) fn native_sidecar(objects: &[Value]) -> &Value {
    let pod = &one(objects, "Deployment")["spec"]["template"]["spec"];
    let sidecars: Vec<&Value> = pod["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .collect();
    assert_eq!(sidecars.len(), 1, "one native sidecar: {sidecars:#?}");
    sidecars[0]
}

/// The container's environment as the kubelet gives it: its `envFrom` ConfigMaps (rendered
/// here), then its own `env` (literal values and the downward API), which wins.
fn kubelet_env(objects: &[Value], c: &Value) -> Vec<(String, String)> {
    let d = one(objects, "Deployment");
    let mut out: Vec<(String, String)> = Vec::new();
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let name = from["configMapRef"]["name"]
            .as_str()
            .unwrap_or_else(|| panic!("{from}: a ConfigMap"));
        let map = named(objects, "ConfigMap", name);
        for (k, v) in map["data"].as_object().expect("data") {
            out.push((k.clone(), v.as_str().expect("a string").to_string()));
        }
    }
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().expect("env name").to_string();
        let value = match (
            e["value"].as_str(),
            e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Some(v), _) => v.to_string(),
            (None, Some("metadata.name")) => format!(
                "{}-5d4b9c7f6d-x2x7k",
                d["metadata"]["name"].as_str().expect("a name")
            ),
            (None, Some("metadata.namespace")) => {
                d["metadata"]["namespace"].as_str().expect("ns").into()
            }
            _ => panic!("{name}: unexpected source {e}"),
        };
        out.retain(|(n, _)| *n != name);
        out.push((name, value));
    }
    out
}

#[test]
fn the_proxy_component_puts_the_proxy_beside_contour_as_it_ships() {
    let objects = contour_with_proxy(None);
    let d = one(&objects, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    let ns = d["metadata"]["namespace"].as_str().expect("a namespace");
    assert_eq!(
        (d["metadata"]["name"].as_str(), ns),
        (Some("contour"), "projectcontour"),
        "Contour's own Deployment"
    );
    let values = named(&objects, "ConfigMap", "gateway-leader-proxy");
    assert_eq!(
        values["metadata"]["namespace"], ns,
        "beside the pod it sets"
    );
    let election = values["data"]["GATEWAY_LEADER_PROXY_ELECTION_LEASE"]
        .as_str()
        .expect("the controller's election Lease");

    // The proxy: a native sidecar with the component's command line and this install's settings.
    let proxy = native_sidecar(&objects);
    assert_eq!(proxy["name"], "gateway-leader-proxy");
    let args = strings(&proxy["args"]);
    assert_eq!(
        args[..5],
        [
            "proxy",
            "--lock-backend",
            "kubernetes",
            "--log-format",
            "json"
        ]
    );
    let listen = args
        .iter()
        .skip_while(|a| *a != "--proxy-listen")
        .nth(1)
        .expect("--proxy-listen");
    assert_eq!(listen, PROXY_LISTEN, "not 8001, where Contour serves xDS");
    let listen: std::net::SocketAddr = listen.parse().expect("an IP:PORT");
    let env = kubelet_env(&objects, proxy);
    let out = Command::new(env!("CARGO_BIN_EXE_gateway-leader"))
        .args(&args)
        .arg("--print-config")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("runs");
    let config = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?} with {env:?} are not valid settings: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (name, value) in &env {
        if let Some(key) = name.strip_prefix("GATEWAY_LEADER_") {
            assert_eq!(
                printed(&config, &key.to_lowercase()),
                Some(value.as_str()),
                "{name} took effect: {config}"
            );
        }
    }
    assert_eq!(printed(&config, "proxy_election_lease"), Some(election));
    let lock = printed(&config, "leader_election_lock_name")
        .expect("a lock name")
        .to_string();
    assert_ne!(
        format!("{ns}/{lock}"),
        election,
        "our lock is not the controller's"
    );
    // The replica's identity is the pod's name, which the fence compares with our Lease's holder.
    let pod_name = proxy["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "POD_NAME")
        .expect("POD_NAME");
    assert_eq!(
        pod_name["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    // Both settings the fence and the RBAC were rendered for are on the pod template, so that a
    // change rolls the pods.
    let annotations = &d["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(
        annotations["gateway-leader.io/proxy-lock-name"],
        lock.as_str()
    );
    assert_eq!(
        annotations["gateway-leader.io/proxy-election-lease"],
        election
    );

    // Probes on its own port, resources and locks as deploy/base's container.
    let base = render(&deploy_dir().join("base"));
    let theirs = container(&base);
    let health: std::net::SocketAddr = printed(&config, "health_addr")
        .expect("health_addr")
        .parse()
        .expect("an address");
    let port = &proxy["ports"][0];
    assert_eq!(port["containerPort"], health.port());
    for probe in ["livenessProbe", "readinessProbe"] {
        let mut p = proxy[probe].clone();
        assert_eq!(
            p["httpGet"]["port"], port["name"],
            "{probe} on the proxy's port"
        );
        p["httpGet"]["port"] = theirs[probe]["httpGet"]["port"].clone();
        assert_eq!(p, theirs[probe], "{probe} as deploy/base's");
    }
    assert_eq!(proxy["startupProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(proxy["startupProbe"]["httpGet"]["port"], port["name"]);
    assert_eq!(proxy["resources"], theirs["resources"]);
    let csc = &proxy["securityContext"];
    for (k, v) in theirs["securityContext"]
        .as_object()
        .expect("securityContext")
    {
        assert_eq!(&csc[k], v, "securityContext.{k} as deploy/base's");
    }
    assert_eq!(csc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(
        csc["runAsUser"],
        base_pod_security(&base)["runAsUser"],
        "the image's user"
    );
    // Nothing else in the pod takes the proxy's ports, or their names (8001 is Contour's xDS).
    let mut names = Vec::new();
    for c in pod["containers"]
        .as_array()
        .into_iter()
        .chain(pod["initContainers"].as_array())
        .flatten()
    {
        for p in c["ports"].as_array().into_iter().flatten() {
            names.push(p["name"].as_str().expect("a named port").to_string());
            if c["name"] != proxy["name"] {
                assert_ne!(p["containerPort"], listen.port(), "{}: {p}", c["name"]);
                assert_ne!(p["containerPort"], health.port(), "{}: {p}", c["name"]);
            }
        }
    }
    let count = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), count, "port names are unique in the pod");
    // A graceful stop of the proxy fits Contour's grace period (the default when unset).
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30));
    let budget = shutdown_budget(&config);
    assert!(
        grace > budget,
        "{grace:?} does not cover the proxy's {budget:?}"
    );

    // Contour: its kubeconfig is the one the proxy would write for the address it listens on.
    let contour = &pod["containers"][0];
    assert_eq!(contour["name"], "contour");
    let kubeconfig = contour["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "KUBECONFIG")
        .and_then(|e| e["value"].as_str())
        .expect("KUBECONFIG");
    let mount = contour["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| {
            kubeconfig.strip_prefix(m["mountPath"].as_str().unwrap_or("-")) == Some("/kubeconfig")
        })
        .unwrap_or_else(|| panic!("{kubeconfig} is mounted"));
    assert_eq!(mount["readOnly"], true);
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("its volume");
    let cm = named(
        &objects,
        "ConfigMap",
        volume["configMap"]["name"].as_str().expect("a ConfigMap"),
    );
    assert_eq!(cm["metadata"]["namespace"], ns);
    let mounted: Value =
        serde_yaml::from_str(cm["data"]["kubeconfig"].as_str().expect("a kubeconfig"))
            .expect("YAML");
    let written: Value = serde_yaml::from_str(&gateway_leader::proxy::kubeconfig(listen))
        .expect("the proxy's kubeconfig is YAML");
    assert_eq!(mounted, written);
    // Contour reads no KUBECONFIG: the flag, without --incluster (which would take the pod's
    // credentials straight to the apiserver), and its election asks often (the proxy answers).
    let flags = strings(&contour["args"]);
    assert!(
        flags.contains(&format!("--kubeconfig={kubeconfig}")),
        "{flags:?}"
    );
    assert!(!flags.iter().any(|f| f.contains("incluster")), "{flags:?}");
    assert!(flags.contains(&"--leader-election-retry-period=500ms".to_string()));
    // Its election's Lease is its default, leader-elect in $CONTOUR_NAMESPACE, the pod's: what
    // the proxy answers.
    assert!(!flags
        .iter()
        .any(|f| f.starts_with("--leader-election-resource")));
    assert_eq!(election, format!("{ns}/leader-elect"));
}

/// The pod-level security context of deploy/base's Deployment.
fn base_pod_security(base: &[Value]) -> &Value {
    &one(base, "Deployment")["spec"]["template"]["spec"]["securityContext"]
}

#[test]
fn the_proxy_component_binds_its_rights_and_the_fence_to_contours_account_and_our_lease() {
    let objects = contour_with_proxy(None);
    let d = one(&objects, "Deployment");
    let ns = d["metadata"]["namespace"].as_str().expect("a namespace");
    let sa = d["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    assert_eq!(sa, "contour", "Contour's service account");
    let values = &named(&objects, "ConfigMap", "gateway-leader-proxy")["data"];
    let lock = values["GATEWAY_LEADER_LEADER_ELECTION_LOCK_NAME"]
        .as_str()
        .expect("our lock");
    let (election_ns, _) = values["GATEWAY_LEADER_PROXY_ELECTION_LEASE"]
        .as_str()
        .and_then(|l| l.split_once('/'))
        .expect("NAMESPACE/NAME");
    let subject = json!([{"kind": "ServiceAccount", "name": sa, "namespace": ns}]);
    let base = render(&deploy_dir().join("base"));

    // Our lock and its Events, in the pod's namespace: deploy/base's rules, no more.
    let binding = named(&objects, "RoleBinding", "gateway-leader-proxy");
    assert_eq!(binding["metadata"]["namespace"], ns);
    assert_eq!(binding["subjects"], subject);
    let role = named(
        &objects,
        "Role",
        binding["roleRef"]["name"].as_str().expect("a Role"),
    );
    assert_eq!(role["metadata"]["namespace"], ns);
    assert_eq!(role["rules"], one(&base, "Role")["rules"]);
    // The controller's election Lease, watched in its namespace.
    let binding = named(&objects, "RoleBinding", "gateway-leader-proxy-election");
    assert_eq!(binding["metadata"]["namespace"], election_ns);
    assert_eq!(binding["subjects"], subject);
    let role = named(
        &objects,
        "Role",
        binding["roleRef"]["name"].as_str().expect("a Role"),
    );
    assert_eq!(role["metadata"]["namespace"], election_ns);
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "verbs": ["get", "list", "watch"]}])
    );
    // Looking for the fence at startup: the component's ClusterRole, bound to the account.
    let check = of_kind(&objects, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b["subjects"] == subject && b["metadata"]["name"] != "contour")
        .expect("the fencing check's binding");
    let check_role = named(
        &objects,
        "ClusterRole",
        check["roleRef"]["name"].as_str().expect("a ClusterRole"),
    );
    let base_check = of_kind(&base, "ClusterRole")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "gateway-leader-fencing-check")
        .expect("the base's fencing check");
    assert_eq!(check_role["rules"], base_check["rules"]);

    // The fence: on our Lease, for Contour's account.
    let policy = one(&objects, "ValidatingAdmissionPolicy");
    let binding = one(&objects, "ValidatingAdmissionPolicyBinding");
    assert_eq!(
        binding["spec"],
        json!({"policyName": policy["metadata"]["name"],
               "paramRef": {"name": lock, "namespace": ns, "parameterNotFoundAction": "Deny"},
               "validationActions": ["Deny"]})
    );
    let spec = &policy["spec"];
    assert_eq!(
        spec["matchConditions"],
        json!([{"name": "written-by-the-controller",
                "expression": format!("request.userInfo.username == 'system:serviceaccount:' \
                    + params.metadata.namespace + ':' + '{sa}'")}])
    );
    // Everything else is the base's fence (deploy/components/server-fencing), reused.
    let mut ours = spec.clone();
    let mut fence = one(&base, "ValidatingAdmissionPolicy")["spec"].clone();
    for s in [&mut ours, &mut fence] {
        let s = s.as_object_mut().expect("a spec");
        s.remove("matchConditions");
        s.remove("matchConstraints");
    }
    assert_eq!(ours, fence);
    // The cluster-wide objects are this install's, not a deploy/base install's.
    for obj in [policy, binding, check, check_role] {
        let name = obj["metadata"]["name"].as_str().expect("a name");
        assert!(
            name.ends_with(&format!(".{ns}")),
            "{name} names its install"
        );
    }
    // It fences every status Contour may write: the Gateway API's as the base does, and its own
    // kinds' (the example adds them), but Ingresses', which every ingress controller writes
    // (deploy/examples/contour-with-proxy says why).
    let fenced: Vec<(String, String)> = spec["matchConstraints"]["resourceRules"]
        .as_array()
        .expect("resourceRules")
        .iter()
        .flat_map(|r| {
            assert_eq!(r["operations"], json!(["CREATE", "UPDATE"]), "{r}");
            let groups = strings(&r["apiGroups"]);
            let resources = strings(&r["resources"]);
            groups.into_iter().flat_map(move |g| {
                resources
                    .clone()
                    .into_iter()
                    .map(move |res| (g.clone(), res))
            })
        })
        .collect();
    let contour = named(&objects, "ClusterRole", "contour");
    let mut writes = Vec::new();
    for rule in contour["rules"].as_array().expect("rules") {
        let verbs = strings(&rule["verbs"]);
        if !verbs
            .iter()
            .any(|v| v == "update" || v == "create" || v == "patch")
        {
            continue;
        }
        for g in strings(&rule["apiGroups"]) {
            for res in strings(&rule["resources"]) {
                if res.ends_with("/status") {
                    writes.push((g.clone(), res));
                }
            }
        }
    }
    assert!(writes.len() > 10, "Contour writes statuses: {writes:?}");
    for (g, res) in writes {
        let covered = fenced
            .iter()
            .any(|(fg, fr)| *fg == g && (*fr == res || fr == "*/status"));
        if (g.as_str(), res.as_str()) == ("networking.k8s.io", "ingresses/status") {
            assert!(!covered, "Ingress statuses are left out");
        } else {
            assert!(covered, "{g} {res} is fenced: {fenced:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contour_with_the_proxy_passes_the_apiservers_validation() {
    let server = testkit::kube::KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    // Contour's manifests hold a GatewayClass and a Gateway.
    server
        .install_gateway_api()
        .await
        .expect("the Gateway API CRDs install");
    let client = server.admin_client();
    let ns = fresh("deploy-contour-proxy");
    let objects = contour_with_proxy(Some(&ns));
    // Contour's render carries the CRDs of its release (its own kinds, and the Gateway API
    // v1.3.0 that it was built against): upstream's, untouched here, and the server already
    // serves a newer Gateway API. Everything else goes to the apiserver: the namespace for real,
    // the rest as a dry run (the fence's binding for real would refuse every Gateway API status
    // write on the server until our Lease exists).
    let (namespaces, rest): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .filter(|o| o["kind"] != "CustomResourceDefinition")
        .partition(|o| o["kind"] == "Namespace");
    assert_eq!(namespaces.len(), 1, "Contour's namespace");
    for kind in [
        "Deployment",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(!of_kind(&rest, kind).is_empty(), "a {kind} is sent");
    }
    create_all(&client, &namespaces, false).await;
    create_all(&client, &rest, true).await;
}
