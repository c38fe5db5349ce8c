//! The watched copies of the objects whose status we write: a write starts from the copy the
//! watch holds instead of reading the object again, and a copy whose status (our part of it)
//! drifted from the desired one makes its object dirty again.
//!
//! A watched copy may be behind the server. Writing from it is still safe: the write carries the
//! copy's `resourceVersion`, so a stale copy gets a conflict and the writer re-reads. A stale copy
//! that already shows the desired status sends nothing; when the newer version arrives on the
//! watch, [`Drift::check`] compares it again (design: docs/architecture.md, "One write").

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use gateway_api::backendtlspolicies::BackendTlsPolicy;
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::listenersets::ListenerSet;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use kube::Resource;

use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};
use crate::merge::{Merge, StatusObject};
use crate::stored::StoredHttpRoute;
use crate::v1_6::{TcpRoute, UdpRoute};
use crate::watch::Stores;

/// A kind whose watched copies the writer reads.
pub(crate) trait Watched:
    StatusObject + Resource<DynamicType = ()> + Clone + 'static
{
    /// The watched copy of one object of this kind; none while the kind is not watched (its
    /// CRD not installed) or the watch does not hold it.
    fn get(stores: &Stores, object: &ObjectRef<Self>) -> Option<Arc<Self>>;
}

/// Each kind's copies are in its slot of [`Stores`].
macro_rules! watched {
    ($($kind:ty => $slot:ident),+ $(,)?) => {$(
        impl Watched for $kind {
            fn get(stores: &Stores, object: &ObjectRef<Self>) -> Option<Arc<Self>> {
                stores.$slot.get(object)
            }
        }
    )+};
}

watched! {
    GatewayClass => gateway_classes,
    Gateway => gateways,
    StoredHttpRoute => http_routes,
    GrpcRoute => grpc_routes,
    TlsRoute => tls_routes,
    TcpRoute => tcp_routes,
    UdpRoute => udp_routes,
    ListenerSet => listener_sets,
    BackendTlsPolicy => backend_tls_policies,
}

/// The watched copy of `key`'s object, if the watch holds one.
pub(crate) fn copy<K: Watched>(stores: &Stores, key: &ObjectKey) -> Option<Arc<K>> {
    let mut r = ObjectRef::<K>::new(&key.name);
    if let Some(ns) = &key.namespace {
        r = r.within(ns);
    }
    K::get(stores, &r)
}

/// Whether `key`'s watched copy has a `resourceVersion` other than `seen`; if so, that version
/// and whether its status differs from `want` (a write would send something).
fn compare(
    stores: &Stores,
    key: &ObjectKey,
    want: &Desired,
    controller: &str,
    seen: Option<&str>,
) -> Option<(String, bool)> {
    fn one<K: Watched>(
        stores: &Stores,
        key: &ObjectKey,
        want: &Desired,
        controller: &str,
        seen: Option<&str>,
    ) -> Option<(String, bool)> {
        let obj = copy::<K>(stores, key)?;
        let rv = obj.meta().resource_version.as_deref()?;
        if Some(rv) == seen {
            return None;
        }
        // The stamp only matters for conditions that change, and those differ anyway.
        let now = Time(Timestamp::UNIX_EPOCH);
        let differs = matches!(obj.merge(want, controller, &now), Merge::Write(_));
        Some((rv.to_string(), differs))
    }
    match key.kind {
        Kind::GatewayClass => one::<GatewayClass>(stores, key, want, controller, seen),
        Kind::Gateway => one::<Gateway>(stores, key, want, controller, seen),
        Kind::HttpRoute => one::<StoredHttpRoute>(stores, key, want, controller, seen),
        Kind::GrpcRoute => one::<GrpcRoute>(stores, key, want, controller, seen),
        Kind::TlsRoute => one::<TlsRoute>(stores, key, want, controller, seen),
        Kind::TcpRoute => one::<TcpRoute>(stores, key, want, controller, seen),
        Kind::UdpRoute => one::<UdpRoute>(stores, key, want, controller, seen),
        Kind::ListenerSet => one::<ListenerSet>(stores, key, want, controller, seen),
        Kind::BackendTlsPolicy => one::<BackendTlsPolicy>(stores, key, want, controller, seen),
    }
}

/// Finds objects whose watched copy changed and no longer shows their desired status.
///
/// Only copies whose `resourceVersion` moved since the last check are compared, so a check costs
/// one store lookup per object it is given and one merge per copy that changed. Given only what a
/// [`crate::compute::Computation`] run computed (every route whose object changed is among it),
/// it costs what changed; objects that lost their status are let go with [`Drift::forget`].
#[derive(Debug, Default)]
pub(crate) struct Drift {
    checked: HashMap<ObjectKey, String>,
}

/// What one [`Drift::check`] found among the watched copies that changed since the last check.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Copies that no longer show their desired status: changes to write.
    pub(crate) drifted: Vec<ObjectKey>,
    /// Copies that show their desired status: nothing to write until the copy or the desired
    /// status changes, so a new leadership need not check them again.
    pub(crate) shown: Vec<ObjectKey>,
}

impl Drift {
    /// Compares the watched copies of `desired`'s objects that changed since they were last
    /// compared with their desired status.
    pub(crate) fn check(
        &mut self,
        stores: &Stores,
        desired: &BTreeMap<ObjectKey, Desired>,
        controller: &str,
    ) -> Checked {
        let mut found = Checked::default();
        for (key, want) in desired {
            let seen = self.checked.get(key).map(String::as_str);
            if let Some((rv, differs)) = compare(stores, key, want, controller, seen) {
                if differs {
                    found.drifted.push(key.clone());
                } else {
                    found.shown.push(key.clone());
                }
                self.checked.insert(key.clone(), rv);
            }
        }
        found
    }

    /// Forgets what was seen of `keys` (objects that no longer have a desired status).
    pub(crate) fn forget(&mut self, keys: &[ObjectKey]) {
        for key in keys {
            self.checked.remove(key);
        }
    }
}
