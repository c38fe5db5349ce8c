//! Kubernetes-specific scenarios against a real kube-apiserver: client-go interoperation, RBAC,
//! leader events.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::Api;
use leader_lock::backend::{Candidate, LeaderLock, LockError};
use leader_lock::conformance::{patience, wait_leader, wait_state};
use leader_lock::elector::AFTER_RELEASE_QUIET;
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState};
use leader_lock_kubernetes::{spawn_leader_events, LeaderEventsConfig, LeaseLock};
use serde_json::json;
use tokio::time::Instant;

/// A resourceVersion of the test apiserver, which are etcd revisions: ordered across objects.
fn rv(m: &ObjectMeta) -> u64 {
    m.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion from the test apiserver")
}

fn elector(lock: LeaseLock, name: &str) -> Elector {
    Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity: Identity::new(name),
            timing: common::timing(),
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing")
}

/// The Events of `identity` on Lease `ns/lease`, posted by this test.
fn events_config(ns: &str, lease: &str, identity: &Identity) -> LeaderEventsConfig {
    LeaderEventsConfig {
        component: "scenarios".to_string(),
        namespace: ns.to_string(),
        lease_name: lease.to_string(),
        identity: identity.clone(),
    }
}

/// An elector named `name` on Lease `lease` in `ns`, posting its leader election Events as the
/// admin; its identity and the Events' task.
fn elector_with_events(
    s: &testkit::kube::KubeApiServer,
    ns: &str,
    lease: &str,
    name: &str,
) -> (Elector, Identity, tokio::task::JoinHandle<()>) {
    let e = elector(common::lock(s, ns, lease), name);
    let identity = e.candidate().identity.clone();
    let events = spawn_leader_events(
        s.admin_client(),
        events_config(ns, lease, &identity),
        e.leadership(),
    );
    (e, identity, events)
}

/// The versions of Lease `lease` after resourceVersion `from`, as a watch delivers them.
async fn watch_lease(
    leases: &Api<Lease>,
    lease: &str,
    from: &str,
) -> futures::stream::BoxStream<'static, kube::Result<WatchEvent<Lease>>> {
    leases
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={lease}")),
            from,
        )
        .await
        .expect("watching the Lease")
        .boxed()
}

/// client-go's MicroTime: RFC 3339 with exactly six fractional digits, in UTC.
fn is_micro_time(v: &serde_json::Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    let b = s.as_bytes();
    b.len() == 27
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[26] == b'Z'
        && b[20..26].iter().all(u8::is_ascii_digit)
}

