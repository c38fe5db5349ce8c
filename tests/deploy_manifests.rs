//! The kustomize base and overlays in `deploy/`, rendered with `kubectl kustomize`: the base is
//! created for real on a kube-apiserver with RBAC on, the overlays pass its validation, every
//! Deployment's command line and environment are valid settings with the files its Secrets put
//! in place, the pods keep the promises docs/operations.md makes, and the Dockerfile's image
//! agrees with the Deployment. The proxy's component (`deploy/components/proxy-sidecar`) is
//! rendered onto Contour's manifests as its release ships them
//! (`deploy/examples/contour-with-proxy`), and onto a chart's output through the Helm
//! post-renderer (`deploy/examples/post-renderer`).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::deploy::{
    container, create_all, deploy_dir, environment, fresh, mount_secrets, of_kind, one, printed,
    render, render_in, resource_for, strings,
};
use common::pod::PodFiles;
use kube::api::{Api, DynamicObject};
use kube::discovery::Scope;
use serde::Deserialize;
use serde_json::{json, Value};

const KUSTOMIZATIONS: [&str; 5] = [
    "base",
    "overlays/etcd",
    "overlays/redis",
    "overlays/redis-sentinel",
    "overlays/sidecar",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_is_created_for_real_with_rbac_on() {
    let server = testkit::kube::KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    let ns = fresh("deploy-base");
    let objects = render_in("base", &ns);
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().expect("kind"))
        .collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert!(kinds.contains(&kind), "the base has a {kind}: {kinds:?}");
    }
    assert_eq!(kinds[0], "Namespace", "kustomize puts the Namespace first");
    // The binding only as a dry run: its Lease does not exist here, and a binding whose Lease is
    // missing refuses every Gateway API status write on the server, whoever sends it
    // (tests/server_fencing.rs binds it for real, on a server of its own).
    let (binding, objects): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .partition(|o| o["kind"] == "ValidatingAdmissionPolicyBinding");
    create_all(&server.admin_client(), &objects, false).await;
    create_all(&server.admin_client(), &binding, true).await;
    if server.is_external() {
        // Nothing of this copy may stay on someone's cluster.
        let client = server.admin_client();
        for obj in objects.iter().rev() {
            let (resource, caps) = resource_for(&client, obj).await;
            if caps.scope == Scope::Cluster {
                let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                let name = obj["metadata"]["name"].as_str().expect("name");
                let _ = api.delete(name, &Default::default()).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overlays_pass_the_apiservers_validation() {
    let server = testkit::kube::KubeApiServer::shared()
        .await
        .expect("kube-apiserver starts (scripts/build-kube-apiserver.sh builds it)");
    let client = server.admin_client();
    for overlay in [
        "overlays/etcd",
        "overlays/redis",
        "overlays/redis-sentinel",
        "overlays/sidecar",
    ] {
        let ns = fresh(&format!(
            "deploy-{}",
            overlay.trim_start_matches("overlays/")
        ));
        let objects = render_in(overlay, &ns);
        // A dry-run create in a namespace that does not exist is refused: the namespace for real,
        // the rest as a dry run.
        let (namespaces, rest): (Vec<Value>, Vec<Value>) =
            objects.into_iter().partition(|o| o["kind"] == "Namespace");
        assert_eq!(namespaces.len(), 1, "{overlay} has its Namespace");
        create_all(&client, &namespaces, false).await;
        create_all(&client, &rest, true).await;
        assert_eq!(
            of_kind(&rest, "ConfigMap").len(),
            1,
            "{overlay} makes its ConfigMap"
        );
    }
}

#[test]
fn the_deployments_command_lines_are_valid_settings_and_fit_the_grace_period() {
    for k in KUSTOMIZATIONS {
        let objects = render(&deploy_dir().join(k));
        let c = container(&objects);
        let args = strings(&c["args"]);
        let pod = PodFiles::new();
        let files = mount_secrets(&objects, &pod);
        let env = environment(&objects);
        let mut cmd = pod.command(
            Path::new(env!("CARGO_BIN_EXE_gateway-leader")),
            &[args.clone(), vec!["--print-config".into()]].concat(),
            &env,
        );
        let out = cmd.output().expect("runs");
        let config = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{k}: {args:?} with {env:?} are not valid settings: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let backend = args
            .iter()
            .skip_while(|a| *a != "--lock-backend")
            .nth(1)
            .unwrap_or_else(|| panic!("{k}: names its --lock-backend"));
        assert_eq!(printed(&config, "lock_backend"), Some(backend.as_str()));
        // Every mounted file is a setting, and every ConfigMap value arrived.
        for f in &files {
            assert!(
                config.contains(&format!("\"{f}\"")),
                "{k}: {f} is used: {config}"
            );
        }
        for (name, value) in &env {
            if let Some(key) = name.strip_prefix("GATEWAY_LEADER_") {
                assert_eq!(
                    printed(&config, &key.to_lowercase()),
                    Some(value.as_str()),
                    "{k}: {name} took effect: {config}"
                );
            }
        }
        // The grace period covers a graceful stop with the settings the pod runs with.
        let spec = &one(&objects, "Deployment")["spec"]["template"]["spec"];
        let grace = Duration::from_secs(
            spec["terminationGracePeriodSeconds"]
                .as_u64()
                .expect("terminationGracePeriodSeconds"),
        );
        let budget = shutdown_budget(&config);
        assert!(
            grace > budget,
            "{k}: a {grace:?} grace period does not cover the {budget:?} a graceful stop may take"
        );
    }
}

/// The longest a graceful stop takes with these settings (the binary's own formula).
fn shutdown_budget(config: &str) -> Duration {
    let renew = humantime::parse_duration(printed(config, "renew_deadline").expect("renew"))
        .expect("a duration");
    gateway_leader::shutdown::graceful_stop_budget(renew)
}

#[test]
fn the_pods_are_locked_down_and_probed_on_one_port() {
    for k in KUSTOMIZATIONS {
        let objects = render(&deploy_dir().join(k));
        let d = one(&objects, "Deployment");
        let pod = &d["spec"]["template"]["spec"];
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        assert_eq!(d["spec"]["replicas"], 2, "{k}: two replicas");
        assert_eq!(d["spec"]["selector"]["matchLabels"], *labels);
        let c = container(&objects);
        for (var, field) in [
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        ] {
            let e = c["env"]
                .as_array()
                .expect("env")
                .iter()
                .find(|e| e["name"] == var)
                .unwrap_or_else(|| panic!("{k}: {var} is set"));
            assert_eq!(e["valueFrom"]["fieldRef"]["fieldPath"], field, "{k}: {var}");
        }
        let psc = &pod["securityContext"];
        assert_eq!(psc["runAsNonRoot"], true, "{k}");
        assert_ne!(psc["runAsUser"], 0, "{k}: not root");
        assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault", "{k}");
        let csc = &c["securityContext"];
        assert_eq!(csc["allowPrivilegeEscalation"], false, "{k}");
        assert_eq!(csc["privileged"], false, "{k}");
        assert_eq!(csc["readOnlyRootFilesystem"], true, "{k}");
        assert_eq!(csc["capabilities"]["drop"], json!(["ALL"]), "{k}");
        assert!(csc["capabilities"]["add"].is_null(), "{k}: nothing added");
        // A Service named gateway-leader-* would otherwise put GATEWAY_LEADER_* variables,
        // our settings' prefix, into every pod of the namespace.
        assert_eq!(pod["enableServiceLinks"], false, "{k}");
        // Probes and the Service on the one port.
        let port = &c["ports"][0];
        assert_eq!(port["name"], "metrics", "{k}");
        assert_eq!(port["containerPort"], 9090, "{k}");
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            assert_eq!(c[probe]["httpGet"]["path"], path, "{k}: {probe}");
            assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{k}: {probe}");
        }
        let svc = one(&objects, "Service");
        assert_eq!(
            svc["spec"]["ports"],
            json!([{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]),
            "{k}"
        );
        assert_eq!(
            svc["spec"]["selector"], *labels,
            "{k}: the Service selects the pods"
        );
        let pdb = one(&objects, "PodDisruptionBudget");
        assert_eq!(pdb["spec"]["selector"]["matchLabels"], *labels, "{k}");
        assert_eq!(pdb["spec"]["minAvailable"], 1, "{k}: one may go at a time");
    }
}

#[test]
fn every_binding_names_the_rendered_service_account() {
    let plain: Vec<(String, Vec<Value>)> = KUSTOMIZATIONS
        .iter()
        .map(|k| (k.to_string(), render(&deploy_dir().join(k))))
        .collect();
    // And moved to another namespace, as an operator's own overlay would.
    let moved = ("base moved".to_string(), render_in("base", "elsewhere"));
    for (k, objects) in plain.iter().chain([&moved]) {
        let sa = one(objects, "ServiceAccount");
        let d = one(objects, "Deployment");
        assert_eq!(
            d["spec"]["template"]["spec"]["serviceAccountName"], sa["metadata"]["name"],
            "{k}: the pods run as the ServiceAccount"
        );
        for kind in ["RoleBinding", "ClusterRoleBinding"] {
            for b in of_kind(objects, kind) {
                assert_eq!(
                    b["subjects"],
                    json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                            "namespace": sa["metadata"]["namespace"]}]),
                    "{k}: {kind} {} binds the pods' ServiceAccount",
                    b["metadata"]["name"]
                );
                let target = if b["roleRef"]["kind"] == "Role" {
                    "Role"
                } else {
                    "ClusterRole"
                };
                assert!(
                    of_kind(objects, target)
                        .iter()
                        .any(|r| r["metadata"]["name"] == b["roleRef"]["name"]),
                    "{k}: {kind} {} refers to a rendered {target}",
                    b["metadata"]["name"]
                );
            }
        }
        let backend = strings(&container(objects)["args"])
            .iter()
            .skip_while(|a| *a != "--lock-backend")
            .nth(1)
            .cloned()
            .expect("a backend");
        // The Lease and its Events are the Kubernetes backend's alone: least privilege.
        assert_eq!(
            of_kind(objects, "Role").len(),
            usize::from(backend == "kubernetes"),
            "{k}: a Role only for the Kubernetes lock"
        );
    }
}

