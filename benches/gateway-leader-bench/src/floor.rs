//! The Kubernetes floor: a bare Lease takeover, timed beside Kubernetes × graceful so that its
//! figures have a reference that is the apiserver's own rather than ours.
//!
//! No elector, no process, no signal: two clients in the bench's own process (each on its own
//! connection, built as our replicas build theirs) and only the requests a takeover without a
//! handover cannot do without, each sent the moment it can be. The holder writes the Lease
//! released (client-go's release: no holder, `leaseDurationSeconds: 1`) while the route's change
//! goes out, as in our rounds; the other, whose watches on the Lease and on the route are open,
//! takes the Lease from the released version its watch delivered (one PUT, no read) and then
//! writes the route's status for the changed spec from the version its watch delivered (one PUT).
//! Three writes the apiserver commits one after the other, each behind a watch event: what any
//! Lease-based takeover with a status write costs on this apiserver. The rounds alternate the
//! two clients' roles, as a lane's replicas take turns, and each runs right before one of the
//! Kubernetes lane's graceful rounds, on its settled lane, so that the floor and ours meet the
//! machine of the same minute (its tail beside ours says whose a slow round was).
//!
//! The floor's instants count from the release's sending, not from a signal: compare them with
//! our rounds' "release sent →" figures ([`crate::report`]).

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::cluster::{Cluster, Route, ROUTE};
use crate::round::Sample;
use crate::scenario::Scenario;
use leader_lock::clock;

/// What the anchor is called in the tables and the JSON.
pub const TOOL: &str = "bare Lease takeover";

/// The floor's namespace, apart from every lane's.
const NS: &str = "bench-anchor-kubernetes";

/// The Lease the two clients pass between them.
const LEASE: &str = "floor";

/// The controller name the floor writes the route's status under.
const CONTROLLER: &str = "gateway-leader.dev/bench-anchor-kubernetes";

/// The holder's lease duration; nothing waits it out (every round is a release).
const LEASE_SECONDS: i32 = 4;

/// How long the clients are left idle between rounds, as a lane's replicas are while it
/// settles: each request then goes out on a connection that waited, as ours do.
const SETTLE: Duration = Duration::from_millis(150);

/// How long one step may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// One watch on one object, and the object as the watch last delivered it.
struct Watched<K> {
    api: Api<K>,
    name: &'static str,
    events: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    last: Option<K>,
}

impl<K> Watched<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    async fn open(api: Api<K>, name: &'static str) -> Result<Self> {
        Ok(Watched {
            events: Self::events(&api, name, "0").await?,
            api,
            name,
            last: None,
        })
    }

    async fn events(
        api: &Api<K>,
        name: &str,
        from: &str,
    ) -> Result<BoxStream<'static, kube::Result<WatchEvent<K>>>> {
        let params = WatchParams::default().fields(&format!("metadata.name={name}"));
        Ok(api
            .watch(&params, from)
            .await
            .with_context(|| format!("watching {name}"))?
            .boxed())
    }

    /// The next version the watch delivers that `ok` accepts (earlier ones pass by); a watch the
    /// server ended is opened again from the last version seen.
    async fn until(&mut self, ok: impl Fn(&K) -> bool) -> Result<K> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let next = tokio::time::timeout_at(deadline, self.events.try_next())
                .await
                .map_err(|_| anyhow!("{}: nothing awaited within {PATIENCE:?}", self.name))?
                .with_context(|| format!("the watch on {}", self.name))?;
            match next {
                Some(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                    self.last = Some(o.clone());
                    if ok(&o) {
                        return Ok(o);
                    }
                }
                Some(WatchEvent::Deleted(_)) => bail!("{} was deleted under the floor", self.name),
                Some(WatchEvent::Bookmark(_)) => {}
                Some(WatchEvent::Error(e)) => bail!("the watch on {}: {e:?}", self.name),
                None => {
                    let from = self
                        .last
                        .as_ref()
                        .and_then(|o| o.meta().resource_version.clone())
                        .unwrap_or_else(|| "0".to_string());
                    self.events = Self::events(&self.api, self.name, &from).await?;
                }
            }
        }
    }
}

