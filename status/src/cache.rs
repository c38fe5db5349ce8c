//! The latest desired status of every object, and which of them still need writing.
//!
//! Every replica keeps it current, leader or not, so that a new leader has every status at hand
//! and writes them at once. A newer computation replaces an older one; an object whose desired
//! status changed is marked dirty until the writer has written (or found) it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::desired::Desired;
use crate::key::ObjectKey;

/// Desired statuses by object, with a dirty set and a wake-up for the writer.
#[derive(Debug, Default)]
pub struct StatusCache {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    desired: BTreeMap<ObjectKey, Desired>,
    dirty: BTreeSet<ObjectKey>,
}

impl StatusCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state stays consistent across a panic elsewhere: every update is one assignment.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces every desired status by a fresh computation: changed and new objects become
    /// dirty, objects no longer computed are forgotten. Returns how many became dirty.
    pub fn replace_all(&self, next: BTreeMap<ObjectKey, Desired>) -> usize {
        let mut st = self.state();
        let mut marked = 0;
        for (key, want) in &next {
            if st.desired.get(key) != Some(want) && st.dirty.insert(key.clone()) {
                marked += 1;
            }
        }
        st.dirty.retain(|k| next.contains_key(k));
        st.desired = next;
        drop(st);
        if marked > 0 {
            self.changed.notify_one();
        }
        marked
    }

    /// Marks every cached status dirty (a new leadership re-checks them all); returns them.
    pub fn mark_all_dirty(&self) -> HashSet<ObjectKey> {
        let mut st = self.state();
        let keys: HashSet<ObjectKey> = st.desired.keys().cloned().collect();
        st.dirty.extend(keys.iter().cloned());
        drop(st);
        self.changed.notify_one();
        keys
    }

    /// Marks `key` dirty again (a write that did not happen), if it is still wanted.
    pub fn requeue(&self, key: &ObjectKey) {
        let mut st = self.state();
        if st.desired.contains_key(key) {
            st.dirty.insert(key.clone());
            drop(st);
            self.changed.notify_one();
        }
    }

    /// Takes up to `limit` dirty objects, skipping those in `busy` (being written now; they
    /// stay dirty for after). Taken ones are no longer dirty.
    pub fn take_dirty(&self, limit: usize, busy: &HashSet<ObjectKey>) -> Vec<(ObjectKey, Desired)> {
        let mut st = self.state();
        let keys: Vec<ObjectKey> = st
            .dirty
            .iter()
            .filter(|k| !busy.contains(*k))
            .take(limit)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                st.dirty.remove(&k);
                let want = st.desired.get(&k)?.clone();
                Some((k, want))
            })
            .collect()
    }

    /// The desired status of `key`, if any.
    pub fn get(&self, key: &ObjectKey) -> Option<Desired> {
        self.state().desired.get(key).cloned()
    }

    /// How many objects have a desired status.
    pub fn len(&self) -> usize {
        self.state().desired.len()
    }

    /// True when no object has a desired status.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many objects wait to be written.
    pub fn dirty_len(&self) -> usize {
        self.state().dirty.len()
    }

    /// Waits until something became dirty since the last wake-up.
    ///
    /// # Cancel safety
    /// Cancel safe: a wake-up that arrives while nobody waits is kept for the next call.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::condition;
    use crate::key::Kind;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::cluster(Kind::GatewayClass, name)
    }

    fn want(gen: i64, accepted: bool) -> Desired {
        Desired::GatewayClass {
            generation: gen,
            conditions: vec![condition("Accepted", accepted, "Accepted", "", gen)],
            supported_features: vec![],
        }
    }

    fn computed(items: &[(&str, Desired)]) -> BTreeMap<ObjectKey, Desired> {
        items.iter().map(|(n, d)| (key(n), d.clone())).collect()
    }

    #[test]
    fn only_changed_statuses_become_dirty_and_newer_replaces_older() {
        let c = StatusCache::new();
        assert_eq!(
            c.replace_all(computed(&[("a", want(1, true)), ("b", want(1, true))])),
            2
        );
        assert_eq!(c.take_dirty(10, &HashSet::new()).len(), 2);
        assert_eq!(
            c.replace_all(computed(&[("a", want(1, true)), ("b", want(2, false))])),
            1
        );
        let taken = c.take_dirty(10, &HashSet::new());
        assert_eq!(taken, vec![(key("b"), want(2, false))]);
        assert_eq!(c.get(&key("b")), Some(want(2, false)));
    }

    #[test]
    fn an_object_no_longer_computed_is_forgotten_even_when_dirty() {
        let c = StatusCache::new();
        c.replace_all(computed(&[("a", want(1, true)), ("b", want(1, true))]));
        c.replace_all(computed(&[("a", want(1, true))]));
        assert_eq!(c.dirty_len(), 1);
        assert_eq!(c.len(), 1);
        c.requeue(&key("b"));
        assert_eq!(c.dirty_len(), 1, "a forgotten object is not requeued");
    }

    #[test]
    fn busy_objects_stay_dirty_until_their_write_is_done() {
        let c = StatusCache::new();
        c.replace_all(computed(&[("a", want(1, true)), ("b", want(1, true))]));
        let busy: HashSet<_> = [key("a")].into();
        assert_eq!(c.take_dirty(10, &busy), vec![(key("b"), want(1, true))]);
        assert_eq!(c.dirty_len(), 1);
        assert_eq!(c.take_dirty(10, &HashSet::new()).len(), 1);
    }

    #[test]
    fn a_new_leadership_marks_every_cached_status() {
        let c = StatusCache::new();
        c.replace_all(computed(&[("a", want(1, true)), ("b", want(1, true))]));
        c.take_dirty(10, &HashSet::new());
        assert_eq!(c.dirty_len(), 0);
        assert_eq!(c.mark_all_dirty().len(), 2);
        assert_eq!(c.take_dirty(1, &HashSet::new()).len(), 1, "the limit holds");
    }

    #[tokio::test]
    async fn a_wake_up_sent_while_nobody_waits_is_kept() {
        let c = StatusCache::new();
        c.replace_all(computed(&[("a", want(1, true))]));
        tokio::time::timeout(std::time::Duration::from_secs(30), c.changed())
            .await
            .expect("woken");
    }
}
