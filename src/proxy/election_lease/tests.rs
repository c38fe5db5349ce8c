//! The controller's election on a scripted leadership: what it reads and what its updates get,
//! through a start, a renewal, a lapse, a new span, a release and a restart. The real
//! client-go electors behind real proxies are in tests/proxy/election.rs.

use super::*;
use http_body_util::{BodyExt, Full};
use leader_lock::leadership::Scripted;

const TARGET: &str = "/apis/coordination.k8s.io/v1/namespaces/ctl/leases/ctl-lease";

fn target() -> LeaseName {
    LeaseName {
        namespace: "ctl".into(),
        name: "ctl-lease".into(),
    }
}

fn leading(term: u64) -> LeaderState {
    LeaderState::Leader {
        term: Term(term),
        valid_until: Instant::now() + Duration::from_secs(10),
    }
}

fn following(holder: &str) -> LeaderState {
    LeaderState::Follower {
        holder: Some(holder.into()),
        term: Some(Term(1)),
    }
}

fn election(initial: LeaderState) -> (Scripted, Arc<ElectionLease>) {
    let (script, leadership) = Leadership::scripted(initial);
    let e = ElectionLease::start(target(), leadership, None, Duration::from_secs(15), None);
    (script, e)
}

async fn get(e: &ElectionLease, query: &str) -> (StatusCode, Lease) {
    let req = Request::get(format!("{TARGET}{query}"))
        .body(Full::new(Bytes::new()))
        .expect("a request");
    let resp = e.answer(req).await;
    let code = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let lease = serde_json::from_slice(&body).unwrap_or_default();
    (code, lease)
}

async fn put(e: &ElectionLease, read: &Lease, holder: &str) -> (StatusCode, serde_json::Value) {
    let mut sent = read.clone();
    let spec = sent.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(holder.into());
    spec.lease_duration_seconds = Some(if holder.is_empty() { 1 } else { 4 });
    let req = Request::put(TARGET)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(&sent).expect("JSON"),
        )))
        .expect("a request");
    let resp = e.answer(req).await;
    let code = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (code, serde_json::from_slice(&body).expect("JSON"))
}

fn holder(l: &Lease) -> &str {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default()
}

fn version(l: &Lease) -> u64 {
    l.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a resourceVersion")
}

fn as_lease(v: serde_json::Value) -> Lease {
    serde_json::from_value(v).expect("a Lease")
}

#[tokio::test]
async fn a_follower_s_controller_sees_our_holder_renewed_at_every_read_and_cannot_take_it() {
    let (_script, e) = election(following("pod-b_1"));
    let (code, first) = get(&e, "").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(holder(&first), "pod-b_1");
    let (_, second) = get(&e, "").await;
    assert!(
        version(&second) > version(&first),
        "the record visibly changes"
    );
    assert_eq!(
        first.spec.as_ref().and_then(|s| s.lease_duration_seconds),
        Some(15)
    );
    // A take, as client-go sends it once the holder seems gone: a lost race.
    let (code, status) = put(&e, &second, "ctl-a_1").await;
    assert_eq!(code, StatusCode::CONFLICT, "{status}");
    assert_eq!(status["reason"], "Conflict");
}

#[tokio::test]
async fn the_leader_s_controller_takes_a_free_lease_renews_it_and_loses_it_with_our_validity() {
    let (script, e) = election(leading(7));
    let (_, free) = get(&e, "").await;
    assert_eq!(holder(&free), "", "free for this replica's controller");
    let (code, taken) = put(&e, &free, "ctl-a_1").await;
    assert_eq!(code, StatusCode::OK, "{taken}");
    let taken = as_lease(taken);
    assert_eq!(holder(&taken), "ctl-a_1");
    assert!(version(&taken) > version(&free));
    let transitions = |l: &Lease| l.spec.as_ref().and_then(|s| s.lease_transitions);
    assert_eq!(transitions(&taken), Some(1));
    // A renew is an update with the version it got back (client-go's fast path reads nothing).
    let (code, renewed) = put(&e, &taken, "ctl-a_1").await;
    assert_eq!(code, StatusCode::OK, "{renewed}");
    let renewed = as_lease(renewed);
    assert_eq!(transitions(&renewed), Some(1), "a renewal is no transition");
    // A stale version is a conflict, as on the apiserver.
    let (code, _) = put(&e, &taken, "ctl-a_1").await;
    assert_eq!(code, StatusCode::CONFLICT);
    // Our validity ends: the next renew fails at once.
    script.publish(following("pod-b_1"));
    let (code, status) = put(&e, &renewed, "ctl-a_1").await;
    assert_eq!(code, StatusCode::CONFLICT, "{status}");
    let (_, seen) = get(&e, "").await;
    assert_eq!(holder(&seen), "pod-b_1");
}

#[tokio::test]
async fn a_later_leadership_of_ours_is_a_new_one_for_the_controller_even_in_the_same_term() {
    let (script, e) = election(leading(7));
    let (_, free) = get(&e, "").await;
    let (code, taken) = put(&e, &free, "ctl-a_1").await;
    assert_eq!(code, StatusCode::OK);
    let taken = as_lease(taken);
    // Our validity lapses, then returns under the same term.
    script.publish(LeaderState::Follower {
        holder: None,
        term: None,
    });
    script.publish(leading(7));
    // The controller's renew (or a take by the same holder) is refused: it must stop leading
    // first, so that its next leadership runs its switch-on work again.
    let (code, status) = put(&e, &taken, "ctl-a_1").await;
    assert_eq!(code, StatusCode::CONFLICT, "{status}");
    let (_, free) = get(&e, "").await;
    assert_eq!(holder(&free), "");
    let (code, status) = put(&e, &free, "ctl-a_1").await;
    assert_eq!(code, StatusCode::CONFLICT, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("as a new one"),
        "{status}"
    );
    // A controller restarted under a new identity leads at once.
    let (_, free) = get(&e, "").await;
    let (code, taken) = put(&e, &free, "ctl-a_2").await;
    assert_eq!(code, StatusCode::OK, "{taken}");
    assert_eq!(
        as_lease(taken).spec.and_then(|s| s.lease_transitions),
        Some(2)
    );
}