/// A replica that writes the Lease exactly as client-go's LeaseLock does.
async fn client_go_write(
    s: &testkit::kube::KubeApiServer,
    ns: &str,
    name: &str,
    holder: &str,
    acquire: &str,
    transitions: i32,
) {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    common::put_raw(
        s,
        ns,
        name,
        json!({"spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 4,
            "acquireTime": acquire,
            "renewTime": now,
            "leaseTransitions": transitions,
        }}),
    )
    .await
    .expect("client-go style write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_holder_is_respected_then_taken_and_fields_match_client_go() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "interop").await;
    let name = "interop";
    let timing = common::timing();
    let acquire = "2024-01-02T03:04:05.123456Z";

    // A live client-go leader: 4 s lease, renewing every second.
    client_go_write(s, &ns, name, "client-go-replica", acquire, 5).await;
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (stop, ns) = (stop.clone(), ns.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if !stop.load(Ordering::SeqCst) {
                    client_go_write(s, &ns, name, "client-go-replica", acquire, 5).await;
                }
            }
        })
    };

    let e = elector(common::lock(s, &ns, name), "gw");
    wait_state(
        &e.leadership(),
        patience(&timing),
        "following client-go",
        |st| {
            matches!(st, LeaderState::Follower { holder: Some(h), .. } if h == "client-go-replica")
        },
    )
    .await;
    // Well past our own and its lease duration: a renewing client-go holder is never stolen from.
    let until = Instant::now() + timing.lease_duration * 3;
    while Instant::now() < until {
        assert!(
            !e.leadership().is_leader(),
            "took the lease from a live client-go holder"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    stop.store(true, Ordering::SeqCst);
    renewer.await.expect("renewer");
    let stopped = Instant::now();
    let term = wait_leader(
        &e.leadership(),
        patience(&timing),
        "gw after client-go stopped",
    )
    .await;
    // Its last renew was at most ~1 s before it stopped; its lease is 4 s.
    assert!(
        stopped.elapsed() >= Duration::from_millis(2900),
        "took client-go's lease {:?} after its last renew could have been seen",
        stopped.elapsed()
    );
    assert_eq!(term.0, 6, "leaseTransitions + 1 on a change of holder");

    let raw = common::get_raw(s, &ns, name).await;
    let spec = &raw["spec"];
    assert_eq!(spec["holderIdentity"], e.candidate().holder());
    assert_eq!(spec["leaseTransitions"], 6);
    assert_eq!(spec["leaseDurationSeconds"], 3);
    assert!(is_micro_time(&spec["acquireTime"]), "{spec}");
    assert!(is_micro_time(&spec["renewTime"]), "{spec}");
    assert_eq!(
        spec["acquireTime"], spec["renewTime"],
        "a new holder writes acquireTime = renewTime = now"
    );

    // Renewals keep acquireTime and leaseTransitions and move renewTime.
    tokio::time::sleep(timing.retry_period * 3).await;
    let renewed = common::get_raw(s, &ns, name).await;
    assert_eq!(renewed["spec"]["acquireTime"], spec["acquireTime"]);
    assert_eq!(renewed["spec"]["leaseTransitions"], 6);
    assert_ne!(renewed["spec"]["renewTime"], spec["renewTime"]);

    // Release exactly as client-go: empty holder, leaseDurationSeconds 1, transitions kept.
    assert!(e.shutdown().await.expect("release"), "released");
    let released = common::get_raw(s, &ns, name).await;
    assert_eq!(released["spec"]["holderIdentity"], "");
    assert_eq!(released["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(released["spec"]["leaseTransitions"], 6);

    // client-go takes a released Lease at once (transitions + 1); a new replica of ours follows it.
    client_go_write(s, &ns, name, "client-go-replica-2", acquire, 7).await;
    let e2 = elector(common::lock(s, &ns, name), "gw2");
    wait_state(
        &e2.leadership(),
        patience(&timing),
        "following client-go again",
        |st| {
            matches!(
                st,
                LeaderState::Follower { holder: Some(h), term: Some(t) }
                    if h == "client-go-replica-2" && t.0 == 7
            )
        },
    )
    .await;
    assert!(!e2.leadership().is_leader());
    e2.abort().await;
}

/// The Role and RoleBinding that ship in `deploy/base`, bound to `sa` in `ns`: the tests prove
/// they suffice.
async fn grant_role(s: &testkit::kube::KubeApiServer, ns: &str, sa: &str) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/base/rbac-leader-election.yaml"
    );
    let text = std::fs::read_to_string(path).expect("reading the shipped RBAC manifest");
    let mut docs = text.split("\n---\n");
    let mut role: Role =
        serde_yaml::from_str(docs.next().expect("a Role")).expect("the shipped Role parses");
    let mut binding: RoleBinding = serde_yaml::from_str(docs.next().expect("a RoleBinding"))
        .expect("the shipped RoleBinding parses");
    role.metadata.namespace = Some(ns.into());
    binding.metadata.namespace = Some(ns.into());
    for subject in binding.subjects.iter_mut().flatten() {
        subject.name = sa.into();
        subject.namespace = Some(ns.into());
    }
    Api::<Role>::namespaced(s.admin_client(), ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("creating the shipped Role");
    Api::<RoleBinding>::namespaced(s.admin_client(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding the shipped Role");
}

async fn wait_event(s: &testkit::kube::KubeApiServer, ns: &str, message: &str) -> Event {
    let api: Api<Event> = Api::namespaced(s.admin_client(), ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = api
            .list(&ListParams::default())
            .await
            .expect("listing events");
        if let Some(ev) = list
            .items
            .into_iter()
            .find(|e| e.message.as_deref() == Some(message))
        {
            return ev;
        }
        assert!(
            Instant::now() < deadline,
            "no event \"{message}\" in {ns} within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_role_is_enough_and_no_rbac_is_refused_clearly() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "rbac").await;
    let timing = common::timing();
    let lease = "rbac-lock";

    let token = s
        .service_account_token(&ns, "leader")
        .await
        .expect("a service-account token");
    grant_role(s, &ns, "leader").await;
    let client = s.client_for_token(&token).expect("client");
    let identity = Identity::new("sa-replica");
    let e = Elector::spawn(
        Arc::new(LeaseLock::new(client.clone(), &ns, lease)),
        ElectorConfig {
            identity: identity.clone(),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing");
    let events = spawn_leader_events(
        client.clone(),
        events_config(&ns, lease, &identity),
        e.leadership(),
    );
    wait_leader(&e.leadership(), patience(&timing), "the service account").await;
    // The watch (list + watch) works under the Role too.
    let watched = LeaseLock::new(client, &ns, lease).watch().await;
    assert!(watched.is_ok(), "watch under the Role: {:?}", watched.err());

    let became = wait_event(s, &ns, &format!("{} became leader", identity.holder())).await;
    assert_eq!(became.reason.as_deref(), Some("LeaderElection"));
    assert_eq!(became.involved_object.kind.as_deref(), Some("Lease"));
    assert_eq!(became.involved_object.name.as_deref(), Some(lease));
    assert_eq!(
        became.source.and_then(|s| s.component).as_deref(),
        Some("scenarios"),
        "the component the caller named"
    );
    assert!(e.shutdown().await.expect("release"));
    let stopped = wait_event(s, &ns, &format!("{} stopped leading", identity.holder())).await;
    // The Event comes after the release, not in its way: the apiserver stored it later.
    let released: Lease = Api::namespaced(s.admin_client(), &ns)
        .get(lease)
        .await
        .expect("the released Lease");
    assert!(
        rv(&stopped.metadata) > rv(&released.metadata),
        "the \"stopped leading\" Event (resourceVersion {:?}) was stored before the release \
         (Lease at {:?})",
        stopped.metadata.resource_version,
        released.metadata.resource_version
    );
    tokio::time::timeout(Duration::from_secs(30), events)
        .await
        .expect("the events task ends with the elector")
        .expect("events task");

    // A service account without any RBAC: a clear, permanent error.
    let none = s
        .service_account_token(&ns, "nobody")
        .await
        .expect("a second token");
    let lock = LeaseLock::new(s.client_for_token(&none).expect("client"), &ns, lease);
    let c = Candidate {
        identity: Identity::new("nobody"),
        lease_duration: timing.lease_duration,
    };
    match lock.try_acquire_or_renew(&c).await {
        Err(LockError::Refused { message: m, .. }) => {
            assert!(m.contains("forbidden") && m.contains("RBAC"), "{m}");
            assert!(m.contains(&ns) && m.contains(lease), "names the Lease: {m}");
        }
        other => panic!("expected a refusal naming RBAC, got {other:?}"),
    }
    assert!(matches!(lock.watch().await, Err(LockError::Refused { .. })));

    // A bad token: refused as unauthorized.
    let bad = LeaseLock::new(
        s.client_for_token("not-a-token").expect("client"),
        &ns,
        lease,
    );
    match bad.get().await {
        Err(LockError::Refused { message: m, .. }) => assert!(m.contains("unauthorized"), "{m}"),
        other => panic!("expected unauthorized, got {other:?}"),
    }
}

/// The managers named in an object's managedFields.
fn managers(raw: &serde_json::Value) -> Vec<String> {
    raw["metadata"]["managedFields"]
        .as_array()
        .map(|fields| {
            fields
                .iter()
                .filter_map(|f| f["manager"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leases_managed_fields_name_the_field_manager() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "manager").await;
    let timing = common::timing();

    let e = elector(common::lock(s, &ns, "default-manager"), "a");
    wait_leader(&e.leadership(), patience(&timing), "a").await;
    let raw = common::get_raw(s, &ns, "default-manager").await;
    assert_eq!(
        managers(&raw),
        vec![leader_lock_kubernetes::DEFAULT_FIELD_MANAGER.to_string()],
        "{raw}"
    );
    e.abort().await;

    let lock = common::lock(s, &ns, "own-manager").with_field_manager("my-controller");
    let e = elector(lock, "b");
    wait_leader(&e.leadership(), patience(&timing), "b").await;
    // A renewal (an update) is named too, not only the create.
    tokio::time::sleep(timing.retry_period * 3).await;
    let raw = common::get_raw(s, &ns, "own-manager").await;
    assert_eq!(managers(&raw), vec!["my-controller".to_string()], "{raw}");
    assert!(e.shutdown().await.expect("release"));
}

/// "became leader" waits for the leadership's first renewal, so it does not compete with a new
/// leader's first writes: the apiserver stores it after that renewal. The replica takes the Lease
/// from a holder that stopped renewing, on its own clock, long after its watch started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn became_leader_is_posted_after_the_first_renewal() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "became").await;
    let lease = "became-lock";
    common::put_raw(
        s,
        &ns,
        lease,
        json!({ "spec": { "holderIdentity": "gone", "leaseDurationSeconds": 3 } }),
    )
    .await
    .expect("a Lease held by a replica that is gone");
    let leases: Api<Lease> = Api::namespaced(s.admin_client(), &ns);
    let held = leases.get(lease).await.expect("the Lease");
    let from = held.metadata.resource_version.expect("a resourceVersion");
    let mut versions = watch_lease(&leases, lease, &from).await;
    let (e, identity, events) = elector_with_events(s, &ns, lease, "taker");
    // The taking write, then the first renewal: the first two versions of ours after `from`.
    let mut ours = Vec::new();
    while ours.len() < 2 {
        let ev = tokio::time::timeout(Duration::from_secs(60), versions.next())
            .await
            .expect("the takeover and its first renewal within 60 s")
            .expect("the watch goes on")
            .expect("a watch event");
        if let WatchEvent::Modified(l) = ev {
            let spec = l.spec.as_ref().expect("a spec");
            if spec.holder_identity.as_deref() == Some(identity.holder().as_str()) {
                ours.push(l);
            }
        }
    }
    let renewed = &ours[1];
    let spec = renewed.spec.as_ref().expect("a spec");
    assert_ne!(
        spec.acquire_time, spec.renew_time,
        "a renewal, not the take"
    );
    let became = wait_event(s, &ns, &format!("{} became leader", identity.holder())).await;
    assert!(
        rv(&became.metadata) > rv(&renewed.metadata),
        "the \"became leader\" Event (resourceVersion {:?}) was stored before the leadership's \
         first renewal (Lease at {:?})",
        became.metadata.resource_version,
        renewed.metadata.resource_version
    );
    assert!(e.shutdown().await.expect("release"));
    tokio::time::timeout(Duration::from_secs(30), events)
        .await
        .expect("the events task ends with the elector")
        .expect("events task");
}

/// The Events of a leadership's end wait [`AFTER_RELEASE_QUIET`] after the release, so that a
/// successor's take and first writes go to the apiserver first: the test's watches, open before
/// the release, see the "stopped leading" Event no sooner than half that after the released Lease
/// (half: room for a watch that delivers the release late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_leadership_is_posted_a_quiet_moment_after_the_release() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "quiet").await;
    let lease = "quiet-lock";
    let (e, identity, events) = elector_with_events(s, &ns, lease, "leaving");
    wait_leader(&e.leadership(), patience(&common::timing()), "leaving").await;
    let leases: Api<Lease> = Api::namespaced(s.admin_client(), &ns);
    let from = leases.get(lease).await.expect("the Lease").metadata;
    let from = from.resource_version.expect("a resourceVersion");
    let mut lease_versions = watch_lease(&leases, lease, &from).await;
    let posted: Api<Event> = Api::namespaced(s.admin_client(), &ns);
    let listed = posted
        .list(&ListParams::default())
        .await
        .expect("listing events");
    let mut new_events = posted
        .watch(
            &WatchParams::default(),
            listed
                .metadata
                .resource_version
                .as_deref()
                .expect("a resourceVersion"),
        )
        .await
        .expect("watching events")
        .boxed();
    let stopped = format!("{} stopped leading", identity.holder());
    let released = async {
        loop {
            let ev = lease_versions
                .next()
                .await
                .expect("the Lease watch goes on");
            if let Ok(WatchEvent::Modified(l)) = ev {
                let spec = l.spec.as_ref().expect("a spec");
                if spec
                    .holder_identity
                    .as_deref()
                    .unwrap_or_default()
                    .is_empty()
                {
                    return Instant::now();
                }
            }
        }
    };
    let ended = async {
        loop {
            let ev = new_events.next().await.expect("the Event watch goes on");
            if let Ok(WatchEvent::Added(ev)) = ev {
                if ev.message.as_deref() == Some(stopped.as_str()) {
                    return Instant::now();
                }
            }
        }
    };
    let (release, (released_at, ended_at)) = tokio::time::timeout(
        Duration::from_secs(60),
        futures::future::join(e.shutdown(), futures::future::join(released, ended)),
    )
    .await
    .expect("the release and the Event within 60 s");
    assert!(release.expect("release"));
    let quiet = ended_at.saturating_duration_since(released_at);
    assert!(
        quiet >= AFTER_RELEASE_QUIET / 2,
        "\"{stopped}\" was stored {quiet:?} after the release, not after a quiet moment"
    );
    tokio::time::timeout(Duration::from_secs(30), events)
        .await
        .expect("the events task ends with the elector")
        .expect("events task");
}
