//! Bring your own backend: [`LeaderLock`] implemented on a toy key-value store, then checked by
//! the conformance suite that every backend of this workspace passes.
//!
//! The store, [`KvStore`], stands for the server you would talk to: versioned values,
//! compare-and-set writes, counters and a watch per key, and no expiry of its own (as a database
//! row or a Kubernetes object). The lock, [`KvLock`], maps the election onto it:
//!
//! - **Acquire**: bump the counter `<name>/term` (the fencing term; it survives the record), then
//!   write our record only if the key still has the version we read.
//! - **Renew**: rewrite our record under the same compare-and-set, with a new renew time.
//! - **Expiry**: decided on the follower's own monotonic clock, as the Kubernetes Lease lock does:
//!   a record seen unchanged for its lease duration may be taken ([`ObservedRecord`]). A record
//!   that cannot be read is respected for the candidate's own lease duration.
//! - **Release**: replace our record by a `released` one, so that a follower tells a release
//!   (free at once) from a record deleted by hand (its holder may still believe it leads, so
//!   nobody takes it for that holder's lease duration).
//! - **Follow**: the watch notes every change when it happens and wakes the elector.
//!
//! A backend of your own runs the same suite from a test with
//! `leader_lock::conformance_suite!(make_harness);` (one `#[tokio::test]` per case); this program
//! takes the same cases from `conformance::cases`, runs them all at once, each on a lock of its
//! own, and prints one line per case.
//!
//! ```sh
//! cargo run -p leader-lock --example custom_backend
//! ```
//!
//! It takes about 20 seconds and exits non-zero when a case fails. `tests/custom_backend.rs`
//! runs it as a test.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use anyhow::bail;
use async_trait::async_trait;
use futures::StreamExt;
use leader_lock::backend::{
    Attempt, Candidate, LeaderLock, LockError, LockEvent, LockEventStream, LockRecord,
    ObservedRecord,
};
use leader_lock::conformance::{self, Harness, HarnessError, Protect, Tamper};
use leader_lock::timing::MAX_LEASE_DURATION;
use leader_lock::{Term, Timing};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::BroadcastStream;

/// A change of one key: its new value and version, or `None` when it was deleted.
type Change = Option<(String, u64)>;

/// A toy key-value server: versioned values, compare-and-set, counters and a watch per key.
#[derive(Clone, Default)]
pub struct KvStore(Arc<Mutex<Kv>>);

#[derive(Default)]
struct Kv {
    /// Each key's value and the revision that wrote it.
    values: HashMap<String, (String, u64)>,
    counters: HashMap<String, u64>,
    /// The store's revision, bumped by every write.
    revision: u64,
    watchers: HashMap<String, broadcast::Sender<Change>>,
}

/// What the lock stores, as JSON.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
enum Stored {
    Held {
        holder: String,
        term: u64,
        lease_ms: u64,
        acquired_ms: u64,
        renewed_ms: u64,
    },
    Released {
        term: u64,
    },
}

/// A stored value as the lock reads it.
enum Value {
    Held(LockRecord),
    Released(LockRecord),
    /// Foreign or damaged: nobody may take it before it has been seen unchanged for the
    /// candidate's own lease duration.
    Unreadable(String),
}

/// A [`LeaderLock`] on one key of a [`KvStore`].
pub struct KvLock {
    store: KvStore,
    key: String,
    term_key: String,
    /// What this client saw and when, shared with its watch.
    seen: Arc<Mutex<ObservedRecord>>,
}

/// The conformance suite's view of the toy store.
pub struct Toy {
    store: KvStore,
}

// === impl KvStore ===

impl KvStore {
    fn kv(&self) -> MutexGuard<'_, Kv> {
        // A panic elsewhere must not poison the store for everyone else.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key` and its version.
    pub fn get(&self, key: &str) -> Option<(String, u64)> {
        self.kv().values.get(key).cloned()
    }

