//! The status writer across real `gateway-leader run` processes on a real kube-apiserver: only
//! the valid leader writes, a new leader writes what changed meanwhile, a frozen leader writes
//! nothing after it thaws, other controllers' entries are never touched, and nothing is sent
//! when nothing changed. Proof comes from the objects themselves (managedFields managers,
//! resourceVersions) and from the replicas' own logs.

mod common;

use gateway_leader_log::{message, Event};
use std::time::{Duration, SystemTime};

use common::blocking;
use common::gateway::*;
use common::Replica;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::{HttpRoute, HttpRouteStatusParents, HttpRouteStatusParentsParentRef};
use k8s_openapi::api::core::v1::Service;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

fn start(name: &str, args: &[String]) -> Replica {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Replica::start(name, &args)
}

/// Starts `names[0]` and waits for it to lead, then the others and waits for them to follow.
fn start_led_by(names: &[&str], args: &[String]) -> Vec<Replica> {
    let mut out = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let mut r = start(n, args);
        let wanted = if i == 0 {
            message::LEADING
        } else {
            message::FOLLOWING
        };
        blocking(|| r.wait_for(wanted, PATIENCE));
        out.push(r);
    }
    out
}

fn writes(r: &mut Replica) -> usize {
    r.lines()
        .iter()
        .filter(|l| l.message() == message::WRITTEN)
        .count()
}

/// One namespace, class, Gateway, Service and HTTPRoute of a test, all valid.
struct Scene {
    server: &'static testkit::kube::KubeApiServer,
    ns: String,
    controller: String,
    classes: Api<GatewayClass>,
    gateways: Api<Gateway>,
    routes: Api<HttpRoute>,
    services: Api<Service>,
}

impl Scene {
    /// A namespace, class, Gateway, Service and route for `test`.
    async fn new(test: &str) -> Scene {
        let scene = Scene::empty(test).await;
        scene.populate().await;
        scene
    }

    /// Only the namespace: objects come later ([`populate`](Self::populate)).
    async fn empty(test: &str) -> Scene {
        let s = apiserver().await;
        let ns = format!("sw-{test}");
        s.create_namespace(&ns).await.expect("namespace");
        let client = admin(s);
        let scene = Scene {
            server: s,
            controller: format!("gateway-leader.dev/{test}"),
            classes: Api::all(client.clone()),
            gateways: Api::namespaced(client.clone(), &ns),
            routes: Api::namespaced(client.clone(), &ns),
            services: Api::namespaced(client, &ns),
            ns,
        };
        scene
    }

    async fn populate(&self) {
        let scene = self;
        put(&scene.classes, &gateway_class(&scene.ns, &scene.controller)).await;
        put(&scene.gateways, &gateway(&scene.ns, "gw", &scene.ns)).await;
        put(&scene.services, &service(&scene.ns, "web", 80)).await;
        put(
            &scene.routes,
            &route(&scene.ns, "route", "gw", &[(&scene.ns, "web", 80)]),
        )
        .await;
    }

    /// Points the route at `backend` and waits until its status says `reason`.
    async fn route_to(&self, backend: &str, resolved: bool, reason: &str) {
        put(
            &self.routes,
            &route(&self.ns, "route", "gw", &[(&self.ns, backend, 80)]),
        )
        .await;
        let (c, reason) = (self.controller.clone(), reason.to_string());
        let status = if resolved { "True" } else { "False" };
        wait_for(&self.routes, "route", &reason.clone(), move |r| {
            route_says(r, &c, "ResolvedRefs", status, &reason)
        })
        .await;
    }

    fn args(&self) -> Vec<String> {
        replica_args(self.server.kubeconfig_path(), &self.ns, &self.controller)
    }

