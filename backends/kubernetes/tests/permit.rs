//! Writes under one permit (`permit_client`) on a real kube-apiserver: the term a write carries is
//! the term the gate checked, judged by what the server holds.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use leader_lock::conformance::wait_leader;
use leader_lock::leadership::{GuardedError, NotLeader, Scripted};
use leader_lock::{LeaderState, Leadership, Term, Timing};
use leader_lock_kubernetes::{gated_client, permit_client};
use serde_json::json;
use tokio::time::Instant;

/// How long any wait may take on a busy machine before the test gives up.
const PATIENCE: Duration = Duration::from_secs(90);

/// The ConfigMap the writes stamp.
const TARGET: &str = "stamped";

/// The annotation that carries the writer's term.
const TERM: &str = "example.dev/term";

fn leader(term: u64) -> LeaderState {
    LeaderState::Leader {
        term: Term(term),
        valid_until: Instant::now() + Duration::from_secs(60),
    }
}

fn follower() -> LeaderState {
    LeaderState::Follower {
        holder: None,
        term: None,
    }
}

async fn create_target(client: Client, ns: &str) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(TARGET.to_string());
    api.create(&PostParams::default(), &cm)
        .await
        .expect("creating the ConfigMap")
}

async fn get(client: Client, ns: &str) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    api.get(TARGET).await.expect("reading the ConfigMap")
}

/// A merge patch of the stamp `term` through `client`; `between` runs after the stamp was
/// decided and before the request is made (where leadership can change under a write).
async fn stamp(
    client: Client,
    ns: &str,
    term: Term,
    between: impl FnOnce(),
) -> Result<ConfigMap, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let patch = Patch::Merge(json!({ "metadata": { "annotations": { TERM: term.to_string() } } }));
    between();
    api.patch(TARGET, &PatchParams::default(), &patch).await
}

/// Loses its term and leads again under `next`, as a replica that lost the lock and won it back.
fn lose_and_win_again(script: &Scripted, next: u64) {
    script.publish(follower());
    script.publish(leader(next));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_under_a_permit_carries_the_term_the_gate_checked() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "permit-term").await;
    create_target(s.admin_client(), &ns).await;
    let (script, leadership) = Leadership::scripted(leader(5));
    let writes = gated_client(s.config().clone(), leadership.clone()).expect("the gated client");

    // 1. Leading: the write lands, stamped with its permit's term.
    let written = leadership
        .run(|permit| {
            let client = permit_client(&writes, &permit);
            stamp(client, &ns, permit.term, || {})
        })
        .await
        .expect("the leader's write");
    assert_eq!(
        written.annotations().get(TERM).map(String::as_str),
        Some("5")
    );
    let before = get(s.admin_client(), &ns).await;

    // 2. Term 5 is lost and term 6 won between the stamp and the request: the stamp is stale,
    //    and the write is refused, unsent, as a refusal of the write's own permit.
    let r = leadership
        .run(|permit| {
            let client = permit_client(&writes, &permit);
            stamp(client, &ns, permit.term, || lose_and_win_again(&script, 6))
        })
        .await;
    assert!(
        matches!(r, Err(GuardedError::NotLeader(NotLeader::Follower { .. }))),
        "{r:?}"
    );
    let after = get(s.admin_client(), &ns).await;
    assert_eq!(after.resource_version(), before.resource_version());
    assert!(leadership.check().is_ok(), "term 6 leads");

    // 3. The same write through the gated client alone: its gate takes a permit of its own,
    //    from the new term, and lets the stale stamp out. This is what the permit client is for.
    script.publish(leader(7));
    let stale = leadership.check().expect("term 7 leads").term;
    stamp(writes.clone(), &ns, stale, || {
        lose_and_win_again(&script, 8)
    })
    .await
    .expect("the gate took term 8's permit");
    let landed = get(s.admin_client(), &ns).await;
    assert_ne!(landed.resource_version(), before.resource_version());
    assert_eq!(
        landed.annotations().get(TERM).map(String::as_str),
        Some("7")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_client_reads_and_holds_its_permit_no_longer_than_its_write() {
    common::init_tracing();
    let s = common::server().await;
    let ns = common::namespace(s, "permit-release").await;
    create_target(s.admin_client(), &ns).await;
    // The default timing: a permit kept past the write would hold the shutdown back for 10 s.
    let elector = common::elector(common::lock(s, &ns, "permit"), "a", Timing::default());
    let leadership = elector.leadership();
    let term = wait_leader(&leadership, PATIENCE, "a").await;
    let writes = gated_client(s.config().clone(), leadership.clone()).expect("the gated client");
    leadership
        .run(|permit| {
            let client = permit_client(&writes, &permit);
            let ns = &ns;
            async move {
                // A read through it passes; the write carries the Lease's term.
                get(client.clone(), ns).await;
                stamp(client, ns, permit.term, || {}).await
            }
        })
        .await
        .expect("the leader's write");
    let stamped = get(s.admin_client(), &ns).await;
    assert_eq!(
        stamped.annotations().get(TERM),
        Some(&term.to_string()),
        "the Lease's term"
    );

    // The write is over, so is its permit: the release does not wait for the drain budget.
    let started = Instant::now();
    let released = elector.shutdown().await.expect("a stops");
    assert!(released, "released");
    let took = started.elapsed();
    assert!(
        took < Timing::default().renew_deadline / 2,
        "the shutdown waited {took:?}: a permit outlived its write"
    );
}
