//! The three replicas (`testkit::replica`) and the waits on what they log.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::{anyhow, bail, Result};
use gateway_leader_log::Event;
use nix::sys::signal::Signal;
use testkit::replica::{Dialect, Journal, Line, Replica, Snapshot, Transcript};

use crate::out::list;
use crate::{PATIENCE, REPLICAS};

/// A replica that leads, from its [`message::LEADING`](gateway_leader_log::message::LEADING) line.
#[derive(Debug, Clone)]
pub struct Leading {
    pub replica: String,
    pub term: u64,
    /// The replica's own timestamp of the line.
    pub at: SystemTime,
}

/// The fencing term a line names, if it is a declared event that names one.
pub fn term_of(line: &Line) -> Option<u64> {
    line.event.as_ref().and_then(Event::term)
}

/// The object a write line is about: a first write's `object`, a write's kind and
/// `namespace/name`.
pub fn written_object(line: &Line) -> String {
    match &line.event {
        Some(Event::FirstWrite { object, .. }) => object.clone(),
        Some(Event::Written {
            object_kind,
            namespace,
            name,
            ..
        }) => match namespace.as_str() {
            "" => format!("{object_kind} {name}"),
            ns => format!("{object_kind} {ns}/{name}"),
        },
        _ => String::new(),
    }
}

/// The index of replica `name` in the fleet's journal (they join it in [`REPLICAS`]' order).
pub fn index(name: &str) -> Option<usize> {
    REPLICAS.iter().position(|n| *n == name)
}

/// The lines of replica `name` after `mark` ([`Journal::mark`]; 0 for all of them).
pub fn since<'a>(
    s: &Snapshot<'a>,
    name: &str,
    mark: usize,
) -> impl DoubleEndedIterator<Item = &'a Line> {
    let index = index(name);
    s.since(mark)
        .iter()
        .filter(move |l| Some(l.process) == index)
}

/// The newest leadership among `among` logged after `mark`, if any.
pub fn leader_in(s: &Snapshot<'_>, among: &[&str], mark: usize) -> Option<Leading> {
    s.since(mark)
        .iter()
        .filter_map(|l| match l.event {
            Some(Event::Leading { term, .. }) => Some(Leading {
                replica: s.name(l.process).to_string(),
                term,
                at: l.at,
            }),
            _ => None,
        })
        .filter(|l| among.contains(&l.replica.as_str()))
        .max_by_key(|l| l.at)
}

/// The three `gateway-leader run` replicas (`testkit::replica`), their lines in one journal;
/// each is killed when this is dropped.
pub struct Fleet {
    /// In [`REPLICAS`]' order.
    pub replicas: Vec<Mutex<Replica>>,
    pub journal: Journal,
    pub dir: PathBuf,
}

impl Fleet {
    /// Starts each of [`REPLICAS`] with `run <args>`, its log in `dir`.
    pub fn start(bin: &Path, args: &[String], dir: &Path) -> Result<Fleet> {
        let journal = Journal::new();
        let mut replicas = Vec::new();
        for name in REPLICAS {
            // JSON logs, the identity, a free health port each (three replicas on one machine)
            // and none of the caller's settings: the flags say everything.
            let mut cmd = Replica::run_command(bin, name, args);
            // The demo reads the info lines; a RUST_LOG of the caller's shell must not hide them.
            cmd.env("RUST_LOG", "info");
            let log = Transcript::File(dir.join(format!("{name}.log")));
            let replica = Replica::spawn(cmd, name, Dialect::GatewayLeader, &journal, log)?;
            replicas.push(Mutex::new(replica));
        }
        Ok(Fleet {
            replicas,
            journal,
            dir: dir.to_path_buf(),
        })
    }

    /// How many lines the replicas have logged: waits given it look only at what came after.
    pub fn mark(&self) -> usize {
        self.journal.mark()
    }

    /// Sends `sig` to a replica; returns the wall-clock instant just before, which the
    /// replicas' log timestamps are compared with.
    pub fn signal(&self, name: &str, sig: Signal) -> Result<SystemTime> {
        let replica = index(name)
            .and_then(|i| self.replicas.get(i))
            .ok_or_else(|| anyhow!("{name} is not running"))?;
        // A panic while holding the lock leaves the process as it was.
        let mut replica = replica.lock().unwrap_or_else(|p| p.into_inner());
        Ok(replica.signal(sig)?.at)
    }

    /// The last lines of a replica's log file, for an error message.
    pub fn tail(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        testkit::tail(&text, 12)
    }

    /// Fails when every replica of `among` has exited, with their last lines.
    pub fn ensure_alive(&self, s: &Snapshot<'_>, among: &[&str]) -> Result<()> {
        if among.iter().all(|n| index(n).is_some_and(|i| s.ended(i))) {
            let tails: Vec<String> = among
                .iter()
                .map(|n| format!("--- {n}:\n{}", self.tail(n)))
                .collect();
            bail!(
                "{} exited (logs in {}):\n{}",
                list(&among.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
                self.dir.display(),
                tails.join("\n")
            );
        }
        Ok(())
    }

    /// Waits up to [`PATIENCE`] for `probe` to find something in the logs, woken by every new
    /// line; fails naming `what` and the logs, or as soon as `probe` fails.
    pub async fn wait<T>(
        &self,
        what: &str,
        mut probe: impl FnMut(&Snapshot<'_>) -> Result<Option<T>>,
    ) -> Result<T> {
        match self.journal.wait(PATIENCE, |s| probe(&s).transpose()).await {
            Some(found) => found,
            None => bail!(
                "waited {PATIENCE:?} for {what} in vain (replica logs: {})",
                self.dir.display()
            ),
        }
    }

    /// Waits for a leader among `among` that logged its leadership after `mark`.
    pub async fn wait_leader(&self, among: &[&str], mark: usize) -> Result<Leading> {
        let what = format!("a leader among {}", among.join(", "));
        self.wait(&what, |s| {
            if let Some(l) = leader_in(s, among, mark) {
                return Ok(Some(l));
            }
            self.ensure_alive(s, among)?;
            Ok(None)
        })
        .await
    }

    /// Waits for a line of `name` after `mark` that `hit` accepts; `what` names it.
    pub async fn wait_line(
        &self,
        name: &str,
        mark: usize,
        what: &str,
        hit: impl Fn(&Line) -> bool,
    ) -> Result<Line> {
        self.wait(&format!("{what} from {name}"), |s| {
            if let Some(l) = since(s, name, mark).rev().find(|l| hit(l)) {
                return Ok(Some(l.clone()));
            }
            self.ensure_alive(s, &[name])?;
            Ok(None)
        })
        .await
    }
}
