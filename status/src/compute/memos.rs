//! What a computation remembers of each route (its memos) and what it is told changed: the part
//! of [`super::Computation`] that makes a run cost what changed (docs/architecture.md,
//! "Computing what changed").

use std::collections::{HashMap, HashSet};
use std::hash::RandomState;
use std::sync::Arc;

use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::tlsroutes::TlsRoute;

use super::shared::Shared;
use super::{contest, route, Counts, Env, Run, Update};
use crate::desired::Desired;
use crate::key::{Kind, ObjectKey};
use crate::stored::StoredHttpRoute;
use crate::v1_6::{TcpRoute, UdpRoute};

/// What a run reads of one route kind: every object, or only what changed since the last run.
pub(super) enum Routes<'a, R> {
    /// Every route of the kind; a remembered route not among them is gone.
    All(&'a [Arc<R>]),
    /// The routes that changed since the last run; every other one is as it was.
    Changed(&'a [Changed<R>]),
}

/// One route a watch saw change since the last run (see [`RouteChanges`]).
#[derive(Debug, Clone)]
pub struct Changed<R> {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The object now; `None` once it is deleted.
    pub object: Option<Arc<R>>,
}

/// What changed among one kind's routes since the last run, as its watch tells it.
#[derive(Debug, Clone)]
pub enum Changes<R> {
    /// Every route of the kind; a route not among them is gone (the first run, and after the
    /// watch listed the kind again: a relist may drop objects whose deletion no event told).
    All(Vec<Arc<R>>),
    /// Only these changed; every other route is as it was [default: none].
    Only(Vec<Changed<R>>),
}

impl<R> Default for Changes<R> {
    fn default() -> Self {
        Changes::Only(vec![])
    }
}

impl<R> Changes<R> {
    pub(super) fn routes(&self) -> Routes<'_, R> {
        match self {
            Changes::All(all) => Routes::All(all),
            Changes::Only(changed) => Routes::Changed(changed),
        }
    }
}

/// What changed among the routes since the last run of a [`Computation`](super::Computation),
/// kind by kind, for [`Computation::run_changes`](super::Computation::run_changes): a watch
/// event that changed one route of 50,000 then costs that route, not a lookup of every route
/// (docs/architecture.md, "Computing what changed").
#[derive(Debug, Clone, Default)]
pub struct RouteChanges {
    /// HTTPRoutes.
    pub http_routes: Changes<StoredHttpRoute>,
    /// GRPCRoutes.
    pub grpc_routes: Changes<GrpcRoute>,
    /// TLSRoutes.
    pub tls_routes: Changes<TlsRoute>,
    /// TCPRoutes.
    pub tcp_routes: Changes<TcpRoute>,
    /// UDPRoutes.
    pub udp_routes: Changes<UdpRoute>,
}

/// The remembered contributions of one route kind, by the route's key.
#[derive(Debug)]
pub(super) struct Memos<R> {
    /// SipHash, as std's maps: the names are the cluster's users'.
    by_key: hashbrown::HashMap<ObjectKey, Memo<R>, RandomState>,
    /// How many of them were kept from a listener (see `settle`): while none is, and none is to
    /// be, settling costs nothing.
    blocked: usize,
}

impl<R> Default for Memos<R> {
    fn default() -> Self {
        Memos {
            by_key: hashbrown::HashMap::default(),
            blocked: 0,
        }
    }
}

#[derive(Debug)]
struct Memo<R> {
    /// The object it was computed from: an unchanged route is the same `Arc` (also its address,
    /// which stays this route's while it is held here).
    route: Arc<R>,
    contribution: route::Contribution,
    /// The last run that saw the route (for runs over every route).
    seen: u64,
}

impl<R> Memo<R> {
    fn address(&self) -> usize {
        Arc::as_ptr(&self.route) as usize
    }
}

/// A route's key borrowed from the route: its memo is found without allocating an
/// [`ObjectKey`]. It hashes as the `ObjectKey` it stands for (the same fields in the same order;
/// `Arc<str>` hashes as `str`).
#[derive(Hash)]
struct RouteName<'a> {
    kind: Kind,
    namespace: Option<&'a str>,
    name: &'a str,
}

