//! `gateway-leader fencing-policy` for another controller: a client-go elector's Lease fences
//! its own writes.
use super::*;

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
