//! A route kind's journal: what the computation is told changed, from a kube-runtime store
//! fed the events a watch delivers.

use kube::runtime::reflector::store::Writer;
use serde_json::json;

use super::*;

fn route(name: &str, generation: i64) -> StoredHttpRoute {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"namespace": "ns", "name": name, "generation": generation},
        "spec": {"parentRefs": [{"name": "gw"}]}}))
    .expect("route")
}

/// A journaled slot with a running store, as `Slot::start` leaves it, and the store's writer.
fn slot() -> (
    Slot<StoredHttpRoute>,
    Writer<StoredHttpRoute>,
    Arc<WatchState>,
) {
    let slot = Slot::journaled();
    let (store, writer) = reflector::store();
    let state = Arc::new(WatchState::default());
    slot.lock().running = Some((store, state.clone()));
    (slot, writer, state)
}

/// What the reflector and `drive` do with one event, in their order.
fn deliver(
    slot: &Slot<StoredHttpRoute>,
    writer: &mut Writer<StoredHttpRoute>,
    state: &WatchState,
    event: watcher::Event<StoredHttpRoute>,
) {
    writer.apply_watcher_event(&event);
    if matches!(event, watcher::Event::InitDone) {
        state.synced.store(true, Ordering::Release);
    }
    slot.note(&event);
}

/// Each change as (name, generation now; `None` when deleted), sorted; `None` for every object.
fn told(changes: Changes<StoredHttpRoute>) -> (bool, Vec<(String, Option<i64>)>) {
    let generation = |r: &StoredHttpRoute| r.metadata.generation.unwrap_or_default();
    let name = |r: &StoredHttpRoute| r.metadata.name.clone().unwrap_or_default();
    let mut out: Vec<(String, Option<i64>)> = match &changes {
        Changes::All(all) => all.iter().map(|r| (name(r), Some(generation(r)))).collect(),
        Changes::Only(changed) => changed
            .iter()
            .map(|c| (c.name.clone(), c.object.as_deref().map(generation)))
            .collect(),
    };
    out.sort();
    (matches!(changes, Changes::All(_)), out)
}

fn some(items: &[(&str, Option<i64>)]) -> (bool, Vec<(String, Option<i64>)>) {
    (
        false,
        items.iter().map(|(n, g)| (n.to_string(), *g)).collect(),
    )
}

fn all(items: &[(&str, i64)]) -> (bool, Vec<(String, Option<i64>)>) {
    (
        true,
        items
            .iter()
            .map(|(n, g)| (n.to_string(), Some(*g)))
            .collect(),
    )
}

#[test]
fn a_route_slot_tells_every_route_after_a_list_and_each_change_once_in_between() {
    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
    let (slot, mut writer, state) = slot();
    assert_eq!(
        told(slot.changes()),
        all(&[]),
        "started: nothing listed yet"
    );
    deliver(&slot, &mut writer, &state, Init);
    deliver(&slot, &mut writer, &state, InitApply(route("a", 1)));
    assert_eq!(told(slot.changes()), some(&[]), "half listed: nothing yet");
    deliver(&slot, &mut writer, &state, InitApply(route("b", 1)));
    deliver(&slot, &mut writer, &state, InitDone);
    assert_eq!(told(slot.changes()), all(&[("a", 1), ("b", 1)]));
    assert_eq!(told(slot.changes()), some(&[]), "asked again: nothing new");

    deliver(&slot, &mut writer, &state, Apply(route("a", 2)));
    deliver(&slot, &mut writer, &state, Delete(route("b", 1)));
    deliver(&slot, &mut writer, &state, Apply(route("c", 1)));
    deliver(&slot, &mut writer, &state, Apply(route("c", 2)));
    assert_eq!(
        told(slot.changes()),
        some(&[("a", Some(2)), ("b", None), ("c", Some(2))]),
        "each changed route once, as the store holds it now"
    );

    // A relist: a deletion the watch missed shows only in the whole list.
    deliver(&slot, &mut writer, &state, Init);
    deliver(&slot, &mut writer, &state, InitApply(route("a", 2)));
    deliver(&slot, &mut writer, &state, InitDone);
    assert_eq!(told(slot.changes()), all(&[("a", 2)]));

    slot.stop();
    assert_eq!(told(slot.changes()), all(&[]), "stopped: no routes");
}