#[tokio::test]
async fn a_release_is_answered_whether_or_not_we_still_lead() {
    let (script, e) = election(leading(3));
    let (_, free) = get(&e, "").await;
    let (_, taken) = put(&e, &free, "ctl-a_1").await;
    let taken = as_lease(taken);
    script.publish(LeaderState::Stopped);
    let (code, released) = put(&e, &taken, "").await;
    assert_eq!(code, StatusCode::OK, "{released}");
    assert_eq!(holder(&as_lease(released)), "");
}

#[tokio::test]
async fn a_follower_s_read_is_held_until_we_lead_within_its_client_s_timeout() {
    let (script, e) = election(following("pod-b_1"));
    let held = {
        let e = e.clone();
        tokio::spawn(async move { get(&e, "?timeout=5s").await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!held.is_finished(), "answered before its hold");
    script.publish(leading(9));
    let (code, lease) = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("answered once we lead")
        .expect("task");
    assert_eq!(code, StatusCode::OK);
    assert_eq!(holder(&lease), "", "free for the controller at once");
    // Without a timeout from its client, a read is never held.
    script.publish(following("pod-b_1"));
    let (_, lease) = tokio::time::timeout(Duration::from_secs(1), get(&e, ""))
        .await
        .expect("at once");
    assert_eq!(holder(&lease), "pod-b_1");
}

#[tokio::test]
async fn only_get_and_update_of_v1_are_answered_and_creates_of_it_already_exist() {
    let (_script, e) = election(leading(1));
    for (method, path) in [
        (Method::DELETE, TARGET.to_string()),
        (Method::PATCH, TARGET.to_string()),
        (Method::GET, format!("{TARGET}?watch=true")),
        (
            Method::GET,
            "/apis/coordination.k8s.io/v1beta1/namespaces/ctl/leases/ctl-lease".to_string(),
        ),
        (Method::GET, format!("{TARGET}/status")),
    ] {
        let req = Request::builder()
            .method(method.clone())
            .uri(&path)
            .body(Full::new(Bytes::new()))
            .expect("a request");
        assert_eq!(
            e.route(&method, req.uri().path()),
            Some(Route::Item),
            "{path}"
        );
        let resp = e.answer(req).await;
        assert_eq!(
            resp.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
    }
    let collection = "/apis/coordination.k8s.io/v1/namespaces/ctl/leases";
    assert_eq!(e.route(&Method::POST, collection), Some(Route::Create));
    assert_eq!(e.route(&Method::GET, collection), None, "a list goes on");
    assert_eq!(
        e.route(
            &Method::GET,
            "/apis/coordination.k8s.io/v1/namespaces/other/leases/ctl-lease"
        ),
        None
    );
    assert_eq!(
        e.route(
            &Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/ctl/leases/ctl-lease2"
        ),
        None
    );
    assert!(e.names_it(
        Some("application/json"),
        br#"{"metadata":{"name":"ctl-lease"}}"#
    ));
    assert!(!e.names_it(Some("application/json"), br#"{"metadata":{"name":"mine"}}"#));
    assert!(!e.names_it(Some("application/json"), b"not json"));
    assert_eq!(e.already_exists().status(), StatusCode::CONFLICT);
}

#[tokio::test]
async fn a_silent_controller_withdraws_the_candidacy_and_its_next_request_resumes_it() {
    let store = leader_lock::MemoryStore::new();
    let elector = leader_lock::Elector::spawn(
        Arc::new(store.lock("ours")),
        leader_lock::ElectorConfig {
            identity: leader_lock::Identity::new("pod-a"),
            timing: leader_lock::Timing::new(
                Duration::from_millis(1500),
                Duration::from_millis(1000),
                Duration::from_millis(200),
            )
            .expect("a timing"),
            release_on_shutdown: true,
        },
    )
    .expect("an elector");
    let leadership = elector.leadership();
    let candidacy = elector.candidacy();
    let e = ElectionLease::start(
        target(),
        leadership.clone(),
        Some(candidacy.clone()),
        Duration::from_millis(300),
        None,
    );
    drop(leadership.wait_leader().await.expect("leads"));
    // Silent past its patience: the lock is given up.
    let mut states = leadership.subscribe();
    tokio::time::timeout(
        Duration::from_secs(10),
        states.wait_for(|s| matches!(s, LeaderState::Follower { .. })),
    )
    .await
    .expect("stood aside")
    .expect("elector running");
    assert!(!candidacy.is_campaigning());
    // It asks again: this replica campaigns, and leads (nobody else wants the lock).
    let _ = get(&e, "").await;
    assert!(candidacy.is_campaigning());
    drop(leadership.wait_leader().await.expect("leads again"));
    e.stop();
    elector.shutdown().await.expect("released");
}

#[test]
fn go_durations_as_client_go_writes_its_timeout() {
    for (s, want) in [
        ("5s", Some(5000u64)),
        ("1.5s", Some(1500)),
        ("500ms", Some(500)),
        ("1m30s", Some(90_000)),
        ("2h", None),
        ("", None),
        ("5", None),
        ("5x", None),
        ("s", None),
        ("9999999999999999999999999999999999s", None),
    ] {
        assert_eq!(
            go_duration(s).map(|d| d.as_millis()),
            want.map(u128::from),
            "{s:?}"
        );
    }
}
