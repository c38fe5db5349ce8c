//! The Helm post-renderer (`deploy/examples/post-renderer`): the proxy component added to a
//! chart's Deployment by Helm 4's plugin, for a chart shaped like nginx-gateway-fabric's and for
//! Envoy Gateway's own chart.

use super::proxy_sidecar::{named, native_sidecar, PROXY_LISTEN};
use super::*;
use common::deploy::objects;

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
    let objects = post_render(&chart, "ngf", "nginx-gateway", None);
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

/// `helm template RELEASE CHART --namespace NS` through the post-renderer plugin (Helm 4 takes a
/// post-renderer as a plugin: the example's directory is one), with `install` as its argument
/// when given (another chart's settings); the objects it writes.
fn post_render(chart: &Path, release: &str, ns: &str, install: Option<&Path>) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("temp dir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("dir");
    std::os::unix::fs::symlink(
        deploy_dir().join("examples/post-renderer"),
        plugins.join("gateway-leader-proxy"),
    )
    .expect("a link to the plugin");
    let home = dir.path().join("home");
    let mut helm = Command::new(common::helm::helm());
    helm.args(["template", release])
        .arg(chart)
        .args(["--namespace", ns])
        .args(["--post-renderer", "gateway-leader-proxy"]);
    if let Some(install) = install {
        helm.arg("--post-renderer-args").arg(install);
    }
    let out = helm
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
    objects(&text)
}

/// Envoy Gateway's own chart, as its release publishes it (from its Go module), through the
/// post-renderer with deploy/examples/post-renderer/envoy-gateway: the proxy beside its
/// controller, whose KUBECONFIG is the proxy's, and whose election the proxy answers in the
/// namespace the controller puts its Lease in.
#[test]
fn the_post_renderer_adds_the_proxy_to_envoy_gateways_own_chart() {
    let chart = testkit::envoy_gateway::chart_dir()
        .expect("Envoy Gateway's chart (scripts/build-envoy-gateway.sh)");
    let install = deploy_dir().join("examples/post-renderer/envoy-gateway");
    let ns = "envoy-gateway-system";
    let objects = post_render(&chart, "eg", ns, Some(&install));
    let d = named(&objects, "Deployment", "envoy-gateway");
    let pod = &d["spec"]["template"]["spec"];
    let proxy = native_sidecar(&objects);
    assert_eq!(
        strings(&proxy["args"]).last().map(String::as_str),
        Some(PROXY_LISTEN)
    );
    let controller = &pod["containers"][0];
    assert_eq!(controller["name"], "envoy-gateway", "{pod}");
    let env = controller["env"].as_array().expect("env");
    assert!(
        env.iter().any(|e| e["name"] == "KUBECONFIG"),
        "Envoy Gateway reads KUBECONFIG: {controller}"
    );
    // Its Lease is in ENVOY_GATEWAY_NAMESPACE, the pod's own: the ConfigMap names it there.
    let own_ns = env
        .iter()
        .find(|e| e["name"] == "ENVOY_GATEWAY_NAMESPACE")
        .expect("the chart sets ENVOY_GATEWAY_NAMESPACE");
    assert_eq!(
        own_ns["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace",
        "{own_ns}"
    );
    let values = named(&objects, "ConfigMap", "gateway-leader-proxy");
    assert_eq!(values["metadata"]["namespace"], ns);
    assert_eq!(
        values["data"]["GATEWAY_LEADER_PROXY_ELECTION_LEASE"],
        format!("{ns}/{}", testkit::envoy_gateway::LEASE_NAME)
    );
    // The proxy's ports are none of Envoy Gateway's.
    let taken: Vec<i64> = controller["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["containerPort"].as_i64())
        .collect();
    for port in proxy["ports"].as_array().expect("the proxy's ports") {
        assert!(
            !taken.contains(&port["containerPort"].as_i64().unwrap_or_default()),
            "{port} is Envoy Gateway's too"
        );
    }
    assert!(
        !taken.contains(&8002),
        "the proxy's listen port is Envoy Gateway's"
    );
    let binding = named(&objects, "RoleBinding", "gateway-leader-proxy");
    assert_eq!(
        binding["subjects"][0]["name"], pod["serviceAccountName"],
        "bound to the chart's account"
    );
    // Two policies: ours, and the chart's own guard of its CRDs, which the patches leave alone.
    let (ours, theirs): (Vec<&Value>, Vec<&Value>) = of_kind(&objects, "ValidatingAdmissionPolicy")
        .into_iter()
        .partition(|p| p["metadata"]["labels"]["app.kubernetes.io/name"] == "gateway-leader");
    let [ours] = ours.as_slice() else {
        panic!("one policy of ours: {ours:#?}")
    };
    let rules = &ours["spec"]["matchConstraints"]["resourceRules"];
    assert!(
        rules
            .as_array()
            .expect("rules")
            .iter()
            .any(|r| r["apiGroups"] == json!(["gateway.envoyproxy.io"])
                && r["resources"] == json!(["*/status"])),
        "{rules}"
    );
    let [theirs] = theirs.as_slice() else {
        panic!("the chart's own policy: {theirs:#?}")
    };
    let untouched = helm_template_plain(&chart, "eg", ns);
    let original = untouched
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .expect("the chart renders its policy");
    assert_eq!(
        theirs["spec"], original["spec"],
        "the chart's policy is changed"
    );
}

/// `helm template RELEASE CHART --namespace NS`, no post-renderer: the chart as it renders.
fn helm_template_plain(chart: &Path, release: &str, ns: &str) -> Vec<Value> {
    let out = Command::new(common::helm::helm())
        .args(["template", release])
        .arg(chart)
        .args(["--namespace", ns])
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 YAML");
    objects(&text)
}
