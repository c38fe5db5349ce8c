//! The merge rules, one test per rule.

use gateway_api::gatewayclasses::GatewayClassStatusSupportedFeatures;
use gateway_api::httproutes::HttpRouteStatusParents;
use gateway_api::httproutes::HttpRouteStatusParentsParentRef;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

use super::*;
use crate::desired::condition;

pub(super) const US: &str = "example.net/us";
pub(super) const THEM: &str = "example.net/them";

pub(super) fn t(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).expect("in range"))
}

fn stamped(mut c: Condition, at: i64) -> Condition {
    c.last_transition_time = t(at);
    c
}

fn class(conditions: Option<Vec<Condition>>) -> GatewayClass {
    let mut gc = GatewayClass::new("gc", Default::default());
    gc.metadata.generation = Some(2);
    gc.status = Some(GatewayClassStatus {
        conditions,
        supported_features: None,
    });
    gc
}

fn feature(name: &str) -> GatewayClassStatusSupportedFeatures {
    GatewayClassStatusSupportedFeatures { name: name.into() }
}

pub(super) fn written<K>(m: Merge<K>) -> K {
    match m {
        Merge::Write(k) => *k,
        _ => panic!("a write was expected"),
    }
}

#[test]
fn a_condition_whose_status_did_not_change_keeps_its_transition_time() {
    let have = vec![stamped(
        condition("Accepted", true, "Accepted", "old", 1),
        100,
    )];
    let want = vec![condition("Accepted", true, "Accepted", "new message", 2)];
    let out = merge_conditions(&have, &want, &t(500));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].last_transition_time, t(100));
    assert_eq!(out[0].message, "new message");
    assert_eq!(out[0].observed_generation, Some(2));
}

#[test]
fn a_condition_whose_status_changed_gets_the_write_time() {
    let have = vec![stamped(condition("Accepted", true, "Accepted", "", 1), 100)];
    let want = vec![condition("Accepted", false, "Invalid", "", 2)];
    let out = merge_conditions(&have, &want, &t(500));
    assert_eq!(out[0].last_transition_time, t(500));
    assert_eq!(out[0].status, "False");
}

#[test]
fn conditions_of_other_types_stay_where_they_are() {
    let have = vec![
        stamped(condition("Ready", true, "Ready", "someone else's", 1), 50),
        stamped(condition("Accepted", true, "Accepted", "", 1), 100),
    ];
    let want = vec![
        condition("Accepted", true, "Accepted", "", 1),
        condition("SupportedVersion", true, "SupportedVersion", "", 1),
    ];
    let out = merge_conditions(&have, &want, &t(500));
    let types: Vec<_> = out.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Ready", "Accepted", "SupportedVersion"]);
    assert_eq!(out[0], have[0]);
    assert_eq!(out[2].last_transition_time, t(500));
}

#[test]
fn no_write_when_the_status_is_already_right() {
    let want = Desired::GatewayClass {
        generation: 2,
        conditions: vec![condition("Accepted", true, "Accepted", "ok", 2)],
        supported_features: vec![feature("Gateway"), feature("HTTPRoute")],
    };
    let gc = class(None);
    let once = written(gc.merge(&want, US, &t(10)));
    assert_eq!(
        once.status
            .as_ref()
            .and_then(|s| s.supported_features.clone()),
        Some(vec![feature("Gateway"), feature("HTTPRoute")])
    );
    assert_eq!(once.merge(&want, US, &t(99)), Merge::Unchanged);
}

#[test]
fn a_stale_computation_never_moves_observed_generation_back() {
    let at_generation = |generation, conditions| {
        let mut gc = class(Some(conditions));
        gc.metadata.generation = Some(generation);
        gc
    };
    let gc = at_generation(
        5,
        vec![stamped(condition("Accepted", true, "Accepted", "", 5), 1)],
    );
    let want = Desired::GatewayClass {
        generation: 4,
        conditions: vec![condition("Accepted", false, "Invalid", "", 4)],
        supported_features: vec![],
    };
    assert_eq!(gc.merge(&want, US, &t(10)), Merge::Stale { observed: 5 });
    // gateway-api#4008: whoever observed the newer generation, our cache is behind it.
    let gc = at_generation(5, vec![stamped(condition("Other", true, "X", "", 5), 1)]);
    assert_eq!(gc.merge(&want, US, &t(10)), Merge::Stale { observed: 5 });
    // A generation the object never had is nobody's newer spec: no reason to stop.
    let gc = at_generation(4, vec![stamped(condition("Other", true, "X", "", 9), 1)]);
    assert!(matches!(gc.merge(&want, US, &t(10)), Merge::Write(_)));
}