#[test]
fn the_fence_is_bound_to_the_lease_the_pods_hold_and_fences_what_they_write() {
    let plain = render(&deploy_dir().join("base"));
    let moved = render_in("base", "elsewhere");
    for (k, objects) in [("base", &plain), ("base moved", &moved)] {
        let sa = one(objects, "ServiceAccount");
        let policy = one(objects, "ValidatingAdmissionPolicy");
        let binding = one(objects, "ValidatingAdmissionPolicyBinding");
        let spec = &binding["spec"];
        assert_eq!(spec["policyName"], policy["metadata"]["name"], "{k}");
        assert_eq!(spec["validationActions"], json!(["Deny"]), "{k}");
        // The Lease the pods hold: the default lock name (the Deployment sets none) in the
        // pods' namespace, the ServiceAccount's.
        let args = strings(&container(objects)["args"]);
        assert!(
            !args.iter().any(|a| a.contains("lock-name")),
            "{k}: the Deployment keeps the default lock name: {args:?}"
        );
        assert_eq!(
            spec["paramRef"],
            json!({"name": gateway_leader::config::DEFAULT_LOCK_NAME,
                   "namespace": sa["metadata"]["namespace"],
                   "parameterNotFoundAction": "Deny"}),
            "{k}"
        );
        let p = &policy["spec"];
        assert_eq!(
            p["paramKind"],
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}),
            "{k}"
        );
        assert_eq!(p["failurePolicy"], "Fail", "{k}");
        // Exactly the status subresources the status writer may write.
        let writer = of_kind(objects, "ClusterRole")
            .into_iter()
            .find(|r| {
                r["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.contains("status-writer"))
            })
            .expect("the status writer's ClusterRole");
        let mut writes: Vec<Value> = writer["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| {
                r["verbs"]
                    .as_array()
                    .expect("verbs")
                    .contains(&json!("update"))
            })
            .flat_map(|r| r["resources"].as_array().expect("resources").clone())
            .collect();
        let rules = p["matchConstraints"]["resourceRules"]
            .as_array()
            .expect("rules");
        assert_eq!(rules.len(), 1, "{k}");
        assert_eq!(
            rules[0]["apiGroups"],
            json!(["gateway.networking.k8s.io"]),
            "{k}"
        );
        assert_eq!(rules[0]["operations"], json!(["CREATE", "UPDATE"]), "{k}");
        let mut fenced = rules[0]["resources"].as_array().expect("resources").clone();
        let by_name = |a: &Value, b: &Value| a.as_str().cmp(&b.as_str());
        writes.sort_by(by_name);
        fenced.sort_by(by_name);
        assert_eq!(
            fenced, writes,
            "{k}: the policy fences what the writer writes"
        );
    }
    // The match condition names the base's ServiceAccount (a renamed one needs the condition
    // patched: docs/kubernetes.md).
    let condition = one(&plain, "ValidatingAdmissionPolicy")["spec"]["matchConditions"][0]
        ["expression"]
        .as_str()
        .expect("an expression")
        .to_string();
    let sa = one(&plain, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    assert!(
        condition.ends_with(&format!("+ ':{sa}'")),
        "the condition names {sa}: {condition}"
    );
    // With etcd or Redis the lock is not a Lease: no fence, and no right to look for one.
    for k in ["overlays/etcd", "overlays/redis", "overlays/redis-sentinel"] {
        let objects = render(&deploy_dir().join(k));
        for obj in &objects {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            assert!(
                !obj["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("AdmissionPolicy")
                    && !name.contains("fencing"),
                "{k}: {} {name} is the Lease's",
                obj["kind"]
            );
        }
    }
}

/// The instructions of the Dockerfile's last stage (the image that runs), as (word, rest).
fn runtime_stage(dockerfile: &str) -> (usize, Vec<(String, String)>) {
    let mut stages = 0;
    let mut last = Vec::new();
    for line in dockerfile.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let word = word.to_ascii_uppercase();
        if word == "FROM" {
            stages += 1;
            last.clear();
        }
        last.push((word, rest.trim().to_string()));
    }
    (stages, last)
}