impl<'a> RouteName<'a> {
    /// `None` without a namespace or a name: such a route contributes nothing, so it is not
    /// remembered either.
    fn of<R: route::Route>(route: &'a R) -> Option<Self> {
        let meta = route.meta();
        Some(RouteName {
            kind: R::KIND,
            namespace: Some(meta.namespace.as_deref()?),
            name: meta.name.as_deref()?,
        })
    }

    fn to_key(&self) -> ObjectKey {
        ObjectKey {
            kind: self.kind,
            namespace: self.namespace.map(Arc::from),
            name: Arc::from(self.name),
        }
    }
}

impl hashbrown::Equivalent<ObjectKey> for RouteName<'_> {
    fn equivalent(&self, key: &ObjectKey) -> bool {
        self.kind == key.kind
            && self.namespace == key.namespace.as_deref()
            && self.name == &*key.name
    }
}

/// Where a run's route computations go: the routes per listener, the update, and the one copy
/// of each distinct status.
pub(super) struct Sink<'a> {
    pub(super) counts: &'a mut Counts,
    pub(super) update: &'a mut Update,
    pub(super) shared: &'a mut Shared,
}

impl Sink<'_> {
    /// Takes a route just computed: its contribution into the counts, and its status, if it
    /// has one of ours, as the copy of an equal one already kept, at once: a run that computes
    /// every route then holds one status per distinct status, not one per route until the run
    /// ends, which would raise a replica's startup peak (docs/benchmarks.md, "The startup peak").
    fn computed(&mut self, contribution: &route::Contribution, desired: Option<Desired>) {
        self.update.routes_computed += 1;
        if let (Some(key), Some(mut desired)) = (&contribution.key, desired) {
            self.shared.share(&mut desired);
            self.update.desired.insert(key.clone(), desired);
        }
        self.counts.add(contribution, 1);
    }
}

impl<R: route::Route> Memos<R> {
    /// Brings the memos up to `routes`: keeps those of unchanged routes (none when `fresh`),
    /// computes the others into `sink`'s update, keeps its counts (routes per listener, by
    /// parent id) in step, and returns the keys of forgotten routes that had a desired status.
    ///
    /// An unchanged route costs one lookup when `routes` lists them all, nothing when it lists
    /// what changed (unless `fresh`: then every route is computed again either way).
    pub(super) fn refresh(
        &mut self,
        routes: Routes<'_, R>,
        run: Run,
        env: &Env<'_, '_, '_>,
        sink: &mut Sink<'_>,
    ) -> Vec<ObjectKey> {
        let mut gone = vec![];
        match routes {
            Routes::All(routes) => {
                if run.fresh {
                    self.forget_all(&mut gone);
                }
                for r in routes {
                    let Some(name) = RouteName::of(&**r) else {
                        continue;
                    };
                    match self.by_key.get_mut(&name) {
                        // Also a route listed twice (never from a store) counts once.
                        Some(m) if Arc::ptr_eq(&m.route, r) => m.seen = run.stamp,
                        _ => gone.extend(self.put(name.to_key(), r, run, env, sink)),
                    }
                }
                if self.by_key.values().any(|m| m.seen != run.stamp) {
                    let blocked = &mut self.blocked;
                    self.by_key.retain(|_, m| {
                        if m.seen == run.stamp {
                            return true;
                        }
                        gone.extend(forgotten(m, blocked, sink.counts));
                        false
                    });
                }
            }
            Routes::Changed(changed) if run.fresh => {
                // Every route is computed again: the remembered ones, as changed.
                let mut all: HashMap<ObjectKey, Arc<R>> = self
                    .by_key
                    .iter()
                    .map(|(k, m)| (k.clone(), m.route.clone()))
                    .collect();
                for c in changed {
                    let key = ObjectKey::namespaced(R::KIND, c.namespace.as_str(), c.name.as_str());
                    match &c.object {
                        Some(r) => all.insert(key, r.clone()),
                        None => all.remove(&key),
                    };
                }
                self.forget_all(&mut gone);
                for (key, r) in &all {
                    gone.extend(self.put(key.clone(), r, run, env, sink));
                }
            }
            Routes::Changed(changed) => {
                for c in changed {
                    let key = ObjectKey::namespaced(R::KIND, c.namespace.as_str(), c.name.as_str());
                    match &c.object {
                        Some(r) => gone.extend(self.put(key, r, run, env, sink)),
                        None => {
                            if let Some(m) = self.by_key.remove(&key) {
                                gone.extend(forgotten(&m, &mut self.blocked, sink.counts));
                            }
                        }
                    }
                }
            }
        }
        gone
    }