#[test]
fn the_desired_status_of_another_kind_is_never_written() {
    let want = Desired::Route {
        generation: 1,
        parents: vec![].into(),
    };
    assert_eq!(class(None).merge(&want, US, &t(1)), Merge::WrongKind);
}

pub(super) fn parent(
    controller: &str,
    gateway: &str,
    accepted: bool,
    gen: i64,
) -> HttpRouteStatusParents {
    HttpRouteStatusParents {
        conditions: vec![condition(
            "Accepted",
            accepted,
            if accepted {
                "Accepted"
            } else {
                "NotAllowedByListeners"
            },
            "",
            gen,
        )],
        controller_name: controller.to_string(),
        parent_ref: HttpRouteStatusParentsParentRef {
            name: gateway.to_string(),
            ..Default::default()
        },
    }
}

fn route(parents: Vec<HttpRouteStatusParents>) -> StoredHttpRoute {
    StoredHttpRoute {
        metadata: ObjectMeta {
            name: Some("r".into()),
            namespace: Some("ns".into()),
            generation: Some(3),
            ..Default::default()
        },
        spec: Default::default(),
        status: Some(SharedStatus {
            parents: parents.into(),
        }),
        retry_backoff: None,
    }
}

#[test]
fn only_our_route_parents_are_touched_and_our_stale_ones_removed() {
    let theirs_a = parent(THEM, "a", true, 1);
    let theirs_b = parent(THEM, "b", false, 7);
    let r = route(vec![
        theirs_a.clone(),
        parent(US, "gone", true, 2),
        parent(US, "kept", true, 2),
        theirs_b.clone(),
    ]);
    let want = Desired::Route {
        generation: 3,
        parents: vec![parent(US, "new", true, 3), parent(US, "kept", false, 3)].into(),
    };
    let out = written(r.merge(&want, US, &t(500)));
    let parents = out.status.expect("status").parents;
    let names: Vec<_> = parents
        .iter()
        .map(|p| (p.controller_name.as_str(), p.parent_ref.name.as_str()))
        .collect();
    assert_eq!(
        names,
        [(THEM, "a"), (US, "kept"), (THEM, "b"), (US, "new")],
        "ours updated in place, the stale one gone, the new one appended, theirs untouched"
    );
    assert_eq!(parents[0], theirs_a);
    assert_eq!(parents[2], theirs_b);
    assert_eq!(parents[1].conditions[0].status, "False");
    assert_eq!(parents[1].conditions[0].last_transition_time, t(500));
}

#[test]
fn a_route_that_left_us_loses_only_our_entries() {
    let r = route(vec![parent(US, "g", true, 2), parent(THEM, "x", true, 2)]);
    let want = Desired::Route {
        generation: 3,
        parents: vec![].into(),
    };
    let out = written(r.merge(&want, US, &t(1)));
    assert_eq!(
        out.status.expect("status").parents[..],
        [parent(THEM, "x", true, 2)]
    );
}

#[test]
fn another_controllers_newer_generation_does_not_make_ours_stale() {
    let r = route(vec![parent(THEM, "x", true, 99)]);
    let want = Desired::Route {
        generation: 3,
        parents: vec![parent(US, "g", true, 3)].into(),
    };
    assert!(matches!(r.merge(&want, US, &t(1)), Merge::Write(_)));
}

#[test]
fn route_parents_never_exceed_the_crd_limit() {
    let theirs: Vec<_> = (0..30)
        .map(|i| parent(THEM, &format!("t{i}"), true, 1))
        .collect();
    let r = route(theirs);
    let want = Desired::Route {
        generation: 3,
        parents: (0..5)
            .map(|i| parent(US, &format!("u{i}"), true, 3))
            .collect(),
    };
    let out = written(r.merge(&want, US, &t(1)));
    assert_eq!(out.status.expect("status").parents.len(), MAX_PARENTS);
}