/// One of the two clients: its Lease as its own last write returned it, and its watches.
struct Contender {
    name: &'static str,
    leases: Api<Lease>,
    routes: Api<HttpRoute>,
    own: Option<Lease>,
    lease: Watched<Lease>,
    route: Watched<HttpRoute>,
}

fn version<K: Resource>(o: &K) -> &str {
    o.meta().resource_version.as_deref().unwrap_or_default()
}

fn holder(l: &Lease) -> &str {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default()
}

fn generation(r: &HttpRoute) -> i64 {
    r.metadata.generation.unwrap_or_default()
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Contender {
    async fn start(client: Client, name: &'static str) -> Result<Contender> {
        let leases = Api::<Lease>::namespaced(client.clone(), NS);
        let routes = Api::<HttpRoute>::namespaced(client, NS);
        Ok(Contender {
            name,
            lease: Watched::open(leases.clone(), LEASE).await?,
            route: Watched::open(routes.clone(), ROUTE).await?,
            leases,
            routes,
            own: None,
        })
    }

    /// Waits until both watches have delivered the versions the round starts from.
    async fn settle(&mut self, lease: &str, route_generation: i64) -> Result<()> {
        self.lease.until(|l| version(l) == lease).await?;
        if self.route.last.as_ref().map(generation) != Some(route_generation) {
            self.route
                .until(|r| generation(r) == route_generation)
                .await?;
        }
        Ok(())
    }

    /// Writes `from` (as read or watched) back with us as the holder; we hold it as returned.
    async fn take(&mut self, mut from: Lease) -> Result<()> {
        let spec = from.spec.get_or_insert_with(LeaseSpec::default);
        let at = now();
        spec.holder_identity = Some(self.name.to_string());
        spec.lease_duration_seconds = Some(LEASE_SECONDS);
        spec.acquire_time = Some(at.clone());
        spec.renew_time = Some(at);
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or_default() + 1);
        let held = self
            .leases
            .replace(LEASE, &PostParams::default(), &from)
            .await
            .with_context(|| format!("{} taking the Lease", self.name))?;
        self.own = Some(held);
        Ok(())
    }

    /// client-go's release, written over our own last write without a read.
    async fn release(&mut self) -> Result<()> {
        let mut l = self
            .own
            .take()
            .ok_or_else(|| anyhow!("{} releases a Lease it does not hold", self.name))?;
        let spec = l.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = None;
        spec.renew_time = None;
        self.leases
            .replace(LEASE, &PostParams::default(), &l)
            .await
            .with_context(|| format!("{} releasing the Lease", self.name))?;
        Ok(())
    }

    /// The taker's side of a round: the released Lease from the watch, taken; then the route's
    /// changed spec from the watch, its status written. Returns (leads, wrote) in ms since `at`.
    async fn take_over(&mut self, after: i64, at: f64) -> Result<(f64, f64)> {
        let released = self.lease.until(|l| holder(l).is_empty()).await?;
        self.take(released).await?;
        let led = clock::mono_ms() - at;
        let mut route = self.route.until(|r| generation(r) > after).await?;
        route.status = Some(
            serde_json::from_value(status(&route))
                .context("the floor's status does not fit HTTPRoute")?,
        );
        self.routes
            .replace_status(ROUTE, &PostParams::default(), &route)
            .await
            .with_context(|| format!("{} writing the route's status", self.name))?;
        Ok((led, clock::mono_ms() - at))
    }
}

/// The status our replicas write for the route's spec: accepted by the Gateway, its backend
/// resolved or not.
fn status(route: &HttpRoute) -> serde_json::Value {
    let g = generation(route);
    // metav1.Time: whole seconds.
    let at = format!("{:.0}", jiff::Timestamp::now());
    let found = route
        .spec
        .rules
        .iter()
        .flatten()
        .flat_map(|r| r.backend_refs.iter().flatten())
        .all(|b| b.name == "web");
    let (resolved, reason) = if found {
        ("True", "ResolvedRefs")
    } else {
        ("False", "BackendNotFound")
    };
    json!({"parents": [{
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
        "controllerName": CONTROLLER,
        "conditions": [
            {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
             "observedGeneration": g, "lastTransitionTime": at},
            {"type": "ResolvedRefs", "status": resolved, "reason": reason, "message": "",
             "observedGeneration": g, "lastTransitionTime": at},
        ],
    }]})
}

