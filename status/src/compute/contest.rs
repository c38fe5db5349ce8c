//! HTTPRoutes and GRPCRoutes contesting a listener's hostnames: upstream
//! `apis/v1/grpcroute_types.go` (`GRPCRouteSpec.Hostnames`): "If a Route (A) of type HTTPRoute or
//! GRPCRoute is attached to a Listener and that listener already has another Route (B) of the
//! other type attached and the intersection of the hostnames of A and B is non-empty, then the
//! implementation MUST accept exactly one of these two routes, determined by the following
//! criteria, in order: the oldest Route based on creation timestamp; the Route appearing first in
//! alphabetical order by {namespace}/{name}." (v1.7.0 makes the rejection optional: "MAY reject
//! one of the two routes. An implementation that does so MUST accept exactly one of them"; it is
//! kept, so that statuses do not change with the bundle.)
//!
//! Per listener, the routes that would attach are taken in that order; one whose hostnames
//! meet those of an already admitted route of the other kind is kept from that listener (the
//! route engine then reports it, `route.rs`, rule 5), and a route kept out admits nobody else's
//! exclusion. Only listeners where some GRPCRoute would attach are looked at, so a cluster
//! without GRPCRoutes pays nothing here.

use std::collections::{HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::hostname;
use super::route::{Contribution, ParentId, Route};
use crate::key::Kind;

/// A listener, as (parent, listener index).
pub(crate) type ListenerId = (ParentId, usize);

/// The listeners each route may not attach to, by (kind, the route's memo address), sorted.
pub(crate) type Blocked = HashMap<(Kind, usize), Vec<ListenerId>>;

/// One route that would attach to a contested listener.
pub(crate) struct Entrant<'a> {
    pub kind: Kind,
    pub address: usize,
    pub created: Option<&'a Time>,
    pub namespace: &'a str,
    pub name: &'a str,
    pub hostnames: &'a [String],
}

impl<'a> Entrant<'a> {
    /// The entrant for `route` (`None` without a name or namespace, or for a route refused
    /// wherever it attaches, `Route::unsupported_value`: it must not keep another from a
    /// listener where it is not accepted itself).
    pub(crate) fn of<R: Route>(route: &'a R, address: usize) -> Option<Self> {
        if route.unsupported_value().is_some() {
            return None;
        }
        let meta = route.meta();
        let hostnames = route.hostnames();
        Some(Entrant {
            kind: R::KIND,
            address,
            created: meta.creation_timestamp.as_ref(),
            namespace: meta.namespace.as_deref()?,
            name: meta.name.as_deref()?,
            hostnames,
        })
    }

    /// Older first, then by `{namespace}/{name}`; a route without a creation time (never on a
    /// real apiserver) last.
    fn precedence(&self) -> (bool, Option<&'a Time>, &'a str, &'a str, Kind) {
        (
            self.created.is_none(),
            self.created,
            self.namespace,
            self.name,
            self.kind,
        )
    }
}

/// Whether two routes' hostnames (empty: every hostname the listener admits) share a host.
fn meet(a: &[String], b: &[String]) -> bool {
    a.is_empty()
        || b.is_empty()
        || a.iter()
            .any(|x| b.iter().any(|y| hostname::intersects(x, y)))
}

/// The listeners where some GRPCRoute would attach: the only ones that can be contested.
pub(crate) fn contested<'a>(
    grpc: impl IntoIterator<Item = &'a Contribution>,
) -> HashSet<ListenerId> {
    grpc.into_iter()
        .flat_map(|c| c.candidates().copied())
        .collect()
}

/// Decides every contested listener among `entrants` (each with the contested listeners it
/// would attach to), returning where each loser may not attach.
pub(crate) fn blocked(entrants: &[(Entrant<'_>, Vec<ListenerId>)]) -> Blocked {
    let mut by_listener: HashMap<ListenerId, Vec<usize>> = HashMap::new();
    for (i, (_, listeners)) in entrants.iter().enumerate() {
        for l in listeners {
            by_listener.entry(*l).or_default().push(i);
        }
    }
    let mut out = Blocked::new();
    for (listener, mut list) in by_listener {
        list.sort_by(|a, b| {
            entrants[*a]
                .0
                .precedence()
                .cmp(&entrants[*b].0.precedence())
        });
        let mut admitted: Vec<&Entrant<'_>> = vec![];
        for i in list {
            let e = &entrants[i].0;
            let loses = admitted
                .iter()
                .any(|a| a.kind != e.kind && meet(a.hostnames, e.hostnames));
            if loses {
                out.entry((e.kind, e.address)).or_default().push(listener);
            } else {
                admitted.push(e);
            }
        }
    }
    for listeners in out.values_mut() {
        listeners.sort_unstable();
    }
    out
}
