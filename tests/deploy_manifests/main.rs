//! The kustomize base and overlays in `deploy/`, rendered with `kubectl kustomize`: the base is
//! created for real on a kube-apiserver with RBAC on, the overlays pass its validation, every
//! Deployment's command line and environment are valid settings with the files its Secrets put
//! in place, the pods keep the promises docs/operations.md makes, and the Dockerfile's image
//! agrees with the Deployment. The proxy's component is in `proxy_sidecar.rs`.

#[path = "../common/mod.rs"]
mod common;

mod post_renderer;
mod proxy_sidecar;

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
