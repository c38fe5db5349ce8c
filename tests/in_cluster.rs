//! The real `gateway-leader run` as a pod of the base Deployment runs it: the service account's
//! token, CA and namespace at `/var/run/secrets/kubernetes.io/serviceaccount/` (see
//! `common::pod`), `KUBERNETES_SERVICE_HOST`/`PORT` pointing at the test apiserver, no
//! kubeconfig, the Deployment's own command line. Bound to exactly the base's RBAC, two replicas
//! elect one leader, which writes every status and hands over on SIGTERM; with any one rule of the
//! Role or the ClusterRole, or any one verb of a rule, removed, something named breaks. The etcd
//! overlay's RBAC (no Role) is enough for the etcd lock, and the Helm chart's rendered RBAC alone
//! is enough for the Kubernetes lock.

mod common;

use gateway_leader_log::message;
use std::time::Duration;

use common::deploy::{deploy_dir, one, render};
use common::gateway::*;
use common::in_cluster::*;
use common::{blocking, Replica};
use futures::{StreamExt, TryStreamExt};
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use testkit::kube::{KubeApiServer, Options};
use tokio::sync::OnceCell;

/// Asserts that no replica logged a refusal (`forbidden`) from the apiserver.
fn nothing_forbidden(replicas: [&mut common::Replica; 2]) {
    for r in replicas {
        let denied: Vec<_> = r
            .lines()
            .iter()
            .filter(|l| text(l).contains("forbidden"))
            .map(|l| l.json.clone())
            .collect();
        assert!(
            denied.is_empty(),
            "{}: nothing forbidden: {denied:?}",
            r.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_rbac_is_enough_in_cluster() {
    let c = InCluster::new("enough", Without::Nothing).await;
    let mut a = c.start("gateway-leader-a");
    blocking(|| a.wait_for(message::LEADING, PATIENCE));
    let mut b = c.start("gateway-leader-b");
    blocking(|| b.wait_for(message::FOLLOWING, PATIENCE));
    // The client was built from the service account, not from some kubeconfig.
    let ready = blocking(|| a.wait_for("kubernetes configuration loaded", PATIENCE));
    assert_eq!(
        ready.json["from"], "in-cluster service account",
        "{:?}",
        ready.json
    );
    c.wait_written().await;
    let r = c.routes.get("route").await.expect("route");
    assert!(
        status_managers(&r).contains(&manager_of("gateway-leader-a")),
        "the leader wrote the route's status: {:?}",
        status_managers(&r)
    );
    // The Lease names the leader; the Event about it was posted with the pod's rights.
    let lease: Api<Lease> = Api::namespaced(admin(c.server), &c.ns);
    let lease = lease
        .get("gateway-leader-leader-election-lock")
        .await
        .expect("the Lease, in the pod's namespace");
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.starts_with("gateway-leader-a_"),
        "the leader holds it: {holder}"
    );
    // The Event waits for the leadership's first renewal, which may come after the first write.
    let events: Api<Event> = Api::namespaced(admin(c.server), &c.ns);
    let mut became = watcher(events, watcher::Config::default())
        .applied_objects()
        .try_filter(|e| {
            let m = e.message.as_deref().unwrap_or_default();
            std::future::ready(m.starts_with("gateway-leader-a_") && m.ends_with("became leader"))
        })
        .boxed();
    let became = tokio::time::timeout(PATIENCE, became.try_next()).await;
    assert!(
        matches!(became, Ok(Ok(Some(_)))),
        "a \"became leader\" Event for a within {PATIENCE:?}: {became:?}"
    );

    // SIGTERM, as the kubelet sends: the leader releases, the follower takes over and writes.
    a.terminate();
    blocking(|| a.wait_for(message::RELEASED, PATIENCE));
    assert_eq!(blocking(|| a.wait_exit(PATIENCE)), Some(0));
    blocking(|| b.wait_for(message::LEADING, PATIENCE));
    c.route_to_a_missing_service_written_by("gateway-leader-b")
        .await;
    nothing_forbidden([&mut a, &mut b]);
}

/// One rule or verb taken out, and what must break without it.
struct Case {
    name: &'static str,
    without: Without,
    /// The refusals (verb, resource) the replica must log; an empty verb matches any (a
    /// replica stops at the first verb it is refused).
    refused: &'static [(&'static str, &'static str)],
}

/// Every rule of the base's Role and ClusterRole, then every verb of a rule that has more than
/// one. What each one's absence breaks is in docs/operations.md ("What each permission is for").
const CASES: &[Case] = &[
    // The Lease: no leadership at all.
    Case {
        name: "no-leases",
        without: Without::RoleRule(0),
        refused: &[("", "leases")],
    },
    // The Events about leadership.
    Case {
        name: "no-events",
        without: Without::RoleRule(1),
        refused: &[("create", "events")],
    },
    // Watching the Gateway API objects: nothing to compute from.
    Case {
        name: "no-gateway-api-reads",
        without: Without::ClusterRoleRule(0),
        refused: &[
            ("", "gatewayclasses"),
            ("", "gateways"),
            ("", "httproutes"),
            ("", "grpcroutes"),
            ("", "tlsroutes"),
            ("", "referencegrants"),
            ("", "listenersets"),
            ("", "backendtlspolicies"),
        ],
    },
    // Writing statuses.
    Case {
        name: "no-status-writes",
        without: Without::ClusterRoleRule(1),
        refused: &[
            ("", "gatewayclasses/status"),
            ("", "gateways/status"),
            ("", "httproutes/status"),
            ("", "grpcroutes/status"),
            ("", "tlsroutes/status"),
            ("", "listenersets/status"),
            ("", "backendtlspolicies/status"),
        ],
    },
    // Watching the Services routes point to and the Namespaces listeners select.
    Case {
        name: "no-core-reads",
        without: Without::ClusterRoleRule(2),
        refused: &[("", "services"), ("", "namespaces")],
    },
    // Reading the installed Gateway API version.
    Case {
        name: "no-crd-read",
        without: Without::ClusterRoleRule(3),
        refused: &[("get", "customresourcedefinitions")],
    },
    // Each verb of the Lease rule: reading it, the watch that makes failover prompt (a list to
    // start at, then the watch), creating it, and taking it over or renewing it.
    Case {
        name: "no-leases-get",
        without: Without::RoleVerb(0, "get"),
        refused: &[("get", "leases")],
    },
    Case {
        name: "no-leases-list",
        without: Without::RoleVerb(0, "list"),
        refused: &[("list", "leases")],
    },
    Case {
        name: "no-leases-watch",
        without: Without::RoleVerb(0, "watch"),
        refused: &[("watch", "leases")],
    },
    Case {
        name: "no-leases-create",
        without: Without::RoleVerb(0, "create"),
        refused: &[("create", "leases")],
    },
    Case {
        name: "no-leases-update",
        without: Without::RoleVerb(0, "update"),
        refused: &[("update", "leases")],
    },
    // Each verb of the watches: the list they start from where the apiserver does not stream
    // it (`run_case` runs these on such an apiserver), and the watch itself.
    Case {
        name: "no-gateway-api-list",
        without: Without::ClusterRoleVerb(0, "list"),
        refused: &[
            ("list", "gatewayclasses"),
            ("list", "gateways"),
            ("list", "httproutes"),
            ("list", "grpcroutes"),
            ("list", "tlsroutes"),
            ("list", "referencegrants"),
            ("list", "listenersets"),
            ("list", "backendtlspolicies"),
        ],
    },
    Case {
        name: "no-gateway-api-watch",
        without: Without::ClusterRoleVerb(0, "watch"),
        refused: &[
            ("watch", "gatewayclasses"),
            ("watch", "gateways"),
            ("watch", "httproutes"),
            ("watch", "grpcroutes"),
            ("watch", "tlsroutes"),
            ("watch", "referencegrants"),
            ("watch", "listenersets"),
            ("watch", "backendtlspolicies"),
        ],
    },
    // Each verb of a status write: the read of the current status, and the write. A write
    // starts from the watched copy, so the read happens only after a conflict: `run_case`
    // provokes conflicts on the HTTPRoute by changing its spec as fast as the replica writes.
    Case {
        name: "no-status-get",
        without: Without::ClusterRoleVerb(1, "get"),
        refused: &[("get", "httproutes/status")],
    },
    Case {
        name: "no-status-update",
        without: Without::ClusterRoleVerb(1, "update"),
        refused: &[
            ("update", "gatewayclasses/status"),
            ("update", "gateways/status"),
            ("update", "httproutes/status"),
            ("update", "grpcroutes/status"),
            ("update", "tlsroutes/status"),
            ("update", "listenersets/status"),
            ("update", "backendtlspolicies/status"),
        ],
    },
    Case {
        name: "no-core-list",
        without: Without::ClusterRoleVerb(2, "list"),
        refused: &[("list", "services"), ("list", "namespaces")],
    },
    Case {
        name: "no-core-watch",
        without: Without::ClusterRoleVerb(2, "watch"),
        refused: &[("watch", "services"), ("watch", "namespaces")],
    },
    // Reading the Secrets that listeners' certificateRefs name: the certificate check cannot
    // run, so no status is computed (an HTTPS listener would otherwise be reported invalid for
    // want of a permission).
    Case {
        name: "no-secrets",
        without: Without::ClusterRoleRule(4),
        refused: &[("", "secrets")],
    },
    Case {
        name: "no-secrets-list",
        without: Without::ClusterRoleVerb(4, "list"),
        refused: &[("list", "secrets")],
    },
    Case {
        name: "no-secrets-watch",
        without: Without::ClusterRoleVerb(4, "watch"),
        refused: &[("watch", "secrets")],
    },
    // Reading the ConfigMaps that BackendTLSPolicies' caCertificateRefs name: likewise, no
    // status is computed rather than every policy reported without a valid CA.
    Case {
        name: "no-configmaps",
        without: Without::ClusterRoleRule(5),
        refused: &[("", "configmaps")],
    },
    Case {
        name: "no-configmaps-list",
        without: Without::ClusterRoleVerb(5, "list"),
        refused: &[("list", "configmaps")],
    },
    Case {
        name: "no-configmaps-watch",
        without: Without::ClusterRoleVerb(5, "watch"),
        refused: &[("watch", "configmaps")],
    },
];

/// Changes HTTPRoute `route`'s backend port back and forth without pause, each change a new
/// desired status (ResolvedRefs flips between resolved and `BackendNotFound`), so that the
/// replica's writes, each from the copy its watch last saw, keep meeting newer versions: a
/// conflict, and the re-read after it.
async fn churn_route(routes: Api<HttpRoute>) {
    for i in 0u32.. {
        let port = if i % 2 == 0 { 81 } else { 80 };
        let change = serde_json::json!({"spec": {"rules": [
            {"backendRefs": [{"name": "web", "port": port}]}
        ]}});
        // A failed change of ours is as good as any: only the replica's conflicts matter.
        let _ = routes
            .patch("route", &PatchParams::default(), &Patch::Merge(&change))
            .await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An apiserver that does not stream initial lists (`WatchList` off), shared by the cases that
/// take a `list` verb away: where the apiserver streams them, a watch-list needs `watch` alone,
/// and `list` serves the paginated fallback (docs/operations.md).
async fn without_watch_list() -> &'static KubeApiServer {
    static SERVER: OnceCell<KubeApiServer> = OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            KubeApiServer::start_local_with(Options {
                feature_gates: vec!["WatchList=false".to_string()],
                ..Options::default()
            })
            .await
            .expect("a kube-apiserver with WatchList off starts")
        })
        .await
}

/// Runs one case: a replica bound to the base's RBAC less one rule logs the refusal of every
/// resource the rule covers, and the part of the job that needs it does not happen.
async fn run_case(case: &'static Case) {
    let c = match case.without {
        Without::ClusterRoleVerb(_, "list") => {
            InCluster::on(without_watch_list().await, case.name, rbac(case.without)).await
        }
        _ => InCluster::new(case.name, case.without).await,
    };
    let mut r = c.start(&format!("gateway-leader-{}", case.name));
    let churn = matches!(case.without, Without::ClusterRoleVerb(1, "get"))
        .then(|| tokio::spawn(churn_route(c.routes.clone())));
    for (verb, resource) in case.refused {
        blocking(|| {
            r.wait_match(&format!("a refusal of {verb} {resource}"), PATIENCE, |l| {
                forbidden(l, verb, resource)
            })
        });
    }
    if let Some(churn) = churn {
        churn.abort();
    }
    let leading = |r: &mut Replica| r.lines().iter().any(|l| l.message() == message::LEADING);
    match case.without {
        Without::RoleRule(0) => {
            // No Lease can be read or made: nobody leads, so nothing is written.
            assert!(!leading(&mut r), "led without the Lease rule");
            let leases: Api<Lease> = Api::namespaced(admin(c.server), &c.ns);
            assert!(
                leases
                    .get_opt("gateway-leader-leader-election-lock")
                    .await
                    .expect("leases")
                    .is_none(),
                "no Lease was made"
            );
        }
        Without::RoleRule(_) => {
            // Leadership itself works; only the Event about it is refused.
            assert!(leading(&mut r), "leads without the Events rule");
        }
        Without::ClusterRoleRule(1) => {
            // It leads and computes, but no status reaches the objects.
            assert!(leading(&mut r), "leads without the status rule");
            let route = c.routes.get("route").await.expect("route");
            assert!(
                our_parent(&route, &c.controller).is_none(),
                "no status was written: {:?}",
                route.status
            );
        }
        Without::ClusterRoleRule(3) => {
            // The GatewayClass says it could not tell the installed version.
            wait_for(&c.classes, &c.ns, "SupportedVersion unknown", |gc| {
                gc.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_deref())
                    .and_then(|cs| condition(cs, "SupportedVersion"))
                    .is_some_and(|cond| cond.message.contains("could not be read"))
            })
            .await;
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rule_of_the_base_rbac_is_needed() {
    // Every rule, and every verb of a rule with more than one, is in exactly one case: a rule
    // or verb added to the base needs a case that shows what breaks without it.
    let mut wanted = Vec::new();
    let needed = rbac(Without::Nothing);
    for kind in ["Role", "ClusterRole"] {
        let rules = one(&needed, kind)["rules"].as_array().expect("rules");
        for (i, rule) in rules.iter().enumerate() {
            wanted.push(match kind {
                "Role" => Without::RoleRule(i),
                _ => Without::ClusterRoleRule(i),
            });
            let verbs = rule["verbs"].as_array().expect("verbs");
            for v in verbs.iter().filter(|_| verbs.len() > 1) {
                let v = v.as_str().expect("a verb");
                let case = CASES
                    .iter()
                    .find(|c| match (kind, c.without) {
                        ("Role", Without::RoleVerb(j, w))
                        | ("ClusterRole", Without::ClusterRoleVerb(j, w)) => j == i && w == v,
                        _ => false,
                    })
                    .unwrap_or_else(|| panic!("no case without {v} of {kind} rule {i}"));
                wanted.push(case.without);
            }
        }
    }
    for w in &wanted {
        assert_eq!(
            CASES.iter().filter(|c| c.without == *w).count(),
            1,
            "one case for {w:?}"
        );
    }
    assert_eq!(
        CASES.len(),
        wanted.len(),
        "no case for a rule or verb the base lacks"
    );
    // Concurrently: each case waits mostly on the apiserver and its replica's log.
    let tasks: Vec<_> = CASES
        .iter()
        .map(|case| (case.name, tokio::spawn(run_case(case))))
        .collect();
    let mut failed = Vec::new();
    for (name, task) in tasks {
        if let Err(e) = task.await {
            let why = e
                .try_into_panic()
                .ok()
                .and_then(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                })
                .unwrap_or_default();
            failed.push(format!("{name}: {why}"));
        }
    }
    assert!(failed.is_empty(), "cases failed:\n{}", failed.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_overlay_needs_no_role() {
    let etcd = testkit::etcd::EtcdServer::start()
        .await
        .expect("etcd starts (package etcd-server; scripts/test.sh installs it)");
    let overlay = render(&deploy_dir().join("overlays/etcd"));
    let rbac = rbac_of(&overlay, Without::Nothing);
    let kinds: Vec<&str> = rbac.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        ["ClusterRole", "ClusterRoleBinding"],
        "no Role in the overlay"
    );
    let c = InCluster::with_rbac("etcd-overlay", rbac).await;
    // The overlay's lock with a plain-text test etcd: its password and CA files are checked by
    // tests/deploy_manifests/; here only its RBAC is at stake.
    let args: Vec<String> = [
        "run",
        "--lock-backend",
        "etcd",
        "--log-format",
        "json",
        "--etcd-endpoints",
        &etcd.endpoint(),
        "--leader-election-lock-name",
        &c.ns,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let mut a = c.start_with("gateway-leader-a", args.clone());
    blocking(|| a.wait_for(message::LEADING, PATIENCE));
    let mut b = c.start_with("gateway-leader-b", args);
    blocking(|| b.wait_for(message::FOLLOWING, PATIENCE));
    c.wait_written().await;
    let r = c.routes.get("route").await.expect("route");
    assert!(status_managers(&r).contains(&manager_of("gateway-leader-a")));
    nothing_forbidden([&mut a, &mut b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_rbac_is_enough_in_cluster() {
    // The chart as `helm install` renders it by default (the Kubernetes lock), its RBAC alone
    // bound to the pods' service account, and its Deployment's command line: the same rules as
    // the base's (tests/helm_chart.rs), proven here on their own.
    let chart = common::helm::template(&serde_json::json!({}));
    // As for the base (`common::in_cluster::rbac`): the fence's read-only check is not needed.
    let needed: Vec<serde_json::Value> = chart
        .iter()
        .filter(|o| o["metadata"]["name"] != common::in_cluster::FENCING_CHECK)
        .cloned()
        .collect();
    let rbac = rbac_of(&needed, Without::Nothing);
    let kinds: Vec<&str> = rbac.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds.len(),
        4,
        "a Role, a ClusterRole and their bindings: {kinds:?}"
    );
    let c = InCluster::with_rbac("helm-chart", rbac).await;
    let args = common::deploy::strings(&common::deploy::container(&chart)["args"]);
    let mut a = c.start_with("gateway-leader-a", args.clone());
    blocking(|| a.wait_for(message::LEADING, PATIENCE));
    let mut b = c.start_with("gateway-leader-b", args);
    blocking(|| b.wait_for(message::FOLLOWING, PATIENCE));
    c.wait_written().await;
    let r = c.routes.get("route").await.expect("route");
    assert!(status_managers(&r).contains(&manager_of("gateway-leader-a")));
    a.terminate();
    blocking(|| a.wait_for(message::RELEASED, PATIENCE));
    assert_eq!(blocking(|| a.wait_exit(PATIENCE)), Some(0));
    blocking(|| b.wait_for(message::LEADING, PATIENCE));
    c.route_to_a_missing_service_written_by("gateway-leader-b")
        .await;
    nothing_forbidden([&mut a, &mut b]);
}
