//! Whose writes the fence admits: the holder's, nobody's without the Lease, everyone's
//! without the binding; a deposed leader's never, whatever its client does.
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_pod_that_holds_the_lease_writes_status() {
    let _one = ONE_AT_A_TIME.lock().await;
    let f = Fenced::new("holder").await;
    let (a, b) = (
        f.pod_token("replica-a").await,
        f.pod_token("replica-b").await,
    );
    let (a, b) = (f.raw_client(&a), f.raw_client(&b));
    let holder = "replica-a_5f3c9e1a";
    // The holder takes the Lease with its own token: the Lease's writes are not fenced.
    f.hold(&a, Some(holder)).await;
    f.refused(&b, "replica-b", holder, "b while a holds").await;
    f.admitted(&a, "a while a holds").await;
    // Nor is anyone else's write: the admin, another service account.
    f.admitted(&f.admin, "the admin").await;
    let other = f
        .server
        .service_account_token(&f.ns, "someone-else")
        .await
        .expect("token");
    let grant: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "someone-else", "namespace": &f.ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": format!("gateway-leader-status-writer-{}", f.ns)},
        "subjects": [{"kind": "ServiceAccount", "name": "someone-else", "namespace": &f.ns}],
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(f.admin.clone(), &f.ns)
        .create(&PostParams::default(), &grant)
        .await
        .expect("granting the status writer's rights to another account");
    f.admitted(&f.raw_client(&other), "another service account")
        .await;
    // The holder forms that name pod replica-a, and near misses that must not.
    for (holder, a_may) in [
        ("replica-a", true),
        ("replica-a_0d6f2b7e-1c39-4a5e-9d0b-5b0f6c7e8a91", true),
        ("replica-ab_5f3c9e1a", false),
        ("replica-a_x_5f3c9e1a", false),
        ("replica-a_5F3C9E1A", false),
        ("replica-a_5f3c9e1a0", false),
        ("replica-a-5f3c9e1a", false),
        ("xreplica-a_5f3c9e1a", false),
        ("", false),
    ] {
        f.hold(&f.admin, Some(holder).filter(|h| !h.is_empty()))
            .await;
        let tag = format!("a while {holder:?} holds");
        if a_may {
            f.admitted(&a, &tag).await;
        } else {
            let shown = if holder.is_empty() { "none" } else { holder };
            f.refused(&a, "replica-a", shown, &tag).await;
        }
    }
    // A token that names no pod (as `kubectl create token` makes) never passes.
    let unbound = f
        .server
        .service_account_token(&f.ns, SA)
        .await
        .expect("token");
    f.hold(&f.admin, Some("replica-a_5f3c9e1a")).await;
    let unbound = f.raw_client(&unbound);
    f.write_until(&unbound, "no pod", true).await;
    let before = f.route_version().await;
    let out = f.write(&unbound, "no pod").await;
    assert!(
        matches!(&out, Outcome::Refused(m) if m.contains("a request without a pod-bound token")),
        "{out:?}"
    );
    assert_eq!(f.route_version().await, before);
    f.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_without_its_client_fences_writes_nothing() {
    let _one = ONE_AT_A_TIME.lock().await;
    let f = Fenced::new("deposed").await;
    let (a, b) = (
        f.pod_token("replica-a").await,
        f.pod_token("replica-b").await,
    );
    let (a, b) = (f.raw_client(&a), f.raw_client(&b));
    f.hold(&a, Some("replica-a_11111111")).await;
    f.admitted(&a, "a leads").await;
    // Another replica takes the Lease (with its own token); the old leader, its permits and
    // write gate out of the way, keeps writing as if it still led.
    f.hold(&b, Some("replica-b_22222222")).await;
    // Until the policy's copy of the Lease catches up, a write may still pass: the window the
    // replicas' own checks cover. From the first refusal on, nothing lands.
    f.refused(&a, "replica-a", "replica-b_22222222", "deposed a")
        .await;
    let before = f.route_version().await;
    let mut refusals = 0;
    for i in 0..20 {
        match f.write(&a, &format!("deposed a, try {i}")).await {
            Outcome::Refused(m) => {
                assert!(m.contains("replica-b_22222222"), "{m}");
                refusals += 1;
            }
            Outcome::Written(v) => panic!("try {i}: admitted after a refusal ({v})"),
        }
    }
    assert_eq!(refusals, 20);
    assert_eq!(
        f.route_version().await,
        before,
        "nothing of the deposed leader landed"
    );
    f.admitted(&b, "b leads").await;
    f.remove().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lease_nobody_writes_and_without_the_binding_everyone_does() {
    let _one = ONE_AT_A_TIME.lock().await;
    let f = Fenced::new("gone").await;
    let (a, b) = (
        f.pod_token("replica-a").await,
        f.pod_token("replica-b").await,
    );
    let (a, b) = (f.raw_client(&a), f.raw_client(&b));
    f.hold(&a, Some("replica-a_11111111")).await;
    f.admitted(&a, "a leads").await;
    f.delete_lease().await;
    // The parameter is missing: the apiserver refuses before it looks at who writes, the admin
    // included (docs/kubernetes.md says so).
    for (who, client) in [("a", &a), ("b", &b), ("the admin", &f.admin)] {
        f.write_until(client, &format!("{who}, no Lease"), true)
            .await;
        let before = f.route_version().await;
        let out = f.write(client, &format!("{who}, no Lease")).await;
        assert!(
            matches!(&out, Outcome::Refused(m) if m.contains("no params found")),
            "{who}: {out:?}"
        );
        assert_eq!(f.route_version().await, before, "{who}: nothing landed");
    }
    // Taken again, by b: b writes, a does not.
    f.hold(&b, Some("replica-b_22222222")).await;
    f.admitted(&b, "b took the new Lease").await;
    f.refused(&a, "replica-a", "replica-b_22222222", "a after b took it")
        .await;
    // The binding removed: the policy fences nothing, and a writes again.
    f.unbind().await;
    f.admitted(&a, "a, unbound").await;
    f.remove().await;
}