    /// Writes `value` only if `key` still has version `expected` (`None`: only if absent);
    /// returns the new version, or `None` when the key changed meanwhile.
    pub fn put_if(&self, key: &str, expected: Option<u64>, value: String) -> Option<u64> {
        let mut kv = self.kv();
        if kv.values.get(key).map(|(_, v)| *v) != expected {
            return None;
        }
        Some(kv.write(key, Some(value)))
    }

    /// Writes `value` whatever is there, as another writer might.
    pub fn put(&self, key: &str, value: String) {
        self.kv().write(key, Some(value));
    }

    /// Deletes `key` whatever is there, as an operator might.
    pub fn delete(&self, key: &str) {
        self.kv().write(key, None);
    }

    /// Adds one to the counter `key` and returns its new value.
    pub fn increment(&self, key: &str) -> u64 {
        let mut kv = self.kv();
        let n = kv.counters.entry(key.to_string()).or_default();
        *n += 1;
        *n
    }

    /// Every change of `key` from now on.
    pub fn watch(&self, key: &str) -> broadcast::Receiver<Change> {
        let mut kv = self.kv();
        let tx = kv.watchers.entry(key.to_string());
        tx.or_insert_with(|| broadcast::channel(64).0).subscribe()
    }
}

impl Kv {
    fn write(&mut self, key: &str, value: Option<String>) -> u64 {
        self.revision += 1;
        let change = value.map(|v| (v, self.revision));
        match &change {
            Some(new) => self.values.insert(key.to_string(), new.clone()),
            None => self.values.remove(key),
        };
        if let Some(tx) = self.watchers.get(key) {
            let _ = tx.send(change);
        }
        self.revision
    }
}

// === impl KvLock ===

fn millis(t: SystemTime) -> u64 {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

impl Value {
    fn decode(raw: &str, version: u64) -> Value {
        let time = |ms: u64| SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms));
        let record = |holder: String, term: u64, lease_ms: u64, times: (u64, u64)| LockRecord {
            holder,
            term: Term(term),
            lease_duration: Duration::from_millis(lease_ms),
            acquire_time: time(times.0),
            renew_time: time(times.1),
            version: version.to_string(),
        };
        let plausible = |ms: u64| ms > 0 && Duration::from_millis(ms) <= MAX_LEASE_DURATION;
        match serde_json::from_str::<Stored>(raw) {
            Ok(Stored::Held {
                holder,
                term,
                lease_ms,
                acquired_ms,
                renewed_ms,
            }) if !holder.is_empty() && term > 0 && plausible(lease_ms) => {
                Value::Held(record(holder, term, lease_ms, (acquired_ms, renewed_ms)))
            }
            Ok(Stored::Released { term }) => {
                Value::Released(record(String::new(), term, 0, (0, 0)))
            }
            Ok(held) => Value::Unreadable(format!("no holder, term or lease duration: {held:?}")),
            Err(e) => Value::Unreadable(e.to_string()),
        }
    }

    /// The record to track expiry by: an unreadable value counts as a foreign holder's record
    /// with our own lease duration, one per version.
    fn observed(&self, version: u64, fallback: Duration) -> LockRecord {
        match self {
            Value::Held(rec) | Value::Released(rec) => rec.clone(),
            Value::Unreadable(_) => LockRecord {
                holder: format!("<unreadable value, version {version}>"),
                term: Term(0),
                lease_duration: fallback,
                acquire_time: None,
                renew_time: None,
                version: version.to_string(),
            },
        }
    }
}

impl KvLock {
    /// The lock `name` in `store`.
    pub fn new(store: KvStore, name: &str) -> Self {
        KvLock {
            store,
            key: name.to_string(),
            term_key: format!("{name}/term"),
            seen: Arc::default(),
        }
    }

    fn seen(&self) -> MutexGuard<'_, ObservedRecord> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes a new leadership of `c` over the version `over` (`None`: over nothing).
    fn take(&self, c: &Candidate, over: Option<u64>) -> Result<Attempt, LockError> {
        let term = Term(self.store.increment(&self.term_key));
        self.write(c, term, None, over)
    }