fn instruction<'a>(stage: &'a [(String, String)], word: &str) -> Vec<&'a str> {
    stage
        .iter()
        .filter(|(w, _)| w == word)
        .map(|(_, r)| r.as_str())
        .collect()
}

#[test]
fn the_image_agrees_with_the_base_deployment() {
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile"))
            .expect("Dockerfile");
    let (stages, stage) = runtime_stage(&dockerfile);
    assert!(
        stages >= 2,
        "a multi-stage build: the toolchain stays out of the image"
    );
    assert!(
        instruction(&stage, "RUN").is_empty(),
        "the runtime stage installs nothing: {stage:?}"
    );
    let entrypoint: Vec<String> = serde_json::from_str(instruction(&stage, "ENTRYPOINT")[0])
        .expect("ENTRYPOINT in exec form");
    let cmd: Vec<String> =
        serde_json::from_str(instruction(&stage, "CMD")[0]).expect("CMD in exec form");
    let user = instruction(&stage, "USER")[0];
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    let (uid, gid): (u64, u64) = (uid.parse().expect("numeric uid"), gid.parse().expect("gid"));
    let exposed: Vec<u64> = instruction(&stage, "EXPOSE")
        .iter()
        .flat_map(|e| e.split_whitespace())
        .map(|p| p.trim_end_matches("/tcp").parse().expect("a port"))
        .collect();
    // The binary the build stage makes is the one the image starts.
    let copied = instruction(&stage, "COPY")
        .into_iter()
        .find(|c| c.starts_with("--from="))
        .expect("the binary comes from the build stage");
    let parts: Vec<&str> = copied.split_whitespace().collect();
    let bin = Path::new(env!("CARGO_BIN_EXE_gateway-leader"))
        .file_name()
        .expect("binary name")
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        Path::new(parts[1])
            .file_name()
            .map(|f| f.to_string_lossy().into_owned()),
        Some(bin.clone()),
        "the build stage's binary is {bin}: {copied}"
    );
    assert!(
        dockerfile.contains(&format!("--bin {bin}")),
        "the build stage builds {bin}"
    );
    assert_eq!(
        entrypoint,
        vec![parts[2].to_string()],
        "ENTRYPOINT runs the copied binary"
    );

    let objects = render(&deploy_dir().join("base"));
    let d = one(&objects, "Deployment");
    let c = container(&objects);
    assert_eq!(
        strings(&c["command"]),
        entrypoint,
        "command is the image's binary"
    );
    assert_eq!(strings(&c["args"])[..1], cmd[..1], "both run `{}`", cmd[0]);
    let psc = &d["spec"]["template"]["spec"]["securityContext"];
    assert_eq!(psc["runAsUser"], uid, "the image's user");
    assert_eq!(psc["runAsGroup"], gid, "the image's group");
    assert_ne!(uid, 0, "not root");
    let ports: Vec<u64> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| p["containerPort"].as_u64().expect("a port"))
        .collect();
    assert_eq!(ports, exposed, "the ports the image exposes");
}

