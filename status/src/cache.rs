//! The latest desired status of every object, and which of them still need writing.
//!
//! Every replica keeps it current, leader or not, so that a new leader has every status at hand
//! and writes them at once. A newer computation replaces an older one; an object whose desired
//! status changed is marked dirty until the writer has written (or found) it.
//!
//! Dirty objects come in two tiers: changes (a new desired status, a watched copy that drifted, a
//! write to try again) go before the re-check of everything a new leadership starts with, so a
//! change seen after a takeover never waits behind that sweep.

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
    /// Changes: written first.
    dirty: BTreeSet<ObjectKey>,
    /// A new leadership's re-check of every cached status; never also in `dirty`.
    recheck: BTreeSet<ObjectKey>,
    /// Objects whose watched copy was not last seen showing their desired status (or either
    /// has changed since): what a new leadership has to check, few in a steady state. A
    /// takeover then costs what is left to check, and the lock is not held through a pass over
    /// every cached status while the route changed at the takeover waits for it
    /// (docs/benchmarks.md, "The curve").
    unshown: HashSet<ObjectKey>,
}

impl State {
    /// Marks `key` as changed; true when it was not dirty yet.
    fn mark(&mut self, key: &ObjectKey) -> bool {
        self.recheck.remove(key);
        self.unshown.insert(key.clone());
        self.dirty.insert(key.clone())
    }
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
            if st.desired.get(key) != Some(want) && st.mark(key) {
                marked += 1;
            }
        }
        st.dirty.retain(|k| next.contains_key(k));
        st.recheck.retain(|k| next.contains_key(k));
        st.unshown.retain(|k| next.contains_key(k));
        let old = std::mem::replace(&mut st.desired, next);
        drop(st);
        // The previous statuses are freed after the lock is let go: the writer waits for nothing.
        drop(old);
        if marked > 0 {
            self.changed.notify_one();
        }
        marked
    }

    /// Takes in what a [`crate::compute::Computation`] run found: each status in `desired` that
    /// is new or differs from the cached one replaces it and becomes dirty, the others are left
    /// as they are, and `removed` objects are forgotten. Returns how many became dirty.
    ///
    /// Unlike [`Self::replace_all`], it costs what changed: objects not named keep their status.
    pub fn apply(&self, desired: BTreeMap<ObjectKey, Desired>, removed: &[ObjectKey]) -> usize {
        let mut st = self.state();
        let mut marked = 0;
        let mut old = Vec::new();
        for key in removed {
            let State {
                desired,
                dirty,
                recheck,
                unshown,
            } = &mut *st;
            old.extend(desired.remove(key));
            dirty.remove(key);
            recheck.remove(key);
            unshown.remove(key);
        }
        for (key, want) in desired {
            if st.desired.get(&key) == Some(&want) {
                continue;
            }
            if st.mark(&key) {
                marked += 1;
            }
            old.extend(st.desired.insert(key, want));
        }
        drop(st);
        // As in `replace_all`: what is replaced is freed after the lock is let go.
        drop(old);
        if marked > 0 {
            self.changed.notify_one();
        }
        marked
    }

    /// Marks `keys` as changed (their watched copies drifted from the desired status), those
    /// that are still wanted; returns how many became dirty.
    pub(crate) fn mark_dirty(&self, keys: &[ObjectKey]) -> usize {
        let mut st = self.state();
        let mut marked = 0;
        for key in keys {
            if st.desired.contains_key(key) && st.mark(key) {
                marked += 1;
            }
        }
        drop(st);
        if marked > 0 {
            self.changed.notify_one();
        }
        marked
    }

    /// Records that the watched copies of `keys` show their desired status, those still wanted:
    /// they need no write, so they are no longer dirty (a follower's changes would otherwise pile
    /// up until it leads, and a new leader would go through all of them before a real change).
    /// A change of either side forgets it (the desired status through [`Self::replace_all`], the
    /// copy through the next [`crate::observed::Drift::check`]).
    pub(crate) fn mark_shown(&self, keys: &[ObjectKey]) {
        let mut st = self.state();
        for key in keys {
            if st.desired.contains_key(key) {
                st.dirty.remove(key);
                st.recheck.remove(key);
                st.unshown.remove(key);
            }
        }
    }

    /// Marks for a re-check (a new leadership checks them) every cached status whose watched
    /// copy was not last seen showing it, behind the changes already dirty and any that come
    /// later; returns the keys the leadership has to settle: those, and the changes.
    pub(crate) fn mark_all_dirty(&self) -> HashSet<ObjectKey> {
        let mut st = self.state();
        let keys = st.unshown.clone();
        let State { dirty, recheck, .. } = &mut *st;
        recheck.extend(keys.iter().filter(|k| !dirty.contains(*k)).cloned());
        drop(st);
        self.changed.notify_one();
        keys
    }

    /// Marks `key` dirty again (a write that did not happen), if it is still wanted.
    pub(crate) fn requeue(&self, key: &ObjectKey) {
        let mut st = self.state();
        if st.desired.contains_key(key) {
            st.mark(key);
            drop(st);
            self.changed.notify_one();
        }
    }

    /// Takes up to `limit` dirty objects, changes before the re-check, skipping those in `busy`
    /// (being written now; they stay dirty for after). Taken ones are no longer dirty.
    pub(crate) fn take_dirty(
        &self,
        limit: usize,
        busy: &HashSet<ObjectKey>,
    ) -> Vec<(ObjectKey, Desired)> {
        let mut st = self.state();
        let keys: Vec<ObjectKey> = st
            .dirty
            .iter()
            .chain(st.recheck.iter())
            .filter(|k| !busy.contains(*k))
            .take(limit)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                if !st.dirty.remove(&k) {
                    st.recheck.remove(&k);
                }
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

    /// How many objects wait to be written or re-checked.
    pub fn dirty_len(&self) -> usize {
        let st = self.state();
        st.dirty.len() + st.recheck.len()
    }

    /// Waits until something became dirty since the last wake-up.
    ///
    /// # Cancel safety
    /// Cancel safe: a wake-up that arrives while nobody waits is kept for the next call.
    pub(crate) async fn changed(&self) {
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
    fn objects_added_and_dropped_between_others_are_told_apart_from_changes() {
        let c = StatusCache::new();
        let same = want(1, true);
        c.replace_all(computed(&[
            ("a", same.clone()),
            ("b", same.clone()),
            ("d", same.clone()),
            ("e", same.clone()),
        ]));
        c.take_dirty(10, &HashSet::new());
        // b dropped, c added between a and d, d changed, e and a unchanged.
        c.replace_all(computed(&[
            ("a", same.clone()),
            ("c", same.clone()),
            ("d", want(2, true)),
            ("e", same.clone()),
        ]));
        let taken: Vec<ObjectKey> = c
            .take_dirty(10, &HashSet::new())
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(taken, vec![key("c"), key("d")]);
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

    #[test]
    fn a_new_leadership_checks_only_what_the_watch_did_not_see_shown() {
        let c = StatusCache::new();
        let (a, b, d) = (key("a"), key("b"), key("d"));
        let all = |b_gen, d_gen| {
            computed(&[
                ("a", want(1, true)),
                ("b", want(b_gen, true)),
                ("d", want(d_gen, true)),
            ])
        };
        // A follower: everything is dirty, and nobody takes it.
        assert_eq!(c.replace_all(all(1, 1)), 3);
        c.mark_shown(&[a.clone(), b.clone(), key("gone")]);
        assert_eq!(
            c.dirty_len(),
            1,
            "what the copies show needs no write; d was never seen"
        );
        // b's desired status changes after it was seen shown: it must be written again.
        c.replace_all(all(2, 1));
        assert_eq!(
            c.mark_all_dirty(),
            [b.clone(), d.clone()].into(),
            "a is shown"
        );
        // Both taken; b written and seen on the watch, d's write not seen yet.
        assert_eq!(c.take_dirty(10, &HashSet::new()).len(), 2);
        c.mark_shown(&[b]);
        assert_eq!(c.mark_all_dirty(), [d.clone()].into());
        c.take_dirty(10, &HashSet::new());
        // d shown, then a write of a that did not happen: a is checked again, d is not.
        c.mark_shown(&[d]);
        c.requeue(&a);
        assert_eq!(c.mark_all_dirty(), [a].into());
    }

    #[test]
    fn changes_go_before_the_recheck_of_a_new_leadership() {
        let c = StatusCache::new();
        c.replace_all(computed(&[("a", want(1, true)), ("b", want(1, true))]));
        c.take_dirty(10, &HashSet::new());
        c.mark_all_dirty();
        c.replace_all(computed(&[("a", want(1, true)), ("b", want(2, true))]));
        assert_eq!(c.dirty_len(), 2, "b is dirty once, as a change");
        let first = c.take_dirty(1, &HashSet::new());
        assert_eq!(first, vec![(key("b"), want(2, true))]);
        assert_eq!(
            c.mark_dirty(&[key("a"), key("gone")]),
            1,
            "a drifted; gone is not cached"
        );
        assert_eq!(
            c.take_dirty(10, &HashSet::new()),
            vec![(key("a"), want(1, true))]
        );
        assert_eq!(
            c.dirty_len(),
            0,
            "a was taken once, not again from the re-check"
        );
    }

    #[tokio::test]
    async fn a_wake_up_sent_while_nobody_waits_is_kept() {
        let c = StatusCache::new();
        c.replace_all(computed(&[("a", want(1, true))]));
        tokio::time::timeout(std::time::Duration::from_secs(30), c.changed())
            .await
            .expect("woken");
    }

    #[test]
    fn apply_marks_what_differs_keeps_what_it_is_not_given_and_forgets_what_is_removed() {
        let c = StatusCache::new();
        assert_eq!(
            c.apply(
                computed(&[
                    ("a", want(1, true)),
                    ("b", want(1, true)),
                    ("c", want(1, true))
                ]),
                &[]
            ),
            3
        );
        let _ = c.take_dirty(10, &HashSet::new());
        c.mark_shown(&[key("a")]);
        // Only b is given again, changed; a and c keep theirs; the same status for a is no change.
        assert_eq!(
            c.apply(computed(&[("a", want(1, true)), ("b", want(2, true))]), &[]),
            1
        );
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&key("c")), Some(want(1, true)));
        let taken = c.take_dirty(10, &HashSet::new());
        assert_eq!(taken, vec![(key("b"), want(2, true))]);
        // a stayed shown: a new leadership has nothing to check for it.
        assert!(!c.mark_all_dirty().contains(&key("a")));
        c.apply(BTreeMap::new(), &[key("c")]);
        assert_eq!(c.get(&key("c")), None);
        assert_eq!(c.len(), 2);
    }
}