    /// Compare-and-set of our record over the version `over`; a lost race is a follower's
    /// answer (the watch tells who won).
    fn write(
        &self,
        c: &Candidate,
        term: Term,
        acquired: Option<SystemTime>,
        over: Option<u64>,
    ) -> Result<Attempt, LockError> {
        let now = millis(SystemTime::now());
        let stored = Stored::Held {
            holder: c.holder(),
            term: term.0,
            lease_ms: u64::try_from(c.lease_duration.as_millis()).unwrap_or(u64::MAX),
            acquired_ms: acquired.map_or(now, millis),
            renewed_ms: now,
        };
        let raw = serde_json::to_string(&stored)
            .map_err(|e| LockError::malformed_from("encoding the record", e))?;
        let Some(version) = self.store.put_if(&self.key, over, raw.clone()) else {
            return Ok(Attempt::Follower {
                holder: None,
                term: None,
                retry_after: None,
            });
        };
        let ours = Value::decode(&raw, version).observed(version, c.lease_duration);
        self.seen().observe(&ours, Instant::now());
        Ok(Attempt::leader(term))
    }

    /// The answer while a record that vanished under a live holder is held off.
    fn held_off(&self, me: &str) -> Option<Attempt> {
        let now = Instant::now();
        let seen = self.seen();
        let (rec, until) = seen.hold_off(now)?;
        Some(Attempt::Follower {
            holder: (rec.holder != me).then(|| rec.holder.clone()),
            term: Some(rec.term),
            retry_after: Some(until - now),
        })
    }
}

#[async_trait]
impl LeaderLock for KvLock {
    fn describe(&self) -> String {
        format!("toy kv lock {}", self.key)
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let me = c.holder();
        let fallback = c.lease_duration;
        let Some((raw, version)) = self.store.get(&self.key) else {
            // Gone without a release: a live holder's record is not free for its lease duration.
            self.seen().gone(None, Instant::now(), fallback);
            if let Some(wait) = self.held_off(&me) {
                return Ok(wait);
            }
            return self.take(c, None);
        };
        let value = Value::decode(&raw, version);
        let now = Instant::now();
        self.seen().observe(&value.observed(version, fallback), now);
        match value {
            Value::Held(rec) if rec.holder == me => {
                self.write(c, rec.term, rec.acquire_time, Some(version))
            }
            Value::Released(_) => match self.held_off(&me) {
                Some(wait) => Ok(wait),
                None => self.take(c, Some(version)),
            },
            Value::Held(_) | Value::Unreadable(_) => {
                // Our own monotonic clock decides: unchanged for its lease since first seen.
                let expires = self.seen().expires_at(fallback);
                let (holder, term) = match value {
                    Value::Held(rec) => (Some(rec.holder), Some(rec.term)),
                    _ => (None, None),
                };
                match expires {
                    Some(at) if at <= now => self.take(c, Some(version)),
                    at => Ok(Attempt::Follower {
                        holder,
                        term,
                        retry_after: at.map(|at| at - now),
                    }),
                }
            }
        }
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        let Some((raw, version)) = self.store.get(&self.key) else {
            return Ok(false);
        };
        match Value::decode(&raw, version) {
            Value::Held(rec) if rec.holder == c.holder() && rec.term == term => {
                let released = serde_json::to_string(&Stored::Released { term: term.0 })
                    .map_err(|e| LockError::malformed_from("encoding the release", e))?;
                Ok(self
                    .store
                    .put_if(&self.key, Some(version), released)
                    .is_some())
            }
            _ => Ok(false),
        }
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let Some((raw, version)) = self.store.get(&self.key) else {
            return Ok(None);
        };
        match Value::decode(&raw, version) {
            Value::Held(rec) => Ok(Some(rec)),
            Value::Released(_) => Ok(None),
            Value::Unreadable(why) => Err(LockError::malformed(format!("{}: {why}", self.key))),
        }
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let seen = self.seen.clone();
        let changes = BroadcastStream::new(self.store.watch(&self.key));
        Ok(changes
            .map(move |change| {
                let event = match change {
                    Ok(Some((raw, version))) => match Value::decode(&raw, version) {
                        // Noted now, so the lease counts from the change, not the next read.
                        Value::Held(rec) => {
                            seen.lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .observe(&rec, Instant::now());
                            LockEvent::Changed(Some(rec))
                        }
                        Value::Released(_) => LockEvent::Changed(None),
                        // Let the elector read it and decide.
                        Value::Unreadable(_) => LockEvent::Resynced,
                    },
                    Ok(None) => LockEvent::Changed(None),
                    // Changes were missed: look again.
                    Err(_) => LockEvent::Resynced,
                };
                Ok(event)
            })
            .boxed())
    }
}

