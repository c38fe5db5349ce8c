//! Lookups over the [`World`] built once per computation, so that resolving one reference costs
//! a hash lookup instead of a scan of every ReferenceGrant.

use std::collections::HashMap;

use gateway_api::referencegrants::ReferenceGrant;

use super::World;

/// ReferenceGrants, keyed for lookup.
pub(crate) struct Index<'w> {
    grants: HashMap<&'w str, Vec<&'w ReferenceGrant>>,
}

impl<'w> Index<'w> {
    /// Indexes the world's objects; objects without a namespace are left out, as nothing can
    /// refer to them.
    pub(crate) fn new(world: &'w World) -> Self {
        let mut grants: HashMap<&str, Vec<&ReferenceGrant>> = HashMap::new();
        for g in &world.reference_grants {
            if let Some(ns) = &g.metadata.namespace {
                grants.entry(ns.as_str()).or_default().push(&**g);
            }
        }
        Index { grants }
    }

    /// The ReferenceGrants in `namespace`.
    pub(crate) fn grants_in(&self, namespace: &str) -> &[&'w ReferenceGrant] {
        self.grants.get(namespace).map_or(&[], Vec::as_slice)
    }
}
