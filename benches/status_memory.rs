//! Where a replica's bytes go per route, without servers: N HTTPRoutes of one Gateway, shaped as
//! the apiserver hands them to the watch once their status is written (`gateway-leader-bench run
//! --scenario scale`: one parentRef, one backendRef, the CRD's defaults, two managedFields
//! entries, our `status.parents` entry), taken into a watch store the way the status writer's
//! reflector takes them, then computed and cached as a replica does.
//!
//! It prints the heap that stays allocated per route after each step (dhat's count of live
//! bytes, which is what the allocator holds for the program, not the RSS the allocator adds its
//! own overhead to):
//!
//! - **store**: the reflector's store of the reduced routes (objects, their keys, the map);
//! - **computation**: what a [`Computation`] remembers per route (its memo and contribution);
//! - **cache**: the [`StatusCache`] of desired statuses.
//!
//! and then the whole heap after each step beside its peak during the step: a computation's
//! garbage (the statuses it makes before they are shared) shows in the peak, not in what stays.
//!
//! ```sh
//! cargo bench --bench status_memory -- 10000
//! ```

use std::sync::Arc;

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_leader_status::compute::{self, Computation, World};
use gateway_leader_status::stored::StoredHttpRoute;
use gateway_leader_status::{Desired, ObjectKey, Reducer, StatusCache};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::{reflector, watcher};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const CONTROLLER: &str = "gateway-leader.dev/bench-scale-kubernetes";
const NS: &str = "bench-scale-kubernetes";

fn from<T: DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("bench object deserializes"))
}

fn live() -> u64 {
    dhat::HeapStats::get().curr_bytes as u64
}

/// The most the heap has held so far: each step holds more than the one before it, so read after
/// a step it is that step's peak.
fn peak() -> u64 {
    dhat::HeapStats::get().max_bytes as u64
}

/// One route as the apiserver sends it, its status holding `parents`.
fn route_json(i: usize, parents: &Value) -> Value {
    let name = format!("r-{i}");
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {
            "name": name, "namespace": NS, "generation": 1,
            "uid": format!("6f1c2d3e-4b5a-4c6d-8e7f-{i:012}"),
            "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2026-12-03T19:00:00Z",
            "managedFields": [
                {"manager": "gateway-leader-bench", "operation": "Update",
                 "apiVersion": "gateway.networking.k8s.io/v1", "time": "2026-12-03T19:00:00Z",
                 "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {".": {}, "f:parentRefs": {}, "f:rules": {}}}},
                {"manager": "gateway-leader", "operation": "Update",
                 "apiVersion": "gateway.networking.k8s.io/v1", "time": "2026-12-03T19:00:01Z",
                 "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {".": {}, "f:parents": {}}}}
            ]
        },
        "spec": {
            "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway",
                            "name": "gw"}],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [{"group": "", "kind": "Service", "name": "web", "port": 80,
                                 "weight": 1}]
            }]
        },
        "status": {"parents": parents}
    })
}

/// What a replica holds besides the routes: one class, one Gateway, one Service, a namespace.
fn others() -> World {
    World {
        gateway_classes: vec![from::<GatewayClass>(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "ours", "generation": 1},
            "spec": {"controllerName": CONTROLLER}}))],
        gateways: vec![from::<Gateway>(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"namespace": NS, "name": "gw", "generation": 1},
            "spec": {"gatewayClassName": "ours",
                     "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}))],
        services: vec![from::<Service>(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": NS, "name": "web"},
            "spec": {"ports": [{"port": 80}]}}))],
        namespaces: vec![from::<Namespace>(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))],
        bundle_version: Some("v1.7.0".into()),
        ..World::default()
    }
}

/// Our `status.parents` as the leader wrote it: the computed entry with a real time.
fn written_parents() -> Value {
    let mut world = others();
    world.http_routes = vec![from::<StoredHttpRoute>(route_json(0, &json!([])))];
    let desired = compute::compute(&world, CONTROLLER);
    let key = ObjectKey::namespaced(gateway_leader_status::Kind::HttpRoute, NS, "r-0");
    let Some(Desired::Route { parents, .. }) = desired.get(&key) else {
        panic!("the bench route gets a status");
    };
    serde_json::to_value(&parents[..]).expect("parents serialize")
}

