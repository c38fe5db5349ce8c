//! Lookups over the [`World`] built once per computation, so that resolving one reference costs
//! a hash lookup instead of a scan of every Service or ReferenceGrant.

use std::collections::{BTreeMap, HashMap};

use gateway_api::referencegrants::ReferenceGrant;
use k8s_openapi::api::core::v1::Service;

use super::{Served, World};
use crate::configmap::CaBundle;
use crate::secret::TlsSecret;

/// The labels of a namespace that has none.
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Services, Secrets, ReferenceGrants and namespace labels, keyed for lookup.
pub(crate) struct Index<'w> {
    services: HashMap<(&'w str, &'w str), &'w Service>,
    secrets: HashMap<(&'w str, &'w str), &'w TlsSecret>,
    config_maps: HashMap<(&'w str, &'w str), &'w CaBundle>,
    grants: HashMap<&'w str, Vec<&'w ReferenceGrant>>,
    namespaces: HashMap<&'w str, &'w BTreeMap<String, String>>,
    /// Which release-dependent route kinds exist.
    served: Served,
}

impl<'w> Index<'w> {
    /// Indexes the world's objects; objects without a name (or namespace, where one is due) are
    /// left out, as nothing can refer to them.
    pub(crate) fn new(world: &'w World) -> Self {
        let mut services = HashMap::with_capacity(world.services.len());
        for s in &world.services {
            if let (Some(ns), Some(name)) = (&s.metadata.namespace, &s.metadata.name) {
                services.entry((ns.as_str(), name.as_str())).or_insert(&**s);
            }
        }
        let mut secrets = HashMap::with_capacity(world.secrets.len());
        for s in &world.secrets {
            if let (Some(ns), Some(name)) = (&s.namespace, &s.name) {
                secrets.entry((ns.as_str(), name.as_str())).or_insert(&**s);
            }
        }
        let mut config_maps = HashMap::with_capacity(world.config_maps.len());
        for c in &world.config_maps {
            if let (Some(ns), Some(name)) = (&c.namespace, &c.name) {
                config_maps
                    .entry((ns.as_str(), name.as_str()))
                    .or_insert(&**c);
            }
        }
        let mut grants: HashMap<&str, Vec<&ReferenceGrant>> = HashMap::new();
        for g in &world.reference_grants {
            if let Some(ns) = &g.metadata.namespace {
                grants.entry(ns.as_str()).or_default().push(&**g);
            }
        }
        let mut namespaces = HashMap::with_capacity(world.namespaces.len());
        for n in &world.namespaces {
            if let Some(name) = &n.metadata.name {
                namespaces
                    .entry(name.as_str())
                    .or_insert(n.metadata.labels.as_ref().unwrap_or(&NO_LABELS));
            }
        }
        Index {
            services,
            secrets,
            config_maps,
            grants,
            namespaces,
            served: world.served,
        }
    }

    /// Which release-dependent route kinds the cluster serves.
    pub(crate) fn served(&self) -> Served {
        self.served
    }

    /// The Service `namespace/name`, if it exists.
    pub(crate) fn service(&self, namespace: &str, name: &str) -> Option<&'w Service> {
        self.services.get(&(namespace, name)).copied()
    }

    /// The Secret `namespace/name`, reduced, if it exists.
    pub(crate) fn secret(&self, namespace: &str, name: &str) -> Option<&'w TlsSecret> {
        self.secrets.get(&(namespace, name)).copied()
    }

    /// The ConfigMap `namespace/name`, reduced, if it exists.
    pub(crate) fn config_map(&self, namespace: &str, name: &str) -> Option<&'w CaBundle> {
        self.config_maps.get(&(namespace, name)).copied()
    }

    /// The ReferenceGrants in `namespace`.
    pub(crate) fn grants_in(&self, namespace: &str) -> &[&'w ReferenceGrant] {
        self.grants.get(namespace).map_or(&[], Vec::as_slice)
    }

    /// The labels of namespace `name`; `None` while the namespace is unknown.
    pub(crate) fn namespace_labels(&self, name: &str) -> Option<&'w BTreeMap<String, String>> {
        self.namespaces.get(name).copied()
    }
}
