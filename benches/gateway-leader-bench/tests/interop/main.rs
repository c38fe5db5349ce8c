//! Interop: two `gateway-leader run` replicas (the Kubernetes lock) and the Go peers of
//! `testkit/peers/` (client-go's `leaderelection` elector and a controller-runtime manager, each
//! with `ReleaseOnCancel`) share ONE Lease on the test apiserver, with the same timing
//! (4 s / 3 s / 1 s, the bench's). Each round stops the leader one way, dealt from a shuffled
//! deck so that every way comes up in every ten rounds: graceful handovers between the sides
//! both ways and within each (SIGTERM, the other side's followers stopped first so that the
//! Lease can only go where the card says), crashes both ways (SIGKILL), the leader frozen past
//! the lease (SIGSTOP, then SIGCONT: for ours the fencing case; a peer has no fence) and the
//! Lease deleted by hand. Our replicas write the route's status whenever it changes (the test
//! changes it at every fault); the leading peer writes a ConfigMap every 200 ms.
//!
//! Checked afterwards:
//! - (a) from the logs, the split-brain checker (`checker::check_mixed`): never two valid
//!   leaders, terms that grow, no late write. Ours must never break a rule; what the peers do
//!   that ours may not (client-go takes a deleted Lease at once) is printed as findings.
//! - (b) from what the server held (`held`): every write landed while the Lease named its
//!   writer, on the apiserver's revisions (watches on the Lease and on every written object).
//!   Ours: none may break it. The peers have no fence: a frozen peer leader writes after it
//!   thaws, until its renew deadline tells it that it lost; those writes are counted and
//!   printed, as a finding.
//!
//! 50 rounds in under three minutes on two cores. The seed is random and printed; set
//! `GATEWAY_LEADER_INTEROP_SEED` to replay its deck (which process wins the first election,
//! and so which cards come first, can differ) and `GATEWAY_LEADER_INTEROP_ROUNDS` to run fewer
//! or more rounds. The peers come from `scripts/build-peers.sh` (`testkit::built::peers`).
//! `rounds` holds the cards and how each is played, `report` the summary printed at the end;
//! every version the watches saw is kept in `logs/held.json` beside the processes' logs.

mod report;
mod rounds;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Resource};
use rand::SeedableRng;

use gateway_leader_bench::checker::{self, Mixed};
use gateway_leader_bench::cluster::{Cluster, ROUTE};
use gateway_leader_bench::held::{self, Recorder, Writer};
use gateway_leader_bench::lane::Lane;
use gateway_leader_bench::lockserver::LockServer;
use gateway_leader_log::Event;
use leader_lock::Timing;
use testkit::replica::peer::{Peer, PeerArgs};

use report::{report, Outcome};
use rounds::{deal, play, settle, side, Card};

const NS: &str = "interop";
const LOCK: &str = "interop-lock";
const CONTROLLER: &str = "gateway-leader.dev/interop";
const CONFIGMAP: &str = "peer-writes";
const SEED_ENV: &str = "GATEWAY_LEADER_INTEROP_SEED";
const ROUNDS_ENV: &str = "GATEWAY_LEADER_INTEROP_ROUNDS";

fn timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_secs(1),
    }
}

/// How long a takeover may take on a busy machine: the bench's `leader_patience`.
fn patience() -> Duration {
    let t = timing();
    t.lease_duration * 3 + t.retry_period * 2 + Duration::from_secs(10)
}

/// How long a new leader of ours may take for its first status write.
const WRITE_PATIENCE: Duration = Duration::from_secs(30);

/// How long a process may take to stop.
const EXIT_PATIENCE: Duration = Duration::from_secs(15);

/// The servers' side of the run: the watches opened before anything started.
struct Held {
    lease: Recorder,
    statuses: Vec<(String, Recorder)>,
    configmap: Recorder,
}

impl Held {
    async fn start(cluster: &Cluster) -> Result<Held> {
        let c = cluster.client();
        Ok(Held {
            lease: Recorder::start(Api::<Lease>::namespaced(c.clone(), NS), LOCK).await?,
            statuses: vec![
                (
                    format!("HTTPRoute {ROUTE}"),
                    Recorder::start(Api::<HttpRoute>::namespaced(c.clone(), NS), ROUTE).await?,
                ),
                (
                    "Gateway gw".to_string(),
                    Recorder::start(Api::<Gateway>::namespaced(c.clone(), NS), "gw").await?,
                ),
                (
                    format!("GatewayClass {NS}"),
                    Recorder::start(Api::<GatewayClass>::all(c.clone()), NS).await?,
                ),
            ],
            configmap: Recorder::start(Api::<ConfigMap>::namespaced(c, NS), CONFIGMAP).await?,
        })
    }