#[test]
fn the_overlay_docs_operations_md_shows_renders_and_runs() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .expect("docs/operations.md");
    let start = doc
        .find("<!-- BEGIN TESTED: my-gateway/kustomization.yaml")
        .expect("the tested example's marker");
    let block = &doc[start..doc[start..].find("<!-- END TESTED -->").expect("its end") + start];
    let yaml = block
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a yaml block");
    // Laid out as the doc says: the overlay next to a checkout of this repository.
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(
        env!("CARGO_MANIFEST_DIR"),
        dir.path().join("gateway-leader"),
    )
    .expect("a link to the checkout");
    std::fs::create_dir(dir.path().join("my-gateway")).expect("dir");
    std::fs::write(dir.path().join("my-gateway/kustomization.yaml"), yaml).expect("write");
    let objects = render(&dir.path().join("my-gateway"));
    let c = container(&objects);
    assert_eq!(
        c["image"],
        "registry.example.com/platform/gateway-leader:0.1.0"
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let args = strings(&c["args"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gateway-leader"))
        .args(&args)
        .arg("--print-config")
        .env_clear()
        .env("POD_NAME", "pod-0")
        .output()
        .expect("runs");
    let config = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        printed(&config, "controller_name"),
        Some("example.com/gateway-controller")
    );
}

#[test]
fn the_image_is_labelled_with_the_binarys_version() {
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile"))
            .expect("Dockerfile");
    let runtime = &dockerfile[dockerfile.rfind("\nFROM ").expect("a last stage")..];
    assert!(
        runtime.contains("org.opencontainers.image.version=\"${VERSION}\""),
        "the runtime stage labels the image with VERSION: {runtime}"
    );
    // The build stage refuses a VERSION that is not what the binary says, in the words it says.
    let build = &dockerfile[..dockerfile.rfind("\nFROM ").expect("a last stage")];
    assert!(
        build.contains("target/release/gateway-leader --version")
            && build.contains("!= \"gateway-leader ${VERSION}\""),
        "the build stage compares VERSION with the binary's --version: {build}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gateway-leader"))
        .arg("--version")
        .output()
        .expect("runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("gateway-leader {}", env!("CARGO_PKG_VERSION")),
        "--version says what the build stage compares with"
    );
}

