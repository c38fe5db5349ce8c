//! A computation told what changed (`Computation::run_changes`) against a whole one, over the
//! same steps as the remembering computation's test.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::fixtures::CONTROLLER;
use super::tests::{busy_world, differing, steps, take_in};
use super::*;

/// What a watch would report of one kind between `before` and `after`: each route added,
/// replaced by a new object, or deleted.
fn changed<R: route::Route>(before: &[Arc<R>], after: &[Arc<R>]) -> Changes<R> {
    let named = |routes: &[Arc<R>]| -> BTreeMap<(String, String), Arc<R>> {
        let name = |r: &Arc<R>| {
            let m = r.meta();
            Some((m.namespace.clone()?, m.name.clone()?))
        };
        routes
            .iter()
            .filter_map(|r| Some((name(r)?, r.clone())))
            .collect()
    };
    let (before, after) = (named(before), named(after));
    let mut out = vec![];
    for ((namespace, name), r) in &after {
        if before
            .get(&(namespace.clone(), name.clone()))
            .is_none_or(|b| !Arc::ptr_eq(b, r))
        {
            let (namespace, name) = (namespace.clone(), name.clone());
            out.push(Changed {
                namespace,
                name,
                object: Some(r.clone()),
            });
        }
    }
    for (namespace, name) in before.keys() {
        if !after.contains_key(&(namespace.clone(), name.clone())) {
            let (namespace, name) = (namespace.clone(), name.clone());
            out.push(Changed {
                namespace,
                name,
                object: None,
            });
        }
    }
    Changes::Only(out)
}

/// `w` without its routes, as the watches hand it over with [`RouteChanges`].
fn without_routes(w: &World) -> World {
    World {
        http_routes: vec![],
        grpc_routes: vec![],
        tls_routes: vec![],
        tcp_routes: vec![],
        udp_routes: vec![],
        ..w.clone()
    }
}

#[test]
fn a_computation_told_what_changed_gives_what_a_whole_one_gives_after_every_change() {
    let mut w = busy_world();
    let mut computation = Computation::new(CONTROLLER);
    let mut held = BTreeMap::new();
    let all = RouteChanges {
        http_routes: Changes::All(w.http_routes.clone()),
        grpc_routes: Changes::All(w.grpc_routes.clone()),
        tls_routes: Changes::All(w.tls_routes.clone()),
        tcp_routes: Changes::All(w.tcp_routes.clone()),
        udp_routes: Changes::All(w.udp_routes.clone()),
    };
    take_in(
        &mut held,
        computation.run_changes(&without_routes(&w), &all),
    );
    assert_eq!(differing(&held, &w), Vec::<String>::new(), "at first");
    for (what, step) in steps() {
        let before = w.clone();
        step(&mut w);
        let changes = RouteChanges {
            http_routes: changed(&before.http_routes, &w.http_routes),
            grpc_routes: changed(&before.grpc_routes, &w.grpc_routes),
            tls_routes: changed(&before.tls_routes, &w.tls_routes),
            tcp_routes: changed(&before.tcp_routes, &w.tcp_routes),
            udp_routes: changed(&before.udp_routes, &w.udp_routes),
        };
        take_in(
            &mut held,
            computation.run_changes(&without_routes(&w), &changes),
        );
        assert_eq!(differing(&held, &w), Vec::<String>::new(), "after: {what}");
    }
    assert!(held.is_empty());
}