    /// Forgets every memo (`counts` start again from zero on such a run).
    fn forget_all(&mut self, gone: &mut Vec<ObjectKey>) {
        gone.extend(
            self.by_key
                .drain()
                .filter_map(|(_, m)| m.contribution.ours_key()),
        );
        self.blocked = 0;
    }

    /// Remembers route `r` under `key`, computing it into `sink` unless the memo there is of
    /// the same object; the contribution it replaces is taken out of the counts, and its key
    /// returned if it had a desired status.
    fn put(
        &mut self,
        key: ObjectKey,
        r: &Arc<R>,
        run: Run,
        env: &Env<'_, '_, '_>,
        sink: &mut Sink<'_>,
    ) -> Option<ObjectKey> {
        if let Some(m) = self.by_key.get_mut(&key) {
            if Arc::ptr_eq(&m.route, r) {
                // Also a route listed twice (never from a store) counts once.
                m.seen = run.stamp;
                return None;
            }
        }
        let (contribution, desired) =
            route::contribute(&**r, env.name, env.parents, env.index, env.reach, &[]);
        sink.computed(&contribution, desired);
        let memo = Memo {
            route: r.clone(),
            contribution,
            seen: run.stamp,
        };
        // The old key is in `update` again if the route is still ours; if not, it is gone.
        let old = self.by_key.insert(key, memo)?;
        forgotten(&old, &mut self.blocked, sink.counts)
    }

    pub(super) fn contributions(&self) -> impl Iterator<Item = &route::Contribution> {
        self.by_key.values().map(|m| &m.contribution)
    }

    /// The routes that would attach to a `contested` listener, with those listeners.
    pub(super) fn entrants<'a>(
        &'a self,
        contested: &HashSet<contest::ListenerId>,
        out: &mut Vec<(contest::Entrant<'a>, Vec<contest::ListenerId>)>,
    ) {
        for m in self.by_key.values() {
            let at: Vec<contest::ListenerId> = m
                .contribution
                .candidates()
                .filter(|l| contested.contains(l))
                .copied()
                .collect();
            if at.is_empty() {
                continue;
            }
            if let Some(e) = contest::Entrant::of(&*m.route, m.address()) {
                out.push((e, at));
            }
        }
    }

    /// Computes again the routes whose blocked listeners are not what `blocked` now says, into
    /// `sink`, keeping its counts in step. Costs nothing while no route is or was blocked.
    pub(super) fn settle(
        &mut self,
        blocked: &contest::Blocked,
        env: &Env<'_, '_, '_>,
        sink: &mut Sink<'_>,
    ) {
        let any_now = blocked.keys().any(|(k, _)| *k == R::KIND);
        if !any_now && self.blocked == 0 {
            return;
        }
        let mut still = 0;
        for m in self.by_key.values_mut() {
            let want: &[contest::ListenerId] = blocked
                .get(&(R::KIND, m.address()))
                .map_or(&[], Vec::as_slice);
            if m.contribution.blocked() != want {
                let (contribution, desired) =
                    route::contribute(&*m.route, env.name, env.parents, env.index, env.reach, want);
                sink.counts.add(&m.contribution, -1);
                sink.computed(&contribution, desired);
                m.contribution = contribution;
            }
            still += usize::from(!m.contribution.blocked().is_empty());
        }
        self.blocked = still;
    }
}

/// Takes a forgotten (or replaced) memo's contribution out of `counts` and of the `blocked`
/// count; returns its key if it had a desired status.
fn forgotten<R>(m: &Memo<R>, blocked: &mut usize, counts: &mut Counts) -> Option<ObjectKey> {
    counts.add(&m.contribution, -1);
    if !m.contribution.blocked().is_empty() {
        *blocked = blocked.saturating_sub(1);
    }
    m.contribution.ours_key()
}