/// The Lease as the round's holder starts: created, or taken over from an earlier run.
async fn held_by(c: &mut Contender) -> Result<()> {
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE.to_string()),
            namespace: Some(NS.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    match c.leases.create(&PostParams::default(), &lease).await {
        Ok(l) => c.take(l).await,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let l = c
                .leases
                .get(LEASE)
                .await
                .context("reading the floor's Lease")?;
            c.take(l).await
        }
        Err(e) => Err(e).context("creating the floor's Lease"),
    }
}

/// The floor on one apiserver: its route and its two clients, between rounds.
pub struct Floor {
    route: Route,
    pair: [Contender; 2],
    rounds: usize,
}

impl Floor {
    /// Creates the floor's objects on `cluster` (or takes them over from an earlier run) and
    /// opens its two clients' watches; the first client holds the Lease.
    ///
    /// # Errors
    /// The apiserver refuses or does not answer.
    pub async fn start(cluster: &Cluster) -> Result<Floor> {
        let route: Route = cluster.lane(NS, CONTROLLER).await?;
        let client = |name: &'static str| async move {
            let config = leader_lock_kubernetes::ClientOptions::default()
                .with_kubeconfig(cluster.kubeconfig())
                .with_user_agent(name)
                .load()
                .await
                .with_context(|| format!("the configuration of the floor's {name}"))?;
            leader_lock_kubernetes::client(config)
                .with_context(|| format!("a client for the floor's {name}"))
        };
        let mut pair = [
            Contender::start(client("bench-floor-a").await?, "bench-floor-a").await?,
            Contender::start(client("bench-floor-b").await?, "bench-floor-b").await?,
        ];
        held_by(&mut pair[0]).await?;
        Ok(Floor {
            route,
            pair,
            rounds: 0,
        })
    }

    /// One takeover, from the holder to the other; what went wrong is in the sample.
    pub async fn round(&mut self) -> Sample {
        let round = self.rounds;
        self.rounds += 1;
        let mut sample = Sample::begun(round, Scenario::Graceful, (0, 0));
        match self.take_turns(round).await {
            Ok((released, led, wrote)) => {
                sample.to_release_sent_ms = Some(0.0);
                sample.to_released_ms = Some(released);
                sample.to_leader_ms = Some(led);
                sample.to_write_ms = Some(wrote);
            }
            Err(e) => sample.error = Some(format!("{e:#}")),
        }
        sample
    }

    async fn take_turns(&mut self, round: usize) -> Result<(f64, f64, f64)> {
        let (a, b) = self.pair.split_at_mut(1);
        let (holder, taker) = if round.is_multiple_of(2) {
            (&mut a[0], &mut b[0])
        } else {
            (&mut b[0], &mut a[0])
        };
        let held = holder
            .own
            .clone()
            .ok_or_else(|| anyhow!("{} does not hold the Lease", holder.name))?;
        let generation = self.route.generation().await?;
        holder.settle(version(&held), generation).await?;
        taker.settle(version(&held), generation).await?;
        tokio::time::sleep(SETTLE).await;
        let at = clock::mono_ms();
        let released = async {
            holder.release().await?;
            Ok::<_, anyhow::Error>(clock::mono_ms() - at)
        };
        let (released, (), (led, wrote)) =
            tokio::try_join!(released, self.route.flip(), taker.take_over(generation, at))?;
        Ok((released, led, wrote))
    }
}

/// Runs `rounds` rounds of the floor on `cluster`, one after the other. A round that fails ends
/// the run (its error is in that round's sample); what was measured before stays.
///
/// # Errors
/// The floor cannot start ([`Floor::start`]).
pub async fn run(cluster: &Cluster, rounds: usize) -> Result<Vec<Sample>> {
    let mut floor = Floor::start(cluster).await?;
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let s = floor.round().await;
        let failed = s.error.is_some();
        samples.push(s);
        if failed {
            break;
        }
    }
    Ok(samples)
}