#[test]
fn the_sidecar_s_controller_talks_to_the_proxy_it_runs_beside() {
    let objects = render(&deploy_dir().join("overlays/sidecar"));
    let args = strings(&container(&objects)["args"]);
    assert_eq!(args.first().map(String::as_str), Some("proxy"));
    let listen = args
        .iter()
        .skip_while(|a| *a != "--proxy-listen")
        .nth(1)
        .expect("--proxy-listen");
    let addr: std::net::SocketAddr = listen.parse().expect("an IP:PORT");
    // The fence is bound to the Lease this overlay's proxies elect on: bound to any other, the
    // apiserver would refuse every fenced write (its Lease never exists).
    let lock = args
        .iter()
        .skip_while(|a| *a != "--leader-election-lock-name")
        .nth(1)
        .expect("--leader-election-lock-name");
    let binding = one(&objects, "ValidatingAdmissionPolicyBinding");
    assert_eq!(
        binding["spec"]["paramRef"]["name"].as_str(),
        Some(lock.as_str())
    );
    assert_eq!(
        binding["spec"]["paramRef"]["parameterNotFoundAction"],
        "Deny"
    );
    // The kubeconfig the controller mounts is the one the proxy would write for itself.
    let cm = one(&objects, "ConfigMap");
    let mounted: Value =
        serde_yaml::from_str(cm["data"]["kubeconfig"].as_str().expect("a kubeconfig"))
            .expect("YAML");
    let written: Value = serde_yaml::from_str(&gateway_leader::proxy::kubeconfig(addr))
        .expect("the proxy's kubeconfig is YAML");
    assert_eq!(mounted, written);
    let pod = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    let controller = pod["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "controller")
        .expect("the sample controller");
    let kubeconfig = controller["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "KUBECONFIG")
        .and_then(|e| e["value"].as_str())
        .expect("KUBECONFIG");
    let mount = controller["volumeMounts"][0]["mountPath"]
        .as_str()
        .expect("a mount");
    assert_eq!(kubeconfig, format!("{mount}/kubeconfig"));
}

/// What `deploy/examples/contour-with-proxy` pulls from GitHub, as a path under `examples/` of
/// Contour's Go module: the same file at the same version.
const CONTOUR_RENDER: &str = "render/contour-gateway.yaml";

/// The port the component's proxy listens on, beside Contour's xDS on 8001.
const PROXY_LISTEN: &str = "127.0.0.1:8002";

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
fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    of_kind(objects, kind)
        .into_iter()
        .find(|o| o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("a {kind} {name} is rendered"))
}

/// The one native sidecar (an init container that keeps running) of the Deployment's pod.
fn native_sidecar(objects: &[Value]) -> &Value {
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

#[test]
fn the_post_renderer_adds_the_proxy_to_a_charts_deployment_through_helm() {
    // nginx-gateway-fabric's chart is not on this machine: a chart whose Deployment is shaped
    // like NGF's (named after the release, a service account of its own, env and volume mounts,
    // and the election Lease named as NGF's _helpers.tpl names it).
    let dir = tempfile::tempdir().expect("temp dir");
    let chart = dir.path().join("chart");
    std::fs::create_dir_all(chart.join("templates")).expect("dir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: nginx-gateway-fabric\nversion: 2.6.7\n",
    )
    .expect("write");
    std::fs::write(
        chart.join("templates/all.yaml"),
        r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .Release.Name }}-nginx-gateway-fabric
  namespace: {{ .Release.Namespace }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-nginx-gateway-fabric
  namespace: {{ .Release.Namespace }}
spec:
  replicas: 2
  selector:
    matchLabels: {app: ngf}
  template:
    metadata:
      labels: {app: ngf}
    spec:
      serviceAccountName: {{ .Release.Name }}-nginx-gateway-fabric
      containers:
        - name: nginx-gateway
          image: ghcr.io/nginx/nginx-gateway-fabric:2.6.7
          args:
            - controller
            - --leader-election-lock-name={{ .Release.Name }}-nginx-gateway-fabric-leader-election
          env:
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
          volumeMounts:
            - name: nginx-agent-tls
              mountPath: /var/run/secrets/ngf
      volumes:
        - name: nginx-agent-tls
          secret: {secretName: server-tls}
"#,
    )
    .expect("write");
    // Helm 4 takes a post-renderer as a plugin: the example's directory is one.
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("dir");
    std::os::unix::fs::symlink(
        deploy_dir().join("examples/post-renderer"),
        plugins.join("gateway-leader-proxy"),
    )
    .expect("a link to the plugin");
    let home = dir.path().join("home");
    let out = Command::new(common::helm::helm())
        .args(["template", "ngf"])
        .arg(&chart)
        .args(["--namespace", "nginx-gateway"])
        .args(["--post-renderer", "gateway-leader-proxy"])
        .env("HELM_PLUGINS", &plugins)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", home.join("no-kubeconfig"))
        .env("KUBECTL", common::deploy::kubectl())
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm template with the post-renderer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 YAML");
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            serde_json::to_value(serde_yaml::Value::deserialize(doc).expect("valid YAML"))
                .expect("YAML maps to JSON")
        })
        .filter(|v| !v.is_null())
        .collect();
    let d = one(&objects, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    let proxy = native_sidecar(&objects);
    assert_eq!(
        strings(&proxy["args"]).last().map(String::as_str),
        Some(PROXY_LISTEN)
    );
    let controller = &pod["containers"][0];
    assert!(
        controller["env"]
            .as_array()
            .expect("env")
            .iter()
            .any(|e| e["name"] == "KUBECONFIG"),
        "NGF reads KUBECONFIG: {controller}"
    );
    // The install's settings name the election the chart configures, in the release's namespace.
    let values = &named(&objects, "ConfigMap", "gateway-leader-proxy");
    assert_eq!(values["metadata"]["namespace"], "nginx-gateway");
    let lock_flag = strings(&controller["args"])
        .into_iter()
        .find_map(|a| {
            a.strip_prefix("--leader-election-lock-name=")
                .map(str::to_string)
        })
        .expect("the chart names its election's Lease");
    assert_eq!(
        values["data"]["GATEWAY_LEADER_PROXY_ELECTION_LEASE"],
        format!("nginx-gateway/{lock_flag}")
    );
    let binding = named(&objects, "RoleBinding", "gateway-leader-proxy");
    assert_eq!(
        binding["subjects"][0]["name"], pod["serviceAccountName"],
        "bound to the chart's account"
    );
    // NGF's own kinds are fenced as well as the Gateway API's.
    let rules =
        &one(&objects, "ValidatingAdmissionPolicy")["spec"]["matchConstraints"]["resourceRules"];
    assert!(
        rules
            .as_array()
            .expect("rules")
            .iter()
            .any(|r| r["apiGroups"] == json!(["gateway.nginx.org"])
                && r["resources"] == json!(["*/status"])),
        "{rules}"
    );
}