#[test]
fn gateway_listeners_keep_their_transition_times_by_name() {
    let listener = |name: &str, at: Option<i64>, routes: i32| GatewayStatusListeners {
        attached_routes: routes,
        conditions: vec![{
            let c = condition("Accepted", true, "Accepted", "", 1);
            match at {
                Some(at) => stamped(c, at),
                None => c,
            }
        }],
        name: name.to_string(),
        supported_kinds: None,
    };
    let mut gw = Gateway::new("gw", Default::default());
    gw.metadata.generation = Some(1);
    gw.status = Some(GatewayStatus {
        listeners: Some(vec![listener("http", Some(100), 0)]),
        ..Default::default()
    });
    let want = Desired::Gateway {
        generation: 1,
        conditions: vec![condition("Accepted", true, "Accepted", "", 1)],
        listeners: vec![listener("http", None, 4), listener("https", None, 0)],
        attached_listener_sets: None,
        addresses: None,
    };
    let out = written(gw.merge(&want, US, &t(500)));
    let ls = out
        .status
        .clone()
        .expect("status")
        .listeners
        .expect("listeners");
    assert_eq!(ls[0].attached_routes, 4);
    assert_eq!(ls[0].conditions[0].last_transition_time, t(100));
    assert_eq!(ls[1].conditions[0].last_transition_time, t(500));
    assert_eq!(out.merge(&want, US, &t(900)), Merge::Unchanged);
}

#[test]
fn a_tls_route_merges_like_an_http_route_and_keeps_their_entries() {
    let theirs = parent(THEM, "x", true, 1);
    let mut r = TlsRoute::new("t", Default::default());
    r.metadata.generation = Some(3);
    r.set_parents(vec![theirs.clone()]);
    let want = Desired::Route {
        generation: 3,
        parents: vec![parent(US, "g", true, 3)].into(),
    };
    let out = written(r.merge(&want, US, &t(1)));
    assert_eq!(
        out.parents(),
        vec![theirs, merge_parent(None, &want_parent(&want), US, &t(1))]
    );
    assert_eq!(out.merge(&want, US, &t(9)), Merge::Unchanged);
}

fn want_parent(d: &Desired) -> RouteParentStatus {
    match d {
        Desired::Route { parents, .. } => parents[0].clone(),
        _ => panic!("a route"),
    }
}

#[test]
fn a_gateways_addresses_are_replaced_when_ours_and_kept_when_not() {
    use gateway_api::gateways::GatewayStatusAddresses;
    let address = |v: &str| GatewayStatusAddresses {
        r#type: Some("IPAddress".into()),
        value: v.into(),
    };
    let mut gw = Gateway::new("gw", Default::default());
    gw.metadata.generation = Some(1);
    gw.status = Some(GatewayStatus {
        addresses: Some(vec![address("192.0.2.1")]),
        ..Default::default()
    });
    let want = |addresses| Desired::Gateway {
        generation: 1,
        conditions: vec![condition("Accepted", true, "Accepted", "", 1)],
        listeners: vec![],
        attached_listener_sets: None,
        addresses,
    };
    let addresses = |g: &Gateway| g.status.clone().and_then(|s| s.addresses);

    // Not ours (no Service gives addresses): kept as they are.
    let kept = written(gw.merge(&want(None), US, &t(1)));
    assert_eq!(addresses(&kept), Some(vec![address("192.0.2.1")]));
    // Ours: replaced, and an unchanged list is no write.
    let replaced = written(gw.merge(&want(Some(vec![address("10.96.0.10")])), US, &t(1)));
    assert_eq!(addresses(&replaced), Some(vec![address("10.96.0.10")]));
    assert_eq!(
        replaced.merge(&want(Some(vec![address("10.96.0.10")])), US, &t(2)),
        Merge::Unchanged
    );
    // Ours and none: the field goes.
    let emptied = written(replaced.merge(&want(Some(vec![])), US, &t(3)));
    assert_eq!(addresses(&emptied), None);
}
