//! A lane: the replicas of one lock (one backend, one wake-up mode), their logs as events, and
//! the route they write the status of. A lane may also run Go peers
//! ([`testkit::replica::peer`]) on its Lease beside ours, as the interop test does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use gateway_leader_log::{Event, EVERY_LINE_FILTER};
use nix::sys::signal::Signal;
use tempfile::TempDir;
use testkit::proxy::BlackholeProxy;
use testkit::replica::peer::{self, Peer, PeerArgs};
use testkit::replica::{Dialect, Journal, Record, Replica, Transcript};

use crate::cluster::Route;

/// The replicas of one lock and everything they logged.
pub struct Lane {
    /// A name for files and the report, e.g. `etcd-watch`.
    pub label: String,
    exe: PathBuf,
    /// What each slot runs.
    launch: Vec<Launch>,
    logs: PathBuf,
    /// Each slot's partition proxies to the lock's server (empty when not needed).
    pub proxies: Vec<Vec<BlackholeProxy>>,
    /// Files the slots' flags point at (kubeconfigs via a proxy), kept while the lane lives.
    _files: Option<TempDir>,
    /// The running replicas by slot.
    pub slots: Vec<Option<Replica>>,
    /// What every replica of the lane logged.
    journal: Journal,
    /// How many of the journal's lines are in `events`.
    read: usize,
    /// Every event so far, in arrival order.
    pub events: Vec<Record>,
    /// Replicas killed with SIGKILL, and when (`CLOCK_MONOTONIC` ms).
    pub killed: BTreeMap<usize, f64>,
    /// The route whose status the replicas write.
    pub route: Route,
    /// The lock's name.
    pub lock: String,
    /// The lane's namespace (the Lease's too).
    pub ns: String,
    /// The replica indices that are peers.
    peers: BTreeSet<usize>,
}

/// What a slot runs.
enum Launch {
    /// One of ours with these `run` flags (its own proxy, when it has one).
    Ours(Vec<String>),
    /// A Go peer.
    Peer(Peer, PeerArgs),
}

/// The current leader of a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leader {
    /// Its slot.
    pub slot: usize,
    /// Its replica index.
    pub index: usize,
    /// Its term.
    pub term: u64,
}

impl Lane {
    /// A lane of one process of `exe run <args>` per slot, logging into `logs`; `proxies` and
    /// `files` are what the slots' flags point at.
    pub fn new(
        label: &str,
        exe: PathBuf,
        args: Vec<Vec<String>>,
        logs: PathBuf,
        route: Route,
        (ns, lock): (&str, &str),
        (proxies, files): (Vec<Vec<BlackholeProxy>>, Option<TempDir>),
    ) -> Result<Lane> {
        let replicas = args.len();
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let mut lane = Lane {
            label: label.to_string(),
            exe,
            launch: args.into_iter().map(Launch::Ours).collect(),
            logs,
            proxies,
            _files: files,
            slots: (0..replicas).map(|_| None).collect(),
            journal: Journal::events_only(),
            read: 0,
            events: Vec::new(),
            killed: BTreeMap::new(),
            route,
            lock: lock.to_string(),
            ns: ns.to_string(),
            peers: BTreeSet::new(),
        };
        for slot in 0..replicas {
            lane.spawn(slot)?;
        }
        Ok(lane)
    }

    /// Starts a new replica in `slot` (the one there must be gone).
    pub fn spawn(&mut self, slot: usize) -> Result<usize> {
        // The journal numbers its processes in the order they start, as the lane names them.
        let index = self.journal.read(|s| s.processes());
        let r = match &self.launch[slot] {
            Launch::Ours(args) => {
                let name = format!("{}-{index}", self.label);
                let log = self.logs.join(format!("{name}.log"));
                // Info, and the renewals with their validity deadlines that the split-brain
                // checker needs.
                let mut cmd = Replica::run_command(&self.exe, &name, args);
                cmd.args(["--log-level", EVERY_LINE_FILTER])
                    .env("RUST_LOG", EVERY_LINE_FILTER);
                let transcript = Transcript::File(log);
                Replica::spawn(
                    cmd,
                    &name,
                    Dialect::GatewayLeader,
                    &self.journal,
                    transcript,
                )?
            }
            Launch::Peer(p, args) => {
                let name = format!("{}-{p}-{index}", self.label);
                let log = self.logs.join(format!("{name}.log"));
                self.peers.insert(index);
                peer::start(*p, args, &name, &self.journal, log)?
            }
        };
        self.slots[slot] = Some(r);
        Ok(index)
    }

    /// Adds a slot running Go peer `p` on the lane's Lease, and starts it; returns the slot.
    pub fn add_peer(&mut self, p: Peer, args: PeerArgs) -> Result<usize> {
        self.launch.push(Launch::Peer(p, args));
        self.slots.push(None);
        self.proxies.push(Vec::new());
        let slot = self.slots.len() - 1;
        self.spawn(slot)?;
        Ok(slot)
    }

    /// Adds a slot running one of ours with these `run` flags, and starts it; returns the slot.
    pub fn add_ours(&mut self, args: Vec<String>) -> Result<usize> {
        self.launch.push(Launch::Ours(args));
        self.slots.push(None);
        self.proxies.push(Vec::new());
        let slot = self.slots.len() - 1;
        self.spawn(slot)?;
        Ok(slot)
    }

    /// The peer a slot runs; `None` for one of ours.
    pub fn peer(&self, slot: usize) -> Option<Peer> {
        match self.launch.get(slot)? {
            Launch::Peer(p, _) => Some(*p),
            Launch::Ours(_) => None,
        }
    }

