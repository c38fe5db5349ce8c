//! One computation cycle at scale, without servers, over N HTTPRoutes of one Gateway: a whole
//! computation (`compute`, then the cache's comparison with the previous result), and what every
//! replica does on each watch event that changed one route (`Computation::run`, then
//! `StatusCache::apply`; and `Computation::run_changes`, told which route changed, as a
//! replica's watches tell it). It tells whether a change at 10,000 routes can be computed well
//! inside the 100 ms a takeover allows, and where the time goes.
//!
//! ```sh
//! cargo bench --bench status_compute -- 10000
//! ```

use std::sync::Arc;

use std::time::{Duration, Instant};

use gateway_leader_status::compute::{self, Changed, Changes, Computation, RouteChanges, World};
use gateway_leader_status::StatusCache;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

// The binary's allocator (src/main.rs), so that the times are a replica's: with glibc's, a
// run told of one route after the whole computations above took 0.8 ms instead of microseconds
// (the heap those left behind is consolidated on the way).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const CONTROLLER: &str = "example.com/gateway-leader";

fn from<T: DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("bench object deserializes"))
}

/// The bench's scale scenario in memory: one class, one Gateway, one Service, N routes.
fn world(routes: usize) -> World {
    let ns = "scale";
    World {
        gateway_classes: vec![from(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "ours", "generation": 1},
            "spec": {"controllerName": CONTROLLER}}))],
        gateways: vec![from(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": {"namespace": ns, "name": "gw", "generation": 1},
            "spec": {"gatewayClassName": "ours",
                     "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}))],
        services: vec![from(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"namespace": ns, "name": "web"},
            "spec": {"ports": [{"port": 80}]}}))],
        namespaces: vec![from(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))],
        http_routes: (0..routes)
            .map(|i| {
                from(json!({
                    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                    "metadata": {"namespace": ns, "name": format!("r-{i}"), "generation": 1},
                    "spec": {"parentRefs": [{"name": "gw"}],
                             "rules": [{"backendRefs": [{"name": "web", "port": 80}]}]}}))
            })
            .collect(),
        bundle_version: Some("v1.5.1".into()),
        ..World::default()
    }
}

fn main() {
    let routes = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(10_000);
    let mut world = world(routes);
    let cache = StatusCache::new();
    cache.replace_all(compute::compute(&world, CONTROLLER));
    let rounds = 20;
    let (mut computing, mut comparing) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let desired = compute::compute(&world, CONTROLLER);
        let computed = t.elapsed();
        let t = Instant::now();
        cache.replace_all(desired);
        comparing.push(t.elapsed());
        computing.push(computed);
    }
    // One route changed per round, as a watch event brings it: a new object (a new `Arc`)
    // with a new generation.
    let mut computation = Computation::new(CONTROLLER);
    let first = computation.run(&world);
    cache.apply(first.desired, &first.removed);
    let (mut running, mut applying) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if let Some(slot) = world.http_routes.get_mut(round % routes.max(1)) {
            let mut changed = (**slot).clone();
            changed.metadata.generation = Some(2 + round as i64);
            *slot = Arc::new(changed);
        }
        let t = Instant::now();
        let update = computation.run(&world);
        let ran = t.elapsed();
        let t = Instant::now();
        cache.apply(update.desired, &update.removed);
        applying.push(t.elapsed());
        running.push(ran);
    }
    // The same, told by the watch which route changed (`Computation::run_changes`), as a
    // replica's computation is.
    let mut computation = Computation::new(CONTROLLER);
    let mut listed = world.http_routes.clone();
    let first = RouteChanges {
        http_routes: Changes::All(listed.clone()),
        ..RouteChanges::default()
    };
    let bare = World {
        http_routes: vec![],
        ..world.clone()
    };
    computation.run_changes(&bare, &first);
    let mut told = Vec::new();
    for round in 0..rounds {
        let Some(slot) = listed.get_mut(round % routes.max(1)) else {
            break;
        };
        let mut changed = (**slot).clone();
        changed.metadata.generation = Some(100 + round as i64);
        *slot = Arc::new(changed);
        let changes = RouteChanges {
            http_routes: Changes::Only(vec![Changed {
                namespace: slot.metadata.namespace.clone().unwrap_or_default(),
                name: slot.metadata.name.clone().unwrap_or_default(),
                object: Some(slot.clone()),
            }]),
            ..RouteChanges::default()
        };
        let t = Instant::now();
        computation.run_changes(&bare, &changes);
        told.push(t.elapsed());
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "{routes} routes, {rounds} rounds (medians): whole computation {:?}, \
         compared with the cache {:?}; one route changed: computed {:?}, \
         applied to the cache {:?}; one route changed, told which: computed {:?}",
        median(&mut computing),
        median(&mut comparing),
        median(&mut running),
        median(&mut applying),
        median(&mut told),
    );
}