// === impl Toy ===

#[async_trait]
impl Harness for Toy {
    fn timing(&self) -> Timing {
        Timing::new(
            Duration::from_millis(1500),
            Duration::from_millis(1000),
            Duration::from_millis(200),
        )
        .expect("a valid timing")
    }

    async fn lock(&self, name: &str) -> Result<Arc<dyn LeaderLock>, HarnessError> {
        Ok(Arc::new(KvLock::new(self.store.clone(), name)))
    }

    async fn tamper(&self, name: &str, case: Tamper) -> Result<Protect, HarnessError> {
        let raw = match case {
            Tamper::WrongTypes => {
                concat!(
                    r#"{"state":"held","holder":7,"term":"x","lease_ms":"long","#,
                    r#""acquired_ms":[],"renewed_ms":{}}"#
                )
            }
            Tamper::MissingFields => r#"{"state":"held","holder":"intruder_1"}"#,
            Tamper::NegativeDuration => {
                concat!(
                    r#"{"state":"held","holder":"intruder_1","term":1,"lease_ms":-5,"#,
                    r#""acquired_ms":0,"renewed_ms":0}"#
                )
            }
            Tamper::HugeDuration => {
                concat!(
                    r#"{"state":"held","holder":"intruder_1","term":1,"#,
                    r#""lease_ms":18446744073709551615,"acquired_ms":0,"renewed_ms":0}"#
                )
            }
            Tamper::RenewInFuture => {
                concat!(
                    r#"{"state":"held","holder":"intruder_1","term":1,"lease_ms":1500,"#,
                    r#""acquired_ms":0,"renewed_ms":99999999999999}"#
                )
            }
            Tamper::EmptyHolder => {
                concat!(
                    r#"{"state":"held","holder":"","term":1,"lease_ms":1500,"#,
                    r#""acquired_ms":0,"renewed_ms":0}"#
                )
            }
            Tamper::Garbage => "\u{0}\u{1}not json at all",
        };
        self.store.put(name, raw.to_string());
        // Every planted record holds for a lease duration after a contender first sees it.
        Ok(Protect::For(self.timing().lease_duration))
    }

    async fn vanish(&self, name: &str) -> Result<(), HarnessError> {
        self.store.delete(name);
        Ok(())
    }
}

/// Runs the whole suite on the toy lock: each case's name and how long it took, or why it failed.
/// Every case starts at once, each on a lock of its own in one store.
pub async fn run_suite() -> Vec<(&'static str, Result<Duration, String>)> {
    let toy = Arc::new(Toy {
        store: KvStore::default(),
    });
    let cases: Vec<(&str, JoinHandle<Duration>)> = conformance::cases::<Toy>()
        .into_iter()
        .map(|case| {
            let h = toy.clone();
            let run = case.run;
            let task = tokio::spawn(async move {
                let started = Instant::now();
                run(&h).await;
                started.elapsed()
            });
            (case.name, task)
        })
        .collect();
    let mut results = Vec::new();
    for (name, task) in cases {
        // A case fails by panicking, as a test does.
        let outcome = task.await.map_err(|e| match e.try_into_panic() {
            Ok(panic) => panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".to_string()),
            Err(e) => e.to_string(),
        });
        results.push((name, outcome));
    }
    results
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let results = run_suite().await;
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    for (name, outcome) in &results {
        match outcome {
            Ok(took) => println!("ok    {name} ({took:.1?})"),
            Err(why) => println!("FAIL  {name}: {why}"),
        }
    }
    if failed > 0 {
        bail!("{failed} of {} conformance cases failed", results.len());
    }
    println!("all {} conformance cases passed", results.len());
    Ok(())
}