    /// Every replica index that was a peer.
    pub fn peers(&self) -> &BTreeSet<usize> {
        &self.peers
    }

    /// Takes the journal's new events into `events`.
    fn drain(&mut self) {
        let read = self.read;
        let (new, upto) = self.journal.read(|s| {
            let new: Vec<Record> = s.since(read).iter().filter_map(|l| l.record()).collect();
            (new, s.lines().len())
        });
        self.events.extend(new);
        self.read = upto;
    }

    /// Waits up to `limit` for an event that satisfies `hit` (one already seen counts).
    pub async fn wait(&mut self, limit: Duration, hit: impl Fn(&Record) -> bool) -> Option<Record> {
        self.drain();
        if let Some(e) = self.events.iter().find(|e| hit(e)) {
            return Some(e.clone());
        }
        // Each line is looked at once, however many wake the wait: a scale round logs
        // thousands.
        let mut next = self.read;
        let found = self
            .journal
            .wait(limit, |s| {
                let new = s.since(next);
                next += new.len();
                new.iter().filter_map(|l| l.record()).find(|e| hit(e))
            })
            .await;
        self.drain();
        found
    }

    fn index_of(&self, slot: usize) -> Option<usize> {
        self.slots[slot].as_ref().map(|r| r.index)
    }

    /// The last leadership line (`leading`, `following`, `stopped`) of replica `index`.
    fn last_state(&self, index: usize) -> Option<&Event> {
        self.events
            .iter()
            .rev()
            .filter(|e| e.replica == index)
            .map(|e| &e.what)
            .find(|w| {
                matches!(
                    w,
                    Event::Leading { .. } | Event::Following { .. } | Event::Stopped
                )
            })
    }

    /// The etcd endpoint replica `index` last said its lock talks to (`using etcd endpoint`).
    pub fn endpoint(&mut self, index: usize) -> Option<String> {
        self.drain();
        self.events
            .iter()
            .rev()
            .filter(|e| e.replica == index)
            .find_map(|e| match &e.what {
                Event::Endpoint { url } => Some(url.clone()),
                _ => None,
            })
    }

    /// The replica that leads now, by the logs: the highest term among running replicas whose
    /// last leadership line is `leading`.
    pub fn leader(&mut self) -> Option<Leader> {
        self.drain();
        (0..self.slots.len())
            .filter_map(|slot| {
                let index = self.index_of(slot)?;
                match self.last_state(index)? {
                    Event::Leading { term, .. } => Some(Leader {
                        slot,
                        index,
                        term: *term,
                    }),
                    _ => None,
                }
            })
            .max_by_key(|l| l.term)
    }

    /// Waits until one replica leads and every other running one follows, then a moment more
    /// for the followers' watches to be up.
    pub async fn settle(&mut self, limit: Duration) -> Result<Leader> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.drain();
            let leader = self.leader();
            let following = (0..self.slots.len())
                .filter(|s| Some(*s) != leader.map(|l| l.slot))
                .all(|s| {
                    self.index_of(s).is_some_and(|i| {
                        // Following this very leadership: a follower that has not yet seen
                        // the current term would not notice the next round's change (a
                        // polling one never sees a Lease that lives between two polls).
                        matches!(self.last_state(i), Some(Event::Following { term, .. })
                                if leader.is_some_and(|l| *term == Some(l.term)))
                    })
                });
            if let (Some(l), true) = (leader, following) {
                tokio::time::sleep(Duration::from_millis(300)).await;
                return Ok(l);
            }
            for r in self.slots.iter_mut().flatten() {
                if !r.running() {
                    return Err(anyhow!(
                        "replica {} exited; its log: {}",
                        r.name,
                        r.log.as_deref().unwrap_or(self.logs.as_path()).display()
                    ));
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(anyhow!(
                    "{}: no single leader with every other replica following within {limit:?} \
                     (logs in {})",
                    self.label,
                    self.logs.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `sig` to the replica in `slot`; returns when (`CLOCK_MONOTONIC` ms).
    pub fn signal(&mut self, slot: usize, sig: Signal) -> Result<f64> {
        let r = self.slots[slot]
            .as_mut()
            .ok_or_else(|| anyhow!("slot {slot} is empty"))?;
        let at = r.signal(sig)?.mono_ms;
        if sig == Signal::SIGKILL {
            self.killed.insert(r.index, at);
        }
        Ok(at)
    }

    /// Cuts (or heals) the partition proxies of `slot`; returns when (`CLOCK_MONOTONIC` ms).
    pub fn partition(&self, slot: usize, cut: bool) -> Result<f64> {
        let proxies = self
            .proxies
            .get(slot)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| anyhow!("slot {slot} has no partition proxy"))?;
        let at = leader_lock::clock::mono_ms();
        for p in proxies {
            if cut {
                p.cut();
            } else {
                p.heal();
            }
        }
        Ok(at)
    }

    /// Stops every replica gracefully (SIGTERM), as a rollout would, and collects their last
    /// lines.
    pub async fn stop(&mut self, limit: Duration) {
        for r in self.slots.iter_mut().flatten() {
            let _ = r.signal(Signal::SIGTERM);
        }
        for r in self.slots.iter_mut().flatten() {
            let _ = r.wait_exit(limit).await;
        }
        // The reader threads finish with the pipes; give them a moment to pass the last lines.
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.drain();
    }
}