/// The scale scenario's routes get their status at about the apiserver's write rate, so their
/// conditions' `lastTransitionTime` moves on a second every this many routes.
const WRITES_PER_SECOND: usize = 300;

/// `parents` as written to route `i`: stamped with the second its write landed in.
fn stamped(parents: &Value, i: usize) -> Value {
    let second = 1_796_324_401 + i64::try_from(i / WRITES_PER_SECOND).expect("route count fits");
    let time = Timestamp::from_second(second).expect("a time").to_string();
    let mut parents = parents.clone();
    for entry in parents.as_array_mut().into_iter().flatten() {
        for c in entry["conditions"].as_array_mut().into_iter().flatten() {
            c["lastTransitionTime"] = json!(time);
        }
    }
    parents
}

fn main() {
    let routes = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(10_000)
        .max(1);
    let _profiler = dhat::Profiler::builder().testing().build();
    let parents = written_parents();
    let base = others();

    let start = live();
    let (reader, mut writer) = reflector::store::<StoredHttpRoute>();
    let mut reducer = Reducer::default();
    writer.apply_watcher_event(&watcher::Event::Init);
    for i in 0..routes {
        // Deserialized from the bytes, as the watch does, and reduced as the status writer's
        // reflector reduces it before it is stored.
        let bytes =
            serde_json::to_vec(&route_json(i, &stamped(&parents, i))).expect("route serializes");
        let mut route: StoredHttpRoute =
            serde_json::from_slice(&bytes).expect("route deserializes");
        reducer.reduce(&mut route);
        writer.apply_watcher_event(&watcher::Event::InitApply(route));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let (stored, stored_peak) = (live(), peak());

    let mut world = base.clone();
    world.http_routes = reader.state();
    let snapshot = live();

    let mut computation = Computation::new(CONTROLLER);
    let update = computation.run(&world);
    assert_eq!(update.routes_computed, routes, "every route computed");
    drop(update);
    let (computed, computed_peak) = (live(), peak());

    let cache = StatusCache::new();
    cache.replace_all(compute::compute(&world, CONTROLLER));
    assert!(cache.len() > routes, "every route has a status");
    let (cached, cached_peak) = (live(), peak());

    // One stored route's parts, by what taking each away frees.
    let mut one = (*reader.state()[0]).clone();
    let whole = live();
    let status = one.status.take();
    drop(status);
    let no_status = live();
    let spec = std::mem::take(&mut one.spec.rules);
    drop(spec);
    let no_rules = live();
    let refs = one.spec.parent_refs.take();
    drop(refs);
    let no_refs = live();
    let meta = std::mem::take(&mut one.metadata);
    drop(meta);
    let no_meta = live();
    println!(
        "one stored route: status {} B (shared), rules {} B, parentRefs {} B, metadata {} B; \
         StoredHttpRoute {} B inline",
        whole - no_status,
        no_status - no_rules,
        no_rules - no_refs,
        no_refs - no_meta,
        std::mem::size_of::<StoredHttpRoute>(),
    );
    let desired = cache.get(&ObjectKey::namespaced(
        gateway_leader_status::Kind::HttpRoute,
        NS,
        "r-0",
    ));
    let before = live();
    drop(desired);
    println!(
        "one cached status: {} B, Desired {} B inline",
        before - live(),
        std::mem::size_of::<Desired>()
    );
    let per = |bytes: u64| bytes as f64 / routes as f64;
    println!("{routes} routes, live heap per route:");
    println!("  store        {:>8.0} B", per(stored - start));
    println!("  snapshot     {:>8.0} B", per(snapshot - stored));
    println!("  computation  {:>8.0} B", per(computed - snapshot));
    println!("  cache        {:>8.0} B", per(cached - computed));
    println!("  total        {:>8.0} B", per(cached - start));
    // What a step holds at its height beside what it keeps: a replica's RSS follows the height.
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    println!("the heap after each step / at its peak during it (MiB):");
    for (step, kept, height) in [
        ("store", stored, stored_peak),
        ("computation", computed, computed_peak),
        ("cache", cached, cached_peak),
    ] {
        println!("  {step:<12} {:>8.1} / {:>8.1}", mib(kept), mib(height));
    }
    drop((cache, computation, world, reader, writer));
}
