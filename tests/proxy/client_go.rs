//! The real client-go through two proxies.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_syncs_through_a_follower_and_its_writes_land_only_through_the_leader() {
    let peers = testkit::built::peers().expect("the Go peers are built (scripts/build-peers.sh)");
    let ns = "proxy-client-go";
    let (server, dir) = setup(ns).await;
    let mut a = blocking(|| Proxy::start(server, "proxy-a", ns, dir.path(), &[]));
    blocking(|| a.replica.wait_for(message::LEADING, PATIENCE));
    let mut b = blocking(|| Proxy::start(server, "client-go-b", ns, dir.path(), &[]));
    blocking(|| b.replica.wait_for(message::FOLLOWING, PATIENCE));

    // The informer's first list finds what was there before it.
    let before: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "before"}}))
            .expect("a ConfigMap");
    Api::<ConfigMap>::namespaced(server.admin_client(), ns)
        .create(&PostParams::default(), &before)
        .await
        .expect("created");
    let program = peers.join(testkit::built::CLIENT_GO_PROXY_CLIENT);
    let out = blocking(|| {
        Command::new(&program)
            .arg("--follower-kubeconfig")
            .arg(&b.kubeconfig)
            .arg("--leader-kubeconfig")
            .arg(&a.kubeconfig)
            .args(["--namespace", ns, "--prefix", "cg", "--count", "3"])
            .output()
            .expect("client-go-proxy-client runs")
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client-go-proxy-client: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("client-go-proxy-client's report");

    // client-go saw each write through the follower fail with the proxy's Status.
    let refused = report["refused"].as_array().expect("refusals");
    let mut ops: Vec<&str> = refused.iter().filter_map(|r| r["op"].as_str()).collect();
    ops.sort_unstable();
    assert_eq!(ops, ["create", "patch", "update"], "{report}");
    for r in refused {
        assert_eq!(r["code"], 503, "{r}");
        assert_eq!(r["reason"], "ServiceUnavailable", "{r}");
        let message = r["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("may not write now") && message.contains("proxy-a"),
            "{r}"
        );
    }
    // The server holds the leader's writes, at the resourceVersions client-go got back, which
    // the informer fed by the follower's proxy reached too; nothing of the follower's.
    assert!(server_config_map(server, ns, "cg-through-follower")
        .await
        .is_none());
    let written = report["written"].as_object().expect("written");
    assert_eq!(written.len(), 3, "{report}");
    for (name, rv) in written {
        let held = server_config_map(server, ns, name)
            .await
            .unwrap_or_else(|| panic!("{name} is not on the server"));
        assert_eq!(
            held.metadata.resource_version.as_deref(),
            rv.as_str(),
            "{name}"
        );
        assert_eq!(report["seen"][name], *rv, "the informer's {name}");
        let step = held.data.as_ref().and_then(|d| d.get("step"));
        assert_eq!(step.map(String::as_str), Some("patched"), "{name}");
    }
    // The informer did sync through the follower (client-go's informers list with a watch:
    // `sendInitialEvents`).
    let metrics = http_get(b.replica.health_addr(PATIENCE), "/metrics");
    let needle = r#"verb="watch",outcome="forwarded"}"#;
    assert!(metrics.contains(needle), "{needle} not in {metrics}");
    // client-go sent each refused write once: the refusal asks for no wait, which it would
    // otherwise spend resending it ten times.
    for verb in ["create", "update", "patch"] {
        let line = format!(
            "gateway_leader_proxy_requests_total{{verb=\"{verb}\",outcome=\"refused\"}} 1\n"
        );
        assert!(metrics.contains(&line), "{verb}: {metrics}");
    }
    for p in [&mut a, &mut b] {
        p.replica.terminate();
        assert_eq!(blocking(|| p.replica.wait_exit(PATIENCE)), Some(0));
    }
}