    /// Waits until every object says what a valid setup says.
    async fn wait_settled(&self) {
        let c = self.controller.clone();
        wait_for(
            &self.routes,
            "route",
            "accepted with resolved refs",
            move |r| {
                route_says(r, &c, "Accepted", "True", "Accepted")
                    && route_says(r, &c, "ResolvedRefs", "True", "ResolvedRefs")
            },
        )
        .await;
        wait_for(
            &self.gateways,
            "gw",
            "accepted with one attached route",
            |g| {
                g.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .as_deref()
                        .and_then(|c| condition(c, "Accepted"))
                        .is_some_and(|c| c.status == "True")
                        && s.listeners
                            .as_deref()
                            .is_some_and(|l| l.len() == 1 && l[0].attached_routes == 1)
                })
            },
        )
        .await;
        wait_for(&self.classes, &self.ns, "accepted", |gc| {
            gc.status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .and_then(|c| condition(c, "Accepted"))
                .is_some_and(|c| c.status == "True")
        })
        .await;
    }

    /// The field managers of the three objects' statuses, and their resourceVersions.
    async fn provenance(&self) -> (Vec<std::collections::BTreeSet<String>>, Vec<String>) {
        let gc = self.classes.get(&self.ns).await.expect("class");
        let gw = self.gateways.get("gw").await.expect("gateway");
        let r = self.routes.get("route").await.expect("route");
        (
            vec![
                status_managers(&gc),
                status_managers(&gw),
                status_managers(&r),
            ],
            vec![version(&gc), version(&gw), version(&r)],
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_nothing_is_sent_when_nothing_changed() {
    let scene = Scene::empty("only-leader").await;
    let args = scene.args();
    let mut replicas = start_led_by(&["ol-a", "ol-b", "ol-c"], &args);
    // Every replica watches and computes before the objects appear, so all of them see every
    // change at about the same time: a follower that wrote would show here.
    for r in replicas.iter_mut() {
        blocking(|| r.wait_for("first statuses computed", PATIENCE));
    }
    scene.populate().await;
    scene.wait_settled().await;
    scene.route_to("missing", false, "BackendNotFound").await;
    scene.route_to("web", true, "ResolvedRefs").await;
    let (managers, versions) = scene.provenance().await;
    for m in &managers {
        // The creator ("unknown": the admin client) owns the CRD's defaulted status fields.
        let replicas: std::collections::BTreeSet<_> = m
            .iter()
            .filter(|m| m.starts_with("gateway-leader/"))
            .cloned()
            .collect();
        assert_eq!(
            replicas,
            [manager_of("ol-a")].into(),
            "only the leader's field manager wrote statuses"
        );
    }
    assert!(
        writes(&mut replicas[0]) >= 3,
        "the leader logged its writes"
    );
    // The Lease, too, names its writer: the apiserver takes the manager from the user agent.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin(scene.server), &scene.ns);
    let lease = leases
        .get(&format!("{}-lock", scene.ns))
        .await
        .expect("lease");
    let lease_managers: std::collections::BTreeSet<_> = lease
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(lease_managers, ["gateway-leader".to_string()].into());
    assert_eq!(writes(&mut replicas[1]), 0, "a follower never writes");
    assert_eq!(writes(&mut replicas[2]), 0, "a follower never writes");

    // A new leader checks at once what its watch did not see written; nothing changed, so
    // nothing is sent.
    replicas[0].terminate();
    assert_eq!(blocking(|| replicas[0].wait_exit(PATIENCE)), Some(0));
    let checked = blocking(|| {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            for r in replicas[1..].iter_mut() {
                if let Some(l) = r
                    .lines()
                    .iter()
                    .find(|l| l.message() == message::SWEEP_DONE)
                {
                    return l.clone();
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no new leader checked the statuses"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    // Its watch already showed every status as written, so it has nothing left to check.
    assert!(
        matches!(
            checked.event,
            Some(Event::SweepDone {
                written: 0,
                unchanged: 0,
                ..
            })
        ),
        "{:?}",
        checked.json
    );
    let (after, versions_after) = scene.provenance().await;
    assert_eq!(versions_after, versions, "no request changed any object");
    assert_eq!(after, managers);
    assert_eq!(writes(&mut replicas[1]) + writes(&mut replicas[2]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_writes_what_changed_while_the_leader_was_gone() {
    let scene = Scene::new("changed-meanwhile").await;
    let args = scene.args();
    let mut replicas = start_led_by(&["cm-a", "cm-b"], &args);
    scene.wait_settled().await;

    // Crash the leader, then break the route while nobody may write (the lease runs 3 s).
    drop(replicas.remove(0));
    scene.route_to("missing", false, "BackendNotFound").await;
    let r = scene.routes.get("route").await.expect("route");
    assert!(
        status_managers(&r).contains(&manager_of("cm-b")),
        "the new leader wrote it"
    );
    blocking(|| replicas[0].wait_for(message::FIRST_WRITE, PATIENCE));

    // Stop it gracefully and change the route back: a third replica takes over and writes it.
    let mut c3 = start("cm-c", &args);
    blocking(|| c3.wait_for(message::FOLLOWING, PATIENCE));
    replicas[0].terminate();
    scene.route_to("web", true, "ResolvedRefs").await;
    blocking(|| c3.wait_for(message::FIRST_WRITE, PATIENCE));
    assert_eq!(blocking(|| replicas[0].wait_exit(PATIENCE)), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_writes_nothing_after_it_thaws() {
    let scene = Scene::new("frozen").await;
    let args = scene.args();
    let mut replicas = start_led_by(&["fz-a", "fz-b"], &args);
    scene.wait_settled().await;

    replicas[0].pause();
    let frozen_at = SystemTime::now();
    scene.route_to("missing", false, "BackendNotFound").await;
    blocking(|| replicas[1].wait_for(message::LEADING, PATIENCE));

    // Thaw the old leader and change the route again: only the new leader may write it.
    let thawed_at = SystemTime::now();
    replicas[0].resume();
    blocking(|| replicas[0].wait_for_since(message::FOLLOWING, frozen_at, PATIENCE));
    scene.route_to("web", true, "ResolvedRefs").await;
    // Judged by what the server holds, not by the old leader's log: a write it finished before
    // the freeze may be logged only after the thaw. The apiserver stamps each manager's entry in
    // managedFields with the time of its last write, in whole seconds; any write of the thawed
    // leader would carry a time no earlier than a second before the thaw.
    let (managers, _) = scene.provenance().await;
    let old = manager_of("fz-a");
    assert!(
        managers.iter().any(|m| m.contains(&old)),
        "the old leader wrote before the freeze: {managers:?}"
    );
    let gc = scene.classes.get(&scene.ns).await.expect("class");
    let gw = scene.gateways.get("gw").await.expect("gateway");
    let route = scene.routes.get("route").await.expect("route");
    let last = [
        last_status_write(&gc, &old),
        last_status_write(&gw, &old),
        last_status_write(&route, &old),
    ];
    for t in last.into_iter().flatten() {
        assert!(
            t + Duration::from_secs(1) < thawed_at,
            "the thawed leader wrote a status at {t:?}, after the thaw at {thawed_at:?}"
        );
    }
    let r = scene.routes.get("route").await.expect("route");
    assert!(
        status_managers(&r).contains(&manager_of("fz-b")),
        "the new leader's write is on the object"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_controllers_parent_entries_are_never_touched() {
    let scene = Scene::new("foreign-parents").await;
    let theirs = HttpRouteStatusParents {
        conditions: vec![from_json_condition()],
        controller_name: "example.net/someone-else".into(),
        parent_ref: HttpRouteStatusParentsParentRef {
            name: "their-gateway".into(),
            ..Default::default()
        },
    };
    // A stale entry of ours too, for a Gateway the route no longer names: it must go.
    let stale = HttpRouteStatusParents {
        controller_name: scene.controller.clone(),
        parent_ref: HttpRouteStatusParentsParentRef {
            name: "gone".into(),
            ..Default::default()
        },
        ..theirs.clone()
    };
    let mut r = scene.routes.get_status("route").await.expect("route");
    r.status = Some(gateway_api::httproutes::HttpRouteStatus {
        parents: vec![theirs.clone(), stale],
    });
    r.metadata.managed_fields = None;
    let stored = scene
        .routes
        .replace_status("route", &PostParams::default(), &r)
        .await
        .expect("their status");
    // As the apiserver stored it (it fills in the CRD's defaults).
    let theirs = stored.status.expect("status").parents[0].clone();

    let args = scene.args();
    let _replicas = start_led_by(&["fp-a"], &args);
    scene.wait_settled().await;
    let r = scene.routes.get("route").await.expect("route");
    let parents = r.status.expect("status").parents;
    assert_eq!(parents.len(), 2, "theirs and ours: {parents:#?}");
    assert_eq!(
        parents[0], theirs,
        "their entry is exactly as they wrote it"
    );
    assert_eq!(parents[1].controller_name, scene.controller);
    assert_eq!(parents[1].parent_ref.name, "gw");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_someone_else_overwrote_is_written_back_from_the_watch() {
    let scene = Scene::new("drift").await;
    let args = scene.args();
    let _replicas = start_led_by(&["dr-a"], &args);
    scene.wait_settled().await;
    // Our entry removed by another writer: nothing the statuses are computed from changed, so
    // only the watched copy shows it.
    let mut r = scene.routes.get_status("route").await.expect("route");
    r.status = Some(gateway_api::httproutes::HttpRouteStatus { parents: vec![] });
    r.metadata.managed_fields = None;
    let cleared = scene
        .routes
        .replace_status("route", &PostParams::default(), &r)
        .await
        .expect("cleared");
    scene.wait_settled().await;
    let back = scene.routes.get("route").await.expect("route");
    assert_ne!(
        version(&back),
        version(&cleared),
        "the leader wrote the route again"
    );
    assert!(status_managers(&back).contains(&manager_of("dr-a")));
}

fn from_json_condition() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    serde_json::from_value(json!({
        "type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
        "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"
    }))
    .expect("condition")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_rbac_is_enough_for_election_and_status_writes() {
    let scene = Scene::new("rbac").await;
    let s = scene.server;
    let sa = "gateway-leader";
    let token = s
        .service_account_token(&scene.ns, sa)
        .await
        .expect("service account token");
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base");
    for file in ["rbac-leader-election.yaml", "rbac-status-writer.yaml"] {
        testkit::rbac::bind_manifest(s, &deploy.join(file), &scene.ns, sa)
            .await
            .unwrap_or_else(|e| panic!("binding {file}: {e:#}"));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    s.write_token_kubeconfig(&token, &kubeconfig)
        .expect("kubeconfig for the service account");
    let args = replica_args(&kubeconfig, &scene.ns, &scene.controller);
    let mut replicas = start_led_by(&["rbac-a"], &args);
    scene.wait_settled().await;
    let denied: Vec<_> = replicas[0]
        .lines()
        .iter()
        .filter(|l| l.json.to_string().contains("forbidden"))
        .map(|l| l.json.clone())
        .collect();
    assert!(denied.is_empty(), "nothing was forbidden: {denied:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_and_invalid_gateways_and_routes_get_the_spec_reasons() {
    let scene = Scene::new("reasons").await;
    let s = scene.server;
    let other = format!("{}-other", scene.ns);
    s.create_namespace(&other).await.expect("namespace");
    let client = admin(s);
    let ns = scene.ns.as_str();
    // A second Gateway whose listeners take routes from every namespace, one of them TCP.
    let open: Gateway = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "open", "namespace": ns},
        "spec": {"gatewayClassName": ns, "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 80,
             "allowedRoutes": {"namespaces": {"from": "All"}}},
            {"name": "tcp", "protocol": "TCP", "port": 9000}
        ]}
    }))
    .expect("gateway");
    put(&scene.gateways, &open).await;
    let routes_other: Api<HttpRoute> = Api::namespaced(client.clone(), &other);
    let with_parent = |r: HttpRoute, gw: &str, section: Option<&str>| {
        let mut v = serde_json::to_value(r).expect("json");
        v["spec"]["parentRefs"] = json!([{"name": gw, "namespace": ns, "sectionName": section}]);
        serde_json::from_value::<HttpRoute>(v).expect("route")
    };
    // A match the CRD would not default: the stores drop matches (`Trim` in status/src/watch.rs)
    // and the writer sends its stored copy to the status subresource, which must keep it.
    let mut missing = serde_json::to_value(route(ns, "missing", "gw", &[(ns, "nothing-here", 80)]))
        .expect("json");
    missing["spec"]["rules"][0]["matches"] =
        json!([{"path": {"type": "PathPrefix", "value": "/api"}}]);
    let missing: HttpRoute = serde_json::from_value(missing).expect("route");
    let wrong_port = route(ns, "wrong-port", "gw", &[(ns, "web", 8080)]);
    let mut invalid_kind =
        serde_json::to_value(route(ns, "invalid-kind", "gw", &[(ns, "web", 80)])).expect("json");
    invalid_kind["spec"]["rules"][0]["backendRefs"][0]["kind"] = json!("ConfigMap");
    let invalid_kind: HttpRoute = serde_json::from_value(invalid_kind).expect("route");
    let no_parent = with_parent(
        route(ns, "no-parent", "gw", &[(ns, "web", 80)]),
        "gw",
        Some("nope"),
    );
    let cross = with_parent(
        route(&other, "cross", "open", &[(ns, "web", 80)]),
        "open",
        None,
    );
    let not_allowed = with_parent(
        route(&other, "not-allowed", "gw", &[(ns, "web", 80)]),
        "gw",
        None,
    );
    for r in [&missing, &wrong_port, &invalid_kind, &no_parent] {
        put(&scene.routes, r).await;
    }
    for r in [&cross, &not_allowed] {
        put(&routes_other, r).await;
    }
    let mut args = scene.args();
    args.push("--leader-election-disable".into());
    let _replica = start("reasons-a", &args);
    let c = scene.controller.clone();
    let expect = |api: &Api<HttpRoute>,
                  name: &'static str,
                  t: &'static str,
                  st: &'static str,
                  reason: &'static str| {
        let (api, c) = (api.clone(), c.clone());
        async move {
            wait_for(&api, name, &format!("{t}={st} ({reason})"), move |r| {
                route_says(r, &c, t, st, reason)
            })
            .await
        }
    };
    expect(
        &scene.routes,
        "missing",
        "ResolvedRefs",
        "False",
        "BackendNotFound",
    )
    .await;
    expect(&scene.routes, "missing", "Accepted", "True", "Accepted").await;
    let written = scene.routes.get("missing").await.expect("route");
    let matches = serde_json::to_value(&written.spec.rules).expect("json");
    assert_eq!(
        matches[0]["matches"][0]["path"]["value"], "/api",
        "the status write left the spec as it was"
    );
    expect(
        &scene.routes,
        "wrong-port",
        "ResolvedRefs",
        "False",
        "BackendNotFound",
    )
    .await;
    expect(
        &scene.routes,
        "invalid-kind",
        "ResolvedRefs",
        "False",
        "InvalidKind",
    )
    .await;
    expect(
        &scene.routes,
        "no-parent",
        "Accepted",
        "False",
        "NoMatchingParent",
    )
    .await;
    expect(
        &routes_other,
        "not-allowed",
        "Accepted",
        "False",
        "NotAllowedByListeners",
    )
    .await;
    expect(&routes_other, "cross", "Accepted", "True", "Accepted").await;
    expect(
        &routes_other,
        "cross",
        "ResolvedRefs",
        "False",
        "RefNotPermitted",
    )
    .await;
    // A ReferenceGrant to the core group lets the cross-namespace backend in.
    let grants: Api<gateway_api::referencegrants::ReferenceGrant> = Api::namespaced(client, ns);
    put(&grants, &grant_services(ns, "from-other", &other)).await;
    expect(
        &routes_other,
        "cross",
        "ResolvedRefs",
        "True",
        "ResolvedRefs",
    )
    .await;
    // The open Gateway: its HTTP listener counts the cross route; its TCP listener is served
    // where the cluster has TCPRoutes (Gateway API v1.6), refused where it does not.
    let v1_6 = testkit::gateway_api::require_v1_6(&admin(s)).await.is_ok();
    let (status, reason) = if v1_6 {
        ("True", "Accepted")
    } else {
        ("False", "UnsupportedProtocol")
    };
    wait_for(&scene.gateways, "open", "listener statuses", move |g| {
        let Some(ls) = g.status.as_ref().and_then(|s| s.listeners.as_deref()) else {
            return false;
        };
        ls.len() == 2
            && ls[0].attached_routes == 1
            && condition(&ls[1].conditions, "Accepted")
                .is_some_and(|c| c.status == status && c.reason == reason)
    })
    .await;
}