    /// Writes every version seen into `path` (JSON), for the reader of a failure.
    fn save(&self, path: &Path) -> Result<()> {
        let mut all = BTreeMap::new();
        all.insert(format!("Lease {LOCK}"), self.lease.versions());
        all.insert(format!("ConfigMap {CONFIGMAP}"), self.configmap.versions());
        for (object, rec) in &self.statuses {
            all.insert(object.clone(), rec.versions());
        }
        let text = serde_json::to_vec_pretty(&all)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// Waits until every watch has delivered the object's version the server holds now.
    async fn catch_up(&self, cluster: &Cluster) -> Result<()> {
        let c = cluster.client();
        let lease = Api::<Lease>::namespaced(c.clone(), NS)
            .get_opt(LOCK)
            .await?;
        let route = Api::<HttpRoute>::namespaced(c.clone(), NS)
            .get_opt(ROUTE)
            .await?;
        let gw = Api::<Gateway>::namespaced(c.clone(), NS)
            .get_opt("gw")
            .await?;
        let class = Api::<GatewayClass>::all(c.clone()).get_opt(NS).await?;
        let cm = Api::<ConfigMap>::namespaced(c, NS)
            .get_opt(CONFIGMAP)
            .await?;
        let rvs = [
            (&self.lease, lease.as_ref().and_then(rv)),
            (&self.statuses[0].1, route.as_ref().and_then(rv)),
            (&self.statuses[1].1, gw.as_ref().and_then(rv)),
            (&self.statuses[2].1, class.as_ref().and_then(rv)),
            (&self.configmap, cm.as_ref().and_then(rv)),
        ];
        for (rec, rv) in rvs {
            if let Some(rv) = rv {
                rec.caught_up(rv, patience()).await?;
            }
        }
        Ok(())
    }
}

fn rv<K: Resource>(o: &K) -> Option<u64> {
    o.meta().resource_version.as_deref()?.parse().ok()
}

async fn run(
    lane: &mut Lane,
    cluster: &Cluster,
    held: &Held,
    (seed, rounds): (u64, usize),
    logs: &Path,
) -> Result<Outcome> {
    let leases = Api::<Lease>::namespaced(cluster.client(), NS);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut deck = Vec::new();
    let mut deletions = Vec::new();
    let mut played = Vec::new();
    for round in 0..rounds {
        let old = settle(lane)
            .await
            .with_context(|| format!("settling before round {}", round + 1))?;
        let card = deal(&mut deck, &mut rng, side(lane, old.index));
        let p = play(lane, (&leases, &mut deletions), card, old)
            .await
            .with_context(|| format!("round {} ({card}) from replica {}", round + 1, old.index))?;
        eprintln!(
            "round {:>2}: {:<24} {} {} (term {}) -> {} {} (term {}) in {:.0} ms{}",
            round + 1,
            card.to_string(),
            side(lane, p.old.0),
            p.old.0,
            p.old.1,
            side(lane, p.new.0),
            p.new.0,
            p.new.1,
            p.to_leader_ms,
            match (p.to_write_ms, side(lane, p.new.0)) {
                (Some(w), _) => format!(", first status write at {w:.0} ms"),
                (None, rounds::Side::Ours) => ", nothing left to write".to_string(),
                (None, rounds::Side::Peers) => String::new(),
            }
        );
        played.push(p);
    }
    lane.stop(timing().renew_deadline + EXIT_PATIENCE).await;
    held.catch_up(cluster).await?;
    held.save(&logs.join("held.json"))?;
    let mixed = Mixed {
        peers: lane.peers().clone(),
        deletions,
    };
    let verdict = checker::check_mixed(&lane.events, &lane.killed, &mixed);
    let leases = held::lease_states(&held.lease.versions());
    let mut ours = Vec::new();
    for (object, rec) in &held.statuses {
        ours.extend(held::status_writes(object, &rec.versions())?);
    }
    let peers = held::data_writes(
        &format!("ConfigMap {CONFIGMAP}"),
        &held.configmap.versions(),
    );
    let (ours_stale, peers_stale) = (held::stale(&leases, &ours), held::stale(&leases, &peers));
    // Only our field managers write statuses; only peers the ConfigMap.
    if let Some(w) = ours.iter().find(|w| !matches!(w.writer, Writer::Ours(_))) {
        bail!("a status version not made by one of ours: {w:?}");
    }
    // Only the frozen leadership's own writes: the same replica may lead again later.
    let after_thaw = played
        .iter()
        .filter_map(|p| p.thawed.map(|t| (t, p.old.1)))
        .map(|((index, at), term)| {
            let ms: Vec<f64> = lane
                .events
                .iter()
                .filter(|e| e.replica == index && e.mono_ms >= at)
                .filter(|e| matches!(e.what, Event::Written { term: t, .. } if t == term))
                .map(|e| e.mono_ms - at)
                .collect();
            (
                side(lane, index),
                ms.len(),
                ms.last().copied().unwrap_or(0.0),
            )
        })
        .collect();
    Ok(Outcome {
        after_thaw,
        played,
        verdict,
        ours_writes: ours.len(),
        peer_writes: peers.len(),
        ours_stale,
        peers_stale,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_and_the_go_peers_share_one_lease_without_split_brain() {
    let seed = std::env::var(SEED_ENV)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(rand::random);
    let rounds = std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(50);
    eprintln!("interop seed: {seed} (replay with {SEED_ENV}={seed})");
    let peers = testkit::built::peers().expect("the Go peers are built");
    let exe = testkit::workspace_binary("gateway-leader", "gateway-leader")
        .expect("gateway-leader builds");
    let kubeconfig = std::env::var_os(testkit::kube::TEST_KUBECONFIG_ENV);
    let cluster = Cluster::start(kubeconfig.as_deref().map(Path::new))
        .await
        .expect("the apiserver starts");
    let route = cluster
        .lane(NS, CONTROLLER)
        .await
        .expect("the lane's objects");
    let held = Held::start(&cluster).await.expect("the watches open");
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut ours = LockServer::Kubernetes.replica_args(NS, &[]);
    ours.extend(
        [
            "--kubeconfig",
            &cluster.kubeconfig().display().to_string(),
            "--leader-election-lock-name",
            LOCK,
            "--controller-name",
            CONTROLLER,
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "3s",
            "--retry-period",
            "1s",
            "--wakeup",
            "watch",
        ]
        .map(String::from),
    );
    let mut lane = Lane::new(
        "interop",
        exe,
        vec![ours.clone(), ours],
        dir.path().join("logs"),
        route,
        (NS, LOCK),
        (vec![Vec::new(), Vec::new()], None),
    )
    .expect("our replicas start");
    let args = PeerArgs {
        dir: peers,
        kubeconfig: cluster.kubeconfig().to_path_buf(),
        namespace: NS.to_string(),
        lease: LOCK.to_string(),
        configmap: CONFIGMAP.to_string(),
        timing: timing(),
        write_every: Duration::from_millis(200),
        lock_kubeconfig: None,
    };
    for p in Peer::ALL {
        lane.add_peer(p, args.clone()).expect("the peers start");
    }
    let started = std::time::Instant::now();
    let logs = dir.path().join("logs");
    let outcome = run(&mut lane, &cluster, &held, (seed, rounds), &logs).await;
    let replay = format!("replay with {SEED_ENV}={seed}");
    let o = match outcome {
        Ok(o) => o,
        Err(e) => {
            lane.stop(EXIT_PATIENCE).await;
            let kept = dir.keep();
            panic!("{e:#}; logs kept in {}; {replay}", kept.display());
        }
    };
    let text = report(&o);
    eprintln!(
        "{text}interop: {rounds} rounds in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let keep = || format!("logs kept in {}; {replay}", dir.path().display());
    if !o.verdict.violations.is_empty() || !o.ours_stale.is_empty() {
        let kept = tempfile::TempDir::keep(dir);
        panic!(
            "ours broke a rule:\n{}\n{}\nlogs kept in {}; {replay}",
            o.verdict.violations.join("\n"),
            o.ours_stale
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
            kept.display()
        );
    }
    assert!(
        o.ours_writes > 0 && o.peer_writes > 0,
        "both sides wrote; {}",
        keep()
    );
    if rounds >= Card::DECK.len() {
        for card in Card::DECK {
            assert!(
                o.played.iter().any(|p| p.card == card),
                "{card} was played; {}",
                keep()
            );
        }
    }
}
