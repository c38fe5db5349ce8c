//! One copy of each distinct route status: the routes of a Gateway mostly have the same
//! `status.parents` entries (the same conditions, reasons and messages at the same generation),
//! and every replica holds a desired status per route in its cache, so sharing them takes most
//! of the cache's size away at tens of thousands of routes (docs/architecture.md, "Memory").

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use crate::desired::{Desired, RouteParentStatus};

/// The distinct route statuses the last runs computed, by a hash of their content.
#[derive(Debug, Default)]
pub(crate) struct Shared(HashMap<u64, Vec<Arc<[RouteParentStatus]>>>);

impl Shared {
    /// Makes `desired`, if a route's, hold the copy already kept of an equal status, or keeps
    /// its own as that copy.
    pub(crate) fn share(&mut self, desired: &mut Desired) {
        if let Desired::Route { parents, .. } = desired {
            self.share_parents(parents);
        }
    }

    /// Makes `parents` the copy already kept of equal entries, or keeps it as that copy.
    pub(crate) fn share_parents(&mut self, parents: &mut Arc<[RouteParentStatus]>) {
        let bucket = self.0.entry(fingerprint(parents)).or_default();
        match bucket.iter().find(|p| p[..] == parents[..]) {
            Some(kept) => *parents = kept.clone(),
            None => bucket.push(parents.clone()),
        }
    }

    /// Lets go of the copies that no status holds any more (replaced or forgotten since).
    pub(crate) fn prune(&mut self) {
        self.0.retain(|_, bucket| {
            bucket.retain(|p| Arc::strong_count(p) > 1);
            !bucket.is_empty()
        });
    }

    /// How many distinct statuses are kept.
    pub(crate) fn len(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }
}

/// A hash of what tells two statuses apart (a computed status has the same placeholder time in
/// every condition; a written one, the second it was written in).
fn fingerprint(parents: &[RouteParentStatus]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parents {
        p.controller_name.hash(&mut h);
        let r = &p.parent_ref;
        (
            &r.group,
            &r.kind,
            &r.name,
            &r.namespace,
            r.port,
            &r.section_name,
        )
            .hash(&mut h);
        for c in &p.conditions {
            (
                &c.type_,
                &c.status,
                &c.reason,
                &c.message,
                c.observed_generation,
                c.last_transition_time.0,
            )
                .hash(&mut h);
        }
    }
    h.finish()
}
